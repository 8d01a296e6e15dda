"""(Attentive) neural processes: `NeuralProcess` and its cross-attention `NeuralProcessAttention`.

A neural process (Garnelo et al., 2018, "Neural Processes"; Kim et al., 2019, "Attentive
Neural Processes") predicts targets ``y*`` at inputs ``x*`` from a context set ``{(x_i,
y_i)}``: a *latent path* encodes the set into a global latent ``z ~ N(μ(C), diag σ(C)²)``
(mean-pooled per-pair embeddings), a *deterministic path* gives every target its own
representation of the context (cross-attention of ``x*`` over the ``x_i`` with the pairs'
embeddings as values; uniform attention is the original NP's mean), and a decoder maps
``(representation, z, x*)`` to ``N(μ, diag σ²)`` per target. Training maximizes the ELBO
``E_q(z|C∪T)[log p(y_T | x_T, z)] − KL(q(z | C∪T) || q(z | C))``: a call with the targets'
``y`` draws ``z`` from the posterior and adds that KL (``[batch, 1]``) to the model's
losses; without them ``z`` comes from the context's prior.

Design after edward2's ``ed.layers.NeuralProcess`` and ``Attention`` (same arguments), with
its networks created once and trained (edward2's make new ``Dense`` layers at every call).
"""

import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer
from bayes_planet.layers.checks import check_positive_int, check_positive_number
from bayes_planet.layers.random_variable import RandomVariable

__all__ = ["ATTENTION_TYPES", "NeuralProcess", "NeuralProcessAttention"]

tfd = tfp.distributions

#: ``att_type`` of `NeuralProcessAttention`.
ATTENTION_TYPES = ("uniform", "laplace", "dot_product", "multihead")
_REPRESENTATIONS = ("identity", "mlp")


def _sizes(name, value, allow_none=False):
    if value is None and allow_none:
        return None
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ValueError(f"Expected a non-empty list of positive integers. Received: "
                         f"{name}={value!r}")
    return list(value)


def _mlp(sizes, name):
    """Dense ReLU layers of ``sizes`` (the last linear), applied on the last axis."""
    layers = [keras.layers.Dense(s, activation="relu", name=f"{name}_{i}")
              for i, s in enumerate(sizes[:-1])]
    layers.append(keras.layers.Dense(sizes[-1], name=f"{name}_{len(sizes) - 1}"))
    return layers


def _apply(layers, x):
    for layer in layers:
        x = layer(x)
    return x


@_register
class NeuralProcessAttention(keras.layers.Layer):
    """Cross-attention of target inputs over context inputs: ``call(x_context, x_target, r)``.

    Args:
      rep: ``'identity'`` (keys and queries are the inputs) or ``'mlp'`` (each through its
        own MLP of ``output_sizes``).
      output_sizes: the MLPs' layer sizes (``rep='mlp'`` only).
      att_type: one of `ATTENTION_TYPES`: ``'uniform'`` (the mean of the values: the
        original NP), ``'laplace'`` (weights ``exp(−|q − k|₁ / scale)``), ``'dot_product'``
        (``q·k / sqrt(d)``), ``'multihead'`` (``num_heads`` dot-product heads with learned
        projections).
      scale: the Laplace kernel's scale.
      normalise: softmax weights (summing to 1 over the context); False: ``1 + tanh`` of the
        Laplace scores, ``sigmoid`` of the dot products.
      num_heads: heads of ``'multihead'``; must divide the values' width.

    Shapes: ``x_context`` ``[B, n, d_x]``, ``x_target`` ``[B, m, d_x]``, ``r`` ``[B, n, d]``
    → ``[B, m, d]``.
    """

    def __init__(self, rep="identity", output_sizes=None, att_type="uniform", scale=1.0,
                 normalise=True, num_heads=8, **kwargs):
        super().__init__(**kwargs)
        if rep not in _REPRESENTATIONS:
            raise ValueError(f"Expected one of {_REPRESENTATIONS}. Received: rep={rep!r}")
        if att_type not in ATTENTION_TYPES:
            raise ValueError(f"Expected one of {ATTENTION_TYPES}. Received: att_type={att_type!r}")
        self.rep, self.att_type = rep, att_type
        self.output_sizes = _sizes("output_sizes", output_sizes) if rep == "mlp" else (
            _sizes("output_sizes", output_sizes, allow_none=True))
        self.scale = check_positive_number("scale", scale)
        self.normalise = bool(normalise)
        self.num_heads = check_positive_int("num_heads", num_heads)
        if rep == "mlp":
            self.key_net = _mlp(self.output_sizes, "key")
            self.query_net = _mlp(self.output_sizes, "query")
        self.projections = None  # Multihead: built on the first call (needs d_k, d_v).

    def _build_heads(self, d_k, d_v):
        if d_v % self.num_heads:
            raise ValueError(f"Expected num_heads to divide the values' width {d_v}. Received: "
                             f"num_heads={self.num_heads}")
        head = d_v // self.num_heads
        self.projections = {  # A fresh initializer each: a shared one repeats its values.
            name: keras.layers.Dense(self.num_heads * head, use_bias=False, name=name,
                                     kernel_initializer=keras.initializers.RandomNormal(
                                         stddev=d_k ** -0.5))
            for name in ("wq", "wk", "wv")}
        self.projections["wo"] = keras.layers.Dense(
            d_v, use_bias=False, name="wo",
            kernel_initializer=keras.initializers.RandomNormal(stddev=d_v ** -0.5))

    def call(self, x_context, x_target, r):
        if self.rep == "mlp":
            k, q = _apply(self.key_net, x_context), _apply(self.query_net, x_target)
        else:
            k, q = x_context, x_target
        if self.att_type == "uniform":
            mean = tf.reduce_mean(r, axis=1, keepdims=True)
            return tf.tile(mean, [1, tf.shape(q)[1], 1])
        if self.att_type == "laplace":
            scores = -tf.reduce_sum(tf.abs(k[:, None] - q[:, :, None]) / self.scale, -1)
            weights = tf.nn.softmax(scores) if self.normalise else 1 + tf.tanh(scores)
            return tf.einsum("bmn,bnd->bmd", weights, r)
        if self.att_type == "dot_product":
            return self._dot_product(q, k, r, self.normalise)
        if self.projections is None:
            self._build_heads(int(q.shape[-1]), int(r.shape[-1]))
        split = lambda x: tf.stack(tf.split(x, self.num_heads, -1), 1)  # noqa: E731
        heads = self._dot_product(split(self.projections["wq"](q)),
                                  split(self.projections["wk"](k)),
                                  split(self.projections["wv"](r)), True)  # [B, H, m, h]
        return self.projections["wo"](tf.concat(tf.unstack(heads, axis=1), -1))

    @staticmethod
    def _dot_product(q, k, v, normalise):
        scores = tf.matmul(q, k, transpose_b=True) / tf.sqrt(tf.cast(tf.shape(q)[-1], q.dtype))
        weights = tf.nn.softmax(scores) if normalise else tf.sigmoid(scores)
        return tf.matmul(weights, v)

    def get_config(self):
        config = super().get_config()
        config.update(rep=self.rep, output_sizes=self.output_sizes, att_type=self.att_type,
                      scale=self.scale, normalise=self.normalise, num_heads=self.num_heads)
        return config


@_register
class NeuralProcess(BayesianLayer, keras.Model):
    """An (attentive) neural process (module docstring).

    Args:
      latent_encoder_sizes: the latent path's per-pair MLP sizes.
      num_latents: the global latent's dimension.
      decoder_sizes: the decoder's MLP sizes; the last is twice the targets' ``d_y`` (means
        and raw scales).
      use_deterministic_path: add the deterministic path's per-target representation.
      deterministic_encoder_sizes: its per-pair MLP sizes (with ``use_deterministic_path``).
      attention_wrapper: its `NeuralProcessAttention` (default: uniform, the original NP).
      seed: int seed of the latent draws (None: random).

    ``call(((context_x, context_y), target_x), target_y=None)`` returns a `RandomVariable`
    over ``MultivariateNormalDiag`` with batch shape ``[B, m]`` and event ``[d_y]``.
    """

    def __init__(self, latent_encoder_sizes, num_latents, decoder_sizes,
                 use_deterministic_path=True, deterministic_encoder_sizes=None,
                 attention_wrapper=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.latent_encoder_sizes = _sizes("latent_encoder_sizes", latent_encoder_sizes)
        self.num_latents = check_positive_int("num_latents", num_latents)
        self.decoder_sizes = _sizes("decoder_sizes", decoder_sizes)
        if self.decoder_sizes[-1] % 2:
            raise ValueError("Expected an even last decoder size (means and scales). Received: "
                             f"decoder_sizes={decoder_sizes!r}")
        self.use_deterministic_path = bool(use_deterministic_path)
        self.deterministic_encoder_sizes = _sizes(
            "deterministic_encoder_sizes", deterministic_encoder_sizes,
            allow_none=not self.use_deterministic_path)
        self._init_seed(seed)
        self.latent_net = _mlp(self.latent_encoder_sizes, "latent")
        self.latent_hidden = keras.layers.Dense(
            (self.latent_encoder_sizes[-1] + num_latents) // 2, activation="relu",
            name="latent_hidden")
        self.latent_loc = keras.layers.Dense(num_latents, name="latent_loc")
        self.latent_scale = keras.layers.Dense(num_latents, name="latent_scale")
        if self.use_deterministic_path:
            self.deterministic_net = _mlp(self.deterministic_encoder_sizes, "deterministic")
            self.attention = attention_wrapper or NeuralProcessAttention()
        self.decoder_net = _mlp(self.decoder_sizes, "decoder")

    def build(self, input_shape):
        del input_shape  # The networks build on their first inputs.
        self._ensure_seed_counter()
        self.built = True

    def latent_encoder(self, x, y):
        """``q(z | x, y)``: a `RandomVariable` over ``MultivariateNormalDiag`` ``[B, L]``."""
        embedding = _apply(self.latent_net, tf.concat([x, y], -1))
        hidden = self.latent_hidden(tf.reduce_mean(embedding, axis=1))
        scale = 0.1 + 0.9 * tf.sigmoid(self.latent_scale(hidden))
        return RandomVariable(tfd.MultivariateNormalDiag(self.latent_loc(hidden), scale))

    def deterministic_encoder(self, context_x, context_y, target_x):
        """Every target's representation of the context, ``[B, m, d]``."""
        embedding = _apply(self.deterministic_net, tf.concat([context_x, context_y], -1))
        return self.attention(context_x, target_x, embedding)

    def decoder(self, representation, target_x):
        """``p(y | representation, x)``: ``MultivariateNormalDiag`` ``[B, m]`` of ``[d_y]``."""
        hidden = _apply(self.decoder_net, tf.concat([representation, target_x], -1))
        loc, raw = tf.split(hidden, 2, -1)
        return tfd.MultivariateNormalDiag(loc, 0.1 + 0.9 * tf.nn.softplus(raw))

    def call(self, query, target_y=None):
        (context_x, context_y), target_x = query
        context_x, context_y, target_x = (tf.convert_to_tensor(t, self.compute_dtype)
                                          for t in (context_x, context_y, target_x))
        prior = self.latent_encoder(context_x, context_y).distribution
        seed = self._next_seed()
        if target_y is None:
            z = prior.sample(seed=seed)
        else:
            target_y = tf.convert_to_tensor(target_y, self.compute_dtype)
            posterior = self.latent_encoder(target_x, target_y).distribution
            z = posterior.sample(seed=seed)
            self.add_loss(tfd.kl_divergence(posterior, prior)[:, None])
        num_targets = tf.shape(target_x)[1]
        representation = tf.tile(z[:, None], [1, num_targets, 1])
        if self.use_deterministic_path:
            representation = tf.concat(
                [self.deterministic_encoder(context_x, context_y, target_x), representation], -1)
        return RandomVariable(self.decoder(representation, target_x))

    def get_config(self):
        return {"latent_encoder_sizes": self.latent_encoder_sizes,
                "num_latents": self.num_latents, "decoder_sizes": self.decoder_sizes,
                "use_deterministic_path": self.use_deterministic_path,
                "deterministic_encoder_sizes": self.deterministic_encoder_sizes,
                "attention_wrapper": (keras.saving.serialize_keras_object(self.attention)
                                      if self.use_deterministic_path else None),
                "seed": self.seed, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("attention_wrapper") is not None:
            config["attention_wrapper"] = keras.saving.deserialize_keras_object(
                config["attention_wrapper"])
        return cls(**config)

