"""Covariance functions (kernels) and mean functions for Gaussian-process layers.

Each is a Keras layer, so its hyperparameters are variables that train, save and
load with the model that uses it. Positive hyperparameters are stored
unconstrained and read through ``softplus`` (`constraints.Softplus`), so an
optimizer can move them freely (as in GPflow and GPyTorch).

Kernels take ``amplitude`` (σ, the output scale: the prior variance is σ²) and
``length_scale`` (ℓ: a scalar, or one per input dimension for automatic relevance
determination, ARD), trainable unless ``trainable=False``. Calling a kernel on
``(x1, x2)`` (two ``[n1, d]`` and ``[n2, d]`` tensors, or ``x1`` alone for
``k(x1, x1)``) returns the ``[n1, n2]`` covariance matrix; ``kernel.diag(x)``
returns ``k(x_i, x_i)`` as ``[n]``. With ``r² = Σ_j (x1_j - x2_j)² / ℓ_j²``:

- `ExponentiatedQuadratic` (the default): ``σ² exp(-r²/2)``
- `Matern12`: ``σ² exp(-r)``
- `Matern32`: ``σ² (1 + √3 r) exp(-√3 r)``
- `Matern52`: ``σ² (1 + √5 r + 5r²/3) exp(-√5 r)``
- `Linear`: ``σ² Σ_j x1_j x2_j / ℓ_j²``

These match scikit-learn's ``ConstantKernel(σ²) * RBF/Matern(ℓ)`` and GPflow's
kernels of the same names. Kernels compute in the dtype of their inputs (the
hyperparameters are cast), so a float32 kernel serves a float64 layer. Under a mixed
precision policy kernels and mean functions keep the policy's variable dtype (float32)
as their compute dtype too (`full_precision`), so their hyperparameters are never
read in 16 bits: the GP layers using them compute in float32.

Mean functions map ``[n, d]`` inputs to ``[n]`` (shared by all output units) or
``[n, units]``: `ZeroMean` (the default), `ConstantMean`, `LinearMean`.
"""

import math

import numpy as np
import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import constraints
from bayes_planet.layers._registry import register as _register

__all__ = [
    "ConstantMean",
    "ExponentiatedQuadratic",
    "Kernel",
    "Linear",
    "LinearMean",
    "Matern12",
    "Matern32",
    "Matern52",
    "MeanFunction",
    "ZeroMean",
    "get",
    "inverse_softplus",
    "serialize",
]


def _positive(name, value, vector_ok=True):
    """A positive float, or (if ``vector_ok``) a list of positive floats."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    ok = (arr is not None and arr.size > 0 and arr.ndim <= (1 if vector_ok else 0)
          and np.all(np.isfinite(arr)) and np.all(arr > 0))
    if not ok:
        what = "a positive number or a vector of them" if vector_ok else "a positive number"
        raise ValueError(f"Expected {what}. Received: {name}={value!r}")
    return float(arr) if arr.ndim == 0 else [float(v) for v in arr]


def inverse_softplus(x):
    """``y`` with ``softplus(y) = x`` (numpy, float64), for initializing raw variables."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > 30.0, x, np.log(np.expm1(np.minimum(x, 30.0))))


def full_precision(kwargs):
    """Layer ``kwargs`` whose ``dtype`` is a variable dtype, never a mixed policy.

    For layers whose numerics need at least float32 (kernel matrices and their Cholesky
    factors): an unset ``dtype`` becomes the global policy's variable dtype (float32
    under ``mixed_float16``/``mixed_bfloat16``, else the policy's dtype) and a mixed
    policy passed as ``dtype`` becomes its variable dtype, so the layer computes in it.
    """
    dtype = kwargs.get("dtype")
    if dtype is None:
        dtype = keras.mixed_precision.global_policy()
    if isinstance(dtype, str):
        dtype = keras.mixed_precision.Policy(dtype)
    if isinstance(dtype, keras.mixed_precision.Policy):
        dtype = dtype.variable_dtype
    return {**kwargs, "dtype": dtype}


def _as_matrix(x, name, dtype):
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        x = tf.cast(x, dtype)
    if x.shape.rank != 2:
        raise ValueError(
            f"Expected a rank-2 [num_points, num_features] input. Received: {name} with "
            f"shape {x.shape}"
        )
    return x


class Kernel(keras.layers.Layer):
    """Base class of covariance functions: ``kernel(x1, x2) -> [n1, n2]``.

    Args:
      amplitude: positive float, the output scale σ (prior variance σ²).
      length_scale: positive float, or a list with one per input dimension (ARD).
      trainable: whether the hyperparameters train (Keras layer argument).
      dtype: variable dtype (Keras layer argument).
    Subclasses implement ``_matrix(x1, x2)`` (``x2`` None means ``x1``) and ``diag``.
    """

    def __init__(self, amplitude=1.0, length_scale=1.0, **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**full_precision(kwargs))
        self._amplitude_init = _positive("amplitude", amplitude, vector_ok=False)
        self._length_scale_init = _positive("length_scale", length_scale)
        self._transform = constraints.Softplus()
        # Hyperparameter shapes do not depend on the inputs: create them now.
        self.raw_amplitude = self._raw_weight("amplitude", self._amplitude_init)
        self.raw_length_scale = self._raw_weight("length_scale", self._length_scale_init)
        self.built = True

    def _raw_weight(self, name, value):
        raw = inverse_softplus(value)
        return self.add_weight(
            name=name, shape=raw.shape, dtype=self.dtype,
            initializer=keras.initializers.Constant(raw), trainable=True,
        )

    @property
    def amplitude(self):
        """σ, the output scale (a positive scalar Tensor)."""
        return self._transform(tf.convert_to_tensor(self.raw_amplitude))

    @property
    def length_scale(self):
        """ℓ, a positive scalar or ``[d]`` Tensor."""
        return self._transform(tf.convert_to_tensor(self.raw_length_scale))

    def _variance(self, dtype):
        return tf.square(tf.cast(self.amplitude, dtype))

    def _scaled(self, x):
        ls = tf.cast(self.length_scale, x.dtype)
        if ls.shape.rank == 1 and x.shape[-1] is not None and x.shape[-1] != ls.shape[0]:
            raise ValueError(
                f"{type(self).__name__} has {ls.shape[0]} ARD length scales but the inputs "
                f"have {x.shape[-1]} features."
            )
        return x / ls

    def call(self, x1, x2=None):
        if x2 is None and isinstance(x1, list | tuple):
            if len(x1) != 2:
                raise ValueError(f"Expected (x1, x2). Received: {len(x1)} inputs")
            x1, x2 = x1
        x1 = _as_matrix(x1, "x1", self.dtype)
        x2 = None if x2 is None else tf.cast(_as_matrix(x2, "x2", x1.dtype), x1.dtype)
        return self._matrix(x1, x2)

    def matrix(self, x1, x2=None):
        """``k(x1, x2)`` as ``[n1, n2]`` (same as calling the layer)."""
        return self(x1) if x2 is None else self(x1, x2)

    def diag(self, x):
        """``[n]`` prior variances ``k(x_i, x_i)``."""
        raise NotImplementedError

    def _matrix(self, x1, x2):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config.update(amplitude=self._amplitude_init, length_scale=self._length_scale_init)
        return config


class _Stationary(Kernel):
    """A kernel of the scaled distance r: ``σ² profile(r²)``."""

    def _squared_distance(self, x1, x2):
        a = self._scaled(x1)
        b = a if x2 is None else self._scaled(x2)
        a2 = tf.reduce_sum(tf.square(a), -1)
        b2 = a2 if x2 is None else tf.reduce_sum(tf.square(b), -1)
        r2 = a2[:, None] + b2[None, :] - 2.0 * tf.matmul(a, b, transpose_b=True)
        r2 = tf.maximum(r2, 0.0)  # Round-off from the expansion.
        if x2 is None:  # Exact zeros on the diagonal of k(x, x).
            r2 = tf.linalg.set_diag(r2, tf.zeros_like(a2))
        return r2

    def _matrix(self, x1, x2):
        r2 = self._squared_distance(x1, x2)
        return self._variance(x1.dtype) * self._profile(r2)

    def diag(self, x):
        x = _as_matrix(x, "x", self.dtype)
        return self._variance(x.dtype) * tf.ones(tf.shape(x)[:1], x.dtype)

    def _profile(self, r2):
        raise NotImplementedError


def _safe_sqrt(r2):
    """sqrt with a zero (not NaN/inf) gradient at 0."""
    positive = r2 > 0
    return tf.where(positive, tf.sqrt(tf.where(positive, r2, tf.ones_like(r2))), 0.0)


@_register
class ExponentiatedQuadratic(_Stationary):
    """Exponentiated quadratic (squared exponential, RBF): ``σ² exp(-r²/2)``.

    Infinitely smooth sample paths; the default kernel of every GP layer.
    Takes the arguments of `Kernel`.
    """

    def _profile(self, r2):
        return tf.exp(-0.5 * r2)


@_register
class Matern12(_Stationary):
    """Matérn ν=1/2 (exponential, Ornstein–Uhlenbeck): ``σ² exp(-r)``. Args: see `Kernel`."""

    def _profile(self, r2):
        return tf.exp(-_safe_sqrt(r2))


@_register
class Matern32(_Stationary):
    """Matérn ν=3/2: ``σ² (1 + √3 r) exp(-√3 r)``; once-differentiable paths. Args: `Kernel`."""

    def _profile(self, r2):
        r = math.sqrt(3.0) * _safe_sqrt(r2)
        return (1.0 + r) * tf.exp(-r)


@_register
class Matern52(_Stationary):
    """Matérn ν=5/2: ``σ² (1 + √5 r + 5r²/3) exp(-√5 r)``. Args: see `Kernel`."""

    def _profile(self, r2):
        r = math.sqrt(5.0) * _safe_sqrt(r2)
        return (1.0 + r + 5.0 / 3.0 * r2) * tf.exp(-r)


@_register
class Linear(Kernel):
    """Linear (dot-product) kernel ``σ² Σ_j x1_j x2_j / ℓ_j²``: Bayesian linear regression.

    With a scalar ``length_scale`` only ``σ/ℓ`` matters; the ARD form weighs each
    input dimension. Rank ≤ d, so an exact GP with it needs observation noise.
    Takes the arguments of `Kernel`.
    """

    def _matrix(self, x1, x2):
        a = self._scaled(x1)
        b = a if x2 is None else self._scaled(x2)
        return self._variance(x1.dtype) * tf.matmul(a, b, transpose_b=True)

    def diag(self, x):
        x = _as_matrix(x, "x", self.dtype)
        return self._variance(x.dtype) * tf.reduce_sum(tf.square(self._scaled(x)), -1)


class MeanFunction(keras.layers.Layer):
    """Base class of mean functions: ``[n, d] -> [n]`` or ``[n, units]``."""

    def __init__(self, **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**full_precision(kwargs))

    def call(self, inputs):
        return self._mean(_as_matrix(inputs, "inputs", self.dtype))


@_register
class ZeroMean(MeanFunction):
    """``m(x) = 0``: the default prior mean of every GP layer."""

    def _mean(self, x):
        return tf.zeros(tf.shape(x)[:1], x.dtype)


@_register
class ConstantMean(MeanFunction):
    """``m(x) = c`` with a (trainable by default) scalar ``c`` initialized at ``value``."""

    def __init__(self, value=0.0, **kwargs):
        super().__init__(**kwargs)
        self.value = float(value)
        self.constant = self.add_weight(
            name="constant", shape=(), dtype=self.dtype,
            initializer=keras.initializers.Constant(self.value), trainable=True,
        )
        self.built = True

    def _mean(self, x):
        return tf.cast(self.constant, x.dtype) * tf.ones(tf.shape(x)[:1], x.dtype)

    def get_config(self):
        return {**super().get_config(), "value": self.value}


@_register
class LinearMean(MeanFunction):
    """``m(x) = x W``, ``W: [d, units]``, for the hidden layers of a deep GP.

    The default ``'identity'`` initializer starts ``W`` at the identity (or its
    truncation/padding when ``d != units``), the mean function of Salimbeni &
    Deisenroth (2017) that keeps the deep GP near its input at initialization.
    Pass ``trainable=False`` to keep it fixed as they do.

    Args:
      units: output dimension (the GP layer's ``units``).
      kernel_initializer: Keras initializer for ``W``.
    """

    def __init__(self, units, kernel_initializer="identity", **kwargs):
        super().__init__(**kwargs)
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise ValueError(f"Expected a positive integer. Received: units={units!r}")
        self.units = units
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        input_dim = tf.TensorShape(input_shape)[-1]
        self.kernel = self.add_weight(
            name="kernel", shape=(input_dim, self.units), dtype=self.dtype,
            initializer=self.kernel_initializer, trainable=True,
        )
        super().build(input_shape)

    def _mean(self, x):
        return tf.matmul(x, tf.cast(self.kernel, x.dtype))

    def get_config(self):
        return {
            **super().get_config(), "units": self.units,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


_CLASSES = {cls.__name__: cls for cls in (
    ExponentiatedQuadratic, Matern12, Matern32, Matern52, Linear,
    ZeroMean, ConstantMean, LinearMean,
)}
_ALIASES = {
    "exponentiated_quadratic": ExponentiatedQuadratic,
    "matern12": Matern12,
    "matern32": Matern32,
    "matern52": Matern52,
    "linear": Linear,
    "zeros": ZeroMean,
    "constant": ConstantMean,
}


def get(identifier, dtype=None):
    """Resolves a kernel or mean function.

    Accepts None (returned as is), a Keras layer instance, an alias
    (``'exponentiated_quadratic'``, ``'matern12'``, ``'matern32'``, ``'matern52'``,
    ``'linear'``, ``'zeros'``, ``'constant'``; built with ``dtype``), or a serialized
    config dict.
    """
    if identifier is None or isinstance(identifier, keras.layers.Layer):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _ALIASES:
            raise ValueError(
                f"Unknown kernel or mean function. Expected one of {sorted(_ALIASES)}. "
                f"Received: {identifier!r}"
            )
        return _ALIASES[identifier](dtype=dtype) if dtype else _ALIASES[identifier]()
    if isinstance(identifier, dict):
        # Resolve our own classes by name: the legacy SavedModel loader does not look
        # up registered names ('bayes_planet.layers>...').
        cls = _CLASSES.get(identifier.get("class_name"))
        if cls is not None:
            return cls.from_config(identifier["config"])
        return keras.saving.deserialize_keras_object(identifier)
    raise TypeError(
        "Could not interpret kernel or mean function. Expected a Keras layer, an alias or "
        f"a config dict. Received: {identifier!r}"
    )


def serialize(layer):
    """Config dict of a kernel or mean function (None stays None).

    Leaves out Keras' ``build_config``: these layers build on their first call.
    """
    if layer is None:
        return None
    config = keras.saving.serialize_keras_object(layer)
    config.pop("build_config", None)
    return config
