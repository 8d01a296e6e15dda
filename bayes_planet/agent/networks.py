"""Encoders and decoders of the world model (PlaNet's architecture).

Every network accepts any number of leading batch dims (``[*batch, ...]``).
Pixels: 4 conv 4×4 stride 2 (depth × 1, 2, 4, 8 = 32/64/128/256) → 1024 features
for 64×64 inputs; the decoder mirrors it with a dense layer and four transposed
convolutions (kernels 5, 5, 6, 6) back to 64×64×3. States: ReLU MLPs.

The pixel networks take ``precision``, the Keras dtype policy of their layers (config key
``model.cnn_precision``): ``'float32'``, or ``'mixed_bfloat16'`` (float32 variables, bfloat16
compute, e.g. on a GPU's tensor cores or a CPU with AVX512_BF16). Their outputs are float32
either way, so the RSSM, the likelihoods and the losses never see bfloat16.
"""

import tensorflow as tf

from bayes_planet._keras import keras

__all__ = ["ConvDecoder", "ConvEncoder", "MLP"]


def _apply_flat(fn, x, event_ndims):
    """Applies ``fn`` to ``x`` with its leading batch dims flattened into one."""
    shape = tf.shape(x)
    batch, event = shape[: tf.rank(x) - event_ndims], x.shape[-event_ndims:]
    flat = tf.reshape(x, tf.concat([[-1], event], 0))
    out = fn(flat)
    return tf.reshape(out, tf.concat([batch, tf.shape(out)[1:]], 0))


class ConvEncoder(keras.layers.Layer):
    """``[*batch, 64, 64, 3] -> [*batch, 32 * depth]`` (1024 for depth 32)."""

    def __init__(self, depth=32, precision="float32", **kwargs):
        super().__init__(**kwargs)
        self.convs = [keras.layers.Conv2D(depth * m, 4, 2, activation="relu", dtype=precision)
                      for m in (1, 2, 4, 8)]

    def call(self, image):
        def fn(x):
            for conv in self.convs:
                x = conv(x)
            return tf.cast(tf.reshape(x, [tf.shape(x)[0], -1]), tf.float32)
        return _apply_flat(fn, image, 3)


class ConvDecoder(keras.layers.Layer):
    """``[*batch, features] -> [*batch, 64, 64, channels]`` (the mean image)."""

    def __init__(self, depth=32, channels=3, precision="float32", **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(32 * depth, dtype=precision)
        self.deconvs = [
            keras.layers.Conv2DTranspose(4 * depth, 5, 2, activation="relu", dtype=precision),
            keras.layers.Conv2DTranspose(2 * depth, 5, 2, activation="relu", dtype=precision),
            keras.layers.Conv2DTranspose(depth, 6, 2, activation="relu", dtype=precision),
            keras.layers.Conv2DTranspose(channels, 6, 2, dtype=precision),
        ]

    def call(self, features):
        def fn(x):
            x = self.dense(x)
            x = tf.reshape(x, [-1, 1, 1, x.shape[-1]])
            for deconv in self.deconvs:
                x = deconv(x)
            return tf.cast(x, tf.float32)
        return _apply_flat(fn, features, 1)


class MLP(keras.layers.Layer):
    """``layers`` ReLU layers of ``units``, then a linear layer of ``out`` (if given)."""

    def __init__(self, units, layers, out=None, **kwargs):
        super().__init__(**kwargs)
        self.hidden = [keras.layers.Dense(units, activation="relu") for _ in range(layers)]
        self.out = keras.layers.Dense(out) if out is not None else None

    def call(self, x):
        for layer in self.hidden:
            x = layer(x)
        return self.out(x) if self.out is not None else x
