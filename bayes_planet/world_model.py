"""Deprecated: `bayes_planet.world_model` moved to `bayes_planet.agent.world_model` (this path goes in the next release)."""

from bayes_planet._deprecation import alias

alias(__name__, "bayes_planet.agent.world_model")
