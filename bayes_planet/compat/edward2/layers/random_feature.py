"""edward2's ``ed.layers.random_feature``: ``RandomFeatureGaussianProcess`` and
``LaplaceRandomFeatureCovariance`` with edward2's arguments and defaults over the library's
(`bayes_planet.layers.RandomFeatureGaussianProcess`, `LaplaceRandomFeatureCovariance`).

What the bridge maps:

* ``gp_cov_momentum`` / ``momentum`` ``<= 0`` (edward2's exact sum, e.g. ``-1``) is the
  library's ``None``; edward2's defaults (momentum 0.999, ridge 1e-6, ``return_gp_cov=True``,
  ``normalize_input=True``) are kept.
* edward2's predictive covariance is ``ridge · Φ (ridge·I + P)⁻¹ Φᵀ`` (the library's, whose
  ridge is the weights' prior precision, times the ridge); inference calls return it.
* ``gp_kernel_type='gaussian'`` is the library's exponentiated quadratic kernel, fixed unless
  ``gp_kernel_scale_trainable``, with edward2's length scale: ``sqrt(gp_kernel_scale)`` for
  its custom random features without input normalization (they divide the inputs by it), 1
  with normalization, ``gp_kernel_scale`` for Keras' ``RandomFourierFeatures``;
  ``'linear'`` is the library's linear kernel (the features are the inputs).
* the layer's own Laplace state is its covariance layer: ``_gp_cov_layer`` (the name
  edward2's tests read) is the layer itself, whose ``precision_matrix``,
  ``covariance_matrix`` and ``if_update_covariance`` (the library's
  ``covariance_is_stale``) are edward2's.

Not mapped (one-line errors): custom random-feature initializers or activations and a
nonzero ``gp_output_bias``; the library's output bias is trainable (edward2's fixed at 0
unless ``gp_output_bias_trainable``).
"""

import math

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register
from bayes_planet.layers.sngp import LINEAR

__all__ = ["LaplaceRandomFeatureCovariance", "RandomFeatureGaussianProcess"]

_KERNEL_TYPES = ("gaussian", LINEAR)


def _momentum(value):
    """edward2's momentum: ``<= 0`` sums the batches (the library's None)."""
    return None if value is None or value <= 0 else value


class _StaleFlag:
    """edward2's name of the library's ``covariance_is_stale`` flag."""

    @property
    def if_update_covariance(self):
        return self.covariance_is_stale


@register
class LaplaceRandomFeatureCovariance(_StaleFlag, _bl.LaplaceRandomFeatureCovariance):
    """edward2's ``LaplaceRandomFeatureCovariance(momentum=0.999, ridge_penalty=1e-6,
    likelihood='gaussian', dtype=None, name='laplace_covariance')``."""

    def __init__(self, momentum=0.999, ridge_penalty=1e-6, likelihood="gaussian", dtype=None,
                 name="laplace_covariance",
                 use_on_read_synchronization_for_single_replica_vars=False, **kwargs):
        del use_on_read_synchronization_for_single_replica_vars  # The variables' aggregation
        # is the library's (first replica) either way.
        super().__init__(momentum=_momentum(momentum), ridge_penalty=ridge_penalty,
                         likelihood=likelihood, dtype=dtype, name=name, **kwargs)

    def call(self, inputs, logits=None, training=None):
        outputs = super().call(inputs, logits=logits, training=training)
        return outputs if training else self.ridge_penalty * outputs


@register
class RandomFeatureGaussianProcess(_StaleFlag, _bl.RandomFeatureGaussianProcess):
    """edward2's ``RandomFeatureGaussianProcess`` (module docstring: what is mapped)."""

    def __init__(self, units, num_inducing=1024, gp_kernel_type="gaussian", gp_kernel_scale=1.0,
                 gp_output_bias=0.0, normalize_input=True, gp_kernel_scale_trainable=False,
                 gp_output_bias_trainable=False, gp_cov_momentum=0.999,
                 gp_cov_ridge_penalty=1e-6, scale_random_features=True,
                 use_custom_random_features=True, custom_random_features_initializer=None,
                 custom_random_features_activation=None, l2_regularization=0.0,
                 gp_cov_likelihood="gaussian", return_gp_cov=True, return_random_features=False,
                 dtype=None, name="random_feature_gaussian_process", **kwargs):
        if "covariance_fn" in kwargs:  # A config of the library's (get_config).
            super().__init__(units, num_inducing, normalize_input=normalize_input,
                             scale_random_features=scale_random_features,
                             gp_cov_momentum=gp_cov_momentum,
                             gp_cov_ridge_penalty=gp_cov_ridge_penalty,
                             gp_cov_likelihood=gp_cov_likelihood,
                             l2_regularization=l2_regularization, return_gp_cov=return_gp_cov,
                             return_random_features=return_random_features, dtype=dtype,
                             name=name, **kwargs)
            return
        del gp_output_bias_trainable  # The library's output bias is trainable.
        if gp_kernel_type not in _KERNEL_TYPES:
            raise ValueError(f"Expected gp_kernel_type in {_KERNEL_TYPES}. "
                             f"Received: gp_kernel_type={gp_kernel_type!r}")
        for arg, value in (("custom_random_features_initializer",
                            custom_random_features_initializer),
                           ("custom_random_features_activation",
                            custom_random_features_activation)):
            if value is not None:
                raise ValueError(f"RandomFeatureGaussianProcess: bayes_planet implements "
                                 f"{arg}=None only. Received: {arg}={value!r}")
        if gp_output_bias != 0:
            raise ValueError("RandomFeatureGaussianProcess: bayes_planet implements "
                             f"gp_output_bias=0 only. Received: gp_output_bias={gp_output_bias!r}")
        if gp_kernel_type == LINEAR:
            kernel = LINEAR
        else:
            if not use_custom_random_features:
                length_scale = gp_kernel_scale
            else:
                length_scale = 1.0 if normalize_input else math.sqrt(gp_kernel_scale)
            kernel = _bl.ExponentiatedQuadratic(length_scale=length_scale,
                                                trainable=bool(gp_kernel_scale_trainable))
        super().__init__(units, num_inducing, covariance_fn=kernel,
                         normalize_input=normalize_input,
                         scale_random_features=scale_random_features,
                         gp_cov_momentum=_momentum(gp_cov_momentum),
                         gp_cov_ridge_penalty=gp_cov_ridge_penalty,
                         gp_cov_likelihood=gp_cov_likelihood,
                         l2_regularization=l2_regularization, return_gp_cov=return_gp_cov,
                         return_random_features=return_random_features, dtype=dtype,
                         name=name, **kwargs)

    @property
    def _gp_cov_layer(self):
        """edward2's covariance sublayer: here the layer itself holds its Laplace state."""
        return self

    def call(self, inputs, training=None):
        outputs = super().call(inputs, training=training)
        if training or not self.return_gp_cov:
            return outputs
        logits, covariance, *features = outputs
        return (logits, self.gp_cov_ridge_penalty * covariance, *features)
