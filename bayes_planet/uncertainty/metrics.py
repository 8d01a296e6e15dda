"""Uncertainty metrics for Monte Carlo predictives (NumPy only).

Classification: a predictive is ``[S, N, C]`` class probabilities from ``S`` weight
samples (``S = 1`` for a deterministic net); the predictive distribution is their mean.
Regression: ``S`` Gaussian predictions ``N(mean_s, scale_s²)`` per input, whose mixture
(equal weights) is the predictive distribution.

* `expected_calibration_error` / `reliability_bins`: equal-width confidence bins
  (Guo et al., 2017).
* `entropy`, `mutual_information`: total and epistemic uncertainty (Houlsby et al.,
  2011; Depeweg et al., 2018), `auroc` to score OOD detection by either.
* `classification_metrics`, `regression_metrics`: the benchmark's headline numbers.
* `gaussian_nll`: the Keras loss of a Gaussian regression head (imports TensorFlow).
"""

import math

import numpy as np

__all__ = [
    "auroc",
    "classification_metrics",
    "entropy",
    "expected_calibration_error",
    "gaussian_nll",
    "mixture_cdf",
    "mixture_log_prob",
    "mutual_information",
    "regression_metrics",
    "reliability_bins",
    "summarize_seeds",
]


def reliability_bins(probs, labels, bins=15):
    """Per-bin ``(count, accuracy_sum, confidence_sum)`` over equal-width confidence bins.

    Bin ``k`` holds the examples whose confidence ``max_c p_c`` lies in ``(k/M, (k+1)/M]``
    (confidence 0 goes to bin 0).
    """
    probs, labels = np.asarray(probs, np.float64), np.asarray(labels)
    confidence = probs.max(-1)
    correct = (probs.argmax(-1) == labels).astype(np.float64)
    index = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
    count = np.bincount(index, minlength=bins)
    return (count, np.bincount(index, weights=correct, minlength=bins),
            np.bincount(index, weights=confidence, minlength=bins))


def expected_calibration_error(probs, labels, bins=15):
    """``sum_b (n_b / N) |accuracy_b - confidence_b|`` (Guo et al., 2017), M = ``bins``."""
    count, acc_sum, conf_sum = reliability_bins(probs, labels, bins)
    return float(np.abs(acc_sum - conf_sum).sum() / count.sum())


def entropy(probs):
    """Entropy in nats along the last axis."""
    probs = np.asarray(probs, np.float64)
    return -(probs * np.log(np.clip(probs, 1e-12, None))).sum(-1)


def mutual_information(prob_samples):
    """``H[mean_s p_s] - mean_s H[p_s]`` for ``[S, N, C]`` samples: the epistemic part."""
    prob_samples = np.asarray(prob_samples, np.float64)
    return np.maximum(entropy(prob_samples.mean(0)) - entropy(prob_samples).mean(0), 0.0)


def auroc(in_scores, out_scores):
    """AUROC of telling OOD (positive) from in-distribution by a score (higher = OOD).

    The Mann–Whitney statistic with ties counted one half (0.5 = chance).
    """
    in_scores = np.asarray(in_scores, np.float64).ravel()
    out_scores = np.asarray(out_scores, np.float64).ravel()
    scores = np.r_[in_scores, out_scores]
    order = scores.argsort(kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # Average ranks over ties.
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    average = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(average, counts)
    n_in, n_out = len(in_scores), len(out_scores)
    u = ranks[n_in:].sum() - n_out * (n_out + 1) / 2.0
    return float(u / (n_in * n_out))


def classification_metrics(prob_samples, labels, bins=15):
    """Accuracy, NLL, ECE, mean entropy and mean mutual information of ``[S, N, C]``."""
    prob_samples = np.asarray(prob_samples, np.float64)
    labels = np.asarray(labels)
    probs = prob_samples.mean(0)
    picked = probs[np.arange(len(labels)), labels]
    return {"accuracy": float(np.mean(probs.argmax(-1) == labels)),
            "nll": float(-np.mean(np.log(np.clip(picked, 1e-12, None)))),
            "ece": expected_calibration_error(probs, labels, bins),
            "entropy": float(entropy(probs).mean()),
            "mutual_info": float(mutual_information(prob_samples).mean())}


def mixture_cdf(y, means, scales):
    """CDF at ``y`` (``[N]``) of the equal-weight mixture of ``N(means_s, scales_s²)``."""
    from scipy.special import ndtr

    z = (np.asarray(y, np.float64)[None] - means) / scales
    return ndtr(z).mean(0)


def mixture_log_prob(y, means, scales):
    """Log density at ``y`` (``[N]``) of the equal-weight mixture of ``N(means_s, scales_s²)``
    (``[S, N]``), ``[N]``, float64 (log-sum-exp over the samples)."""
    means, scales = np.asarray(means, np.float64), np.asarray(scales, np.float64)
    y = np.asarray(y, np.float64)
    log_prob = (-0.5 * math.log(2 * math.pi) - np.log(scales)
                - 0.5 * ((y[None] - means) / scales) ** 2)
    peak = log_prob.max(0)
    return peak + np.log(np.exp(log_prob - peak).mean(0))


def regression_metrics(means, scales, y, interval=0.9, y_scale=1.0):
    """RMSE, NLL, central-interval coverage and stds of a Gaussian-mixture predictive.

    Args:
      means, scales: ``[S, N]`` Gaussian predictions (``S`` weight samples).
      y: ``[N]`` targets.
      interval: the central predictive interval's probability (``0.9``): a target is
        covered when the mixture's CDF at it lies in ``[(1 - p)/2, (1 + p)/2]``, i.e.
        inside the exact mixture quantiles.
      y_scale: the targets' unit (RMSE, NLL and stds are reported in ``y / y_scale``'s
        original units: NLL gets ``+ log y_scale``).
    """
    means, scales = np.asarray(means, np.float64), np.asarray(scales, np.float64)
    y = np.asarray(y, np.float64)
    log_mix = mixture_log_prob(y, means, scales)
    cdf = mixture_cdf(y, means, scales)
    tail = (1.0 - interval) / 2.0
    mean = means.mean(0)
    return {"rmse": float(np.sqrt(np.mean((mean - y) ** 2)) * y_scale),
            "nll": float(-np.mean(log_mix) + math.log(y_scale)),
            f"coverage_{round(100 * interval)}": float(np.mean((cdf >= tail) & (cdf <= 1 - tail))),
            "epistemic_std": float(means.std(0).mean() * y_scale),
            "aleatoric_std": float(np.sqrt((scales ** 2).mean(0)).mean() * y_scale)}


def summarize_seeds(per_seed):
    """``(mean, std)`` over seeds of every metric of a list of per-seed metric dicts."""
    keys = per_seed[0].keys()
    return ({k: float(np.mean([r[k] for r in per_seed])) for k in keys},
            {k: float(np.std([r[k] for r in per_seed])) for k in keys})


def gaussian_nll(y_true, y_pred):
    """Keras loss: mean negative log density of ``y_true`` under N(mean, softplus(raw) + 1e-3).

    ``y_pred[..., 0]`` is the mean, ``y_pred[..., 1]`` the raw (pre-softplus) scale; the
    head that `regression_metrics` evaluates (``scales = softplus(raw) + 1e-3``).
    """
    import tensorflow as tf

    mean, scale = y_pred[..., 0], tf.nn.softplus(y_pred[..., 1]) + 1e-3
    y = tf.reshape(tf.cast(y_true, mean.dtype), tf.shape(mean))
    return tf.reduce_mean(0.5 * math.log(2 * math.pi) + tf.math.log(scale)
                          + 0.5 * tf.square((y - mean) / scale))
