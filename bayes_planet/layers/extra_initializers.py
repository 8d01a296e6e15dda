"""Initializers beyond the factorized normal: positive and heavy-tailed posteriors, a mixture of
point masses, and orthogonal random features.

Posteriors (`initializers.DistributionInitializer`, resolved by `initializers.get`):

* `TrainableLogNormal` (``'trainable_log_normal'``): ``w = exp(μ + σ ε)``, a positive weight
  (a scale, a variance).
* `TrainableHalfCauchy` (``'trainable_half_cauchy'``): ``w = l + s |C|``, ``C`` standard Cauchy:
  the horseshoe's local and global scales (Ghosh et al., 2018).
* `TrainableCauchy` (no alias: ``'trainable_cauchy'`` is the rank-1 factors' random-sign
  Cauchy, `ensemble.dense.TrainableRandomSignCauchy`): ``w = l + s C``.
* `TrainableMixtureOfDeltas` (``'trainable_mixture_of_deltas'``): each entry is one of ``K``
  trainable locations, equally likely.

None of them is a factorized normal: ``moments()`` raises `MomentsUnavailableError`, so they
work with the reparameterization estimator (which calls ``sample``) and with KL regularizers
that take their distribution (`regularizers.LogNormalKLDivergence`, `CauchyKLDivergence`,
`HalfCauchyKLDivergence`, `UniformKLDivergence`). ``loc()`` (what `posterior_mean` uses) is
the mean where it exists (log-normal: ``exp(μ + σ²/2)``; mixture: the locations' average) and
the median otherwise (Cauchy ``l``, half-Cauchy ``l + s``). Parameters are as
`initializers.TrainableNormal`'s: a location variable ``mean`` and a raw scale ``stddev`` under
``stddev_constraint`` (``exp``; initial scales ``exp(-5)``), locations starting at
``TruncatedNormal(stddev=1e-5)`` (edward2's start for these posteriors).

`OrthogonalRandomFeatures` (``'orthogonal_random_features'``) is a plain Keras initializer: the
random-feature matrix of Yu et al. (2016), ``stddev · Q S``.
"""

import math

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers.base import check_positive_int
from bayes_planet.layers.initializers import (
    DistributionInitializer,
    MomentsUnavailableError,
    TrainableNormal,
)

tfd = tfp.distributions

__all__ = [
    "ALIASES",
    "OrthogonalRandomFeatures",
    "TrainableCauchy",
    "TrainableHalfCauchy",
    "TrainableLogNormal",
    "TrainableMixtureOfDeltas",
    "standard_cauchy",
]

_register = keras.saving.register_keras_serializable(package="bayes_planet")


def standard_cauchy(shape, seed, dtype=tf.float32):
    """Standard Cauchy draws ``tan(π (u - 1/2))`` of stateless uniforms ``u`` in (0, 1)."""
    u = tf.random.stateless_uniform(tf.convert_to_tensor(shape, tf.int32), seed,
                                    minval=1e-7, maxval=1.0 - 1e-7)
    return tf.cast(tf.tan(math.pi * (u - 0.5)), dtype)


def _small_location():
    return keras.initializers.TruncatedNormal(stddev=1e-5)


class _LocationScale(TrainableNormal):
    """A location-scale posterior on `TrainableNormal`'s parameters (``mean``: the location,
    ``stddev``: the raw scale) that is not a normal: subclasses define ``_draw(loc, scale, eps
    seed, shape, dtype)``, ``loc()`` and ``_base(loc, scale)`` (the `tfp` distribution)."""

    def __init__(self, mean_initializer=None, stddev_initializer=None, *args, **kwargs):
        super().__init__(_small_location() if mean_initializer is None else mean_initializer,
                         stddev_initializer, *args, **kwargs)

    def location(self):
        return tf.convert_to_tensor(self.mean)

    def spread(self):
        return self.stddev_constraint(tf.convert_to_tensor(self.raw_stddev))

    def scale(self):
        raise MomentsUnavailableError(
            f"{type(self).__name__} is not a normal posterior: no closed-form (loc, scale).")

    def moments(self, dtype=None):
        self.scale()

    def log_scale(self):
        self.scale()

    def sample(self, seed, dtype=None, num_samples=1):
        loc, scale = self.location(), self.spread()
        dtype = dtype or loc.dtype
        shape = tf.shape(loc) if num_samples == 1 else [num_samples, *loc.shape]
        return self._draw(tf.cast(loc, dtype), tf.cast(scale, dtype), seed, shape, dtype)

    def distribution(self):
        return tfd.Independent(self._base(self.location(), self.spread()),
                               reinterpreted_batch_ndims=self.weight_shape.rank)


@_register
class TrainableLogNormal(_LocationScale):
    """Log-normal posterior ``w = exp(μ + σ ε)``: a positive weight; ``loc()`` is its mean
    ``exp(μ + σ²/2)``. Arguments as `initializers.TrainableNormal` (for ``μ`` and ``σ``)."""

    def loc(self):
        return tf.exp(self.location() + 0.5 * tf.square(self.spread()))

    def _draw(self, loc, scale, seed, shape, dtype):
        return tf.exp(loc + scale * tf.random.stateless_normal(shape, seed, dtype=dtype))

    def _base(self, loc, scale):
        return tfd.LogNormal(loc, scale)


@_register
class TrainableHalfCauchy(_LocationScale):
    """Half-Cauchy posterior ``w = l + s |C|`` (``w >= l``); ``loc()`` is its median ``l + s``.
    Arguments as `initializers.TrainableNormal` (for ``l`` and ``s``)."""

    def loc(self):
        return self.location() + self.spread()

    def _draw(self, loc, scale, seed, shape, dtype):
        return loc + scale * tf.abs(standard_cauchy(shape, seed, dtype))

    def _base(self, loc, scale):
        return tfd.HalfCauchy(loc, scale)


@_register
class TrainableCauchy(_LocationScale):
    """Cauchy posterior ``w = l + s C``; ``loc()`` is its median ``l``. Arguments as
    `initializers.TrainableNormal` (for ``l`` and ``s``)."""

    def loc(self):
        return self.location()

    def _draw(self, loc, scale, seed, shape, dtype):
        return loc + scale * standard_cauchy(shape, seed, dtype)

    def _base(self, loc, scale):
        return tfd.Cauchy(loc, scale)


@_register
class TrainableMixtureOfDeltas(DistributionInitializer):
    """Each entry is one of ``num_components`` trainable point masses, equally likely.

    The locations ``[*shape, K]`` start at ``loc_initializer`` (He normal); ``loc()`` is their
    average (the mean); ``sample`` picks a component per entry (the gradient reaches the picked
    location). A discrete posterior: no normal moments, and no KL regularizer of the library
    takes it except `regularizers.UniformKLDivergence` (its entropy).

    Args:
      num_components: K, a positive integer.
      loc_initializer: Keras initializer of the locations.
    """

    def __init__(self, num_components=5, loc_initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        self.num_components = check_positive_int("num_components", num_components)
        self.loc_initializer = keras.initializers.get(loc_initializer)

    def build(self, shape, dtype=None):
        super().build(shape, dtype)
        self.locations = self.add_weight(
            name="loc", shape=[*self.weight_shape, self.num_components], dtype=self.param_dtype,
            initializer=self.loc_initializer, trainable=True)

    def loc(self):
        return tf.reduce_mean(self.locations, axis=-1)

    def moments(self, dtype=None):
        raise MomentsUnavailableError("TrainableMixtureOfDeltas is a discrete posterior: no "
                                      "closed-form (loc, scale).")

    def sample(self, seed, dtype=None, num_samples=1):
        locations = tf.convert_to_tensor(self.locations)
        shape = locations.shape[:-1] if num_samples == 1 else [num_samples,
                                                                *locations.shape[:-1]]
        pick = tf.random.stateless_uniform(shape, seed, maxval=self.num_components,
                                           dtype=tf.int32)
        chosen = tf.gather(locations, pick[..., None], batch_dims=locations.shape.rank - 1) \
            if num_samples == 1 else tf.gather(
                tf.broadcast_to(locations, [num_samples, *locations.shape]), pick[..., None],
                batch_dims=locations.shape.rank)
        return tf.cast(tf.squeeze(chosen, -1), dtype or locations.dtype)

    def distribution(self):
        locations = tf.convert_to_tensor(self.locations)
        probs = tf.fill(tf.shape(locations), tf.constant(1.0 / self.num_components,
                                                         locations.dtype))
        mixture = tfd.MixtureSameFamily(tfd.Categorical(probs=probs),
                                        tfd.Deterministic(locations))
        return tfd.Independent(mixture, reinterpreted_batch_ndims=self.weight_shape.rank)

    def get_config(self):
        config = super().get_config()
        config.update(num_components=self.num_components,
                      loc_initializer=keras.initializers.serialize(self.loc_initializer))
        return config


@_register
class OrthogonalRandomFeatures(keras.initializers.Initializer):
    """Orthogonal random features ``stddev · Q S`` for a random-feature kernel (Yu et al., 2016).

    ``Q`` ``[rows, cols]``: random orthogonal blocks of ``[rows, rows]`` side by side (orthonormal
    rows within each block, the last block cut), ``S`` diagonal: each column's norm, the norm of
    a ``rows``-dimensional standard normal (``random_norm``, distributed chi(rows)) or
    ``sqrt(rows)``. So each column has the norm distribution of a Gaussian random-feature
    column of stddev ``stddev``, and the columns of a block are orthogonal.

    Args:
      stddev: positive float, the entries' stddev of the Gaussian matrix imitated.
      random_norm: draw the column norms (True) or fix them at ``sqrt(rows)``.
      seed: optional int (stateless draws); None draws from TensorFlow's global seed.
    """

    def __init__(self, stddev=1.0, random_norm=True, seed=None):
        if isinstance(stddev, bool) or not isinstance(stddev, int | float) or not stddev > 0:
            raise ValueError(f"Expected a positive number. Received: stddev={stddev!r}")
        self.stddev, self.random_norm, self.seed = float(stddev), bool(random_norm), seed

    def _normal(self, shape, index, dtype):
        if self.seed is None:
            return tf.random.normal(shape, dtype=dtype)
        return tf.random.stateless_normal(shape, [self.seed, index], dtype=dtype)

    def __call__(self, shape, dtype=None, **kwargs):
        del kwargs
        dtype = tf.as_dtype(dtype or keras.backend.floatx())
        if len(shape) != 2:
            raise ValueError(f"Expected a 2-D shape. Received: shape={tuple(shape)}")
        rows, cols = (int(d) for d in shape)
        blocks = []
        for index in range(int(np.ceil(cols / rows))):
            q, r = tf.linalg.qr(self._normal([rows, rows], index, dtype))
            blocks.append(q * tf.sign(tf.linalg.diag_part(r))[None, :])  # Haar-distributed
        q = tf.concat(blocks, axis=1)[:, :cols]
        if self.random_norm:
            norms = tf.norm(self._normal([rows, cols], -1, dtype), axis=0)
        else:
            norms = tf.fill([cols], tf.constant(math.sqrt(rows), dtype))
        return self.stddev * q * norms[None, :]

    def get_config(self):
        return {"stddev": self.stddev, "random_norm": self.random_norm, "seed": self.seed}


#: The aliases `initializers.get` resolves for this module's classes.
ALIASES = {
    "trainable_log_normal": TrainableLogNormal,
    "trainable_half_cauchy": TrainableHalfCauchy,
    "trainable_mixture_of_deltas": TrainableMixtureOfDeltas,
    "orthogonal_random_features": OrthogonalRandomFeatures,
}
