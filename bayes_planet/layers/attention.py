"""Bayesian multi-head attention: Bayesian query/key/value/output projections.

`MultiHeadAttentionReparameterization` and `MultiHeadAttentionFlipout` are
``keras.layers.MultiHeadAttention`` (same arguments, call signature, masks and
shapes) whose four ``EinsumDense`` projections are Bayesian: each kernel is a
distribution (``'trainable_normal'``) with its KL to the prior
(``'normal_kl_divergence'``) in ``layer.losses``. The Bayesian Transformer of
Bayesian Layers (Tran et al., 2019, Sec. 3) uses the Flipout version.

The projections are `EinsumDenseReparameterization` / `EinsumDenseFlipout`,
Bayesian ``keras.layers.EinsumDense`` layers built on the shared estimators with
``tf.einsum`` as the linear op. Flipout's per-example signs cover every input
feature and every output unit: for an equation that contracts the trailing input
axes (``'abc,cde->abde'``, ``'abcd,cde->abe'``, every MHA projection) the
estimator sees the input with its contracted axes flattened to one feature axis
and the output with its kernel axes flattened, so signs are ``[batch, 1, in]``
and ``[batch, 1, out]`` (shared over the sequence axis, like a Flipout Dense
applied per token).
"""

import copy
import inspect

import numpy as np
import tensorflow as tf

from bayes_planet import seeds
from bayes_planet._keras import keras
from bayes_planet.layers import _compat, estimators, initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, sample_weight
from bayes_planet.layers.initializers import DistributionInitializer
from bayes_planet.layers.noise import split_seed

__all__ = [
    "EinsumDenseFlipout",
    "EinsumDenseReparameterization",
    "MultiHeadAttentionFlipout",
    "MultiHeadAttentionReparameterization",
]


#: The Bayesian defaults of the projections (and of the attention layers): a distribution
#: over each kernel, its KL to the prior as the kernel's regularizer.
BAYESIAN_DEFAULTS = {"kernel_initializer": "trainable_normal",
                     "kernel_regularizer": "normal_kl_divergence"}


def _split_equation(equation):
    inputs, output = equation.replace(" ", "").split("->")
    lhs, rhs = inputs.split(",")
    return lhs, rhs, output


def flat_plan(equation):
    """(n_contracted, n_kernel_out) if the equation is a dense map over trailing axes.

    That is ``free + contracted, contracted + out -> free + out`` (``free`` may start
    with ``...``); otherwise None.
    """
    lhs, rhs, out = _split_equation(equation)
    contracted = [c for c in lhs if c in rhs and c not in out]
    k = len(contracted)
    if k == 0 or lhs[-k:] != "".join(contracted) or rhs[:k] != "".join(contracted):
        return None
    free, kernel_out = lhs[:-k], rhs[k:]
    if any(c in free for c in kernel_out) or out != free + kernel_out:
        return None
    return k, len(kernel_out)


class _BayesianEinsumDense(BayesianLayer, keras.layers.EinsumDense):
    """EinsumDense with a distribution over its kernel; subclasses set ``_estimator``.

    Takes the arguments of `keras.layers.EinsumDense` on the installed Keras, same order
    (``equation``, ``output_shape``, ``activation``, ``bias_axes``, ...; Keras 3's LoRA and
    quantization arguments only at their default, None), with Bayesian defaults
    ``kernel_initializer='trainable_normal'`` and ``kernel_regularizer='normal_kl_divergence'``,
    plus the keyword-only ``seed``.

    Shapes: as the equation says; e.g. ``'abc,cde->abde'`` maps ``[B, T, C]`` to
    ``[B, T, D, E]``.
    """

    _estimator = None

    @_compat.twin_arguments(
        keras.layers.EinsumDense, defaults=BAYESIAN_DEFAULTS, keyword_only=(("seed", None),),
        only_default=_compat.KERNEL_REWRITE_PARAMETERS)
    def __init__(self, *, equation, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, seed, **kwargs):
        super().__init__(
            equation=equation,
            kernel_initializer=initializers.get(kernel_initializer),
            bias_initializer=initializers.get(bias_initializer),
            kernel_regularizer=regularizers.get(kernel_regularizer),
            bias_regularizer=regularizers.get(bias_regularizer),
            **kwargs,
        )
        self._init_seed(seed)
        self._plan = flat_plan(equation)
        if self._estimator is not estimators.reparameterization and self._plan is None:
            raise ValueError(
                f"{type(self).__name__} needs an equation that contracts the trailing input "
                "axes with the leading kernel axes and appends the remaining kernel axes "
                f"(e.g. 'abc,cde->abde'). Received: equation={equation!r}"
            )

    def build(self, input_shape):
        super().build(input_shape)
        if isinstance(self.kernel, DistributionInitializer):
            # The prior's fan-in: the kernel axes the equation contracts (Keras' shape
            # convention would also count the heads of a query/key/value projection).
            lhs, rhs, out = _split_equation(self.equation)
            dims = [d for c, d in zip(rhs, self.kernel.weight_shape.as_list(), strict=True)
                    if c in lhs and c not in out]
            self.kernel.fan_in = int(np.prod(dims)) if dims else 1

    def _project(self, x, seed):
        einsum = lambda t, k: tf.einsum(self.equation, t, k)  # noqa: E731
        if self._estimator is estimators.reparameterization:  # no signs: no flat view needed
            return self._estimator(einsum, x, self.kernel, seed)
        # Flat view: contracted input axes -> one feature axis, kernel output axes -> one.
        n_in = self._plan[0]
        x_shape = tf.shape(x)
        in_dims = x.shape[x.shape.rank - n_in:]
        flat_in = tf.reshape(x, tf.concat([x_shape[:-n_in], [int(np.prod(in_dims))]], 0))
        kernel_out = self.kernel.weight_shape[n_in:] if hasattr(
            self.kernel, "weight_shape") else self.kernel.shape[n_in:]
        out_flat = int(np.prod(kernel_out))

        def op(t, k):
            y = tf.einsum(self.equation, tf.reshape(t, x_shape), k)
            return tf.reshape(y, tf.concat([x_shape[:-n_in], [out_flat]], 0))

        y = self._estimator(op, flat_in, self.kernel, seed)
        y = tf.reshape(y, tf.concat([x_shape[:-n_in], list(kernel_out)], 0))
        y.set_shape(x.shape[:-n_in].concatenate(kernel_out))
        return y

    def call(self, inputs):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        kernel_seed, bias_seed = split_seed(self._next_seed(), 2)
        out = self._project(x, kernel_seed)
        if self.bias is not None:
            out += sample_weight(self.bias, bias_seed, out.dtype)
        return self.activation(out) if self.activation is not None else out


@_register
class EinsumDenseReparameterization(_BayesianEinsumDense):
    """Bayesian `keras.layers.EinsumDense`, reparameterization estimator.

    ``einsum(x, W) + b`` with one ``W = loc + scale * eps`` per call shared by the
    batch (Blundell et al., 2015). Any EinsumDense equation.
    """

    _estimator = staticmethod(estimators.reparameterization)


@_register
class EinsumDenseFlipout(_BayesianEinsumDense):
    """Bayesian `keras.layers.EinsumDense`, Flipout estimator (Wen et al., 2018).

    ``einsum(x, M) + einsum(x ∘ s, σ ∘ E) ∘ r`` with one perturbation ``E`` per call
    and per-example signs ``s`` over all input features, ``r`` over all output
    units (see the module docstring); twice the einsum cost.
    """

    _estimator = staticmethod(estimators.flipout)


#: The projections Keras' MultiHeadAttention creates as it builds (Keras 3's gate only with
#: ``use_gate``): each becomes its Bayesian twin as it is set (`__setattr__`).
_SUBLAYERS = ("_query_dense", "_key_dense", "_value_dense", "_gate_dense", "_output_dense")

_KERAS_MHA_PARAMETERS = inspect.signature(keras.layers.MultiHeadAttention.__init__).parameters
# tf-keras >= 2.16 added MultiHeadAttention(..., bias_constraint, softmax_robust_masking=False);
# ours takes it on every stack (`_compat.ATTENTION_NEWER_PARAMETERS`: in that position on Keras
# 2, by keyword on Keras 3); an error where Keras lacks it and it is True.
_KERAS_ROBUST_MASKING = "softmax_robust_masking" in _KERAS_MHA_PARAMETERS
# Keras 3's MultiHeadAttention takes a ``seed`` (its dropout's): ours takes it in that place.
_KERAS_SEEDED = "seed" in _KERAS_MHA_PARAMETERS

#: What a Bayesian attention layer adds to its twin's parameters (where the twin lacks them).
ATTENTION_KEYWORD_ONLY = (("softmax_robust_masking", False), ("seed", None))


class BayesianMultiHeadAttention(keras.layers.MultiHeadAttention):
    """MultiHeadAttention with Bayesian projections; subclasses set ``_dense_cls``.

    Takes the arguments of `keras.layers.MultiHeadAttention` on the installed Keras (same order:
    ``num_heads``, ``key_dim``, ``value_dim``, ``dropout``, ``use_bias``,
    ``output_shape``, ``attention_axes``, ...), with Bayesian defaults
    ``kernel_initializer='trainable_normal'`` and
    ``kernel_regularizer='normal_kl_divergence'`` (each projection gets a fresh
    initializer built from this one), plus ``softmax_robust_masking`` (tf-keras >= 2.16's;
    only False where Keras lacks it) and ``seed``: the projections' seeds are derived from
    it and their names (None: random); Keras 3's ``MultiHeadAttention`` takes a ``seed``
    (its dropout's) itself, and ours takes it in that place.

    Call, masks and shapes: as `keras.layers.MultiHeadAttention`, e.g.
      ``layer(query [B, T, E], value [B, S, E])`` returns ``[B, T, E]``.
    """

    _dense_cls = None

    @_compat.twin_arguments(keras.layers.MultiHeadAttention, defaults=BAYESIAN_DEFAULTS,
                            newer=_compat.ATTENTION_NEWER_PARAMETERS,
                            keyword_only=ATTENTION_KEYWORD_ONLY)
    def __init__(self, *, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, softmax_robust_masking, seed, **kwargs):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"Expected a non-negative integer or None. Received: seed={seed!r}")
        if _KERAS_ROBUST_MASKING:
            kwargs["softmax_robust_masking"] = softmax_robust_masking
        elif softmax_robust_masking:
            raise ValueError("softmax_robust_masking=True needs tf-keras >= 2.16 (this Keras' "
                             "MultiHeadAttention has no such argument). "
                             "Received: softmax_robust_masking=True")
        if _KERAS_SEEDED:
            kwargs["seed"] = seed
        # Keras builds its (replaced) sublayers from plain initializers; ours are kept
        # as configs so each projection gets a fresh distribution initializer.
        super().__init__(kernel_regularizer=regularizers.get(kernel_regularizer),
                         bias_regularizer=regularizers.get(bias_regularizer), **kwargs)
        self.seed = seed
        self._store_init_configs(kernel_initializer, bias_initializer)

    def _store_init_configs(self, kernel_initializer, bias_initializer):
        for name, value in (("_kernel_init_config", kernel_initializer),
                            ("_bias_init_config", bias_initializer)):
            _compat.set_untracked(self, name, initializers.serialize(initializers.get(value)))

    def _sublayer_seed(self, name):
        return seeds.crc32_seed(self.seed, name)

    def __setattr__(self, name, value):
        # Keras' build sets each projection to a new (unbuilt) Keras EinsumDense, then
        # builds it (Keras 3) or lets its first call build it (Keras 2): it gets the
        # Bayesian twin instead, on both.
        if (name in _SUBLAYERS and isinstance(value, keras.layers.EinsumDense)
                and not isinstance(value, self._dense_cls)):
            value = self._bayesian_projection(name, value)
        super().__setattr__(name, value)

    def _bayesian_projection(self, attr, dense):
        """The Bayesian twin of Keras' projection ``dense`` (set as ``attr``)."""
        config = dense.get_config()
        return self._dense_cls(
            equation=config["equation"],
            output_shape=config["output_shape"],
            bias_axes=config["bias_axes"],
            activation=config["activation"],
            kernel_initializer=initializers.for_weight(
                copy.deepcopy(self._kernel_init_config), f"{attr}/kernel"),
            bias_initializer=initializers.for_weight(
                copy.deepcopy(self._bias_init_config), f"{attr}/bias"),
            kernel_regularizer=self._kernel_regularizer,
            bias_regularizer=self._bias_regularizer,
            activity_regularizer=self._activity_regularizer,
            kernel_constraint=self._kernel_constraint,
            bias_constraint=self._bias_constraint,
            dtype=self.dtype_policy,
            name=config["name"],
            seed=self._sublayer_seed(config["name"]),
            **self._sublayer_kwargs(attr),
        )

    def _sublayer_kwargs(self, attr):
        """Further constructor arguments of the projection ``attr`` (subclasses' hook)."""
        del attr
        return {}

    def get_config(self):
        config = super().get_config()
        config.update(
            kernel_initializer=copy.deepcopy(self._kernel_init_config),
            bias_initializer=copy.deepcopy(self._bias_init_config),
            kernel_regularizer=regularizers.serialize(self._kernel_regularizer),
            bias_regularizer=regularizers.serialize(self._bias_regularizer),
            seed=self.seed,
        )
        for key in ("query_shape", "key_shape", "value_shape"):  # JSON-friendly shapes.
            if config.get(key) is not None:
                config[key] = tf.TensorShape(config[key]).as_list()
        return config


@_register
class MultiHeadAttentionReparameterization(BayesianMultiHeadAttention):
    """Multi-head attention with reparameterization-sampled projections.

    `keras.layers.MultiHeadAttention` whose query/key/value/output projections are
    `EinsumDenseReparameterization`: one kernel sample per projection and call,
    shared by the batch. See `BayesianMultiHeadAttention` for arguments.
    """

    _dense_cls = EinsumDenseReparameterization


@_register
class MultiHeadAttentionFlipout(BayesianMultiHeadAttention):
    """Multi-head attention with Flipout projections (the Bayesian Transformer's).

    `keras.layers.MultiHeadAttention` whose query/key/value/output projections are
    `EinsumDenseFlipout`: per-example pseudo-independent kernel samples (Wen et
    al., 2018) at about twice the projection cost. See
    `BayesianMultiHeadAttention` for arguments.
    """

    _dense_cls = EinsumDenseFlipout

# Configs nested in another layer's config (e.g. a custom layer holding an attention
# layer) are looked up by bare class name by the legacy SavedModel loader.
for _cls in (EinsumDenseReparameterization, EinsumDenseFlipout,
             MultiHeadAttentionReparameterization, MultiHeadAttentionFlipout):
    keras.utils.get_custom_objects().setdefault(_cls.__name__, _cls)
