"""Bayesian embedding layer: `EmbeddingReparameterization`.

``keras.layers.Embedding`` with a distribution over its embedding matrix
(``embeddings_initializer='trainable_normal'``) and the KL to the prior in ``layer.losses``
(``embeddings_regularizer='normal_kl_divergence'``). Each call draws one matrix by
reparameterization, shared by the batch, and looks the inputs' rows up in it; inside
`posterior_mean` the lookup is in the posterior mean.
"""

import tensorflow as tf

from bayes_planet._keras import KERAS3, keras
from bayes_planet.layers import initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, check_dense_extras, sample_weight
from bayes_planet.layers.checks import check_positive_int

__all__ = ["EmbeddingReparameterization"]


def _check_none(name, value):
    if value is not None:
        raise ValueError(f"Expected {name}=None (not for a distribution over the matrix). "
                         f"Received: {name}={value!r}")


@_register
class EmbeddingReparameterization(BayesianLayer, keras.layers.Embedding):
    """Embedding layer whose matrix is sampled by reparameterization (one draw per call).

    Takes `keras.layers.Embedding`'s arguments in its order (Keras 2: ``input_dim, output_dim,
    embeddings_initializer, embeddings_regularizer, activity_regularizer,
    embeddings_constraint, mask_zero, input_length, sparse``; Keras 3: ``input_dim,
    output_dim, embeddings_initializer, embeddings_regularizer, embeddings_constraint,
    mask_zero, weights, lora_rank, lora_alpha, quantization_config``, then
    ``activity_regularizer`` keyword-only) with the Bayesian defaults
    ``embeddings_initializer='trainable_normal'`` (or a Keras initializer for a deterministic
    matrix) and ``embeddings_regularizer='normal_kl_divergence'`` (the KL to N(0, 1)), plus the
    keyword-only ``seed``. ``sparse``, ``weights``, ``lora_*`` and ``quantization_config``
    take their defaults only.

    Input: integer indices ``(batch, ...)``; output ``(batch, ..., output_dim)``.
    """

    if KERAS3:
        def __init__(self, input_dim, output_dim, embeddings_initializer="trainable_normal",
                     embeddings_regularizer="normal_kl_divergence", embeddings_constraint=None,
                     mask_zero=False, weights=None, lora_rank=None, lora_alpha=None,
                     quantization_config=None, *, activity_regularizer=None, seed=None,
                     **kwargs):
            _check_none("weights", weights)
            check_dense_extras(lora_rank, lora_alpha, quantization_config)
            self._init_embedding(input_dim, output_dim, embeddings_initializer,
                                 embeddings_regularizer, activity_regularizer,
                                 embeddings_constraint, mask_zero, seed, kwargs)
    else:
        def __init__(self, input_dim, output_dim, embeddings_initializer="trainable_normal",
                     embeddings_regularizer="normal_kl_divergence", activity_regularizer=None,
                     embeddings_constraint=None, mask_zero=False, input_length=None,
                     sparse=False, *, seed=None, **kwargs):
            if sparse:
                raise ValueError(f"Expected sparse=False. Received: sparse={sparse!r}")
            if input_length is not None:
                kwargs["input_length"] = input_length
            self._init_embedding(input_dim, output_dim, embeddings_initializer,
                                 embeddings_regularizer, activity_regularizer,
                                 embeddings_constraint, mask_zero, seed, kwargs)

    def _init_embedding(self, input_dim, output_dim, embeddings_initializer,
                        embeddings_regularizer, activity_regularizer, embeddings_constraint,
                        mask_zero, seed, kwargs):
        super().__init__(
            input_dim=check_positive_int("input_dim", input_dim),
            output_dim=check_positive_int("output_dim", output_dim),
            embeddings_initializer=initializers.get(embeddings_initializer),
            embeddings_regularizer=regularizers.get(embeddings_regularizer),
            activity_regularizer=activity_regularizer,
            embeddings_constraint=embeddings_constraint,
            mask_zero=mask_zero,
            **kwargs)
        self._init_seed(seed)

    def call(self, inputs, training=None):
        del training
        ids = tf.convert_to_tensor(inputs)
        if not ids.dtype.is_integer:
            ids = tf.cast(ids, tf.int32)
        matrix = sample_weight(self.embeddings, self._next_seed(), self.compute_dtype)
        return tf.gather(matrix, ids)
