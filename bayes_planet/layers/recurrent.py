"""Bayesian recurrent cells: LSTM and GRU with distributions over their weights.

Each class is the Keras cell (``keras.layers.LSTMCell`` / ``GRUCell``: same
arguments, state structure and call signature, usable in ``keras.layers.RNN``)
whose ``kernel`` and ``recurrent_kernel`` are distributions
(``'trainable_normal'``) with their KL to the prior (``'normal_kl_divergence'``)
in ``layer.losses`` (Fortunato et al., 2017; Bayesian Layers, Fig. 1). The bias is
a point estimate unless a distribution initializer is passed for it.

Weight sampling (``sampling=``):

* ``'sequence'`` (default): one weight sample per sequence, shared by all steps.
  A sequence starts when ``get_initial_state`` is called, when ``sample_weights``
  is called, or when ``keras.layers.RNN`` runs the cell (every RNN call, also with
  an explicit ``initial_state``). The sample is drawn *outside* the time loop and
  captured by it, so each step costs what the Keras cell's step costs. With
  Flipout the per-example sign flips are fixed per sequence too, so every example
  sees one pseudo-independent weight sample for its whole sequence.
* ``'step'``: a fresh sample (and fresh Flipout signs) at every call of the cell.

Several weight samples in one batch (e.g. K model samples in a planner):
``cell.sample_weights(num_samples=K)`` before the sequence; batch row ``b`` then
uses sample ``b // (batch // K)`` (contiguous groups; batch divisible by K). To
hold a sample fixed across separate ``tf.function`` calls, pass the same
stateless ``seed`` to ``sample_weights`` in each call, or run the steps inside
`bayes_planet.layers.fixed_noise(module, seed)`, which every sampling mode honours.

A cell stepped without a sequence start (e.g. ``cell(x_t, h)`` inside ``tf.scan``)
draws its sample lazily at the first step and keeps it; a draw from inside a
``while_loop``/``scan`` body or ``cond`` branch is placed in the enclosing graph,
so the loop draws once. Samples are cached per graph: visible to that graph's
loop bodies and branches, never to another (even nested) ``tf.function``.

`BayesianLSTMCell` and `BayesianGRUCell` are the shared bases (the fused step and this
sampling machinery); `ensemble.recurrent`'s rank-1 cells subclass them.
"""

import contextlib
import weakref

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, estimators, initializers, noise, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, check_positive_int, sample_weight
from bayes_planet.layers.initializers import DistributionInitializer
from bayes_planet.layers.noise import split_seed

__all__ = [
    "GRUCellFlipout",
    "GRUCellReparameterization",
    "LSTMCellFlipout",
    "LSTMCellReparameterization",
]

SAMPLINGS = ("sequence", "step")


class _EagerKey:
    """Weak-referenceable stand-in key for the eager context."""


_EAGER = _EagerKey()


def _outside_control_flow():
    """The innermost graph enclosing the current one that is not a loop body or
    ``cond`` branch (the current graph itself if it is not one)."""
    graph = tf.compat.v1.get_default_graph()
    while getattr(graph, "is_control_flow_graph", False):
        graph = graph.outer_graph
    return graph


class _SampleCache:
    """Per-graph storage of the current weight sample (like Keras' dropout-mask cache).

    A lookup from a control-flow graph (a ``while_loop``/``scan`` body, a ``cond``
    branch) falls back to the enclosing graph, which it captures. It never crosses a
    ``tf.function`` boundary (a nested function drawing its own sample stays
    self-contained, as SavedModel export requires) and never reaches eager.
    """

    def __init__(self):
        self._values = weakref.WeakKeyDictionary()

    @staticmethod
    def _key():
        return _EAGER if tf.executing_eagerly() else tf.compat.v1.get_default_graph()

    def get(self):
        key = self._key()
        value = self._values.get(key)
        while value is None and getattr(key, "is_control_flow_graph", False):
            key = key.outer_graph
            value = self._values.get(key)
        return value

    def set(self, value):
        self._values[self._key()] = value


class _Sample:
    """One draw of a cell's weights, in the compute dtype.

    ``weights[name]`` is a dict: ``value`` (a sampled weight, ``[in, out]`` or
    ``[K, in, out]``) for reparameterization, or ``loc``, ``delta`` (the shared
    Flipout perturbation ``σ∘E``, None for a point mass) and the Flipout sign seeds
    and, when the batch size was known at draw time, the signs themselves.
    """

    def __init__(self, weights, bias, num_samples, fixed_seed=None, posterior_mean=False):
        self.weights, self.bias, self.num_samples = weights, bias, num_samples
        self.fixed_seed = fixed_seed  # the `fixed_noise` seed it was drawn with, if any
        self.posterior_mean = posterior_mean  # drawn inside a `posterior_mean` block
        self.fresh = False


def _grouped(fn, x, w):
    """``fn(x, w)`` with row groups of ``x`` paired with the leading axis of a 3-D ``w``."""
    if w.shape.rank == 2:
        return fn(x, w)
    k = w.shape[0]
    out = fn(tf.reshape(x, [k, -1, x.shape[-1]]), w)
    return tf.reshape(out, [-1, out.shape[-1]])


def _add_bias(z, bias):
    """``z + bias``; a bias ``[K, out]`` is added to the ``K`` contiguous row groups of ``z``
    (the samples of ``sample_weights(num_samples=K)``, or a rank-1 cell's members)."""
    if bias.shape.rank == 1:
        return tf.nn.bias_add(z, bias)
    out = z.shape[-1]
    return tf.reshape(tf.reshape(z, [bias.shape[0], -1, out]) + bias[:, None, :], [-1, out])


def _draw_weight(estimator, weight, seed, dtype, num_samples):
    """One draw of a cell weight for ``estimator``, held by the steps of a sequence.

    Reparameterization: ``{'value'}``, the posterior's sample. Flipout: ``{'loc',
    'delta', 'in_seed', 'out_seed'}`` from `estimators.flipout_perturbation` (the same
    draws as `estimators.flipout` for the seed); the signs are drawn from their seeds.
    """
    if estimator is estimators.reparameterization:
        return {"value": sample_weight(weight, seed, dtype, num_samples)}
    if estimator is estimators.flipout:
        loc, delta, in_seed, out_seed = estimators.flipout_perturbation(
            weight, seed, dtype, num_samples)
        return {"loc": loc, "delta": delta, "in_seed": in_seed, "out_seed": out_seed}
    name = getattr(estimator, "__name__", estimator)
    raise ValueError("Expected a recurrent cell estimator that draws a weight sample a "
                     "sequence can hold (reparameterization or flipout). "
                     f"Received: _estimator={name!r}")


class _BayesianCell(_compat.RecurrentCell, BayesianLayer):
    """Shared sampling machinery of the Bayesian cells (mixed in before the Keras cell).

    Subclasses set ``_estimator`` (as the other families do: an estimator of
    `estimators`, here one that draws a weight sample a sequence can hold:
    ``reparameterization`` or ``flipout``) and ``_weight_names``.
    """

    _estimator = staticmethod(estimators.reparameterization)
    _weight_names = ("kernel", "recurrent_kernel")

    def __init__(self, units, kernel_initializer="trainable_normal",
                 recurrent_initializer="trainable_normal", bias_initializer="zeros",
                 kernel_regularizer="normal_kl_divergence",
                 recurrent_regularizer="normal_kl_divergence", bias_regularizer=None,
                 *, seed=None, sampling="sequence", **kwargs):
        if sampling not in SAMPLINGS:
            raise ValueError(f"Expected sampling in {SAMPLINGS}. Received: sampling={sampling!r}")
        super().__init__(
            units=check_positive_int("units", units),
            kernel_initializer=initializers.get(kernel_initializer),
            recurrent_initializer=initializers.get(recurrent_initializer),
            bias_initializer=initializers.get(bias_initializer),
            kernel_regularizer=regularizers.get(kernel_regularizer),
            recurrent_regularizer=regularizers.get(recurrent_regularizer),
            bias_regularizer=regularizers.get(bias_regularizer),
            **kwargs,
        )
        self.sampling = sampling
        self._init_seed(seed)
        self._create_sample_cache()

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _create_sample_cache(self):
        self._sample_cache = _SampleCache()

    def __getstate__(self):  # Cached tensors cannot be pickled or deep-copied.
        state = super().__getstate__()
        state.pop("_sample_cache", None)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._create_sample_cache()

    # Public API -----------------------------------------------------------------

    def sample_weights(self, seed=None, num_samples=1, batch_size=None):
        """Draws the weight sample used by the following steps (``sampling='sequence'``).

        Args:
          seed: optional stateless ``[2]`` int seed; the same seed gives the same
            sample (use it to hold a sample fixed across ``tf.function`` calls).
            Default: the layer's next seed.
          num_samples: K weight samples; batch row ``b`` uses sample ``b // (B // K)``.
          batch_size: optional batch size; lets Flipout draw its per-example signs now
            (once per sequence) instead of at every step.
        """
        if self.sampling != "sequence":
            raise ValueError("sample_weights needs sampling='sequence'. "
                             f"Received: sampling={self.sampling!r}")
        if not self.built:
            raise ValueError(f"{self.name} is not built: call it once or pass `inputs` to "
                             "get_initial_state before sample_weights.")
        num_samples = check_positive_int("num_samples", num_samples)
        if seed is None:
            seed = self._next_seed()
        else:
            seed = tf.convert_to_tensor(seed)
            if seed.shape != (2,) or not seed.dtype.is_integer:
                raise ValueError(f"Expected a stateless [2] integer seed. Received: seed={seed!r}")
            seed = tf.cast(seed, tf.int32)
        sample = self._draw(seed, num_samples, batch_size)
        sample.fresh = True
        self._sample_cache.set(sample)

    def get_initial_state(self, inputs=None, batch_size=None, dtype=None):
        """Zero states (as the Keras cell); starts a sequence (draws its weight sample).

        A sample from ``sample_weights`` not yet used by any step is kept. If the cell
        is not built and ``inputs`` is given (``[batch, ..., input_dim]``), it is built.
        """
        state = self.zero_state(inputs, batch_size, dtype)
        if self.sampling == "sequence":
            if not self.built and inputs is not None:
                _compat.build(self, (None, inputs.shape[-1]))
            if self.built:
                self._start_sequence(tf.shape(inputs)[0] if inputs is not None else batch_size)
        return state

    def _begin_sequence(self):
        # `keras.layers.RNN` calls this before every sequence (also when given an
        # `initial_state`, when `get_initial_state` is not called): start a sequence.
        if self.sampling == "sequence" and self.built:
            self._start_sequence(None)
            self._claim(self._sample_cache.get())

    # Internals -------------------------------------------------------------------

    def _in_posterior_mean(self):
        return any(getattr(getattr(self, name), "_use_posterior_mean", False)
                   for name in self._weight_names)

    def _start_sequence(self, batch_size):
        sample = self._sample_cache.get()
        if sample is None or not sample.fresh or sample.posterior_mean != self._in_posterior_mean():
            self.sample_weights(batch_size=batch_size)
        elif batch_size is not None:
            self._draw_per_example(sample, batch_size)

    def _draw(self, seed, num_samples, batch_size):
        dtype = self.compute_dtype
        *weight_seeds, bias_seed = split_seed(seed, len(self._weight_names) + 1)
        weights = {name: self._draw_one_weight(name, wseed, dtype, num_samples)
                   for name, wseed in zip(self._weight_names, weight_seeds, strict=True)}
        bias = None
        if self.use_bias:
            bias = sample_weight(self.bias, bias_seed, dtype, num_samples)
        sample = _Sample(weights, bias, num_samples, getattr(self, "_fixed_seed", None),
                         self._in_posterior_mean())
        if batch_size is not None:
            self._draw_per_example(sample, batch_size)
        return sample

    def _draw_one_weight(self, name, seed, dtype, num_samples):
        """The draw of weight ``name`` that the steps of a sequence hold (`_draw_weight`)."""
        return _draw_weight(self._estimator, getattr(self, name), seed, dtype, num_samples)

    def _draw_per_example(self, sample, batch_size):
        """Draws a sample's per-example noise (Flipout's signs) once the batch size is known."""
        for w in sample.weights.values():
            if w.get("delta") is not None and "in_sign" not in w:
                w["in_sign"] = noise.rademacher(
                    tf.stack([batch_size, w["loc"].shape[0]]), w["in_seed"], self.compute_dtype)
                w["out_sign"] = noise.rademacher(
                    tf.stack([batch_size, w["loc"].shape[1]]), w["out_seed"], self.compute_dtype)

    def _current_sample(self, inputs):
        if self.sampling == "step":
            return self._draw(self._next_seed(), 1, tf.shape(inputs)[0])
        sample = self._sample_cache.get()
        fixed = getattr(self, "_fixed_seed", None)
        if sample is not None and sample.posterior_mean != self._in_posterior_mean():
            sample = None  # Drawn on the other side of a `posterior_mean` block: redraw.
        if sample is not None and sample.fresh:
            self._claim(sample)
        elif sample is None or (fixed is not None and sample.fixed_seed is not fixed):
            # No sequence started here (or a new `fixed_noise` block): draw lazily, in
            # the graph enclosing any loop body, so a tf.scan/while_loop draws once.
            graph = None if tf.executing_eagerly() else _outside_control_flow()
            with graph.as_default() if graph is not None else contextlib.nullcontext():
                sample = self._draw(self._next_seed(), 1, None)
                self._sample_cache.set(sample)
        return sample

    def _claim(self, sample):
        """Marks a sample as used by the current sequence (and `fixed_noise` block)."""
        sample.fresh = False
        sample.fixed_seed = getattr(self, "_fixed_seed", None)

    def _linear(self, x, sample, name, cols=None):
        """``x @ W[:, cols]`` for the sampled weight ``name`` (Flipout: mean + perturbation)."""
        w = sample.weights[name]
        cut = (lambda t: t) if cols is None else (lambda t: t[..., cols])
        if "value" in w:
            return _grouped(tf.matmul, x, cut(w["value"]))
        out = tf.matmul(x, cut(w["loc"]))
        if w["delta"] is None:
            return out
        if "in_sign" in w:
            in_sign, out_sign = w["in_sign"], w["out_sign"]
        else:  # Batch size unknown at draw time: same signs, regenerated from their seeds.
            batch = tf.shape(x)[0]
            in_sign = noise.rademacher(tf.stack([batch, w["loc"].shape[0]]),
                                            w["in_seed"], x.dtype)
            out_sign = noise.rademacher(tf.stack([batch, w["loc"].shape[1]]),
                                             w["out_seed"], x.dtype)
        return out + _grouped(tf.matmul, x * in_sign, cut(w["delta"])) * cut(out_sign)

    def get_config(self):
        config = super().get_config()
        config["sampling"] = self.sampling
        return config


class BayesianLSTMCell(_BayesianCell, keras.layers.LSTMCell):
    """LSTM cell with distributions over its kernels; see the module docstring.

    Takes the arguments of `keras.layers.LSTMCell` (``units``, ``activation``,
    ``recurrent_activation``, ``use_bias``, ``unit_forget_bias``, ``dropout``,
    ``recurrent_dropout``, constraints, ...), with Bayesian defaults
    ``kernel_initializer='trainable_normal'``,
    ``recurrent_initializer='trainable_normal'``,
    ``kernel_regularizer='normal_kl_divergence'``,
    ``recurrent_regularizer='normal_kl_divergence'``, plus ``seed`` (int or None)
    and ``sampling`` (``'sequence'`` or ``'step'``). The step is always the
    fused (``implementation=2``) computation ``z = x W + h U + b``.

    Call: ``cell(inputs [B, D], [h [B, units], c [B, units]])`` returns
      ``(h, [h, c])``.
    """

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="trainable_normal",
                 recurrent_initializer="trainable_normal", bias_initializer="zeros",
                 unit_forget_bias=True, kernel_regularizer="normal_kl_divergence",
                 recurrent_regularizer="normal_kl_divergence", bias_regularizer=None,
                 kernel_constraint=None, recurrent_constraint=None, bias_constraint=None,
                 dropout=0.0, recurrent_dropout=0.0, seed=None, *, sampling="sequence",
                 **kwargs):
        super().__init__(
            units=units, activation=activation, recurrent_activation=recurrent_activation,
            use_bias=use_bias, kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
            unit_forget_bias=unit_forget_bias, kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer, bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint, recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint, dropout=dropout,
            recurrent_dropout=recurrent_dropout, seed=seed, sampling=sampling, **kwargs)

    def build(self, input_shape):
        forget_bias = self.use_bias and self.unit_forget_bias and isinstance(
            self.bias_initializer, DistributionInitializer)
        if not forget_bias:
            return super().build(input_shape)
        # Keras wraps the bias initializer to add the forget-gate +1, which a
        # distribution cannot go through: build it plainly, then shift its location.
        self.unit_forget_bias = False
        try:
            super().build(input_shape)
        finally:
            self.unit_forget_bias = True
        loc = getattr(self.bias, "mean", getattr(self.bias, "point", None))
        if hasattr(loc, "assign_add"):  # a trainable location (a variable)
            u = self.units
            loc.assign_add(tf.concat([tf.zeros([u]), tf.ones([u]), tf.zeros([2 * u])], 0))

    def call(self, inputs, states, training=None):
        h_tm1, c_tm1 = states[0], states[1]
        dp_mask, rec_mask = self.step_dropout_masks(inputs, h_tm1, training)
        x = inputs * dp_mask if dp_mask is not None else inputs
        h_in = h_tm1 * rec_mask if rec_mask is not None else h_tm1
        sample = self._current_sample(x)
        z = self._linear(x, sample, "kernel")
        z += self._linear(h_in, sample, "recurrent_kernel")
        if self.use_bias:
            z = _add_bias(z, sample.bias)
        z0, z1, z2, z3 = tf.split(z, num_or_size_splits=4, axis=1)
        c, o = self._compute_carry_and_output_fused((z0, z1, z2, z3), c_tm1)
        h = o * self.activation(c)
        return h, [h, c]


class BayesianGRUCell(_BayesianCell, keras.layers.GRUCell):
    """GRU cell with distributions over its kernels; see the module docstring.

    Takes the arguments of `keras.layers.GRUCell` (``units``, ``activation``,
    ``recurrent_activation``, ``use_bias``, ``reset_after``, ``dropout``,
    ``recurrent_dropout``, constraints, ...), with Bayesian defaults
    ``kernel_initializer='trainable_normal'``,
    ``recurrent_initializer='trainable_normal'``,
    ``kernel_regularizer='normal_kl_divergence'``,
    ``recurrent_regularizer='normal_kl_divergence'``, plus ``seed`` and
    ``sampling`` (``'sequence'`` or ``'step'``). The step is the fused
    (``implementation=2``) computation.

    Call: ``cell(inputs [B, D], h [B, units] or [h])`` returns ``(h, h or [h])``.
    """

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="trainable_normal",
                 recurrent_initializer="trainable_normal", bias_initializer="zeros",
                 kernel_regularizer="normal_kl_divergence",
                 recurrent_regularizer="normal_kl_divergence", bias_regularizer=None,
                 kernel_constraint=None, recurrent_constraint=None, bias_constraint=None,
                 dropout=0.0, recurrent_dropout=0.0, reset_after=True, seed=None, *,
                 sampling="sequence", **kwargs):
        super().__init__(
            units=units, activation=activation, recurrent_activation=recurrent_activation,
            use_bias=use_bias, kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer, bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint, recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint, dropout=dropout,
            recurrent_dropout=recurrent_dropout, reset_after=reset_after, seed=seed,
            sampling=sampling, **kwargs)

    def call(self, inputs, states, training=None):
        h_tm1 = states[0] if tf.nest.is_nested(states) else states
        dp_mask, rec_mask = self.step_dropout_masks(inputs, h_tm1, training)
        x = inputs * dp_mask if dp_mask is not None else inputs
        h_in = h_tm1 * rec_mask if rec_mask is not None else h_tm1
        sample = self._current_sample(x)
        u = self.units
        input_bias = recurrent_bias = None
        if self.use_bias:
            input_bias = sample.bias
            if self.reset_after:
                input_bias, recurrent_bias = sample.bias[..., 0, :], sample.bias[..., 1, :]
        matrix_x = self._linear(x, sample, "kernel")
        if input_bias is not None:
            matrix_x = _add_bias(matrix_x, input_bias)
        x_z, x_r, x_h = tf.split(matrix_x, 3, axis=-1)
        if self.reset_after:
            matrix_inner = self._linear(h_in, sample, "recurrent_kernel")
            if recurrent_bias is not None:
                matrix_inner = _add_bias(matrix_inner, recurrent_bias)
        else:
            matrix_inner = self._linear(h_in, sample, "recurrent_kernel", slice(None, 2 * u))
        recurrent_z, recurrent_r, recurrent_h = tf.split(matrix_inner, [u, u, -1], axis=-1)
        z = self.recurrent_activation(x_z + recurrent_z)
        r = self.recurrent_activation(x_r + recurrent_r)
        if self.reset_after:
            recurrent_h = r * recurrent_h
        else:
            recurrent_h = self._linear(r * h_in, sample, "recurrent_kernel", slice(2 * u, None))
        hh = self.activation(x_h + recurrent_h)
        h = z * h_tm1 + (1 - z) * hh
        return h, ([h] if tf.nest.is_nested(states) else h)


@_register
class LSTMCellReparameterization(BayesianLSTMCell):
    """LSTM cell with reparameterized weight samples (see `BayesianLSTMCell` for args).

    Estimator: reparameterization (Kingma & Welling, 2014; Fortunato et al., 2017):
    the step uses a sampled ``W = loc + scale * eps`` shared by the batch (or by each
    row group with ``sample_weights(num_samples=K)``), so a step costs one Keras step.
    Arguments: those of `keras.layers.LSTMCell` in its order (``seed`` in Keras 3's
    place), plus the keyword-only ``sampling``.
    """

    _estimator = staticmethod(estimators.reparameterization)


@_register
class LSTMCellFlipout(BayesianLSTMCell):
    """LSTM cell with the Flipout estimator (see `BayesianLSTMCell` for args).

    Estimator: Flipout (Wen et al., 2018): ``x M + ((x ∘ s) (σ ∘ E)) ∘ r`` with one
    perturbation ``E`` per sequence (``sampling='sequence'``) and per-example signs
    ``s, r`` fixed over the sequence, so each example sees its own pseudo-independent
    weight sample; about twice the matmul cost of the Keras step. Arguments: those
    of `keras.layers.LSTMCell` in its order (``seed`` in Keras 3's place), plus the
    keyword-only ``sampling``.
    """

    _estimator = staticmethod(estimators.flipout)


@_register
class GRUCellReparameterization(BayesianGRUCell):
    """GRU cell with reparameterized weight samples (see `BayesianGRUCell` for args).

    Estimator: reparameterization (Kingma & Welling, 2014; Fortunato et al., 2017):
    the step uses a sampled ``W = loc + scale * eps`` shared by the batch (or by each
    row group with ``sample_weights(num_samples=K)``), so a step costs one Keras step.
    Arguments: those of `keras.layers.GRUCell` in its order (``seed`` in Keras 3's
    place), plus the keyword-only ``sampling``.
    """

    _estimator = staticmethod(estimators.reparameterization)


@_register
class GRUCellFlipout(BayesianGRUCell):
    """GRU cell with the Flipout estimator (see `BayesianGRUCell` for args).

    Estimator: Flipout (Wen et al., 2018): ``x M + ((x ∘ s) (σ ∘ E)) ∘ r`` with one
    perturbation ``E`` per sequence (``sampling='sequence'``) and per-example signs
    ``s, r`` fixed over the sequence, so each example sees its own pseudo-independent
    weight sample; about twice the matmul cost of the Keras step. Arguments: those
    of `keras.layers.GRUCell` in its order (``seed`` in Keras 3's place), plus the
    keyword-only ``sampling``.
    """

    _estimator = staticmethod(estimators.flipout)


# `keras.layers.RNN.get_config` nests the cell with its bare class name, which the
# legacy (SavedModel) loader looks up without the package prefix: register it too.
for _cls in (LSTMCellReparameterization, LSTMCellFlipout, GRUCellReparameterization,
             GRUCellFlipout):
    keras.utils.get_custom_objects().setdefault(_cls.__name__, _cls)
