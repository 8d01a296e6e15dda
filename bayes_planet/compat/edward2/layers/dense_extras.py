"""edward2's ``DenseMultihead`` and ``CondDense`` over `bayes_planet.layers.DenseMultihead` and
`bayes_planet.layers.CondDense`."""

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments

__all__ = ["CondDense", "DenseMultihead"]

_DENSE = dict(activation=None, use_bias=True, kernel_initializer="glorot_uniform",
              bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
              activity_regularizer=None, kernel_constraint=None, bias_constraint=None)


@register
class DenseMultihead(Edward2Arguments, _bl.DenseMultihead):
    """edward2's ``DenseMultihead(units, ensemble_size=1, ...)``: output ``(batch,
    ensemble_size, units)`` (the library's default ``ensemble_size`` is 4)."""

    edward2_signature = signature("units", ensemble_size=1, **_DENSE)


@register
class CondDense(Edward2Arguments, _bl.CondDense):
    """edward2's ``CondDense(units, num_experts=1, ...)``, called as ``layer(inputs,
    routing_weights)``; the expert kernels are ``layer.kernel`` ``[num_experts, in, units]``
    (edward2's ``cond_dense_kernel`` ``[num_experts, in · units]``, the same values) and
    ``layer.bias``."""

    edward2_signature = signature("units", num_experts=1, **_DENSE)

    @property
    def cond_dense_kernel(self):
        return self.kernel

    @property
    def cond_dense_bias(self):
        return self.bias
