"""edward2's ``ed.initializers``: its names and defaults over `bayes_planet.layers.initializers`.

The posteriors are the library's, with edward2's defaults (``TrainableNormal``: means
``TruncatedNormal(stddev=1e-5)``, raw stddevs ``TruncatedNormal(mean=-3, stddev=0.1)`` under
``softplus``; the library's own: Glorot-uniform means, ``exp`` of ``TruncatedNormal(-5, 0.1)``)
and edward2's view of a weight (`_bridge.Edward2Weight`: ``distribution`` as an attribute, the
raw stddev variable as ``stddev``). `get` resolves edward2's names first, then the library's
and Keras'.
"""

from bayes_planet._keras import keras
from bayes_planet.compat.edward2._bridge import Edward2Weight, compat_get, register
from bayes_planet.layers import initializers as _lib
from bayes_planet.layers.initializers import OrthogonalRandomFeatures

__all__ = [
    "OrthogonalRandomFeatures",
    "RandomSign",
    "TrainableCauchy",
    "TrainableHalfCauchy",
    "TrainableLogNormal",
    "TrainableMixtureOfDeltas",
    "TrainableDeterministic",
    "TrainableGlorotNormal",
    "TrainableHeNormal",
    "TrainableNormal",
    "get",
    "serialize",
]


def _no_weight_regularizers(cls, **regularizers):
    """edward2 lets a posterior's own variables carry Keras regularizers; the library's
    posteriors put every penalty in the layer's KL regularizer."""
    given = {k: v for k, v in regularizers.items() if v is not None}
    if given:
        raise ValueError(f"{cls}: regularizers on a posterior's own variables are not "
                         f"implemented (put the penalty in the layer's *_regularizer). "
                         f"Received: {given}")


def _small_mean():
    return keras.initializers.TruncatedNormal(stddev=1e-5)


def _raw_stddev():
    return keras.initializers.TruncatedNormal(mean=-3.0, stddev=0.1)


@register
class TrainableNormal(Edward2Weight, _lib.TrainableNormal):
    """edward2's ``TrainableNormal``: `bayes_planet.layers.initializers.TrainableNormal` with
    edward2's defaults; ``stddev`` is the raw (unconstrained) stddev variable."""

    def __init__(self, mean_initializer=None, stddev_initializer=None, mean_regularizer=None,
                 stddev_regularizer=None, mean_constraint=None, stddev_constraint="softplus",
                 seed=None, **kwargs):
        _no_weight_regularizers(type(self).__name__, mean_regularizer=mean_regularizer,
                                stddev_regularizer=stddev_regularizer)
        super().__init__(
            mean_initializer=_small_mean() if mean_initializer is None else mean_initializer,
            stddev_initializer=_raw_stddev() if stddev_initializer is None
            else stddev_initializer,
            mean_constraint=mean_constraint, stddev_constraint=stddev_constraint, seed=seed,
            **kwargs)

    @property
    def stddev(self):
        return self.raw_stddev


@register
class TrainableHeNormal(TrainableNormal):
    """edward2's ``TrainableHeNormal``: He-normal means, edward2's stddevs."""

    def __init__(self, seed=None, mean_initializer=None, **kwargs):
        super().__init__(mean_initializer=mean_initializer or keras.initializers.HeNormal(seed),
                         seed=seed, **kwargs)


@register
class TrainableGlorotNormal(TrainableNormal):
    """edward2's ``TrainableGlorotNormal``: Glorot-normal means, edward2's stddevs."""

    def __init__(self, seed=None, mean_initializer=None, **kwargs):
        super().__init__(
            mean_initializer=mean_initializer or keras.initializers.GlorotNormal(seed),
            seed=seed, **kwargs)


@register
class TrainableDeterministic(Edward2Weight, _lib.TrainableDeterministic):
    """edward2's ``TrainableDeterministic``: a point mass at a trainable location."""

    def __init__(self, loc_initializer="glorot_uniform", loc_regularizer=None,
                 loc_constraint=None, seed=None, **kwargs):
        _no_weight_regularizers(type(self).__name__, loc_regularizer=loc_regularizer)
        if loc_constraint is not None:
            raise ValueError("TrainableDeterministic: loc_constraint is not implemented. "
                             f"Received: loc_constraint={loc_constraint!r}")
        super().__init__(loc_initializer=loc_initializer, **kwargs)
        self.seed = seed  # Kept for the config, unused (as in edward2).

    def get_config(self):
        return {**super().get_config(), "seed": self.seed}


@register
class RandomSign(_lib.RandomSign):
    """edward2's ``RandomSign(probs=1.0)``: ±1 entries, +1 with probability ``probs``
    (edward2's default 1.0: all +1)."""

    def __init__(self, probs=1.0, seed=None, dtype=None):
        super().__init__(probability=probs, seed=seed)
        self.dtype = dtype

    @property
    def probs(self):
        return self.probability

    def __call__(self, shape, dtype=None, **kwargs):
        return super().__call__(shape, dtype or self.dtype, **kwargs)

    def get_config(self):
        return {"probs": self.probability, "seed": self.seed}


class _LocationScale(Edward2Weight):
    """edward2's ``(loc_*, scale_*)`` arguments of a location-scale posterior, mapped onto the
    library's (``mean_*``, ``stddev_*``), with edward2's defaults (locations
    ``TruncatedNormal(stddev=1e-5)``, raw scales ``TruncatedNormal(-3, 0.1)`` under
    ``softplus``). The location and raw scale variables are the library's ``mean`` and
    ``stddev`` (edward2's ``loc`` and ``scale``: ``loc()`` is a method here)."""

    def __init__(self, loc_initializer=None, scale_initializer=None, loc_regularizer=None,
                 scale_regularizer=None, loc_constraint=None, scale_constraint="softplus",
                 seed=None, **kwargs):
        _no_weight_regularizers(type(self).__name__, loc_regularizer=loc_regularizer,
                                scale_regularizer=scale_regularizer)
        kwargs.setdefault("mean_initializer",
                          _small_mean() if loc_initializer is None else loc_initializer)
        kwargs.setdefault("stddev_initializer",
                          _raw_stddev() if scale_initializer is None else scale_initializer)
        kwargs.setdefault("mean_constraint", loc_constraint)
        kwargs.setdefault("stddev_constraint", scale_constraint)
        super().__init__(seed=seed, **kwargs)


@register
class TrainableLogNormal(_LocationScale, _lib.TrainableLogNormal):
    """edward2's ``TrainableLogNormal`` (`bayes_planet.layers.initializers`)."""


@register
class TrainableHalfCauchy(_LocationScale, _lib.TrainableHalfCauchy):
    """edward2's ``TrainableHalfCauchy`` (`bayes_planet.layers.initializers`)."""


@register
class TrainableCauchy(_LocationScale, _lib.TrainableCauchy):
    """edward2's ``TrainableCauchy`` (`bayes_planet.layers.initializers`)."""


@register
class TrainableMixtureOfDeltas(Edward2Weight, _lib.TrainableMixtureOfDeltas):
    """edward2's ``TrainableMixtureOfDeltas(num_components=5, loc_initializer=he_normal)``."""

    def __init__(self, num_components=5, loc_initializer="he_normal", loc_regularizer=None,
                 loc_constraint=None, seed=None, **kwargs):
        _no_weight_regularizers(type(self).__name__, loc_regularizer=loc_regularizer)
        if loc_constraint is not None:
            raise ValueError("TrainableMixtureOfDeltas: loc_constraint is not implemented. "
                             f"Received: loc_constraint={loc_constraint!r}")
        super().__init__(num_components=num_components, loc_initializer=loc_initializer,
                         **kwargs)
        self.seed = seed  # Kept for the config, unused (as in edward2).

    def get_config(self):
        return {**super().get_config(), "seed": self.seed}


#: edward2's aliases (its module-level snake-case names); the classes' own names resolve too.
_ALIASES = {
    "trainable_normal": TrainableNormal,
    "trainable_he_normal": TrainableHeNormal,
    "trainable_glorot_normal": TrainableGlorotNormal,
    "trainable_deterministic": TrainableDeterministic,
    "random_sign": RandomSign,
    "trainable_log_normal": TrainableLogNormal,
    "trainable_half_cauchy": TrainableHalfCauchy,
    "trainable_cauchy": TrainableCauchy,
    "trainable_mixture_of_deltas": TrainableMixtureOfDeltas,
    "orthogonal_random_features": OrthogonalRandomFeatures,
}


def get(identifier, value=None):
    """edward2's ``initializers.get``: an edward2 name (snake case or its class name), a config,
    a callable, or anything `bayes_planet.layers.initializers.get` resolves (the library's
    names, Keras'); ``value`` is what to resolve when ``identifier`` is only a key."""
    return compat_get(identifier, value, _ALIASES, _lib.get)


def serialize(initializer):
    return _lib.serialize(initializer)
