"""Tests of `bayes_planet.envs`."""
