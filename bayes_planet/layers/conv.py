"""Bayesian convolutional layers (1-D and 2-D), one class per estimator.

Each class is the Keras convolution with a distribution over its kernel
(``kernel_initializer='trainable_normal'``) and the KL to the prior as regularizer
(``kernel_regularizer='normal_kl_divergence'``); arguments and shapes are the Keras
layer's plus ``seed``. The estimators are those of `bayes_planet.layers.estimators`
with the convolution as the linear op.
"""

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, estimators, initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, check_positive_int, moments, sample_weight
from bayes_planet.layers.noise import split_seed
from bayes_planet.layers.regularizers import log_alpha_from_moments

__all__ = [
    "Conv1DFlipout",
    "Conv1DReparameterization",
    "Conv1DVariationalDropout",
    "Conv2DFlipout",
    "Conv2DLocalReparameterization",
    "Conv2DReparameterization",
    "Conv2DVariationalDropout",
]


class _BayesianConv(BayesianLayer):
    """Mixin for a Keras ``Conv*`` class; the subclass sets ``_estimator``.

    Takes the arguments of the Keras convolution, in its order (``filters``, ``kernel_size``,
    ``strides``, ``padding``, ``data_format``, ``dilation_rate``, ``groups``,
    ``activation``, ``use_bias``, initializers, regularizers, constraints), so
    positional calls such as ``Conv2DFlipout(32, 5, 1, 'same')`` mean what they
    mean for ``Conv2D``; Bayesian defaults for ``kernel_initializer``
    (``'trainable_normal'``) and ``kernel_regularizer``
    (``'normal_kl_divergence'``), plus the keyword-only ``seed``. ``strides=1``,
    ``dilation_rate=1`` and ``data_format=None`` are Keras's defaults for every rank
    (normalized by the Keras layer). ``groups`` must be 1.
    """

    _estimator = None

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="trainable_normal", bias_initializer="zeros",
                 kernel_regularizer="normal_kl_divergence", bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 *, seed=None, **kwargs):
        if groups != 1:
            raise ValueError(f"Expected groups=1. Received: groups={groups!r}")
        super().__init__(
            filters=check_positive_int("filters", filters),
            kernel_size=kernel_size,
            strides=strides,
            padding=padding,
            data_format=data_format,
            dilation_rate=dilation_rate,
            groups=groups,
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
        x, op = _compat.conv_input_and_op(self, x)
        kernel_seed, bias_seed = split_seed(self._next_seed(), 2)
        channel_axis = 1 if _compat.channels_first(self) else -1
        out = self._conv(op, x, kernel_seed, channel_axis, training)
        if self.use_bias:
            shape = [1] * out.shape.rank
            shape[channel_axis] = self.filters
            out = out + tf.reshape(sample_weight(self.bias, bias_seed, out.dtype), shape)
        return self.activation(out) if self.activation is not None else out

    def _conv(self, op, x, seed, channel_axis, training):
        """``op(x, W)`` (the convolution) for ``W ~ q(W)`` by the class's estimator."""
        del training
        return self._estimator(op, x, self.kernel, seed, channel_axis)


@_register
class Conv1DReparameterization(_BayesianConv, keras.layers.Conv1D):
    """Conv1D with the reparameterization estimator (Blundell et al., 2015).

    A Bayesian `keras.layers.Conv1D`: same arguments and shapes, plus ``seed``; the
    kernel is a distribution (``trainable_normal``) and its KL to the prior
    (``normal_kl_divergence``) is in ``layer.losses``. One kernel sample per call,
    shared by the batch.
    """

    _estimator = staticmethod(estimators.reparameterization)


@_register
class Conv1DFlipout(_BayesianConv, keras.layers.Conv1D):
    """Conv1D with the Flipout estimator (Wen et al., 2018).

    A Bayesian `keras.layers.Conv1D`: same arguments and shapes, plus ``seed``; the
    kernel is a distribution (``trainable_normal``) and its KL to the prior
    (``normal_kl_divergence``) is in ``layer.losses``. Per-example random sign flips
    over input/output channels decorrelate the batch; costs two convolutions.
    """

    _estimator = staticmethod(estimators.flipout)


@_register
class Conv2DReparameterization(_BayesianConv, keras.layers.Conv2D):
    """Conv2D with the reparameterization estimator (Blundell et al., 2015).

    A Bayesian `keras.layers.Conv2D`: same arguments and shapes, plus ``seed``; the
    kernel is a distribution (``trainable_normal``) and its KL to the prior
    (``normal_kl_divergence``) is in ``layer.losses``. One kernel sample per call,
    shared by the batch.
    """

    _estimator = staticmethod(estimators.reparameterization)


@_register
class Conv2DFlipout(_BayesianConv, keras.layers.Conv2D):
    """Conv2D with the Flipout estimator (Wen et al., 2018).

    A Bayesian `keras.layers.Conv2D`: same arguments and shapes, plus ``seed``; the
    kernel is a distribution (``trainable_normal``) and its KL to the prior
    (``normal_kl_divergence``) is in ``layer.losses``. Per-example random sign flips
    over input/output channels decorrelate the batch; costs two convolutions.
    """

    _estimator = staticmethod(estimators.flipout)


@_register
class Conv2DLocalReparameterization(_BayesianConv, keras.layers.Conv2D):
    """Conv2D with the local reparameterization estimator (Kingma et al., 2015).

    A Bayesian `keras.layers.Conv2D`: same arguments and shapes, plus ``seed``; the
    kernel is a distribution (``trainable_normal``) and its KL to the prior
    (``normal_kl_divergence``) is in ``layer.losses``. Samples each output from
    ``N(conv(x, M), conv(x², σ²))``; two convolutions.
    """

    _estimator = staticmethod(estimators.local_reparameterization)


class _ConvVariationalDropout(_BayesianConv):
    """Sparse variational dropout for convolutions (Molchanov et al., 2017).

    Posterior ``N(θ, σ²)`` per kernel entry (dropout rate ``α = σ²/θ²``) with the
    log-uniform prior's KL approximation (``'log_uniform_kl_divergence'``) as the
    regularizer. Training (``training=True``) uses local reparameterization
    (``N(conv(x, θ), conv(x², σ²))``, independent per output); inference uses the
    mean kernel with the entries whose ``log α > 3`` (dropout rate > 95 %) pruned to
    zero, as `DenseVariationalDropout`.
    """

    _estimator = staticmethod(estimators.local_reparameterization)

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="trainable_normal", bias_initializer="zeros",
                 kernel_regularizer="log_uniform_kl_divergence", bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 *, seed=None, **kwargs):
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate,
                         groups, activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer, activity_regularizer,
                         kernel_constraint, bias_constraint, seed=seed, **kwargs)

    def _conv(self, op, x, seed, channel_axis, training):
        if training:
            return super()._conv(op, x, seed, channel_axis, training)
        loc, scale = moments(self.kernel, x.dtype)
        if scale is not None:
            keep = log_alpha_from_moments(loc, scale) < 3.0
            loc = tf.where(keep, loc, tf.zeros_like(loc))
        return op(x, loc)


@_register
class Conv1DVariationalDropout(_ConvVariationalDropout, keras.layers.Conv1D):
    """Conv1D with sparse variational dropout (Molchanov et al., 2017).

    A Bayesian `keras.layers.Conv1D` (same arguments and shapes, plus ``seed``) with
    the log-uniform prior's KL in ``layer.losses``; local reparameterization in
    training, pruned mean kernel (``log α > 3`` → 0) at inference.
    """


@_register
class Conv2DVariationalDropout(_ConvVariationalDropout, keras.layers.Conv2D):
    """Conv2D with sparse variational dropout (Molchanov et al., 2017).

    A Bayesian `keras.layers.Conv2D` (same arguments and shapes, plus ``seed``) with
    the log-uniform prior's KL in ``layer.losses``; local reparameterization in
    training, pruned mean kernel (``log α > 3`` → 0) at inference.
    """
