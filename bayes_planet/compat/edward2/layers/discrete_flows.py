"""edward2's discrete flows over the library's (`bayes_planet.layers.discrete_flows`):
``DiscreteAutoregressiveFlow(layer, temperature)``, ``DiscreteBipartiteFlow(layer, mask,
temperature)``, ``SinkhornAutoregressiveFlow(layer, temperature)``.

Called on a random variable, a flow returns the random variable of the flowed tokens whose
distribution has edward2's ``base`` (the base distribution) besides tfp's ``distribution``.
"""

import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments
from bayes_planet.layers.flows import LayerBijector

__all__ = ["DiscreteAutoregressiveFlow", "DiscreteBipartiteFlow", "SinkhornAutoregressiveFlow"]


class _TransformedDistribution(tfp.distributions.TransformedDistribution):
    """tfp's transformed distribution with edward2's name ``base`` of the base distribution."""

    @property
    def base(self):
        return self.distribution


class _Edward2DiscreteFlow(Edward2Arguments):
    """edward2's ``layer`` (the library's ``network``) and its random variable outputs."""

    edward2_renamed = {"layer": "network"}

    def call(self, inputs):
        if not isinstance(inputs, _bl.RandomVariable):
            return super().call(inputs)
        distribution = _TransformedDistribution(inputs.distribution, LayerBijector(self))
        return _bl.RandomVariable(distribution,
                                  value=lambda: self.forward(tf.convert_to_tensor(inputs)))

    def get_config(self):
        config = super().get_config()
        config["layer"] = config.pop("network")
        return config


@register
class DiscreteAutoregressiveFlow(_Edward2DiscreteFlow, _bl.DiscreteAutoregressiveFlow):
    """edward2's ``DiscreteAutoregressiveFlow(layer, temperature)``."""

    edward2_signature = signature("layer", "temperature")


@register
class DiscreteBipartiteFlow(_Edward2DiscreteFlow, _bl.DiscreteBipartiteFlow):
    """edward2's ``DiscreteBipartiteFlow(layer, mask, temperature)``."""

    edward2_signature = signature("layer", "mask", "temperature")


@register
class SinkhornAutoregressiveFlow(_Edward2DiscreteFlow, _bl.SinkhornAutoregressiveFlow):
    """edward2's ``SinkhornAutoregressiveFlow(layer, temperature)`` (20 Sinkhorn iterations;
    the hard permutation is the best assignment of the network's scores, see the library's)."""

    edward2_signature = signature("layer", "temperature")
