"""`DepthwiseConv2DBatchEnsemble`: the BatchEnsemble (Wen et al., 2020) depthwise convolution.

A `keras.layers.DepthwiseConv2D` whose depthwise kernel ``[kh, kw, in, multiplier]`` is
shared by ``ensemble_size`` members, each with fast weights α_e ``[in]`` on the input
channels, γ_e ``[in · multiplier]`` on the output channels and its own bias: member ``e``
computes ``activation(depthwise(x ∘ α_e, W) ∘ γ_e + b_e)`` on block ``e`` of the batch
(the ensemble batch convention of `bayes_planet.layers.DenseBatchEnsemble`).
"""

import tensorflow as tf

from bayes_planet._keras import KERAS3, keras
from bayes_planet.layers import initializers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.checks import check_positive_int
from bayes_planet.layers.ensemble.dense import (
    ENSEMBLE_SIZE,
    FAST_WEIGHTS,
    member_rows,
    point_initializer,
)

__all__ = ["DepthwiseConv2DBatchEnsemble"]


@_register
class DepthwiseConv2DBatchEnsemble(keras.layers.DepthwiseConv2D):
    """BatchEnsemble depthwise 2-D convolution (module docstring).

    Takes the arguments of `keras.layers.DepthwiseConv2D` (same order; ``channels_last``
    only), plus keyword-only:

    Args:
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: the fast weights' initializers (default random
        signs ±1).

    ``shared_kernel`` is the shared kernel; ``alpha`` ``[E, in]``, ``gamma`` and ``bias``
    ``[E, in · depth_multiplier]``.
    """

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1,
                 data_format=None, dilation_rate=(1, 1), activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", bias_initializer="zeros",
                 depthwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, bias_constraint=None, *,
                 ensemble_size=ENSEMBLE_SIZE, alpha_initializer=FAST_WEIGHTS,
                 gamma_initializer=FAST_WEIGHTS, **kwargs):
        if data_format not in (None, "channels_last"):
            raise ValueError("Expected data_format='channels_last' (or None). Received: "
                             f"data_format={data_format!r}")
        super().__init__(
            kernel_size, strides=strides, padding=padding, depth_multiplier=depth_multiplier,
            data_format="channels_last", dilation_rate=dilation_rate, activation=activation,
            use_bias=use_bias,
            depthwise_initializer=point_initializer("depthwise_initializer",
                                                    depthwise_initializer),
            bias_initializer=point_initializer("bias_initializer", bias_initializer),
            depthwise_regularizer=depthwise_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            depthwise_constraint=depthwise_constraint, bias_constraint=bias_constraint,
            **kwargs)
        self.ensemble_size = check_positive_int("ensemble_size", ensemble_size)
        self.alpha_initializer = point_initializer("alpha_initializer", alpha_initializer)
        self.gamma_initializer = point_initializer("gamma_initializer", gamma_initializer)

    @property
    def shared_kernel(self):
        """The shared depthwise kernel ``[kh, kw, in, depth_multiplier]`` (Keras' own weight:
        ``depthwise_kernel`` on Keras 2, ``kernel`` on Keras 3)."""
        return self.kernel if KERAS3 else self.depthwise_kernel

    def build(self, input_shape):
        use_bias, self.use_bias = self.use_bias, False  # The Keras bias is one vector.
        try:
            super().build(input_shape)
        finally:
            self.use_bias = use_bias
        in_channels = int(tf.TensorShape(input_shape)[-1])
        out_channels = in_channels * self.depth_multiplier
        members = self.ensemble_size
        self.alpha = self.add_weight(
            name="alpha", shape=[members, in_channels],
            initializer=initializers.for_weight(self.alpha_initializer, "alpha"),
            dtype=self.dtype, trainable=True)
        self.gamma = self.add_weight(
            name="gamma", shape=[members, out_channels],
            initializer=initializers.for_weight(self.gamma_initializer, "gamma"),
            dtype=self.dtype, trainable=True)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=[members, out_channels], initializer=self.bias_initializer,
                regularizer=self.bias_regularizer, constraint=self.bias_constraint,
                dtype=self.dtype, trainable=True)
        self.built = True

    def depthwise(self, x):
        """The shared depthwise convolution of ``x`` (no factors, no bias)."""
        strides = (1, *self.strides, 1)
        return tf.nn.depthwise_conv2d(x, tf.cast(self.shared_kernel, x.dtype), strides,
                                      self.padding.upper(), dilations=self.dilation_rate)

    def _per_member(self, t, factor, rows):
        shape = tf.shape(t)
        blocks = tf.reshape(t, tf.concat([[self.ensemble_size, rows], shape[1:]], 0))
        out = tf.reshape(blocks * tf.reshape(factor, [self.ensemble_size, 1, 1, 1, -1]), shape)
        out.set_shape(t.shape)
        return out

    def call(self, inputs):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        rows = member_rows(x, self.ensemble_size)
        out = self.depthwise(self._per_member(x, tf.cast(self.alpha, x.dtype), rows))
        out = self._per_member(out, tf.cast(self.gamma, x.dtype), rows)
        if self.use_bias:
            out += tf.reshape(tf.repeat(tf.cast(self.bias, x.dtype), rows, axis=0),
                              [-1, 1, 1, out.shape[-1]])
        return self.activation(out) if self.activation is not None else out

    def get_config(self):
        config = super().get_config()
        config.update(ensemble_size=self.ensemble_size,
                      alpha_initializer=initializers.serialize(self.alpha_initializer),
                      gamma_initializer=initializers.serialize(self.gamma_initializer))
        return config
