"""edward2's ``ed.layers.NeuralProcess`` and ``Attention`` over the library's
(`bayes_planet.layers.NeuralProcess`, `NeuralProcessAttention`): the same arguments; a call
returns the predictive ``tfp`` distribution itself, as edward2's."""

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register

__all__ = ["Attention", "NeuralProcess"]

Attention = _bl.NeuralProcessAttention


@register
class NeuralProcess(_bl.NeuralProcess):
    """edward2's ``NeuralProcess(latent_encoder_sizes, num_latents, decoder_sizes,
    use_deterministic_path=True, deterministic_encoder_sizes=None, attention_wrapper=None)``."""

    def call(self, query, target_y=None):
        return super().call(query, target_y).distribution
