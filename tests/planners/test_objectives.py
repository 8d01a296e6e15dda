"""The uncertainty-aware score (`bayes_planet.planners.objectives`): mean + β·std over the
models, and how β steers the search."""

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.planners import cross_entropy_method, uncertainty_aware_score


def test_uncertainty_aware_score_closed_form():
    returns = np.random.default_rng(0).normal(size=(5, 3, 7)).astype(np.float32)
    for beta in (-1.0, 0.0, 0.5):
        score = uncertainty_aware_score(returns, beta)
        np.testing.assert_allclose(score, returns.mean(0) + beta * returns.std(0), rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_allclose(uncertainty_aware_score(returns, 2.0, axis=1),
                               returns.mean(1) + 2.0 * returns.std(1), rtol=1e-5, atol=1e-6)
    single = returns[:1]  # K = 1: the score is the return, whatever beta.
    np.testing.assert_allclose(uncertainty_aware_score(single, 3.0), single[0], rtol=1e-6)
    with pytest.raises(ValueError, match="axis=3"):
        uncertainty_aware_score(returns, 1.0, axis=3)
    with pytest.raises(ValueError, match="beta"):
        uncertainty_aware_score(returns, [1.0, 2.0])


@pytest.mark.parametrize("beta, expected", [(0.0, "safe"), (1.0, "uncertain"), (-1.0, "safe")])
def test_beta_steers_cem_toward_or_away_from_uncertain_branch(beta, expected):
    """Toy ensemble of K=8 models: a = -1 returns 1.0 for sure, a = +1 returns 0.9 on average
    with a large spread across models; returns interpolate linearly in between."""
    spread = tf.constant([0.5, -0.5, 0.4, -0.4, 0.6, -0.6, 0.3, -0.3])  # mean 0, std ~0.46
    uncertain = 0.9 + spread  # [K]

    def objective(actions):  # [N, 1, 1] -> [N]
        w = (actions[:, 0, 0] + 1) / 2  # 0 for a = -1 (safe), 1 for a = +1 (uncertain).
        returns = (1 - w)[None] * 1.0 + w[None] * uncertain[:, None]  # [K, N]
        return uncertainty_aware_score(returns, beta)

    plan = cross_entropy_method(objective, 1, 1, -1.0, 1.0, num_candidates=200, top_k=20,
                                iterations=5, seed=0)
    assert float(plan[0, 0]) == pytest.approx(-1.0 if expected == "safe" else 1.0, abs=0.05)
