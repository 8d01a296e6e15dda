"""Planners over action sequences for model-predictive control (PlaNet's CEM).

* `cross_entropy_method`: CEM over open-loop action sequences (Rubinstein, 1997;
  Hafner et al., 2018), one vectorized ``objective_fn`` call per iteration.
* `random_shooting`: the best of uniformly sampled sequences, a baseline.
* `uncertainty_aware_score`: ``mean + beta * std`` of returns across world-model
  samples (optimistic, neutral or risk-averse planning).
* `get`: the agent's planner by name (``planner.name`` of the agent's config; each
  planner module registers itself, `bayes_planet.planners.registry`): ``cem``.

See ``docs/planning.md``.
"""

from bayes_planet.planners.cem import cross_entropy_method, random_shooting
from bayes_planet.planners.objectives import uncertainty_aware_score
from bayes_planet.planners.registry import get, names

__all__ = ["cross_entropy_method", "get", "names", "random_shooting", "uncertainty_aware_score"]
