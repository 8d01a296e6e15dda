"""Gaussian-process layers: distributions over functions, as Keras layers.

A GP layer maps ``[batch, d]`` inputs to a `RandomVariable` over the ``[batch,
units]`` function values ``f(x)``, ``units`` independent GPs sharing one kernel and
one mean function (Bayesian Layers, Sec. 2.2). Its ``distribution`` is the
(predictive) distribution of ``f(x)`` and its value a sample, so GP layers stack
like Dense layers: ``GaussianProcess(32)`` is the nonparametric twin of
``Dense(32)``, and a stack of `SparseGaussianProcess` layers is a doubly stochastic
deep GP (Salimbeni & Deisenroth, 2017).

- `GaussianProcess`: exact GP, prior or conditioned on data (edward2's arguments).
- `SparseGaussianProcess`: whitened inducing-point variational GP (SVGP; Hensman et
  al., 2013) with the KL term in ``layer.losses``.

Both compute in the layer's dtype (pass ``dtype='float64'`` for exact numerics) and
add ``jitter`` to the diagonal of every matrix they factorize. Under a mixed precision
policy (``mixed_float16``, ``mixed_bfloat16``) they compute in its variable dtype
(their ``compute_dtype`` is float32) and return float32: a 16-bit Cholesky factorization is ill-conditioned (and
has no CPU kernel). The output distribution, its sample and the KL terms are then
float32, so a likelihood loss ``-rv.distribution.log_prob(y)`` is float32 as Keras
wants, and the next Keras layer casts the sample to its own compute dtype.

Outputs are created through `tracing.random_variable` under the layer's name, so
`tracing.tape` and `tracing.condition` see them.
"""

import math

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, initializers, kernels, regularizers, tracing
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers._registry import resolve
from bayes_planet.layers.base import BayesianLayer, check_positive_int, moments
from bayes_planet.layers.initializers import DistributionInitializer
from bayes_planet.layers.kernels import inverse_softplus
from bayes_planet.layers.noise import per_example, per_example_sample, standard_normal

tfd = tfp.distributions

__all__ = [
    "GaussianProcess",
    "SparseGaussianProcess",
    "TrainableMultivariateNormal",
    "WhitenedKLDivergence",
]


def _add_diag(matrix, value):
    return tf.linalg.set_diag(matrix, tf.linalg.diag_part(matrix) + value)


class _GaussianProcessBase(BayesianLayer, keras.layers.Layer):
    """Shared arguments: ``units``, ``mean_fn``, ``covariance_fn``, ``jitter``, ``seed``."""

    def __init__(self, units, mean_fn=None, covariance_fn=None, jitter=1e-6, seed=None,
                 **kwargs):
        super().__init__(**kernels.full_precision(kwargs))  # float32 under a mixed policy
        self.units = check_positive_int("units", units)
        self.mean_fn = kernels.get("zeros" if mean_fn is None else mean_fn, dtype=self.dtype)
        self.covariance_fn = kernels.get(
            "exponentiated_quadratic" if covariance_fn is None else covariance_fn,
            dtype=self.dtype,
        )
        if not isinstance(jitter, int | float) or isinstance(jitter, bool) or jitter < 0:
            raise ValueError(f"Expected a non-negative float. Received: jitter={jitter!r}")
        self.jitter = float(jitter)
        self._init_seed(seed)

    def _inputs(self, inputs):
        x = tf.convert_to_tensor(inputs)  # A RandomVariable converts to its value.
        x = tf.cast(x, self.compute_dtype)
        if x.shape.rank != 2:
            raise ValueError(
                f"{type(self).__name__} expects [batch, features] inputs (flatten others). "
                f"Received: inputs with shape {x.shape}"
            )
        return x

    def _mean(self, x):
        """Prior mean at ``x`` as ``[n, units]``."""
        mean = tf.cast(self.mean_fn(x), x.dtype)
        if mean.shape.rank == 1:
            mean = mean[:, None]
        return tf.broadcast_to(mean, tf.stack([tf.shape(x)[0], self.units]))

    def compute_output_shape(self, input_shape):
        return tf.TensorShape(input_shape)[:-1].concatenate([self.units])

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units,
            mean_fn=kernels.serialize(self.mean_fn),
            covariance_fn=kernels.serialize(self.covariance_fn),
            jitter=self.jitter,
        )
        return config


@_register
class GaussianProcess(_GaussianProcessBase):
    r"""Exact Gaussian process layer: ``f ~ GP(m, k)``, optionally conditioned on data.

    Without conditioning data the output is the prior ``f(x) ~ N(m(x), k(x, x))``.
    With ``conditional_inputs`` Z and ``conditional_outputs`` Y (noisy observations
    of f with variance σ²_n) it is the exact posterior predictive of the latent f::

        mean = m(x) + k(x, Z) (K + σ²_n I)^{-1} (Y - m(Z))
        cov  = k(x, x) - k(x, Z) (K + σ²_n I)^{-1} k(Z, x),     K = k(Z, Z)

    (Rasmussen & Williams, 2006, eq. 2.23-2.24), computed with a Cholesky factor of
    ``K + (σ²_n + jitter) I``. Output units are independent GPs sharing the kernel,
    so the output `RandomVariable`'s distribution is a matrix normal over ``[batch,
    units]`` with row covariance ``cov (+ jitter I)`` and identity column covariance.
    It covers the noise-free f; add σ²_n to its variance to predict new observations.
    There is no regularizer (the paper's default for exact GPs); fit hyperparameters by
    maximizing `log_marginal_likelihood`.

    The conditioning data are layer weights (saved with the model, left out of
    ``get_config``): fixed by default, trainable with ``conditionals_trainable=True``
    (then they may also be created from ``num_conditional`` alone).

    Args:
      units: number of output GPs.
      mean_fn: mean function (a `kernels` layer or alias; default zero mean).
      covariance_fn: kernel (a `kernels` layer or alias; default
        `ExponentiatedQuadratic`, amplitude 1, length scale 1).
      conditional_inputs: ``[M, d]`` inputs to condition on, or None.
      conditional_outputs: ``[M, units]`` (or ``[M]`` if ``units == 1``) outputs.
      observation_noise_variance: σ²_n ≥ 0 of the conditional outputs (softplus
        parameterized, trainable per ``observation_noise_trainable``); 0 = noise-free.
      observation_noise_trainable: whether σ²_n trains.
      conditionals_trainable: whether Z and Y are trainable.
      num_conditional: M when Z and Y are not given (random-normal Z, zero Y).
      jitter: added to the diagonal of every factorized covariance.
      seed: int seed of the output samples.

    Input shape: ``[batch, d]``. Output: `RandomVariable` with shape ``[batch, units]``,
    float32 under a mixed precision policy (see the module docstring).
    """

    def __init__(self, units, mean_fn=None, covariance_fn=None, conditional_inputs=None,
                 conditional_outputs=None, observation_noise_variance=0.0,
                 observation_noise_trainable=True, conditionals_trainable=False,
                 num_conditional=None, jitter=1e-6, seed=None, **kwargs):
        super().__init__(units, mean_fn, covariance_fn, jitter, seed, **kwargs)
        if (conditional_inputs is None) != (conditional_outputs is None):
            raise ValueError(
                "Pass both conditional_inputs and conditional_outputs, or neither. Received: "
                f"conditional_inputs={'None' if conditional_inputs is None else 'array'}, "
                f"conditional_outputs={'None' if conditional_outputs is None else 'array'}"
            )
        self._z_init = self._y_init = None
        if conditional_inputs is not None:
            self._z_init = np.asarray(conditional_inputs, dtype=np.float64)
            self._y_init = np.asarray(conditional_outputs, dtype=np.float64)
            if self._y_init.ndim == 1 and self.units == 1:
                self._y_init = self._y_init[:, None]
            if self._z_init.ndim != 2:
                raise ValueError("Expected [M, d] conditional_inputs. Received: shape "
                                 f"{self._z_init.shape}")
            if self._y_init.shape != (self._z_init.shape[0], self.units):
                raise ValueError(
                    f"Expected conditional_outputs of shape {(self._z_init.shape[0], self.units)}"
                    f". Received: shape {self._y_init.shape}"
                )
            if num_conditional is not None and num_conditional != self._z_init.shape[0]:
                raise ValueError(f"num_conditional={num_conditional} does not match the "
                                 f"{self._z_init.shape[0]} conditional_inputs.")
            num_conditional = self._z_init.shape[0]
        self.num_conditional = (None if num_conditional is None
                                else check_positive_int("num_conditional", num_conditional))
        noise = observation_noise_variance
        if isinstance(noise, bool) or not isinstance(noise, int | float) or noise < 0:
            raise ValueError("Expected a non-negative float. Received: "
                             f"observation_noise_variance={noise!r}")
        self._noise_init = float(noise)
        self.observation_noise_trainable = bool(observation_noise_trainable)
        self.conditionals_trainable = bool(conditionals_trainable)
        self.conditional_inputs = self.conditional_outputs = None
        self.raw_observation_noise = None

    @property
    def conditioned(self):
        """Whether the layer conditions on data (else it is the GP prior)."""
        return self.num_conditional is not None

    def build(self, input_shape):
        input_dim = tf.TensorShape(input_shape)[-1]
        if self.conditioned:
            if self._z_init is not None:
                if input_dim is not None and input_dim != self._z_init.shape[1]:
                    raise ValueError(f"Inputs have {input_dim} features but conditional_inputs "
                                     f"have {self._z_init.shape[1]}.")
                z_init, y_init = _constant(self._z_init), _constant(self._y_init)
            else:
                z_init = keras.initializers.RandomNormal(seed=self.seed)
                y_init = "zeros"
            self.conditional_inputs = self.add_weight(
                name="conditional_inputs", shape=(self.num_conditional, input_dim),
                initializer=z_init, trainable=self.conditionals_trainable)
            self.conditional_outputs = self.add_weight(
                name="conditional_outputs", shape=(self.num_conditional, self.units),
                initializer=y_init, trainable=self.conditionals_trainable)
            if self._noise_init > 0:
                self.raw_observation_noise = self.add_weight(
                    name="observation_noise_variance", shape=(),
                    initializer=keras.initializers.Constant(inverse_softplus(self._noise_init)),
                    trainable=self.observation_noise_trainable)
        super().build(input_shape)

    def _ensure_built(self):
        if not self.built:
            if self._z_init is None:
                raise ValueError("Call the layer once (to build it) before this method.")
            self.build((None, self._z_init.shape[1]))

    @property
    def observation_noise_variance(self):
        """σ²_n as a scalar Tensor (0 when the layer is noise-free)."""
        if self.raw_observation_noise is None:
            return tf.constant(0.0, self.dtype)
        return tf.nn.softplus(tf.convert_to_tensor(self.raw_observation_noise))

    def _factor(self, dtype):
        """Z, Lz = chol(K_ZZ + (σ²_n + jitter) I), alpha = Lz^{-1} (Y - m(Z))."""
        z = tf.cast(self.conditional_inputs, dtype)
        y = tf.cast(self.conditional_outputs, dtype)
        kzz = self.covariance_fn(z)
        noise = tf.cast(self.observation_noise_variance, dtype) + self.jitter
        chol = tf.linalg.cholesky(_add_diag(kzz, noise))
        alpha = tf.linalg.triangular_solve(chol, y - self._mean(z), lower=True)  # [M, units]
        return z, chol, alpha

    def _posterior(self, x):
        """Mean ``[n, units]`` and ``A = Lz^{-1} K_Zx`` ``[M, n]`` (None for the prior)."""
        if not self.conditioned:
            return self._mean(x), None
        z, chol, alpha = self._factor(x.dtype)
        a = tf.linalg.triangular_solve(chol, self.covariance_fn(z, x), lower=True)
        return self._mean(x) + tf.matmul(a, alpha, transpose_a=True), a

    def call(self, inputs):
        x = self._inputs(inputs)
        dtype = x.dtype
        # The joint covariance over the inputs is factorized in float64 whatever the
        # layer's dtype: in float32 its rounding errors (~n·1e-7 of the amplitude) exceed
        # the jitter for a few dozen close inputs and the Cholesky factor is NaN.
        x64 = tf.cast(x, tf.float64)
        loc, a = self._posterior(x64)
        cov = self.covariance_fn(x64)
        if a is not None:
            cov -= tf.matmul(a, a, transpose_a=True)
        chol = _checked_cholesky(_add_diag(cov, tf.constant(self.jitter, tf.float64)),
                                 f"{type(self).__name__} '{self.name}'", self.jitter)
        seed = self._next_seed()

        def sample():
            # loc + L ε with per-example ε: under a multi-replica strategy each replica's
            # rows of the global batch's draw (`per_example`), never shared noise.
            eps = per_example(lambda shape, sd: standard_normal(shape, sd, dtype=tf.float64),
                              tf.shape(loc), seed)
            return tf.cast(loc + tf.matmul(chol, eps), dtype)

        scale_row = tf.linalg.LinearOperatorLowerTriangular(tf.cast(chol, dtype))
        scale_column = tf.linalg.LinearOperatorIdentity(self.units, dtype=dtype)
        dist = tfd.MatrixNormalLinearOperator(tf.cast(loc, dtype), scale_row, scale_column)
        return tracing.random_variable(dist, name=self.name, value=sample)

    def predict(self, inputs):
        """Posterior mean and marginal variance of f, both ``[batch, units]``.

        Cheaper than the layer call (no factorization over the inputs).
        """
        x = self._inputs(inputs)
        if not self.built:
            self.build(x.shape)
        loc, a = self._posterior(x)
        var = self.covariance_fn.diag(x)
        if a is not None:
            var -= tf.reduce_sum(tf.square(a), 0)
        return loc, tf.broadcast_to(var[:, None], tf.shape(loc))

    def log_marginal_likelihood(self):
        """``Σ_units log N(Y | m(Z), K_ZZ + (σ²_n + jitter) I)`` of the conditioning data."""
        if not self.conditioned:
            raise ValueError("log_marginal_likelihood needs conditional_inputs/outputs.")
        self._ensure_built()
        _, chol, alpha = self._factor(self.compute_dtype)
        num = tf.cast(self.num_conditional * self.units, chol.dtype)
        logdet = tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)))
        return (-0.5 * tf.reduce_sum(tf.square(alpha)) - self.units * logdet
                - 0.5 * num * math.log(2.0 * math.pi))

    def get_config(self):
        config = super().get_config()
        config.update(
            conditional_inputs=None,  # Data live in the weights, not the config.
            conditional_outputs=None,
            num_conditional=self.num_conditional,
            observation_noise_variance=self._noise_init,
            observation_noise_trainable=self.observation_noise_trainable,
            conditionals_trainable=self.conditionals_trainable,
        )
        return config


def _independent_normal(params):
    loc, scale = params
    return tfd.Independent(tfd.Normal(loc, scale), 2)


def _checked_cholesky(matrix, what, jitter):
    """Cholesky factor of a float64 covariance; raises if it is not positive definite.

    Eager: a ``ValueError``; in a graph: an ``InvalidArgumentError`` when run.
    """
    chol = tf.linalg.cholesky(matrix)  # NaN-filled (no error) when it fails
    message = (f"{what}: the covariance of the inputs is not positive definite even in "
               f"float64 with jitter={jitter!r} (non-finite inputs, or duplicated inputs "
               "with jitter=0?). Pass finite inputs or a larger jitter.")
    if tf.executing_eagerly():
        if not np.all(np.isfinite(chol.numpy())):
            raise ValueError(message)
        return chol
    return tf.debugging.assert_all_finite(chol, message)


def _constant(array):
    def init(shape, dtype=None, **kwargs):
        del kwargs
        return tf.reshape(tf.constant(array, dtype=dtype), shape)
    return init


@_register
class TrainableMultivariateNormal(DistributionInitializer):
    """Full-covariance normal over the last axis: ``q = N(loc, S Sᵀ)`` per leading index.

    For a ``[units, M]`` weight (e.g. whitened inducing outputs), each of the
    ``units`` rows has its own mean and lower-triangular ``S`` (``M(M+1)/2``
    parameters, softplus diagonal). Starts at ``loc = 0``, ``S = initial_stddev · I``
    (1 = the whitened prior; small values start a deep GP's hidden layers near
    their mean function). ``scale()`` gives the marginal stddevs (for factorized
    consumers); ``scale_tril()`` the full factor.
    """

    def __init__(self, initial_stddev=1.0, **kwargs):
        super().__init__(**kwargs)
        if not initial_stddev > 0:
            raise ValueError(f"Expected a positive float. Received: initial_stddev={initial_stddev}")
        self.initial_stddev = float(initial_stddev)

    def build(self, shape, dtype=None):
        super().build(shape, dtype)
        dtype = dtype or tf.float32
        *batch, m = self.weight_shape.as_list()
        self.mean = self.add_weight(name="mean", shape=self.weight_shape, dtype=dtype,
                                    initializer="zeros", **_compat.NO_AUTOCAST)
        raw_diag = float(inverse_softplus(self.initial_stddev))

        def tril_init(shape, dtype=None, **kwargs):
            del kwargs
            full = tf.linalg.diag(tf.fill(batch + [m], tf.constant(raw_diag, dtype)))
            return tfp.math.fill_triangular_inverse(full)

        self.raw_scale_tril = self.add_weight(
            name="scale_tril", shape=batch + [m * (m + 1) // 2], dtype=dtype,
            initializer=tril_init, **_compat.NO_AUTOCAST)

    def loc(self):
        return tf.convert_to_tensor(self.mean)

    def scale_tril(self):
        """``[..., M, M]`` lower-triangular factor S with a positive diagonal."""
        full = tfp.math.fill_triangular(tf.convert_to_tensor(self.raw_scale_tril))
        return tf.linalg.set_diag(full, tf.nn.softplus(tf.linalg.diag_part(full)))

    def scale(self):
        return tf.sqrt(tf.reduce_sum(tf.square(self.scale_tril()), -1))

    def sample(self, seed, dtype=None, num_samples=1):
        shape = tf.shape(self.mean) if num_samples == 1 else [num_samples, *self.mean.shape]
        eps = tf.random.stateless_normal(shape, seed=seed, dtype=self.mean.dtype)
        value = self.loc() + tf.linalg.matvec(self.scale_tril(), eps)
        return value if dtype is None else tf.cast(value, dtype)

    def distribution(self):
        return tfd.MultivariateNormalTriL(self.loc(), self.scale_tril())

    def assign(self, loc, scale_tril):
        """Sets ``q = N(loc, scale_tril scale_trilᵀ)`` (``scale_tril`` lower, positive diagonal)."""
        scale_tril = tf.convert_to_tensor(scale_tril, self.raw_scale_tril.dtype)
        diag = tf.linalg.diag_part(scale_tril)
        tf.debugging.assert_positive(diag, "scale_tril needs a positive diagonal.")
        raw_diag = tfp.math.softplus_inverse(diag)
        raw = tf.linalg.set_diag(tf.linalg.band_part(scale_tril, -1, 0), raw_diag)
        self.mean.assign(tf.cast(loc, self.mean.dtype))
        self.raw_scale_tril.assign(tfp.math.fill_triangular_inverse(raw))

    def get_config(self):
        return {**super().get_config(), "initial_stddev": self.initial_stddev}


@_register
class WhitenedKLDivergence(regularizers.KLRegularizer):
    """``KL(q(v) ‖ N(0, I))`` of whitened inducing outputs ``v = Lz^{-1} u``.

    With whitening the prior is standard normal whatever the kernel, so this is
    ``KL(q(u) ‖ p(u))`` exactly: ``½ Σ_units [tr(S Sᵀ) + mᵀm - M - log|S Sᵀ|]`` for a
    `TrainableMultivariateNormal`; factorized posteriors use `NormalKLDivergence`.
    Scaled by ``scale_factor / dataset_size`` like every `KLRegularizer`.
    """

    def divergence(self, x):
        if not isinstance(x, TrainableMultivariateNormal):
            return regularizers.NormalKLDivergence().divergence(x)
        loc, tril = x.loc(), x.scale_tril()
        size = tf.cast(tf.size(loc), loc.dtype)
        return 0.5 * (tf.reduce_sum(tf.square(tril)) + tf.reduce_sum(tf.square(loc)) - size) - (
            tf.reduce_sum(tf.math.log(tf.abs(tf.linalg.diag_part(tril)))))


@_register
class SparseGaussianProcess(_GaussianProcessBase):
    r"""Sparse variational GP layer with whitened inducing points (SVGP).

    ``M = num_inducing`` trainable inducing inputs Z carry whitened inducing outputs
    ``v = Lz^{-1}(u - m(Z))`` with ``Lz Lzᵀ = k(Z, Z) + jitter I``, prior
    ``p(v) = N(0, I)`` and variational posterior ``q(v) = N(μ, S Sᵀ)`` per output
    unit (Hensman et al., 2013, whitened as in GPflow's SVGP). With
    ``A = Lz^{-1} k(Z, x)`` the marginal predictive of each output is::

        mean = m(x) + Aᵀ μ
        var  = k(x, x) - diag(Aᵀ A) + diag(Aᵀ S Sᵀ A)

    The output `RandomVariable` has this per-point (diagonal) normal distribution and
    a reparameterized sample as its value, so stacked layers form a doubly stochastic
    deep GP (Salimbeni & Deisenroth, 2017). The ELBO per example is
    ``E_q[log p(y | f)] - KL(q(v) ‖ p(v)) / N``: ``layer.losses`` holds the KL,
    divided by ``dataset_size`` (set here or with `regularizers.set_dataset_size`).
    Cost per call: O(M³ + n M² · units) with the full covariance.

    Args:
      units: number of output GPs.
      num_inducing: number of inducing points M.
      mean_fn, covariance_fn: as `GaussianProcess` (`kernels.LinearMean` for the
        hidden layers of a deep GP).
      inducing_inputs_initializer: Keras initializer of Z (``[M, d]``); assign
        e.g. k-means centres of the data after building for faster training.
      inducing_outputs_initializer: distribution initializer of q(v) over
        ``[units, M]``: ``'trainable_multivariate_normal'`` (full covariance, the
        default) or a factorized one such as ``'trainable_normal'`` (O(M) memory).
      inducing_outputs_regularizer: the KL regularizer (default
        `WhitenedKLDivergence`), or None.
      dataset_size: N for the KL scaling (None: unscaled).
      jitter, seed: as `GaussianProcess`.

    Input shape: ``[batch, d]``. Output: `RandomVariable` with shape ``[batch, units]``,
    float32 under a mixed precision policy (see the module docstring).
    """

    def __init__(self, units, num_inducing, mean_fn=None, covariance_fn=None,
                 inducing_inputs_initializer="random_normal",
                 inducing_outputs_initializer="trainable_multivariate_normal",
                 inducing_outputs_regularizer="whitened_kl_divergence",
                 dataset_size=None, jitter=1e-6, seed=None, **kwargs):
        super().__init__(units, mean_fn, covariance_fn, jitter, seed, **kwargs)
        self.num_inducing = check_positive_int("num_inducing", num_inducing)
        init = keras.initializers.get(inducing_inputs_initializer)
        config = init.get_config() if hasattr(init, "get_config") else {}
        if seed is not None and config.get("seed", 0) is None:
            init = type(init).from_config({**config, "seed": seed})
        self.inducing_inputs_initializer = init
        self.inducing_outputs_initializer = resolve(
            inducing_outputs_initializer,
            {"trainable_multivariate_normal": TrainableMultivariateNormal}, initializers.get,
            "inducing_outputs_initializer", base=DistributionInitializer)
        self.inducing_outputs_regularizer = resolve(
            inducing_outputs_regularizer, {"whitened_kl_divergence": WhitenedKLDivergence},
            regularizers.get, "inducing_outputs_regularizer")
        if dataset_size is not None:
            if not isinstance(self.inducing_outputs_regularizer, regularizers.KLRegularizer):
                raise ValueError("dataset_size needs a KL regularizer. Received: "
                                 f"inducing_outputs_regularizer={inducing_outputs_regularizer!r}")
            self.inducing_outputs_regularizer.dataset_size = check_positive_int(
                "dataset_size", dataset_size)

    def build(self, input_shape):
        input_dim = tf.TensorShape(input_shape)[-1]
        self.inducing_inputs = self.add_weight(
            name="inducing_inputs", shape=(self.num_inducing, input_dim),
            initializer=self.inducing_inputs_initializer, trainable=True)
        self.inducing_outputs = self.add_weight(
            name="inducing_outputs", shape=(self.units, self.num_inducing),
            initializer=self.inducing_outputs_initializer,
            regularizer=self.inducing_outputs_regularizer)
        super().build(input_shape)

    def predict(self, inputs):
        """Marginal predictive mean and variance of f, both ``[batch, units]``."""
        x = self._inputs(inputs)
        if not self.built:
            self.build(x.shape)
        z = tf.cast(self.inducing_inputs, x.dtype)
        chol = tf.linalg.cholesky(_add_diag(self.covariance_fn(z), tf.cast(self.jitter, x.dtype)))
        a = tf.linalg.triangular_solve(chol, self.covariance_fn(z, x), lower=True)  # [M, n]
        q = self.inducing_outputs
        if isinstance(q, TrainableMultivariateNormal):
            loc, tril = tf.cast(q.loc(), x.dtype), tf.cast(q.scale_tril(), x.dtype)
            s_a = tf.einsum("umk,mn->ukn", tril, a)  # Sᵀ A per unit: [units, M, n].
            q_var = tf.reduce_sum(tf.square(s_a), 1)  # [units, n]
        else:
            loc, scale = moments(q, x.dtype)
            q_var = 0.0 if scale is None else tf.matmul(tf.square(scale), tf.square(a))
        mean = self._mean(x) + tf.matmul(a, loc, transpose_a=True, transpose_b=True)
        var = (self.covariance_fn.diag(x) - tf.reduce_sum(tf.square(a), 0))[:, None]
        var = tf.maximum(var + tf.transpose(q_var), tf.cast(1e-12, x.dtype))
        return mean, var

    def call(self, inputs):
        mean, var = self.predict(inputs)
        params = (mean, tf.sqrt(var))
        dist = _independent_normal(params)
        seed = self._next_seed()

        def sampler(sample_seed):
            # Per-point noise: under a multi-replica strategy, each replica's rows of the
            # global batch's draw (the single-device sample).
            return per_example_sample(_independent_normal, params, sample_seed, dist)

        return tracing.random_variable(dist, name=self.name, value=lambda: sampler(seed),
                                       sampler=sampler)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_inducing=self.num_inducing,
            inducing_inputs_initializer=keras.initializers.serialize(
                self.inducing_inputs_initializer),
            inducing_outputs_initializer=initializers.serialize(
                self.inducing_outputs_initializer),
            inducing_outputs_regularizer=regularizers.serialize(
                self.inducing_outputs_regularizer),
            dataset_size=getattr(self.inducing_outputs_regularizer, "dataset_size", None),
        )
        return config
