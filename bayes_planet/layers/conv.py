"""Bayesian convolutional layers (1-D and 2-D), one class per estimator.

Each class is the Keras convolution with a distribution over its kernel
(``kernel_initializer='trainable_normal'``) and the KL to the prior as regularizer
(``kernel_regularizer='normal_kl_divergence'``); arguments and shapes are the Keras
layer's plus ``seed``. The estimators are those of `bayes_planet.layers.estimators`
with the convolution as the linear op.
"""

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import estimators, initializers, regularizers
from bayes_planet.layers.base import (
    BayesianLayer,
    check_positive_int,
    sample_weight,
    split_seed,
)

__all__ = [
    "Conv1DFlipout",
    "Conv1DReparameterization",
    "Conv2DFlipout",
    "Conv2DLocalReparameterization",
    "Conv2DReparameterization",
]

_register = keras.saving.register_keras_serializable(package="bayes_planet")


class _BayesianConv(BayesianLayer):
    """Mixin for a Keras ``Conv*`` class; the subclass sets ``_estimator``.

    Args: as the Keras convolution (``filters``, ``kernel_size``, ``strides``,
      ``padding``, ``data_format``, ``dilation_rate``, ``activation``, ``use_bias``,
      ...), with Bayesian defaults for ``kernel_initializer`` and
      ``kernel_regularizer``, plus ``seed``. ``groups`` must be 1.
    """

    _estimator = None

    def __init__(self, filters, kernel_size, kernel_initializer="trainable_normal",
                 bias_initializer="zeros", kernel_regularizer="normal_kl_divergence",
                 bias_regularizer=None, seed=None, **kwargs):
        if kwargs.get("groups", 1) != 1:
            raise ValueError(f"Expected groups=1. Received: groups={kwargs['groups']}")
        super().__init__(
            filters=check_positive_int("filters", filters),
            kernel_size=kernel_size,
            kernel_initializer=initializers.get(kernel_initializer),
            bias_initializer=initializers.get(bias_initializer),
            kernel_regularizer=regularizers.get(kernel_regularizer),
            bias_regularizer=regularizers.get(bias_regularizer),
            **kwargs,
        )
        self._init_seed(seed)

    def call(self, inputs, training=None):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        if self._is_causal:
            x = tf.pad(x, self._compute_causal_padding(x))
        kernel_seed, bias_seed = split_seed(self._next_seed(), 2)
        channel_axis = 1 if self._channels_first else -1
        out = self._estimator(self.convolution_op, x, self.kernel, kernel_seed, channel_axis)
        if self.use_bias:
            shape = [1] * out.shape.rank
            shape[channel_axis] = self.filters
            out = out + tf.reshape(sample_weight(self.bias, bias_seed, out.dtype), shape)
        return self.activation(out) if self.activation is not None else out


_DOC = """{family} with the {estimator} estimator ({cite}).

    A Bayesian `keras.layers.{family}`: same arguments and shapes, plus ``seed``;
    the kernel is a distribution (``trainable_normal``) and its KL to the prior
    (``normal_kl_divergence``) is in ``layer.losses``. {how}
    """
_REPARAM = ("reparameterization", "Blundell et al., 2015",
            "One kernel sample per call, shared by the batch.")
_FLIPOUT = ("Flipout", "Wen et al., 2018",
            "Per-example random sign flips over input/output channels decorrelate the "
            "batch; costs two convolutions.")
_LOCAL = ("local reparameterization", "Kingma et al., 2015",
          "Samples each output from N(conv(x, M), conv(x², σ²)); two convolutions.")


def _make(name, family, estimator, doc):
    cls = type(name, (_BayesianConv, family), {
        "_estimator": staticmethod(estimator),
        "__doc__": _DOC.format(family=family.__name__, estimator=doc[0], cite=doc[1],
                               how=doc[2]),
        "__module__": __name__,
    })
    return _register(cls)


Conv1DReparameterization = _make("Conv1DReparameterization", keras.layers.Conv1D,
                                 estimators.reparameterization, _REPARAM)
Conv1DFlipout = _make("Conv1DFlipout", keras.layers.Conv1D, estimators.flipout, _FLIPOUT)
Conv2DReparameterization = _make("Conv2DReparameterization", keras.layers.Conv2D,
                                 estimators.reparameterization, _REPARAM)
Conv2DFlipout = _make("Conv2DFlipout", keras.layers.Conv2D, estimators.flipout, _FLIPOUT)
Conv2DLocalReparameterization = _make("Conv2DLocalReparameterization", keras.layers.Conv2D,
                                      estimators.local_reparameterization, _LOCAL)
