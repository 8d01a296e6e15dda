"""Spectral normalization with a norm bound (Miyato et al., 2018; SNGP, Liu et al., 2020).

SNGP makes a deterministic network *distance aware* by bounding each hidden layer's
Lipschitz constant: its kernel ``W`` is replaced by ``W / max(1, σ̂ / c)``, where σ̂
estimates ``W``'s largest singular value by power iteration and ``c`` is the norm bound
(``norm_multiplier``), so the normalized operator has spectral norm ``min(σ, c)``.

``SpectralNormalization`` normalizes the kernel as a matrix (``[-1, out]``: a Dense
kernel; for a convolution that is the reshaped filter bank, Miyato et al.'s
approximation). ``SpectralNormalizationConv2D`` runs the power iteration on the
convolution *operator* itself (images of the layer's input size; Gouk et al., 2021), as
edward2's class of the same name, so its bound holds for the map the layer computes.

Unlike edward2 and ``keras.layers.SpectralNormalization``, which overwrite the wrapped
layer's kernel variable with its normalized value, the variable here keeps the raw
kernel and each call computes ``op(x, W / max(1, σ̂ / c))``: the gradient flows through
the normalization (σ̂ = uᵀ W v with u, v held constant, as in Miyato et al.), the
variable is never assigned by the forward pass, and inference normalizes too. The
power-iteration vector ``u`` is a non-trainable weight (seeded with ``seed``), updated
only in training calls (``training=True``, as in ``model.fit``); every call derives
``v = normalize(Wᵀ u)`` from it, so ``σ̂ = ‖Wᵀ u‖`` is a lower bound on σ that the
iterations tighten.
"""

import math
import numbers

import tensorflow as tf

from bayes_planet import seeds
from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, check_positive_int

__all__ = ["SpectralNormalization", "SpectralNormalizationConv2D"]


def _check_norm_multiplier(value):
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"Expected a positive number. Received: norm_multiplier={value!r}")
    return float(value)


def _check_seed(seed):
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"Expected a non-negative integer or None. Received: seed={seed!r}")
    return seed


@_register
class SpectralNormalization(keras.layers.Wrapper):
    """Bounds the spectral norm of a layer's kernel by ``norm_multiplier`` (SNGP).

    Computes the wrapped layer with its kernel ``W`` replaced by
    ``W / max(1, σ̂ / norm_multiplier)``, σ̂ the power-iteration estimate of the largest
    singular value of ``W`` reshaped to ``[-1, units]`` (see the module docstring). Each
    training call runs ``power_iterations`` steps from the stored vector ``u`` and stores
    the result; other calls reuse ``u``.

    Takes the arguments of ``keras.layers.SpectralNormalization`` (same order), plus keyword-only:

    Args:
      layer: a built or unbuilt Keras layer with a ``kernel`` variable (``Dense``,
        ``EinsumDense``, convolutions), not a Bayesian layer (refused: its weights are
        sampled, its kernel a posterior or shared by sampled members).
      power_iterations: iterations per training call (a positive integer; SNGP uses 1).
      norm_multiplier: the bound ``c`` on the spectral norm (edward2's default 0.95;
        uncertainty-baselines' ResNets use 6).
      seed: int or None, seeds the initial ``u``.

    Input and output shapes: the wrapped layer's.
    """

    def __init__(self, layer, power_iterations=1, *, norm_multiplier=0.95, seed=None,
                 **kwargs):
        self._check_layer(layer)
        if isinstance(layer, BayesianLayer):
            raise ValueError(
                "Expected a layer with a point-estimate kernel, not a Bayesian layer (its "
                f"weights are sampled). Received: layer={layer.name!r} ({type(layer).__name__})")
        kwargs.setdefault("dtype", layer.dtype_policy)  # Compute in the wrapped layer's dtype.
        super().__init__(layer, **kwargs)
        self.power_iterations = check_positive_int("power_iterations", power_iterations)
        self.norm_multiplier = _check_norm_multiplier(norm_multiplier)
        self.seed = _check_seed(seed)

    @classmethod
    def _check_layer(cls, layer):
        if not isinstance(layer, keras.layers.Layer):
            raise ValueError(f"Expected a Keras layer with a kernel. Received: layer={layer!r}")

    def build(self, input_shape):
        super().build(input_shape)
        kernel = getattr(self.layer, "kernel", None)
        if not _compat.is_variable(kernel):
            raise ValueError(
                f"Expected a layer whose kernel is a variable. Received: layer={self.layer.name!r} "
                f"({type(self.layer).__name__}) with kernel={type(kernel).__name__}")
        initializer = keras.initializers.RandomNormal(
            seed=None if self.seed is None else seeds.int_seed(self.seed, "spectral_norm/u"))
        self.u = self.add_weight(
            name="u", shape=self._u_shape(tf.TensorShape(input_shape)), dtype=self._dtype(),
            initializer=initializer, trainable=False, **_compat.NO_AUTOCAST,
            **_compat.ONLY_FIRST_REPLICA)
        self.built = True

    def _dtype(self):
        """The power iteration's dtype: the kernel variable's (float32 under mixed precision)."""
        return tf.as_dtype(self.layer.variable_dtype or "float32")

    def _u_shape(self, input_shape):
        del input_shape
        return [1, int(self.layer.kernel.shape[-1])]

    def _forward(self, v, kernel):
        """``A v`` for the operator A of the kernel (``v`` shaped like ``_adjoint``'s output)."""
        return tf.matmul(v, tf.reshape(kernel, [-1, kernel.shape[-1]]))

    def _adjoint(self, u, kernel):
        """``Aᵀ u``."""
        return tf.matmul(u, tf.reshape(kernel, [-1, kernel.shape[-1]]), transpose_b=True)

    def normalized_kernel(self, training=False):
        """``W / max(1, σ̂ / norm_multiplier)`` in the kernel's variable dtype.

        With ``training=True`` first runs ``power_iterations`` steps and stores ``u``.
        """
        if not self.built:
            raise ValueError("Expected a built layer: call it on an input first.")
        dtype = self._dtype()
        kernel = tf.cast(self.layer.kernel, dtype)
        fixed = tf.stop_gradient(kernel)
        u = _normalize(tf.convert_to_tensor(self.u))
        if training:
            for _ in range(self.power_iterations):
                v = _normalize(self._adjoint(u, fixed))
                u = _normalize(self._forward(v, fixed))
            self.u.assign(u)
        v = tf.stop_gradient(_normalize(self._adjoint(u, fixed)))
        sigma = tf.reduce_sum(tf.stop_gradient(u) * self._forward(v, kernel))
        return kernel / tf.maximum(tf.constant(1.0, dtype), sigma / self.norm_multiplier)

    def call(self, inputs, training=None):
        kernel = tf.cast(self.normalized_kernel(training=bool(training)),
                         self.layer.compute_dtype)
        # The wrapped layer computes with the normalized kernel; its variable is untouched.
        with _compat.kernel_replaced(self.layer, kernel):
            return self.layer(inputs)

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)

    def get_config(self):
        config = super().get_config()
        # tf-keras >= 2.16 adds the built inner layer's `build_config`; the wrapper builds its
        # layer itself, so the config is the same built or not (and round-trips).
        if isinstance(config.get("layer"), dict):
            config["layer"].pop("build_config", None)
        config.update(power_iterations=self.power_iterations,
                      norm_multiplier=self.norm_multiplier, seed=self.seed)
        return config


def _normalize(t):
    """``t / ‖t‖`` over all entries (one vector, whatever its shape)."""
    return tf.reshape(tf.math.l2_normalize(tf.reshape(t, [1, -1])), tf.shape(t))


@_register
class SpectralNormalizationConv2D(SpectralNormalization):
    """`SpectralNormalization` of a ``Conv2D`` layer's convolution operator.

    The power iteration runs on the linear map the layer computes on one image of the
    input's size (strides, padding and dilation included): ``u`` has the shape of one
    output ``[1, H', W', filters]``, ``A v`` is the layer's convolution and ``Aᵀ u`` its
    transpose (the convolution's gradient), as edward2's ``SpectralNormalizationConv2D``.
    So the normalized layer, without its bias and activation, has operator norm
    ``min(σ, norm_multiplier)`` on inputs of that size. The input's spatial size must
    be known when the layer is built.

    Takes the arguments of `SpectralNormalization`; ``layer`` is a ``keras.layers.Conv2D`` (not a
    transposed or grouped convolution).
    """

    @classmethod
    def _check_layer(cls, layer):
        if (not isinstance(layer, keras.layers.Conv2D)
                or isinstance(layer, keras.layers.Conv2DTranspose)):
            raise ValueError(f"Expected a keras.layers.Conv2D. Received: layer={layer!r}")
        if layer.groups != 1:
            raise ValueError(f"Expected an ungrouped convolution. Received: groups={layer.groups}")

    def _u_shape(self, input_shape):
        one = tf.TensorShape([1]).concatenate(input_shape[1:])
        if not one.is_fully_defined():
            raise ValueError("SpectralNormalizationConv2D needs the input's spatial size. "
                             f"Received: input_shape={input_shape}")
        self._v_shape = one.as_list()
        return _compat.shape_list(self.layer.compute_output_shape(one))

    def _forward(self, v, kernel):
        return self.layer.convolution_op(v, kernel)

    def _adjoint(self, u, kernel):
        # The transpose of a linear map is its vector-Jacobian product (at any point).
        v = tf.zeros(self._v_shape, u.dtype)
        with tf.GradientTape() as tape:
            tape.watch(v)
            out = self._forward(v, kernel)
        return tape.gradient(out, v, output_gradients=u)
