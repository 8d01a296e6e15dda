"""`DenseMultihead`: one dense layer holding the output heads of ``ensemble_size`` members.

A multi-head output (e.g. of an ensemble that shares its body, or a multi-input
multi-output network) is a Dense layer of ``ensemble_size · units`` outputs, read as
``ensemble_size`` heads of ``units``: output ``(..., ensemble_size, units)``, head ``e``
the columns ``[e · units, (e + 1) · units)`` of the one kernel. Unlike the BatchEnsemble
layers every head sees every example (no ensemble batch convention).
"""

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.checks import check_positive_int
from bayes_planet.layers.ensemble.dense import ENSEMBLE_SIZE

__all__ = ["DenseMultihead"]


@_register
class DenseMultihead(keras.layers.Dense):
    """``ensemble_size`` dense heads of ``units`` outputs in one kernel (module docstring).

    Takes the arguments of `keras.layers.Dense` (same order; ``units`` per head), plus the
    keyword-only ``ensemble_size`` (default 4). Input ``(batch, ..., in)``; output
    ``(batch, ..., ensemble_size, units)``; the Keras ``kernel`` is ``[in, ensemble_size ·
    units]`` and ``head_units`` is ``units``.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, *, ensemble_size=ENSEMBLE_SIZE,
                 **kwargs):
        self.head_units = check_positive_int("units", units)
        self.ensemble_size = check_positive_int("ensemble_size", ensemble_size)
        super().__init__(self.head_units * self.ensemble_size, activation=activation,
                         use_bias=use_bias, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                         **kwargs)

    def call(self, inputs):
        outputs = super().call(inputs)
        heads = tf.concat([tf.shape(outputs)[:-1], [self.ensemble_size, self.head_units]], 0)
        shaped = tf.reshape(outputs, heads)
        shaped.set_shape(outputs.shape[:-1].concatenate([self.ensemble_size, self.head_units]))
        return shaped

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)[:-1] + (self.ensemble_size, self.head_units)

    def get_config(self):
        config = super().get_config()
        config.update(units=self.head_units, ensemble_size=self.ensemble_size)
        return config
