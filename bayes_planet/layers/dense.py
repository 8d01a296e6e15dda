"""Bayesian densely-connected layers: one class per gradient estimator.

Each class is ``keras.layers.Dense`` with a distribution over its kernel
(``kernel_initializer='trainable_normal'``) and the KL to the prior as its
regularizer (``kernel_regularizer='normal_kl_divergence'``). Constructor arguments
and input/output shapes are Dense's plus ``seed``; the estimators differ only in
how the noisy pre-activation is computed.
"""

import math

import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, estimators, initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import (
    BayesianLayer,
    check_dense_extras,
    check_positive_int,
    moments,
    sample_weight,
)
from bayes_planet.layers.noise import per_example_sample, split_seed
from bayes_planet.layers.random_variable import RandomVariable
from bayes_planet.layers.regularizers import log_alpha_from_moments

tfd = tfp.distributions

__all__ = [
    "DenseDVI",
    "DenseFlipout",
    "DenseLocalReparameterization",
    "DenseReparameterization",
    "DenseVariationalDropout",
]


class _BayesianDense(BayesianLayer, keras.layers.Dense):
    """Dense with a distribution over the kernel; subclasses define ``_matmul``.

    Takes the arguments of `keras.layers.Dense` (same order, so positional calls such as
    ``DenseFlipout(10, 'relu')`` mean what they mean for Dense), with Bayesian
    defaults for ``kernel_initializer`` (``'trainable_normal'``) and
    ``kernel_regularizer`` (``'normal_kl_divergence'``), plus the keyword-only
    ``seed`` (int or None) for reproducible noise.

    Input shape: ``(batch, ..., input_dim)``. Output shape: ``(batch, ..., units)``.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="trainable_normal", bias_initializer="zeros",
                 kernel_regularizer="normal_kl_divergence", bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 lora_rank=None, lora_alpha=None, quantization_config=None, *, seed=None,
                 **kwargs):
        check_dense_extras(lora_rank, lora_alpha, quantization_config)
        super().__init__(
            units=check_positive_int("units", units),
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=initializers.get(kernel_initializer),
            bias_initializer=initializers.get(bias_initializer),
            kernel_regularizer=regularizers.get(kernel_regularizer),
            bias_regularizer=regularizers.get(bias_regularizer),
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        self._init_seed(seed)

    def call(self, inputs, training=None):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        in_dim = x.shape[-1]
        batch_shape = tf.shape(x)[:-1]
        x2 = tf.reshape(x, [-1, in_dim]) if x.shape.rank != 2 else x
        kernel_seed, bias_seed = split_seed(self._next_seed(), 2)
        out = self._matmul(x2, kernel_seed, training)
        if self.use_bias:
            out = tf.nn.bias_add(out, sample_weight(self.bias, bias_seed, self.compute_dtype))
        if x.shape.rank != 2:
            out = tf.reshape(out, tf.concat([batch_shape, [self.units]], 0))
            out.set_shape(x.shape[:-1].concatenate([self.units]))
        return self.activation(out) if self.activation is not None else out

    # The estimator: a function (op, x, weight, seed) -> op(x, W) for W ~ q(W).
    _estimator = None

    def _matmul(self, x, seed, training):
        return self._estimator(tf.matmul, x, self.kernel, seed)


@_register
class DenseReparameterization(_BayesianDense):
    """Dense layer whose kernel is sampled by reparameterization.

    Computes ``activation(x @ W + b)`` with one ``W = mean + stddev * eps`` drawn per
    call and shared by the batch (Kingma & Welling, 2014; Blundell et al., 2015).
    Cheapest per step; gradient variance grows with the batch correlation of the
    shared sample (see `DenseFlipout`). KL(q(W) || p(W)) is in ``layer.losses``.
    """

    _estimator = staticmethod(estimators.reparameterization)


@_register
class DenseFlipout(_BayesianDense):
    """Dense layer with the Flipout estimator (Wen et al., 2018).

    ``x @ M + ((x ∘ s) @ (σ ∘ E)) ∘ r`` with one weight perturbation ``E ~ N(0, I)``
    per call and per-example random signs ``s, r ∈ {±1}``: each example sees a
    pseudo-independent weight sample, which decorrelates the gradients across the
    batch and lowers their variance, for about twice the matmul cost.
    """

    _estimator = staticmethod(estimators.flipout)


@_register
class DenseLocalReparameterization(_BayesianDense):
    """Dense layer with the local reparameterization trick (Kingma et al., 2015).

    Samples pre-activations instead of weights: for a factorized normal kernel,
    ``x @ W ~ N(x @ M, x² @ σ²)`` exactly, so ``out = x @ M + sqrt(x² @ σ²) ∘ ε`` with
    ``ε`` independent per example and unit. Two matmuls, lowest-variance gradients.
    """

    _estimator = staticmethod(estimators.local_reparameterization)


@_register
class DenseVariationalDropout(DenseLocalReparameterization):
    """Sparse variational dropout (Molchanov et al., 2017).

    Posterior ``N(θ, σ²)`` (dropout rate ``α = σ²/θ²`` per weight) with the
    log-uniform prior's KL approximation as regularizer. Training (``training=True``)
    uses local reparameterization; inference uses the mean weights with the
    weights whose ``log α > 3`` (dropout rate > 95 %) pruned to zero.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="trainable_normal", bias_initializer="zeros",
                 kernel_regularizer="log_uniform_kl_divergence", bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 lora_rank=None, lora_alpha=None, quantization_config=None, *, seed=None,
                 **kwargs):
        super().__init__(units, activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer, activity_regularizer,
                         kernel_constraint, bias_constraint, lora_rank, lora_alpha,
                         quantization_config, seed=seed, **kwargs)

    def _matmul(self, x, seed, training):
        if training:
            return super()._matmul(x, seed, training)
        loc, scale = moments(self.kernel, x.dtype)
        if scale is not None:
            keep = log_alpha_from_moments(loc, scale) < 3.0
            loc = tf.where(keep, loc, tf.zeros_like(loc))
        return tf.matmul(x, loc)


@_register
class DenseDVI(_compat.RandomVariableInputs, _BayesianDense):
    """Deterministic variational inference by moment propagation (Wu et al., 2018).

    Instead of sampling, propagates the mean and variance of the pre-activation in
    closed form: ``E[xW] = μx M``, ``Var[xW] = σx² (M² + σ²) + μx² σ²`` (inputs and
    weights independent, diagonal covariance), then moment-matches ``relu`` with
    the rectified-Gaussian moments. Accepts a Tensor or a `RandomVariable` (its
    mean and variance are used) and returns a `RandomVariable` with a moment-matched
    ``Normal`` distribution — the papers' "DenseQuadrature" idea. ``activation``
    must be ``None``/``'linear'`` or ``'relu'``.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="trainable_normal", bias_initializer="zeros",
                 kernel_regularizer="normal_kl_divergence", bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 lora_rank=None, lora_alpha=None, quantization_config=None, *, seed=None,
                 **kwargs):
        super().__init__(units, activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer, activity_regularizer,
                         kernel_constraint, bias_constraint, lora_rank, lora_alpha,
                         quantization_config, seed=seed, **kwargs)
        if not _is_relu(self.activation) and self.activation is not keras.activations.linear:
            raise ValueError(
                "DenseDVI propagates moments in closed form only for activation=None, "
                f"'linear' or 'relu'. Received: activation={activation!r}"
            )

    def call(self, inputs, training=None):
        if isinstance(inputs, RandomVariable):
            x_mean, x_var = inputs.distribution.mean(), inputs.distribution.variance()
        else:
            x_mean = tf.convert_to_tensor(inputs)
            x_var = None
        x_mean = tf.cast(x_mean, self.compute_dtype)
        loc, scale = moments(self.kernel, x_mean.dtype)
        mean = tf.tensordot(x_mean, loc, [[-1], [0]])
        var = tf.zeros_like(mean)
        if scale is not None:
            var += tf.tensordot(tf.square(x_mean), tf.square(scale), [[-1], [0]])
        if x_var is not None:
            second = tf.square(loc) if scale is None else tf.square(loc) + tf.square(scale)
            var += tf.tensordot(tf.cast(x_var, mean.dtype), second, [[-1], [0]])
        if self.use_bias:
            b_loc, b_scale = moments(self.bias, mean.dtype)
            mean += b_loc
            if b_scale is not None:
                var += tf.square(b_scale)
        if _is_relu(self.activation):
            mean, var = relu_moments(mean, var)
        params = (mean, tf.sqrt(tf.maximum(var, _variance_floor(var.dtype))))
        dist = _normal(params)
        seed = self._next_seed()

        def sampler(sample_seed):  # replica-aware: each replica's rows of the global draw
            return per_example_sample(_normal, params, sample_seed, dist)

        return RandomVariable(dist, value=lambda: sampler(seed), sampler=sampler)


def _is_relu(activation):
    """Whether ``activation`` is max(x, 0): Keras' ``relu``, ``tf.nn.relu`` or a plain
    ``keras.layers.ReLU()`` (no max value, slope or threshold)."""
    if activation in (keras.activations.relu, tf.nn.relu):
        return True
    return isinstance(activation, keras.layers.ReLU) and not activation.max_value and not (
        activation.negative_slope) and not activation.threshold


def _normal(params):
    return tfd.Normal(*params)


def _variance_floor(dtype):
    """Smallest variance whose square root has a finite gradient: 1e-12, or float16's
    smallest normal number (1e-12 underflows to 0 in float16, and d sqrt(0) = inf)."""
    return tf.constant(6.2e-5 if dtype == tf.float16 else 1e-12, dtype)


def relu_moments(mean, var):
    """Mean and variance of ``relu(z)`` for ``z ~ N(mean, var)`` (rectified Gaussian)."""
    std = tf.sqrt(tf.maximum(var, _variance_floor(var.dtype)))
    alpha = mean / std
    cdf = 0.5 * tf.math.erfc(-alpha / math.sqrt(2.0))
    pdf = tf.exp(-0.5 * tf.square(alpha)) / math.sqrt(2.0 * math.pi)
    first = mean * cdf + std * pdf
    second = (tf.square(mean) + var) * cdf + mean * std * pdf
    return first, tf.maximum(second - tf.square(first), 0.0)
