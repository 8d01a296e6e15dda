"""Distribution initializers: the variational posterior (or a fixed prior) over a weight.

Bayesian Layers (Tran et al., 2019, Sec. 2.1) make uncertainty over weights a
*distribution initializer*: where a Keras layer asks its initializer for a tensor,
a Bayesian layer asks for a distribution. A `DistributionInitializer` is a Keras
layer: ``build(shape, dtype)`` creates the variational parameters (always float32
or the layer's variable dtype, never autocast), and ``distribution()`` returns the
`tfp` distribution. Calling it as ``init(shape, dtype)`` builds it on first use and
returns a `RandomVariable` over the weight.

The posterior contract (what every estimator and KL regularizer calls; layers never
sample a weight themselves):

* ``loc()`` -- the mean of the weight (required). Inside
  `bayes_planet.layers.posterior_mean` layers use it as the weight.
* ``sample(seed, dtype=None, num_samples=1)`` -- a reparameterized draw of the whole
  weight with a stateless ``[2]`` seed, in ``dtype`` (default: the parameters'), or
  ``num_samples`` draws stacked on a leading axis. The reparameterization estimator
  and the recurrent cells call it, so any posterior that can be sampled works there.
* ``moments(dtype=None)`` -- ``(loc, scale)`` of a *factorized normal* posterior (per
  entry), ``scale`` None for a point mass. Flipout, local reparameterization,
  variational dropout, DenseDVI and the closed-form KL regularizers call it.

A factorized normal (or point-mass) posterior implements ``loc()`` and ``scale()``
(None for a point mass) and inherits ``moments``, ``sample`` (``loc + scale * eps``,
``eps`` from `noise.standard_normal`), ``log_scale`` and ``distribution``. Any other
posterior overrides ``sample`` and ``distribution`` and leaves ``scale``
undefined: ``moments`` then raises `MomentsUnavailableError`, so the estimators and
KLs that need closed-form moments fail with one line naming the posterior and what
needed them (the reparameterization estimator still works; give it a KL regularizer
of its own). `TrainableFullCovarianceNormal` is one: the normal KL regularizers read
its ``scale_tril()`` (the covariance factor of the flattened weight) instead.

String aliases (resolved by `get`): ``trainable_normal`` (default posterior),
``trainable_he_normal``, ``trainable_glorot_normal``, ``trainable_deterministic``
(point mass; deterministic/MAP training), ``trainable_normal_wide`` (zero means, stddevs
at log 2: tfp.layers' start), ``trainable_full_covariance_normal`` (a full covariance over
the weight's entries), ``trainable_normal_small_stddev``, ``fixed_normal`` (a
fixed N(0, 1) prior draw), ``trainable_random_sign_normal`` (the rank-1 factors' posterior) and
``random_sign`` (a plain Keras-style initializer of ±1 values). Any other string falls
back to `keras.initializers.get`.
"""

import math

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet import seeds
from bayes_planet._keras import keras
from bayes_planet.layers import _compat, checks
from bayes_planet.layers import constraints as constraints_lib
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers._registry import resolve
from bayes_planet.layers.noise import standard_normal
from bayes_planet.layers.random_variable import RandomVariable

tfd = tfp.distributions

__all__ = [
    "OrthogonalRandomFeatures",
    "TrainableCauchy",
    "TrainableHalfCauchy",
    "TrainableLogNormal",
    "TrainableMixtureOfDeltas",
    "standard_cauchy",
    "DistributionInitializer",
    "FixedNormal",
    "MomentsUnavailableError",
    "RandomSign",
    "TrainableDeterministic",
    "TrainableFullCovarianceNormal",
    "TrainableGlorotNormal",
    "TrainableHeNormal",
    "TrainableNormal",
    "TrainableNormalSmallStddev",
    "TrainableNormalWide",
    "TrainableRandomSignNormal",
    "for_weight",
    "get",
    "initial_stddev_initializer",
    "serialize",
]


class MomentsUnavailableError(NotImplementedError):
    """A posterior has no closed-form factorized moments ``(loc, scale)``."""


class DistributionInitializer(keras.layers.Layer):
    """Base class: a Keras layer holding a distribution over one weight tensor.

    Subclasses implement ``build(shape, dtype)`` and ``loc()``; factorized normal ones
    ``scale()`` too (None for a point mass), other posteriors ``sample`` and
    ``distribution`` (see the module docstring for the contract).
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.weight_shape = None
        # Set by a layer whose weight shape does not tell its fan-in (priors scaled to
        # the layer read it through `regularizers.fan_in`).
        self.fan_in = None

    def __call__(self, shape, dtype=None, **kwargs):  # pylint: disable=arguments-differ
        del kwargs  # `partition_info` etc. from the Keras initializer protocol.
        if not self.built:
            self.build(shape, dtype)
        return RandomVariable(self.distribution())

    def build(self, shape, dtype=None):
        self.weight_shape = tf.TensorShape(shape)
        dtype = tf.as_dtype(dtype or tf.float32)
        # Variational parameters keep the variable dtype (float32 under mixed precision).
        self.param_dtype = dtype if dtype.is_floating else tf.float32
        self.built = True

    def loc(self):
        raise NotImplementedError(f"{type(self).__name__} must implement loc().")

    def scale(self):
        """Per-entry stddev of a factorized normal posterior; None for a point mass."""
        raise MomentsUnavailableError(
            f"{type(self).__name__} has no closed-form factorized moments (loc, scale).")

    def moments(self, dtype=None):
        """``(loc, scale)`` in ``dtype`` (default: the parameters'); scale None for a point mass.

        Raises `MomentsUnavailableError` if the posterior is not factorized normal.
        """
        loc, scale = self.loc(), self.scale()
        if dtype is None:
            return loc, scale
        return tf.cast(loc, dtype), None if scale is None else tf.cast(scale, dtype)

    def log_scale(self):
        """``log(scale())``; subclasses with a log-space parameter return it for free."""
        scale = self.scale()
        return None if scale is None else tf.math.log(scale)

    def sample(self, seed, dtype=None, num_samples=1):
        """Reparameterized draw(s) of the weight with a stateless ``[2]`` seed.

        ``loc + scale * eps`` with ``eps ~ N(0, I)`` (`noise.standard_normal`) in
        ``dtype``: one draw of the weight's shape, or ``num_samples`` stacked on a
        leading axis. A point mass returns ``loc`` (no sample axis).
        """
        loc, scale = self.moments(dtype)
        if scale is None:
            return loc
        shape = tf.shape(loc) if num_samples == 1 else [num_samples, *loc.shape]
        return loc + scale * standard_normal(shape, seed, dtype=loc.dtype)

    def distribution(self):
        """The `tfp` distribution over the whole weight tensor (event = weight shape)."""
        loc, scale = self.loc(), self.scale()
        ndims = self.weight_shape.rank
        if scale is None:
            return tfd.Independent(tfd.Deterministic(loc), reinterpreted_batch_ndims=ndims)
        return tfd.Independent(tfd.Normal(loc, scale), reinterpreted_batch_ndims=ndims)

    def _weight(self, name, initializer, constraint=None, trainable=True, dtype=None):
        return self.add_weight(
            name=name,
            shape=self.weight_shape,
            dtype=dtype or self.param_dtype,
            initializer=initializer,
            constraint=constraint,
            trainable=trainable,
            **_compat.NO_AUTOCAST,
        )

    def get_build_config(self):
        # Built by the layer that holds it (`BayesianLayer.add_weight`), never from a config.
        return None


@_register
class TrainableNormal(DistributionInitializer):
    """Fully factorized normal posterior N(mean, exp(log_stddev)^2).

    The default posterior of every Bayesian layer (Blundell et al., 2015). Means
    start like the Keras layer's default kernel (``glorot_uniform``), so swapping
    ``Dense`` for ``DenseReparameterization`` starts from the same function up to
    small noise; standard deviations start at ``exp(-5) ≈ 0.0067``. The default
    log-space parameter (``stddev_constraint='exp'``) makes ``log σ`` in the KL free
    and is ~20 % cheaper per train step than ``'softplus'`` (also supported).

    Args:
      mean_initializer: Keras initializer for the means.
      stddev_initializer: Keras initializer for the *unconstrained* stddev.
      stddev_constraint: transform from unconstrained to positive (``exp``).
      mean_constraint: optional Keras constraint (projection) on the means.
      seed: optional int seeding the initial values.
      initial_stddev: keyword-only alternative to ``stddev_initializer``: the stddevs start
        at this value (`initial_stddev_initializer`), e.g. uncertainty-baselines' 1e-3
        (`SMALL_INITIAL_STDDEV`; alias ``'trainable_normal_small_stddev'``).
    """

    def __init__(
        self,
        mean_initializer="glorot_uniform",
        stddev_initializer=None,
        mean_constraint=None,
        stddev_constraint="exp",
        seed=None,
        *,
        initial_stddev=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.seed = seed
        self.stddev_constraint = constraints_lib.get(stddev_constraint)
        if initial_stddev is not None:
            if stddev_initializer is not None:
                raise ValueError(
                    "Expected stddev_initializer or initial_stddev, not both. Received: "
                    f"stddev_initializer={stddev_initializer!r}, initial_stddev={initial_stddev!r}")
            stddev_initializer = initial_stddev_initializer(initial_stddev,
                                                            self.stddev_constraint)
        elif stddev_initializer is None:
            stddev_initializer = keras.initializers.TruncatedNormal(mean=-5.0, stddev=0.1)
        # A seed reseeds both parts, each with its own stream (Keras initializers read their
        # seed at construction, so a seeded copy is built rather than an attribute set).
        self.mean_initializer = _seeded(get(mean_initializer), seed, "mean")
        self.stddev_initializer = _seeded(get(stddev_initializer), seed,
                                          "stddev")
        self.mean_constraint = keras.constraints.get(mean_constraint)

    def build(self, shape, dtype=None):
        super().build(shape, dtype)
        self.mean = self._weight("mean", self.mean_initializer, self.mean_constraint)
        self.raw_stddev = self._weight("stddev", self.stddev_initializer)

    def loc(self):
        return tf.convert_to_tensor(self.mean)

    def scale(self):
        return self.stddev_constraint(tf.convert_to_tensor(self.raw_stddev))

    def log_scale(self):
        if isinstance(self.stddev_constraint, constraints_lib.Exp):
            return tf.convert_to_tensor(self.raw_stddev)
        return tf.math.log(self.scale())

    def get_config(self):
        config = super().get_config()
        config.update(
            mean_initializer=keras.initializers.serialize(self.mean_initializer),
            stddev_initializer=keras.initializers.serialize(self.stddev_initializer),
            mean_constraint=keras.constraints.serialize(self.mean_constraint),
            stddev_constraint=constraints_lib.serialize(self.stddev_constraint),
            seed=self.seed,
        )
        return config


@_register
class TrainableHeNormal(TrainableNormal):
    """`TrainableNormal` with He-normal means (for ReLU networks)."""

    def __init__(self, mean_initializer="he_normal", **kwargs):
        super().__init__(mean_initializer=mean_initializer, **kwargs)


@_register
class TrainableGlorotNormal(TrainableNormal):
    """`TrainableNormal` with Glorot-normal means."""

    def __init__(self, mean_initializer="glorot_normal", **kwargs):
        super().__init__(mean_initializer=mean_initializer, **kwargs)


@_register
class TrainableDeterministic(DistributionInitializer):
    """Point mass at a trainable location: the deterministic / MAP special case."""

    def __init__(self, loc_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.loc_initializer = keras.initializers.get(loc_initializer)

    def build(self, shape, dtype=None):
        super().build(shape, dtype)
        self.point = self._weight("loc", self.loc_initializer)

    def loc(self):
        return tf.convert_to_tensor(self.point)

    def scale(self):
        return None

    def get_config(self):
        config = super().get_config()
        config["loc_initializer"] = keras.initializers.serialize(self.loc_initializer)
        return config


@_register
class FixedNormal(DistributionInitializer):
    """A fixed (non-trainable) N(mean, stddev^2) over the weight, e.g. a prior draw."""

    def __init__(self, mean=0.0, stddev=1.0, **kwargs):
        super().__init__(**kwargs)
        if not stddev > 0:
            raise ValueError(f"Expected a positive stddev. Received: stddev={stddev}")
        self.mean_value, self.stddev_value = float(mean), float(stddev)

    def loc(self):
        return tf.fill(self.weight_shape, tf.constant(self.mean_value, self.param_dtype))

    def scale(self):
        return tf.fill(self.weight_shape, tf.constant(self.stddev_value, self.param_dtype))

    def get_config(self):
        config = super().get_config()
        config.update(mean=self.mean_value, stddev=self.stddev_value)
        return config


@_register
class RandomSign(keras.initializers.Initializer):
    """Random signs: each entry is +1 with probability ``probability``, else -1.

    The fast weights of BatchEnsemble and the posterior means of rank-1 factors start
    here (Dusenberry et al., 2020; uncertainty-baselines' ``random_sign_init``), so each
    ensemble member starts as a different sign pattern of the shared weights.

    Args:
      probability: the probability of +1, in [0, 1].
      seed: optional int; None draws from TensorFlow's global seed.
    """

    def __init__(self, probability=0.5, seed=None):
        if (isinstance(probability, bool) or not isinstance(probability, int | float)
                or not 0.0 <= probability <= 1.0):
            raise ValueError("Expected a probability in [0, 1]. "
                             f"Received: probability={probability!r}")
        self.probability, self.seed = float(probability), seed

    def __call__(self, shape, dtype=None, **kwargs):
        del kwargs  # `partition_info` etc. from the Keras initializer protocol.
        dtype = tf.as_dtype(dtype or keras.backend.floatx())
        if self.seed is None:
            uniform = tf.random.uniform(shape)
        else:
            uniform = tf.random.stateless_uniform(shape, [self.seed, 0])
        return tf.cast(tf.where(uniform < self.probability, 1.0, -1.0), dtype)

    def get_config(self):
        return {"probability": self.probability, "seed": self.seed}


#: The stddev of the jitter of a raw (unconstrained) stddev around its initial value, as
#: in edward2 and uncertainty-baselines: about ±10 % of the stddev for ``exp``/``softplus``.
STDDEV_JITTER = 0.1


def initial_stddev_initializer(initial_stddev, stddev_constraint):
    """The Keras initializer of a raw stddev that starts the stddevs near ``initial_stddev``.

    ``TruncatedNormal(mean=stddev_constraint.inverse(initial_stddev), stddev=0.1)``: the
    raw value that the constraint maps to ``initial_stddev``, jittered by `STDDEV_JITTER`
    (uncertainty-baselines' ``TruncatedNormal(mean=log(expm1(stddev_init)), stddev=0.1)``
    for ``softplus``). The constraint needs an ``inverse`` (``exp``, ``softplus``).
    """
    if (isinstance(initial_stddev, bool) or not isinstance(initial_stddev, int | float)
            or not math.isfinite(initial_stddev) or initial_stddev <= 0):
        raise ValueError(f"Expected a positive number. Received: initial_stddev={initial_stddev!r}")
    try:
        raw = stddev_constraint.inverse(initial_stddev)
    except (AttributeError, NotImplementedError) as e:
        raise ValueError("Expected a stddev_constraint with an inverse (exp, softplus) for "
                         f"initial_stddev. Received: stddev_constraint={stddev_constraint!r}"
                         ) from e
    return keras.initializers.TruncatedNormal(mean=raw, stddev=STDDEV_JITTER)


#: uncertainty-baselines' initial posterior stddev of mean-field VI (``stddev_init=1e-3``).
SMALL_INITIAL_STDDEV = 1e-3


#: The shift tfp adds to the diagonal of a scale factor (``tfb.FillScaleTriL``'s ``diag_shift``,
#: the one of ``tfp.layers.MultivariateNormalTriL``): a floor on the posterior stddevs.
SCALE_DIAG_SHIFT = 1e-5

#: The initial posterior stddev of tfp.layers' ``VariableLayer`` + ``MultivariateNormalTriL``
#: posterior (keras.io's "Probabilistic Bayesian Neural Networks"): its parameters start at
#: zero, so each stddev is ``softplus(0) + SCALE_DIAG_SHIFT = log 2 + 1e-5`` (≈ 0.6932).
WIDE_INITIAL_STDDEV = math.log(2.0) + SCALE_DIAG_SHIFT


@_register
class TrainableNormalWide(TrainableNormal):
    """`TrainableNormal` starting where tfp.layers' keras.io posterior starts: means at zero,
    stddevs at `WIDE_INITIAL_STDDEV` (log 2 ≈ 0.693, jittered by ±10 % in log space).

    The default posterior starts at stddev ``exp(-5)`` and widens only as fast as the
    optimizer moves ``log σ``; this one starts about as wide as the N(0, 1) prior, so within
    a short training the posterior's width already reflects the amount of data (a small
    training set leaves it wide, a large one narrows it): the lesson of keras.io's Bayesian
    regression. Alias ``'trainable_normal_wide'``; the same start as
    ``TrainableNormal(mean_initializer="zeros", initial_stddev=WIDE_INITIAL_STDDEV)``. For
    tfp's full-covariance posterior itself, see `TrainableFullCovarianceNormal`.
    """

    def __init__(self, mean_initializer="zeros", stddev_initializer=None, *args,
                 initial_stddev=None, **kwargs):
        if stddev_initializer is None and initial_stddev is None:
            initial_stddev = WIDE_INITIAL_STDDEV
        super().__init__(mean_initializer, stddev_initializer, *args,
                         initial_stddev=initial_stddev, **kwargs)


@_register
class TrainableFullCovarianceNormal(DistributionInitializer):
    """A trainable multivariate normal over all of a weight's entries: ``vec(W) ~ N(m, L Lᵀ)``.

    tfp.layers' ``MultivariateNormalTriL`` posterior (the one of keras.io's Bayesian
    regression with ``DenseVariational``), as a distribution initializer: the ``n`` entries of
    the weight, flattened in row-major order, have a full ``n × n`` covariance whose
    lower-triangular factor ``L`` comes from ``n(n+1)/2`` unconstrained parameters through
    ``tfb.FillScaleTriL`` (softplus diagonal plus `SCALE_DIAG_SHIFT`). It starts at tfp's
    start by default: zero means and ``L = WIDE_INITIAL_STDDEV · I``.

    A layer draws its weight by the reparameterization estimator
    (``DenseReparameterization``, ``Conv*Reparameterization``; ``m + L ε`` with
    ``ε ~ N(0, I)``, `noise.standard_normal`), and the normal KL regularizers
    (``'normal_kl_divergence'``, the layers' default, ``NormalKLDivergenceWithTiedMean``,
    ``FanInNormalKLDivergence``) take its full covariance in closed form. It has no
    factorized moments, so Flipout, local reparameterization, DVI and the mixture priors
    refuse it with a one-line error. The parameters grow as ``n²``: a 64 × 64 kernel has
    8.4 M; use it for small layers (keras.io's have 8 units). Alias
    ``'trainable_full_covariance_normal'``.

    Args:
      mean_initializer: Keras initializer of the means (weight-shaped).
      initial_stddev: the initial stddev of every entry (the diagonal of ``L``; the entries
        start uncorrelated); greater than `SCALE_DIAG_SHIFT`.
      seed: optional int seeding ``mean_initializer``.
    """

    def __init__(self, mean_initializer="zeros", initial_stddev=WIDE_INITIAL_STDDEV, seed=None,
                 **kwargs):
        super().__init__(**kwargs)
        if (isinstance(initial_stddev, bool) or not isinstance(initial_stddev, int | float)
                or not math.isfinite(initial_stddev) or initial_stddev <= SCALE_DIAG_SHIFT):
            raise ValueError(f"Expected a number greater than {SCALE_DIAG_SHIFT}. Received: "
                             f"initial_stddev={initial_stddev!r}")
        self.initial_stddev = float(initial_stddev)
        self.seed = seed
        self.mean_initializer = _seeded(get(mean_initializer), seed, "mean")

    @staticmethod
    def _bijector():
        return tfp.bijectors.FillScaleTriL(diag_shift=SCALE_DIAG_SHIFT)

    @property
    def num_entries(self):
        """``n``, the number of entries of the weight (the event size)."""
        return self.weight_shape.num_elements()

    def build(self, shape, dtype=None):
        super().build(shape, dtype)
        n = self.num_entries
        if n is None:
            raise ValueError(f"Expected a fully known weight shape. Received: shape={shape}")
        self.mean = self._weight("mean", self.mean_initializer)
        stddev = self.initial_stddev

        def scale_tril_initializer(shape, dtype=None, **kwargs):
            del kwargs
            identity = tf.eye(n, dtype=dtype or self.param_dtype)
            return tf.reshape(self._bijector().inverse(stddev * identity), shape)

        self.raw_scale_tril = self.add_weight(
            name="scale_tril", shape=[n * (n + 1) // 2], dtype=self.param_dtype,
            initializer=scale_tril_initializer, **_compat.NO_AUTOCAST)

    def loc(self):
        return tf.convert_to_tensor(self.mean)

    def scale_tril(self):
        """The ``[n, n]`` lower-triangular factor ``L`` (positive diagonal) of the covariance
        of the flattened weight."""
        return self._bijector()(tf.convert_to_tensor(self.raw_scale_tril))

    def sample(self, seed, dtype=None, num_samples=1):
        """``m + L ε`` reshaped to the weight (``num_samples`` stacked on a leading axis)."""
        loc = self.loc()
        n = self.num_entries
        eps = standard_normal([num_samples, n], seed, dtype=loc.dtype)
        flat = tf.reshape(loc, [1, n]) + tf.matmul(eps, self.scale_tril(), transpose_b=True)
        shape = self.weight_shape.as_list()
        value = tf.reshape(flat, shape if num_samples == 1 else [num_samples, *shape])
        return value if dtype is None else tf.cast(value, dtype)

    def distribution(self):
        """``MultivariateNormalTriL`` over the flattened weight, reshaped to the weight's
        shape (event = weight shape)."""
        n = self.num_entries
        flat = tfd.MultivariateNormalTriL(tf.reshape(self.loc(), [n]), self.scale_tril())
        return tfd.TransformedDistribution(flat, tfp.bijectors.Reshape(
            event_shape_out=self.weight_shape.as_list(), event_shape_in=[n]))

    def get_config(self):
        config = super().get_config()
        config.update(mean_initializer=keras.initializers.serialize(self.mean_initializer),
                      initial_stddev=self.initial_stddev, seed=self.seed)
        return config


@_register
class TrainableNormalSmallStddev(TrainableNormal):
    """`TrainableNormal` whose stddevs start at `SMALL_INITIAL_STDDEV` (1e-3).

    uncertainty-baselines' mean-field recipe (with `regularizers.NormalKLDivergenceWithTiedMean`
    and `regularizers.KLAnnealing`): the network starts as its deterministic twin and the
    posterior widens as the (annealed) KL asks. Alias ``'trainable_normal_small_stddev'``;
    ``TrainableHeNormal(initial_stddev=SMALL_INITIAL_STDDEV)`` is the He-normal version.
    """

    def __init__(self, mean_initializer="glorot_uniform", stddev_initializer=None, *args,
                 initial_stddev=None, **kwargs):
        if stddev_initializer is None and initial_stddev is None:
            initial_stddev = SMALL_INITIAL_STDDEV
        super().__init__(mean_initializer, stddev_initializer, *args,
                         initial_stddev=initial_stddev, **kwargs)


#: Initial posterior stddev of the rank-1 factors: sqrt(p / (1 - p)) for p = 1e-3, the
#: dropout-rate parameterization of uncertainty-baselines' rank-1 recipe (≈ 0.032).
RANK1_INITIAL_STDDEV = math.sqrt(1e-3 / (1.0 - 1e-3))


class Rank1FactorNormal(TrainableNormal):
    """Base of the rank-1 factor posteriors: `TrainableNormal` whose stddevs start at
    `RANK1_INITIAL_STDDEV` (≈ 0.032) and whose means, when no ``mean_initializer`` is given,
    come from the subclass's ``default_mean_initializer()`` (a fresh initializer per call)."""

    @staticmethod
    def default_mean_initializer():
        raise NotImplementedError("a rank-1 factor posterior defines default_mean_initializer()")

    def __init__(self, mean_initializer=None, stddev_initializer=None, *, initial_stddev=None,
                 **kwargs):
        if mean_initializer is None:
            mean_initializer = self.default_mean_initializer()
        if stddev_initializer is None and initial_stddev is None:
            initial_stddev = RANK1_INITIAL_STDDEV
        super().__init__(mean_initializer=mean_initializer,
                         stddev_initializer=stddev_initializer, initial_stddev=initial_stddev,
                         **kwargs)


@_register
class TrainableRandomSignNormal(Rank1FactorNormal):
    """`TrainableNormal` with random-sign (±1) means and a small initial stddev (≈ 0.032).

    The default posterior of the rank-1 factors α and γ (Dusenberry et al., 2020; edward2's
    ``RandomSign`` start): each member's mean factor starts at a random sign pattern and its
    stddev at `RANK1_INITIAL_STDDEV` (log-space, jittered by 0.1), so the members start
    diverse. Pair it with the symmetric prior ½ N(1, 0.1²) + ½ N(−1, 0.1²)
    (`regularizers.Rank1SignMixtureKLDivergence`, the default): under N(1, 0.1²) each −1
    entry costs ≈ 200 nats of KL, which buries the likelihood on small data sets
    (``experiments/results/8c-rank1-initial-means.md``; the pair was chosen by the benchmark
    of ``experiments/results/8e-sign-mixture-recalibration-keras.md``).
    """

    @staticmethod
    def default_mean_initializer():
        return RandomSign()


#: Spread of the rank-1 factors' initial posterior means around 1: uncertainty-baselines'
#: ``random_sign_init=-0.5`` (means ~ N(1, 0.5²)), the default of its rank-1 and BatchEnsemble
#: baselines.
RANK1_MEAN_STDDEV = 0.5


@_register
class TrainableRank1Normal(Rank1FactorNormal):
    """`TrainableNormal` with means near 1 (~ N(1, 0.5²)) and a small stddev (≈ 0.032).

    An option for the rank-1 factors α and γ (uncertainty-baselines' default
    ``random_sign_init=-0.5``; the library's default until the sign-mixture prior existed, and
    still the agent's rank-1 transition setting, ``model.factor_posterior``): each member's
    mean factor starts at its own draw around 1 (`RANK1_MEAN_STDDEV`) and its stddev at
    `RANK1_INITIAL_STDDEV` (log-space, jittered by 0.1). Under the N(1, 0.1²) prior
    (`regularizers.Rank1NormalKLDivergence`) an entry near 1 costs ≈ 13 nats of KL. Measured
    against the ±1 start under the sign-mixture prior (``experiments/results/8e-sign-mixture-recalibration-keras.md``, 9 tasks ×
    3 seeds): less diverse members (Friedman 90 % coverage 0.48 vs 0.82, CNN MI-AUROC 0.83 vs
    0.92) and a worse LSTM and Transformer.
    """

    @staticmethod
    def default_mean_initializer():
        return keras.initializers.RandomNormal(mean=1.0, stddev=RANK1_MEAN_STDDEV)


# Posteriors beyond the factorized normal, and orthogonal random features -------------------
# Initializers beyond the factorized normal: positive and heavy-tailed posteriors, a mixture of
# point masses, and orthogonal random features.
#
# Posteriors (`initializers.DistributionInitializer`, resolved by `initializers.get`):
#
# * `TrainableLogNormal` (``'trainable_log_normal'``): ``w = exp(μ + σ ε)``, a positive weight
#   (a scale, a variance).
# * `TrainableHalfCauchy` (``'trainable_half_cauchy'``): ``w = l + s |C|``, ``C`` standard Cauchy:
#   the horseshoe's local and global scales (Ghosh et al., 2018).
# * `TrainableCauchy` (no alias: ``'trainable_cauchy'`` is the rank-1 factors' random-sign
#   Cauchy, `ensemble.dense.TrainableRandomSignCauchy`): ``w = l + s C``.
# * `TrainableMixtureOfDeltas` (``'trainable_mixture_of_deltas'``): each entry is one of ``K``
#   trainable locations, equally likely.
#
# None of them is a factorized normal: ``moments()`` raises `MomentsUnavailableError`, so they
# work with the reparameterization estimator (which calls ``sample``) and with KL regularizers
# that take their distribution (`regularizers.LogNormalKLDivergence`, `CauchyKLDivergence`,
# `HalfCauchyKLDivergence`, `UniformKLDivergence`). ``loc()`` (what `posterior_mean` uses) is
# the mean where it exists (log-normal: ``exp(μ + σ²/2)``; mixture: the locations' average) and
# the median otherwise (Cauchy ``l``, half-Cauchy ``l + s``). Parameters are as
# `initializers.TrainableNormal`'s: a location variable ``mean`` and a raw scale ``stddev`` under
# ``stddev_constraint`` (``exp``; initial scales ``exp(-5)``), locations starting at
# ``TruncatedNormal(stddev=1e-5)`` (edward2's start for these posteriors).
#
# `OrthogonalRandomFeatures` (``'orthogonal_random_features'``) is a plain Keras initializer: the
# random-feature matrix of Yu et al. (2016), ``stddev · Q S``.


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
        self.num_components = checks.check_positive_int("num_components", num_components)
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


_ALIASES = {
    "trainable_normal": TrainableNormal,
    "trainable_he_normal": TrainableHeNormal,
    "trainable_glorot_normal": TrainableGlorotNormal,
    "trainable_deterministic": TrainableDeterministic,
    "fixed_normal": FixedNormal,
    "trainable_random_sign_normal": TrainableRandomSignNormal,
    "trainable_rank1_normal": TrainableRank1Normal,
    "trainable_normal_small_stddev": TrainableNormalSmallStddev,
    "trainable_normal_wide": TrainableNormalWide,
    "trainable_full_covariance_normal": TrainableFullCovarianceNormal,
    "random_sign": RandomSign,
    "trainable_log_normal": TrainableLogNormal,
    "trainable_half_cauchy": TrainableHalfCauchy,
    "trainable_mixture_of_deltas": TrainableMixtureOfDeltas,
    "orthogonal_random_features": OrthogonalRandomFeatures,
}


def get(identifier):
    """Resolves an initializer: one of our aliases (a fresh instance each time), a
    config dict, a callable, or a Keras initializer name."""
    return resolve(identifier, _ALIASES, keras.initializers.get, "initializer", base=DistributionInitializer)


def serialize(initializer):
    return keras.saving.serialize_keras_object(initializer)


def _with_seed(initializer, seed):
    """A new instance of a Keras-style ``initializer`` (from its config) with ``seed``."""
    config = initializer.get_config()
    if "seed" in config:
        config["seed"] = seed
    return initializer.__class__.from_config(config)


def _seeded(initializer, seed, name):
    """``initializer`` reseeded with the stream ``name`` of ``seed``; as it is if ``seed`` is
    None or it draws nothing at random."""
    if seed is None or "seed" not in initializer.get_config():
        return initializer
    return _with_seed(initializer, seeds.int_seed(seed, name))


def for_weight(initializer, name):
    """A fresh instance of ``initializer`` for the weight ``name`` of a multi-weight layer.

    A layer that builds several weights from one initializer argument (MADE's masked kernels,
    the attention projections) must not hand the same instance to each: Keras initializers
    return identical values on every call (seeded ones by design, unseeded ones after the
    first call), so weights of equal shape would start equal. Each weight gets its own draw:
    a seeded initializer is cloned with the named stream ``seeds.int_seed(seed,
    "initial_value/" + name)`` (reproducible, and different per weight); an unseeded one is
    cloned unseeded (a fresh draw from Keras' global seed, as separate Keras layers get).
    Initializers without randomness (``zeros``, ``constant``, ...) are cloned as they are.

    Args:
      initializer: anything `get` resolves (alias, Keras name, config dict, instance).
      name: the weight's name within the layer (the stream name).
    """
    initializer = get(initializer)
    if not hasattr(initializer, "get_config"):
        raise TypeError("Expected an initializer with get_config() for a multi-weight layer. "
                        f"Received: initializer={initializer!r} (weight {name!r})")
    seed = initializer.get_config().get("seed")
    return _with_seed(initializer, None if seed is None else seeds.int_seed(
        seed, f"initial_value/{name}"))
