"""Discrete flows (Tran et al., 2019, "Discrete Flows: Invertible Generative Models of Discrete
Data"): `DiscreteAutoregressiveFlow`, `DiscreteBipartiteFlow`, `SinkhornAutoregressiveFlow`.

A discrete flow maps a sequence of one-hot tokens ``x`` ``[..., length, V]`` to another,
bijectively: each position is shifted (and scaled) modulo ``V``, or permuted, by amounts a
network computes from the other positions. There is no Jacobian (``log_det_jacobian`` is 0):
the transformed variable's probability is the base's at the reversed value,
``p(y) = p_base(reverse(y))``, so a flow called on a `RandomVariable` (e.g. a
``OneHotCategorical``) returns the random variable of the flowed tokens, as the other flows.

Shifts and scales are chosen by an argmax of the network's logits, with the gradient of the
``softmax(logits / temperature)`` (`one_hot_argmax`, a straight-through estimator): values are
exact one-hot vectors, and the network trains through them. A scale is one of the units modulo
``V`` (the values coprime with ``V``; the logits of the others are ignored), so the flow is
always invertible. ``network`` is a Keras layer (or any callable) from ``[..., length, V]`` to
``[..., length, V]`` (shift only), ``[..., length, 2V]`` (shift logits, then scale logits) or,
for `SinkhornAutoregressiveFlow`, ``[..., length, V²]`` (a permutation's scores); for the
autoregressive flows it must be autoregressive over ``length``, e.g. ``MADE([],
units=V, with_channels=True, activation=None)``.

The arithmetic is `bayes_planet.layers.discrete`'s (``one_hot_add`` etc.).
"""

import math

import numpy as np
import tensorflow as tf
from scipy import optimize

from bayes_planet._keras import keras
from bayes_planet.layers import discrete
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.checks import check_positive_int
from bayes_planet.layers.flows import ReversibleLayer, deserialize_layer, serialize_layer

__all__ = [
    "DiscreteAutoregressiveFlow",
    "DiscreteBipartiteFlow",
    "SinkhornAutoregressiveFlow",
    "one_hot_argmax",
    "soft_to_hard_permutation",
]


def _straight_through(hard, soft):
    """``hard``'s value (exactly) with ``soft``'s gradient."""
    return tf.cast(hard, soft.dtype) + (soft - tf.stop_gradient(soft))


def one_hot_argmax(logits, temperature=1.0, axis=-1):
    """The one-hot encoding of ``argmax(logits)`` along ``axis``, differentiated as
    ``softmax(logits / temperature)`` (a straight-through estimator: the value is exactly
    one-hot; a lower temperature is a less biased, higher-variance gradient)."""
    logits = tf.convert_to_tensor(logits)
    hard = tf.one_hot(tf.argmax(logits, axis=axis), logits.shape[axis], axis=axis,
                      dtype=logits.dtype)
    return _straight_through(hard, tf.nn.softmax(logits / temperature, axis=axis))


def _matchings(scores):
    """For each ``[N, N]`` matrix of ``scores`` ``[M, N, N]``, the column of each row in the
    permutation of largest total score."""
    columns = [optimize.linear_sum_assignment(m, maximize=True)[1] for m in scores]
    return np.asarray(columns, np.int32).reshape(scores.shape[:-1])


def _check_square(inputs):
    size = inputs.shape[-1]
    if inputs.shape.rank is None or inputs.shape.rank < 2 or size is None or (
            inputs.shape[-2] != size):
        raise ValueError("Expected square matrices [..., N, N] with N known. Received: shape "
                         f"{tuple(inputs.shape)}")
    return size


def _best_permutation(scores):
    """The permutation matrices (exact 0/1, of ``scores``' shape and dtype) of largest total
    score: a linear assignment per ``[N, N]`` matrix (the Hungarian method, on the CPU)."""
    size = _check_square(scores)
    flat = tf.reshape(tf.stop_gradient(scores), [-1, size, size])
    columns = tf.numpy_function(_matchings, [flat], tf.int32, stateful=False)
    columns = tf.reshape(columns, tf.shape(scores)[:-1])
    return tf.ensure_shape(tf.one_hot(columns, size, dtype=scores.dtype), scores.shape)


def soft_to_hard_permutation(inputs):
    """The permutation matrices closest to (relaxed, e.g. `discrete.sinkhorn`) ones ``inputs``
    ``[..., N, N]``: each the permutation ``P`` maximizing ``Σ P ⊙ inputs`` (a linear assignment,
    the Hungarian method, on the CPU through scipy), differentiated as ``inputs`` (straight
    through). Returns exact 0/1 matrices of ``inputs``' shape and dtype."""
    inputs = tf.convert_to_tensor(inputs)
    return _straight_through(_best_permutation(inputs), inputs)


def _check_temperature(temperature):
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not (
            temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"Expected a positive number. Received: temperature={temperature!r}")
    return float(temperature)


class _DiscreteFlow(ReversibleLayer):
    """The network, temperature and checks the discrete flows share."""

    def __init__(self, network, temperature=1.0, **kwargs):
        super().__init__(**kwargs)
        if isinstance(network, dict):
            network = deserialize_layer(network)
        if not callable(network):
            raise TypeError("Expected a Keras layer or a callable network. Received: "
                            f"network={network!r}")
        self.network = network
        self.temperature = _check_temperature(temperature)

    def build(self, input_shape):
        shape = tf.TensorShape(input_shape)
        if shape.rank is None or shape.rank < 2 or None in shape[-2:].as_list():
            raise ValueError(f"{type(self).__name__} needs one-hot inputs [..., length, "
                             "vocab_size] with length and vocab_size known. Received: "
                             f"input_shape={tuple(shape.as_list()) if shape.rank else shape}")
        self.vocab_size = int(shape[-1])
        super().build(input_shape)

    def _vocabulary(self, x):
        if not self.built:
            self.build(x.shape)
        if x.shape.rank is None or x.shape.rank < 2 or x.shape[-1] != self.vocab_size:
            raise ValueError(f"{type(self).__name__} was built for vocab_size="
                             f"{self.vocab_size}. Received: shape {tuple(x.shape)}")
        return self.vocab_size

    def _in_float(self, fn, inputs):
        """``fn`` of ``inputs`` computed in floats (integer one-hot inputs: in the layer's
        dtype, the result cast back)."""
        z = tf.convert_to_tensor(inputs)
        if z.dtype.is_floating:
            return fn(z)
        return tf.cast(fn(tf.cast(z, self.compute_dtype)), z.dtype)

    def _network(self, x):
        return tf.cast(self.network(x), x.dtype)

    def _shift_and_scale(self, net, size):
        """One-hot shift and scale (None: shift only) from the network's outputs."""
        if net.shape[-1] == size:
            return one_hot_argmax(net, self.temperature), None
        if net.shape[-1] != 2 * size:
            raise ValueError(f"{type(self).__name__}'s network must output vocab_size={size} "
                             f"(shift) or 2 * vocab_size (shift, scale) features. Received: "
                             f"shape {tuple(net.shape)}")
        shift, scale = tf.split(net, 2, axis=-1)
        units = np.array([math.gcd(k, size) == 1 for k in range(size)])
        scale = tf.where(units, scale, tf.constant(-np.inf, scale.dtype))
        return one_hot_argmax(shift, self.temperature), one_hot_argmax(scale, self.temperature)

    @staticmethod
    def _unshift(x, shift, scale):
        """``(x - shift) · scale⁻¹ mod V``."""
        y = discrete.one_hot_minus(x, shift)
        return y if scale is None else discrete.one_hot_multiply(
            y, discrete.multiplicative_inverse(scale))

    @staticmethod
    def _shift(y, shift, scale):
        """``y · scale + shift mod V``."""
        if scale is not None:
            y = discrete.one_hot_multiply(y, scale)
        return discrete.one_hot_add(y, shift)

    def log_det_jacobian(self, inputs):
        """0 at every position (a bijection of a discrete space), shape ``inputs.shape[:-1]``."""
        inputs = tf.convert_to_tensor(inputs)
        return tf.zeros(tf.shape(inputs)[:-1], inputs.dtype)

    def get_config(self):
        if not isinstance(self.network, keras.layers.Layer):
            raise TypeError(f"{type(self).__name__} with a network that is not a Keras layer "
                            f"({self.network!r}) cannot be serialized.")
        config = super().get_config()
        config.update(network=serialize_layer(self.network), temperature=self.temperature)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class _Autoregressive(_DiscreteFlow):
    """Forward position by position (each step conditions on the outputs so far), reverse in
    one network pass."""

    def _step(self, net, x):
        """The output at one position ``[..., V]`` from the network's outputs there."""
        raise NotImplementedError

    def forward(self, inputs):
        return self._in_float(self._forward, inputs)

    def _forward(self, x):
        self._vocabulary(x)
        length = x.shape[-2]
        zeros = tf.zeros_like(x)
        outputs = []
        for t in range(length):
            context = tf.concat(outputs + [zeros[..., t:, :]], axis=-2) if outputs else zeros
            net = self._network(context)[..., t, :]
            outputs.append(self._step(net, x[..., t, :])[..., None, :])
        return tf.concat(outputs, axis=-2)


@_register
class DiscreteAutoregressiveFlow(_Autoregressive):
    """An autoregressive discrete flow: ``y_t = (x_t - μ_t) · σ_t⁻¹ mod V`` with shift ``μ_t``
    and scale ``σ_t`` from the network on the outputs before ``t`` (``y_<t``).

    ``forward`` (``call``) runs ``length`` network passes, one per position; ``reverse`` one,
    ``x = μ(y) + σ(y) · y mod V``.

    Args:
      network: an autoregressive Keras layer (or callable) from ``[..., length, V]`` to
        ``[..., length, V]`` (shifts; scale 1) or ``[..., length, 2V]`` (shifts, then scales):
        e.g. ``MADE(hidden_dims, units=2 * V, with_channels=True, activation=None)``.
      temperature: the softmax temperature of the straight-through gradient.

    Input and output: one-hot ``[batch, ..., length, V]`` (float; a `RandomVariable`
    input gives the flowed random variable).
    """

    def _step(self, net, x):
        return self._unshift(x, *self._shift_and_scale(net, self.vocab_size))

    def reverse(self, outputs):
        return self._in_float(self._reverse, outputs)

    def _reverse(self, y):
        size = self._vocabulary(y)
        return self._shift(y, *self._shift_and_scale(self._network(y), size))


@_register
class DiscreteBipartiteFlow(_DiscreteFlow):
    """A coupling discrete flow: the positions with ``mask`` 1 pass through, the others are
    ``y = (x - μ) · σ⁻¹ mod V`` with shift and scale from the network on the passed positions
    (``mask · x``). Forward and reverse are one network pass each.

    Args:
      network: a Keras layer (or callable) from ``[..., length, V]`` to ``[..., length, V]``
        or ``[..., length, 2V]`` (as `DiscreteAutoregressiveFlow`'s; any network).
      mask: ``length`` values in {0, 1} (list, array or tensor), 1 = unchanged.
      temperature: the softmax temperature of the straight-through gradient.
    """

    def __init__(self, network, mask, temperature=1.0, **kwargs):
        super().__init__(network, temperature, **kwargs)
        mask = np.asarray(mask.numpy() if tf.is_tensor(mask) else mask)
        if mask.ndim != 1 or mask.size == 0 or not np.isin(mask, (0, 1)).all():
            raise ValueError("Expected a mask of length values in {0, 1}. Received: "
                             f"mask={mask.tolist()!r}")
        self.mask = [int(m) for m in mask]

    def build(self, input_shape):
        length = tf.TensorShape(input_shape)[-2] if tf.TensorShape(input_shape).rank else None
        if length is not None and length != len(self.mask):
            raise ValueError(f"DiscreteBipartiteFlow's mask has {len(self.mask)} values for "
                             f"inputs of length {length}. Received: input_shape="
                             f"{tuple(tf.TensorShape(input_shape).as_list())}")
        super().build(input_shape)

    def _coupling(self, z, transform):
        size = self._vocabulary(z)
        keep = tf.constant(np.asarray(self.mask)[:, None], z.dtype)  # [length, 1]
        passed = keep * z
        changed = transform(z, *self._shift_and_scale(self._network(passed), size))
        return passed + (1.0 - keep) * changed

    def forward(self, inputs):
        return self._in_float(lambda x: self._coupling(x, self._unshift), inputs)

    def reverse(self, outputs):
        return self._in_float(lambda y: self._coupling(y, self._shift), outputs)

    def get_config(self):
        config = super().get_config()
        config["mask"] = list(self.mask)
        return config


@_register
class SinkhornAutoregressiveFlow(_Autoregressive):
    """An autoregressive discrete flow by permutations: ``y_t = P_t x_t`` with ``P_t`` the
    permutation of largest total score of the ``V × V`` scores the network gives position
    ``t`` from ``y_<t`` (a linear assignment), differentiated as their Sinkhorn normalization
    (`discrete.sinkhorn`; straight through). ``reverse`` is ``x = P(y)ᵀ y``.

    Args:
      network: an autoregressive Keras layer (or callable) from ``[..., length, V]`` to
        ``[..., length, V²]`` (row-major ``V × V`` scores).
      temperature: divides the scores before the Sinkhorn normalization.
      sinkhorn_iterations: of the normalization (positive int).
    """

    def __init__(self, network, temperature=1.0, sinkhorn_iterations=20, **kwargs):
        super().__init__(network, temperature, **kwargs)
        self.sinkhorn_iterations = check_positive_int("sinkhorn_iterations",
                                                      sinkhorn_iterations)

    def _permutation(self, net):
        size = self.vocab_size
        if net.shape[-1] != size * size:
            raise ValueError(f"SinkhornAutoregressiveFlow's network must output vocab_size**2"
                             f"={size * size} features. Received: shape {tuple(net.shape)}")
        scores = tf.reshape(net, tf.concat([tf.shape(net)[:-1], [size, size]], 0))
        scores = tf.ensure_shape(scores, net.shape[:-1].concatenate([size, size]))
        scores = scores / self.temperature
        # The permutation of largest total score, the Sinkhorn normalization's limit as the
        # temperature goes to 0 (the same as of its log: rows and columns add constants), is
        # read off the network's scores themselves: bitwise the same in forward and reverse
        # (the normalization's last bits are not; a near tie could differ there).
        soft = discrete.sinkhorn(scores, self.sinkhorn_iterations)
        return _straight_through(_best_permutation(scores), soft)

    def _step(self, net, x):
        return tf.einsum("...jk,...k->...j", self._permutation(net), x)

    def reverse(self, outputs):
        return self._in_float(self._reverse, outputs)

    def _reverse(self, y):
        self._vocabulary(y)
        return tf.einsum("...jk,...j->...k", self._permutation(self._network(y)), y)

    def get_config(self):
        config = super().get_config()
        config["sinkhorn_iterations"] = self.sinkhorn_iterations
        return config
