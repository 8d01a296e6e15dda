"""Reversible residual blocks (Gomez et al., 2017): backprop without stored activations.

A `RevNetBlock` splits its input's last axis into halves ``(x1, x2)`` and computes

    y1 = x1 + f(x2),    y2 = x2 + g(y1)

which is exactly invertible (``x2 = y2 - g(y1)``, ``x1 = y1 - f(x2)``) and volume
preserving (``log_det_jacobian = 0``), so it is also a flow layer (Bayesian Layers,
Sec. 2.4). Its gradient is a ``tf.custom_gradient``: the backward pass
reconstructs the block's input from its output and recomputes ``f`` and ``g``
under a fresh tape, so none of their intermediate activations are kept for
backprop. A block keeps only its output; `RevNetSequence` runs a whole stack of
blocks under one custom gradient that keeps only the *final* output and
reconstructs every block's input on the way down — memory constant in depth.
Gradients equal ordinary backprop up to float round-off of the reconstruction.
"""

import tensorflow as tf

# In eager mode `tf.custom_gradient` runs the forward function while the outer tapes
# are recording, so they would keep every intermediate activation alive even though
# the custom gradient never uses them. Pausing the tapes (TF's internal
# `record.stop_recording`, the same context `custom_gradient` uses in graph mode) is
# what makes the memory saving real in eager mode.
from tensorflow.python.eager import record as _record

from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import check_positive_int
from bayes_planet.layers.flows import (
    ReversibleLayer,
    deserialize_layer,
    serialize_layer,
)

__all__ = ["RevNetBlock", "RevNetSequence"]


def _gradients_by_recomputation(step, unstep, x):
    """``step(x)`` whose gradient reconstructs the input with ``unstep(y)``.

    ``step`` and ``unstep`` are exact inverses; ``tf.custom_gradient`` passes the
    variables ``step`` reads to ``grad``. Only the output is referenced by the
    backward pass.
    """

    @tf.custom_gradient
    def run(inputs):
        with _record.stop_recording():
            outputs = step(inputs)

        def grad(d_outputs, variables=None):
            variables = list(variables or [])
            rebuilt = tf.stop_gradient(unstep(outputs))
            with tf.GradientTape() as tape:
                tape.watch(rebuilt)
                recomputed = step(rebuilt)
            grads = tape.gradient(recomputed, [rebuilt] + variables,
                                  output_gradients=d_outputs)
            var_grads = [tf.zeros_like(v) if g is None else g
                         for v, g in zip(variables, grads[1:], strict=True)]
            return _all_at_once(grads[0], var_grads)

        return outputs, grad

    return run(x)


def _all_at_once(d_inputs, var_grads):
    """The gradients, each released only when all of them are computed.

    The backward pass re-reads the variables to recompute the blocks. Inside a
    ``tf.function`` an optimizer may apply one variable's gradient as soon as that
    gradient exists, and without this barrier some traces scheduled an update before
    the recomputation had read the variable (another variable's gradient then used
    the *updated* weights: a different, wrong step in about 1 trace out of 10).
    """
    with tf.control_dependencies([d_inputs, *var_grads]):
        return tf.identity(d_inputs), [tf.identity(g) for g in var_grads]


def _default_residual(dim, hidden_units, name, dtype):
    return keras.Sequential([keras.layers.Dense(hidden_units, activation="relu", dtype=dtype),
                             keras.layers.Dense(dim, dtype=dtype)], name=name)


@_register
class RevNetBlock(ReversibleLayer):
    """Reversible residual block ``y1 = x1 + f(x2), y2 = x2 + g(y1)``.

    Args:
      f, g: Keras layers mapping ``(..., d)`` to ``(..., d)`` for inputs of last
        axis ``2d``; when None, a ReLU MLP with ``hidden_units`` hidden units each.
      hidden_units: width of the default ``f``/``g``.
      recompute: True (default): custom gradient reconstructing activations;
        False: ordinary backprop (for comparison).

    Input ``(batch, ..., 2d)``; output same shape. ``reverse`` is the exact inverse
    and ``log_det_jacobian`` is 0, so a `RandomVariable` input is transformed too.
    """

    def __init__(self, f=None, g=None, hidden_units=64, recompute=True, **kwargs):
        super().__init__(**kwargs)
        self.f = deserialize_layer(f) if isinstance(f, dict) else f
        self.g = deserialize_layer(g) if isinstance(g, dict) else g
        self._given = (f is not None, g is not None)
        self.hidden_units = check_positive_int("hidden_units", hidden_units)
        self.recompute = bool(recompute)

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        dim = input_shape[-1]
        if dim is None or dim % 2:
            raise ValueError("RevNetBlock splits the last axis in half, so it must be even. "
                             f"Received: input_shape={input_shape}")
        half = input_shape[:-1].concatenate([dim // 2])
        if self.f is None:
            self.f = _default_residual(dim // 2, self.hidden_units, "f", self.dtype_policy)
        if self.g is None:
            self.g = _default_residual(dim // 2, self.hidden_units, "g", self.dtype_policy)
        for net in (self.f, self.g):
            if not net.built:
                net.build(half)
        super().build(input_shape)

    def _step(self, x):
        x1, x2 = tf.split(x, 2, axis=-1)
        y1 = x1 + self.f(x2)
        y2 = x2 + self.g(y1)
        return tf.concat([y1, y2], axis=-1)

    def reverse(self, outputs):
        y1, y2 = tf.split(tf.convert_to_tensor(outputs), 2, axis=-1)
        x2 = y2 - self.g(y1)
        x1 = y1 - self.f(x2)
        return tf.concat([x1, x2], axis=-1)

    def forward(self, inputs):
        if not self.recompute:
            return self._step(inputs)
        return _gradients_by_recomputation(self._step, self.reverse, inputs)

    def log_det_jacobian(self, inputs):
        return tf.zeros(tf.shape(inputs)[:-1], inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            f=serialize_layer(self.f) if self._given[0] else None,
            g=serialize_layer(self.g) if self._given[1] else None,
            hidden_units=self.hidden_units, recompute=self.recompute)
        return config


@_register
class RevNetSequence(ReversibleLayer):
    """A stack of `RevNetBlock`s backpropagated with memory constant in depth.

    The forward pass keeps only the stack's output; the backward pass walks the
    blocks from the top, reconstructing each block's input from its output and
    recomputing that block alone (Gomez et al., 2017, Alg. 1).

    Args:
      blocks: a list of `RevNetBlock`s (their own ``recompute`` is not used), or
      num_blocks: with ``hidden_units``, that many default blocks.
    """

    def __init__(self, blocks=None, num_blocks=None, hidden_units=64, **kwargs):
        super().__init__(**kwargs)
        if (blocks is None) == (num_blocks is None):
            raise ValueError("Pass exactly one of blocks or num_blocks. Received: "
                             f"blocks={blocks!r}, num_blocks={num_blocks!r}")
        self.num_blocks = None if num_blocks is None else check_positive_int(
            "num_blocks", num_blocks)
        self.hidden_units = check_positive_int("hidden_units", hidden_units)
        if blocks is None:
            blocks = [RevNetBlock(hidden_units=self.hidden_units, name=f"block_{i}",
                                  dtype=self.dtype_policy)
                      for i in range(self.num_blocks)]
        self.blocks = [deserialize_layer(b) if isinstance(b, dict) else b for b in blocks]
        self._given_blocks = num_blocks is None

    def build(self, input_shape):
        for block in self.blocks:
            if not block.built:
                block.build(input_shape)
        super().build(input_shape)

    def _step(self, x):
        for block in self.blocks:
            x = block._step(x)
        return x

    def forward(self, inputs):
        return _stack_with_recomputation(self.blocks, inputs)

    def reverse(self, outputs):
        x = tf.convert_to_tensor(outputs)
        for block in reversed(self.blocks):
            x = block.reverse(x)
        return x

    def log_det_jacobian(self, inputs):
        return tf.zeros(tf.shape(inputs)[:-1], inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(blocks=[serialize_layer(b) for b in self.blocks]
                      if self._given_blocks else None,
                      num_blocks=self.num_blocks, hidden_units=self.hidden_units)
        return config


def _stack_with_recomputation(blocks, x):
    @tf.custom_gradient
    def run(inputs):
        outputs = inputs
        with _record.stop_recording():
            for block in blocks:
                outputs = block._step(outputs)

        def grad(d_outputs, variables=None):
            variables = list(variables or [])
            index = {id(v): i for i, v in enumerate(variables)}
            var_grads = [None] * len(variables)
            y, dy = outputs, d_outputs
            for block in reversed(blocks):
                x_rebuilt = tf.stop_gradient(block.reverse(y))
                block_vars = [variables[index[id(v)]] for v in map(
                    _compat.tf_variable, block.trainable_variables) if id(v) in index]
                with tf.GradientTape() as tape:
                    tape.watch(x_rebuilt)
                    y_re = block._step(x_rebuilt)
                grads = tape.gradient(y_re, [x_rebuilt] + block_vars, output_gradients=dy)
                for v, g in zip(block_vars, grads[1:], strict=True):
                    i = index[id(v)]
                    if g is not None:
                        var_grads[i] = g if var_grads[i] is None else var_grads[i] + g
                y, dy = x_rebuilt, grads[0]
            return _all_at_once(dy, [tf.zeros_like(v) if g is None else g
                                     for v, g in zip(variables, var_grads, strict=True)])

        return outputs, grad

    return run(x)
