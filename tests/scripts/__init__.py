"""Tests of the scripts in `experiments/` and `benchmarks/`."""
