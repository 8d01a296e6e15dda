"""SNGP's output layer: a random-feature Gaussian process with a Laplace posterior.

SNGP (Liu et al., 2020, "Simple and Principled Uncertainty Estimation with Deterministic
Deep Learning via Distance Awareness") replaces a network's dense output layer by a GP
and bounds its hidden layers' spectral norms (`spectral_norm.SpectralNormalization`), so
the predictive uncertainty grows with the distance from the training data.

The GP is approximated with ``D`` random Fourier features (`random_features`):
``f(x) = φ(x)ᵀ β + b`` with a prior ``β ~ N(0, I / ridge)`` per output unit. Training
fits the MAP ``β`` (a plain ``Dense`` output layer, trained by the loss like any other)
and accumulates the Laplace approximation's posterior precision of ``β``::

    P = ridge · I + Σ_i w_i φ(x_i) φ(x_i)ᵀ,     Σ = P⁻¹

with ``w_i = 1`` (``'gaussian'`` likelihood, the one uncertainty-baselines uses for
multi-class SNGP), ``p_i (1 - p_i)`` (``'binary_logistic'``, ``p = sigmoid(logit)``) or
``exp(logit)`` (``'poisson'``), summed over the examples of an epoch (reset it with
`GPCovarianceReset`) or as edward2's moving average with ``gp_cov_momentum``. At
inference the predictive variance of ``x`` is ``φ(x)ᵀ Σ φ(x)``, shared by the output
units, and `mean_field_logits` turns logits and variance into the mean-field
approximation of the predictive probabilities.

Design after edward2's ``RandomFeatureGaussianProcess`` and
``LaplaceRandomFeatureCovariance`` (same argument names where they mean the same),
with two differences: ``gp_cov_ridge_penalty`` is the prior precision of ``β`` (edward2
multiplies the covariance by it too, which is the same at uncertainty-baselines' value
1.0), and the frequencies are i.i.d. draws from the kernel's spectral density
(uncertainty-baselines uses orthogonal random features).
"""

import math
import numbers

import numpy as np
import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, kernels
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, check_positive_int
from bayes_planet.layers.checks import check_matrix_inputs
from bayes_planet.layers.laplace_covariance import (
    add_laplace_weights,
    cached_covariance,
    check_likelihood,
    check_momentum,
    update_precision,
)
from bayes_planet.layers.random_features import (
    add_fourier_weights,
    fourier_features,
    sample_frequencies,
)

__all__ = [
    "LIKELIHOODS",
    "MEAN_FIELD_FACTOR",
    "GPCovarianceReset",
    "RandomFeatureGaussianProcess",
    "gp_layers",
    "mean_field_logits",
]


#: ``covariance_fn`` of a `RandomFeatureGaussianProcess` whose features are its inputs.
LINEAR = "linear"

#: λ = π/8: ``E[sigmoid(f)] ≈ sigmoid(μ / sqrt(1 + λ σ²))`` for ``f ~ N(μ, σ²)`` (the probit
#: approximation, MacKay 1992), SNGP's mean-field adjustment of the logits.
MEAN_FIELD_FACTOR = math.pi / 8


def _non_negative(name, value, positive=False):
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value < 0 or (positive and value == 0)):
        what = "a positive" if positive else "a non-negative"
        raise ValueError(f"Expected {what} number. Received: {name}={value!r}")
    return float(value)


#: `mean_field_logits` likelihoods: the logistic and binary logistic (probit approximation,
#: ``logits / sqrt(1 + λ v)``) and the Poisson (log-normal mean, ``logits · exp(λ v / 2)``).
LIKELIHOODS = ("logistic", "binary_logistic", "poisson")


def mean_field_logits(logits, variance, mean_field_factor=MEAN_FIELD_FACTOR, *,
                      likelihood="logistic"):
    """``logits / sqrt(1 + λ · variance)``: the mean-field adjustment of GP logits.

    ``softmax`` (or ``sigmoid``) of the result approximates the predictive probabilities
    of Gaussian logits with these means and variances (Liu et al., 2020, eq. 13; edward2's
    ``mean_field_logits`` takes the covariance matrix: pass its diagonal here). With
    ``likelihood='poisson'`` the log-rates are scaled by ``exp(λ · variance / 2)`` instead
    (``E[exp(f)] = exp(μ + v/2)`` for ``λ = 1``; edward2's Poisson case).

    Args:
      logits: ``[batch, units]`` (or any shape) posterior mean logits.
      variance: ``[batch]`` predictive variances (one per example, broadcast over the
        units), or a tensor broadcastable to ``logits``.
      mean_field_factor: λ ≥ 0 (default π/8; 0 returns the logits unchanged).
      likelihood: one of `LIKELIHOODS` (keyword-only, default ``'logistic'``).
    """
    factor = _non_negative("mean_field_factor", mean_field_factor)
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"Expected likelihood in {LIKELIHOODS}. Received: "
                         f"likelihood={likelihood!r}")
    logits = tf.convert_to_tensor(logits)
    variance = tf.cast(variance, logits.dtype)
    if variance.shape.rank is not None and variance.shape.rank == logits.shape.rank - 1:
        variance = variance[..., None]
    scaled = tf.constant(factor, logits.dtype) * variance
    if likelihood == "poisson":
        return logits * tf.exp(0.5 * scaled)
    return logits / tf.sqrt(1.0 + scaled)


@_register
class RandomFeatureGaussianProcess(keras.layers.Layer):
    """Random-feature GP output layer with a Laplace posterior covariance (SNGP).

    Computes the MAP logits ``φ(x)ᵀ β + b`` (``φ``: ``num_inducing`` random Fourier
    features of ``covariance_fn``; ``β, b``: a trainable ``Dense`` output layer). A
    training call (``training=True``) also adds the batch to the posterior precision of
    ``β`` (see the module docstring); the covariance ``Σ = P⁻¹`` is recomputed (one
    Cholesky factorization) at the first inference call after a change and cached.
    Inference calls return the MAP logits, or with ``mean_field_factor`` set their
    mean-field adjustment ``logits / sqrt(1 + λ φᵀΣφ)``; with ``return_gp_cov`` the
    output is ``(logits, covariance)``, the ``[batch, batch]`` predictive covariance
    ``Φ Σ Φᵀ`` (the identity in training calls, as in edward2). Computes in float32 under
    a mixed precision policy (as the other GP layers).

    Args:
      units: the number of outputs (logits).
      num_inducing: the number of random features D.
      covariance_fn: a stationary kernel (`kernels` layer or alias) of the features, or
        ``'linear'``: the features are the (normalized) inputs themselves, ``φ(x) = x``
        (``num_inducing`` and ``scale_random_features`` then do not apply; the layer is a
        Bayesian linear output layer with a Laplace posterior, edward2's linear kernel);
        default `kernels.ExponentiatedQuadratic` with unit amplitude and length scale,
        trained with the output layer as in `RandomFourierFeatures` (edward2 keeps them
        fixed: pass a kernel with ``trainable=False``; note that Keras' recursive
        ``trainable`` setter, which a SavedModel load calls, unfreezes it again).
      normalize_input: applies a ``LayerNormalization`` to the inputs first.
      scale_random_features: features ``σ √(2/D) cos(·)`` (True: ``φᵀφ`` approximates the
        kernel) or ``σ cos(·)`` (False, uncertainty-baselines' SNGP).
      gp_cov_momentum: None (default) sums the batches' precision terms (reset each
        epoch with `GPCovarianceReset`; uncertainty-baselines' ``-1``); a float in
        (0, 1) keeps edward2's moving average ``P ← m P + (1 - m) ΦᵀWΦ / batch``.
      gp_cov_ridge_penalty: the prior precision of ``β`` (positive; default 1).
      gp_cov_likelihood: ``'gaussian'``, ``'binary_logistic'`` or ``'poisson'`` (the last
        two need ``units=1``).
      l2_regularization: L2 penalty on the output weights ``β`` (0: none).
      mean_field_factor: None (MAP logits) or λ ≥ 0 for mean-field logits at inference.
      return_gp_cov: also return the predictive covariance.
      return_random_features: also return the features ``φ(x)`` ``[batch, D]`` (last).
      seed: int seed of the random features.

    Input shape: ``[batch, d]``. Output shape: ``[batch, units]`` (and ``[batch, batch]``).
    """

    def __init__(self, units, num_inducing=1024, *, covariance_fn=None, normalize_input=False,
                 scale_random_features=True, gp_cov_momentum=None, gp_cov_ridge_penalty=1.0,
                 gp_cov_likelihood="gaussian", l2_regularization=0.0, mean_field_factor=None,
                 return_gp_cov=False, return_random_features=False, seed=None, **kwargs):
        super().__init__(**kernels.full_precision(kwargs))
        self.units = check_positive_int("units", units)
        self.num_inducing = check_positive_int("num_inducing", num_inducing)
        self.linear = isinstance(covariance_fn, str) and covariance_fn == LINEAR
        self.covariance_fn = None if self.linear else kernels.get(
            "exponentiated_quadratic" if covariance_fn is None else covariance_fn,
            dtype=self.dtype)
        if not self.linear:  # Validates the kernel.
            sample_frequencies(self.covariance_fn, 1, 1, np.random.default_rng(0))
        check_likelihood("gp_cov_likelihood", gp_cov_likelihood, units=self.units)
        self.gp_cov_momentum = check_momentum("gp_cov_momentum", gp_cov_momentum)
        self.gp_cov_ridge_penalty = _non_negative("gp_cov_ridge_penalty", gp_cov_ridge_penalty,
                                                  positive=True)
        self.gp_cov_likelihood = gp_cov_likelihood
        self.l2_regularization = _non_negative("l2_regularization", l2_regularization)
        self.mean_field_factor = (None if mean_field_factor is None else
                                  _non_negative("mean_field_factor", mean_field_factor))
        self.normalize_input = bool(normalize_input)
        self.scale_random_features = bool(scale_random_features)
        self.return_gp_cov = bool(return_gp_cov)
        self.return_random_features = bool(return_random_features)
        BayesianLayer._init_seed(self, seed)  # Seed validation + base seed.
        self.input_normalization = (
            keras.layers.LayerNormalization(dtype=self.dtype_policy, name="input_normalization")
            if self.normalize_input else None)
        self.output_layer = keras.layers.Dense(
            self.units, kernel_regularizer=(keras.regularizers.L2(self.l2_regularization)
                                            if self.l2_regularization else None),
            dtype=self.dtype_policy, name="output")

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        dim = check_matrix_inputs(input_shape)
        features = dim if self.linear else self.num_inducing
        self.input_spec = keras.layers.InputSpec(ndim=2, axes={-1: dim})
        if self.input_normalization is not None:
            self.input_normalization.build(input_shape)
        if not self.linear:
            self.frequencies, self.phases = add_fourier_weights(
                self, self.covariance_fn, dim, features, np.random.default_rng(self._base_seed))
        self.output_layer.build(tf.TensorShape([None, features]))
        self.precision_matrix, self.covariance_matrix, self.covariance_is_stale = (
            add_laplace_weights(self, features, self.gp_cov_ridge_penalty))
        super().build(input_shape)

    def features(self, inputs):
        """``[batch, D]`` random features φ(x) (after the input normalization, if any)."""
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        if not self.built:
            _compat.build(self, x.shape)
        if self.input_normalization is not None:
            x = self.input_normalization(x)
        if self.linear:
            return x
        return fourier_features(x, self.covariance_fn, self.frequencies, self.phases,
                                scale=self.scale_random_features)

    def call(self, inputs, training=None):
        phi = self.features(inputs)
        outputs = self._outputs(phi, training)
        if not self.return_random_features:
            return outputs
        return (*outputs, phi) if isinstance(outputs, tuple) else (outputs, phi)

    def _outputs(self, phi, training):
        """The logits, and with ``return_gp_cov`` the predictive covariance, of features."""
        logits = self.output_layer(phi)
        if training:
            self._update_precision(phi, logits)
            if self.return_gp_cov:
                return logits, tf.eye(tf.shape(phi)[0], dtype=logits.dtype)
            return logits
        if not self.return_gp_cov and self.mean_field_factor is None:
            return logits
        phi_sigma = tf.matmul(phi, self.covariance())
        if self.return_gp_cov:
            covariance = tf.matmul(phi_sigma, phi, transpose_b=True)
            variance = tf.linalg.diag_part(covariance)
        else:
            variance = tf.reduce_sum(phi_sigma * phi, axis=-1)
        if self.mean_field_factor is not None:
            logits = mean_field_logits(logits, variance, self.mean_field_factor)
        return (logits, covariance) if self.return_gp_cov else logits

    def _update_precision(self, phi, logits):
        update_precision(self.precision_matrix, self.covariance_is_stale, phi, logits,
                         likelihood=self.gp_cov_likelihood, momentum=self.gp_cov_momentum)

    def covariance(self):
        """Σ = (ridge · I + P)⁻¹, the ``[D, D]`` Laplace posterior covariance of ``β``.

        Computed (Cholesky) and stored when the precision changed since the last time,
        else read from the stored value.
        """
        if not self.built:
            raise ValueError("Expected a built layer: call it on an input first.")
        return cached_covariance(self.precision_matrix, self.covariance_matrix,
                                 self.covariance_is_stale, self.gp_cov_ridge_penalty)

    def reset_covariance_matrix(self):
        """Resets the precision to the prior's (``P = ridge · I``), e.g. at an epoch start."""
        self.precision_matrix.assign(tf.zeros_like(self.precision_matrix))
        self.covariance_is_stale.assign(True)

    def compute_output_shape(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        shapes = [input_shape[:-1].concatenate([self.units])]
        if self.return_gp_cov:
            shapes.append(tf.TensorShape([input_shape[0], input_shape[0]]))
        if self.return_random_features:
            features = input_shape[-1] if self.linear else self.num_inducing
            shapes.append(input_shape[:-1].concatenate([features]))
        return shapes[0] if len(shapes) == 1 else tuple(shapes)

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units, num_inducing=self.num_inducing,
            covariance_fn=LINEAR if self.linear else kernels.serialize(self.covariance_fn),
            normalize_input=self.normalize_input,
            scale_random_features=self.scale_random_features,
            gp_cov_momentum=self.gp_cov_momentum,
            gp_cov_ridge_penalty=self.gp_cov_ridge_penalty,
            gp_cov_likelihood=self.gp_cov_likelihood,
            l2_regularization=self.l2_regularization,
            mean_field_factor=self.mean_field_factor,
            return_gp_cov=self.return_gp_cov,
            return_random_features=self.return_random_features,
            seed=self.seed,
        )
        return config


def gp_layers(model):
    """The `RandomFeatureGaussianProcess` layers of ``model`` (itself included)."""
    candidates = [model] + _compat.submodules(model)
    return [m for m in candidates if isinstance(m, RandomFeatureGaussianProcess)]


class GPCovarianceReset(keras.callbacks.Callback):
    """Resets every `RandomFeatureGaussianProcess`'s precision at the start of each epoch.

    With the default ``gp_cov_momentum=None`` each layer sums the precision terms of the
    batches it trains on; this callback makes that sum one epoch's (uncertainty-baselines
    resets at each epoch's first step), so after ``fit`` the covariance is the Laplace
    posterior of the last epoch's features. Layers with a momentum need no reset.
    """

    def on_train_begin(self, logs=None):
        self._layers = gp_layers(self.model)
        if not self._layers:
            raise ValueError("Expected a model with a RandomFeatureGaussianProcess layer. "
                             f"Received: model={self.model.name!r}")

    def on_epoch_begin(self, epoch, logs=None):
        for layer in self._layers:
            layer.reset_covariance_matrix()
