"""Arithmetic on one-hot encodings modulo the vocabulary size, and Sinkhorn normalization.

The building blocks of discrete flows (Tran et al., 2019, "Discrete Flows: Invertible
Generative Models of Discrete Data"): a discrete flow shifts (and scales) a categorical
variable ``x ∈ {0, ..., V-1}`` modulo ``V``, in one-hot form so that soft (relaxed) shifts and
their gradients work. Each function takes one-hot or soft one-hot tensors ``[..., V]`` (the
last axis the vocabulary; shapes broadcast) and returns the encoding of the result:

* `one_hot_add`: ``x + s mod V`` (a circular convolution of the encodings);
* `one_hot_minus`: ``x - s mod V``;
* `one_hot_multiply`: ``x · s mod V`` (for ``s ≠ 0``);
* `multiplicative_inverse`: ``x⁻¹ mod V`` (entries without an inverse map to 0).

For hard one-hot inputs the results are exact one-hot vectors; for soft ones, the
distribution of the result when ``x`` and ``s`` are independent with those probabilities.
`sinkhorn` turns a square matrix of log-scores into a doubly stochastic one (Mena et al.,
2018), the relaxed permutation of Sinkhorn flows.
"""

import math

import numpy as np
import tensorflow as tf

__all__ = ["multiplicative_inverse", "one_hot_add", "one_hot_minus", "one_hot_multiply",
           "sinkhorn"]


def _vocabulary(*tensors):
    sizes = {t.shape[-1] for t in tensors}
    if len(sizes) != 1 or None in sizes:
        raise ValueError("Expected one-hot encodings with one known vocabulary size (last "
                         f"axis). Received: shapes {[tuple(t.shape) for t in tensors]}")
    return int(sizes.pop())


def _convolve(inputs, shift, sign):
    """``out[k] = Σ_j inputs[j] · shift[(sign · (k - j)) mod V]``."""
    inputs, shift = tf.convert_to_tensor(inputs), tf.convert_to_tensor(shift)
    shift = tf.cast(shift, inputs.dtype)
    size = _vocabulary(inputs, shift)
    k, j = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    gathered = tf.gather(shift, (sign * (k - j)) % size, axis=-1)  # [..., k, j]
    return tf.reduce_sum(inputs[..., None, :] * gathered, axis=-1)


def one_hot_add(inputs, shift):
    """The encoding of ``x + s mod V`` for encodings ``inputs`` of ``x`` and ``shift`` of ``s``."""
    return _convolve(inputs, shift, 1)


def one_hot_minus(inputs, shift):
    """The encoding of ``x - s mod V`` for encodings ``inputs`` of ``x`` and ``shift`` of ``s``."""
    return _convolve(inputs, shift, -1)


def one_hot_multiply(inputs, scale):
    """The encoding of ``x · s mod V`` for encodings ``inputs`` of ``x`` and ``scale`` of ``s``;
    the probability of ``s = 0`` (not invertible) is dropped, as edward2's."""
    inputs, scale = tf.convert_to_tensor(inputs), tf.convert_to_tensor(scale)
    scale = tf.cast(scale, inputs.dtype)
    size = _vocabulary(inputs, scale)
    j, s = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    # A scale of 0 (not invertible: no flow multiplies by it) contributes nothing.
    table = tf.one_hot(np.where(s == 0, -1, (j * s) % size), size, dtype=inputs.dtype)
    return tf.einsum("...j,...s,jsk->...k", inputs, scale, table)


def multiplicative_inverse(inputs, vocab_size=None):
    """The encoding of ``x⁻¹ mod V`` (``x · x⁻¹ ≡ 1``) for the encoding ``inputs`` of ``x``; an
    ``x`` sharing a factor with ``V`` (0 always) has no inverse and maps to 0. ``vocab_size``
    (edward2's second argument) must match the last axis when given."""
    inputs = tf.convert_to_tensor(inputs)
    size = _vocabulary(inputs)
    if vocab_size is not None and int(vocab_size) != size:
        raise ValueError(f"Expected vocab_size={size} (the inputs' last axis). Received: "
                         f"vocab_size={vocab_size!r}")
    inverse = [pow(x, -1, size) if math.gcd(x, size) == 1 else 0 for x in range(size)]
    table = tf.one_hot(inverse, size, dtype=inputs.dtype)  # [x, x⁻¹]
    return tf.tensordot(inputs, table, [[-1], [0]])


def sinkhorn(inputs, n_iters=20):
    """Doubly stochastic ``exp`` of square log-scores ``inputs`` ``[..., N, N]``: ``n_iters``
    alternating row and column normalizations in log space (Sinkhorn, 1964; Mena et al.,
    2018). Rows and columns sum to 1 up to the convergence of the iteration."""
    log_alpha = tf.convert_to_tensor(inputs)
    if log_alpha.shape.rank is None or log_alpha.shape.rank < 2 or (
            log_alpha.shape[-1] != log_alpha.shape[-2]):
        raise ValueError(f"Expected square matrices [..., N, N]. Received: shape "
                         f"{tuple(log_alpha.shape)}")
    for _ in range(int(n_iters)):
        log_alpha -= tf.reduce_logsumexp(log_alpha, axis=-1, keepdims=True)
        log_alpha -= tf.reduce_logsumexp(log_alpha, axis=-2, keepdims=True)
    return tf.exp(log_alpha)
