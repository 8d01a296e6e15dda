"""Heteroscedastic classification heads: logits with input-dependent Gaussian noise.

Collier et al. (2021, "Correlated Input-Dependent Label Noise in Large-Scale Image
Classification") model the logits of an example as a random variable
``u ~ N(μ(x), Σ(x))`` and the label as ``softmax(u / τ)`` (``sigmoid`` for binary and
multilabel heads). The predictive probabilities ``E[softmax(u / τ)]`` are estimated with
``S`` Monte Carlo draws of ``u`` (``train_mc_samples`` in training calls,
``test_mc_samples`` otherwise)::

    p(x) ≈ (1/S) Σ_s softmax((μ(x) + ε_s) / τ),     ε_s ~ N(0, Σ(x))

and the heads return ``log p`` as the logits (for a sigmoid head the inverse sigmoid of
``p``), ready for the usual cross-entropy losses. The covariance is

* diagonal, ``Σ(x) = diag(σ(x)²)`` (`MCSoftmaxDense`, whose noise may also be logistic
  or Gumbel instead of Gaussian), or
* low rank plus diagonal ("factor analysis"), ``Σ(x) = V(x) V(x)ᵀ + diag(d(x)²)`` with
  ``V(x)`` of shape ``[classes, num_factors]`` (`MCSoftmaxDenseFA`, `MCSigmoidDenseFA`):
  ``ε = V(x) ε_R + d(x) ⊙ ε_K`` with ``ε_R ~ N(0, I_R)``, ``ε_K ~ N(0, I_K)``. The
  parameter-efficient variant replaces ``V(x) ε_R`` by ``v(x) ⊙ (V ε_R)`` (one shared
  ``V``, an input-dependent scale ``v(x)`` per class).

`ExactSigmoidDense` needs no sampling: with one independent latent per output,
``P(u > 0) = Φ(μ / σ)`` (Gaussian noise) or ``sigmoid(μ / σ)`` (logistic noise).
`EnsembleHeteroscedasticOutputs` combines several heads. The SNGP variant is in
`hetsngp`. Argument names and defaults follow edward2's layers of the same names.

Noise is stateless and seeded (`base.BayesianLayer`): each call draws from the layer's
``[seed, counter]`` (or from ``[seed, 0]`` for a call given ``seed=``), so the noise
state is saved with the model and the heads compile under XLA.
"""

import math
import numbers

import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, kernels
from bayes_planet.layers._registry import PACKAGE
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer
from bayes_planet.layers.checks import (
    check_non_negative_int,
    check_positive_int,
    check_positive_number,
)
from bayes_planet.layers.noise import per_example, split_seed, standard_normal

__all__ = [
    "AVERAGINGS",
    "DEFAULT_MC_SAMPLES",
    "LOGIT_NOISES",
    "MIN_SCALE_MONTE_CARLO",
    "TEMPERATURE_LOWER_BOUND",
    "TEMPERATURE_UPPER_BOUND",
    "EnsembleHeteroscedasticOutputs",
    "ExactSigmoidDense",
    "MCHeteroscedasticOutput",
    "MCSigmoidDenseFA",
    "MCSoftmaxDense",
    "MCSoftmaxDenseFA",
    "MCSoftmaxDenseFASegmentation",
    "compute_temperature",
]

#: The noise families of the latent logits (location-scale, standardized).
LOGIT_NOISES = ("normal", "logistic", "gumbel")
#: Added to every softplus scale of the Monte Carlo heads (keeps the noise non-degenerate).
MIN_SCALE_MONTE_CARLO = 1e-3
#: The interval of a tuned temperature ``τ = lower + (upper - lower) · sigmoid(t)``.
TEMPERATURE_LOWER_BOUND = 0.3
TEMPERATURE_UPPER_BOUND = 3.0
#: Monte Carlo draws per example, in training and at inference, unless set.
DEFAULT_MC_SAMPLES = 1000
#: `EnsembleHeteroscedasticOutputs`' ways of combining its members.
AVERAGINGS = ("ensemble_cross_ent", "gibbs_cross_ent")
#: The smallest uniform draw behind the logistic and Gumbel noise.
_MIN_UNIFORM = 1e-7


def compute_temperature(pre_sigmoid_temperature, lower=None, upper=None):
    """``lower + (upper - lower) · sigmoid(pre_sigmoid_temperature)``: a tuned temperature.

    Args:
      pre_sigmoid_temperature: the unconstrained value (a tensor or number).
      lower: the smallest temperature (None: `TEMPERATURE_LOWER_BOUND`).
      upper: the largest temperature (None: `TEMPERATURE_UPPER_BOUND`).
    """
    lower = TEMPERATURE_LOWER_BOUND if lower is None else lower
    upper = TEMPERATURE_UPPER_BOUND if upper is None else upper
    return (upper - lower) * tf.math.sigmoid(pre_sigmoid_temperature) + lower


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"Expected one of {choices}. Received: {name}={value!r}")
    return value


def _check_eps(eps):
    if (isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps)
            or not 0.0 < eps < 0.5):
        raise ValueError(f"Expected a number in (0, 0.5). Received: eps={eps!r}")
    return float(eps)


def _check_bounds(lower, upper):
    low = TEMPERATURE_LOWER_BOUND if lower is None else check_positive_number(
        "temperature_lower_bound", lower)
    high = TEMPERATURE_UPPER_BOUND if upper is None else check_positive_number(
        "temperature_upper_bound", upper)
    if low >= high:
        raise ValueError("Expected temperature_lower_bound < temperature_upper_bound. Received: "
                         f"temperature_lower_bound={lower!r}, temperature_upper_bound={upper!r}")


def _check_num_factors(num_factors, width, what):
    num_factors = check_non_negative_int("num_factors", num_factors)
    if num_factors > width:
        raise ValueError(f"Expected num_factors <= {what}={width}. "
                         f"Received: num_factors={num_factors}")
    return num_factors


def standard_noise(kind, shape, seed, dtype):
    """Standardized ``kind`` noise (one of `LOGIT_NOISES`) of ``shape``, stateless.

    Normal: N(0, 1); logistic: ``log u - log(1 - u)``; Gumbel: ``-log(-log u)``, with
    ``u`` uniform on ``[1e-7, 1)``.
    """
    if kind == "normal":
        return standard_normal(shape, seed, dtype)
    u = tf.random.stateless_uniform(shape, seed, minval=_MIN_UNIFORM, maxval=1.0, dtype=dtype)
    if kind == "logistic":
        return tf.math.log(u) - tf.math.log1p(-u)
    return -tf.math.log(-tf.math.log(u))


def _inverse_sigmoid(probs, eps):
    probs = tf.clip_by_value(probs, eps, 1.0 - eps)
    return tf.math.log(probs) - tf.math.log1p(-probs)


def _dense(units, name, layer, kernel_regularizer, bias_regularizer, activation=None):
    return keras.layers.Dense(units, activation=activation, kernel_regularizer=kernel_regularizer,
                              bias_regularizer=bias_regularizer, dtype=layer.dtype_policy,
                              name=name)


class MCHeteroscedasticOutput(BayesianLayer, keras.layers.Layer):
    """Base of the Monte Carlo heads: samples the latent logits and averages their softmax.

    A subclass computes the location ``μ(x)`` and the scale parameters
    (``_distribution``) and draws the logit noise from them (``_noise``); this class does
    the sampling, the temperature, the averaging and the outputs. See the module
    docstring for the model.

    Args:
      num_classes: the number of classes; 2 makes a sigmoid head with one logit.
      logit_noise: the latent noise, one of `LOGIT_NOISES`.
      temperature: the softmax temperature τ > 0 (ignored with ``tune_temperature``).
      train_mc_samples: Monte Carlo draws per example in training calls.
      test_mc_samples: Monte Carlo draws per example in other calls.
      compute_pred_variance: also return the per-class variance of the sampled
        probabilities (else that output is None).
      share_samples_across_batch: one set of standardized noise draws for the whole batch
        (each example still scales it by its own ``Σ(x)``).
      logits_only: return the logits alone (e.g. in a ``Sequential`` model).
      eps: probabilities are clipped to ``[eps, 1]`` before the log (``[eps, 1 - eps]``
        before an inverse sigmoid).
      return_unaveraged_logits: also return the ``[batch, samples, ...]`` logits of the
        single draws.
      tune_temperature: learn the temperature in ``[temperature_lower_bound,
        temperature_upper_bound]`` (a trainable ``pre_sigmoid_temperature``, starting at
        the interval's midpoint; `compute_temperature`).
      temperature_lower_bound: the tuned temperature's lower end (None:
        `TEMPERATURE_LOWER_BOUND`).
      temperature_upper_bound: the tuned temperature's upper end (None:
        `TEMPERATURE_UPPER_BOUND`).
      seed: int seed of the noise (None: a random one).
      **kwargs: Keras layer arguments (``name``, ``dtype``; a mixed precision policy
        computes in its variable dtype).

    Call arguments: ``inputs`` ``[batch, ..., d]``; ``training``; ``seed``, an optional int
    that fixes this call's noise (draws from ``[seed, 0]``). Returns ``logits`` with
    ``logits_only``, else ``(logits, log_probs, probs, pred_variance)``; with
    ``return_unaveraged_logits``, ``(logits, sample_logits)`` or ``(logits, sample_logits,
    log_probs, probs, pred_variance)``. (``pred_variance`` is None unless
    ``compute_pred_variance``: a Keras 3 functional model takes no None output, so build
    one with ``logits_only`` or ``compute_pred_variance``.)
    """

    def __init__(self, num_classes, logit_noise="normal", temperature=1.0,
                 train_mc_samples=DEFAULT_MC_SAMPLES, test_mc_samples=DEFAULT_MC_SAMPLES,
                 compute_pred_variance=False, share_samples_across_batch=False,
                 logits_only=False, eps=1e-7, return_unaveraged_logits=False,
                 tune_temperature=False, temperature_lower_bound=None,
                 temperature_upper_bound=None, seed=None, **kwargs):
        super().__init__(**kernels.full_precision(kwargs))
        self.num_classes = check_positive_int("num_classes", num_classes)
        if self.num_classes < 2:
            raise ValueError(f"Expected num_classes >= 2. Received: num_classes={num_classes!r}")
        self.logit_noise = _check_choice("logit_noise", logit_noise, LOGIT_NOISES)
        self.temperature = check_positive_number("temperature", temperature)
        self.train_mc_samples = check_positive_int("train_mc_samples", train_mc_samples)
        self.test_mc_samples = check_positive_int("test_mc_samples", test_mc_samples)
        self.compute_pred_variance = bool(compute_pred_variance)
        self.share_samples_across_batch = bool(share_samples_across_batch)
        self.logits_only = bool(logits_only)
        self.eps = _check_eps(eps)
        self.return_unaveraged_logits = bool(return_unaveraged_logits)
        self.tune_temperature = bool(tune_temperature)
        _check_bounds(temperature_lower_bound, temperature_upper_bound)
        self.temperature_lower_bound = temperature_lower_bound
        self.temperature_upper_bound = temperature_upper_bound
        self._init_seed(seed)
        self.pre_sigmoid_temperature = None

    @property
    def sigmoid(self):
        """Whether the head is a sigmoid one (binary or multilabel), else a softmax one."""
        return self.num_classes == 2

    @property
    def width(self):
        """The number of logits: 1 for a binary softmax head, else ``num_classes``."""
        return 1 if self.num_classes == 2 else self.num_classes

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank is None or input_shape.rank < 2 or input_shape[-1] is None:
            raise ValueError("Expected inputs of shape [batch, ..., d] with a defined d. "
                             f"Received: input_shape={input_shape}")
        for sublayer, units in self._sublayers(int(input_shape[-1])):
            _compat.build_sublayer(sublayer, input_shape[:-1].concatenate([units]))
        if self.tune_temperature:
            # Zero: the middle of the temperature interval.
            self.pre_sigmoid_temperature = self.add_weight(
                name="pre_sigmoid_temperature", shape=[], initializer="zeros", trainable=True)
        super().build(input_shape)

    def _sublayers(self, dim):
        """``(sublayer, its input width)`` pairs to build for inputs of width ``dim``."""
        raise NotImplementedError

    def _distribution(self, inputs, training):
        """``(locations [batch, ..., width], scale parameters)`` of the latent logits."""
        raise NotImplementedError

    def _noise(self, inputs, scales, num_samples, seed):
        """``[batch, num_samples, ..., width]`` logit noise for the scale parameters."""
        raise NotImplementedError

    def current_temperature(self):
        """The temperature τ of the next call (the tuned one with ``tune_temperature``)."""
        if not self.tune_temperature:
            return tf.constant(self.temperature, self.compute_dtype)
        return tf.cast(compute_temperature(self.pre_sigmoid_temperature,
                                           self.temperature_lower_bound,
                                           self.temperature_upper_bound), self.compute_dtype)

    def standard_draws(self, like, width, num_samples, seed, kind="normal"):
        """``[batch or 1, num_samples, ..., width]`` standardized noise shaped after ``like``
        (``[batch, ..., any]``): one draw for the whole batch with
        ``share_samples_across_batch``, else per example (replica-aware)."""
        shape = tf.shape(like)
        middle = shape[1:-1]
        if self.share_samples_across_batch:
            full = tf.concat([[1, num_samples], middle, [width]], 0)
            return standard_noise(kind, full, seed, self.compute_dtype)
        full = tf.concat([shape[:1], [num_samples], middle, [width]], 0)
        return per_example(lambda s, sd: standard_noise(kind, s, sd, self.compute_dtype),
                           full, seed)

    def _call_seed(self, seed):
        if seed is None:
            return self._next_seed()
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"Expected a non-negative integer or None. Received: seed={seed!r}")
        return tf.constant([int(seed) % (2**31 - 1), 0], tf.int32)

    def call(self, inputs, training=None, seed=None):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        num_samples = self.train_mc_samples if training else self.test_mc_samples
        call_seed = self._call_seed(seed)
        locs, scales = self._distribution(x, training)
        latents = tf.expand_dims(locs, 1) + self._noise(x, scales, num_samples, call_seed)
        latents = latents / self.current_temperature()
        samples = tf.math.sigmoid(latents) if self.sigmoid else tf.nn.softmax(latents)
        probs = tf.reduce_mean(samples, axis=1)
        pred_variance = None
        if self.compute_pred_variance:
            pred_variance = tf.reduce_mean(tf.square(samples - tf.expand_dims(probs, 1)), axis=1)
        probs = tf.clip_by_value(probs, self.eps, 1.0)
        log_probs = tf.math.log(probs)
        if self.sigmoid:
            probs = tf.clip_by_value(probs, self.eps, 1.0 - self.eps)
            logits = _inverse_sigmoid(probs, self.eps)
        else:
            logits = log_probs
        if self.return_unaveraged_logits:
            if self.sigmoid:
                sample_logits = _inverse_sigmoid(samples, self.eps)
            else:
                sample_logits = tf.math.log(tf.clip_by_value(samples, self.eps, 1.0))
            if self.logits_only:
                return logits, sample_logits
            return logits, sample_logits, log_probs, probs, pred_variance
        if self.logits_only:
            return logits
        return logits, log_probs, probs, pred_variance

    def compute_output_shape(self, input_shape):
        shape = tf.TensorShape(input_shape)[:-1].concatenate([self.width])
        variance = shape if self.compute_pred_variance else None
        if self.return_unaveraged_logits:
            samples = shape[:1].concatenate([None]).concatenate(shape[1:])
            if self.logits_only:
                return shape, samples
            return shape, samples, shape, shape, variance
        if self.logits_only:
            return shape
        return shape, shape, shape, variance

    def get_config(self):
        config = super().get_config()
        config.update(
            num_classes=self.num_classes, logit_noise=self.logit_noise,
            temperature=self.temperature, train_mc_samples=self.train_mc_samples,
            test_mc_samples=self.test_mc_samples,
            compute_pred_variance=self.compute_pred_variance,
            share_samples_across_batch=self.share_samples_across_batch,
            logits_only=self.logits_only, eps=self.eps,
            return_unaveraged_logits=self.return_unaveraged_logits,
            tune_temperature=self.tune_temperature,
            temperature_lower_bound=self.temperature_lower_bound,
            temperature_upper_bound=self.temperature_upper_bound,
        )
        return config


class _Regularized:
    """Mixin of the heads whose dense sublayers take kernel and bias regularizers."""

    def _init_regularizers(self, kernel_regularizer, bias_regularizer):
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)

    def _make_dense(self, units, name, activation=None):
        return _dense(units, name, self, self.kernel_regularizer, self.bias_regularizer,
                      activation)

    def _regularizer_config(self):
        return {"kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer)
                if self.kernel_regularizer is not None else None,
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer)
                if self.bias_regularizer is not None else None}


@_register
class MCSoftmaxDense(_Regularized, MCHeteroscedasticOutput):
    """Heteroscedastic head with a diagonal covariance: ``u = μ(x) + σ(x) ⊙ ε``.

    ``μ(x)`` is a dense layer (``loc_layer``), ``σ(x)`` a dense layer with a softplus
    (``scale_layer``) plus `MIN_SCALE_MONTE_CARLO`; ``ε`` is standardized
    ``logit_noise``. A drop-in replacement for a ``Dense`` output layer: ``logits =
    MCSoftmaxDense(10)(x)[0]``.

    Args:
      num_classes: the number of classes (2: one sigmoid logit).
      logit_noise: the noise of the logits, one of `LOGIT_NOISES`.
      temperature: see `MCHeteroscedasticOutput`.
      train_mc_samples: see `MCHeteroscedasticOutput`.
      test_mc_samples: see `MCHeteroscedasticOutput`.
      compute_pred_variance: see `MCHeteroscedasticOutput`.
      share_samples_across_batch: see `MCHeteroscedasticOutput`.
      logits_only: see `MCHeteroscedasticOutput`.
      eps: see `MCHeteroscedasticOutput`.
      kernel_regularizer: regularizer of the dense layers' kernels.
      bias_regularizer: regularizer of the dense layers' biases.
      return_unaveraged_logits: see `MCHeteroscedasticOutput`.
      tune_temperature: see `MCHeteroscedasticOutput`.
      temperature_lower_bound: see `MCHeteroscedasticOutput`.
      temperature_upper_bound: see `MCHeteroscedasticOutput`.
      seed: see `MCHeteroscedasticOutput`.
      **kwargs: Keras layer arguments.
    """

    def __init__(self, num_classes, logit_noise="normal", temperature=1.0,
                 train_mc_samples=DEFAULT_MC_SAMPLES, test_mc_samples=DEFAULT_MC_SAMPLES,
                 compute_pred_variance=False, share_samples_across_batch=False,
                 logits_only=False, eps=1e-7, kernel_regularizer=None, bias_regularizer=None,
                 return_unaveraged_logits=False, tune_temperature=False,
                 temperature_lower_bound=None, temperature_upper_bound=None, seed=None,
                 **kwargs):
        super().__init__(
            num_classes, logit_noise, temperature, train_mc_samples, test_mc_samples,
            compute_pred_variance, share_samples_across_batch, logits_only, eps,
            return_unaveraged_logits, tune_temperature, temperature_lower_bound,
            temperature_upper_bound, seed, **kwargs)
        self._init_regularizers(kernel_regularizer, bias_regularizer)
        self.loc_layer = self._make_dense(self.width, "loc_layer")
        self.scale_layer = self._make_dense(self.width, "scale_layer", "softplus")

    def _sublayers(self, dim):
        return [(self.loc_layer, dim), (self.scale_layer, dim)]

    def _distribution(self, inputs, training):
        return self.loc_layer(inputs), self.scale_layer(inputs) + MIN_SCALE_MONTE_CARLO

    def _noise(self, inputs, scales, num_samples, seed):
        draws = self.standard_draws(inputs, self.width, num_samples, seed, self.logit_noise)
        return draws * tf.expand_dims(scales, 1)

    def get_config(self):
        config = super().get_config()
        config.update(self._regularizer_config())
        return config


class _FactorAnalysis(_Regularized, MCHeteroscedasticOutput):
    """The low-rank plus diagonal Gaussian noise of `MCSoftmaxDenseFA` and `MCSigmoidDenseFA`:
    ``ε = V(x) ε_R + d(x) ⊙ ε_K`` (or ``v(x) ⊙ (V ε_R) + d(x) ⊙ ε_K``, parameter-efficient)."""

    def _init_factors(self, num_factors, parameter_efficient):
        self.parameter_efficient = bool(parameter_efficient)
        self.num_factors = num_factors
        self.scale_layer = self.scale_layer_homoscedastic = None
        self.scale_layer_heteroscedastic = None
        if num_factors and self.parameter_efficient:
            self.scale_layer_homoscedastic = self._make_dense(
                self.width, "scale_layer_homoscedastic")
            self.scale_layer_heteroscedastic = self._make_dense(
                self.width, "scale_layer_heteroscedastic")
        elif num_factors:
            self.scale_layer = self._make_dense(self.width * num_factors, "scale_layer")
        self.diag_layer = self._make_dense(self.width, "diag_layer", "softplus")

    def _sublayers(self, dim):
        pairs = [(self.diag_layer, dim)]
        if self.scale_layer is not None:
            pairs.append((self.scale_layer, dim))
        if self.scale_layer_homoscedastic is not None:
            pairs += [(self.scale_layer_homoscedastic, self.num_factors),
                      (self.scale_layer_heteroscedastic, dim)]
        return pairs

    def diagonal_scale(self, inputs):
        """``d(x)``: the softplus diagonal scale plus `MIN_SCALE_MONTE_CARLO`."""
        return self.diag_layer(inputs) + MIN_SCALE_MONTE_CARLO

    def factor_loadings(self, inputs):
        """``V(x)``, ``[batch, ..., width, num_factors]`` (not parameter-efficient heads)."""
        loadings = self.scale_layer(inputs)
        shape = tf.concat([tf.shape(loadings)[:-1], [self.width, self.num_factors]], 0)
        return tf.reshape(loadings, shape)

    def _noise(self, inputs, scales, num_samples, seed):
        diag_seed, factor_seed = split_seed(seed, 2)
        noise = self.standard_draws(inputs, self.width, num_samples, diag_seed) * \
            tf.expand_dims(scales, 1)
        if not self.num_factors:
            return noise
        factors = self.standard_draws(inputs, self.num_factors, num_samples, factor_seed)
        if self.parameter_efficient:
            shared = self.scale_layer_homoscedastic(factors)
            return noise + shared * tf.expand_dims(self.scale_layer_heteroscedastic(inputs), 1)
        loadings = tf.expand_dims(self.factor_loadings(inputs), 1)  # [b, 1, ..., K, R]
        return noise + tf.squeeze(tf.matmul(loadings, factors[..., None]), -1)

    def get_config(self):
        config = super().get_config()
        config.update(self._regularizer_config(), num_factors=self.num_factors,
                      parameter_efficient=self.parameter_efficient)
        del config["logit_noise"]  # Always Gaussian.
        return config


@_register
class MCSoftmaxDenseFA(_FactorAnalysis):
    """Softmax head with a low-rank plus diagonal covariance of the logits.

    ``u = μ(x) + V(x) ε_R + d(x) ⊙ ε_K``, ``Σ(x) = V(x) V(x)ᵀ + diag(d(x)²)``: ``μ`` a
    dense layer (``loc_layer``), ``V(x)`` a dense layer of ``num_classes · num_factors``
    units (``scale_layer``), ``d(x)`` a softplus dense layer plus
    `MIN_SCALE_MONTE_CARLO` (``diag_layer``). With ``parameter_efficient`` the factor term
    is ``v(x) ⊙ (V ε_R)``: a shared ``V`` (``scale_layer_homoscedastic``, a dense layer of
    the factors) scaled per example (``scale_layer_heteroscedastic``), ``O(d K)`` weights
    instead of ``O(d K R)``. Inputs may have middle axes (``[batch, ..., d]``, e.g. a
    segmentation's height and width): each position gets its own latent logits.

    Args:
      num_classes: the number of classes, > 2 (a binary head has no correlations to
        model: `MCSigmoidDenseFA`).
      num_factors: the rank R of ``V(x)``, ``0 <= R <= num_classes`` (0: diagonal only).
      temperature: see `MCHeteroscedasticOutput`.
      parameter_efficient: the shared-``V`` variant above.
      train_mc_samples: see `MCHeteroscedasticOutput`.
      test_mc_samples: see `MCHeteroscedasticOutput`.
      compute_pred_variance: see `MCHeteroscedasticOutput`.
      share_samples_across_batch: see `MCHeteroscedasticOutput`.
      logits_only: see `MCHeteroscedasticOutput`.
      eps: see `MCHeteroscedasticOutput`.
      kernel_regularizer: regularizer of the dense layers' kernels.
      bias_regularizer: regularizer of the dense layers' biases.
      return_unaveraged_logits: see `MCHeteroscedasticOutput`.
      tune_temperature: see `MCHeteroscedasticOutput`.
      temperature_lower_bound: see `MCHeteroscedasticOutput`.
      temperature_upper_bound: see `MCHeteroscedasticOutput`.
      seed: see `MCHeteroscedasticOutput`.
      **kwargs: Keras layer arguments.
    """

    def __init__(self, num_classes, num_factors, temperature=1.0, parameter_efficient=False,
                 train_mc_samples=DEFAULT_MC_SAMPLES, test_mc_samples=DEFAULT_MC_SAMPLES,
                 compute_pred_variance=False, share_samples_across_batch=False,
                 logits_only=False, eps=1e-7, kernel_regularizer=None, bias_regularizer=None,
                 return_unaveraged_logits=False, tune_temperature=False,
                 temperature_lower_bound=None, temperature_upper_bound=None, seed=None,
                 **kwargs):
        classes = check_positive_int("num_classes", num_classes)
        if classes < 3:
            raise ValueError("Expected num_classes > 2 (a binary head: MCSigmoidDenseFA). "
                             f"Received: num_classes={num_classes!r}")
        super().__init__(
            classes, "normal", temperature, train_mc_samples, test_mc_samples,
            compute_pred_variance, share_samples_across_batch, logits_only, eps,
            return_unaveraged_logits, tune_temperature, temperature_lower_bound,
            temperature_upper_bound, seed, **kwargs)
        self._init_regularizers(kernel_regularizer, bias_regularizer)
        self._init_factors(_check_num_factors(num_factors, classes, "num_classes"),
                           parameter_efficient)
        self.loc_layer = self._make_location_layer()

    def _make_location_layer(self):
        return self._make_dense(self.width, "loc_layer")

    def _sublayers(self, dim):
        return [(self.loc_layer, dim)] + super()._sublayers(dim)

    def _distribution(self, inputs, training):
        return self.loc_layer(inputs), self.diagonal_scale(inputs)


@_register
class MCSoftmaxDenseFASegmentation(MCSoftmaxDenseFA):
    """`MCSoftmaxDenseFA` for per-pixel classification, inputs ``[batch, height, width, d]``.

    The same layer (any ``[batch, ..., d]`` input works there); this name requires rank-4
    inputs. Arguments as `MCSoftmaxDenseFA`'s.
    """

    def build(self, input_shape):
        if tf.TensorShape(input_shape).rank != 4:
            raise ValueError("Expected inputs of shape [batch, height, width, d]. "
                             f"Received: input_shape={tf.TensorShape(input_shape)}")
        super().build(input_shape)


@_register
class MCSigmoidDenseFA(_FactorAnalysis):
    """Sigmoid head (binary or multilabel) with a low-rank plus diagonal logit covariance.

    ``num_outputs`` independent sigmoid outputs whose latent logits ``u = μ(x) + V(x) ε_R +
    d(x) ⊙ ε_K`` are correlated through ``V(x)`` (as in `MCSoftmaxDenseFA`); the logits
    returned are the inverse sigmoid of the Monte Carlo mean probabilities.

    Args:
      num_outputs: the number of sigmoid outputs (1 for a binary head).
      num_factors: the rank R of ``V(x)``, ``0 <= R <= num_outputs`` (0: diagonal only).
      temperature: see `MCHeteroscedasticOutput`.
      parameter_efficient: see `MCSoftmaxDenseFA`.
      train_mc_samples: see `MCHeteroscedasticOutput`.
      test_mc_samples: see `MCHeteroscedasticOutput`.
      compute_pred_variance: see `MCHeteroscedasticOutput`.
      share_samples_across_batch: see `MCHeteroscedasticOutput`.
      logits_only: see `MCHeteroscedasticOutput`.
      eps: see `MCHeteroscedasticOutput`.
      kernel_regularizer: regularizer of the dense layers' kernels.
      bias_regularizer: regularizer of the dense layers' biases.
      return_unaveraged_logits: see `MCHeteroscedasticOutput`.
      tune_temperature: see `MCHeteroscedasticOutput`.
      temperature_lower_bound: see `MCHeteroscedasticOutput`.
      temperature_upper_bound: see `MCHeteroscedasticOutput`.
      seed: see `MCHeteroscedasticOutput`.
      **kwargs: Keras layer arguments.
    """

    def __init__(self, num_outputs, num_factors=0, temperature=1.0, parameter_efficient=False,
                 train_mc_samples=DEFAULT_MC_SAMPLES, test_mc_samples=DEFAULT_MC_SAMPLES,
                 compute_pred_variance=False, share_samples_across_batch=False,
                 logits_only=False, eps=1e-7, kernel_regularizer=None, bias_regularizer=None,
                 return_unaveraged_logits=False, tune_temperature=False,
                 temperature_lower_bound=None, temperature_upper_bound=None, seed=None,
                 **kwargs):
        self.num_outputs = check_positive_int("num_outputs", num_outputs)
        kwargs.pop("num_classes", None)  # A config's (always 2).
        super().__init__(
            2, "normal", temperature, train_mc_samples, test_mc_samples,
            compute_pred_variance, share_samples_across_batch, logits_only, eps,
            return_unaveraged_logits, tune_temperature, temperature_lower_bound,
            temperature_upper_bound, seed, **kwargs)
        self._init_regularizers(kernel_regularizer, bias_regularizer)
        self._init_factors(_check_num_factors(num_factors, self.num_outputs, "num_outputs"),
                           parameter_efficient)
        self.loc_layer = self._make_dense(self.width, "loc_layer")

    @property
    def width(self):
        return self.num_outputs

    def _sublayers(self, dim):
        return [(self.loc_layer, dim)] + super()._sublayers(dim)

    def _distribution(self, inputs, training):
        return self.loc_layer(inputs), self.diagonal_scale(inputs)

    def get_config(self):
        config = super().get_config()
        del config["num_classes"]
        config["num_outputs"] = self.num_outputs
        return config


@_register
class ExactSigmoidDense(keras.layers.Layer):
    """Sigmoid head with a diagonal latent noise, in closed form (no sampling).

    With one latent ``u = μ(x) + σ(x) ε`` per output and the label ``1[u > 0]``,
    ``p = P(u > 0)`` is ``Φ(μ / σ)`` for Gaussian ``ε`` and ``sigmoid(μ / σ)`` for logistic
    ``ε``. ``μ`` is a dense layer (``loc_layer``), ``σ`` a softplus dense layer
    (``diag_layer``) plus ``min_scale``. The logits are ``log p - log(1 - p)`` (computed
    as ``log Φ(z) - log Φ(-z)``, accurate in the tails).

    Args:
      num_outputs: the number of outputs (1: binary; the labels of a multilabel head).
      logit_noise: ``'normal'`` or ``'logistic'``.
      min_scale: added to the softplus scale (raise it if training is unstable).
      logits_only: return the logits alone, else ``(logits, log_probs, probs)``.
      **kwargs: Keras layer arguments (``name``, ``dtype``).
    """

    def __init__(self, num_outputs, logit_noise="normal", min_scale=1e-2, logits_only=False,
                 **kwargs):
        super().__init__(**kernels.full_precision(kwargs))
        self.num_outputs = check_positive_int("num_outputs", num_outputs)
        self.logit_noise = _check_choice("logit_noise", logit_noise, LOGIT_NOISES[:2])
        self.min_scale = check_positive_number("min_scale", min_scale)
        self.logits_only = bool(logits_only)
        self.loc_layer = _dense(self.num_outputs, "loc_layer", self, None, None)
        self.diag_layer = _dense(self.num_outputs, "diag_layer", self, None, None, "softplus")

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank is None or input_shape.rank < 2 or input_shape[-1] is None:
            raise ValueError("Expected inputs of shape [batch, ..., d] with a defined d. "
                             f"Received: input_shape={input_shape}")
        for sublayer in (self.loc_layer, self.diag_layer):
            _compat.build_sublayer(sublayer, input_shape)
        super().build(input_shape)

    def call(self, inputs, training=None):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        z = self.loc_layer(x) / (self.diag_layer(x) + self.min_scale)
        if self.logit_noise == "normal":
            standard = tfp.distributions.Normal(tf.constant(0.0, z.dtype), 1.0)
            log_probs = standard.log_cdf(z)
            probs, logits = standard.cdf(z), log_probs - standard.log_cdf(-z)
        else:
            probs, log_probs, logits = tf.math.sigmoid(z), tf.math.log_sigmoid(z), z
        if self.logits_only:
            return logits
        return logits, log_probs, probs

    def compute_output_shape(self, input_shape):
        shape = tf.TensorShape(input_shape)[:-1].concatenate([self.num_outputs])
        return shape if self.logits_only else (shape, shape, shape)

    def get_config(self):
        config = super().get_config()
        config.update(num_outputs=self.num_outputs, logit_noise=self.logit_noise,
                      min_scale=self.min_scale, logits_only=self.logits_only)
        return config


def _member(config):
    """A member layer from its serialized config (an HDF5 file's too), or the layer itself."""
    if not isinstance(config, dict):
        return config
    cls = keras.saving.get_registered_object(
        config.get("registered_name") or f"{PACKAGE}>{config.get('class_name')}")
    if cls is None:  # Keras' own layers.
        return keras.saving.deserialize_keras_object(config)
    return cls.from_config(config["config"])


def _member_config(layer):
    """A member's serialized config, without its build state (rebuilt by the ensemble)."""
    config = keras.saving.serialize_keras_object(layer)
    config.pop("build_config", None)
    return config


@_register
class EnsembleHeteroscedasticOutputs(keras.layers.Layer):
    """Combines heteroscedastic heads (members) into one head.

    Each member maps the same inputs to ``(logits, log_probs, probs, ...)`` (the heads of
    this module). With ``averaging='ensemble_cross_ent'`` the probabilities are the
    weighted mixture ``p = Σ_i w_i p_i`` (``log p`` by ``logsumexp(log w_i + log p_i)``),
    so a cross-entropy loss trains the members as an ensemble. With ``'gibbs_cross_ent'``
    training calls return the weighted mean of the members' logits (the loss is then a
    weighted mean of the members' losses, which favours diverse members) and other calls
    the mixture's.

    Args:
      num_classes: the number of classes (2: sigmoid members; the logits are then the
        inverse sigmoid of ``p``).
      layers: the member layers (a list).
      ensemble_weighting: one non-negative weight per member, summing to 1.
      averaging: one of `AVERAGINGS`.
      eps: the mixture's probabilities are clipped to ``[eps, 1 - eps]``.
      **kwargs: Keras layer arguments.

    Returns ``(logits, log_probs, probs)``.
    """

    def __init__(self, num_classes, layers, ensemble_weighting, averaging="ensemble_cross_ent",
                 eps=1e-7, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        members = [_member(m) for m in layers]
        if not members or not all(isinstance(m, keras.layers.Layer) for m in members):
            raise ValueError(f"Expected a non-empty list of layers. Received: layers={layers!r}")
        weights = [float(w) for w in ensemble_weighting]
        if (len(weights) != len(members) or abs(1.0 - sum(weights)) > 1e-5
                or any(w < 0.0 for w in weights)):
            raise ValueError("Expected ensemble_weighting to be one probability per layer. "
                             f"Received: ensemble_weighting={tuple(ensemble_weighting)!r}")
        self.members = members
        self.ensemble_weighting = weights
        self.averaging = _check_choice("averaging", averaging, AVERAGINGS)
        self.eps = _check_eps(eps)

    def build(self, input_shape):
        for member in self.members:  # Weights named under each member's name (HDF5).
            _compat.build_sublayer(member, input_shape)
        super().build(input_shape)

    def _mixture_logits(self, probs, log_probs):
        if self.num_classes == 2:
            return log_probs - tf.math.log(1.0 - probs)
        return log_probs

    def call(self, inputs, training=None):
        outputs = [m(inputs, training=training) for m in self.members]
        if self.averaging == "ensemble_cross_ent":
            weighted = [tf.cast(math.log(w) if w > 0 else -math.inf, tf.float32)
                        + tf.cast(out[1], tf.float32)
                        for w, out in zip(self.ensemble_weighting, outputs, strict=True)]
            log_probs = tf.reduce_logsumexp(tf.stack(weighted, -1), axis=-1)
            probs = tf.clip_by_value(tf.exp(log_probs), self.eps, 1.0 - self.eps)
            return self._mixture_logits(probs, log_probs), log_probs, probs
        logits = tf.add_n([w * tf.cast(out[0], tf.float32)
                           for w, out in zip(self.ensemble_weighting, outputs, strict=True)])
        probs = tf.add_n([w * tf.cast(out[2], tf.float32)
                          for w, out in zip(self.ensemble_weighting, outputs, strict=True)])
        probs = tf.clip_by_value(probs, self.eps, 1.0 - self.eps)
        log_probs = tf.math.log(probs)
        if not training:
            logits = self._mixture_logits(probs, log_probs)
        return logits, log_probs, probs

    def compute_output_shape(self, input_shape):
        shape = tf.nest.flatten(self.members[0].compute_output_shape(input_shape))[0]
        return shape, shape, shape

    def get_config(self):
        config = super().get_config()
        config.update(num_classes=self.num_classes,
                      layers=[_member_config(m) for m in self.members],
                      ensemble_weighting=list(self.ensemble_weighting),
                      averaging=self.averaging, eps=self.eps)
        return config
