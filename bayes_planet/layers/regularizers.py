"""Regularizers on weight distributions: the KL term of the ELBO.

In Bayesian Layers the KL divergence from the posterior to the prior is a
*regularizer*: the layer adds it to ``layer.losses`` and ``model.fit`` adds those to
the data loss. Scaling matters: the ELBO per training example is
``E[log p(y|x,w)] - KL(q||p) / N``, so every regularizer takes ``dataset_size=N``
(first class, no hand division) and a free ``scale_factor``.
`set_dataset_size(model, N)` sets it on every regularizer in a built model. KL annealing
changes a scale *during* training without retracing: `set_kl_scale(model, variable)` makes
every regularizer also multiply by a ``tf.Variable``, which the `KLAnnealing` callback
ramps from 0 to 1.

Each regularizer accepts a `DistributionInitializer` (fast path: closed forms on its
``moments()``, the posterior contract of `initializers`), a `RandomVariable` or a
`tfp` distribution. The normal priors (`NormalKLDivergence`, `NormalKLDivergenceWithTiedMean`,
`FanInNormalKLDivergence`) also take a full-covariance posterior
(`initializers.TrainableFullCovarianceNormal`) in closed form. Any other posterior without
closed-form factorized moments gets a one-line ``TypeError``: it needs a KL regularizer of
its own.
"""

import math
import numbers

import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers._registry import resolve
from bayes_planet.layers.initializers import (
    DistributionInitializer,
    MomentsUnavailableError,
    TrainableFullCovarianceNormal,
)
from bayes_planet.layers.random_variable import RandomVariable

tfd = tfp.distributions

__all__ = [
    "CauchyKLDivergence",
    "FanInNormalKLDivergence",
    "HalfCauchyKLDivergence",
    "KLAnnealing",
    "KLRegularizer",
    "LogNormalKLDivergence",
    "LogUniformKLDivergence",
    "NormalEmpiricalBayesKLDivergence",
    "NormalKLDivergence",
    "NormalKLDivergenceWithTiedMean",
    "Rank1NormalKLDivergence",
    "ScaleMixtureKLDivergence",
    "TrainableNormalKLDivergenceStdDev",
    "UniformKLDivergence",
    "get",
    "serialize",
    "fan_in",
    "set_dataset_size",
    "set_kl_scale",
]


def _moments(x):
    """(loc, scale) of a factorized normal or point mass; scale None for a point mass."""
    if isinstance(x, DistributionInitializer):
        try:
            return x.moments()
        except MomentsUnavailableError as e:
            raise TypeError(
                "Expected a posterior with closed-form factorized moments for this KL "
                f"regularizer. Received: {type(x).__name__} (weight {x.name!r})") from e
    return _distribution_moments(x)


def _log_scale(x, scale):
    return x.log_scale() if isinstance(x, DistributionInitializer) else tf.math.log(scale)


def _distribution_moments(x):
    dist = x.distribution if isinstance(x, RandomVariable) else x
    while isinstance(dist, tfd.Independent):
        dist = dist.distribution
    if isinstance(dist, tfd.Normal):
        return dist.loc, dist.scale
    if isinstance(dist, tfd.Deterministic):
        return dist.loc, None
    if isinstance(x, tf.Tensor | tf.Variable) or _compat.is_variable(x):
        return tf.convert_to_tensor(x), None
    raise TypeError(
        "Expected a normal or deterministic weight distribution. "
        f"Received: {type(dist).__name__}"
    )


def _dataset_size(value):
    """``int(value)`` for a positive whole number (an int, or a float such as 6e4); else a
    one-line ValueError naming it (strings, booleans, inf/nan, fractions, < 1)."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value != int(value) or value < 1):
        raise ValueError(f"Expected a positive integer. Received: dataset_size={value!r}")
    return int(value)


class KLRegularizer(keras.regularizers.Regularizer):
    """Base: ``__call__`` returns ``scale_factor * divergence / dataset_size`` (times the
    ``kl_scale`` variable that `set_kl_scale` attached, if any; it is not part of the
    config: a training schedule, not the prior)."""

    def __init__(self, scale_factor=1.0, dataset_size=None):
        if (isinstance(scale_factor, bool) or not isinstance(scale_factor, numbers.Real)
                or not math.isfinite(scale_factor) or scale_factor < 0):
            raise ValueError("Expected a finite non-negative number. "
                             f"Received: scale_factor={scale_factor!r}")
        self.scale_factor = float(scale_factor)
        self.dataset_size = None if dataset_size is None else _dataset_size(dataset_size)
        self.kl_scale = None

    def __call__(self, x):
        divergence = self.divergence(x)
        return self.weight(divergence.dtype) * divergence

    def weight(self, dtype):
        """``scale_factor / dataset_size`` (× ``kl_scale``) as a ``dtype`` scalar."""
        # tf.constant, not tf.cast: a Python float would round through float32.
        weight = tf.constant(self.scale_factor / (self.dataset_size or 1), dtype)
        if self.kl_scale is not None:  # Read when the loss is traced: no retracing.
            weight *= tf.cast(self.kl_scale, dtype)
        return weight

    def divergence(self, x):
        raise NotImplementedError

    def get_config(self):
        return {"scale_factor": self.scale_factor, "dataset_size": self.dataset_size}


def _normal_kl(x, mean, stddev):
    """KL(q || N(mean, stddev²)) summed over a weight; -log prior density for a point mass.

    ``mean=None`` ties the prior's mean to the posterior's (no mean term; a point mass then
    raises TypeError). A full-covariance posterior takes `_full_covariance_normal_kl`.
    """
    if isinstance(x, TrainableFullCovarianceNormal):
        return _full_covariance_normal_kl(x.loc(), x.scale_tril(), mean, stddev)
    loc, scale = _moments(x)
    inv_var = 1.0 / stddev**2
    n = tf.cast(tf.size(loc), loc.dtype)
    if mean is None:
        if scale is None:
            raise TypeError("A tied-mean KL needs a stochastic (normal) posterior.")
        quad = tf.reduce_sum(tf.square(scale))
        return 0.5 * inv_var * quad - tf.reduce_sum(_log_scale(x, scale)) + n * (
            math.log(stddev) - 0.5)
    diff = loc - mean if mean else loc
    if scale is None:
        return tf.reduce_sum(0.5 * inv_var * tf.square(diff)) + n * (
            math.log(stddev) + 0.5 * math.log(2 * math.pi))
    # sum log(sp/sq) + (sq^2 + d^2) / (2 sp^2) - 1/2, as few passes as possible.
    quad = tf.reduce_sum(tf.square(scale) + tf.square(diff))
    return 0.5 * inv_var * quad - tf.reduce_sum(_log_scale(x, scale)) + n * (
        math.log(stddev) - 0.5)


def _full_covariance_normal_kl(loc, scale_tril, mean, stddev):
    """KL(N(vec(loc), L Lᵀ) || N(mean, stddev² I)) over the ``n`` flattened entries:
    ``(tr(L Lᵀ) + |loc - mean|²) / (2 stddev²) - Σ log diag(L) + n log(stddev) - n/2``
    (``mean=None``: the prior's mean is the posterior's, no mean term)."""
    n = tf.cast(tf.size(loc), loc.dtype)
    quad = tf.reduce_sum(tf.square(scale_tril))
    if mean is not None:
        quad += tf.reduce_sum(tf.square(loc - mean))
    log_det = tf.reduce_sum(tf.math.log(tf.linalg.diag_part(scale_tril)))
    return 0.5 * quad / stddev**2 - log_det + n * (math.log(stddev) - 0.5)


def fan_in(x):
    """The number of inputs summed into each output of a weight ``x``.

    A `DistributionInitializer` whose layer set its ``fan_in`` (e.g. an EinsumDense
    kernel, whose contracted axes only the equation knows) gives that; otherwise the
    Keras convention on the weight's shape: ``prod(shape[:-1])`` (a dense kernel's
    input dimension, a convolution's ``kernel_size × in_channels``), the length of a
    vector, 1 for a scalar.
    """
    given = getattr(x, "fan_in", None)
    if given:
        return int(given)
    if isinstance(x, DistributionInitializer):
        shape = x.weight_shape
    else:
        loc, _ = _distribution_moments(x)
        shape = loc.shape
    dims = shape.as_list()
    if any(d is None for d in dims):
        raise ValueError(f"A fan-in prior needs a static weight shape. Received: shape={dims}")
    return int(math.prod(dims[:-1])) if len(dims) > 1 else (dims[0] if dims else 1)


@_register
class NormalKLDivergence(KLRegularizer):
    """KL(q || N(mean, stddev^2)) summed over weights, in closed form for a normal q.

    For a point-mass posterior the KL is undefined; the negative log prior density
    is used instead (MAP, i.e. weight decay), so ``trainable_deterministic`` +
    ``normal_kl_divergence`` is MAP training. ``NormalKLDivergence()`` is the standard
    N(0, 1) prior on every weight, whatever the layer's width: the layers' default.
    ``benchmarks/uncertainty.py`` found no prior better on every family
    (``experiments/results/5-priors.md``); for Gaussian-head regression MLPs use
    `ScaleMixtureKLDivergence`.
    """

    def __init__(self, mean=0.0, stddev=1.0, scale_factor=1.0, dataset_size=None):
        super().__init__(scale_factor, dataset_size)
        if not stddev > 0:
            raise ValueError(f"Expected a positive prior stddev. Received: stddev={stddev}")
        self.mean, self.stddev = float(mean), float(stddev)

    def divergence(self, x):
        return _normal_kl(x, self.mean, self.stddev)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, **super().get_config()}


@_register
class NormalKLDivergenceWithTiedMean(KLRegularizer):
    """KL(q || N(μ_q, stddev²)): a normal prior whose mean is the posterior's own mean.

    The KL penalizes only the posterior stddevs σ, per weight
    ``log(stddev/σ) + σ²/(2 stddev²) - 1/2`` (minimal at σ = stddev); the means are left
    to the data, untouched by the KL (the prior mean is the posterior mean under
    ``stop_gradient``, so the mean term is zero and carries no gradient). edward2's
    ``NormalKLDivergenceWithTiedMean``, uncertainty-baselines' mean-field recipe (there with
    ``stddev=0.1``, `initializers.SMALL_INITIAL_STDDEV` and `KLAnnealing`). Alias
    ``'normal_kl_divergence_with_tied_mean'``. A point-mass posterior gets a TypeError.

    Args:
      stddev: the prior stddev.
      scale_factor, dataset_size: as `KLRegularizer`.
    """

    def __init__(self, stddev=1.0, scale_factor=1.0, dataset_size=None):
        super().__init__(scale_factor, dataset_size)
        if (isinstance(stddev, bool) or not isinstance(stddev, numbers.Real)
                or not math.isfinite(stddev) or stddev <= 0):
            raise ValueError(f"Expected a positive prior stddev. Received: stddev={stddev!r}")
        self.stddev = float(stddev)

    def divergence(self, x):
        return _normal_kl(x, None, self.stddev)

    def get_config(self):
        return {"stddev": self.stddev, **super().get_config()}


@_register
class Rank1NormalKLDivergence(NormalKLDivergence):
    """`NormalKLDivergence` whose default prior is N(1, 0.1²): a rank-1 factor prior.

    The multiplicative factors α and γ of a rank-1 layer (`ensemble.DenseRank1`) act as
    the identity at 1, so this prior is centred there, with the stddev 0.1 of
    uncertainty-baselines' rank-1 recipe (Dusenberry et al., 2020); for factors that start
    near 1 (`TrainableRank1Normal`). The layers' default is the symmetric
    `Rank1SignMixtureKLDivergence` with ±1 starts. Alias ``'rank1_normal_kl_divergence'``.
    """

    def __init__(self, mean=1.0, stddev=0.1, scale_factor=1.0, dataset_size=None):
        super().__init__(mean, stddev, scale_factor, dataset_size)


@_register
class FanInNormalKLDivergence(KLRegularizer):
    """KL(q || N(0, gain² / fan_in)) summed over weights: a prior scaled to the layer.

    The prior of each weight has the variance of a variance-preserving initializer
    (LeCun for ``gain=1``, He for ``gain=√2``): ``fan_in`` inputs, each weighted by a
    draw of the prior, sum to a pre-activation of variance ``gain²`` times the
    inputs' (Neal, 1996; the ``σ_w² / fan_in`` priors of infinitely wide networks).
    It shrinks every mean towards 0 with weight ``fan_in / (2 gain²)``, which costs
    accuracy on small data sets (``experiments/results/5-priors.md``, where it lost to
    `ScaleMixtureKLDivergence`); ``fan_in`` is `fan_in(x)` per weight; the closed form
    is `NormalKLDivergence`'s.

    Args:
      gain: the prior's stddev times ``sqrt(fan_in)``.
      scale_factor, dataset_size: as `KLRegularizer`.
    """

    def __init__(self, gain=1.0, scale_factor=1.0, dataset_size=None):
        super().__init__(scale_factor, dataset_size)
        if not gain > 0:
            raise ValueError(f"Expected a positive gain. Received: gain={gain}")
        self.gain = float(gain)

    def prior_stddev(self, x):
        """The prior's stddev for weight ``x``: ``gain / sqrt(fan_in(x))``."""
        return self.gain / math.sqrt(fan_in(x))

    def divergence(self, x):
        return _normal_kl(x, 0.0, self.prior_stddev(x))

    def get_config(self):
        return {"gain": self.gain, **super().get_config()}


def _mixture_kl_bound(x, components):
    """The closed-form bound on KL(q(w) || Σ_k π_k N(m_k, s_k²)) of `ScaleMixtureKLDivergence`
    (mean-field over each weight's component), summed over the weight; ``components``:
    ``(π_k, m_k, s_k)`` triples of floats. For a point mass the exact -log prior density."""
    loc, scale = _moments(x)
    variance = 0.0 if scale is None else tf.square(scale)
    terms = [math.log(w) - math.log(s) - 0.5 * math.log(2 * math.pi)
             - (variance + tf.square(loc - m)) / (2 * s * s) for w, m, s in components]
    cross_entropy = -tf.reduce_sum(tf.reduce_logsumexp(tf.stack(terms), axis=0))
    if scale is None:
        return cross_entropy
    n = tf.cast(tf.size(loc), loc.dtype)
    entropy = tf.reduce_sum(_log_scale(x, scale)) + n * 0.5 * math.log(2 * math.pi * math.e)
    return cross_entropy - entropy


@_register
class ScaleMixtureKLDivergence(KLRegularizer):
    """KL to a scale-mixture prior ``π N(0, s1²) + (1 - π) N(0, s2²)`` (Blundell et al., 2015).

    A wide slab (``s1 = 1``, the N(0, 1) default) leaves the weights the data need
    almost unshrunk, and a narrow spike scaled to the layer (``s2 = 0.1 / sqrt(fan_in)``)
    holds the weights the data leave alone near zero *with little noise*. In
    ``benchmarks/uncertainty.py`` (``experiments/results/5-priors.md``) it fixes regression
    MLPs with a Gaussian head, where N(0, 1) lets those weights keep prior-sized noise
    that the noise head absorbs while the predictive mean explodes (RMSE 5× the
    deterministic net's, every interval covering); with it the RMSE is below the
    deterministic net's. It is not the default: on the benchmark's LSTM the
    posterior collapses to the prior (chance accuracy, where N(0, 1) beats the
    deterministic net), on digits it lowers the OOD signal, on the CNN it is slightly
    worse than N(0, 1).

    The KL to a mixture has no closed form; this is the closed-form bound of
    mean-field inference over each weight's component ``z`` as well,
    ``KL(q(w) q(z) || p(w, z))`` minimized over ``q(z)``:
    ``-H[q(w)] - sum_w logsumexp_k(log π_k + E_q[log N(w; 0, s_k²)])``, an upper bound
    on ``KL(q(w) || p(w))`` (so the objective stays a lower bound on the evidence),
    exact when one component dominates. For a point-mass posterior
    (``trainable_deterministic``) it is the negative log prior density (MAP).

    The spike is stiff: its curvature ``1 / s2² = 100 fan_in`` per weight, divided by
    the data set size, bounds plain SGD's stable learning rate (Adam is unaffected).

    Args:
      mixture_weight: π, the slab's prior probability.
      slab_stddev: s1.
      spike_stddev: s2, or None for ``spike_gain / sqrt(fan_in)`` (see `fan_in`).
      spike_gain: the spike's stddev times ``sqrt(fan_in)`` when ``spike_stddev`` is None.
      scale_factor, dataset_size: as `KLRegularizer`.
    """

    def __init__(self, mixture_weight=0.5, slab_stddev=1.0, spike_stddev=None,
                 spike_gain=0.1, scale_factor=1.0, dataset_size=None):
        super().__init__(scale_factor, dataset_size)
        if not 0.0 < mixture_weight < 1.0:
            raise ValueError(f"Expected 0 < mixture_weight < 1. Received: "
                             f"mixture_weight={mixture_weight}")
        for name, value in (("slab_stddev", slab_stddev), ("spike_stddev", spike_stddev),
                            ("spike_gain", spike_gain)):
            if value is not None and not value > 0:
                raise ValueError(f"Expected a positive {name}. Received: {name}={value}")
        self.mixture_weight = float(mixture_weight)
        self.slab_stddev = float(slab_stddev)
        self.spike_stddev = None if spike_stddev is None else float(spike_stddev)
        self.spike_gain = float(spike_gain)

    def spike(self, x):
        """The spike's stddev for weight ``x``."""
        return self.spike_stddev or self.spike_gain / math.sqrt(fan_in(x))

    def divergence(self, x):
        return _mixture_kl_bound(x, ((self.mixture_weight, 0.0, self.slab_stddev),
                                     (1.0 - self.mixture_weight, 0.0, self.spike(x))))

    def get_config(self):
        return {"mixture_weight": self.mixture_weight, "slab_stddev": self.slab_stddev,
                "spike_stddev": self.spike_stddev, "spike_gain": self.spike_gain,
                **super().get_config()}


@_register
class Rank1SignMixtureKLDivergence(KLRegularizer):
    """KL to ``½ N(m, s²) + ½ N(−m, s²)`` (default m = 1, s = 0.1): the rank-1 layers' default
    factor prior, for their random-sign starts.

    `TrainableRandomSignNormal` starts each factor entry at ±1; under the prior
    N(1, 0.1²) (`Rank1NormalKLDivergence`) a −1 entry costs ≈ 200 nats, which buries the
    likelihood of a small data set (``experiments/results/8c-rank1-initial-means.md``). Under
    this symmetric prior both signs cost the same (≈ log 2 + the KL to their own component), so the members
    can keep their sign patterns (their diversity) without paying for them. The KL to a
    mixture is bounded as in `ScaleMixtureKLDivergence`: within log 2 per entry for a
    posterior narrower than the components (rank-1 factors start at stddev ≈ 0.03), looser
    for a wide one straddling both. Alias ``'rank1_sign_mixture_kl_divergence'``.
    """

    def __init__(self, mean=1.0, stddev=0.1, scale_factor=1.0, dataset_size=None):
        super().__init__(scale_factor, dataset_size)
        for name, value in (("mean", mean), ("stddev", stddev)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
                raise ValueError(f"Expected a positive number. Received: {name}={value!r}")
        self.mean, self.stddev = float(mean), float(stddev)

    def divergence(self, x):
        return _mixture_kl_bound(x, ((0.5, self.mean, self.stddev),
                                     (0.5, -self.mean, self.stddev)))

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, **super().get_config()}


@_register
class NormalEmpiricalBayesKLDivergence(KLRegularizer):
    """KL(q || N(mean, s^2)) with the prior variance s^2 fitted by empirical Bayes.

    The prior variance is the closed-form maximizer of ``-KL`` over ``s^2``:
    ``s^2 = mean(scale^2 + (loc - mean)^2)`` over the weight tensor (Wu et al.,
    2018, Sec. 5), so the prior adapts to each layer. The plug-in value is a
    stationary point, so no gradient flows through ``s`` at the optimum.

    With a hyperprior ``s^2 ~ InverseGamma(variance_concentration α, variance_scale β)``
    (both given; edward2's defaults are α = 2.01, β = 0.101) ``s^2`` is its MAP value
    ``(Σ (scale² + (loc - mean)²) + 2β) / (n + 2α + 2)`` over the ``n`` entries, and the
    divergence is ``KL(q || N(mean, s^2)) - log InverseGamma(s^2; α, β)`` (the KL to the
    joint prior with the variance a point mass at ``s^2``).
    """

    def __init__(self, mean=0.0, scale_factor=1.0, dataset_size=None, *,
                 variance_concentration=None, variance_scale=None):
        super().__init__(scale_factor, dataset_size)
        self.mean = float(mean)
        if (variance_concentration is None) != (variance_scale is None):
            raise ValueError("Expected both variance_concentration and variance_scale or "
                             f"neither. Received: variance_concentration="
                             f"{variance_concentration!r}, variance_scale={variance_scale!r}")
        for name, value in (("variance_concentration", variance_concentration),
                            ("variance_scale", variance_scale)):
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, numbers.Real) or not value > 0):
                raise ValueError(f"Expected a positive number. Received: {name}={value!r}")
        self.variance_concentration = (None if variance_concentration is None
                                       else float(variance_concentration))
        self.variance_scale = None if variance_scale is None else float(variance_scale)

    def divergence(self, x):
        loc, scale = _moments(x)
        if scale is None:
            raise TypeError("Empirical Bayes KL needs a stochastic (normal) posterior.")
        second = tf.square(scale) + tf.square(loc - self.mean)
        n = tf.cast(tf.size(loc), loc.dtype)
        if self.variance_concentration is None:
            prior_var = tf.reduce_mean(second)
            # sum log(s/sq) + second/(2 s^2) - 1/2, with sum(second) = n s^2.
            return 0.5 * n * tf.math.log(prior_var) - tf.reduce_sum(_log_scale(x, scale))
        alpha, beta = self.variance_concentration, self.variance_scale
        total = tf.reduce_sum(second)
        prior_var = (total + 2.0 * beta) / (n + 2.0 * alpha + 2.0)
        kl = (0.5 * n * tf.math.log(prior_var) - tf.reduce_sum(_log_scale(x, scale))
              + 0.5 * total / prior_var - 0.5 * n)
        hyperprior = tfd.InverseGamma(tf.constant(alpha, loc.dtype), tf.constant(beta, loc.dtype))
        return kl - hyperprior.log_prob(prior_var)

    def get_config(self):
        return {"mean": self.mean, "variance_concentration": self.variance_concentration,
                "variance_scale": self.variance_scale, **super().get_config()}


# Molchanov et al. (2017), eq. 14: -KL(q || log-uniform) ≈ k1 σ(k2 + k3 log α) - ½ log1p(1/α) - k1.
_K1, _K2, _K3 = 0.63576, 1.87320, 1.48695


@_register
class LogUniformKLDivergence(KLRegularizer):
    """KL(N(θ, αθ²) || log-uniform) for sparse variational dropout (Molchanov et al. 2017).

    Uses the paper's approximation (eq. 14; error < 0.01 per weight) with
    ``log α = log σ² - log θ²`` clipped to ``[-8, 8]``.
    """

    def divergence(self, x):
        loc, scale = _moments(x)
        if scale is None:
            raise TypeError("Log-uniform KL needs a stochastic (normal) posterior.")
        log_alpha = log_alpha_from_moments(loc, scale)
        neg_kl = _K1 * tf.sigmoid(_K2 + _K3 * log_alpha) - 0.5 * tf.math.log1p(
            tf.exp(-log_alpha)
        ) - _K1
        return -tf.reduce_sum(neg_kl)


def log_alpha_from_moments(loc, scale, clip=8.0):
    """``log α = log σ² - log θ²`` clipped to ``[-clip, clip]`` (variational dropout)."""
    log_alpha = 2.0 * tf.math.log(scale) - tf.math.log(tf.square(loc) + 1e-16)
    return tf.clip_by_value(log_alpha, -clip, clip)


def _distribution(x):
    """The `tfp` distribution of a weight: a posterior's ``distribution()``, a `RandomVariable`'s
    distribution, or a distribution itself."""
    if isinstance(x, DistributionInitializer):
        return x.distribution()
    if isinstance(x, RandomVariable):
        return x.distribution
    if isinstance(x, tfd.Distribution):
        return x
    raise TypeError("Expected a posterior, a RandomVariable or a tfp distribution. "
                    f"Received: {type(x).__name__}")


def _base(dist):
    """``dist`` without its `tfd.Independent` wrappers."""
    while isinstance(dist, tfd.Independent):
        dist = dist.distribution
    return dist


def _draw(x, dist):
    """One reparameterized draw of weight ``x`` (a `RandomVariable`: its value)."""
    return x.value if isinstance(x, RandomVariable) else dist.sample()


def _one_draw_kl(x, prior_cls, loc, scale):
    """``log q(w) - log p(w)`` at one draw ``w ~ q``, summed over the weight: the
    single-sample estimate of KL(q || p) (unbiased, and not always positive), for a prior
    ``prior_cls(loc, scale)`` with no closed-form KL to ``q``."""
    dist = _distribution(x)
    w = _draw(x, dist)
    prior = prior_cls(tf.constant(loc, w.dtype), tf.constant(scale, w.dtype))
    return tf.reduce_sum(dist.log_prob(w)) - tf.reduce_sum(prior.log_prob(w))


class _LocScaleKL(KLRegularizer):
    """Base of the KL regularizers to a ``loc``/``scale`` prior family."""

    def __init__(self, loc=0.0, scale=1.0, scale_factor=1.0, dataset_size=None):
        super().__init__(scale_factor, dataset_size)
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not scale > 0:
            raise ValueError(f"Expected a positive prior scale. Received: scale={scale!r}")
        self.loc, self.scale = float(loc), float(scale)

    def get_config(self):
        return {"loc": self.loc, "scale": self.scale, **super().get_config()}


@_register
class LogNormalKLDivergence(_LocScaleKL):
    """KL(q || LogNormal(loc, scale²)) summed over a log-normal posterior's entries, in closed
    form: the KL of the normals of ``log w`` (`initializers.TrainableLogNormal`, or a
    log-normal `RandomVariable`/distribution). Alias ``'log_normal_kl_divergence'``."""

    def divergence(self, x):
        base = _base(_distribution(x))
        if not isinstance(base, tfd.LogNormal):
            raise TypeError("Expected a log-normal posterior for LogNormalKLDivergence. "
                            f"Received: {type(base).__name__}")
        q = tfd.Normal(base.loc, base.scale)
        p = tfd.Normal(tf.constant(self.loc, q.dtype), tf.constant(self.scale, q.dtype))
        return tf.reduce_sum(tfd.kl_divergence(q, p))


@_register
class CauchyKLDivergence(_LocScaleKL):
    """KL(q || Cauchy(loc, scale)) summed over a weight: in closed form for a Cauchy posterior
    (``log((s_q + s)² + (l_q - l)²) - log(4 s_q s)``, Chyzak & Nielsen 2019), else the
    single-sample estimate ``log q(w) - log p(w)``, ``w ~ q`` (as edward2's). Alias
    ``'cauchy_kl_divergence'``."""

    def divergence(self, x):
        base = _base(_distribution(x))
        if isinstance(base, tfd.Cauchy):
            loc, scale = base.loc, base.scale
            spread = tf.square(scale + self.scale) + tf.square(loc - self.loc)
            return tf.reduce_sum(tf.math.log(spread) - tf.math.log(4.0 * self.scale * scale))
        return _one_draw_kl(x, tfd.Cauchy, self.loc, self.scale)


@_register
class HalfCauchyKLDivergence(_LocScaleKL):
    """KL(q || HalfCauchy(loc, scale)) summed over a weight, by the single-sample estimate
    ``log q(w) - log p(w)``, ``w ~ q`` (no closed form; edward2's estimate): the horseshoe
    prior of a positive scale (`initializers.TrainableHalfCauchy`, or a log-normal
    posterior). Alias ``'half_cauchy_kl_divergence'``."""

    def divergence(self, x):
        return _one_draw_kl(x, tfd.HalfCauchy, self.loc, self.scale)


@_register
class UniformKLDivergence(KLRegularizer):
    """``-H[q]``, the negative entropy of the posterior summed over a weight: the KL to a
    uniform (improper, flat) prior on the posterior's support, up to an additive constant.
    Alias ``'uniform_kl_divergence'``."""

    def divergence(self, x):
        return tf.reduce_sum(-_distribution(x).entropy())


#: softplus⁻¹(1): the raw value of a unit prior stddev.
_SOFTPLUS_INVERSE_ONE = math.log(math.expm1(1.0))


@_register
class TrainableNormalKLDivergenceStdDev(keras.layers.Layer):
    """KL(q || N(mean, σ²)) with the prior's stddevs σ trainable: an empirical-Bayes prior.

    A layer, not a stateless Keras regularizer, because it holds variables: one raw stddev
    per entry of the weight it is first called on (``σ = softplus(raw)``, the
    ``stddev_constraint``), trained with the model when it is a layer's regularizer (the
    layer tracks it). The divergence is the closed form of a factorized normal posterior
    against ``N(mean, σ²)`` per entry, summed, times ``scale_factor / dataset_size``
    (`set_dataset_size` sets the latter); for a point mass (a plain weight) the negative log
    prior density instead, as `NormalKLDivergence`.

    Args:
      mean: the prior's mean.
      stddev_initializer: initializer of the raw stddevs (default: truncated normal around
        softplus⁻¹(1) with stddev 0.1, a prior stddev near 1, as edward2's).
      scale_factor: multiplies the divergence.
      dataset_size: divides it (None: 1).
    """

    def __init__(self, mean=0.0, stddev_initializer=None, scale_factor=1.0, dataset_size=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.mean = float(mean)
        self.stddev_initializer = keras.initializers.get(
            stddev_initializer or keras.initializers.TruncatedNormal(
                mean=_SOFTPLUS_INVERSE_ONE, stddev=0.1))
        # The weighting and its checks are KLRegularizer's.
        self.weighting = KLRegularizer(scale_factor, dataset_size)
        self.raw_stddev = None

    @property
    def scale_factor(self):
        return self.weighting.scale_factor

    @property
    def dataset_size(self):
        return self.weighting.dataset_size

    def stddev_constraint(self, raw):
        """The prior stddevs of raw values: ``softplus(raw)``."""
        return tf.nn.softplus(raw)

    @property
    def stddev(self):
        """The prior stddevs, shaped as the weight."""
        return self.stddev_constraint(self.raw_stddev)

    def build_from(self, x):
        """Creates the raw stddevs, shaped as the weight ``x`` (once)."""
        if self.raw_stddev is None:
            loc, _ = _moments(x)
            self.raw_stddev = self.add_weight(name="stddev", shape=loc.shape,
                                              initializer=self.stddev_initializer,
                                              trainable=True, dtype=loc.dtype)
            self.built = True

    def __call__(self, x):
        self.build_from(x)
        loc, scale = _moments(x)
        stddev = tf.cast(self.stddev_constraint(self.raw_stddev), loc.dtype)
        if scale is None:  # A point mass: the negative log prior density (MAP).
            kl = (0.5 * tf.square((loc - self.mean) / stddev) + tf.math.log(stddev)
                  + 0.5 * math.log(2 * math.pi))
        else:
            kl = (tf.math.log(stddev) - _log_scale(x, scale)
                  + (tf.square(scale) + tf.square(loc - self.mean)) / (2 * tf.square(stddev))
                  - 0.5)
        divergence = tf.reduce_sum(kl)
        return self.weighting.weight(divergence.dtype) * divergence

    def get_config(self):
        config = super().get_config()
        config.update(mean=self.mean,
                      stddev_initializer=keras.initializers.serialize(self.stddev_initializer),
                      scale_factor=self.scale_factor, dataset_size=self.dataset_size)
        return config


_ALIASES = {
    "normal_kl_divergence": NormalKLDivergence,
    "normal_kl_divergence_with_tied_mean": NormalKLDivergenceWithTiedMean,
    "rank1_normal_kl_divergence": Rank1NormalKLDivergence,
    "rank1_sign_mixture_kl_divergence": Rank1SignMixtureKLDivergence,
    "fan_in_normal_kl_divergence": FanInNormalKLDivergence,
    "scale_mixture_kl_divergence": ScaleMixtureKLDivergence,
    "normal_empirical_bayes_kl_divergence": NormalEmpiricalBayesKLDivergence,
    "log_uniform_kl_divergence": LogUniformKLDivergence,
    "log_normal_kl_divergence": LogNormalKLDivergence,
    "cauchy_kl_divergence": CauchyKLDivergence,
    "half_cauchy_kl_divergence": HalfCauchyKLDivergence,
    "uniform_kl_divergence": UniformKLDivergence,
    "trainable_normal_kl_divergence_stddev": TrainableNormalKLDivergenceStdDev,
}


def get(identifier):
    """Resolves a regularizer from an alias, a config dict, a callable, a Keras name or None."""
    return resolve(identifier, _ALIASES, keras.regularizers.get, "regularizer")


def serialize(regularizer):
    return None if regularizer is None else keras.saving.serialize_keras_object(regularizer)


def set_dataset_size(model, dataset_size):
    """Sets ``dataset_size`` on every KL regularizer of ``model``'s layers.

    Call it before the first training step (traced functions capture the value).
    Returns the number of regularizers updated.
    """
    dataset_size = _dataset_size(dataset_size)
    found = kl_regularizers(model)
    for regularizer in found:
        regularizer.dataset_size = dataset_size
    return len(found)


def kl_regularizers(model):
    """The distinct `KLRegularizer`s held by ``model`` and its sublayers, in a stable order."""
    if not isinstance(model, keras.layers.Layer | tf.Module):
        raise TypeError(f"Expected a Keras layer or model, or a tf.Module. Received: "
                        f"model={model!r}")
    layers = [model] + _compat.submodules(model)
    found = {}
    for layer in layers:
        for value in list(vars(layer).values()):
            if isinstance(value, KLRegularizer):
                found.setdefault(id(value), value)
    return list(found.values())


def set_kl_scale(model, kl_scale):
    """Makes every KL regularizer of ``model`` multiply its term by ``kl_scale``.

    ``kl_scale`` is a scalar ``tf.Variable`` (read each time a loss is computed, so a
    traced train step follows its changes without retracing) or None to detach. A train
    function traced before the call does not read it: attach before the first step (as
    `KLAnnealing` does, retracing once if the model had already been trained).
    Returns the number of regularizers whose scale changed.
    """
    if kl_scale is not None and not isinstance(kl_scale, tf.Variable):
        raise TypeError(f"Expected a scalar tf.Variable or None. Received: kl_scale={kl_scale!r}")
    changed = 0
    for regularizer in kl_regularizers(model):
        changed += regularizer.kl_scale is not kl_scale
        regularizer.kl_scale = kl_scale
    return changed


class KLAnnealing(keras.callbacks.Callback):
    """Ramps the KL terms' scale linearly from 0 to 1 during ``model.fit`` (KL annealing).

    The scale is a scalar ``tf.Variable`` (``self.kl_scale``) that every `KLRegularizer`
    of the model multiplies by (`set_kl_scale`, at the start of ``fit``); the callback
    assigns it before each step (``steps``) or epoch (``epochs``), so the traced train
    step is not retraced. Over steps the scale of optimizer step ``t`` (``optimizer.
    iterations``, so it resumes with the optimizer) is ``min(1, (t + 1) / steps)``:
    uncertainty-baselines' schedule, with ``steps = kl_annealing_epochs ×
    steps_per_epoch``. Over epochs the scale of epoch ``e`` is ``min(1, (e + 1) /
    epochs)``. With ``steps_per_execution > 1`` the scale changes between executions.
    After ``fit`` the regularizers keep reading the variable (1 once the ramp is over).

    Args:
      steps: the number of optimizer steps of the ramp, or
      epochs: the number of epochs of the ramp (exactly one of the two).
    """

    def __init__(self, steps=None, epochs=None):
        super().__init__()
        if (steps is None) == (epochs is None):
            raise ValueError("Expected exactly one of steps and epochs. "
                             f"Received: steps={steps!r}, epochs={epochs!r}")
        for name, value in (("steps", steps), ("epochs", epochs)):
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, numbers.Integral) or value < 1):
                raise ValueError(f"Expected a positive integer. Received: {name}={value!r}")
        self.steps, self.epochs = steps, epochs
        self.kl_scale = None

    def scale(self, index):
        """The scale of optimizer step (or epoch) ``index`` (0-based)."""
        return min(1.0, (index + 1) / (self.steps or self.epochs))

    def on_train_begin(self, logs=None):
        if self.kl_scale is None:
            with self.model.distribute_strategy.scope():
                self.kl_scale = tf.Variable(0.0, trainable=False, name="kl_scale")
        if set_kl_scale(self.model, self.kl_scale):
            # Regularizers newly reading the variable: the train function made for this fit
            # is not traced yet, but one traced in an earlier fit would not read it.
            self.model.make_train_function(force=True)

    def on_epoch_begin(self, epoch, logs=None):
        if self.epochs is not None:
            self.kl_scale.assign(self.scale(epoch))

    def on_train_batch_begin(self, batch, logs=None):
        if self.steps is not None:
            self.kl_scale.assign(self.scale(int(self.model.optimizer.iterations.numpy())))
