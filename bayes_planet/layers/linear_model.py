"""Bayesian linear regression in closed form: `BayesianLinearModel`.

With the prior ``w ~ N(0, prior_variance · I)`` on the coefficients and the likelihood
``y ~ N(X w, noise_variance)``, the posterior is Gaussian (Bishop, PRML, Sec. 3.3)::

    A = XᵀX / noise_variance + I / prior_variance,    w | X, y ~ N(A⁻¹ Xᵀy / noise_variance, A⁻¹)

and the predictive distribution of ``f(x*) = x*ᵀ w`` is ``N(x*ᵀ m, x*ᵀ A⁻¹ x*)`` (plus
``noise_variance`` for a new observation ``y*``). `BayesianLinearModel.fit` computes it from
data in one Cholesky factorization (each call refits from scratch, as edward2's); a call
returns the predictive distribution as a `RandomVariable`, the prior's before any fit.
"""

import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.checks import check_matrix_inputs, check_positive_number
from bayes_planet.layers.random_variable import RandomVariable

__all__ = ["BayesianLinearModel"]


@_register
class BayesianLinearModel(_compat.RandomVariableOutputs, keras.layers.Layer):
    """Exact Bayesian linear regression without intercept (module docstring).

    Args:
      noise_variance: the observations' noise variance (positive).
      prior_variance: the coefficients' prior variance (positive; default 1, edward2's
        standard normal prior).
      observation_noise: whether calls predict a new observation ``y*`` (adds
        ``noise_variance``) instead of the mean function ``f(x*)`` (default False, edward2's).

    Input shape: ``[batch, d]``. Output: a `RandomVariable` over a ``Normal`` of shape
    ``[batch]``. The posterior lies in non-trainable weights (``coeffs_mean`` ``[d]``,
    ``coeffs_precision_tril`` ``[d, d]``, ``fitted``), so a saved layer keeps its fit.
    """

    def __init__(self, noise_variance, prior_variance=1.0, observation_noise=False, **kwargs):
        super().__init__(**kwargs)
        self.noise_variance = check_positive_number("noise_variance", noise_variance)
        self.prior_variance = check_positive_number("prior_variance", prior_variance)
        self.observation_noise = bool(observation_noise)

    def build(self, input_shape):
        dim = check_matrix_inputs(input_shape)
        self.coeffs_mean = self.add_weight(name="coeffs_mean", shape=[dim],
                                           initializer="zeros", trainable=False)
        self.coeffs_precision_tril = self.add_weight(
            name="coeffs_precision_tril", shape=[dim, dim], trainable=False,
            initializer=keras.initializers.Identity(self.prior_variance ** -0.5))
        self.fitted = self.add_weight(name="fitted", shape=[], dtype="bool",
                                      initializer="zeros", trainable=False)
        super().build(input_shape)

    def fit(self, x, y):
        """Sets the posterior to that given ``x`` ``[n, d]`` and ``y`` ``[n]``; returns self."""
        x = tf.convert_to_tensor(x, self.compute_dtype)
        y = tf.convert_to_tensor(y, self.compute_dtype)
        if x.shape.rank != 2 or y.shape.rank != 1 or x.shape[0] != y.shape[0]:
            raise ValueError("Expected x of shape [n, d] and y of shape [n]. Received: "
                             f"x.shape={tuple(x.shape)}, y.shape={tuple(y.shape)}")
        if not self.built:
            self.build(x.shape)
        precision = tf.matmul(x, x, transpose_a=True) / self.noise_variance
        precision += tf.eye(x.shape[-1], dtype=x.dtype) / self.prior_variance
        tril = tf.linalg.cholesky(precision)
        rhs = tf.linalg.matvec(x, y, transpose_a=True)[:, None] / self.noise_variance
        self.coeffs_mean.assign(tf.linalg.cholesky_solve(tril, rhs)[:, 0])
        self.coeffs_precision_tril.assign(tril)
        self.fitted.assign(True)
        return self

    def call(self, inputs):
        x = tf.convert_to_tensor(inputs, self.compute_dtype)
        mean = tf.linalg.matvec(x, self.coeffs_mean)
        # x A⁻¹ xᵀ per row = |L⁻¹ xᵀ|² with A = L Lᵀ.
        half = tf.linalg.triangular_solve(self.coeffs_precision_tril, tf.transpose(x))
        variance = tf.reduce_sum(tf.square(half), 0)
        if self.observation_noise:
            variance += self.noise_variance
        return RandomVariable(tfp.distributions.Normal(mean, tf.sqrt(variance)))

    def get_config(self):
        config = super().get_config()
        config.update(noise_variance=self.noise_variance, prior_variance=self.prior_variance,
                      observation_noise=self.observation_noise)
        return config
