"""Hyper-BatchEnsemble layers (Wenzel et al., 2020, "Hyperparameter ensembles for robustness
and uncertainty quantification"): BatchEnsemble layers whose weights also depend on
hyperparameters, so that one network trains for a whole range of them (self-tuning
networks, MacKay et al., 2019) and its members can be given different ones.

`DenseHyperBatchEnsemble` and `Conv2DHyperBatchEnsemble` are called on three inputs
``[x, hyperparameters, embedding]`` (each with the ensemble batch of ``E·b`` rows, block
``e`` for member ``e``, as `bayes_planet.layers.DenseBatchEnsemble`):

* ``x`` the data;
* ``hyperparameters`` ``(E·b, H)``, the hyperparameters λ of every row (columns
  ``l2_kernel_index`` and ``l2_bias_index``: the L2 strengths of this layer's kernel and
  bias, e.g. drawn per member from a log-uniform range);
* ``embedding`` ``(E·b, 2·units)``, ``[e1(λ), e2(λ)]``, an embedding of the
  hyperparameters (in the paper a linear map of λ without bias, e.g. a
  ``keras.layers.Dense(2 * units, use_bias=False)`` applied to λ).

Member ``e`` computes, with BatchEnsemble factors α_e, γ_e (inputs, outputs) on a kernel
``W`` and α'_e, γ'_e on a second kernel ``W'``:

    activation( ((x ∘ α_e) ⊛ W) ∘ γ_e + b_e  +  e1 ∘ (((x ∘ α'_e) ⊛ W') ∘ γ'_e) + e2 ∘ b'_e )

(``⊛`` the matmul or the convolution): the BatchEnsemble kernel ``W ∘ α_e γ_eᵀ`` plus the
hyperparameter-modulated ``e1(λ) ∘ W' ∘ α'_e γ'_eᵀ``. ``shared_fast_weights=True`` ties
(α'_e, γ'_e) to (α_e, γ_e).

The layer adds the hyperparameters' own L2 penalty to ``layer.losses``, the mean over the
batch rows ``i`` (member ``e``) of

    λ_kernel,i · |K_e + e1_i ∘ K'_e|²  +  λ_bias,i · |b_e + e2_i ∘ b'_e|²,

``K_e = W ∘ α_e γ_eᵀ`` and ``K'_e = W' ∘ α'_e γ'_eᵀ`` (or, with
``regularize_fast_weights=False``, ``W`` and ``W'`` alone); the layers take no other kernel
or bias regularizer. The penalty is computed from per-member sums (``|K|²``,
``Σ K K'``, ``|K'|²`` per output channel) without forming a kernel per row.
"""

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import constraints, initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.checks import check_positive_int, check_positive_int_pair
from bayes_planet.layers.ensemble.dense import (
    ENSEMBLE_SIZE,
    FAST_WEIGHTS,
    member_rows,
    point_initializer,
)

__all__ = ["Conv2DHyperBatchEnsemble", "DenseHyperBatchEnsemble", "HyperBatchEnsemble"]


def _check_index(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Expected a non-negative integer. Received: {name}={value!r}")
    return value


class HyperBatchEnsemble(keras.layers.Layer):
    """The shared part of the Hyper-BatchEnsemble layers (module docstring): weights,
    call and penalty. A subclass defines ``_kernel_shape(in_channels)`` and
    ``_linear(x, kernel)``; the channels are the last axis.
    """

    def __init__(self, *, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", activity_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, ensemble_size=ENSEMBLE_SIZE,
                 alpha_initializer=FAST_WEIGHTS, gamma_initializer=FAST_WEIGHTS,
                 l2_kernel_index=0, l2_bias_index=1, regularize_fast_weights=True,
                 shared_fast_weights=False, **kwargs):
        super().__init__(activity_regularizer=regularizers.get(activity_regularizer), **kwargs)
        self.activation = keras.activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = point_initializer("kernel_initializer", kernel_initializer)
        self.bias_initializer = point_initializer("bias_initializer", bias_initializer)
        self.alpha_initializer = point_initializer("alpha_initializer", alpha_initializer)
        self.gamma_initializer = point_initializer("gamma_initializer", gamma_initializer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self.ensemble_size = check_positive_int("ensemble_size", ensemble_size)
        self.l2_kernel_index = _check_index("l2_kernel_index", l2_kernel_index)
        self.l2_bias_index = _check_index("l2_bias_index", l2_bias_index)
        self.regularize_fast_weights = bool(regularize_fast_weights)
        self.shared_fast_weights = bool(shared_fast_weights)

    # Weights ------------------------------------------------------------------------------

    def _add(self, name, shape, initializer, constraint=None):
        return self.add_weight(name=name, shape=shape,
                               initializer=initializers.for_weight(initializer, name),
                               constraint=constraint, dtype=self.dtype, trainable=True)

    def build(self, input_shape):
        shapes = self._input_shapes(input_shape)
        in_channels = shapes[0][-1]
        if in_channels is None:
            raise ValueError(f"{type(self).__name__} needs a known last data dimension. "
                             f"Received: input_shape={input_shape}")
        kernel_shape = self._kernel_shape(int(in_channels))
        members, out = self.ensemble_size, kernel_shape[-1]
        self._kernel = self._add("kernel", kernel_shape, self.kernel_initializer,
                                 self.kernel_constraint)
        self._alpha = self._add("alpha", [members, in_channels], self.alpha_initializer)
        self._gamma = self._add("gamma", [members, out], self.gamma_initializer)
        self._hyper_kernel = self._add("hyper_kernel", kernel_shape, self.kernel_initializer,
                                       self.kernel_constraint)
        if self.shared_fast_weights:
            self._hyper_alpha, self._hyper_gamma = self._alpha, self._gamma
        else:
            self._hyper_alpha = self._add("hyper_alpha", [members, in_channels],
                                          self.alpha_initializer)
            self._hyper_gamma = self._add("hyper_gamma", [members, out], self.gamma_initializer)
        self._bias = self._hyper_bias = None
        if self.use_bias:
            self._bias = self._add("bias", [members, out], self.bias_initializer,
                                   self.bias_constraint)
            self._hyper_bias = self._add("hyper_bias", [members, out], self.bias_initializer,
                                         self.bias_constraint)
        self.built = True

    @property
    def kernel(self):
        """``W``, the BatchEnsemble kernel."""
        return self._kernel

    @property
    def alpha(self):
        """α ``[E, in]``, the members' input factors of ``W``."""
        return self._alpha

    @property
    def gamma(self):
        """γ ``[E, out]``, the members' output factors of ``W``."""
        return self._gamma

    @property
    def bias(self):
        """``b`` ``[E, out]``, the members' biases (None without ``use_bias``)."""
        return self._bias

    @property
    def hyper_kernel(self):
        """``W'``, the kernel the embedding ``e1`` modulates."""
        return self._hyper_kernel

    @property
    def hyper_alpha(self):
        """α' ``[E, in]`` (α itself with ``shared_fast_weights``)."""
        return self._hyper_alpha

    @property
    def hyper_gamma(self):
        """γ' ``[E, out]`` (γ itself with ``shared_fast_weights``)."""
        return self._hyper_gamma

    @property
    def hyper_bias(self):
        """``b'`` ``[E, out]``, the biases the embedding ``e2`` modulates."""
        return self._hyper_bias

    # Call ---------------------------------------------------------------------------------
    # (The call and the penalty read the stored weights, not the properties above, which a
    # subclass may present under other names, as the edward2 compat module does.)

    def _input_shapes(self, input_shape):
        shapes = list(input_shape) if isinstance(input_shape, list | tuple) else []
        if len(shapes) != 3 or not all(isinstance(s, list | tuple | tf.TensorShape)
                                       for s in shapes):
            raise ValueError(f"{type(self).__name__} takes three inputs [x, hyperparameters, "
                             f"embedding]. Received: input_shape={input_shape}")
        return [tf.TensorShape(s) for s in shapes]

    @property
    def _out_channels(self):
        return self._kernel.shape[-1]

    def _check_inputs(self, hyperparameters, embedding):
        out = self._out_channels
        widths = (2 * out,) if self.use_bias else (out, 2 * out)
        if embedding.shape[-1] is not None and embedding.shape[-1] not in widths:
            raise ValueError(f"Expected an embedding of width {' or '.join(map(str, widths))} "
                             f"(2 * the output channels). Received: embedding shape "
                             f"{embedding.shape}")
        needed = 1 + max(self.l2_kernel_index, self.l2_bias_index if self.use_bias else 0)
        if hyperparameters.shape[-1] is not None and hyperparameters.shape[-1] < needed:
            raise ValueError(f"Expected at least {needed} hyperparameter columns (the L2 "
                             f"indices). Received: hyperparameters shape "
                             f"{hyperparameters.shape}")

    def _per_member(self, t, factor, rows):
        """``t ∘ factor_e`` on block ``e`` of ``t``'s rows (``factor`` ``[E, channels]``)."""
        shape = tf.shape(t)
        blocks = tf.reshape(t, tf.concat([[self.ensemble_size, rows], shape[1:]], 0))
        broadcast = [self.ensemble_size, 1] + [1] * (t.shape.rank - 2) + [factor.shape[-1]]
        out = tf.reshape(blocks * tf.reshape(factor, broadcast), shape)
        out.set_shape(t.shape)
        return out

    @staticmethod
    def _per_row(t, rows_tensor):
        """``rows_tensor`` ``[B, C]`` broadcast over ``t``'s middle (spatial) axes."""
        return tf.reshape(rows_tensor, [-1] + [1] * (t.shape.rank - 2) + [rows_tensor.shape[-1]])

    def call(self, inputs):
        if not isinstance(inputs, list | tuple) or len(inputs) != 3:
            raise ValueError(f"{type(self).__name__} takes three inputs [x, hyperparameters, "
                             f"embedding]. Received: {type(inputs).__name__}")
        dtype = self.compute_dtype
        x, hyperparameters, embedding = (tf.cast(tf.convert_to_tensor(t), dtype) for t in inputs)
        self._check_inputs(hyperparameters, embedding)
        out_channels = self._out_channels
        rows = member_rows(x, self.ensemble_size)
        e1 = embedding[:, :out_channels]
        outputs = self._per_member(
            self._linear(self._per_member(x, tf.cast(self._alpha, dtype), rows),
                         tf.cast(self._kernel, dtype)), tf.cast(self._gamma, dtype), rows)
        hyper = self._per_member(
            self._linear(self._per_member(x, tf.cast(self._hyper_alpha, dtype), rows),
                         tf.cast(self._hyper_kernel, dtype)),
            tf.cast(self._hyper_gamma, dtype), rows)
        outputs += hyper * self._per_row(hyper, e1)
        if self.use_bias:
            e2 = embedding[:, out_channels:2 * out_channels]
            bias = (tf.repeat(tf.cast(self._bias, dtype), rows, axis=0)
                    + tf.repeat(tf.cast(self._hyper_bias, dtype), rows, axis=0) * e2)
            outputs += self._per_row(outputs, bias)
        self.add_loss(self.l2_penalty(hyperparameters, embedding))
        return self.activation(outputs) if self.activation is not None else outputs

    # Penalty ------------------------------------------------------------------------------

    def _member_kernels(self, kernel, alpha, gamma, dtype):
        """``[E, *kernel.shape]``: ``W ∘ α_e γ_eᵀ`` (or ``W`` for every member)."""
        kernel = tf.cast(kernel, dtype)[None]
        if not self.regularize_fast_weights:
            return tf.repeat(kernel, self.ensemble_size, axis=0)
        middle = [1] * (kernel.shape.rank - 3)
        a = tf.reshape(tf.cast(alpha, dtype), [self.ensemble_size, *middle, -1, 1])
        g = tf.reshape(tf.cast(gamma, dtype), [self.ensemble_size, *middle, 1, -1])
        return kernel * a * g

    @staticmethod
    def _mean_square(weight, modulated, modulation, strengths):
        """Mean over rows of ``strength_i · |weight_e + modulation_i ∘ modulated_e|²`` from
        ``[E, ..., C]`` weights, ``[E, rows, C]`` modulations and ``[E, rows]`` strengths."""
        axes = list(range(1, weight.shape.rank - 1))
        plain = tf.reduce_sum(tf.square(weight), axes + [weight.shape.rank - 1])  # [E]
        cross = tf.reduce_sum(weight * modulated, axes) if axes else weight * modulated
        square = tf.reduce_sum(tf.square(modulated), axes) if axes else tf.square(modulated)
        per_row = (plain[:, None]
                   + 2.0 * tf.reduce_sum(modulation * cross[:, None, :], -1)
                   + tf.reduce_sum(tf.square(modulation) * square[:, None, :], -1))
        return tf.reduce_mean(strengths * per_row)

    def l2_penalty(self, hyperparameters, embedding):
        """The hyperparameter-weighted L2 penalty of a batch (module docstring), the loss
        the layer adds at each call."""
        dtype = self.compute_dtype
        hyperparameters = tf.cast(tf.convert_to_tensor(hyperparameters), dtype)
        embedding = tf.cast(tf.convert_to_tensor(embedding), dtype)
        members, out = self.ensemble_size, self._out_channels
        rows = member_rows(hyperparameters, members)

        def blocks(t):
            return tf.reshape(t, [members, rows, -1])

        kernel_strength = blocks(hyperparameters[:, self.l2_kernel_index])[..., 0]
        penalty = self._mean_square(
            self._member_kernels(self._kernel, self._alpha, self._gamma, dtype),
            self._member_kernels(self._hyper_kernel, self._hyper_alpha, self._hyper_gamma, dtype),
            blocks(embedding[:, :out]), kernel_strength)
        if self.use_bias:
            bias_strength = blocks(hyperparameters[:, self.l2_bias_index])[..., 0]
            penalty += self._mean_square(tf.cast(self._bias, dtype),
                                         tf.cast(self._hyper_bias, dtype),
                                         blocks(embedding[:, out:2 * out]), bias_strength)
        return penalty

    def get_config(self):
        config = super().get_config()
        config.update(
            activation=keras.activations.serialize(self.activation), use_bias=self.use_bias,
            kernel_initializer=initializers.serialize(self.kernel_initializer),
            bias_initializer=initializers.serialize(self.bias_initializer),
            activity_regularizer=regularizers.serialize(self.activity_regularizer),
            kernel_constraint=constraints.serialize(self.kernel_constraint),
            bias_constraint=constraints.serialize(self.bias_constraint),
            ensemble_size=self.ensemble_size,
            alpha_initializer=initializers.serialize(self.alpha_initializer),
            gamma_initializer=initializers.serialize(self.gamma_initializer),
            l2_kernel_index=self.l2_kernel_index, l2_bias_index=self.l2_bias_index,
            regularize_fast_weights=self.regularize_fast_weights,
            shared_fast_weights=self.shared_fast_weights)
        return config


@_register
class DenseHyperBatchEnsemble(HyperBatchEnsemble):
    """Hyper-BatchEnsemble dense layer (Wenzel et al., 2020; module docstring).

    ``layer([x, hyperparameters, embedding])`` with ``x`` ``(E·b, ..., in)``,
    ``hyperparameters`` ``(E·b, H)`` and ``embedding`` ``(E·b, 2·units)``; output
    ``(E·b, ..., units)``; the L2 penalty of the hyperparameters in ``layer.losses``.

    ``activation``, ``use_bias``, ``kernel_initializer``, ``bias_initializer``,
    ``activity_regularizer``, ``kernel_constraint`` and ``bias_constraint`` are as in
    `keras.layers.Dense` (the initializers and constraints apply to both kernels and both
    biases).

    Args:
      units: output width.
      ensemble_size: the number of members E (default 4).
      alpha_initializer: the fast weights α's initializer (default random signs ±1, as
        `bayes_planet.layers.DenseBatchEnsemble`).
      gamma_initializer: γ's, alike.
      l2_kernel_index: the column of ``hyperparameters`` holding this layer's kernel L2
        strength (default 0).
      l2_bias_index: the column holding its bias L2 strength (default 1).
      regularize_fast_weights: penalize the members' kernels ``W ∘ α γᵀ`` (default) or the
        shared ``W`` alone.
      shared_fast_weights: tie (α', γ') to (α, γ).
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, *,
                 ensemble_size=ENSEMBLE_SIZE, alpha_initializer=FAST_WEIGHTS,
                 gamma_initializer=FAST_WEIGHTS, l2_kernel_index=0, l2_bias_index=1,
                 regularize_fast_weights=True, shared_fast_weights=False, **kwargs):
        super().__init__(
            activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
            ensemble_size=ensemble_size, alpha_initializer=alpha_initializer,
            gamma_initializer=gamma_initializer, l2_kernel_index=l2_kernel_index,
            l2_bias_index=l2_bias_index, regularize_fast_weights=regularize_fast_weights,
            shared_fast_weights=shared_fast_weights, **kwargs)
        self.units = check_positive_int("units", units)

    def _kernel_shape(self, in_channels):
        return [in_channels, self.units]

    def _linear(self, x, kernel):
        if x.shape.rank == 2:
            return tf.matmul(x, kernel)
        return tf.tensordot(x, kernel, [[x.shape.rank - 1], [0]])

    def compute_output_shape(self, input_shape):
        return tuple(self._input_shapes(input_shape)[0][:-1]) + (self.units,)

    def get_config(self):
        return {"units": self.units, **super().get_config()}


@_register
class Conv2DHyperBatchEnsemble(HyperBatchEnsemble):
    """Hyper-BatchEnsemble 2-D convolution (Wenzel et al., 2020; module docstring).

    ``layer([x, hyperparameters, embedding])`` with ``x`` ``(E·b, height, width,
    in_channels)`` (``channels_last`` only), ``hyperparameters`` ``(E·b, H)`` and
    ``embedding`` ``(E·b, 2·filters)`` (``e1``, ``e2`` broadcast over the positions); output
    the convolution's ``(E·b, height', width', filters)``; the L2 penalty in ``layer.losses``.

    ``filters``, ``kernel_size``, ``strides``, ``padding`` (``'valid'`` or ``'same'``),
    ``data_format`` (``'channels_last'`` or None) and ``dilation_rate`` are as in
    `keras.layers.Conv2D`, the other arguments as in `DenseHyperBatchEnsemble`.
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid",
                 data_format=None, dilation_rate=(1, 1), activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, *,
                 ensemble_size=ENSEMBLE_SIZE, alpha_initializer=FAST_WEIGHTS,
                 gamma_initializer=FAST_WEIGHTS, l2_kernel_index=0, l2_bias_index=1,
                 regularize_fast_weights=True, shared_fast_weights=False, **kwargs):
        super().__init__(
            activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
            ensemble_size=ensemble_size, alpha_initializer=alpha_initializer,
            gamma_initializer=gamma_initializer, l2_kernel_index=l2_kernel_index,
            l2_bias_index=l2_bias_index, regularize_fast_weights=regularize_fast_weights,
            shared_fast_weights=shared_fast_weights, **kwargs)
        self.filters = check_positive_int("filters", filters)
        self.kernel_size = check_positive_int_pair("kernel_size", kernel_size)
        self.strides = check_positive_int_pair("strides", strides)
        self.dilation_rate = check_positive_int_pair("dilation_rate", dilation_rate)
        padding = str(padding).lower()
        if padding not in ("valid", "same"):
            raise ValueError(f"Expected padding 'valid' or 'same'. Received: padding={padding!r}")
        self.padding = padding
        if data_format not in (None, "channels_last"):
            raise ValueError("Expected data_format='channels_last' (or None). Received: "
                             f"data_format={data_format!r}")
        self.data_format = "channels_last"

    def _kernel_shape(self, in_channels):
        return [*self.kernel_size, in_channels, self.filters]

    def _linear(self, x, kernel):
        return tf.nn.convolution(x, kernel, strides=self.strides, padding=self.padding.upper(),
                                 dilations=self.dilation_rate)

    def compute_output_shape(self, input_shape):
        shape = self._input_shapes(input_shape)[0]
        spatial = []
        for size, k, s, d in zip(shape[1:3], self.kernel_size, self.strides,
                                 self.dilation_rate, strict=True):
            if size is None:
                spatial.append(None)
            elif self.padding == "same":
                spatial.append(-(-size // s))
            else:
                spatial.append(-(-(size - (k - 1) * d) // s))
        return (shape[0], *spatial, self.filters)

    def get_config(self):
        config = super().get_config()
        config.update(filters=self.filters, kernel_size=list(self.kernel_size),
                      strides=list(self.strides), padding=self.padding,
                      data_format=self.data_format, dilation_rate=list(self.dilation_rate))
        return config
