"""Tests of `bayes_planet.layers`, and of the layer-side modules beside it (`layer_registry`,
`export`, `distribute`)."""
