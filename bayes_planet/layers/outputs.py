"""Stochastic output layers: deterministic computation, then a `RandomVariable`.

Bayesian Layers, Sec. 2.3 (Tran et al., 2019): an output layer maps its input to
the parameters of a distribution and returns a `RandomVariable`, so the network's
likelihood, entropy or KL are one method call away
(``model(x).distribution.log_prob(y)``) and the variable still composes with any
later layer as the Tensor of its sampled value.

Conventions shared by every layer here:

- ``units=None`` reads the parameters directly from the input's last axis;
  ``units=k`` first applies a trainable linear projection to ``k`` outputs (times
  the number of parameters per output).
- ``event_ndims`` trailing batch axes are reinterpreted as one event with
  ``tfd.Independent``, so ``rv.log_prob(y)`` sums over them. The default (1) gives
  one log-probability per example row for ``(batch, d)`` outputs; ``event_ndims=0``
  gives per-element log-probabilities. `Categorical` defaults to 0 (the class axis
  is consumed by the distribution, a ``(batch, k)`` input is a batch of labels).
- Noise is stateless and seeded (``seed=``): each call draws its lazy sample from
  ``[seed, counter]`` (see `BayesianLayer`).
- The value of a sample that has no reparameterization gradient (Bernoulli,
  Categorical, mixtures, discretized variables) carries a straight-through
  gradient of the mean: ``value = sample + mean - stop_gradient(mean)`` (Bengio et
  al., 2013), so composed layers downstream still train.
"""

import math

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, check_positive_int
from bayes_planet.layers.noise import per_example_sample
from bayes_planet.layers.random_variable import RandomVariable

tfd = tfp.distributions


# Duck-typed checks: `tfd.Independent(d)` / `tfd.MixtureSameFamily(...)` build
# instances of private non-composite classes (not subclasses of the public ones)
# when a part is not a CompositeTensor, so `isinstance` would miss them.
def _is_independent(dist):
    return hasattr(dist, "reinterpreted_batch_ndims") and hasattr(dist, "distribution")


def _is_mixture_same_family(dist):
    return hasattr(dist, "mixture_distribution") and hasattr(dist, "components_distribution")

__all__ = [
    "Bernoulli",
    "Categorical",
    "Discretize",
    "DiscretizedDistribution",
    "MixtureLogistic",
    "MixtureNormal",
    "Normal",
    "negative_log_likelihood",
    "straight_through",
]


#: The lower bound added to a learned or predicted scale when none is given.
DEFAULT_MIN_SCALE = 1e-3


@_register
def negative_log_likelihood(y_true, y_pred):
    """Keras loss for a model whose output is a `RandomVariable`: ``-log p(y_true)``.

    ``model.compile(loss=bl.negative_log_likelihood)``; being registered, it survives
    ``model.save``/``load_model`` with the compiled loss (a lambda would not). On Keras 3 the
    name is a `keras.losses.Loss` that hands this function the random variable
    (`_compat.random_variable_loss`).
    """
    return -y_pred.distribution.log_prob(y_true)


negative_log_likelihood = _compat.random_variable_loss(negative_log_likelihood)


def straight_through(sample, surrogate):
    """``sample`` in the forward pass, the gradient of ``surrogate`` in the backward."""
    surrogate = tf.cast(surrogate, sample.dtype)
    return tf.stop_gradient(sample) + (surrogate - tf.stop_gradient(surrogate))  # exact value


def _range(n, dtype):
    """``[0, n)`` as ``dtype``: CPU has no float16/bfloat16 ``Range`` kernel."""
    return tf.cast(tf.range(n), dtype)


def _check_event_ndims(value):
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"Expected a non-negative integer. Received: event_ndims={value!r}")
    return int(value)


def _check_positive_float(name, value):
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"Expected a positive number. Received: {name}={value!r}")
    return float(value)


class _DistributionLayer(BayesianLayer, _compat.RandomVariableOutputs, keras.layers.Layer):
    """Base: optional linear projection to ``units * _params_per_unit`` outputs."""

    _params_per_unit = 1
    _default_event_ndims = 1

    def __init__(self, units=None, event_ndims=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", seed=None, **kwargs):
        super().__init__(**kwargs)
        self.units = None if units is None else check_positive_int("units", units)
        self.event_ndims = _check_event_ndims(
            self._default_event_ndims if event_ndims is None else event_ndims)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self._init_seed(seed)

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        if self.units is not None:
            in_dim = input_shape[-1]
            if in_dim is None:
                raise ValueError(
                    f"{type(self).__name__} with units={self.units} needs a known last input "
                    f"dimension. Received: input_shape={input_shape}")
            out_dim = self.units * self._params_per_unit
            self.kernel = self.add_weight(name="kernel", shape=[in_dim, out_dim],
                                          initializer=self.kernel_initializer)
            self.bias = self.add_weight(name="bias", shape=[out_dim],
                                        initializer=self.bias_initializer)
        super().build(input_shape)

    def _params(self, inputs):
        """The (projected) input as the compute dtype."""
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        if self.units is not None:
            x = tf.tensordot(x, tf.cast(self.kernel, x.dtype), [[-1], [0]])
            x = tf.nn.bias_add(x, tf.cast(self.bias, x.dtype))
        return x

    def call(self, inputs):
        return self._wrap(self._params(inputs))

    # Subclasses: the distribution of the (projected) input ``x`` (batch on axis 0),
    # and for samples without a reparameterization gradient a straight-through
    # surrogate ``x -> tensor`` (None: the sample is reparameterized).
    def _distribution(self, x):
        raise NotImplementedError

    _surrogate = None

    def _full_distribution(self, x):
        dist = self._distribution(x)
        if self.event_ndims:
            dist = tfd.Independent(dist, reinterpreted_batch_ndims=self.event_ndims)
        return dist

    def _wrap(self, x):
        """The output `RandomVariable` of the parameters ``x``.

        Its sample is drawn by `per_example_sample`: under a multi-replica strategy each
        replica's rows of the global batch's sample (the single-device draws).
        """
        dist = self._full_distribution(x)
        seed = self._next_seed()

        def sampler(sample_seed):
            return per_example_sample(self._full_distribution, x, sample_seed, dist)

        if self._surrogate is None:
            return RandomVariable(dist, value=lambda: sampler(seed), sampler=sampler)
        return RandomVariable(
            dist, value=lambda: straight_through(sampler(seed), self._surrogate(x)),
            sampler=sampler)

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units,
            event_ndims=self.event_ndims,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config


@_register
class Normal(_DistributionLayer):
    """Normal output layer: ``N(loc(x), scale)``, independent per element.

    Args:
      units: None (loc, and a predicted scale, come straight from the input) or the
        size of a trainable linear projection producing them.
      scale: where the standard deviation comes from:
        a positive float — fixed (e.g. ``scale=1.0`` for a unit-variance likelihood);
        ``'learned'`` — one trainable value per output unit, ``softplus(v) + min_scale``;
        ``'predicted'`` (default) — from the input: the last axis (after the
        projection) is split in half into ``[loc, raw_scale]`` and
        ``scale = softplus(raw_scale) + min_scale``.
      min_scale: lower bound added to learned/predicted scales.
      event_ndims: trailing axes summed over by ``log_prob`` (default 1).
      seed: int or None, for the lazily drawn (reparameterized) sample.

    Input shape: ``(batch, ..., d)``. Output: a `RandomVariable` of shape
    ``(batch, ..., units)`` (``units`` is ``d``, or ``d // 2`` for a predicted scale
    without projection) wrapping ``Independent(Normal, event_ndims)``.
    """

    def __init__(self, units=None, scale="predicted", min_scale=DEFAULT_MIN_SCALE, event_ndims=None,
                 **kwargs):
        if isinstance(scale, str):
            if scale not in ("predicted", "learned"):
                raise ValueError("Expected 'predicted', 'learned' or a positive float. "
                                 f"Received: scale={scale!r}")
        else:
            scale = _check_positive_float("scale", scale)
        self.scale = scale
        self.min_scale = float(min_scale)
        if self.min_scale < 0:
            raise ValueError(f"Expected min_scale >= 0. Received: min_scale={min_scale!r}")
        self._params_per_unit = 2 if scale == "predicted" else 1
        super().__init__(units=units, event_ndims=event_ndims, **kwargs)

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        if self.units is None and self.scale == "predicted":
            if input_shape[-1] is None or input_shape[-1] % 2:
                raise ValueError(
                    "Normal(units=None, scale='predicted') splits the last input axis into "
                    f"loc and scale, so it must be even. Received: input_shape={input_shape}")
        if self.scale == "learned":
            dim = self.units if self.units is not None else input_shape[-1]
            init = math.log(math.expm1(max(1.0 - self.min_scale, 1e-3)))
            self.raw_scale = self.add_weight(
                name="raw_scale", shape=[dim], initializer=keras.initializers.Constant(init))
        super().build(input_shape)

    def _distribution(self, x):
        if self.scale == "predicted":
            loc, raw = tf.split(x, 2, axis=-1)
            scale = tf.nn.softplus(raw) + self.min_scale
        elif self.scale == "learned":
            loc = x
            scale = tf.nn.softplus(tf.cast(self.raw_scale, x.dtype)) + self.min_scale
        else:
            loc, scale = x, tf.constant(self.scale, x.dtype)
        return tfd.Normal(loc, scale)

    def get_config(self):
        config = super().get_config()
        config.update(scale=self.scale, min_scale=self.min_scale)
        return config


@_register
class Bernoulli(_DistributionLayer):
    """Bernoulli output layer over logits (the input, or its projection to ``units``).

    Samples are floats in {0, 1} (the layer's compute dtype) whose gradient is the
    straight-through gradient of the probabilities. Input ``(batch, ..., d)``,
    output ``(batch, ..., units or d)``; ``event_ndims`` defaults to 1.
    """

    def _distribution(self, logits):
        return tfd.Bernoulli(logits=logits, dtype=logits.dtype)

    def _surrogate(self, logits):
        return tf.sigmoid(logits)


@_register
class Categorical(_DistributionLayer):
    """Categorical output layer over the logits on the input's last axis.

    With ``units=k`` the input is first projected to ``k`` class logits. Samples
    are class indices stored as floats (the compute dtype) whose gradient is the
    straight-through gradient of the expected index; ``log_prob`` takes integer
    or float labels. Input ``(batch, ..., classes)``, output ``(batch, ...)``;
    ``event_ndims`` defaults to 0 (one log-probability per label). Under a mixed
    precision policy the distribution and samples are in the compute dtype (the
    surrogate's class indices are an int32 range cast to it: CPUs have no 16-bit
    ``Range`` kernel).
    """

    _default_event_ndims = 0

    def _distribution(self, logits):
        return tfd.Categorical(logits=logits, dtype=logits.dtype)

    def _surrogate(self, logits):  # the expected class index
        classes = _range(tf.shape(logits)[-1], logits.dtype)
        return tf.reduce_sum(tf.nn.softmax(logits) * classes, axis=-1)


#: The number of components of a mixture output layer when none is given.
DEFAULT_NUM_COMPONENTS = 5

# The mixtures' arguments before ``num_components`` came first (``MixtureLogistic(units,
# num_components, min_scale, event_ndims)``): the positional calls still meaning that.
_OLD_MIXTURE_ORDER = ("units", "num_components", "min_scale", "event_ndims")


def _mixture_arguments(cls_name, args, keywords):
    """The mixture layers' ``num_components``, ``units``, ``min_scale`` and ``event_ndims``
    from a call's positional ``args`` and its ``keywords`` (None where not given).

    ``Mixture*(k)`` is ``k`` components (edward2's and the docs' order); the calls of the
    former order keep their meaning where it is unambiguous: ``Mixture*(units,
    num_components=k)``, and positional calls whose first argument is ``units=None``
    (``Mixture*(None, k)``). Two or more positional numbers are refused: they meant ``(units,
    num_components)`` before.
    """
    given = dict(keywords)
    if not args:
        pass
    elif args[0] is None or (given["num_components"] is not None and len(args) == 1):
        if len(args) > len(_OLD_MIXTURE_ORDER):
            raise TypeError(f"{cls_name} takes at most {len(_OLD_MIXTURE_ORDER)} positional "
                            f"arguments. Received: {args!r}")
        for name, value in zip(_OLD_MIXTURE_ORDER, args, strict=False):
            if given[name] is not None:
                raise TypeError(f"{cls_name} got {name} twice. Received: {name}={value!r} "
                                f"and {name}={given[name]!r}")
            given[name] = value
    elif len(args) == 1:
        given["num_components"] = args[0]
    else:
        raise TypeError(
            f"{cls_name} takes the number of components as its only positional argument; "
            "pass units=, min_scale= and event_ndims= by keyword (a second positional number "
            f"was num_components in the former order). Received: positional arguments {args!r}")
    if given["num_components"] is None:
        given["num_components"] = DEFAULT_NUM_COMPONENTS
    return given


class _Mixture(_DistributionLayer):
    """Mixture of ``num_components`` location-scale components per output unit."""

    _component = None

    def __init__(self, *args, num_components=None, units=None, min_scale=None,
                 event_ndims=None, **kwargs):
        given = _mixture_arguments(type(self).__name__, args, {
            "num_components": num_components, "units": units, "min_scale": min_scale,
            "event_ndims": event_ndims})
        self.num_components = check_positive_int("num_components", given["num_components"])
        min_scale = DEFAULT_MIN_SCALE if given["min_scale"] is None else given["min_scale"]
        if (isinstance(min_scale, bool) or not isinstance(min_scale, int | float)
                or not min_scale >= 0):
            raise ValueError(f"Expected a non-negative number. Received: min_scale={min_scale!r}")
        self.min_scale = float(min_scale)
        self._params_per_unit = 3 * self.num_components
        super().__init__(units=given["units"], event_ndims=given["event_ndims"], **kwargs)

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        if self.units is None and input_shape[-1] != 3 * self.num_components:
            raise ValueError(
                f"{type(self).__name__}(units=None) reads [logits, locs, scales] from the last "
                f"input axis, which must have 3 * num_components = {3 * self.num_components} "
                "entries (pass units= to project the input to them). Received: "
                f"input_shape={input_shape}")
        super().build(input_shape)

    def _params(self, inputs):
        x = super()._params(inputs)
        if self.units is not None:  # [..., units * 3k] -> [..., units, 3k]
            shape = x.shape
            x = tf.reshape(x, tf.concat([tf.shape(x)[:-1], [self.units, -1]], 0))
            x.set_shape(shape[:-1].concatenate([self.units, self._params_per_unit]))
        return x

    def _distribution(self, x):
        logits, loc, raw = tf.split(x, 3, axis=-1)
        scale = tf.nn.softplus(raw) + self.min_scale
        return tfd.MixtureSameFamily(tfd.Categorical(logits=logits), self._component(loc, scale))

    def _surrogate(self, x):  # the mixture mean
        logits, loc, _ = tf.split(x, 3, axis=-1)
        return tf.reduce_sum(tf.nn.softmax(logits) * loc, -1)

    def get_config(self):
        config = super().get_config()
        config.update(num_components=self.num_components, min_scale=self.min_scale)
        return config


class _Logistic(tfd.Logistic):
    """`tfd.Logistic` that samples bfloat16 parameters in float32 and casts the sample
    (tfp 0.23's sampler calls ``np.finfo`` on its dtype, which rejects bfloat16)."""

    def _sample_n(self, n, seed=None):
        if self.dtype != tf.bfloat16:
            return super()._sample_n(n, seed=seed)
        wide = tfd.Logistic(tf.cast(self.loc, tf.float32), tf.cast(self.scale, tf.float32))
        return tf.cast(wide.sample(n, seed=seed), self.dtype)


@_register
class MixtureLogistic(_Mixture):
    """Mixture of logistics per output unit (Salimans et al., 2017, PixelCNN++).

    ``MixtureLogistic(num_components=5, *, units=None, min_scale=1e-3, event_ndims=None,
    seed=None)``: the number of components comes first, as in edward2's
    ``MixtureLogistic(num_components)``; everything else is keyword-only. (The former order
    ``(units, num_components, ...)`` still works where it is unambiguous:
    ``MixtureLogistic(units, num_components=k)`` and ``MixtureLogistic(None, k)``.)

    Args:
      num_components: mixture components per output (default `DEFAULT_NUM_COMPONENTS`).
      units: number of outputs (trainable projection to ``units * 3 * num_components``
        parameters), or None to read ``[logits, locs, raw_scales]`` (each
        ``num_components`` wide) from the input's last axis.
      min_scale: added to ``softplus(raw_scale)`` (default `DEFAULT_MIN_SCALE`).
      event_ndims: trailing axes summed over by ``log_prob`` (default 1).

    Input ``(batch, ..., d)``; output ``(batch, ..., units)`` (or ``(batch, ...)``
    without projection) wrapping ``MixtureSameFamily(Categorical, Logistic)``.
    Feed it to `Discretize` for a discretized logistic mixture likelihood. Under a
    mixed precision policy the distribution is in the compute dtype; under
    ``mixed_bfloat16`` its logistic components draw their samples in float32 and cast
    them to bfloat16 (tfp 0.23 cannot sample a bfloat16 logistic).
    """

    _component = staticmethod(_Logistic)


@_register
class MixtureNormal(_Mixture):
    """Mixture of normals per output unit (a mixture density network, Bishop 1994).

    Same arguments (``MixtureNormal(num_components=5, *, units=None, ...)``) and shapes as
    `MixtureLogistic`, with normal components.
    """

    _component = staticmethod(tfd.Normal)


def _bin_mass(dist, lower, upper, first, last):
    """P(lower < X <= upper) with the tails folded into the first/last bins.

    Uses the cdf below the median and the survival function above it (accurate in
    both tails in float32); a mixture is the probability-weighted sum of its
    components' masses, each computed the accurate way.
    """
    if _is_mixture_same_family(dist):
        expand = lambda t: tf.expand_dims(t, -1)  # noqa: E731
        masses = _bin_mass(dist.components_distribution, expand(lower), expand(upper),
                           expand(first), expand(last))
        probs = dist.mixture_distribution.probs_parameter()
        return tf.reduce_sum(masses * tf.cast(probs, masses.dtype), -1)
    cdf_upper = tf.where(last, tf.ones_like(upper), dist.cdf(upper))
    cdf_lower = tf.where(first, tf.zeros_like(lower), dist.cdf(lower))
    sf_lower = tf.where(first, tf.ones_like(lower), dist.survival_function(lower))
    sf_upper = tf.where(last, tf.zeros_like(upper), dist.survival_function(upper))
    return tf.where(cdf_upper < 0.5, cdf_upper - cdf_lower, sf_lower - sf_upper)


class DiscretizedDistribution(tfd.Distribution):
    """A continuous scalar distribution integrated over ``num_bins`` bins.

    Level ``k`` (an integer in ``[0, num_bins)``) stands for the continuous point
    ``low + k * step``, ``step = (high - low) / (num_bins - 1)``, and gets the mass
    of ``(point - step/2, point + step/2]``; level 0 also takes the lower tail and
    the last level the upper tail, so the probabilities sum to one. Where a bin's
    mass underflows (< 1e-12) ``log_prob`` falls back to ``log pdf * step`` at the
    bin's centre (as in PixelCNN++).
    """

    def __init__(self, distribution, num_bins, low=0.0, high=None, validate_args=False,
                 allow_nan_stats=True, name="DiscretizedDistribution"):
        parameters = dict(locals())
        if distribution.event_shape.rank != 0:
            raise ValueError("DiscretizedDistribution needs a scalar-event distribution. "
                             f"Received: event_shape={distribution.event_shape}")
        self._distribution = distribution
        self.num_bins = check_positive_int("num_bins", num_bins)
        if self.num_bins < 2:
            raise ValueError(f"Expected num_bins >= 2. Received: num_bins={num_bins!r}")
        self.low = float(low)
        self.high = float(self.num_bins - 1 if high is None else high)
        if not self.high > self.low:
            raise ValueError(f"Expected high > low. Received: low={low!r}, high={high!r}")
        self.step = (self.high - self.low) / (self.num_bins - 1)
        super().__init__(dtype=distribution.dtype,
                         reparameterization_type=tfd.NOT_REPARAMETERIZED,
                         validate_args=validate_args, allow_nan_stats=allow_nan_stats,
                         parameters=parameters, name=name)

    @property
    def distribution(self):
        return self._distribution

    @classmethod
    def _parameter_properties(cls, dtype, num_classes=None):
        return dict(distribution=tfp.util.BatchedComponentProperties())

    def _batch_shape(self):
        return self._distribution.batch_shape

    def _batch_shape_tensor(self):
        return self._distribution.batch_shape_tensor()

    def _event_shape(self):
        return tf.TensorShape([])

    def _event_shape_tensor(self):
        return tf.constant([], tf.int32)

    def to_level(self, x):
        """Continuous value -> (fractional) level units."""
        return (x - self.low) / self.step

    def levels(self, x):
        """Continuous values -> their (nearest, clipped) integer levels, as ``dtype``."""
        level = tf.clip_by_value(tf.round(self.to_level(x)), 0.0, self.num_bins - 1.0)
        return tf.cast(level, self.dtype)

    def _sample_n(self, n, seed=None):
        return self.levels(self._distribution.sample(n, seed=seed))

    def _log_prob(self, k):
        k = tf.cast(k, self.dtype)
        centre = self.low + k * self.step
        half = 0.5 * self.step
        first, last = k <= 0.5, k >= self.num_bins - 1.5
        mass = _bin_mass(self._distribution, centre - half, centre + half, first, last)
        fallback = self._distribution.log_prob(centre) + math.log(self.step)
        log_p = tf.where(mass > 1e-12, tf.math.log(tf.maximum(mass, 1e-12)), fallback)
        valid = (k > -0.5) & (k < self.num_bins - 0.5) & tf.equal(k, tf.round(k))
        return tf.where(valid, log_p, tf.constant(-np.inf, self.dtype))

    def bin_probs(self):
        """Probabilities of every level, shape ``batch_shape + [num_bins]``."""
        levels = _range(self.num_bins, self.dtype)
        levels = tf.reshape(levels, [-1] + [1] * self.batch_shape.rank)
        probs = tf.exp(self._log_prob(levels))
        return tf.transpose(probs, list(range(1, self.batch_shape.rank + 1)) + [0])

    def _mean(self):
        return tf.reduce_sum(self.bin_probs() * _range(self.num_bins, self.dtype), -1)

    def _mode(self):
        return tf.cast(tf.argmax(self.bin_probs(), -1), self.dtype)


@_register
class Discretize(_compat.RandomVariableInputs, BayesianLayer, _compat.RandomVariableOutputs,
                 keras.layers.Layer):
    """Discretizes a continuous `RandomVariable` into ``num_bins`` integer levels.

    The output distribution's ``log_prob(k)`` is the input distribution's mass over
    level ``k``'s bin (`DiscretizedDistribution`; edge bins take the tails), e.g. a
    discretized logistic mixture over 256 pixel intensities (Salimans et al., 2017;
    Bayesian Layers, Fig. 6). The input's event structure is kept: an input
    ``Independent(d, n)`` becomes ``Independent(DiscretizedDistribution(d), n)``.

    Args:
      num_bins: number of levels (default 256).
      low, high: continuous values of levels 0 and ``num_bins - 1`` (default 0 and
        ``num_bins - 1``: the levels are the continuous values; use ``-1, 1`` for
        PixelCNN++-style rescaled pixels).
      seed: int or None for the lazy sample (levels as floats, straight-through
        gradient of the input's mean in level units).

    A Tensor input is treated as a point mass at its value (this is what Keras's
    symbolic shape inference passes through). Output shape = input shape.
    """

    def __init__(self, num_bins=256, low=None, high=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.num_bins = check_positive_int("num_bins", num_bins)
        self.low = None if low is None else float(low)
        self.high = None if high is None else float(high)
        DiscretizedDistribution(tfd.Normal(0.0, 1.0), self.num_bins, self._low, high)
        self._init_seed(seed)

    @property
    def _low(self):
        return 0.0 if self.low is None else self.low

    def call(self, inputs):
        if isinstance(inputs, RandomVariable):
            dist = inputs.distribution
        else:
            dist = tfd.Deterministic(tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype))
        ndims = 0
        if _is_independent(dist):
            ndims = int(tf.get_static_value(dist.reinterpreted_batch_ndims))
            dist = dist.distribution
        disc = DiscretizedDistribution(dist, self.num_bins, self._low, self.high)
        out = tfd.Independent(disc, ndims) if ndims else disc
        seed = self._next_seed()
        upstream = inputs.sampler if isinstance(inputs, RandomVariable) else None

        def sampler(sample_seed):
            # The input's own sampler (replica-aware for our output layers), rounded to
            # levels: the same draws as ``disc.sample(seed=sample_seed)``.
            if upstream is None:
                return disc.sample(seed=sample_seed)
            return disc.levels(upstream(sample_seed))

        return RandomVariable(out, value=lambda: straight_through(
            sampler(seed), disc.to_level(dist.mean())), sampler=sampler)

    def get_config(self):
        config = super().get_config()
        config.update(num_bins=self.num_bins, low=self.low, high=self.high)
        return config
