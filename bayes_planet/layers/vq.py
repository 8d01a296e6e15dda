"""Vector quantization (van den Oord et al., 2017): the VQ-VAE bottleneck.

`VectorQuantizer` maps each input vector (last axis) to its nearest codebook
entry. The forward value is the code vector; the backward pass copies the
gradient straight through to the encoder (``z + stop_gradient(e - z)``). Its
training signal lives in ``layer.losses``:

    codebook loss   ||stop_gradient(z) - e||²   (moves the codes; omitted with EMA)
    commitment loss β ||z - stop_gradient(e)||² (keeps the encoder near its codes)

both averaged over elements. With ``ema=True`` the codebook is instead the
exponential moving average of the encoder outputs assigned to each code
(van den Oord et al., 2017, App. A.1), updated in training mode.

The output is a `RandomVariable` over a point mass (``Independent(Deterministic)``,
one event per vector): the VQ-VAE posterior is deterministic and its prior
uniform, so ``rv.distribution.entropy()`` is 0 (Bayesian Layers, Fig. 17).
"""

import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import check_positive_int
from bayes_planet.layers.noise import multi_replica_context
from bayes_planet.layers.random_variable import RandomVariable

tfd = tfp.distributions

__all__ = ["VectorQuantizer", "codebook_usage"]


def codebook_usage(codes, num_codes):
    """``(fraction of codes used, perplexity)`` of integer ``codes`` (any shape).

    Perplexity ``exp(H(code frequencies))`` is the effective number of codes in
    use (``num_codes`` when they are used uniformly, 1 when collapsed).
    """
    counts = tf.math.bincount(tf.reshape(tf.cast(codes, tf.int32), [-1]),
                              minlength=num_codes, maxlength=num_codes, dtype=tf.float32)
    freq = counts / tf.maximum(tf.reduce_sum(counts), 1.0)
    entropy = -tf.reduce_sum(tf.math.multiply_no_nan(tf.math.log(freq), freq))
    used = tf.reduce_mean(tf.cast(counts > 0, tf.float32))
    return used, tf.exp(entropy)


@_register
class VectorQuantizer(_compat.ReplicaLocalLosses, _compat.RandomVariableOutputs,
                      keras.layers.Layer):
    """Nearest-neighbour quantization with a straight-through gradient.

    Args:
      num_codes: codebook size.
      commitment_cost: β, the weight of the commitment loss (default 0.25).
      ema: update the codebook by exponential moving averages instead of by
        gradient (the codebook is then non-trainable).
      decay, epsilon: EMA decay and Laplace smoothing of the code counts.
      codebook_initializer: initializer of the ``(num_codes, dim)`` codebook.

    Input ``(batch, ..., dim)``; output a `RandomVariable` of the same shape. One
    loss term (codebook + β·commitment, or β·commitment with EMA) per call.
    ``encode(x)`` gives the integer codes, ``decode(codes)`` the code vectors.

    Codebook, EMA statistics, distances and losses stay in the variable dtype (float32
    under a mixed policy; the output is in the compute dtype), and under a multi-replica
    strategy the EMA counts and sums are all-reduced, so every replica applies the
    single-device update on the global batch.
    """

    def __init__(self, num_codes, commitment_cost=0.25, ema=False, decay=0.99, epsilon=1e-5,
                 codebook_initializer="variance_scaling", **kwargs):
        super().__init__(**kwargs)
        self.num_codes = check_positive_int("num_codes", num_codes)
        if not commitment_cost >= 0:
            raise ValueError(f"Expected commitment_cost >= 0. Received: {commitment_cost!r}")
        self.commitment_cost = float(commitment_cost)
        self.ema = bool(ema)
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"Expected 0 <= decay < 1. Received: decay={decay!r}")
        self.decay, self.epsilon = float(decay), float(epsilon)
        if codebook_initializer == "variance_scaling":
            codebook_initializer = keras.initializers.VarianceScaling(distribution="uniform")
        self.codebook_initializer = keras.initializers.get(codebook_initializer)

    def build(self, input_shape):
        dim = tf.TensorShape(input_shape)[-1]
        if dim is None:
            raise ValueError(f"VectorQuantizer needs a known last dimension. Got {input_shape}")
        # Never autocast: distances and EMA updates need the variable dtype.
        self.codebook = self.add_weight(name="codebook", shape=[self.num_codes, dim],
                                        initializer=self.codebook_initializer,
                                        trainable=not self.ema, **_compat.NO_AUTOCAST)
        if self.ema:
            self.ema_count = self.add_weight(name="ema_count", shape=[self.num_codes],
                                             initializer="ones", trainable=False,
                                             **_compat.NO_AUTOCAST)
            # Sum of assigned vectors; starts at the codebook (with counts of one).
            self.ema_sum = self.add_weight(
                name="ema_sum", shape=[self.num_codes, dim], trainable=False,
                initializer=lambda shape, dtype=None: tf.identity(self.codebook),
                **_compat.NO_AUTOCAST)
        super().build(input_shape)

    def encode(self, inputs):
        """Index of the nearest code for every input vector, shape ``inputs.shape[:-1]``."""
        x = tf.cast(tf.convert_to_tensor(inputs), self.dtype)
        flat = tf.reshape(x, [-1, x.shape[-1]])
        distances = (tf.reduce_sum(tf.square(flat), 1, keepdims=True)
                     - 2.0 * tf.matmul(flat, self.codebook, transpose_b=True)
                     + tf.reduce_sum(tf.square(self.codebook), 1)[None, :])
        codes = tf.argmin(distances, axis=-1, output_type=tf.int32)
        return tf.reshape(codes, tf.shape(x)[:-1])

    def decode(self, codes):
        """Code vectors for integer ``codes`` (in the compute dtype)."""
        return tf.cast(tf.gather(self.codebook, codes), self.compute_dtype)

    def call(self, inputs, training=None):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        codes = self.encode(x)
        x_full = tf.cast(x, self.dtype)
        if self.ema and training:
            self._update_ema(x_full, codes)
        book = tf.gather(self.codebook, codes)  # after the EMA update, in the variable dtype
        loss = self.commitment_cost * tf.reduce_mean(tf.square(x_full - tf.stop_gradient(book)))
        if not self.ema:
            loss += tf.reduce_mean(tf.square(tf.stop_gradient(x_full) - book))
        self.add_loss(loss)
        quantized = tf.cast(book, x.dtype)
        value = x + tf.stop_gradient(quantized - x)
        return RandomVariable(tfd.Independent(tfd.Deterministic(value), 1), value=value)

    def _update_ema(self, x, codes):
        flat = tf.reshape(tf.stop_gradient(x), [-1, x.shape[-1]])
        one_hot = tf.one_hot(tf.reshape(codes, [-1]), self.num_codes, dtype=flat.dtype)
        count = tf.reduce_sum(one_hot, 0)
        total = tf.matmul(one_hot, flat, transpose_a=True)
        ctx = multi_replica_context()
        if ctx is not None:  # the global batch's statistics
            count, total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [count, total])
        # Aggregation NONE: each replica assigns its own copy the same all-reduced update.
        ema_count = self.ema_count.assign(self.decay * self.ema_count + (1 - self.decay) * count)
        ema_sum = self.ema_sum.assign(self.decay * self.ema_sum + (1 - self.decay) * total)
        n = tf.reduce_sum(ema_count)
        smoothed = (ema_count + self.epsilon) / (n + self.num_codes * self.epsilon) * n
        self.codebook.assign(ema_sum / smoothed[:, None])

    def get_config(self):
        config = super().get_config()
        config.update(num_codes=self.num_codes, commitment_cost=self.commitment_cost,
                      ema=self.ema, decay=self.decay, epsilon=self.epsilon,
                      codebook_initializer=keras.initializers.serialize(
                          self.codebook_initializer))
        return config
