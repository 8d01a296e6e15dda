"""Deprecated: `bayes_planet.layers.ensemble_attention` moved to `bayes_planet.layers.ensemble.attention`
(this path goes in the next release)."""

from bayes_planet._deprecation import alias

alias(__name__, "bayes_planet.layers.ensemble.attention")
