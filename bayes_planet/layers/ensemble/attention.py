"""Rank-1 Bayesian attention: `EinsumDenseRank1` and `MultiHeadAttentionRank1`.

`EinsumDenseRank1` is ``keras.layers.EinsumDense`` with ``ensemble_size`` members sharing
one point-estimate kernel ``W``, as `ensemble.DenseRank1` is ``Dense``: member ``e``
computes ``activation(einsum(x ∘ α_e, W) ∘ γ_e + b_e)``, with α ``[E, in]`` over the
contracted input features (all contracted axes, flattened), γ ``[E, out]`` over the
kernel's output axes (flattened) and a per-member bias ``[E, *bias shape]``. α and γ have
a mean-field normal posterior (default `initializers.TrainableRandomSignNormal`, means
±1) with their KL to ½ N(1, 0.1²) + ½ N(−1, 0.1²)
(`regularizers.Rank1SignMixtureKLDivergence`) in ``layer.losses``; each call draws them
per example (shared by the example's other axes, e.g. its sequence), clipped to [-10, 10]
(Dusenberry et al., 2020). The equation must contract the trailing input axes with the
leading kernel axes and append the remaining kernel axes (``'abc,cde->abde'``,
``'abcd,cde->abe'``: every attention projection), after a batch axis.

`MultiHeadAttentionRank1` is ``keras.layers.MultiHeadAttention`` whose query, key, value
and output projections are `EinsumDenseRank1`: the members share the projection kernels
and each has its own factors on each projection; the attention itself acts per example.

Batch convention (as `ensemble.DenseRank1` and edward2): the batch of ``E·b`` rows is
``E`` contiguous blocks of ``b`` rows, block ``e`` through member ``e``; a batch not
divisible by ``E`` raises a one-line error. Registry: the families
``'einsum_dense_ensemble'`` and ``'multi_head_attention_ensemble'`` (estimator
``'rank1'``); `TransformerBlock` takes ``attention='rank1'``.
"""

import copy

import numpy as np
import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.attention import (
    ATTENTION_KEYWORD_ONLY,
    BayesianMultiHeadAttention,
    flat_plan,
)
from bayes_planet.layers.base import check_positive_int
from bayes_planet.layers.ensemble.dense import (
    ENSEMBLE_SIZE,
    RANK1_POSTERIOR,
    RANK1_PRIOR,
    Rank1Factors,
    factor_initializer,
    factor_regularizer,
    member_rows,
    point_initializer,
    sample_factor,
)
from bayes_planet.layers.noise import split_seed

__all__ = ["EinsumDenseRank1", "MultiHeadAttentionRank1"]


#: The keyword-only arguments both rank-1 attention layers add (after their twin's), with
#: their defaults.
RANK1_KEYWORD_ONLY = (
    ("ensemble_size", ENSEMBLE_SIZE), ("alpha_initializer", RANK1_POSTERIOR),
    ("gamma_initializer", RANK1_POSTERIOR), ("alpha_regularizer", RANK1_PRIOR),
    ("gamma_regularizer", RANK1_PRIOR), ("use_additive_perturbation", False), ("seed", None))


@_register
class EinsumDenseRank1(Rank1Factors, keras.layers.EinsumDense):
    """Rank-1 Bayesian `keras.layers.EinsumDense` (see the module docstring).

    Takes the arguments of `keras.layers.EinsumDense` (same order; ``kernel_initializer`` and
    ``bias_initializer`` must be point-estimate initializers), plus keyword-only:

    Args:
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: the factors' posteriors: factorized
        normal (default) or ``'trainable_cauchy'`` (with the
        ``'rank1_cauchy_kl_divergence'`` prior).
      alpha_regularizer, gamma_regularizer: their KL regularizers.
      use_additive_perturbation: ``einsum(x + α_e, W) + γ_e + b_e`` instead.
      seed: int or None, for reproducible noise.

    Shapes: as the equation says, with a leading batch of ``E·b`` rows; e.g.
    ``'abc,cde->abde'`` maps ``[E·b, T, C]`` to ``[E·b, T, D, E']``.
    """

    @_compat.twin_arguments(
        keras.layers.EinsumDense, keyword_only=RANK1_KEYWORD_ONLY,
        only_default=_compat.KERNEL_REWRITE_PARAMETERS)
    def __init__(self, *, equation, **kwargs):
        super().__init__(equation=equation, **kwargs)
        self._plan = flat_plan(equation)
        if self._plan is None:
            raise ValueError(
                "EinsumDenseRank1 needs an equation that contracts the trailing input axes "
                "with the leading kernel axes and appends the remaining kernel axes (e.g. "
                f"'abc,cde->abde'). Received: equation={equation!r}")

    def add_weight(self, *args, **kwargs):
        arguments = _compat.add_weight_arguments(args, kwargs)
        if arguments.get("name") == "bias":  # Keras' build asks for one bias: one per member.
            arguments["shape"] = (self.ensemble_size, *arguments["shape"])
        return super().add_weight(**arguments)

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        n_in = self._plan[0]
        if input_shape.rank is None or input_shape.rank <= n_in:
            raise ValueError(f"Expected inputs with a batch axis before the {n_in} axes the "
                             f"equation contracts. Received: input_shape={input_shape}")
        super().build(input_shape)
        dims = {"alpha": int(np.prod(self.kernel.shape[:n_in])),
                "gamma": int(np.prod(self.kernel.shape[n_in:]))}
        for name, dim in dims.items():
            setattr(self, name, self.add_weight(
                name=name, shape=(self.ensemble_size, dim),
                initializer=getattr(self, f"{name}_initializer"),
                regularizer=getattr(self, f"{name}_regularizer"), dtype=self.dtype,
                trainable=True))

    def call(self, inputs):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        members = self.ensemble_size
        rows = member_rows(x, members)
        alpha_seed, gamma_seed = split_seed(self._next_seed(), 2)
        alpha = sample_factor(self, "alpha", rows, alpha_seed, x.dtype)  # [E, rows | 1, in]
        gamma = sample_factor(self, "gamma", rows, gamma_seed, x.dtype)
        # Member-major view [E, rows, positions, features] of inputs and outputs.
        perturbed = self._perturb(tf.reshape(x, [members, rows, -1, alpha.shape[-1]]),
                                  alpha[:, :, None, :])
        perturbed = tf.reshape(perturbed, tf.shape(x))
        perturbed.set_shape(x.shape)
        y = tf.einsum(self.equation, perturbed, tf.cast(self.kernel, x.dtype))
        static_shape = y.shape
        y_shape = tf.shape(y)
        y = self._perturb(tf.reshape(y, [members, rows, -1, gamma.shape[-1]]),
                          gamma[:, :, None, :])
        if self.bias is not None:
            bias = tf.cast(self.bias, x.dtype)  # [E, *bias_shape], on the trailing axes
            y = tf.reshape(y, tf.concat([[members, rows], y_shape[1:]], 0))
            ones = [1] * (y.shape.rank - bias.shape.rank)
            y += tf.reshape(bias, [members, *ones, *bias.shape[1:]])
        y = tf.reshape(y, y_shape)
        y.set_shape(static_shape)
        return self.activation(y) if self.activation is not None else y


@_register
class MultiHeadAttentionRank1(BayesianMultiHeadAttention):
    """Multi-head attention with rank-1 projections (see the module docstring).

    `keras.layers.MultiHeadAttention` whose query/key/value/output projections are
    `EinsumDenseRank1`: shared point-estimate kernels, per-member factors and biases
    (each projection its own), drawn per example at each call.

    Takes the arguments of `keras.layers.MultiHeadAttention` (same order; ``kernel_initializer`` and
    ``bias_initializer`` must be point-estimate initializers, each projection gets a
    fresh one), plus the keyword-only ``ensemble_size``, ``alpha_initializer``,
    ``gamma_initializer``, ``alpha_regularizer``, ``gamma_regularizer``,
    ``use_additive_perturbation`` of `EinsumDenseRank1` (given to every projection)
    and ``seed``: the projections' seeds are derived from it and their names.

    Call, masks and shapes: as `keras.layers.MultiHeadAttention` with a batch of ``E·b``
      rows, e.g. ``layer(query [E·b, T, D], value [E·b, S, D])`` returns ``[E·b, T, D]``.
    """

    _dense_cls = EinsumDenseRank1

    @_compat.twin_arguments(keras.layers.MultiHeadAttention,
                            defaults={"kernel_initializer": "glorot_uniform"},
                            newer=_compat.ATTENTION_NEWER_PARAMETERS,
                            keyword_only=ATTENTION_KEYWORD_ONLY[:-1] + RANK1_KEYWORD_ONLY)
    def __init__(self, *, kernel_initializer, bias_initializer, ensemble_size,
                 alpha_initializer, gamma_initializer, alpha_regularizer, gamma_regularizer,
                 use_additive_perturbation, **kwargs):
        super().__init__(
            kernel_initializer=point_initializer("kernel_initializer", kernel_initializer),
            bias_initializer=point_initializer("bias_initializer", bias_initializer), **kwargs)
        self.ensemble_size = check_positive_int("ensemble_size", ensemble_size)
        self.alpha_regularizer = factor_regularizer("alpha_regularizer", alpha_regularizer)
        self.gamma_regularizer = factor_regularizer("gamma_regularizer", gamma_regularizer)
        self.use_additive_perturbation = bool(use_additive_perturbation)
        self._store_factor_configs(alpha_initializer, gamma_initializer)

    def _store_factor_configs(self, alpha_initializer, gamma_initializer):
        _compat.set_untracked(self, "_factor_init_configs", {
            name: initializers.serialize(factor_initializer(f"{name}_initializer", value))
            for name, value in (("alpha", alpha_initializer), ("gamma", gamma_initializer))})

    def _sublayer_kwargs(self, attr):
        kwargs = {f"{name}_initializer": initializers.for_weight(copy.deepcopy(config),
                                                                 f"{attr}/{name}")
                  for name, config in self._factor_init_configs.items()}
        kwargs.update(ensemble_size=self.ensemble_size,
                      alpha_regularizer=self.alpha_regularizer,
                      gamma_regularizer=self.gamma_regularizer,
                      use_additive_perturbation=self.use_additive_perturbation)
        return kwargs

    def get_config(self):
        config = super().get_config()
        config.update({f"{name}_initializer": copy.deepcopy(value)
                       for name, value in self._factor_init_configs.items()})
        config.update(
            ensemble_size=self.ensemble_size,
            alpha_regularizer=regularizers.serialize(self.alpha_regularizer),
            gamma_regularizer=regularizers.serialize(self.gamma_regularizer),
            use_additive_perturbation=self.use_additive_perturbation,
        )
        return config


# Configs nested in another layer's config are looked up by bare class name by the
# legacy SavedModel loader.
for _cls in (EinsumDenseRank1, MultiHeadAttentionRank1):
    keras.utils.get_custom_objects().setdefault(_cls.__name__, _cls)
