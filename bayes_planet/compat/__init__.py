"""Drop-in namespaces for users of other Bayesian-layer libraries.

``import bayes_planet.compat.edward2 as ed`` in place of ``import edward2 as ed``: edward2's
names, arguments and defaults over `bayes_planet.layers` (docs/edward2.md).
"""
