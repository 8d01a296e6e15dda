"""Gradient estimators shared by every Bayesian layer family.

Each estimator computes a noisy linear map ``op(x, W)`` (a matmul, a convolution,
an einsum) for ``W ~ N(loc, scale²)`` factorized, given ``op``, the input, the
layer's weight (a `DistributionInitializer` or a plain tensor) and a stateless
seed. A deterministic weight (``scale is None``) reduces every estimator to
``op(x, loc)`` exactly.
"""

import tensorflow as tf

from bayes_planet.layers.base import (
    moments,
    per_example,
    sample_weight,
    split_seed,
    standard_normal,
)

__all__ = ["flipout", "local_reparameterization", "rademacher", "random_signs",
           "reparameterization"]


def random_signs(shape, seed, dtype):
    """Independent uniform signs in {-1, +1} of ``shape``: 32 per random word.

    Each bit of a stateless Philox word is an independent fair coin, so one 32-bit
    draw gives 32 signs: a 32nd of the generator's work of drawing one integer per
    sign, plus a shift-and-mask. ``shape`` may be a static list or a shape tensor.
    """
    shape = tf.convert_to_tensor(shape, tf.int32)
    n = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(tf.stack([(n + 31) // 32, 1]), seed, minval=None,
                                        maxval=None, dtype=tf.uint32)
    positions = tf.constant(list(range(32)), tf.uint32)
    bits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(words, positions), tf.constant(1, tf.uint32))
    signs = tf.cast(bits, dtype) * 2 - 1
    return tf.reshape(tf.reshape(signs, [-1])[:n], shape)


def rademacher(shape, seed, dtype):
    """Per-example random signs in {-1, +1} of the given shape (axis 0: the batch).

    Under a multi-replica strategy, this replica's rows of the global batch's signs
    (`noise.per_example`).
    """
    return per_example(lambda s, sd: random_signs(s, sd, dtype), shape, seed)


def reparameterization(op, x, weight, seed, channel_axis=-1):
    """``op(x, loc + scale * eps)``: one weight sample shared by the batch."""
    del channel_axis
    return op(x, sample_weight(weight, seed, x.dtype))


def _sign_shape(t, channel_axis):
    """[batch, 1, ..., channels, ..., 1]: one sign per example and channel."""
    rank = t.shape.rank
    axis = channel_axis % rank
    dims = [tf.shape(t)[0]] + [1] * (rank - 1)
    dims[axis] = tf.shape(t)[axis]
    return tf.stack(dims)


def flipout(op, x, weight, seed, channel_axis=-1):
    """Flipout (Wen et al., 2018): ``op(x, M) + op(x ∘ s, σ ∘ E) ∘ r``.

    ``E`` is one shared perturbation; ``s`` and ``r`` are per-example random signs
    over input and output channels (broadcast over spatial/time axes). Under a
    multi-replica strategy every example gets its single-device signs (`rademacher`).
    """
    loc, scale = moments(weight, x.dtype)
    mean = op(x, loc)
    if scale is None:
        return mean
    eps_seed, in_seed, out_seed = split_seed(seed, 3)
    delta = scale * standard_normal(tf.shape(loc), eps_seed, dtype=x.dtype)
    sign_in = rademacher(_sign_shape(x, channel_axis), in_seed, x.dtype)
    sign_out = rademacher(_sign_shape(mean, channel_axis), out_seed, x.dtype)
    return mean + op(x * sign_in, delta) * sign_out


def local_reparameterization(op, x, weight, seed, channel_axis=-1):
    """Local reparameterization (Kingma et al., 2015): sample the outputs.

    For a linear ``op`` and factorized normal weights, ``op(x, W)`` is normal with
    mean ``op(x, M)`` and variance ``op(x², σ²)``: ``out = mean + sqrt(var) ∘ ε``, with
    per-example ``ε`` (the single-device draws under a multi-replica strategy).
    """
    del channel_axis
    loc, scale = moments(weight, x.dtype)
    mean = op(x, loc)
    if scale is None:
        return mean
    var = op(tf.square(x), tf.square(scale))
    eps = per_example(lambda s, sd: standard_normal(s, sd, dtype=x.dtype), tf.shape(mean), seed)
    return mean + tf.sqrt(var + 1e-16) * eps
