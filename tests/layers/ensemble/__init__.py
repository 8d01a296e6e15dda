"""Tests of `bayes_planet.layers.ensemble`."""
