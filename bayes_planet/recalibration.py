"""Post-hoc recalibration of a Monte Carlo predictive on held-out data (NumPy only).

A network's predictive can be systematically over- or under-confident (an overfitted
noise head, a mean-field posterior that stays too wide). One scalar fitted on a validation
set the model did not train on fixes the spread without moving the point prediction:

* classification: **temperature scaling** (Guo et al., 2017) of every sample's logits,
  ``softmax(logits_s / T)``, then the uniform mixture over samples (members) as usual;
  the accuracy of a deterministic net is unchanged, an ensemble's can move slightly;
* regression: **std scaling** (Levi et al., 2019, for a Gaussian head; here of the whole
  Gaussian mixture): every component is moved away from the mixture mean and widened by
  the same factor ``s``, ``N(μ + s (m_s − μ), (s σ_s)²)``, so the predictive mean stays and
  every predictive quantile's distance from it is multiplied by ``s``.

Both scalars minimize the validation NLL (a 1-D search over log-spaced values, then a
golden-section refinement). Shapes follow `bayes_planet.uncertainty_metrics`: ``[S, N, C]``
logits, ``[S, N]`` means and scales.

Example::

    T = recalibration.fit_temperature(val_logits, val_labels)
    test_probs = recalibration.softmax(recalibration.apply_temperature(test_logits, T))
"""

import math

import numpy as np

__all__ = ["apply_std_scale", "apply_temperature", "fit_std_scale", "fit_temperature",
           "softmax"]

#: Search range of both scalars (a factor of 100 either way).
BOUNDS = (1e-2, 1e2)
_GRID = 121
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def softmax(logits):
    """Softmax over the last axis, float64."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def _minimize_log(f, bounds, iterations=40):
    """argmin of ``f`` over ``[lo, hi]``: the best of a log-spaced grid, then golden-section
    search in log space between its neighbours."""
    lo, hi = bounds
    grid = np.geomspace(lo, hi, _GRID)
    values = [f(x) for x in grid]
    i = int(np.argmin(values))
    a, b = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, _GRID - 1)])
    c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(iterations):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - _GOLDEN * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + _GOLDEN * (b - a)
            fd = f(math.exp(d))
    best = math.exp((a + b) / 2.0)
    return best if f(best) <= values[i] else float(grid[i])


def _check(name, array, ndim):
    array = np.asarray(array, np.float64)
    if array.ndim != ndim:
        raise ValueError(f"Expected {name} of rank {ndim}. Received: {name} with shape "
                         f"{array.shape}")
    return array


def apply_temperature(logit_samples, temperature):
    """``logit_samples / temperature`` (``temperature > 0``)."""
    if not temperature > 0:
        raise ValueError(f"Expected a positive temperature. Received: temperature={temperature}")
    return np.asarray(logit_samples, np.float64) / temperature


def _classification_nll(logit_samples, labels):
    probs = softmax(logit_samples).mean(0)
    return -np.mean(np.log(np.clip(probs[np.arange(len(labels)), labels], 1e-300, None)))


def fit_temperature(logit_samples, labels, bounds=BOUNDS):
    """The temperature ``T`` minimizing the NLL of ``mean_s softmax(logits_s / T)``.

    Args:
      logit_samples: ``[S, N, C]`` logits of ``S`` weight samples (members); ``S = 1`` for a
        deterministic net.
      labels: ``[N]`` integer classes.
      bounds: the search range of ``T``.
    """
    logit_samples = _check("logit_samples", logit_samples, 3)
    labels = np.asarray(labels)
    if labels.shape != logit_samples.shape[1:2]:
        raise ValueError(f"Expected labels of shape {logit_samples.shape[1:2]}. Received: "
                         f"labels with shape {labels.shape}")
    return _minimize_log(lambda t: _classification_nll(logit_samples / t, labels), bounds)


def apply_std_scale(means, scales, std_scale):
    """The mixture ``N(means_s, scales_s²)`` with its spread about its mean scaled by
    ``std_scale``: ``(μ + s (means − μ), s · scales)`` with ``μ = means.mean(0)``."""
    if not std_scale > 0:
        raise ValueError(f"Expected a positive std_scale. Received: std_scale={std_scale}")
    means, scales = np.asarray(means, np.float64), np.asarray(scales, np.float64)
    center = means.mean(0, keepdims=True)
    return center + std_scale * (means - center), std_scale * scales


def _regression_nll(means, scales, y):
    log_prob = (-0.5 * math.log(2 * math.pi) - np.log(scales)
                - 0.5 * ((y[None] - means) / scales) ** 2)
    peak = log_prob.max(0)
    return -np.mean(peak + np.log(np.exp(log_prob - peak).mean(0)))


def fit_std_scale(means, scales, y, bounds=BOUNDS):
    """The factor ``s`` minimizing the NLL of `apply_std_scale`'s mixture at ``y``.

    Args:
      means, scales: ``[S, N]`` Gaussian predictions (``S`` weight samples or members).
      y: ``[N]`` targets.
      bounds: the search range of ``s``.
    """
    means, scales = _check("means", means, 2), _check("scales", scales, 2)
    y = np.asarray(y, np.float64)
    if y.shape != means.shape[1:] or scales.shape != means.shape:
        raise ValueError(f"Expected scales of shape {means.shape} and y of shape "
                         f"{means.shape[1:]}. Received: scales with shape {scales.shape}, "
                         f"y with shape {y.shape}")
    return _minimize_log(lambda s: _regression_nll(*apply_std_scale(means, scales, s), y),
                         bounds)
