"""Bayesian embedding layer: `EmbeddingReparameterization`.

``keras.layers.Embedding`` with a distribution over its embedding matrix
(``embeddings_initializer='trainable_normal'``) and the KL to the prior in ``layer.losses``
(``embeddings_regularizer='normal_kl_divergence'``). Each call draws one matrix by
reparameterization, shared by the batch, and looks the inputs' rows up in it; inside
`posterior_mean` the lookup is in the posterior mean.
"""

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, sample_weight
from bayes_planet.layers.checks import check_positive_int

__all__ = ["EmbeddingReparameterization"]


@_register
class EmbeddingReparameterization(BayesianLayer, keras.layers.Embedding):
    """Embedding layer whose matrix is sampled by reparameterization (one draw per call).

    Args:
      input_dim: the vocabulary size (largest index + 1).
      output_dim: the embedding size.
      embeddings_initializer: the posterior (default ``'trainable_normal'``), or a Keras
        initializer for a deterministic matrix.
      embeddings_regularizer: default ``'normal_kl_divergence'`` (the KL to N(0, 1)).
      activity_regularizer, embeddings_constraint, mask_zero: as Keras' (keyword-only: the two
        Kerases order them differently).
      seed: int or None, for reproducible draws.

    Input: integer indices ``(batch, ...)``; output ``(batch, ..., output_dim)``.
    """

    def __init__(self, input_dim, output_dim, embeddings_initializer="trainable_normal",
                 embeddings_regularizer="normal_kl_divergence", *, activity_regularizer=None,
                 embeddings_constraint=None, mask_zero=False, seed=None, **kwargs):
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
