"""Tests of `bayes_planet.agent` (and of `bayes_planet.run_dirs`, which guards its runs)."""
