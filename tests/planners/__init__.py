"""Tests of `bayes_planet.planners`."""
