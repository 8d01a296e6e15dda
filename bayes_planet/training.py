"""Deprecated: `bayes_planet.training` moved to `bayes_planet.agent.training` (this path goes in the next release)."""

from bayes_planet._deprecation import alias

alias(__name__, "bayes_planet.agent.training")
