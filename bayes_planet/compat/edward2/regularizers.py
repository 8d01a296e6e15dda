"""edward2's ``ed.regularizers``: its names over `bayes_planet.layers.regularizers`.

The KL regularizers are the library's (closed forms on the posterior's moments; they accept
a `RandomVariable` or a `tfp` distribution as edward2's do); `get` adds edward2's rule that
``''`` means no regularizer.
"""

from bayes_planet.compat.edward2 import initializers
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
    "TrainableNormalKLDivergenceStdDev",
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


@register
class TrainableNormalKLDivergenceStdDev(_lib.TrainableNormalKLDivergenceStdDev):
    """edward2's ``TrainableNormalKLDivergenceStdDev(mean=0., stddev_initializer=...,
    stddev_regularizer=None, stddev_constraint='softplus', scale_factor=1., seed=None)``:
    the library's, whose ``stddev`` is edward2's unconstrained variable (the prior's stddevs
    are ``stddev_constraint(stddev)``). A regularizer on the stddevs and other constraints
    are not implemented (one-line errors); ``seed`` changes nothing (the initializer's own
    seed applies)."""

    def __init__(self, mean=0.0, stddev_initializer=None, stddev_regularizer=None,
                 stddev_constraint="softplus", scale_factor=1.0, seed=None, **kwargs):
        del seed
        for name, value, allowed in (("stddev_regularizer", stddev_regularizer, None),
                                     ("stddev_constraint", stddev_constraint, "softplus")):
            if value != allowed:
                raise ValueError("TrainableNormalKLDivergenceStdDev: bayes_planet implements "
                                 f"{name}={allowed!r} only. Received: {name}={value!r}")
        if stddev_initializer is not None:
            stddev_initializer = initializers.get(stddev_initializer)
        super().__init__(mean, stddev_initializer, scale_factor, **kwargs)

    @property
    def stddev(self):
        return self.raw_stddev


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
    "trainable_normal_kl_divergence_stddev": TrainableNormalKLDivergenceStdDev,
}


def get(identifier, value=None):
    """edward2's ``regularizers.get``: None for None or ``''``; an edward2 name (snake case or
    its class name); else `bayes_planet.layers.regularizers.get` (the library's names, Keras')."""
    if isinstance(identifier, str) and not identifier:
        return None
    return compat_get(identifier, value, _ALIASES, _lib.get)


def serialize(regularizer):
    return _lib.serialize(regularizer)
