"""Deprecated: `bayes_planet.uncertainty_metrics` moved to `bayes_planet.uncertainty.metrics` (this path goes in the next release)."""

from bayes_planet._deprecation import alias

alias(__name__, "bayes_planet.uncertainty.metrics")
