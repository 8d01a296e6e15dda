"""bayes_planet/uncertainty/recalibration.py: temperature and std scaling against closed forms and
Monte Carlo with stated tolerances (fixed seeds)."""

import numpy as np
import pytest
from scipy import optimize

from bayes_planet.uncertainty import metrics as um
from bayes_planet.uncertainty import recalibration as rc


def _softmax(logits):
    return np.exp(rc.log_softmax(logits))


def _calibrated_logits(rng, n, classes=5):
    """True logits and labels drawn from their softmax: a perfectly calibrated model."""
    logits = rng.normal(0, 2.0, (n, classes))
    labels = np.array([rng.choice(classes, p=p) for p in _softmax(logits)])
    return logits, labels


def test_predictive_log_probs_is_the_log_of_the_mean_softmax():
    logits = np.random.default_rng(5).normal(0, 3, (4, 6, 3))
    np.testing.assert_allclose(rc.predictive_log_probs(logits),
                               np.log(_softmax(logits).mean(0)), atol=1e-12)


@pytest.mark.parametrize("factor", [3.0, 0.5])
def test_temperature_undoes_a_known_overconfidence(factor):
    """Logits ``factor ×`` the calibrated ones: the fitted temperature is ``factor`` (the
    MLE's sampling error at N = 20,000: tolerance 5 %); the argmax is unchanged."""
    logits, labels = _calibrated_logits(np.random.default_rng(0), 20_000)
    log_p = rc.predictive_log_probs(factor * logits[None])
    t = rc.fit_temperature(log_p, labels)
    assert t == pytest.approx(factor, rel=0.05)
    calibrated = rc.apply_temperature(log_p, t)
    np.testing.assert_array_equal(calibrated.argmax(-1), log_p.argmax(-1))
    assert um.expected_calibration_error(np.exp(calibrated), labels) < 0.015


def test_temperature_of_the_pooled_predictive_fixes_disagreeing_samples():
    """Samples that are each sure but disagree: every sample a near one-hot draw from the
    under-confident softmax(logits / 2), labels from softmax(logits). Their mixture is
    under-confident; the pooled temperature sharpens it back (T ≈ 1/2, ECE down 3×), where
    tempering each sample cannot (a one-hot sample only softens)."""
    rng = np.random.default_rng(6)
    logits, labels = _calibrated_logits(rng, 3000)
    soft = _softmax(logits / 2.0)
    draws = np.array([[rng.choice(5, p=p) for p in soft] for _ in range(64)])  # [S, N]
    samples = 12.0 * np.eye(5)[draws]
    log_p = rc.predictive_log_probs(samples)
    before = um.expected_calibration_error(np.exp(log_p), labels)
    t = rc.fit_temperature(log_p, labels)
    after = um.expected_calibration_error(np.exp(rc.apply_temperature(log_p, t)), labels)
    rows = np.arange(len(labels))
    per_sample = min((-np.mean(rc.predictive_log_probs(samples / u)[rows, labels]), u)
                     for u in np.geomspace(0.1, 10, 81))[1]
    each = um.expected_calibration_error(np.exp(rc.predictive_log_probs(samples / per_sample)),
                                         labels)
    assert 0.35 < t < 0.7 and after < before / 3 and each > 2 * after, (t, before, after, each)


def test_temperature_is_the_nll_minimum_of_an_ensemble():
    """Several members (S = 4): the fitted T matches scipy's bounded minimizer of the same
    pooled NLL to 1e-4 relative."""
    rng = np.random.default_rng(1)
    logits, labels = _calibrated_logits(rng, 3000)
    members = 2.5 * (logits[None] + rng.normal(0, 0.7, (4,) + logits.shape))
    log_p = rc.predictive_log_probs(members)

    def nll(log_t):
        z = log_p / np.exp(log_t)
        z = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return -np.mean(z[np.arange(len(labels)), labels])

    ref = np.exp(optimize.minimize_scalar(nll, bounds=(np.log(0.01), np.log(100)),
                                          method="bounded", options={"xatol": 1e-8}).x)
    assert rc.fit_temperature(log_p, labels) == pytest.approx(ref, rel=1e-4)


def test_std_scale_of_one_gaussian_is_the_closed_form():
    """S = 1: the NLL-optimal factor is sqrt(mean(z²)), z the standardized residuals."""
    rng = np.random.default_rng(2)
    m, sigma = rng.normal(0, 3, 5000), rng.uniform(0.5, 2.0, 5000)
    y = m + sigma * rng.standard_normal(5000)
    pred_scale = 0.4 * sigma
    s = rc.fit_std_scale(m[None], pred_scale[None], y)
    assert s == pytest.approx(np.sqrt(np.mean(((y - m) / pred_scale) ** 2)), rel=1e-5)
    assert s == pytest.approx(2.5, rel=0.03)  # 1/0.4; N = 5000 (SE of s ≈ 1 %)


def test_std_scale_restores_coverage_on_held_out_data():
    """An overconfident mixture (members' spread and noise both 0.3× too small), fitted on
    2,000 validation points: the 90 % interval then covers 0.9 ± 4 SE of 4,000 test points."""
    rng = np.random.default_rng(3)

    def draw(n):
        center = rng.normal(0, 2, n)
        offsets = rng.normal(0, 1.0, (6, n))  # the epistemic spread of 6 members
        y = center + offsets[rng.integers(0, 6, n), np.arange(n)] + rng.standard_normal(n)
        return center + 0.3 * offsets, np.full((6, n), 0.3), y

    val, test = draw(2000), draw(4000)
    before = um.regression_metrics(*test, interval=0.9)["coverage_90"]
    s = rc.fit_std_scale(*val)
    means, scales = rc.apply_std_scale(test[0], test[1], s)
    after = um.regression_metrics(means, scales, test[2], interval=0.9)["coverage_90"]
    assert before < 0.5 and s == pytest.approx(1 / 0.3, rel=0.05)
    assert abs(after - 0.9) < 4 * np.sqrt(0.9 * 0.1 / 4000), after


def test_apply_std_scale_keeps_the_mean_and_scales_every_quantile():
    rng = np.random.default_rng(4)
    means, scales = rng.normal(0, 1, (5, 7)), rng.uniform(0.1, 1.0, (5, 7))
    new_means, new_scales = rc.apply_std_scale(means, scales, 1.7)
    np.testing.assert_allclose(new_means.mean(0), means.mean(0), atol=1e-12)
    q = means.mean(0) + 0.8  # a point above the mean maps to mean + 1.7 × 0.8 with equal CDF
    np.testing.assert_allclose(um.mixture_cdf(means.mean(0) + 1.7 * 0.8, new_means, new_scales),
                               um.mixture_cdf(q, means, scales), atol=1e-12)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="temperature=0"):
        rc.apply_temperature(np.zeros((2, 3)), 0)
    with pytest.raises(ValueError, match="std_scale=-1"):
        rc.apply_std_scale(np.zeros((1, 2)), np.ones((1, 2)), -1)
    with pytest.raises(ValueError, match="log_probs of rank 2"):
        rc.fit_temperature(np.zeros((1, 2, 3)), np.zeros(2, int))
    with pytest.raises(ValueError, match="logit_samples of rank 3"):
        rc.predictive_log_probs(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="labels with shape"):
        rc.fit_temperature(np.zeros((2, 3)), np.zeros(3, int))
    with pytest.raises(ValueError, match="y with shape"):
        rc.fit_std_scale(np.zeros((1, 2)), np.ones((1, 2)), np.zeros(3))


_LOG_P = np.log(np.full((4, 3), 1 / 3))
_MEANS, _SCALES, _Y = np.zeros((2, 4)), np.ones((2, 4)), np.zeros(4)


def _with(array, index, value):
    array = np.array(array, np.float64)
    array[index] = value
    return array


@pytest.mark.parametrize("fit, message", [
    (lambda: rc.fit_temperature(_with(_LOG_P, (slice(0, 3), 0), np.nan), [0, 1, 2, 0]),
     "Expected finite values. Received: log_probs with 3 NaN"),
    (lambda: rc.fit_temperature(_with(_with(_LOG_P, (0, 1), np.inf), (1, 1), np.nan),
                                [0, 1, 2, 0]),
     "Expected finite values. Received: log_probs with 1 NaN, 1 inf"),
    (lambda: rc.fit_temperature(np.zeros((0, 3)), np.zeros(0, int)),
     "Expected non-empty log_probs. Received: log_probs with shape (0, 3)"),
    (lambda: rc.fit_temperature(_LOG_P, [0, 1, 2, -1]),
     "Expected integer labels in [0, 3) (the classes of log_probs). Received: labels=-1"),
    (lambda: rc.fit_temperature(_LOG_P, [0, 1, 2, 5]),
     "Expected integer labels in [0, 3) (the classes of log_probs). Received: labels=5"),
    (lambda: rc.fit_temperature(_LOG_P, [0, 1, 2, 0.5]),
     "Expected integer labels in [0, 3) (the classes of log_probs). Received: labels=0.5"),
    (lambda: rc.fit_std_scale(_with(_MEANS, 0, np.nan), _SCALES, _Y),
     "Expected finite values. Received: means with 4 NaN"),
    (lambda: rc.fit_std_scale(_MEANS, _SCALES, _with(_Y, 3, -np.inf)),
     "Expected finite values. Received: y with 1 inf"),
    (lambda: rc.fit_std_scale(np.zeros((2, 0)), np.ones((2, 0)), np.zeros(0)),
     "Expected non-empty means. Received: means with shape (2, 0)"),
    (lambda: rc.fit_std_scale(_MEANS, -_SCALES, _Y),
     "Expected positive scales. Received: scales with min=-1.0"),
    (lambda: rc.fit_std_scale(_MEANS, _with(_SCALES, (1, 2), 0.0), _Y),
     "Expected positive scales. Received: scales with min=0.0"),
    (lambda: rc.predictive_log_probs(np.full((2, 3, 4), np.nan)),
     "Expected finite values. Received: logit_samples with 24 NaN"),
], ids=["nan", "nan_and_inf", "empty", "label_-1", "label_5", "label_0.5", "means_nan",
        "y_inf", "std_empty", "negative_scale", "zero_scale", "logit_samples_nan"])
def test_unfittable_input_is_a_one_line_error_not_the_search_bound(fit, message):
    """NaN, inf, empty input and non-positive scales made the NLL NaN or inf at every point
    of the search, which then returned its lower bound (0.01); label -1 was scored as the
    last class, labels 5 and 0.5 were numpy IndexErrors."""
    with pytest.raises(ValueError) as info:
        fit()
    assert str(info.value) == message


def test_labels_may_be_whole_floats():
    logits, labels = _calibrated_logits(np.random.default_rng(7), 500)
    log_p = rc.predictive_log_probs(logits[None])
    assert rc.fit_temperature(log_p, labels.astype(float)) == rc.fit_temperature(log_p, labels)
