"""The test suite. Its folders mirror the package (`layers`, `layers/ensemble`, `uncertainty`,
`agent`, `envs`, `planners`), the scripts (`scripts`: `experiments/` and `benchmarks/`) and the
install (`install`)."""
