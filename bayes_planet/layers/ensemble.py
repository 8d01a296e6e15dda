"""Ensemble dense layers: rank-1 Bayesian (`DenseRank1`) and BatchEnsemble (`DenseBatchEnsemble`).

Both hold ``ensemble_size`` members that share one point-estimate kernel ``W``
``[in, units]`` and differ by per-member factors on the inputs (α ``[E, in]``) and the
outputs (γ ``[E, units]``) and a per-member bias ``[E, units]``: member ``e`` computes
``activation(((x ∘ α_e) @ W) ∘ γ_e + b_e)``, a rank-1 change of the shared kernel for
``E·(in + 2·units)`` extra parameters.

Batch convention (as in edward2, so its users' code ports unchanged): the input batch of
``E·b`` rows is ``E`` contiguous blocks of ``b`` rows and block ``e`` goes through member
``e``. To show every member the same examples, tile the batch ``E`` times (``tf.tile(x,
[E, 1])``) and the labels with it; average the members' predictive at test time. A batch
not divisible by ``E`` raises a one-line error naming both sizes (a ``tf.debugging``
assertion when the batch size is only known at run time). Inputs may have middle axes
``(E·b, ..., in)``; the factors then apply to every position of an example.

Registry: both are the ``'dense_ensemble'`` family of `bayes_planet.layer_registry`
(estimators ``'rank1'`` and ``'batch_ensemble'``, Keras twin ``Dense``), not estimators
of the ``'dense'`` family: that family's estimators are drop-in replacements read by the
agent config (``model.estimator``), the RSSM, the Transformer, the calibration
experiment and the uncertainty benchmark, all of which feed plain batches; an ensemble
layer needs the tiled batch convention, so listing it there would break them silently.
"""

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import initializers, regularizers
from bayes_planet.layers.base import (
    BayesianLayer,
    check_positive_int,
    moments,
    per_example,
    split_seed,
)
from bayes_planet.layers.initializers import DistributionInitializer, MomentsUnavailableError
from bayes_planet.layers.noise import standard_normal

__all__ = ["DenseBatchEnsemble", "DenseRank1", "member_rows"]

_register = keras.saving.register_keras_serializable(package="bayes_planet")

#: Sampled rank-1 factors are clipped to [-_CLIP, _CLIP] (edward2's perturbation bounds).
_CLIP = 10.0


def point_initializer(name, value):
    """``value`` resolved as an initializer of a point-estimate weight (not a posterior)."""
    resolved = initializers.get(value)
    if isinstance(resolved, DistributionInitializer):
        raise ValueError(f"Expected a point-estimate initializer for {name} (the ensemble's "
                         f"shared weights are not sampled). Received: {name}={value!r}")
    return resolved


def member_rows(batch_size, ensemble_size):
    """Rows per member, ``batch_size // ensemble_size``; a one-line error if it does not
    divide (a ``tf.debugging`` assertion when ``batch_size`` is only known at run time).

    ``batch_size``: an int, a scalar int tensor (e.g. ``tf.shape(x)[0]``), or a batch
    ``x`` of rank >= 1 (its leading axis).
    """
    if not isinstance(batch_size, int) and getattr(batch_size, "shape", ()) != ():
        x = batch_size
        batch_size = x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]
    static = batch_size if isinstance(batch_size, int) else tf.get_static_value(batch_size)
    if static is not None:
        static = int(static)
        if static % ensemble_size:
            raise ValueError(f"Expected a batch size divisible by ensemble_size. Received: "
                             f"batch size {static}, ensemble_size={ensemble_size}")
        return static // ensemble_size
    check = tf.debugging.assert_equal(
        batch_size % ensemble_size, 0,
        message=f"Expected a batch size divisible by ensemble_size={ensemble_size}. "
                "Received: batch size")
    with tf.control_dependencies([check]):
        return tf.identity(batch_size // ensemble_size)


def sample_factor(layer, name, rows, seed, dtype):
    """One draw per example of the rank-1 factor ``layer.<name>`` (``[E, dim]``).

    Returns ``[E, rows, dim]``: row ``r`` of member ``e`` gets its own draw from the
    factor's posterior, clipped to [-10, 10] (edward2's bounds); or the mean
    ``[E, 1, dim]`` when the factor is deterministic (inside `posterior_mean`).
    Replica-aware (`base.per_example`). Needs closed-form normal moments: a one-line
    error naming ``<name>_initializer`` for a posterior without them.
    """
    try:
        loc, scale = moments(getattr(layer, name), dtype)
    except MomentsUnavailableError as e:
        raise ValueError(
            f"{type(layer).__name__} samples {name} per example from closed-form factorized "
            f"normal moments (loc, scale). Received: {name}_initializer="
            f"{type(getattr(layer, name)).__name__}") from e
    if scale is None:
        return loc[:, None, :]
    members, dim = layer.ensemble_size, loc.shape[-1]
    eps = per_example(lambda shape, s: standard_normal(shape, s, dtype=dtype),
                      tf.stack([members * rows, dim]), seed)
    eps = tf.reshape(eps, [members, rows, dim])
    return tf.clip_by_value(loc[:, None, :] + scale[:, None, :] * eps, -_CLIP, _CLIP)


class _EnsembleDense(keras.layers.Dense):
    """Dense with per-member factors α, γ and biases; subclasses define ``_factors``.

    Args: as `keras.layers.Dense` (same order), plus keyword-only ``ensemble_size`` and
      the factors' ``alpha_initializer``/``gamma_initializer`` (and, for subclasses that
      take them, regularizers). ``kernel_initializer`` and ``bias_initializer`` must be
      point-estimate initializers.

    Input shape: ``(E·b, ..., input_dim)``. Output shape: ``(E·b, ..., units)``.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, *, ensemble_size=4,
                 alpha_initializer, gamma_initializer, alpha_regularizer=None,
                 gamma_regularizer=None, **kwargs):
        super().__init__(
            units=check_positive_int("units", units),
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=point_initializer("kernel_initializer", kernel_initializer),
            bias_initializer=point_initializer("bias_initializer", bias_initializer),
            kernel_regularizer=regularizers.get(kernel_regularizer),
            bias_regularizer=regularizers.get(bias_regularizer),
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        self.ensemble_size = check_positive_int("ensemble_size", ensemble_size)
        self.alpha_initializer = initializers.get(alpha_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.alpha_regularizer = regularizers.get(alpha_regularizer)
        self.gamma_regularizer = regularizers.get(gamma_regularizer)

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        last_dim = input_shape[-1] if input_shape.rank else None
        if last_dim is None:
            raise ValueError("Expected inputs with a defined last dimension. "
                             f"Received: input_shape={input_shape}")
        last_dim = int(last_dim)
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: last_dim})
        members = self.ensemble_size
        self.kernel = self.add_weight(
            name="kernel", shape=[last_dim, self.units], initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer, constraint=self.kernel_constraint,
            dtype=self.dtype, trainable=True)
        self.alpha = self.add_weight(
            name="alpha", shape=[members, last_dim], initializer=self.alpha_initializer,
            regularizer=self.alpha_regularizer, dtype=self.dtype, trainable=True)
        self.gamma = self.add_weight(
            name="gamma", shape=[members, self.units], initializer=self.gamma_initializer,
            regularizer=self.gamma_regularizer, dtype=self.dtype, trainable=True)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=[members, self.units], initializer=self.bias_initializer,
                regularizer=self.bias_regularizer, constraint=self.bias_constraint,
                dtype=self.dtype, trainable=True)
        self.built = True

    def _factors(self, rows, dtype):
        """(α, γ) broadcastable to ``[E, rows, 1, in]`` and ``[E, rows, 1, units]``."""
        raise NotImplementedError

    def _perturb(self, t, factor):
        """How a factor acts on the inputs and outputs: ``t ∘ factor``."""
        return t * factor

    def _combine(self, x, alpha, gamma, kernel):
        """``((x ∘ α) @ W) ∘ γ`` on ``x`` of shape ``[E, rows, positions, in]``."""
        shape = tf.shape(x)
        out = tf.matmul(tf.reshape(self._perturb(x, alpha), [-1, shape[-1]]), kernel)
        return self._perturb(tf.reshape(out, tf.concat([shape[:-1], [self.units]], 0)), gamma)

    def call(self, inputs, training=None):
        del training  # The same computation in training and inference.
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        rows = member_rows(x, self.ensemble_size)
        batch_shape = tf.shape(x)[:-1]
        x4 = tf.reshape(x, [self.ensemble_size, rows, -1, x.shape[-1]])
        alpha, gamma = self._factors(rows, x.dtype)
        out = self._combine(x4, alpha, gamma, tf.cast(self.kernel, x.dtype))
        if self.use_bias:
            out += tf.cast(self.bias, x.dtype)[:, None, None, :]
        out = tf.reshape(out, tf.concat([batch_shape, [self.units]], 0))
        out.set_shape(x.shape[:-1].concatenate([self.units]))
        return self.activation(out) if self.activation is not None else out

    def get_config(self):
        config = super().get_config()
        config.update(
            ensemble_size=self.ensemble_size,
            alpha_initializer=initializers.serialize(self.alpha_initializer),
            gamma_initializer=initializers.serialize(self.gamma_initializer),
        )
        return config


@_register
class DenseRank1(BayesianLayer, _EnsembleDense):
    """Rank-1 Bayesian dense layer (Dusenberry et al., 2020).

    A point-estimate kernel ``W`` shared by ``ensemble_size`` members, each with a
    mean-field posterior over its input factor α_e and output factor γ_e (default: normal,
    means at random signs ±1, stddev ≈ 0.032; `initializers.TrainableRandomSignNormal`)
    and a point-estimate bias. Member ``e`` computes
    ``activation(((x ∘ α_e) @ W) ∘ γ_e + b_e)`` on block ``e`` of the batch (see the
    module docstring for the batch convention). As in edward2, each call draws α and γ
    independently *per example* (one draw per row of the batch, shared by its middle
    axes), clipped to [-10, 10]; only these vectors are sampled, never the kernel. Inside
    `posterior_mean` α and γ are their posterior means; `fixed_noise` and ``seed`` work
    as for every Bayesian layer.

    The KL of α and γ to the prior (default `regularizers.Rank1NormalKLDivergence`,
    N(1, 0.1²)) is in ``layer.losses``; the kernel and bias take plain Keras
    regularizers (None by default), as the shared weights in uncertainty-baselines.

    Args: as `keras.layers.Dense` (same order), plus keyword-only
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: the factors' posteriors (distribution
        initializers with closed-form normal moments).
      alpha_regularizer, gamma_regularizer: their KL regularizers.
      use_additive_perturbation: computes ``((x + α_e) @ W) + γ_e + b_e`` instead.
      seed: int or None, for reproducible noise.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, *, ensemble_size=4,
                 alpha_initializer="trainable_random_sign_normal",
                 gamma_initializer="trainable_random_sign_normal",
                 alpha_regularizer="rank1_normal_kl_divergence",
                 gamma_regularizer="rank1_normal_kl_divergence",
                 use_additive_perturbation=False, seed=None, **kwargs):
        super().__init__(units, activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer, activity_regularizer,
                         kernel_constraint, bias_constraint, ensemble_size=ensemble_size,
                         alpha_initializer=alpha_initializer,
                         gamma_initializer=gamma_initializer,
                         alpha_regularizer=alpha_regularizer,
                         gamma_regularizer=gamma_regularizer, **kwargs)
        self.use_additive_perturbation = bool(use_additive_perturbation)
        self._init_seed(seed)

    def _factors(self, rows, dtype):
        alpha_seed, gamma_seed = split_seed(self._next_seed(), 2)
        return (sample_factor(self, "alpha", rows, alpha_seed, dtype)[:, :, None, :],
                sample_factor(self, "gamma", rows, gamma_seed, dtype)[:, :, None, :])

    def _perturb(self, t, factor):
        return t + factor if self.use_additive_perturbation else t * factor

    def get_config(self):
        config = super().get_config()
        config.update(
            alpha_regularizer=regularizers.serialize(self.alpha_regularizer),
            gamma_regularizer=regularizers.serialize(self.gamma_regularizer),
            use_additive_perturbation=self.use_additive_perturbation,
        )
        return config


@_register
class DenseBatchEnsemble(_EnsembleDense):
    """BatchEnsemble dense layer (Wen et al., 2020): deterministic rank-1 fast weights.

    Like `DenseRank1` with point-estimate factors: α ``[E, in]`` and γ ``[E, units]`` are
    plain trainable weights (default `initializers.RandomSign`, ±1), with per-member
    biases and no KL; no noise, so no ``seed``. Member ``e`` computes
    ``activation(((x ∘ α_e) @ W) ∘ γ_e + b_e)`` on block ``e`` of the batch (see the
    module docstring).

    Args: as `keras.layers.Dense` (same order), plus keyword-only
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: Keras initializers of the fast weights.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, *, ensemble_size=4,
                 alpha_initializer="random_sign", gamma_initializer="random_sign", **kwargs):
        super().__init__(units, activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer, activity_regularizer,
                         kernel_constraint, bias_constraint, ensemble_size=ensemble_size,
                         alpha_initializer=point_initializer("alpha_initializer",
                                                             alpha_initializer),
                         gamma_initializer=point_initializer("gamma_initializer",
                                                             gamma_initializer),
                         **kwargs)

    def _factors(self, rows, dtype):
        del rows  # The same fast weights for every row of a member.
        return (tf.cast(self.alpha, dtype)[:, None, None, :],
                tf.cast(self.gamma, dtype)[:, None, None, :])
