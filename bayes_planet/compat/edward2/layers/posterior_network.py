"""edward2's ``ed.layers.PosteriorNetworkLayer`` over `bayes_planet.layers.PosteriorNetwork`."""

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments

__all__ = ["PosteriorNetworkLayer"]


@register
class PosteriorNetworkLayer(Edward2Arguments, _bl.PosteriorNetwork):
    """edward2's ``PosteriorNetworkLayer(num_classes, flow_type='maf', flow_depth=8,
    flow_width=None, class_counts=None, name='PosteriorNetworkLayer')``
    (`bayes_planet.layers.PosteriorNetwork`; edward2's default flow is ``'maf'``, the
    library's ``'radial'``).

    ``layer(z, return_probs=True)`` gives the Dirichlet mean, as in edward2. edward2's one
    MAF of ``flow_depth`` hidden layers is here ``flow_depth`` masked affine transforms of
    one hidden layer each (the same density family); edward2's batch-norm bijectors
    inside every flow are left out (the layer's batch normalization of the latent is kept).
    """

    edward2_signature = signature("num_classes", flow_type="maf", flow_depth=8,
                                  flow_width=None, class_counts=None,
                                  name="PosteriorNetworkLayer")
    edward2_renamed = {"flow_type": "flow"}

    @property
    def flow_type(self):
        return self.flow

    def get_config(self):
        config = super().get_config()
        config["flow_type"] = config.pop("flow")
        return config

    def call(self, inputs, training=None, return_probs=False):
        return super().call(inputs, training=training, probabilities=return_probs)
