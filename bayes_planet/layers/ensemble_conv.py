"""Deprecated: `bayes_planet.layers.ensemble_conv` moved to `bayes_planet.layers.ensemble.conv`
(this path goes in the next release)."""

from bayes_planet._deprecation import alias

alias(__name__, "bayes_planet.layers.ensemble.conv")
