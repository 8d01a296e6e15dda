"""Transformer block with pluggable estimators, and a small Bayesian Transformer.

Bayesian Layers' "Bayesian Transformer" (Tran et al., 2019, Sec. 3) replaces the
attention projections by Flipout ones and the feed-forward layers by
local-reparameterization ones. `TransformerBlock` takes both estimators as
arguments, so the deterministic baseline is the same block with
``attention='deterministic', feed_forward='deterministic'``.
`build_transformer` stacks blocks into a token-sequence model (embedding +
learned positions + blocks + a deterministic per-token softmax head).

Rank-1 (ensemble) blocks: ``attention='rank1'`` (`MultiHeadAttentionRank1`) and
``feed_forward='rank1'`` or ``'batch_ensemble'`` (`DenseRank1`, `DenseBatchEnsemble`),
the estimators of the registry's ensemble families, with ``ensemble_size`` members (None:
the layers' default, 4). Their batch is ``ensemble_size`` contiguous blocks, one per
member (`bayes_planet.layers.ensemble`): tile the inputs and labels ``ensemble_size``
times; the other layers of a block act per example, so they need no change.
"""

import copy
import inspect

import tensorflow as tf

from bayes_planet import layer_registry, seeds
from bayes_planet._keras import keras
from bayes_planet.layers import _compat, ensemble, initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import check_positive_int

__all__ = ["PositionEmbedding", "TransformerBlock", "build_transformer"]


# The registry families of the attention and the feed-forward layers (their estimators
# are the choices of ``attention`` and ``feed_forward``); their ensemble families
# (`layer_registry.ensemble_family`) give further choices: estimators needing the ensemble
# batch convention.
ATTENTION_FAMILY, FEED_FORWARD_FAMILY = "multi_head_attention", "dense"


def _family(value, family):
    """The registry family of the choice ``value``: ``family`` or its ensemble family."""
    return layer_registry.family_for(family, value)


def _choice(name, value, family):
    options = (layer_registry.estimators(family, sampling_only=True)
               + layer_registry.estimators(layer_registry.ensemble_family(family))[1:])
    if value not in options:
        raise ValueError(f"Expected {name} in {sorted(options)}. Received: {name}={value!r}")
    return value


#: The sublayers whose configs a built block's config holds (those with priors and seeds).
_CONFIGURED_SUBLAYERS = ("attention_layer", "ff_in", "ff_out")


@_register
class TransformerBlock(keras.layers.Layer):
    """Self-attention + feed-forward block with residuals and layer norm (post-norm).

    ``y = LN(x + Drop(MHA(x, x)))``; ``out = LN(y + Drop(W2 act(W1 y)))``
    (Vaswani et al., 2017). The attention and feed-forward layers are Bayesian or
    deterministic according to ``attention`` and ``feed_forward``; Bayesian ones
    put their KL terms in ``layer.losses``.

    Args:
      num_heads: attention heads.
      key_dim: size of each head.
      ff_dim: hidden width of the feed-forward layer.
      attention: ``'flipout'`` (default, as the paper), ``'reparameterization'``,
        ``'rank1'`` or ``'deterministic'`` (``keras.layers.MultiHeadAttention``).
      feed_forward: ``'local_reparameterization'`` (default, as the paper),
        ``'flipout'``, ``'reparameterization'``, ``'rank1'``, ``'batch_ensemble'`` or
        ``'deterministic'`` (Dense).
      dropout: dropout rate on the attention weights and both residual branches.
      activation: feed-forward activation.
      causal: if True, position t attends only to positions <= t.
      seed: int or None; Bayesian sublayers get seeds derived from it.
      kernel_regularizer: the prior of the Bayesian sublayers' kernels (a KL
        regularizer, alias or config); None keeps each layer's own default. (Rank-1
        sublayers' kernels are point estimates: they keep their factors' priors.)
      ensemble_size: members of the ensemble sublayers (``attention='rank1'``,
        ``feed_forward='rank1'`` or ``'batch_ensemble'``; see the module docstring);
        None: the layers' default. Needs an ensemble choice.
      factor_initializer: the initializer of the ensemble sublayers' factors α and γ
        (alias or config; rank-1: a posterior such as ``'trainable_random_sign_normal'``,
        BatchEnsemble: a plain initializer); None keeps each layer's own default. Needs an
        ensemble choice.
      factor_regularizer: the prior (regularizer) of the ensemble sublayers' factors α and
        γ (alias or config, e.g. ``'rank1_sign_mixture_kl_divergence'``); None keeps each
        layer's own default. Needs an ensemble choice.

    Input: ``[batch, length, d_model]``; optional ``mask`` ``[batch, length]``
    (True = real token). Output: same shape as the input.
    """

    def __init__(self, num_heads, key_dim, ff_dim, attention="flipout",
                 feed_forward="local_reparameterization", dropout=0.0, activation="relu",
                 causal=False, seed=None, kernel_regularizer=None, ensemble_size=None,
                 factor_initializer=None, factor_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.key_dim = check_positive_int("key_dim", key_dim)
        self.ff_dim = check_positive_int("ff_dim", ff_dim)
        self.attention = _choice("attention", attention, ATTENTION_FAMILY)
        self.feed_forward = _choice("feed_forward", feed_forward, FEED_FORWARD_FAMILY)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"Expected 0 <= dropout < 1. Received: dropout={dropout}")
        self.dropout = float(dropout)
        self.activation = keras.activations.get(activation)
        self.causal = bool(causal)
        self.seed = seed
        self.kernel_regularizer = (None if kernel_regularizer is None else
                                   regularizers.serialize(regularizers.get(kernel_regularizer)))
        self.ensemble_size = ensemble_size
        self.factor_initializer = (None if factor_initializer is None else initializers.serialize(
            ensemble.factor_initializer("factor_initializer", factor_initializer)))
        self.factor_regularizer = (None if factor_regularizer is None else regularizers.serialize(
            ensemble.factor_regularizer("factor_regularizer", factor_regularizer)))
        has_ensemble = any(_family(v, f) != f for v, f in (
            (self.attention, ATTENTION_FAMILY), (self.feed_forward, FEED_FORWARD_FAMILY)))
        if ensemble_size is not None:
            self.ensemble_size = check_positive_int("ensemble_size", ensemble_size)
        for name, value in (("ensemble_size", ensemble_size),
                            ("factor_initializer", factor_initializer),
                            ("factor_regularizer", factor_regularizer)):
            if value is not None and not has_ensemble:
                raise ValueError(
                    f"{name} needs an ensemble choice of attention or feed_forward "
                    f"(e.g. 'rank1'). Received: {name}={value!r}, "
                    f"attention={attention!r}, feed_forward={feed_forward!r}")
        self.supports_masking = True
        _compat.set_untracked(self, "_sublayer_configs", None)  # `from_config` sets them

    def _prior(self):
        """``{'kernel_regularizer': fresh instance}``, or ``{}`` for the layers' default."""
        if self.kernel_regularizer is None:
            return {}
        return {"kernel_regularizer": regularizers.get(copy.deepcopy(self.kernel_regularizer))}

    def _sublayer(self, value, family, name):
        """The class of the choice ``value`` and its seed, prior and ensemble arguments."""
        chosen = _family(value, family)
        cls = layer_registry.get(chosen, value)
        kwargs = {}
        if value == layer_registry.DETERMINISTIC:
            return cls, kwargs
        if chosen != family:  # An ensemble choice.
            if self.ensemble_size is not None:
                kwargs["ensemble_size"] = self.ensemble_size
            kwargs.update(ensemble.factor_arguments(self.factor_initializer,
                                                    self.factor_regularizer))
        else:
            kwargs.update(self._prior())
        if "seed" in inspect.signature(cls).parameters:
            kwargs["seed"] = seeds.crc32_seed(self.seed, name)
        return cls, kwargs

    def _make(self, attr, cls, *args, **kwargs):
        """The sublayer ``attr``: ``cls(*args, **kwargs)``, or, for a block loaded from a
        config, ``cls`` from that sublayer's saved config."""
        saved = (self._sublayer_configs or {}).get(attr)
        if saved is not None:
            return cls.from_config(copy.deepcopy(saved))
        return cls(*args, **kwargs)

    def build(self, input_shape):
        d_model = int(input_shape[-1])
        att_cls, att_kwargs = self._sublayer(self.attention, ATTENTION_FAMILY, "attention")
        self.attention_layer = self._make(
            "attention_layer", att_cls, num_heads=self.num_heads, key_dim=self.key_dim,
            dropout=self.dropout, dtype=self.dtype_policy, name="attention", **att_kwargs)

        def dense(units, name, activation=None):
            cls, kwargs = self._sublayer(self.feed_forward, FEED_FORWARD_FAMILY, name)
            return self._make(name, cls, units, activation=activation,
                              dtype=self.dtype_policy, name=name, **kwargs)

        self.ff_in = dense(self.ff_dim, "ff_in", self.activation)
        self.ff_out = dense(d_model, "ff_out")
        self.norm_attention = keras.layers.LayerNormalization(
            epsilon=1e-6, dtype=self.dtype_policy, name="norm_attention")
        self.norm_ff = keras.layers.LayerNormalization(
            epsilon=1e-6, dtype=self.dtype_policy, name="norm_ff")
        self.drop = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        shape = tuple(tf.TensorShape(input_shape).as_list())
        _compat.build_attention(self.attention_layer, shape, shape)
        for layer, layer_shape in ((self.ff_in, shape), (self.ff_out, (*shape[:-1], self.ff_dim)),
                                   (self.norm_attention, shape), (self.norm_ff, shape)):
            _compat.build_sublayer(layer, layer_shape)
        super().build(input_shape)

    def call(self, inputs, mask=None, training=None):
        attention_mask = None
        if mask is not None:
            m = tf.cast(mask, tf.bool)
            attention_mask = m[:, None, :] & m[:, :, None]
        att = self.attention_layer(inputs, inputs, attention_mask=attention_mask,
                                   use_causal_mask=self.causal, training=training)
        y = self.norm_attention(inputs + self.drop(att, training=training))
        ff = self.ff_out(self.ff_in(y))
        return self.norm_ff(y + self.drop(ff, training=training))

    def compute_output_shape(self, input_shape):
        return tf.TensorShape(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads, key_dim=self.key_dim, ff_dim=self.ff_dim,
            attention=self.attention, feed_forward=self.feed_forward, dropout=self.dropout,
            activation=keras.activations.serialize(self.activation), causal=self.causal,
            seed=self.seed, kernel_regularizer=copy.deepcopy(self.kernel_regularizer),
            ensemble_size=self.ensemble_size,
            factor_initializer=copy.deepcopy(self.factor_initializer),
            factor_regularizer=copy.deepcopy(self.factor_regularizer),
        )
        # The sublayers' own configs: what was set on them after they were made (e.g.
        # `set_dataset_size` on their priors) is loaded with them.
        if self.built:
            config["sublayers"] = {attr: getattr(self, attr).get_config()
                                   for attr in _CONFIGURED_SUBLAYERS}
        elif self._sublayer_configs is not None:  # loaded from a config, not built yet
            config["sublayers"] = copy.deepcopy(self._sublayer_configs)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        sublayers = config.pop("sublayers", None)
        block = super().from_config(config)
        _compat.set_untracked(block, "_sublayer_configs", copy.deepcopy(sublayers))
        return block


@_register
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned position embedding: ``x[:, t] + P[t]`` for ``t < max_length``.

    Input ``[batch, length, d]`` with static ``length <= max_length``; same output.
    """

    def __init__(self, max_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_length = check_positive_int("max_length", max_length)
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, input_shape):
        self.positions = self.add_weight(
            name="positions", shape=(self.max_length, int(input_shape[-1])),
            initializer=self.initializer)
        super().build(input_shape)

    def call(self, inputs):
        length = inputs.shape[1]
        if length is None or length > self.max_length:
            raise ValueError(f"Expected a static length <= max_length={self.max_length}. "
                             f"Received: input shape {inputs.shape}")
        return inputs + tf.cast(self.positions[:length], inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length,
                      initializer=keras.initializers.serialize(self.initializer))
        return config


def build_transformer(vocab_size, length, num_classes, d_model=64, num_heads=4, ff_dim=128,
                      num_layers=2, attention="flipout",
                      feed_forward="local_reparameterization", dropout=0.0, causal=False,
                      seed=None, kernel_regularizer=None, ensemble_size=None,
                      factor_initializer=None, factor_regularizer=None,
                      name="bayesian_transformer"):
    """A small (Bayesian) Transformer over token sequences: per-token class logits.

    Token + learned position embeddings, ``num_layers`` `TransformerBlock`s with the
    given estimators, and a deterministic ``Dense(num_classes)`` head (as the
    paper's Bayesian Transformer, only attention and feed-forward layers are
    Bayesian). ``attention='deterministic', feed_forward='deterministic'`` gives
    the plain Transformer baseline. ``kernel_regularizer`` (None: the layers'
    default prior), ``ensemble_size`` (for rank-1 blocks: ``attention='rank1'``,
    ``feed_forward='rank1'``; batches are then ``ensemble_size`` contiguous blocks, one per
    member, see the module docstring), ``factor_initializer`` and ``factor_regularizer``
    (the ensemble layers' α and γ posterior and prior; None: their default) are passed to
    every block.

    Input: int tokens ``[batch, length]``. Output: logits
    ``[batch, length, num_classes]``. Returns a functional `keras.Model`.
    """
    tokens = keras.Input(shape=(length,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab_size, d_model, name="embedding")(tokens)
    x = PositionEmbedding(length, name="positions")(x)
    for i in range(num_layers):
        x = TransformerBlock(num_heads, d_model // num_heads, ff_dim, attention=attention,
                             feed_forward=feed_forward, dropout=dropout, causal=causal,
                             seed=seeds.crc32_seed(seed, f"block{i}"),
                             kernel_regularizer=kernel_regularizer,
                             ensemble_size=ensemble_size,
                             factor_initializer=factor_initializer,
                             factor_regularizer=factor_regularizer, name=f"block_{i}")(x)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(tokens, logits, name=name)

# Bare names for the legacy SavedModel loader (configs nested in other layers).
for _cls in (TransformerBlock, PositionEmbedding):
    keras.utils.get_custom_objects().setdefault(_cls.__name__, _cls)
