"""Deprecated: `bayes_planet.recalibration` moved to `bayes_planet.uncertainty.recalibration` (this path goes in the next release)."""

from bayes_planet._deprecation import alias

alias(__name__, "bayes_planet.uncertainty.recalibration")
