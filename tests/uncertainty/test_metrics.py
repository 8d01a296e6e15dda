"""bayes_planet.uncertainty.metrics against hand-computed values, scikit-learn and closed forms."""

import math

import numpy as np
import pytest

from bayes_planet.uncertainty import metrics


def test_auroc_matches_scikit_learn_with_ties():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 200).astype(float), rng.integers(1, 6, 150).astype(float)
    expected = roc_auc_score(np.r_[np.zeros(200), np.ones(150)], np.r_[a, b])
    assert metrics.auroc(a, b) == pytest.approx(expected, abs=1e-12)
    assert metrics.auroc([1.0, 1.0], [1.0, 1.0]) == 0.5


def test_classification_metrics_of_a_known_predictive():
    # Two samples that disagree: mean (0.5, 0.5), MI = log 2; labels always 0.
    samples = np.array([[[1.0, 0.0]] * 4, [[0.0, 1.0]] * 4])
    m = metrics.classification_metrics(samples, np.zeros(4, int), bins=10)
    assert m["nll"] == pytest.approx(math.log(2))
    assert m["mutual_info"] == pytest.approx(math.log(2), abs=1e-6)
    assert m["entropy"] == pytest.approx(math.log(2))
    assert m["ece"] == pytest.approx(0.5)


def test_regression_metrics_of_a_calibrated_gaussian():
    """Targets drawn from the predictive itself: the 90 % interval covers 90 % ± 3 s.e.,
    the NLL equals the Gaussian entropy ± 3 s.e., RMSE the predictive std."""
    rng = np.random.default_rng(1)
    n, std = 20_000, 2.0
    mean = rng.normal(size=n)
    y = mean + std * rng.normal(size=n)
    means = np.repeat(mean[None], 3, 0)  # three identical samples: no epistemic spread
    m = metrics.regression_metrics(means, np.full_like(means, std), y, interval=0.9)
    se = math.sqrt(0.9 * 0.1 / n)
    assert abs(m["coverage_90"] - 0.9) < 3 * se
    assert m["nll"] == pytest.approx(0.5 * math.log(2 * math.pi * math.e * std**2), abs=0.03)
    assert m["rmse"] == pytest.approx(std, rel=0.02)
    assert m["epistemic_std"] == pytest.approx(0.0, abs=1e-12)
    assert m["aleatoric_std"] == pytest.approx(std)
    # Units: targets in y / s give the same RMSE in original units, NLL + log s.
    scaled = metrics.regression_metrics(means / 4, np.full_like(means, std / 4), y / 4,
                                        interval=0.9, y_scale=4.0)
    assert scaled["rmse"] == pytest.approx(m["rmse"])
    assert scaled["nll"] == pytest.approx(m["nll"])


def test_mixture_cdf_is_the_mixture_of_normal_cdfs():
    from scipy.stats import norm

    means, scales = np.array([[0.0], [2.0]]), np.array([[1.0], [0.5]])
    got = metrics.mixture_cdf(np.array([1.0]), means, scales)
    assert got[0] == pytest.approx(0.5 * (norm.cdf(1.0) + norm.cdf(-2.0)))


def test_summarize_seeds_gives_mean_and_population_std_per_metric():
    mean, std = metrics.summarize_seeds([{"nll": 1.0, "ece": 0.1}, {"nll": 3.0, "ece": 0.3}])
    assert mean == pytest.approx({"nll": 2.0, "ece": 0.2})
    assert std == pytest.approx({"nll": 1.0, "ece": 0.1})
