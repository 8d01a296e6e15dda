"""Deprecated: `bayes_planet.collection` moved to `bayes_planet.agent.collection` (this path goes in the next release)."""

from bayes_planet._deprecation import alias

alias(__name__, "bayes_planet.agent.collection")
