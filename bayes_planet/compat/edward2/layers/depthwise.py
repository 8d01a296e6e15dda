"""edward2's ``DepthwiseConv2DBatchEnsemble`` over
`bayes_planet.layers.DepthwiseConv2DBatchEnsemble`."""

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments

__all__ = ["DepthwiseConv2DBatchEnsemble"]


class _SharedDepthwise:
    """Placed right after the compat class, so that edward2's
    ``super(ed.layers.DepthwiseConv2DBatchEnsemble, layer).call(x)`` is, as there, the shared
    depthwise convolution without the members' factors and bias."""

    def call(self, inputs, *args, **kwargs):
        del args, kwargs
        return self.depthwise(inputs)


@register
class DepthwiseConv2DBatchEnsemble(_SharedDepthwise, Edward2Arguments,
                                   _bl.DepthwiseConv2DBatchEnsemble):
    """edward2's ``DepthwiseConv2DBatchEnsemble(kernel_size, ensemble_size=4, ...)``: fast
    weights start at ``'ones'`` (the library's: random signs); ``ensemble_bias`` is the
    library's per-member ``bias``; ``channels_last`` only."""

    edward2_signature = signature(
        "kernel_size", ensemble_size=4, alpha_initializer="ones", gamma_initializer="ones",
        strides=(1, 1), padding="valid", depth_multiplier=1, data_format=None, activation=None,
        use_bias=True, depthwise_initializer="glorot_uniform", bias_initializer="zeros",
        depthwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
        depthwise_constraint=None, bias_constraint=None)

    @property
    def ensemble_bias(self):
        return self.bias

    def call(self, inputs):
        return _bl.DepthwiseConv2DBatchEnsemble.call(self, inputs)
