"""Hierarchical (horseshoe) Bayesian layers: `DenseHierarchical`, `Conv2DHierarchical`.

The kernel is written non-centered, ``W'[i, j] = W[i, j] · λ · τ`` (Louizos et al., 2017,
"Bayesian Compression for Deep Learning"): a normal ``W``, one *local* scale ``λ`` per group of
weights (a dense layer's input unit: its row ``i``; a convolution's output filter ``j``) and one
*global* scale ``τ`` for the whole kernel. Under half-Cauchy priors on the scales
(``HalfCauchy(0, 1)`` on ``λ``, ``HalfCauchy(0, 1e-5)`` on ``τ``) the kernel's prior is the
horseshoe (Carvalho et al., 2009), which shrinks whole units towards zero; the scales' posteriors
are trainable half-Cauchys (`initializers.TrainableHalfCauchy`) whose KLs
(`regularizers.HalfCauchyKLDivergence`, single-draw estimates) join the kernel's in
``layer.losses``: three losses.

Each call draws the scales once (reparameterized, shared by the batch) and the kernel by the
layer's estimator: local reparameterization for the dense layer (the input scaled by ``λ τ``),
Flipout for the convolution (the output scaled by ``λ τ``). Inside `posterior_mean` the scales
are their posteriors' medians. Arguments are the Keras twin's (``Dense``, ``Conv2D``) with the
Bayesian defaults, plus the keyword-only scale initializers and regularizers and ``seed``.
"""

import tensorflow as tf

from bayes_planet.layers import _compat, estimators, initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import sample_weight
from bayes_planet.layers.conv import Conv2DFlipout
from bayes_planet.layers.dense import DenseLocalReparameterization
from bayes_planet.layers.noise import split_seed

__all__ = ["GLOBAL_SCALE_PRIOR", "LOCAL_SCALE_PRIOR", "SCALE_POSTERIOR", "Conv2DHierarchical",
           "DenseHierarchical"]

#: The scales' posterior (``λ``, ``τ``).
SCALE_POSTERIOR = "trainable_half_cauchy"
#: KL to HalfCauchy(0, 1), the local scales' prior.
LOCAL_SCALE_PRIOR = "half_cauchy_kl_divergence"
#: KL to HalfCauchy(0, 1e-5), the global scale's prior (a config: a fresh regularizer per layer).
GLOBAL_SCALE_PRIOR = {"class_name": "HalfCauchyKLDivergence",
                      "config": {"loc": 0.0, "scale": 1e-5}}


class _Scales:
    """The local and global scale weights of a hierarchical layer."""

    def _init_scales(self, local_scale_initializer, global_scale_initializer,
                     local_scale_regularizer, global_scale_regularizer):
        if isinstance(global_scale_regularizer, dict):
            global_scale_regularizer = dict(global_scale_regularizer)  # the default: a copy
        self.local_scale_initializer = initializers.get(local_scale_initializer)
        self.global_scale_initializer = initializers.get(global_scale_initializer)
        self.local_scale_regularizer = regularizers.get(local_scale_regularizer)
        self.global_scale_regularizer = regularizers.get(global_scale_regularizer)

    def _build_scales(self, groups):
        self.local_scale = self.add_weight(
            name="local_scale", shape=[groups], initializer=self.local_scale_initializer,
            regularizer=self.local_scale_regularizer, dtype=self.dtype, trainable=True)
        self.global_scale = self.add_weight(
            name="global_scale", shape=[], initializer=self.global_scale_initializer,
            regularizer=self.global_scale_regularizer, dtype=self.dtype, trainable=True)

    def scales(self, seed, dtype):
        """One draw of ``λ · τ`` (shape ``[groups]``) in ``dtype``."""
        local_seed, global_seed = split_seed(seed, 2)
        return (sample_weight(self.local_scale, local_seed, dtype)
                * sample_weight(self.global_scale, global_seed, dtype))

    def _scales_config(self):
        return dict(
            local_scale_initializer=initializers.serialize(self.local_scale_initializer),
            global_scale_initializer=initializers.serialize(self.global_scale_initializer),
            local_scale_regularizer=regularizers.serialize(self.local_scale_regularizer),
            global_scale_regularizer=regularizers.serialize(self.global_scale_regularizer))


@_register
class DenseHierarchical(_Scales, DenseLocalReparameterization):
    """Dense layer with a horseshoe kernel ``W[i, j] · λ_i · τ`` (one local scale per input
    unit; see the module docstring), by local reparameterization given the scales.

    Args: those of `keras.layers.Dense` (Bayesian defaults as `DenseLocalReparameterization`),
    and keyword-only ``local_scale_initializer``, ``global_scale_initializer`` (default
    ``'trainable_half_cauchy'``), ``local_scale_regularizer`` (KL to HalfCauchy(0, 1)),
    ``global_scale_regularizer`` (KL to HalfCauchy(0, 1e-5)), ``seed``.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="trainable_normal", bias_initializer="zeros",
                 kernel_regularizer="normal_kl_divergence", bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 lora_rank=None, lora_alpha=None, quantization_config=None, *,
                 local_scale_initializer=SCALE_POSTERIOR,
                 global_scale_initializer=SCALE_POSTERIOR,
                 local_scale_regularizer=LOCAL_SCALE_PRIOR,
                 global_scale_regularizer=GLOBAL_SCALE_PRIOR, seed=None, **kwargs):
        super().__init__(units, activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer, activity_regularizer,
                         kernel_constraint, bias_constraint, lora_rank, lora_alpha,
                         quantization_config, seed=seed, **kwargs)
        self._init_scales(local_scale_initializer, global_scale_initializer,
                          local_scale_regularizer, global_scale_regularizer)

    def build(self, input_shape):
        super().build(input_shape)
        self._build_scales(int(tf.TensorShape(input_shape)[-1]))

    def call(self, inputs, training=None):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        return super().call(x * self.scales(self._next_seed(), x.dtype), training=training)

    def get_config(self):
        config = super().get_config()
        config.update(self._scales_config())
        return config


@_register
class Conv2DHierarchical(_Scales, Conv2DFlipout):
    """Conv2D with a horseshoe kernel ``W[..., j] · λ_j · τ`` (one local scale per output
    filter; see the module docstring), by Flipout given the scales.

    Args: those of `keras.layers.Conv2D` (Bayesian defaults as `Conv2DFlipout`), and the
    keyword-only scale arguments of `DenseHierarchical` and ``seed``.
    """

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="trainable_normal", bias_initializer="zeros",
                 kernel_regularizer="normal_kl_divergence", bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, *,
                 local_scale_initializer=SCALE_POSTERIOR,
                 global_scale_initializer=SCALE_POSTERIOR,
                 local_scale_regularizer=LOCAL_SCALE_PRIOR,
                 global_scale_regularizer=GLOBAL_SCALE_PRIOR, seed=None, **kwargs):
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate,
                         groups, activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer, activity_regularizer,
                         kernel_constraint, bias_constraint, seed=seed, **kwargs)
        self._init_scales(local_scale_initializer, global_scale_initializer,
                          local_scale_regularizer, global_scale_regularizer)

    def build(self, input_shape):
        super().build(input_shape)
        self._build_scales(self.filters)

    def call(self, inputs, training=None):
        del training
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        x, op = _compat.conv_input_and_op(self, x)
        kernel_seed, bias_seed, scale_seed = split_seed(self._next_seed(), 3)
        channel_axis = 1 if _compat.channels_first(self) else -1
        out = estimators.flipout(op, x, self.kernel, kernel_seed, channel_axis)
        shape = [1] * out.shape.rank
        shape[channel_axis] = self.filters
        out = out * tf.reshape(self.scales(scale_seed, out.dtype), shape)
        if self.use_bias:
            out = out + tf.reshape(sample_weight(self.bias, bias_seed, out.dtype), shape)
        return self.activation(out) if self.activation is not None else out

    def get_config(self):
        config = super().get_config()
        config.update(self._scales_config())
        return config
