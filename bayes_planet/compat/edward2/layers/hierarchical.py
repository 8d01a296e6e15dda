"""edward2's ``DenseHierarchical`` and ``Conv2DHierarchical`` over the library's
(`bayes_planet.layers.hierarchical`): edward2's argument order and defaults.

``local_scale_constraint`` and ``global_scale_constraint`` are accepted at edward2's
``'softplus'`` (or None) and dropped: edward2's ``add_weight`` does not pass a constraint to a
distribution weight either.
"""

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments
from bayes_planet.layers.hierarchical import GLOBAL_SCALE_PRIOR

__all__ = ["Conv2DHierarchical", "DenseHierarchical"]

_SCALES = dict(local_scale_initializer="trainable_half_cauchy",
               global_scale_initializer="trainable_half_cauchy")
_SCALE_PRIORS = dict(local_scale_regularizer="half_cauchy_kl_divergence",
                     global_scale_regularizer=GLOBAL_SCALE_PRIOR)
_SCALE_CONSTRAINTS = dict(local_scale_constraint="softplus", global_scale_constraint="softplus")


class _Edward2Hierarchical(Edward2Arguments):
    edward2_dropped = {name: ("softplus",) for name in _SCALE_CONSTRAINTS}

    def call_weights(self):
        """Kept for edward2 code: a no-op (every call draws its own kernel and scales)."""


@register
class DenseHierarchical(_Edward2Hierarchical, _bl.DenseHierarchical):
    """edward2's ``DenseHierarchical`` (`bayes_planet.layers.DenseHierarchical`)."""

    edward2_signature = signature(
        "units", activation=None, use_bias=True, kernel_initializer="trainable_normal",
        bias_initializer="zero", **_SCALES, kernel_regularizer="normal_kl_divergence",
        bias_regularizer=None, **_SCALE_PRIORS, activity_regularizer=None,
        **_SCALE_CONSTRAINTS)


@register
class Conv2DHierarchical(_Edward2Hierarchical, _bl.Conv2DHierarchical):
    """edward2's ``Conv2DHierarchical`` (`bayes_planet.layers.Conv2DHierarchical`)."""

    edward2_signature = signature(
        "filters", "kernel_size", strides=(1, 1), padding="valid", data_format=None,
        dilation_rate=(1, 1), activation=None, use_bias=True,
        kernel_initializer="trainable_normal", bias_initializer="zeros", **_SCALES,
        kernel_regularizer="normal_kl_divergence", bias_regularizer=None, **_SCALE_PRIORS,
        activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
        **_SCALE_CONSTRAINTS)
