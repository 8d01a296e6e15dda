"""Random Fourier features: a GP as a Bayesian linear model on random features.

For a stationary kernel ``k(x, x') = σ² ρ((x - x')/ℓ)`` Bochner's theorem gives
``k(x, x') = σ² E_ω[cos(ωᵀ(x - x')/ℓ)]`` with ω drawn from the kernel's spectral
density, so with ``D`` frequencies ``ω_j`` and phases ``b_j ~ U(0, 2π)``::

    φ(x) = σ √(2/D) cos(xᵀΩ/ℓ + b),     φ(x)ᵀφ(x') → k(x, x')  (error O(1/√D))

(Rahimi & Recht, 2007). A GP with that kernel is then ``f(x) = φ(x)ᵀ W`` with
``W ~ N(0, I)``; `RandomFourierFeatures` puts a variational posterior on ``W``
(Bayesian Layers, Sec. 2.2: "projection approximations", KL on the weights).
"""

import numpy as np
import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, kernels, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, check_positive_int
from bayes_planet.layers.dense import DenseLocalReparameterization
from bayes_planet.layers.initializers import DistributionInitializer

__all__ = ["RandomFourierFeatures", "add_fourier_weights", "fourier_features",
           "sample_frequencies"]


# Spectral densities: standard normal (EQ) or multivariate Student-t with 2ν degrees
# of freedom (Matérn ν), in the length-scale-1 parameterization of `kernels`.
_DEGREES_OF_FREEDOM = {kernels.Matern12: 1.0, kernels.Matern32: 3.0, kernels.Matern52: 5.0}


def sample_frequencies(covariance_fn, input_dim, num_features, rng):
    """``[input_dim, num_features]`` frequencies from the kernel's spectral density."""
    normal = rng.standard_normal((input_dim, num_features))
    if isinstance(covariance_fn, kernels.ExponentiatedQuadratic):
        return normal
    df = _DEGREES_OF_FREEDOM.get(type(covariance_fn))
    if df is None:
        raise ValueError(
            "RandomFourierFeatures needs a stationary kernel with a known spectral density "
            "(ExponentiatedQuadratic, Matern12, Matern32, Matern52). Received: "
            f"covariance_fn={type(covariance_fn).__name__}"
        )
    return normal / np.sqrt(rng.chisquare(df, size=(1, num_features)) / df)


def add_fourier_weights(layer, covariance_fn, input_dim, num_features, rng):
    """The non-trainable ``(frequencies [input_dim, D], phases [D])`` weights of ``layer``.

    Frequencies from the spectral density of ``covariance_fn`` (`sample_frequencies`),
    phases ``U(0, 2π)``, both drawn from the numpy Generator ``rng``.
    """
    omega = sample_frequencies(covariance_fn, int(input_dim), num_features, rng)
    phase = rng.uniform(0.0, 2.0 * np.pi, size=(num_features,))
    frequencies = layer.add_weight(
        name="frequencies", shape=omega.shape, trainable=False,
        initializer=lambda shape, dtype=None: tf.constant(omega, dtype))
    phases = layer.add_weight(
        name="phases", shape=phase.shape, trainable=False,
        initializer=lambda shape, dtype=None: tf.constant(phase, dtype))
    return frequencies, phases


def fourier_features(x, covariance_fn, frequencies, phases, scale=True):
    """``[batch, D]`` random features ``σ √(2/D) cos(xᵀΩ/ℓ + b)`` of ``x: [batch, d]``.

    ``σ`` and ``ℓ`` are the kernel's amplitude and length scale; ``scale=False`` drops
    the ``√(2/D)`` (features of order one, as SNGP's output layer uses them).
    """
    dtype = x.dtype
    ls = tf.cast(covariance_fn.length_scale, dtype)
    amplitude = tf.cast(covariance_fn.amplitude, dtype)
    proj = tf.matmul(x / ls, tf.cast(frequencies, dtype)) + tf.cast(phases, dtype)
    if scale:
        amplitude *= np.sqrt(2.0 / int(phases.shape[0]))
    return amplitude * tf.cos(proj)


@_register
class RandomFourierFeatures(keras.layers.Layer):
    """GP layer via random Fourier features and a Bayesian linear output.

    Computes ``φ(x)ᵀ W`` with ``D = num_features`` fixed random features of
    ``covariance_fn`` (whose amplitude and length scale stay trainable) and a
    posterior over ``W: [D, units]`` estimated by local reparameterization: the
    output layer *is* a `DenseLocalReparameterization` (no bias), so its KL to the
    ``N(0, I)`` prior is in ``layer.losses``. Cost per call O(batch · d · D +
    batch · D · units), linear in the batch, unlike exact GPs.

    Args:
      units: output dimension.
      num_features: number of random features D.
      covariance_fn: stationary kernel (`kernels` layer or alias; default
        `ExponentiatedQuadratic`).
      output_initializer: distribution initializer of ``W`` (default
        ``'trainable_normal'``).
      output_regularizer: KL regularizer of ``W`` (default ``'normal_kl_divergence'``,
        the GP prior ``W ~ N(0, I)``).
      dataset_size: N for the KL scaling (None: unscaled).
      seed: int seed of the frequencies, phases and output noise.

    Input shape: ``[batch, d]``. Output shape: ``[batch, units]`` (a Tensor).
    """

    def __init__(self, units, num_features, covariance_fn=None,
                 output_initializer="trainable_normal",
                 output_regularizer="normal_kl_divergence", dataset_size=None, seed=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.units = check_positive_int("units", units)
        self.num_features = check_positive_int("num_features", num_features)
        self.covariance_fn = kernels.get(
            "exponentiated_quadratic" if covariance_fn is None else covariance_fn,
            dtype=self.dtype)
        sample_frequencies(self.covariance_fn, 1, 1, np.random.default_rng(0))  # Validates.
        BayesianLayer._init_seed(self, seed)  # Seed validation + base seed.
        self.output_initializer = output_initializer
        self.output_regularizer = regularizers.get(output_regularizer)
        if dataset_size is not None:
            self.output_regularizer.dataset_size = check_positive_int("dataset_size",
                                                                      dataset_size)
        self.output_layer = DenseLocalReparameterization(
            self.units, use_bias=False, kernel_initializer=output_initializer,
            kernel_regularizer=self.output_regularizer,
            seed=None if seed is None else seed + 1, dtype=self.dtype_policy,
            name="output")

    def build(self, input_shape):
        self.frequencies, self.phases = add_fourier_weights(
            self, self.covariance_fn, tf.TensorShape(input_shape)[-1], self.num_features,
            np.random.default_rng(self._base_seed))
        self.output_layer.build(tf.TensorShape([None, self.num_features]))
        super().build(input_shape)

    def features(self, inputs):
        """``[batch, D]`` random features φ(x)."""
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        if not self.built:
            _compat.build(self, x.shape)
        return fourier_features(x, self.covariance_fn, self.frequencies, self.phases)

    def approximate_kernel(self, x1, x2=None):
        """``φ(x1) φ(x2)ᵀ``, the ``[n1, n2]`` approximation of ``k(x1, x2)``."""
        a = self.features(x1)
        b = a if x2 is None else self.features(x2)
        return tf.matmul(a, b, transpose_b=True)

    def call(self, inputs, training=None):
        return self.output_layer(self.features(inputs), training=training)

    def compute_output_shape(self, input_shape):
        return tf.TensorShape(input_shape)[:-1].concatenate([self.units])

    def get_config(self):
        init = self.output_initializer
        if isinstance(init, DistributionInitializer | keras.initializers.Initializer):
            init = keras.saving.serialize_keras_object(init)
        config = super().get_config()
        config.update(
            units=self.units, num_features=self.num_features,
            covariance_fn=kernels.serialize(self.covariance_fn),
            output_initializer=init,
            output_regularizer=regularizers.serialize(self.output_regularizer),
            dataset_size=getattr(self.output_regularizer, "dataset_size", None),
            seed=self.seed,
        )
        return config
