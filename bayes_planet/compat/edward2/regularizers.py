"""edward2's ``ed.regularizers``: its names over `bayes_planet.layers.regularizers`.

The KL regularizers are the library's (closed forms on the posterior's moments; they accept
a `RandomVariable` or a `tfp` distribution as edward2's do); `get` adds edward2's rule that
``''`` means no regularizer.
"""

from bayes_planet.compat.edward2._bridge import compat_get, register
from bayes_planet.layers import regularizers as _lib
from bayes_planet.layers.regularizers import (
    CauchyKLDivergence,
    HalfCauchyKLDivergence,
    LogNormalKLDivergence,
    LogUniformKLDivergence,
    NormalKLDivergence,
    NormalKLDivergenceWithTiedMean,
    UniformKLDivergence,
)

__all__ = [
    "CauchyKLDivergence",
    "HalfCauchyKLDivergence",
    "LogNormalKLDivergence",
    "LogUniformKLDivergence",
    "NormalEmpiricalBayesKLDivergence",
    "NormalKLDivergence",
    "NormalKLDivergenceWithTiedMean",
    "UniformKLDivergence",
    "get",
    "serialize",
]


@register
class NormalEmpiricalBayesKLDivergence(_lib.NormalEmpiricalBayesKLDivergence):
    """edward2's ``NormalEmpiricalBayesKLDivergence(mean, variance_concentration=2.01,
    variance_scale=0.101, scale_factor)``: the library's with edward2's inverse-gamma
    hyperprior on by default."""

    def __init__(self, mean=0.0, variance_concentration=2.01, variance_scale=0.101,
                 scale_factor=1.0, dataset_size=None):
        super().__init__(mean, scale_factor, dataset_size,
                         variance_concentration=variance_concentration,
                         variance_scale=variance_scale)


#: edward2's aliases; the classes' own names resolve too.
_ALIASES = {
    "normal_kl_divergence": NormalKLDivergence,
    "normal_kl_divergence_with_tied_mean": NormalKLDivergenceWithTiedMean,
    "normal_empirical_bayes_kl_divergence": NormalEmpiricalBayesKLDivergence,
    "log_uniform_kl_divergence": LogUniformKLDivergence,
    "log_normal_kl_divergence": LogNormalKLDivergence,
    "cauchy_kl_divergence": CauchyKLDivergence,
    "half_cauchy_kl_divergence": HalfCauchyKLDivergence,
    "uniform_kl_divergence": UniformKLDivergence,
}


def get(identifier, value=None):
    """edward2's ``regularizers.get``: None for None or ``''``; an edward2 name (snake case or
    its class name); else `bayes_planet.layers.regularizers.get` (the library's names, Keras')."""
    if isinstance(identifier, str) and not identifier:
        return None
    return compat_get(identifier, value, _ALIASES, _lib.get)


def serialize(regularizer):
    return _lib.serialize(regularizer)
