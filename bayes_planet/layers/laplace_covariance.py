"""The Laplace posterior covariance of a random-feature model's output weights.

A model ``f(x) = φ(x)ᵀ β + b`` whose output weights ``β`` have the prior ``N(0, I / ridge)``
and are fit by MAP has the Laplace posterior precision::

    P = ridge · I + Σ_i w_i φ(x_i) φ(x_i)ᵀ,     Σ = P⁻¹

with ``w_i = 1`` (``'gaussian'`` likelihood), ``p_i (1 - p_i)`` (``'binary_logistic'``,
``p = sigmoid(logit)``) or ``exp(logit)`` (``'poisson'``). The data term is accumulated from
the training batches, as a sum (exact after one pass over the data; reset it between
passes) or as a moving average ``P_data ← m P_data + (1 - m) ΦᵀWΦ / batch`` (edward2's and
SNGP's ``momentum``). The predictive covariance of a batch is ``Φ Σ Φᵀ``.

`LaplaceRandomFeatureCovariance` is this estimator as a layer of its own (edward2's layer of
that name: features in, the precision updated by training calls, the predictive covariance
out at inference); `bayes_planet.layers.sngp.RandomFeatureGaussianProcess` keeps the same
state through `add_laplace_weights`, `update_precision` and `cached_covariance`.
"""

import numbers

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, kernels
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.checks import check_matrix_inputs
from bayes_planet.layers.noise import multi_replica_context

__all__ = [
    "LAPLACE_LIKELIHOODS",
    "LaplaceRandomFeatureCovariance",
    "add_laplace_weights",
    "cached_covariance",
    "check_momentum",
    "update_precision",
]

#: The likelihoods whose curvature weights the precision's data term.
LAPLACE_LIKELIHOODS = ("gaussian", "binary_logistic", "poisson")


def check_momentum(name, value):
    """``value`` if it is None or a number in (0, 1), else a one-line ValueError naming ``name``."""
    if value is not None and not (isinstance(value, numbers.Real) and not isinstance(value, bool)
                                  and 0.0 < value < 1.0):
        raise ValueError(f"Expected None or a number in (0, 1). Received: {name}={value!r}")
    return None if value is None else float(value)


def check_likelihood(name, value, units=None):
    """``value`` if it is one of `LAPLACE_LIKELIHOODS` (the non-Gaussian ones need one output
    unit when ``units`` is given), else a one-line ValueError naming ``name``."""
    if value not in LAPLACE_LIKELIHOODS:
        raise ValueError(f"Expected one of {LAPLACE_LIKELIHOODS}. Received: {name}={value!r}")
    if units is not None and value != "gaussian" and units != 1:
        raise ValueError(f"Expected units=1 for {name}={value!r}. Received: units={units}")
    return value


def add_laplace_weights(layer, features, ridge_penalty):
    """Adds the non-trainable ``precision_matrix`` (the data term of ``P``, zeros),
    ``covariance_matrix`` (``Σ``, the prior's ``I / ridge`` while no data was seen, the
    identity for ``ridge = 0``) and ``covariance_is_stale`` (whether ``P`` changed since
    ``Σ`` was computed) of ``features`` random features to ``layer``; returns them."""
    first = _compat.ONLY_FIRST_REPLICA  # Replicas agree (all-reduced).
    precision = layer.add_weight(
        name="precision_matrix", shape=[features, features], initializer="zeros",
        trainable=False, **first)
    covariance = layer.add_weight(
        name="covariance_matrix", shape=[features, features], trainable=False,
        initializer=keras.initializers.Identity(1.0 / ridge_penalty if ridge_penalty else 1.0),
        **first)
    stale = layer.add_weight(
        name="covariance_is_stale", shape=[], dtype="bool", initializer="zeros",
        trainable=False, **first)
    return precision, covariance, stale


def update_precision(precision, stale, phi, logits=None, *, likelihood="gaussian",
                     momentum=None):
    """Adds a batch's features ``phi`` ``[batch, D]`` (its ``logits`` ``[batch, 1]`` weigh
    them under a non-Gaussian ``likelihood``) to the ``precision`` variable, as a sum
    (``momentum`` None) or a moving average, and marks the covariance ``stale``. Under a
    multi-replica strategy the global batch's term is added on every replica."""
    phi = tf.stop_gradient(phi)
    if likelihood != "gaussian":
        if logits is None:
            raise ValueError(f"Expected the logits for likelihood={likelihood!r}. "
                             "Received: logits=None")
        logits = tf.cast(tf.stop_gradient(logits), phi.dtype)
        if likelihood == "binary_logistic":
            prob = tf.sigmoid(logits)
            phi = phi * tf.sqrt(prob * (1.0 - prob))
        else:
            phi = phi * tf.exp(0.5 * logits)
    batch_precision = tf.matmul(phi, phi, transpose_a=True)
    batch = tf.cast(tf.shape(phi)[0], phi.dtype)
    ctx = multi_replica_context()
    if ctx is not None:  # The global batch's term, the same on every replica.
        batch_precision, batch = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                                [batch_precision, batch])
    current = tf.convert_to_tensor(precision)
    if momentum is None:
        updated = current + batch_precision
    else:
        updated = momentum * current + (1.0 - momentum) * batch_precision / batch
    precision.assign(updated)
    stale.assign(True)


def cached_covariance(precision, covariance, stale, ridge_penalty):
    """``Σ = (ridge · I + P)⁻¹`` (a Cholesky solve), recomputed and stored in the
    ``covariance`` variable when ``stale``, else read from it."""

    def refresh():
        eye = tf.eye(tf.shape(precision)[0], dtype=precision.dtype)
        chol = tf.linalg.cholesky(ridge_penalty * eye + precision)
        value = tf.linalg.cholesky_solve(chol, eye)
        with tf.control_dependencies([covariance.assign(value), stale.assign(False)]):
            return tf.identity(value)

    return tf.cond(tf.convert_to_tensor(stale), refresh,
                   lambda: tf.convert_to_tensor(covariance))


@_register
class LaplaceRandomFeatureCovariance(keras.layers.Layer):
    """The Laplace posterior covariance of output weights on given features (module docstring).

    A training call (``training=True``) adds the batch of features (``[batch, D]``, and its
    logits ``[batch, 1]`` for a non-Gaussian likelihood) to the precision and returns the
    ``[batch, batch]`` identity (as edward2); an inference call returns the predictive
    covariance ``Φ Σ Φᵀ``, computing ``Σ`` once after each change of the precision.
    Computes in float32 under a mixed precision policy.

    Args:
      momentum: None (default) sums the batches' terms (reset with
        `reset_precision_matrix`); a number in (0, 1) keeps their moving average.
      ridge_penalty: the prior precision of the weights (``>= 0``; 0 needs a positive
        definite data term for the covariance).
      likelihood: ``'gaussian'``, ``'binary_logistic'`` or ``'poisson'``.

    Input shape: ``[batch, D]``. Output shape: ``[batch, batch]``.
    """

    def __init__(self, momentum=None, ridge_penalty=1.0, likelihood="gaussian", **kwargs):
        super().__init__(**kernels.full_precision(kwargs))
        self.momentum = check_momentum("momentum", momentum)
        if (isinstance(ridge_penalty, bool) or not isinstance(ridge_penalty, numbers.Real)
                or not ridge_penalty >= 0):
            raise ValueError("Expected a non-negative number. "
                             f"Received: ridge_penalty={ridge_penalty!r}")
        self.ridge_penalty = float(ridge_penalty)
        self.likelihood = check_likelihood("likelihood", likelihood)

    def build(self, input_shape):
        self.precision_matrix, self.covariance_matrix, self.covariance_is_stale = (
            add_laplace_weights(self, check_matrix_inputs(input_shape, "D"), self.ridge_penalty))
        super().build(input_shape)

    def call(self, inputs, logits=None, training=None):
        phi = tf.cast(inputs, self.precision_matrix.dtype)
        if training:
            update_precision(self.precision_matrix, self.covariance_is_stale, phi, logits,
                             likelihood=self.likelihood, momentum=self.momentum)
            return tf.eye(tf.shape(phi)[0], dtype=phi.dtype)
        return tf.matmul(tf.matmul(phi, self.covariance()), phi, transpose_b=True)

    def covariance(self):
        """``Σ = (ridge · I + P)⁻¹``, ``[D, D]``."""
        if not self.built:
            raise ValueError("Expected a built layer: call it on an input first.")
        return cached_covariance(self.precision_matrix, self.covariance_matrix,
                                 self.covariance_is_stale, self.ridge_penalty)

    def reset_precision_matrix(self):
        """Resets the data term of the precision to zero (e.g. at an epoch start)."""
        self.precision_matrix.assign(tf.zeros_like(self.precision_matrix))
        self.covariance_is_stale.assign(True)

    def compute_output_shape(self, input_shape):
        return tf.TensorShape([input_shape[0], input_shape[0]])

    def get_config(self):
        config = super().get_config()
        config.update(momentum=self.momentum, ridge_penalty=self.ridge_penalty,
                      likelihood=self.likelihood)
        return config
