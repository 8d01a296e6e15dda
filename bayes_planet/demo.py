"""Deprecated: `bayes_planet.demo` moved to `bayes_planet.layers.demo` (this path goes in the next release)."""

from bayes_planet._deprecation import alias

alias(__name__, "bayes_planet.layers.demo")
