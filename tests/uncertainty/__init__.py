"""Tests of `bayes_planet.uncertainty`."""
