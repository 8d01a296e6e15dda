"""Ensemble convolutions: rank-1 Bayesian (`Conv1DRank1`, `Conv2DRank1`) and BatchEnsemble
(`Conv1DBatchEnsemble`, `Conv2DBatchEnsemble`).

The convolutional twins of `bayes_planet.layers.ensemble`'s dense layers, with the same
conventions (shared mixins): ``ensemble_size`` members share one point-estimate kernel
``W`` ``[*kernel_size, in_channels, filters]`` and differ by per-member factors on the
input channels (α ``[E, in_channels]``) and the output channels (γ ``[E, filters]``) and
a per-member bias ``[E, filters]``. Member ``e`` computes
``activation(conv(x ∘ α_e, W) ∘ γ_e + b_e)``, the factors broadcast over the spatial
positions; as α and γ scale channels, that is the plain convolution with the kernel
``W ∘ α_e[:, None] ∘ γ_e[None, :]`` over its two channel axes (a rank-1 change of the
kernel's channel matrix).

Batch convention as for the dense layers (edward2's): a batch of ``E·b`` examples is
``E`` contiguous blocks and block ``e`` goes through member ``e``; a batch not divisible
by ``E`` is a one-line error. ``padding='causal'`` (Conv1D) pads the perturbed input, as
``'same'`` does. ``groups`` must be 1.

Registry: the ``'conv1d_ensemble'`` and ``'conv2d_ensemble'`` families (estimators
``'rank1'`` and ``'batch_ensemble'``) of `bayes_planet.layer_registry`, not estimators of
``'conv1d'``/``'conv2d'``, for the dense layers' reason (their readers feed plain
batches).
"""


from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import check_positive_int
from bayes_planet.layers.ensemble.dense import (
    ENSEMBLE_SIZE,
    FAST_WEIGHTS,
    RANK1_POSTERIOR,
    RANK1_PRIOR,
    BatchEnsemble,
    EnsembleLayer,
    Rank1Ensemble,
    init_arguments,
)

__all__ = ["Conv1DBatchEnsemble", "Conv1DRank1", "Conv2DBatchEnsemble", "Conv2DRank1"]


class _EnsembleConv(EnsembleLayer):
    """Mixin for a Keras ``Conv*`` class with per-member factors and biases (`EnsembleLayer`).

    Args (by name: the concrete layers hold the public signature, the Keras convolution's
      plus keyword-only ones): as the Keras convolution, plus those of
      `ensemble.EnsembleFactors` (and of the factor mixin). ``kernel_initializer`` and
      ``bias_initializer`` must be point-estimate initializers; ``groups`` must be 1.

    Input shape: ``(E·b, *spatial, in_channels)`` (``channels_last``) or ``(E·b,
    in_channels, *spatial)``. Output shape: the Keras convolution's.
    """

    def __init__(self, *, filters, groups, **kwargs):
        if groups != 1:
            raise ValueError(f"Expected groups=1. Received: groups={groups!r}")
        super().__init__(filters=check_positive_int("filters", filters), groups=groups, **kwargs)

    @property
    def _channel_axis(self):
        return 1 if _compat.channels_first(self) else -1

    def _linear(self, x, kernel):
        x, op = _compat.conv_input_and_op(self, x)
        return op(x, kernel)


class _Rank1Conv(Rank1Ensemble, _EnsembleConv):
    """Rank-1 Bayesian convolution (Dusenberry et al., 2020); see `Conv2DRank1`."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, *,
                 ensemble_size=ENSEMBLE_SIZE, alpha_initializer=RANK1_POSTERIOR,
                 gamma_initializer=RANK1_POSTERIOR, alpha_regularizer=RANK1_PRIOR,
                 gamma_regularizer=RANK1_PRIOR, use_additive_perturbation=False,
                 sampling="per_example", seed=None, **kwargs):
        super().__init__(**init_arguments(locals()))


@_register
class Conv1DRank1(_Rank1Conv, keras.layers.Conv1D):
    """Rank-1 Bayesian 1-D convolution (Dusenberry et al., 2020).

    `Conv2DRank1` for sequences: a `keras.layers.Conv1D` (same arguments and shapes)
    whose point-estimate kernel is shared by ``ensemble_size`` members, each with a
    mean-field posterior over its input-channel factor α_e ``[in_channels]`` and
    output-channel factor γ_e ``[filters]`` and its own bias; member ``e`` computes
    ``activation(conv1d(x ∘ α_e, W) ∘ γ_e + b_e)`` on block ``e`` of the batch. Keyword-only
    arguments, sampling, KL and batch convention as `Conv2DRank1`.
    """


@_register
class Conv2DRank1(_Rank1Conv, keras.layers.Conv2D):
    """Rank-1 Bayesian 2-D convolution (Dusenberry et al., 2020).

    A `keras.layers.Conv2D` (same arguments and shapes) whose point-estimate kernel is
    shared by ``ensemble_size`` members, each with a mean-field posterior over its
    input-channel factor α_e ``[in_channels]`` and output-channel factor γ_e ``[filters]``
    (default: normal, means at random signs ±1, stddev ≈ 0.032;
    `initializers.TrainableRandomSignNormal`) and a point-estimate bias ``b_e``. Member
    ``e`` computes ``activation(conv2d(x ∘ α_e, W) ∘ γ_e + b_e)`` on block ``e`` of the
    batch (module docstring). As in edward2, each call draws α and γ per example (shared
    by the example's spatial positions), clipped to [-10, 10]; ``sampling='per_member'``
    draws them once per member (`ensemble.Rank1Ensemble`). Inside `posterior_mean` they
    are their means; `fixed_noise` and ``seed`` work as for every Bayesian layer.

    The KL of α and γ to the prior (default `regularizers.Rank1SignMixtureKLDivergence`,
    ½ N(1, 0.1²) + ½ N(−1, 0.1²)) is in ``layer.losses``; kernel and bias take plain Keras
    regularizers.

    Takes the arguments of `keras.layers.Conv2D` (same order; ``groups`` must be 1), plus
    keyword-only:

    Args:
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: the factors' posteriors: factorized
        normal (default) or ``'trainable_cauchy'`` (with the
        ``'rank1_cauchy_kl_divergence'`` prior).
      alpha_regularizer, gamma_regularizer: their KL regularizers.
      use_additive_perturbation: computes ``conv2d(x + α_e, W) + γ_e + b_e`` instead.
      sampling: ``'per_example'`` (default) or ``'per_member'``.
      seed: int or None, for reproducible noise.
    """


class _BatchEnsembleConv(BatchEnsemble, _EnsembleConv):
    """BatchEnsemble convolution (Wen et al., 2020); see `Conv2DBatchEnsemble`."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, *,
                 ensemble_size=ENSEMBLE_SIZE, alpha_initializer=FAST_WEIGHTS,
                 gamma_initializer=FAST_WEIGHTS, **kwargs):
        super().__init__(**init_arguments(locals()))


@_register
class Conv1DBatchEnsemble(_BatchEnsembleConv, keras.layers.Conv1D):
    """BatchEnsemble 1-D convolution (Wen et al., 2020): deterministic rank-1 fast weights.

    `Conv2DBatchEnsemble` for sequences (the BatchEnsemble twin of `Conv1DRank1`): a
    `keras.layers.Conv1D` (same arguments and shapes) whose kernel is shared by
    ``ensemble_size`` members, each with fast weights α_e ``[in_channels]`` and γ_e
    ``[filters]`` (plain trainable weights, default `initializers.RandomSign`, ±1) and its
    own bias; member ``e`` computes ``activation(conv1d(x ∘ α_e, W) ∘ γ_e + b_e)`` on
    block ``e`` of the batch. No KL and no noise (so no ``seed``); ``padding='causal'``
    pads the perturbed input.

    Takes the arguments of `keras.layers.Conv1D` (same order; ``groups`` must be 1), plus
    keyword-only:

    Args:
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: Keras initializers of the fast weights.
    """


@_register
class Conv2DBatchEnsemble(_BatchEnsembleConv, keras.layers.Conv2D):
    """BatchEnsemble 2-D convolution (Wen et al., 2020): deterministic rank-1 fast weights.

    Like `Conv2DRank1` with point-estimate factors: α ``[E, in_channels]`` and γ
    ``[E, filters]`` are plain trainable weights (default `initializers.RandomSign`, ±1),
    with per-member biases, no KL and no noise (so no ``seed``). Member ``e`` computes
    ``activation(conv2d(x ∘ α_e, W) ∘ γ_e + b_e)`` on block ``e`` of the batch.

    Takes the arguments of `keras.layers.Conv2D` (same order; ``groups`` must be 1), plus
    keyword-only:

    Args:
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: Keras initializers of the fast weights.
    """
