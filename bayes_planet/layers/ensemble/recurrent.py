"""Rank-1 Bayesian recurrent cells: `LSTMCellRank1`, `GRUCellRank1` (Dusenberry et al., 2020).

Each cell is the Keras cell (``keras.layers.LSTMCell`` / ``GRUCell``: same arguments in
the same order, state structure and call signature, usable in ``keras.layers.RNN``)
with ``ensemble_size`` members that share point-estimate kernels ``W`` ``[in, G·units]``
and ``U`` ``[units, G·units]`` (``G`` = 4 gates for the LSTM, 3 for the GRU) and differ by
rank-1 factors and a bias: member ``e`` is the Keras cell with kernels
``diag(α_e) W diag(γ_e)`` and ``diag(ρ_e) U diag(δ_e)`` (``ρ``, ``δ`` are the attributes
``recurrent_alpha``, ``recurrent_gamma``) and bias ``b_e``, so each step computes
``((x ∘ α_e) W) ∘ γ_e + ((h ∘ ρ_e) U) ∘ δ_e + b_e`` as in edward2's ``LSTMCellRank1``.
α ``[E, in]``, γ ``[E, G·units]``, ρ ``[E, units]`` and δ ``[E, G·units]`` have a
mean-field normal posterior (default `initializers.TrainableRandomSignNormal`, means ±1)
with their KL to the prior ½ N(1, 0.1²) + ½ N(−1, 0.1²)
(`regularizers.Rank1SignMixtureKLDivergence`) in ``layer.losses``; the kernels and the
per-member bias ``[E, G·units]`` (GRU with ``reset_after``: ``[E, 2, 3·units]``) are point
estimates with plain Keras regularizers.

Batch convention (as `ensemble.DenseRank1` and edward2): the batch of ``E·b`` rows is
``E`` contiguous blocks of ``b`` rows and block ``e`` goes through member ``e``; a batch
not divisible by ``E`` raises a one-line error (a ``tf.debugging`` assertion when the
batch size is only known at run time). Tile the batch ``E`` times to show every member
the same sequences.

Sampling: each example draws its own α, γ, ρ, δ (clipped to [-10, 10], as
`ensemble.DenseRank1`) *once per sequence*, held by all its steps, through the
sequence machinery of `recurrent` (``sampling='sequence'``, the default: a sequence
starts at ``get_initial_state``, ``sample_weights`` or each ``keras.layers.RNN`` call; the
draw is made outside the time loop when the batch size is known then, else regenerated
at each step from the sequence's seed, the same values); ``sampling='step'`` draws anew
at every step. `fixed_noise` and `posterior_mean` (every factor at its mean: the
deterministic ensemble) work as for every Bayesian layer. ``sample_weights`` takes no
``num_samples`` other than 1: the members already group the batch.

Registry: the ``'lstm_cell_ensemble'`` and ``'gru_cell_ensemble'`` families (estimator
``'rank1'``) of `bayes_planet.layer_registry`, not estimators of ``'lstm_cell'`` /
``'gru_cell'``, whose readers (the RSSM) feed plain batches.
"""

import inspect

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import check_positive_int
from bayes_planet.layers.ensemble.dense import (
    ENSEMBLE_SIZE,
    FACTOR_NAMES,
    RANK1_POSTERIOR,
    RANK1_PRIOR,
    check_factor_prior,
    factor_initializer,
    factor_regularizer,
    init_arguments,
    member_rows,
    point_initializer,
    sample_factor,
)
from bayes_planet.layers.recurrent import BayesianGRUCell, BayesianLSTMCell

__all__ = ["GRUCellRank1", "LSTMCellRank1"]


#: The rank-1 factors: (name, the kernel it scales, side) for the input (α) and output
#: (γ) side of the kernel and of the recurrent kernel; the names are `FACTOR_NAMES`.
_FACTORS = tuple(zip(FACTOR_NAMES, ("kernel", "kernel", "recurrent_kernel", "recurrent_kernel"),
                     ("in", "out", "in", "out"), strict=True))


class _Rank1Cell:
    """The rank-1 parts of a cell (mixed in before `BayesianLSTMCell`/`BayesianGRUCell`):
    build, factor draws, the step's linear maps and the config."""

    _weight_names = tuple(name for name, _, _ in _FACTORS)
    _gates = None  # G: 4 (LSTM) or 3 (GRU)

    def __init__(self, *, ensemble_size=ENSEMBLE_SIZE, alpha_initializer=RANK1_POSTERIOR,
                 gamma_initializer=RANK1_POSTERIOR, recurrent_alpha_initializer=RANK1_POSTERIOR,
                 recurrent_gamma_initializer=RANK1_POSTERIOR, alpha_regularizer=RANK1_PRIOR,
                 gamma_regularizer=RANK1_PRIOR, recurrent_alpha_regularizer=RANK1_PRIOR,
                 recurrent_gamma_regularizer=RANK1_PRIOR, use_additive_perturbation=False,
                 seed=None, sampling="sequence", **kwargs):
        """The keyword-only arguments both cells add to their Keras cell's (``kwargs``, by
        name), with their defaults: one place for both (`__init_subclass__`)."""
        ensemble_size = check_positive_int("ensemble_size", ensemble_size)
        for name in ("kernel_initializer", "recurrent_initializer", "bias_initializer"):
            kwargs[name] = point_initializer(name, kwargs[name])
        super().__init__(seed=seed, sampling=sampling, **kwargs)
        self.ensemble_size = ensemble_size
        given = ((alpha_initializer, alpha_regularizer), (gamma_initializer, gamma_regularizer),
                 (recurrent_alpha_initializer, recurrent_alpha_regularizer),
                 (recurrent_gamma_initializer, recurrent_gamma_regularizer))
        for name, (initializer, regularizer) in zip(self._weight_names, given, strict=True):
            posterior = factor_initializer(f"{name}_initializer", initializer)
            prior = factor_regularizer(f"{name}_regularizer", regularizer)
            check_factor_prior(type(self).__name__, name, posterior, prior)
            setattr(self, f"{name}_initializer", posterior)
            setattr(self, f"{name}_regularizer", prior)
        self.use_additive_perturbation = bool(use_additive_perturbation)

    def __init_subclass__(cls, **kwargs):
        """A cell's ``__init__`` takes its Keras cell's arguments and ``**kwargs``; its
        signature (``inspect``, ``help``) lists `_Rank1Cell`'s keyword-only arguments
        between them, as they are passed on."""
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls):
            own = list(inspect.signature(cls.__init__).parameters.values())
            names = {p.name for p in own}  # ``seed``: positional, where Keras 3 has it
            added = [p for p in inspect.signature(_Rank1Cell.__init__).parameters.values()
                     if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in names]
            cls.__init__.__signature__ = inspect.Signature(own[:-1] + added + own[-1:])

    def build(self, input_shape):
        input_dim = tf.TensorShape(input_shape)[-1]
        if input_dim is None:
            raise ValueError("Expected inputs with a defined last dimension. "
                             f"Received: input_shape={input_shape}")
        input_dim, width, members = int(input_dim), self._gates * self.units, self.ensemble_size
        self.kernel = self.add_weight(
            shape=(input_dim, width), name="kernel", initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer, constraint=self.kernel_constraint)
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, width), name="recurrent_kernel",
            initializer=self.recurrent_initializer, regularizer=self.recurrent_regularizer,
            constraint=self.recurrent_constraint)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                shape=(members, *self._bias_shape()), name="bias",
                initializer=self._member_bias, regularizer=self.bias_regularizer,
                constraint=self.bias_constraint)
        dims = {("kernel", "in"): input_dim, ("recurrent_kernel", "in"): self.units}
        for name, kernel, side in _FACTORS:
            setattr(self, name, self.add_weight(
                name=name, shape=(members, dims.get((kernel, side), width)),
                initializer=getattr(self, f"{name}_initializer"),
                regularizer=getattr(self, f"{name}_regularizer"), dtype=self.dtype,
                trainable=True))
        self._ensure_seed_counter()
        self.built = True

    def call(self, inputs, states, training=None):
        """The cell's step; a state of batch 1 (``tf.zeros([1, units])``, which the Keras cells
        broadcast) is broadcast to the inputs' batch first: every member's block of the batch
        multiplies its own rows of the state by its factors."""
        batch = tf.shape(inputs)[0]
        states = tf.nest.map_structure(
            lambda s: s if s.shape[0] is not None and s.shape[0] == inputs.shape[0]
            else tf.broadcast_to(s, tf.concat([[batch], tf.shape(s)[1:]], 0)), states)
        return super().call(inputs, states, training=training)

    def _bias_shape(self):
        return (self._gates * self.units,)

    def _member_bias(self, shape, dtype=None, **kwargs):
        """Every member's bias from ``bias_initializer``; the LSTM's forget-gate slice is 1
        with ``unit_forget_bias``, as in Keras."""
        value = self.bias_initializer(shape, dtype=dtype, **kwargs)
        if getattr(self, "unit_forget_bias", False):
            u = self.units
            value = tf.concat([value[..., :u], tf.ones_like(value[..., u:2 * u]),
                               value[..., 2 * u:]], axis=-1)
        return value

    # Sampling: the factors' seeds at the sequence start, their per-example draws once
    # the batch size is known (see `recurrent._BayesianCell`).

    def _draw_one_weight(self, name, seed, dtype, num_samples):
        del dtype  # The factors are drawn in the compute dtype by `_factor_rows`.
        if num_samples != 1:
            raise ValueError("Expected num_samples=1: a rank-1 cell's members are the "
                             "ensemble_size blocks of the batch, each example with its own "
                             f"factors. Received: num_samples={num_samples}")
        return {"seed": seed}

    def _draw_per_example(self, sample, batch_size):
        rows = member_rows(batch_size, self.ensemble_size)
        for name, w in sample.weights.items():
            w.setdefault("value", self._factor_rows(name, w["seed"], rows))

    def _factor_rows(self, name, seed, rows):
        """The factor ``name`` of every example, ``[E·rows, dim]`` (member-major)."""
        factor = sample_factor(self, name, rows, seed, self.compute_dtype)
        shape = tf.stack([self.ensemble_size, rows, factor.shape[-1]])
        return tf.reshape(tf.broadcast_to(factor, shape), [-1, factor.shape[-1]])

    def _factor(self, sample, name, x):
        static = x.shape[0]
        if static is not None:
            member_rows(static, self.ensemble_size)  # a one-line error at trace time
        w = sample.weights[name]
        if "value" in w:
            return w["value"]
        # Batch size unknown at the sequence start: the same draws, from the same seed.
        batch = static if static is not None else tf.shape(x)[0]
        return self._factor_rows(name, w["seed"], member_rows(batch, self.ensemble_size))

    def _perturb(self, t, factor):
        return t + factor if self.use_additive_perturbation else t * factor

    def _linear(self, x, sample, name, cols=None):
        """``((x ∘ α) @ W[:, cols]) ∘ γ[:, cols]`` for ``name`` (kernel or recurrent kernel)."""
        alpha, gamma = (self._factor(sample, factor, x)
                        for factor, kernel, _ in _FACTORS if kernel == name)
        kernel = tf.cast(getattr(self, name), x.dtype)
        if cols is not None:
            kernel, gamma = kernel[:, cols], gamma[:, cols]
        return self._perturb(tf.matmul(self._perturb(x, alpha), kernel), gamma)

    def get_config(self):
        config = super().get_config()
        for name in self._weight_names:
            config[f"{name}_initializer"] = initializers.serialize(
                getattr(self, f"{name}_initializer"))
            config[f"{name}_regularizer"] = regularizers.serialize(
                getattr(self, f"{name}_regularizer"))
        config.update(ensemble_size=self.ensemble_size,
                      use_additive_perturbation=self.use_additive_perturbation)
        return config


@_register
class LSTMCellRank1(_Rank1Cell, BayesianLSTMCell):
    """Rank-1 Bayesian LSTM cell (Dusenberry et al., 2020); see the module docstring.

    Member ``e`` is ``keras.layers.LSTMCell`` with kernel ``diag(α_e) W diag(γ_e)``,
    recurrent kernel ``diag(ρ_e) U diag(δ_e)`` and bias ``b_e`` (the fused
    ``implementation=2`` step), applied to block ``e`` of the batch.

    Takes the arguments of `keras.layers.LSTMCell` (same order; ``kernel_initializer``,
    ``recurrent_initializer`` and ``bias_initializer`` must be point-estimate
    initializers), plus keyword-only:

    Args:
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: the factors' posteriors (distribution initializers
        with closed-form normal moments, default ``'trainable_random_sign_normal'``, or
        ``'trainable_cauchy'`` with the ``'rank1_cauchy_kl_divergence'`` prior).
      recurrent_alpha_initializer, recurrent_gamma_initializer: the same for the recurrent
        kernel's factors.
      alpha_regularizer, gamma_regularizer: their KL regularizers (default
        ``'rank1_sign_mixture_kl_divergence'``, the prior ½ N(1, 0.1²) + ½ N(−1, 0.1²)).
      recurrent_alpha_regularizer, recurrent_gamma_regularizer: the same for the recurrent
        kernel's factors.
      use_additive_perturbation: ``((x + α_e) W) + γ_e`` (and the same for the
        recurrent kernel) instead of the multiplicative factors.
      seed: int or None, for reproducible noise (positional after ``recurrent_dropout``,
        GRU: ``reset_after``, as Keras 3's cells; keyword on Keras 2).
      sampling: ``'sequence'`` (default: one draw per example and sequence) or ``'step'``.

    Call: ``cell(inputs [E·b, D], [h [E·b, units], c [E·b, units]])`` returns
      ``(h, [h, c])``.
    """

    _gates = 4

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", unit_forget_bias=True, kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, seed=None, **kwargs):
        super().__init__(**init_arguments(locals()))


@_register
class GRUCellRank1(_Rank1Cell, BayesianGRUCell):
    """Rank-1 Bayesian GRU cell (Dusenberry et al., 2020); see the module docstring.

    Member ``e`` is ``keras.layers.GRUCell`` with kernel ``diag(α_e) W diag(γ_e)``,
    recurrent kernel ``diag(ρ_e) U diag(δ_e)`` and bias ``b_e`` (``[2, 3·units]`` with
    ``reset_after``; the fused step), applied to block ``e`` of the batch.

    Takes the arguments of `keras.layers.GRUCell` (same order; ``kernel_initializer``,
    ``recurrent_initializer`` and ``bias_initializer`` must be point-estimate
    initializers), then ``seed`` (as `LSTMCellRank1`), plus the keyword-only arguments of
    `LSTMCellRank1` (``ensemble_size``, the factors' initializers and regularizers,
    ``use_additive_perturbation``, ``sampling``).

    Call: ``cell(inputs [E·b, D], h [E·b, units] or [h])`` returns ``(h, h or [h])``.
    """

    _gates = 3

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", kernel_regularizer=None, recurrent_regularizer=None,
                 bias_regularizer=None, kernel_constraint=None, recurrent_constraint=None,
                 bias_constraint=None, dropout=0.0, recurrent_dropout=0.0, reset_after=True,
                 seed=None, **kwargs):
        super().__init__(**init_arguments(locals()))

    def _bias_shape(self):
        return (2, 3 * self.units) if self.reset_after else (3 * self.units,)


# `keras.layers.RNN.get_config` nests the cell with its bare class name, which the
# legacy (SavedModel) loader looks up without the package prefix: register it too.
for _cls in (LSTMCellRank1, GRUCellRank1):
    keras.utils.get_custom_objects().setdefault(_cls.__name__, _cls)
