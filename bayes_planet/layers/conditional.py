"""`CondDense`: a conditionally parameterized dense layer (CondConv, Yang et al., 2019).

The layer holds ``num_experts`` kernels and biases and computes, for every example, its own
kernel ``sum_k r_k W_k`` and bias ``sum_k r_k b_k`` from the example's routing weights
``r`` (e.g. a softmax or sigmoid of a small router on the same inputs): a mixture of
experts at the cost of one matmul per example, not one per expert.
"""

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import constraints, initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.checks import check_positive_int

__all__ = ["CondDense"]


def _experts_initializer(initializer, num_experts, name):
    """``[num_experts, *shape]`` initial values, every expert drawn by its own instance of
    ``initializer`` at its own shape (so fans, and scales, are those of one expert)."""
    parts = [initializers.for_weight(initializer, f"{name}_{k}") for k in range(num_experts)]

    def initial_value(shape, dtype=None):
        return tf.stack([tf.convert_to_tensor(part(shape[1:], dtype=dtype)) for part in parts])
    return initial_value


@_register
class CondDense(keras.layers.Layer):
    """Conditionally parameterized dense layer (module docstring).

    ``layer(inputs, routing_weights)``: ``inputs`` ``(batch, in)`` and ``routing_weights``
    ``(batch, num_experts)``; output ``(batch, units)``, example ``i`` through the kernel
    ``sum_k routing_weights[i, k] · kernel[k]`` (and the bias alike).

    ``activation``, ``use_bias``, ``kernel_initializer``, ``bias_initializer``,
    ``kernel_regularizer``, ``bias_regularizer``, ``activity_regularizer``,
    ``kernel_constraint`` and ``bias_constraint`` are as in `keras.layers.Dense`; an
    initializer draws each expert at its own shape ``[in, units]``. ``kernel`` is
    ``[num_experts, in, units]``, ``bias`` ``[num_experts, units]``.

    Args:
      units: output width.
      num_experts: the number of expert kernels (default 1).
    """

    def __init__(self, units, num_experts=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(activity_regularizer=regularizers.get(activity_regularizer), **kwargs)
        self.units = check_positive_int("units", units)
        self.num_experts = check_positive_int("num_experts", num_experts)
        self.activation = keras.activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)

    def build(self, input_shape):
        in_dim = tf.TensorShape(input_shape)[-1]
        if in_dim is None:
            raise ValueError(f"CondDense needs a known last input dimension. Received: "
                             f"input_shape={input_shape}")
        self.kernel = self.add_weight(
            name="kernel", shape=[self.num_experts, int(in_dim), self.units],
            initializer=_experts_initializer(self.kernel_initializer, self.num_experts,
                                             "kernel"),
            regularizer=self.kernel_regularizer, constraint=self.kernel_constraint,
            dtype=self.dtype, trainable=True)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=[self.num_experts, self.units],
                initializer=_experts_initializer(self.bias_initializer, self.num_experts,
                                                 "bias"),
                regularizer=self.bias_regularizer, constraint=self.bias_constraint,
                dtype=self.dtype, trainable=True)
        self.built = True

    def call(self, inputs, routing_weights):
        dtype = self.compute_dtype
        x = tf.cast(tf.convert_to_tensor(inputs), dtype)
        routing = tf.cast(tf.convert_to_tensor(routing_weights), dtype)
        if routing.shape[-1] is not None and routing.shape[-1] != self.num_experts:
            raise ValueError(f"Expected routing weights of width num_experts="
                             f"{self.num_experts}. Received: routing_weights shape "
                             f"{routing.shape}")
        kernels = tf.einsum("bk,kio->bio", routing, tf.cast(self.kernel, dtype))
        outputs = tf.einsum("bi,bio->bo", x, kernels)
        if self.use_bias:
            outputs += tf.matmul(routing, tf.cast(self.bias, dtype))
        return self.activation(outputs) if self.activation is not None else outputs

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)[:-1] + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units, num_experts=self.num_experts,
            activation=keras.activations.serialize(self.activation), use_bias=self.use_bias,
            kernel_initializer=initializers.serialize(self.kernel_initializer),
            bias_initializer=initializers.serialize(self.bias_initializer),
            kernel_regularizer=regularizers.serialize(self.kernel_regularizer),
            bias_regularizer=regularizers.serialize(self.bias_regularizer),
            activity_regularizer=regularizers.serialize(self.activity_regularizer),
            kernel_constraint=constraints.serialize(self.kernel_constraint),
            bias_constraint=constraints.serialize(self.bias_constraint))
        return config
