"""Heteroscedastic SNGP: the SNGP output layer's logits with heteroscedastic MC-softmax noise.

Fortuin et al. (2022, "Deep Classifiers with Label Noise Modeling and Distance Awareness")
combine SNGP's distance-aware model uncertainty with input-dependent label noise: the
latent logits' locations are SNGP's random-feature GP logits
(`sngp.RandomFeatureGaussianProcess`), their noise the low-rank plus diagonal noise of
`heteroscedastic.MCSoftmaxDenseFA`. In training calls the GP adds the batch to its
Laplace precision and the noise is the heteroscedastic one alone; at inference the
diagonal scale also carries the GP's predictive variance ``v(x) = φ(x)ᵀ Σ φ(x)``::

    d(x) ← sqrt(het_var_weight · d(x)² + sngp_var_weight · v(x))
"""

import tensorflow as tf

from bayes_planet.layers import _compat, kernels
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.checks import check_positive_number
from bayes_planet.layers.heteroscedastic import DEFAULT_MC_SAMPLES, MCSoftmaxDenseFA
from bayes_planet.layers.sngp import LINEAR, RandomFeatureGaussianProcess

__all__ = ["HeteroscedasticSNGPLayer"]


def _non_negative(name, value):
    return 0.0 if value == 0 else check_positive_number(name, value)


@_register
class HeteroscedasticSNGPLayer(MCSoftmaxDenseFA):
    """SNGP output layer with heteroscedastic Monte Carlo softmax noise (see the module).

    The GP is the library's `RandomFeatureGaussianProcess` (``gp_layer``), built with the
    ``num_inducing``, ``covariance_fn``, ``normalize_input``, ``scale_random_features``,
    ``gp_cov_*`` and ``l2_regularization`` arguments below; reset its precision at an
    epoch's start with `reset_covariance_matrix` (or `sngp.GPCovarianceReset`).

    Args:
      num_classes: the number of classes, > 2.
      num_factors: the rank of the noise's low-rank part, ``0 <= num_factors <=
        num_classes``.
      temperature: see `heteroscedastic.MCHeteroscedasticOutput`.
      train_mc_samples: see `heteroscedastic.MCHeteroscedasticOutput`.
      test_mc_samples: see `heteroscedastic.MCHeteroscedasticOutput`.
      compute_pred_variance: see `heteroscedastic.MCHeteroscedasticOutput`.
      share_samples_across_batch: see `heteroscedastic.MCHeteroscedasticOutput`.
      logits_only: return the logits alone (default True, as edward2).
      eps: see `heteroscedastic.MCHeteroscedasticOutput`.
      kernel_regularizer: regularizer of the noise's dense layers' kernels.
      bias_regularizer: regularizer of the noise's dense layers' biases.
      num_inducing: the GP's number of random features.
      covariance_fn: the GP's stationary kernel (None: unit exponentiated quadratic), or
        ``'linear'`` (the GP's features are its inputs; `RandomFeatureGaussianProcess`).
      normalize_input: the GP normalizes its inputs first.
      scale_random_features: the GP's features carry the ``sqrt(2 / D)`` factor.
      gp_cov_momentum: None (the exact sum of the batches) or a moving average's momentum.
      gp_cov_ridge_penalty: the GP weights' prior precision.
      gp_cov_likelihood: the GP's Laplace likelihood (``'gaussian'``).
      l2_regularization: L2 penalty of the GP's output weights.
      sngp_var_weight: the weight of the GP's variance in the inference noise.
      het_var_weight: the weight of the heteroscedastic variance in the inference noise.
      parameter_efficient: see `heteroscedastic.MCSoftmaxDenseFA`.
      return_unaveraged_logits: see `heteroscedastic.MCHeteroscedasticOutput`.
      tune_temperature: see `heteroscedastic.MCHeteroscedasticOutput`.
      temperature_lower_bound: see `heteroscedastic.MCHeteroscedasticOutput`.
      temperature_upper_bound: see `heteroscedastic.MCHeteroscedasticOutput`.
      seed: int seed of the noise and of the GP's random features.
      **kwargs: Keras layer arguments.
    """

    def __init__(self, num_classes, num_factors=10, temperature=1.0,
                 train_mc_samples=DEFAULT_MC_SAMPLES, test_mc_samples=DEFAULT_MC_SAMPLES,
                 compute_pred_variance=False, share_samples_across_batch=False,
                 logits_only=True, eps=1e-7, kernel_regularizer=None, bias_regularizer=None,
                 num_inducing=1024, covariance_fn=None, normalize_input=False,
                 scale_random_features=True, gp_cov_momentum=None, gp_cov_ridge_penalty=1.0,
                 gp_cov_likelihood="gaussian", l2_regularization=1e-6, sngp_var_weight=1.0,
                 het_var_weight=1.0, parameter_efficient=False, return_unaveraged_logits=False,
                 tune_temperature=False, temperature_lower_bound=None,
                 temperature_upper_bound=None, seed=None, **kwargs):
        self.sngp_var_weight = _non_negative("sngp_var_weight", sngp_var_weight)
        self.het_var_weight = _non_negative("het_var_weight", het_var_weight)
        # Untracked: Keras 2 would wrap (and so change) a config's nested kernel dict.
        _compat.set_untracked(self, "_gp_arguments", dict(
            num_inducing=num_inducing, covariance_fn=covariance_fn,
            normalize_input=normalize_input, scale_random_features=scale_random_features,
            gp_cov_momentum=gp_cov_momentum, gp_cov_ridge_penalty=gp_cov_ridge_penalty,
            gp_cov_likelihood=gp_cov_likelihood, l2_regularization=l2_regularization))
        super().__init__(
            num_classes, num_factors, temperature, parameter_efficient, train_mc_samples,
            test_mc_samples, compute_pred_variance, share_samples_across_batch, logits_only,
            eps, kernel_regularizer, bias_regularizer, return_unaveraged_logits,
            tune_temperature, temperature_lower_bound, temperature_upper_bound, seed, **kwargs)

    @property
    def gp_layer(self):
        """The `RandomFeatureGaussianProcess` giving the logits' locations."""
        return self.loc_layer

    def _make_location_layer(self):
        return RandomFeatureGaussianProcess(
            self.num_classes, **self._gp_arguments, return_gp_cov=True, seed=self.seed,
            dtype=self.dtype_policy, name="sngp_layer")

    def _distribution(self, inputs, training):
        flat = tf.reshape(inputs, [-1, tf.shape(inputs)[-1]])
        locs, covariance = self.loc_layer(flat, training=training)
        diag = self.diagonal_scale(inputs)
        if not training:
            variance = tf.reshape(tf.linalg.diag_part(covariance),
                                  tf.concat([tf.shape(inputs)[:-1], [1]], 0))
            diag = tf.sqrt(self.het_var_weight * tf.square(diag)
                           + self.sngp_var_weight * variance)
        return tf.reshape(locs, tf.concat([tf.shape(inputs)[:-1], [self.num_classes]], 0)), diag

    def build(self, input_shape):
        dim = tf.TensorShape(input_shape)[-1]
        _compat.build_sublayer(self.loc_layer, tf.TensorShape([None, dim]))  # Rank 2 always.
        super().build(input_shape)

    def _sublayers(self, dim):
        return super()._sublayers(dim)[1:]  # Not the GP (built above).

    def reset_covariance_matrix(self):
        """Resets the GP's precision to the prior's (e.g. at an epoch's start)."""
        self.loc_layer.reset_covariance_matrix()

    def get_config(self):
        config = super().get_config()
        config.update(self._gp_arguments, sngp_var_weight=self.sngp_var_weight,
                      het_var_weight=self.het_var_weight)
        config["covariance_fn"] = (LINEAR if self.loc_layer.linear
                                   else kernels.serialize(self.loc_layer.covariance_fn))
        return config
