"""edward2's noise contrastive prior layers over the library's (`bayes_planet.layers.ncp`):
``NCPNormalPerturb(mean=0., stddev=1., seed=None)`` (``seed`` positional, as edward2's),
``NCPCategoricalPerturb(input_dim, probs=0.1)`` and ``NCPNormalOutput(mean=0., stddev=1.)``."""

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments

__all__ = ["NCPCategoricalPerturb", "NCPNormalOutput", "NCPNormalPerturb"]

NCPCategoricalPerturb = _bl.NCPCategoricalPerturb
NCPNormalOutput = _bl.NCPNormalOutput


@register
class NCPNormalPerturb(Edward2Arguments, _bl.NCPNormalPerturb):
    """edward2's ``NCPNormalPerturb(mean=0., stddev=1., seed=None)``."""

    edward2_signature = signature(mean=0.0, stddev=1.0, seed=None)
