"""Post-hoc recalibration of a Monte Carlo predictive on held-out data (NumPy only).

A network's predictive can be systematically over- or under-confident (an overfitted
noise head, a mean-field posterior that stays too wide). One scalar fitted on a validation
set the model did not train on fixes the spread without moving the point prediction:

* classification: **temperature scaling** (Guo et al., 2017) of the *predictive*: the
  uniform mixture over samples (members) ``p̄`` first, then ``p_T ∝ p̄^(1/T)`` (for one
  sample this is ``softmax(logits / T)``). Calibrating the pooled predictive rather than
  each sample ("pool, then calibrate"; Rahaman & Thiery, 2021) also fixes a predictive that
  is under-confident because its samples disagree — tempering each sample cannot (measured
  on the uncertainty benchmark's mean-field MLP: its ECE stayed at 0.06–0.07). The argmax,
  hence the accuracy, is unchanged; the samples' mutual information is not a property of
  ``p_T`` and is left to the caller (the uncalibrated samples').
* regression: **std scaling** (Levi et al., 2019, for a Gaussian head; here of the whole
  Gaussian mixture): every component is moved away from the mixture mean and widened by
  the same factor ``s``, ``N(μ + s (m_s − μ), (s σ_s)²)``, so the predictive mean stays and
  every predictive quantile's distance from it is multiplied by ``s``.

Both scalars minimize the validation NLL (a 1-D search over log-spaced values, then a
golden-section refinement). Shapes follow `bayes_planet.uncertainty.metrics`: ``[S, N, C]``
logits (pooled by `predictive_log_probs` to ``[N, C]``), ``[S, N]`` means and scales.

Example::

    log_p = recalibration.predictive_log_probs(val_logit_samples)
    T = recalibration.fit_temperature(log_p, val_labels)
    test_probs = np.exp(recalibration.apply_temperature(
        recalibration.predictive_log_probs(test_logit_samples), T))
"""

import math

import numpy as np

from bayes_planet.uncertainty.metrics import mixture_log_prob

__all__ = ["apply_std_scale", "apply_temperature", "fit_std_scale", "fit_temperature",
           "log_softmax", "predictive_log_probs"]

#: Search range of both scalars (a factor of 100 either way).
BOUNDS = (1e-2, 1e2)
_GRID = 121
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def log_softmax(logits):
    """Log-softmax over the last axis, float64."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def predictive_log_probs(logit_samples):
    """``[S, N, C]`` logits -> ``[N, C]`` log-probabilities of their uniform mixture."""
    log_p = log_softmax(_check("logit_samples", logit_samples, 3))
    peak = log_p.max(0)
    return peak + np.log(np.exp(log_p - peak).mean(0))


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


def _check(name, array, ndim, positive=False):
    """``array`` as float64 of rank ``ndim``, non-empty and finite (and > 0 if ``positive``);
    else a one-line ValueError naming it."""
    array = np.asarray(array, np.float64)
    if array.ndim != ndim:
        raise ValueError(f"Expected {name} of rank {ndim}. Received: {name} with shape "
                         f"{array.shape}")
    if array.size == 0:
        raise ValueError(f"Expected non-empty {name}. Received: {name} with shape "
                         f"{array.shape}")
    nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
    if nan or inf:
        counts = ", ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "inf")) if n)
        raise ValueError(f"Expected finite values. Received: {name} with {counts}")
    if positive and not array.min() > 0:
        raise ValueError(f"Expected positive {name}. Received: {name} with "
                         f"min={float(array.min())}")
    return array


def apply_temperature(log_probs, temperature):
    """``log p_T = log p / T − logsumexp(log p / T)``: the tempered predictive's
    log-probabilities (``temperature > 0``; any leading axes, classes last)."""
    if not temperature > 0:
        raise ValueError(f"Expected a positive temperature. Received: temperature={temperature}")
    return log_softmax(np.asarray(log_probs, np.float64) / temperature)


def fit_temperature(log_probs, labels, bounds=BOUNDS):
    """The temperature ``T`` minimizing the NLL of `apply_temperature`'s predictive.

    Args:
      log_probs: ``[N, C]`` log-probabilities of the predictive (`predictive_log_probs` of
        the samples' logits; a deterministic net's log-softmax).
      labels: ``[N]`` integer classes, in ``[0, C)``.
      bounds: the search range of ``T``.
    Raises:
      ValueError: empty or non-finite ``log_probs``; labels of another shape, or not classes.
    """
    log_probs = _check("log_probs", log_probs, 2)
    labels = np.asarray(labels)
    if labels.shape != log_probs.shape[:1]:
        raise ValueError(f"Expected labels of shape {log_probs.shape[:1]}. Received: "
                         f"labels with shape {labels.shape}")
    classes = log_probs.shape[1]
    outside = ~np.isin(labels, np.arange(classes))
    if outside.any():
        raise ValueError(f"Expected integer labels in [0, {classes}) (the classes of "
                         f"log_probs). Received: labels={labels[outside][0].item()!r}")
    labels = labels.astype(np.int64)
    rows = np.arange(len(labels))
    return _minimize_log(
        lambda t: -np.mean(apply_temperature(log_probs, t)[rows, labels]), bounds)


def apply_std_scale(means, scales, std_scale):
    """The mixture ``N(means_s, scales_s²)`` with its spread about its mean scaled by
    ``std_scale``: ``(μ + s (means − μ), s · scales)`` with ``μ = means.mean(0)``."""
    if not std_scale > 0:
        raise ValueError(f"Expected a positive std_scale. Received: std_scale={std_scale}")
    means, scales = np.asarray(means, np.float64), np.asarray(scales, np.float64)
    center = means.mean(0, keepdims=True)
    return center + std_scale * (means - center), std_scale * scales


def fit_std_scale(means, scales, y, bounds=BOUNDS):
    """The factor ``s`` minimizing the NLL of `apply_std_scale`'s mixture at ``y``.

    Args:
      means, scales: ``[S, N]`` Gaussian predictions (``S`` weight samples or members).
      y: ``[N]`` targets.
      bounds: the search range of ``s``.
    Raises:
      ValueError: empty or non-finite inputs, scales that are not all positive, mismatched
        shapes.
    """
    means, scales = _check("means", means, 2), _check("scales", scales, 2, positive=True)
    y = _check("y", y, 1)
    if y.shape != means.shape[1:] or scales.shape != means.shape:
        raise ValueError(f"Expected scales of shape {means.shape} and y of shape "
                         f"{means.shape[1:]}. Received: scales with shape {scales.shape}, "
                         f"y with shape {y.shape}")
    return _minimize_log(
        lambda s: -np.mean(mixture_log_prob(y, *apply_std_scale(means, scales, s))), bounds)
