"""Reversible layers (normalizing flows): `Reverse`, `ActNorm`, `Permutation`, `MADE`,
`RealNVP`.

Bayesian Layers, Sec. 2.4 (Tran et al., 2019). A reversible layer defines, besides
its forward computation, ``reverse(outputs)`` (the inverse) and
``log_det_jacobian(inputs)`` (``log |det ∂forward/∂x|`` per example, the event
being the last axis). Called on a Tensor it returns ``forward(x)``; called on a
`RandomVariable` it returns a `RandomVariable` over the transformed variable — a
``tfd.TransformedDistribution`` whose ``log_prob(y)`` is
``base.log_prob(reverse(y)) - log_det_jacobian(reverse(y))`` — whose value is the
forward transform of the input's value. A ``keras.Sequential`` of flows is the
composition, so Fig. 7 of the paper reads::

    flow = keras.Sequential([RealNVP([64, 64]), RealNVP([64, 64], reverse_mask=True)])
    base = RandomVariable(tfd.Normal(tf.zeros([batch, d]), 1.0))
    loss = -tf.reduce_mean(flow(base).distribution.log_prob(features))

On Keras 3 a model converts its inputs to tensors, so a ``keras.Sequential`` of flows called
on a `RandomVariable` returns the forward transform of its value; call the layers in turn
(``for layer in flow.layers: rv = layer(rv)``) for the transformed distribution. A layer
called directly keeps the random variable on either Keras.

Direction convention: ``call`` maps base noise to data (the generative direction,
as in Fig. 7); ``log_prob`` on data runs ``reverse``. `Reverse(layer)` flips it.
Any object with ``reverse`` and ``log_det_jacobian`` (e.g. `RevNetBlock`) can be
lifted to random variables with `transform_random_variable`.
"""

import random

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, initializers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import check_positive_int
from bayes_planet.layers.noise import multi_replica_context
from bayes_planet.layers.random_variable import RandomVariable

tfb = tfp.bijectors
tfd = tfp.distributions

__all__ = [
    "MADE",
    "ActNorm",
    "LayerBijector",
    "Permutation",
    "RealNVP",
    "Reverse",
    "ReversibleLayer",
    "transform_random_variable",
]


def deserialize_layer(config):
    """A layer from its config; registered classes first (Keras's legacy H5/SavedModel
    loaders look nested layers up by bare class name and miss our registered ones)."""
    if isinstance(config, dict):
        name = config.get("registered_name") or config.get("class_name")
        cls = keras.saving.get_registered_object(name) if name else None
        if cls is not None:
            return cls.from_config(config["config"])
    return keras.layers.deserialize(config)


def serialize_layer(layer):
    """A nested layer's config, without the build state (so that the config of a
    built and an unbuilt layer agree; the outer layer builds its parts)."""
    config = keras.layers.serialize(layer)
    if isinstance(config, dict):
        config.pop("build_config", None)
        config.pop("compile_config", None)
    return config


def _forward(layer, x):
    forward = getattr(layer, "forward", None)
    return forward(x) if forward is not None else layer(x)


def _log_det(layer, x):
    fn = getattr(layer, "log_det_jacobian", None)
    if fn is None:
        raise NotImplementedError(
            f"Layer {layer.name!r} ({type(layer).__name__}) defines no `log_det_jacobian`, "
            "so it cannot transform a RandomVariable's density.")
    return fn(x)


class LayerBijector(tfb.Bijector):
    """A tfp bijector view of a reversible layer (event = last axis)."""

    def __init__(self, layer, name=None):
        parameters = dict(locals())
        self._layer = layer
        super().__init__(forward_min_event_ndims=1, is_constant_jacobian=False,
                         validate_args=False, parameters=parameters,
                         name=name or f"{layer.name}_bijector")

    @classmethod
    def _parameter_properties(cls, dtype):
        return {}

    def _forward(self, x):
        return _forward(self._layer, x)

    def _inverse(self, y):
        joint = getattr(self._layer, "reverse_and_log_det_jacobian", None)
        if joint is None:
            return self._layer.reverse(y)
        # One pass gives both; TransformedDistribution.log_prob asks for the
        # log-det at the returned `x` right after (saves a network evaluation).
        x, log_det = joint(y)
        self._last_inverse = (x, log_det)
        return x

    def _forward_log_det_jacobian(self, x):
        last = getattr(self, "_last_inverse", None)
        if last is not None and last[0] is x:
            return last[1]
        return _log_det(self._layer, x)


def transform_random_variable(layer, inputs):
    """The `RandomVariable` of ``layer``'s forward transform of ``inputs``.

    A base with scalar events (e.g. ``Normal(zeros([b, d]), 1)``) has its last
    batch axis reinterpreted as the event first. The value is computed lazily as
    the forward transform of the input's value.
    """
    base = inputs.distribution
    if base.event_shape.rank == 0:
        base = tfd.Independent(base, reinterpreted_batch_ndims=1)
    dist = tfd.TransformedDistribution(base, LayerBijector(layer))
    return RandomVariable(dist, value=lambda: _forward(layer, tf.convert_to_tensor(inputs)))


class ReversibleLayer(_compat.RandomVariableInputs, _compat.RandomVariableOutputs,
                      keras.layers.Layer):
    """Base class of flows: implement ``forward``, ``reverse``, ``log_det_jacobian``.

    ``call`` dispatches: a `RandomVariable` input gives a transformed
    `RandomVariable`, anything else ``forward(tensor)``.
    """

    def call(self, inputs):
        if isinstance(inputs, RandomVariable):
            return transform_random_variable(self, inputs)
        return self.forward(tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype))

    def forward(self, inputs):
        raise NotImplementedError

    def reverse(self, outputs):
        raise NotImplementedError

    def log_det_jacobian(self, inputs):
        raise NotImplementedError


def _batch_zeros(x):
    return tf.zeros(tf.shape(x)[:-1], x.dtype)


@_register
class Reverse(ReversibleLayer):
    """Swaps a reversible layer's forward and reverse computations.

    ``Reverse(layer)(y) = layer.reverse(y)``, ``Reverse(layer).reverse(x) =
    layer(x)`` and ``log_det_jacobian(y) = -layer.log_det_jacobian(layer.reverse(y))``.
    Use it to run a generative flow in the normalizing direction (data to noise),
    e.g. ``Reverse(flow)(data_rv)``.

    Args:
      layer: a layer with a ``reverse`` method (TypeError otherwise).
    """

    def __init__(self, layer, **kwargs):
        if isinstance(layer, dict):
            layer = deserialize_layer(layer)
        if not callable(getattr(layer, "reverse", None)):
            raise TypeError(
                "Reverse needs a layer with a `reverse(outputs)` method. Received: "
                f"layer={layer!r} of type {type(layer).__name__}, which has none.")
        # Compute in the wrapped layer's dtype unless told otherwise (a float64 flow
        # stays float64 when reversed).
        kwargs.setdefault("dtype", layer.dtype_policy)
        super().__init__(**kwargs)
        self.layer = layer

    def build(self, input_shape):
        if not self.layer.built:
            self.layer.build(input_shape)
        super().build(input_shape)

    def forward(self, inputs):
        return self.layer.reverse(inputs)

    def reverse(self, outputs):
        return _forward(self.layer, outputs)

    def log_det_jacobian(self, inputs):
        return -_log_det(self.layer, self.layer.reverse(inputs))

    def get_config(self):
        config = super().get_config()
        config["layer"] = serialize_layer(self.layer)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["layer"] = deserialize_layer(config["layer"])
        return cls(**config)


@_register
class Permutation(ReversibleLayer):
    """Permutes the last axis: ``y = x[..., perm]`` (log-det 0).

    Args:
      order: ``'reverse'`` (default), ``'random'`` (drawn from ``seed`` at build) or
        an explicit permutation (list of ints).
      seed: int for ``'random'`` (chosen at construction when None, and kept in the
        config so a reloaded layer has the same permutation).
    """

    def __init__(self, order="reverse", seed=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(order, str):
            if order not in ("reverse", "random"):
                raise ValueError("Expected 'reverse', 'random' or a list of ints. "
                                 f"Received: order={order!r}")
        else:
            order = [int(i) for i in order]
            if sorted(order) != list(range(len(order))):
                raise ValueError(f"Expected a permutation of 0..n-1. Received: order={order!r}")
        self.order = order
        self.seed = random.SystemRandom().randint(0, 2**31 - 1) if seed is None else int(seed)

    def build(self, input_shape):
        dim = tf.TensorShape(input_shape)[-1]
        if self.order == "reverse":
            perm = np.arange(dim)[::-1]
        elif self.order == "random":
            perm = np.random.RandomState(self.seed).permutation(dim)
        else:
            perm = np.asarray(self.order)
            if len(perm) != dim:
                raise ValueError(f"Permutation of length {len(perm)} for inputs with last axis "
                                 f"{dim}. Received: order={self.order!r}")
        self.permutation = perm.astype(np.int32)
        self.inverse_permutation = np.argsort(perm).astype(np.int32)
        super().build(input_shape)

    def forward(self, inputs):
        return tf.gather(inputs, self.permutation, axis=-1)

    def reverse(self, outputs):
        return tf.gather(outputs, self.inverse_permutation, axis=-1)

    def log_det_jacobian(self, inputs):
        return _batch_zeros(inputs)

    def get_config(self):
        config = super().get_config()
        config.update(order=self.order, seed=self.seed)
        return config


@_register
class ActNorm(ReversibleLayer):
    """Activation normalization (Kingma & Dhariwal, 2018): ``y = x * exp(s) + b``.

    Per-feature (last axis) log-scale ``s`` and bias ``b``; ``log_det = sum(s)``.
    With ``data_init=True`` the first batch the layer transforms — in either
    direction — sets ``s, b`` so that this direction's outputs have zero mean and
    unit variance per feature (for a generative flow: ``reverse`` on the first data
    batch, as in Glow). A non-trainable ``initialized`` flag (saved with the
    model) makes this happen once. The moments are computed in the variable dtype
    (float32 under a mixed policy) and, under a multi-replica strategy, from sums
    all-reduced over the replicas: the single-device initialization on the global batch.
    """

    def __init__(self, data_init=True, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.data_init = bool(data_init)
        self.epsilon = float(epsilon)

    def build(self, input_shape):
        dim = tf.TensorShape(input_shape)[-1]
        self.log_scale = self.add_weight(name="log_scale", shape=[dim], initializer="zeros")
        self.bias = self.add_weight(name="bias", shape=[dim], initializer="zeros")
        if self.data_init:
            self.initialized = self.add_weight(name="initialized", shape=[], dtype=tf.int32,
                                               initializer="zeros", trainable=False)
        super().build(input_shape)

    def _maybe_init(self, data, forward):
        if not self.data_init or not _compat.variables_writable():
            return  # (a Keras 3 symbolic trace initializes nothing: the first real batch does)
        with tf.init_scope():  # the flag's current value, even while tracing
            done = int(self.initialized.numpy()) if tf.executing_eagerly() else None
        if done:
            return  # Initialized before this trace: no conditional in the graph.
        data = tf.cast(data, self.log_scale.dtype)
        ctx = multi_replica_context()

        def moments():  # of the global batch: sums and count all-reduced over replicas
            axes = list(range(data.shape.rank - 1))
            stats = [tf.reduce_sum(data, axes), tf.reduce_sum(tf.square(data), axes),
                     tf.cast(tf.size(data) // tf.shape(data)[-1], data.dtype)]
            if ctx is not None:
                stats = ctx.all_reduce(tf.distribute.ReduceOp.SUM, stats)
            mean = stats[0] / stats[2]
            return mean, tf.maximum(stats[1] / stats[2] - tf.square(mean), 0.0)

        def init(mean, var):
            log_std = 0.5 * tf.math.log(var + self.epsilon)
            if forward:
                log_scale, bias = -log_std, -mean * tf.exp(-log_std)
            else:
                log_scale, bias = log_std, mean
            # Aggregation NONE: every replica assigns its copy the same global values.
            with tf.control_dependencies([self.log_scale.assign(log_scale),
                                          self.bias.assign(bias),
                                          self.initialized.assign(1)]):
                return tf.constant(True)

        if tf.executing_eagerly():
            init(*moments())
            return
        # The all-reduce (a merge_call under MirroredStrategy) cannot run in a cond branch.
        stats = moments() if ctx is not None else None
        tf.cond(self.initialized > 0, lambda: tf.constant(False),
                lambda: init(*(stats or moments())))

    def forward(self, inputs):
        self._maybe_init(inputs, forward=True)
        return inputs * tf.exp(self.log_scale) + self.bias

    def reverse(self, outputs):
        self._maybe_init(outputs, forward=False)
        return (outputs - self.bias) * tf.exp(-self.log_scale)

    def log_det_jacobian(self, inputs):
        return _batch_zeros(inputs) + tf.reduce_sum(self.log_scale)

    def get_config(self):
        config = super().get_config()
        config.update(data_init=self.data_init, epsilon=self.epsilon)
        return config


def _degrees(order, dim, seed):
    """Input degrees 1..dim: output i of a MADE depends on inputs of smaller degree."""
    if order == "left-to-right":
        return np.arange(1, dim + 1)
    if order == "right-to-left":
        return np.arange(dim, 0, -1)
    if order == "random":
        return np.random.RandomState(seed).permutation(dim) + 1
    order = np.asarray(order)
    if sorted(order.tolist()) != list(range(dim)):
        raise ValueError(f"Expected an ordering of 0..{dim - 1}. Received: order={order.tolist()}")
    return order + 1


@_register
class MADE(keras.layers.Layer):
    """Masked autoencoder for distribution estimation (Germain et al., 2015).

    A masked MLP whose output for input dimension ``i`` depends only on the inputs
    that come before ``i`` in ``order`` — an autoregressive network, usable as the
    shift/log-scale network of `RealNVP` or as the body of an autoregressive
    likelihood (e.g. followed by `MixtureLogistic` and `Discretize`).

    Args:
      hidden_dims: list of hidden layer sizes.
      units: outputs per input dimension (default 2, e.g. shift and log-scale).
      order: ``'left-to-right'``, ``'right-to-left'``, ``'random'`` (seeded) or an
        explicit ordering (list: ``order[i]`` is the position of dimension ``i``).
      hidden_order: ``'left-to-right'`` (degrees cycle through 1..d-1) or ``'random'``.
      activation: hidden activation (default ``'relu'``).
      kernel_initializer: for every masked kernel.
      seed: int for random orders (chosen at construction when None; in the config).
      with_channels: inputs are ``(batch, ..., d, channels)``: the autoregression runs over
        the ``d`` positions, each a vector of ``channels`` features (e.g. a one-hot token of
        a sequence, the network of the discrete flows).

    Input ``(batch, ..., d)`` (``(batch, ..., d, channels)`` with ``with_channels``); output
    ``(batch, ..., d, units)``.
    """

    def __init__(self, hidden_dims, units=2, order="left-to-right",
                 hidden_order="left-to-right", activation="relu", use_bias=True,
                 kernel_initializer="glorot_uniform", seed=None, with_channels=False,
                 **kwargs):
        super().__init__(**kwargs)
        if not isinstance(hidden_dims, list | tuple):
            raise TypeError("Expected a list of hidden layer sizes. Received: "
                            f"hidden_dims={hidden_dims!r} (e.g. MADE([{hidden_dims!r}]))")
        self.hidden_dims = [check_positive_int("hidden_dims", h) for h in hidden_dims]
        self.units = check_positive_int("units", units)
        if isinstance(order, str) and order not in ("left-to-right", "right-to-left", "random"):
            raise ValueError("Expected 'left-to-right', 'right-to-left', 'random' or a list. "
                             f"Received: order={order!r}")
        self.order = order if isinstance(order, str) else [int(i) for i in order]
        if hidden_order not in ("left-to-right", "random"):
            raise ValueError("Expected 'left-to-right' or 'random'. "
                             f"Received: hidden_order={hidden_order!r}")
        self.hidden_order = hidden_order
        self.activation = keras.activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.seed = random.SystemRandom().randint(0, 2**31 - 1) if seed is None else int(seed)
        self.with_channels = bool(with_channels)

    def build(self, input_shape):
        shape = tf.TensorShape(input_shape)
        if self.with_channels:
            if shape.rank is None or shape.rank < 2 or None in shape[-2:].as_list():
                raise ValueError("MADE(with_channels=True) needs inputs (batch, ..., d, "
                                 f"channels) with d and channels known. Received: {input_shape}")
            dim, channels = shape[-2], shape[-1]
        else:
            dim, channels = shape[-1], 1
        if dim is None:
            raise ValueError(f"MADE needs a known last input dimension. Received: {input_shape}")
        rng = np.random.RandomState(self.seed + 1)
        self.input_degrees = _degrees(self.order, dim, self.seed)
        degrees, masks = self.input_degrees, []
        for size in self.hidden_dims:
            if self.hidden_order == "random":
                low = min(int(degrees.min()), max(dim - 1, 1))
                hidden = rng.randint(low, max(dim - 1, 1) + 1, size=size)
            else:
                hidden = np.arange(size) % max(dim - 1, 1) + 1
            masks.append(hidden[None, :] >= degrees[:, None])
            degrees = hidden
        out_mask = self.input_degrees[None, :] > degrees[:, None]
        masks.append(np.repeat(out_mask, self.units, axis=1))
        # Each position's channels share its degree (rows position-major, as the flattening).
        masks[0] = np.repeat(masks[0], channels, axis=0)
        self.masks = [m.astype(np.float32) for m in masks]
        self.kernels, self.biases = [], []
        for i, mask in enumerate(self.masks):
            self.kernels.append(self.add_weight(
                name=f"kernel_{i}", shape=mask.shape,
                initializer=initializers.for_weight(self.kernel_initializer, f"kernel_{i}")))
            if self.use_bias:
                self.biases.append(self.add_weight(name=f"bias_{i}", shape=mask.shape[1:],
                                                   initializer="zeros"))
        super().build(input_shape)

    def call(self, inputs):
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        h = x
        if self.with_channels:  # (..., d, channels) -> (..., d * channels)
            h = tf.reshape(x, tf.concat([tf.shape(x)[:-2], [x.shape[-2] * x.shape[-1]]], 0))
            x = x[..., 0]  # (..., d): the outputs' leading shape
        for i, mask in enumerate(self.masks):
            h = tf.tensordot(h, self.kernels[i] * tf.constant(mask, h.dtype), [[-1], [0]])
            if self.use_bias:
                h = h + self.biases[i]  # (also rank 1: an unbatched sequence)
            if i < len(self.masks) - 1:
                h = self.activation(h)
        out = tf.reshape(h, tf.concat([tf.shape(x), [self.units]], 0))
        out.set_shape(x.shape.concatenate([self.units]))
        return out

    def get_config(self):
        config = super().get_config()
        config.update(hidden_dims=self.hidden_dims, units=self.units, order=self.order,
                      hidden_order=self.hidden_order,
                      activation=keras.activations.serialize(self.activation),
                      use_bias=self.use_bias,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                      seed=self.seed, with_channels=self.with_channels)
        return config


_MASKS = ("half", "checkerboard")


@_register
class RealNVP(ReversibleLayer):
    """Affine coupling layer (Dinh et al., 2017), the paper's Fig. 7.

    With a binary mask ``m`` over the last axis (1 = passed through unchanged),
    ``y = m*x + (1-m) * (x * exp(s) + t)`` where ``(t, s_raw) = network(m*x)`` and
    ``s = c * tanh(s_raw / c)`` (``c = log_scale_clip``, a soft clamp for stable
    training). ``log_det = sum((1-m) * s)``; the inverse is exact.

    Args:
      network: a Keras layer mapping ``(..., d)`` to ``(..., d, 2)`` (e.g. `MADE`) or
        ``(..., 2d)`` ([shift, log-scale]); or a list of hidden sizes for a default
        ReLU MLP whose last layer is zero-initialized (the flow starts as identity).
      mask: ``'half'`` (first ``d // 2`` features pass through) or ``'checkerboard'``
        (even features pass through).
      reverse_mask: swap the roles (stack layers with alternating masks, or insert
        a `Permutation`, so every feature gets transformed).
      log_scale_clip: the soft clamp ``c``.
    """

    def __init__(self, network, mask="half", reverse_mask=False, log_scale_clip=3.0, **kwargs):
        super().__init__(**kwargs)
        if isinstance(network, dict):
            network = deserialize_layer(network)
        if isinstance(network, list | tuple):
            self.hidden_dims = [check_positive_int("network", h) for h in network]
            self.network = None
        elif isinstance(network, keras.layers.Layer):
            self.hidden_dims, self.network = None, network
        else:
            raise TypeError("Expected a Keras layer or a list of hidden sizes. "
                            f"Received: network={network!r}")
        if mask not in _MASKS:
            raise ValueError(f"Expected mask in {_MASKS}. Received: mask={mask!r}")
        self.mask, self.reverse_mask = mask, bool(reverse_mask)
        self.log_scale_clip = float(log_scale_clip)

    def build(self, input_shape):
        dim = tf.TensorShape(input_shape)[-1]
        if dim is None or dim < 2:
            raise ValueError(f"RealNVP needs a last input axis of size >= 2. Received: "
                             f"input_shape={input_shape}")
        keep = np.arange(dim) < dim // 2 if self.mask == "half" else np.arange(dim) % 2 == 0
        if self.reverse_mask:
            keep = ~keep
        self.keep_mask = keep.astype(np.float32)
        if self.network is None:
            policy = self.dtype_policy  # the coupling MLP computes in the flow's dtype
            self.network = keras.Sequential(
                [keras.layers.Dense(h, activation="relu", dtype=policy)
                 for h in self.hidden_dims]
                + [keras.layers.Dense(2 * dim, kernel_initializer="zeros", dtype=policy)],
                name="coupling_mlp")
        if not self.network.built:
            self.network.build(input_shape)
        super().build(input_shape)

    def _shift_and_log_scale(self, masked):
        out = self.network(masked)
        if out.shape.rank == masked.shape.rank + 1:
            if out.shape[-1] != 2:
                raise ValueError(f"RealNVP's network must output (..., d, 2). Got {out.shape}")
            shift, raw = tf.unstack(out, axis=-1)
        else:
            shift, raw = tf.split(out, 2, axis=-1)
        clip = self.log_scale_clip
        return shift, clip * tf.tanh(raw / clip)

    def forward(self, inputs):
        keep = tf.constant(self.keep_mask, inputs.dtype)
        shift, log_scale = self._shift_and_log_scale(inputs * keep)
        return inputs * keep + (1.0 - keep) * (inputs * tf.exp(log_scale) + shift)

    def reverse(self, outputs):
        return self.reverse_and_log_det_jacobian(outputs)[0]

    def log_det_jacobian(self, inputs):
        keep = tf.constant(self.keep_mask, inputs.dtype)
        _, log_scale = self._shift_and_log_scale(inputs * keep)
        return tf.reduce_sum((1.0 - keep) * log_scale, axis=-1)

    def reverse_and_log_det_jacobian(self, outputs):
        """``(reverse(y), log_det_jacobian(reverse(y)))`` with one network pass."""
        outputs = tf.convert_to_tensor(outputs)
        keep = tf.constant(self.keep_mask, outputs.dtype)
        shift, log_scale = self._shift_and_log_scale(outputs * keep)
        inputs = outputs * keep + (1.0 - keep) * (outputs - shift) * tf.exp(-log_scale)
        return inputs, tf.reduce_sum((1.0 - keep) * log_scale, axis=-1)

    def get_config(self):
        config = super().get_config()
        network = (self.hidden_dims if self.hidden_dims is not None
                   else serialize_layer(self.network))
        config.update(network=network, mask=self.mask, reverse_mask=self.reverse_mask,
                      log_scale_clip=self.log_scale_clip)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
