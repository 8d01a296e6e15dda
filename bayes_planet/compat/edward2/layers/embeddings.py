"""edward2's ``EmbeddingReparameterization(input_dim, output_dim, embeddings_initializer,
embeddings_regularizer, activity_regularizer, embeddings_constraint, mask_zero, input_length)``
over `bayes_planet.layers.EmbeddingReparameterization`. ``input_length`` (the sequence length
Keras 2 used for static output shapes; Keras 3 has none) is accepted as None only."""

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments

__all__ = ["EmbeddingReparameterization"]


@register
class EmbeddingReparameterization(Edward2Arguments, _bl.EmbeddingReparameterization):
    """edward2's ``EmbeddingReparameterization``."""

    edward2_signature = signature(
        "input_dim", "output_dim", embeddings_initializer="trainable_normal",
        embeddings_regularizer="normal_kl_divergence", activity_regularizer=None,
        embeddings_constraint=None, mask_zero=False, input_length=None)

    edward2_dropped = {"input_length": (None,)}

    def call_weights(self):
        """Kept for edward2 code: a no-op (every call draws its own matrix)."""
