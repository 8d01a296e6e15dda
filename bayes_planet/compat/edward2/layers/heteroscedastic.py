"""edward2's heteroscedastic heads (``ed.layers.MCSoftmaxDense`` ...) over
`bayes_planet.layers.heteroscedastic` and `bayes_planet.layers.hetsngp`.

edward2's positional order and defaults; its ``logit_noise`` is a
``tfp.distributions`` class (``Normal``, ``Logistic``, ``Gumbel``), the library's a name
(``'normal'`` ...); ``HeteroscedasticSNGPLayer`` takes edward2's GP arguments
(``gp_kernel_type``, ``gp_kernel_scale``, ``gp_cov_momentum=-1`` ...) and builds the
library's kernel from them. Layer names default to Keras' unique ones (edward2 gives every
instance its class name).
"""

import math

import tensorflow_probability as tfp

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments
from bayes_planet.layers.heteroscedastic import (
    MIN_SCALE_MONTE_CARLO,
    TEMPERATURE_LOWER_BOUND,
    TEMPERATURE_UPPER_BOUND,
    compute_temperature,
)
from bayes_planet.layers.sngp import LINEAR

__all__ = [
    "MIN_SCALE_MONTE_CARLO",
    "TEMPERATURE_LOWER_BOUND",
    "TEMPERATURE_UPPER_BOUND",
    "EnsembleHeteroscedasticOutputs",
    "ExactSigmoidDense",
    "HeteroscedasticSNGPLayer",
    "MCSigmoidDenseFA",
    "MCSoftmaxDense",
    "MCSoftmaxDenseFA",
    "MCSoftmaxDenseFASegmentation",
    "compute_temperature",
]

#: edward2's noise classes and the library's names of them.
_NOISE_NAMES = {tfp.distributions.Normal: "normal", tfp.distributions.Logistic: "logistic",
                tfp.distributions.Gumbel: "gumbel"}


def noise_name(logit_noise):
    """The library's name of edward2's ``logit_noise`` (a tfp class or already a name)."""
    if isinstance(logit_noise, str):
        return logit_noise
    if logit_noise not in _NOISE_NAMES:
        raise ValueError("Expected logit_noise in (tfp.distributions.Normal, "
                         "tfp.distributions.Logistic, tfp.distributions.Gumbel). "
                         f"Received: logit_noise={logit_noise!r}")
    return _NOISE_NAMES[logit_noise]


class _NoiseByClass:
    """Takes edward2's ``logit_noise`` class (placed between `Edward2Arguments` and the
    library's layer)."""

    def __init__(self, *args, logit_noise="normal", **kwargs):
        super().__init__(*args, logit_noise=noise_name(logit_noise), **kwargs)


_SAMPLING = dict(train_mc_samples=1000, test_mc_samples=1000, compute_pred_variance=False,
                 share_samples_across_batch=False, logits_only=False, eps=1e-7)
_TEMPERATURE = dict(tune_temperature=False, temperature_lower_bound=None,
                    temperature_upper_bound=None)
_REGULARIZERS = dict(dtype=None, kernel_regularizer=None, bias_regularizer=None)


@register
class MCSoftmaxDense(Edward2Arguments, _NoiseByClass, _bl.MCSoftmaxDense):
    """edward2's ``MCSoftmaxDense`` (`bayes_planet.layers.MCSoftmaxDense`)."""

    edward2_signature = signature(
        "num_classes", logit_noise=tfp.distributions.Normal, temperature=1.0, **_SAMPLING,
        **_REGULARIZERS, return_unaveraged_logits=False, **_TEMPERATURE, name=None)


@register
class MCSoftmaxDenseFA(Edward2Arguments, _bl.MCSoftmaxDenseFA):
    """edward2's ``MCSoftmaxDenseFA`` (`bayes_planet.layers.MCSoftmaxDenseFA`)."""

    edward2_signature = signature(
        "num_classes", "num_factors", temperature=1.0, parameter_efficient=False, **_SAMPLING,
        **_REGULARIZERS, return_unaveraged_logits=False, **_TEMPERATURE, name=None)


@register
class MCSoftmaxDenseFASegmentation(Edward2Arguments, _bl.MCSoftmaxDenseFASegmentation):
    """edward2's ``MCSoftmaxDenseFASegmentation``
    (`bayes_planet.layers.MCSoftmaxDenseFASegmentation`)."""

    edward2_signature = signature(
        "num_classes", "num_factors", temperature=1.0, parameter_efficient=False, **_SAMPLING,
        **_REGULARIZERS, name=None)


@register
class MCSigmoidDenseFA(Edward2Arguments, _bl.MCSigmoidDenseFA):
    """edward2's ``MCSigmoidDenseFA`` (`bayes_planet.layers.MCSigmoidDenseFA`)."""

    edward2_signature = signature(
        "num_outputs", num_factors=0, temperature=1.0, parameter_efficient=False, **_SAMPLING,
        **_REGULARIZERS, return_unaveraged_logits=False, **_TEMPERATURE, name=None)


@register
class ExactSigmoidDense(Edward2Arguments, _NoiseByClass, _bl.ExactSigmoidDense):
    """edward2's ``ExactSigmoidDense`` (`bayes_planet.layers.ExactSigmoidDense`)."""

    edward2_signature = signature("num_outputs", logit_noise=tfp.distributions.Normal,
                                  min_scale=1e-2, logits_only=False, dtype=None, name=None)


@register
class EnsembleHeteroscedasticOutputs(Edward2Arguments, _bl.EnsembleHeteroscedasticOutputs):
    """edward2's ``EnsembleHeteroscedasticOutputs``
    (`bayes_planet.layers.EnsembleHeteroscedasticOutputs`)."""

    edward2_signature = signature("num_classes", "layers", "ensemble_weighting",
                                  averaging="ensemble_cross_ent", eps=1e-7, name=None)


class _Edward2GP:
    """edward2's GP arguments of ``HeteroscedasticSNGPLayer`` as the library's (placed
    between `Edward2Arguments` and the library's layer)."""

    def __init__(self, *args, gp_kernel_type="gaussian", gp_kernel_scale=1.0,
                 gp_kernel_scale_trainable=False, gp_cov_momentum=None, **kwargs):
        if "covariance_fn" not in kwargs:  # Not a config of the library's.
            if gp_kernel_type not in ("gaussian", LINEAR):
                raise ValueError("Expected gp_kernel_type in ('gaussian', 'linear'). "
                                 f"Received: gp_kernel_type={gp_kernel_type!r}")
            kwargs["covariance_fn"] = LINEAR if gp_kernel_type == LINEAR else (
                _bl.ExponentiatedQuadratic(length_scale=math.sqrt(gp_kernel_scale),
                                           trainable=gp_kernel_scale_trainable))
        if gp_cov_momentum is not None and gp_cov_momentum <= 0:
            gp_cov_momentum = None  # edward2's exact sum (-1).
        super().__init__(*args, gp_cov_momentum=gp_cov_momentum, **kwargs)


@register
class HeteroscedasticSNGPLayer(Edward2Arguments, _Edward2GP, _bl.HeteroscedasticSNGPLayer):
    """edward2's ``HeteroscedasticSNGPLayer`` (`bayes_planet.layers.HeteroscedasticSNGPLayer`):
    the RBF kernel of length scale ``sqrt(gp_kernel_scale)`` (edward2's inputs scaled by
    ``1 / sqrt(gp_kernel_scale)``), fixed unless ``gp_kernel_scale_trainable``."""

    edward2_signature = signature(
        "num_classes", num_factors=10, temperature=1.0, train_mc_samples=1000,
        test_mc_samples=1000, compute_pred_variance=False, share_samples_across_batch=False,
        logits_only=True, eps=1e-7, **_REGULARIZERS, num_inducing=1024,
        gp_kernel_type="gaussian", gp_kernel_scale=1.0, gp_output_bias=0.0,
        normalize_input=False, gp_kernel_scale_trainable=False, gp_output_bias_trainable=False,
        gp_cov_momentum=-1.0, gp_cov_ridge_penalty=1.0, scale_random_features=True,
        use_custom_random_features=True, custom_random_features_initializer=None,
        custom_random_features_activation=None, l2_regularization=1e-6,
        gp_cov_likelihood="gaussian", return_gp_cov=True, return_random_features=False,
        sngp_var_weight=1.0, het_var_weight=1.0, name=None)
    edward2_fixed = {"gp_output_bias": 0.0, "use_custom_random_features": True,
                     "return_gp_cov": True, "return_random_features": False}
    edward2_dropped = {"gp_output_bias_trainable": (False, True),
                       "custom_random_features_initializer": (),
                       "custom_random_features_activation": ()}
