"""Noise contrastive priors (Hafner et al., 2018, "Noise Contrastive Priors for Functional
Uncertainty"): `NCPNormalPerturb`, `NCPCategoricalPerturb`, `NCPNormalOutput`.

An input prior doubles the batch: the first half the inputs as they are, the second perturbed
copies (out-of-distribution stand-ins). The output prior, after the network, returns the first
half and adds a loss that pulls the predictive distribution on the second half towards a wide
output prior, ``KL[N(mean, stddev²) || q(y | x̃)]`` averaged over the batch: the model learns
to be uncertain away from its data::

    x = NCPNormalPerturb(stddev=0.5, seed=0)(features)       # [2b, d]
    h = keras.layers.Dense(64, activation="relu")(x)
    means = DenseReparameterization(1)(h)
    means = NCPNormalOutput(mean=0.0, stddev=1.0)(means)     # [b, 1]; the loss in .losses

The perturbations are seeded as the Bayesian layers' noise (``seed``, `fixed_noise`): the same
seed gives the same draws.
"""

import numbers

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer
from bayes_planet.layers.checks import check_positive_int
from bayes_planet.layers.noise import per_example, split_seed, standard_normal
from bayes_planet.layers.random_variable import RandomVariable

tfd = tfp.distributions

__all__ = ["NCPCategoricalPerturb", "NCPNormalOutput", "NCPNormalPerturb"]


def _check_stddev(stddev):
    if isinstance(stddev, bool) or not isinstance(stddev, numbers.Real) or not stddev > 0:
        raise ValueError(f"Expected a positive standard deviation. Received: stddev={stddev!r}")
    return float(stddev)


def _as_config_value(value):
    """A float, or a (nested) list for an array-valued argument."""
    array = np.asarray(value.numpy() if tf.is_tensor(value) else value, np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"Expected finite values. Received: mean={value!r}")
    return float(array) if array.ndim == 0 else array.tolist()


class _Perturb(BayesianLayer, keras.layers.Layer):
    """``concat([x, perturb(x)])`` along the batch; subclasses define ``_perturb(x, seed)``."""

    def __init__(self, *, seed=None, **kwargs):
        super().__init__(**kwargs)
        self._init_seed(seed)

    def call(self, inputs):
        x = tf.convert_to_tensor(inputs)
        if not x.dtype.is_floating and not x.dtype.is_integer:
            raise TypeError(f"{type(self).__name__} expects numeric inputs. Received: dtype "
                            f"{x.dtype.name}")
        return tf.concat([x, self._perturb(x, self._next_seed())], axis=0)

    def compute_output_shape(self, input_shape):
        shape = tf.TensorShape(input_shape)
        batch = None if shape[0] is None else 2 * shape[0]
        return tuple([batch, *shape[1:].as_list()])


@_register
class NCPNormalPerturb(_Perturb):
    """Input prior for continuous inputs: ``[x, x + ε]`` along the batch with ``ε ~ N(mean,
    stddev²)`` per entry.

    Args:
      mean, stddev: of the perturbation (``stddev > 0``).
      seed: int or None (the noise, as the Bayesian layers').

    Input ``(batch, ...)``, float; output ``(2 batch, ...)``.
    """

    def __init__(self, mean=0.0, stddev=1.0, *, seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        if isinstance(mean, bool) or not isinstance(mean, numbers.Real):
            raise ValueError(f"Expected a real number. Received: mean={mean!r}")
        self.mean, self.stddev = float(mean), _check_stddev(stddev)

    def _perturb(self, x, seed):
        if not x.dtype.is_floating:
            raise TypeError("NCPNormalPerturb expects float inputs. Received: dtype "
                            f"{x.dtype.name}")
        eps = per_example(lambda shape, s: standard_normal(shape, s, dtype=x.dtype),
                          tf.shape(x), seed)
        return x + self.mean + self.stddev * eps

    def get_config(self):
        config = super().get_config()
        config.update(mean=self.mean, stddev=self.stddev)
        return config


@_register
class NCPCategoricalPerturb(_Perturb):
    """Input prior for categorical inputs (integer codes in ``[0, input_dim)``, integer or float
    dtype): ``[x, x̃]`` along the batch, where each entry of ``x̃`` is, with probability
    ``probs``, a uniformly drawn category (possibly its own), else ``x``'s.

    Args:
      input_dim: the number of categories (positive int).
      probs: the probability of redrawing an entry, in [0, 1].
      seed: int or None.
    """

    def __init__(self, input_dim, probs=0.1, *, seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        self.input_dim = check_positive_int("input_dim", input_dim)
        if isinstance(probs, bool) or not isinstance(probs, numbers.Real) or not (
                0.0 <= probs <= 1.0):
            raise ValueError(f"Expected a probability in [0, 1]. Received: probs={probs!r}")
        self.probs = float(probs)

    def _perturb(self, x, seed):
        def draw(shape, draw_seed):  # the new category, or -1 where the entry is kept
            redraw_seed, category_seed = split_seed(draw_seed, 2)
            redraw = tf.random.stateless_uniform(shape, redraw_seed) < self.probs
            category = tf.random.stateless_uniform(shape, category_seed, 0, self.input_dim,
                                                   tf.int32)
            return tf.where(redraw, category, -1)

        drawn = per_example(draw, tf.shape(x), seed)
        return tf.where(drawn >= 0, tf.cast(drawn, x.dtype), x)

    def get_config(self):
        config = super().get_config()
        config.update(input_dim=self.input_dim, probs=self.probs)
        return config


@_register
class NCPNormalOutput(_compat.RandomVariableInputs, _compat.RandomVariableOutputs,
                      keras.layers.Layer):
    """Output prior: returns the first half of its input's batch, and adds the loss
    ``Σ KL[N(mean, stddev²) || q] / half`` over the second half's distribution ``q`` (``half``
    its batch size): the predictive on the perturbed inputs is pulled towards the prior.

    Args:
      mean: the prior's mean, a number or an array broadcasting against the distribution's
        shape (e.g. the labels).
      stddev: the prior's standard deviation (positive).

    Input: a `RandomVariable` ``[2 batch, ...]`` with a distribution tfp can slice and take a
    normal's KL to (e.g. a ``Normal``), or a Tensor ``m``, read as ``N(m, 1)`` (the mean
    squared error). Output: the `RandomVariable` of the first half (its distribution and value
    sliced).
    """

    def __init__(self, mean=0.0, stddev=1.0, **kwargs):
        super().__init__(**kwargs)
        self.mean = _as_config_value(mean)
        self.stddev = _check_stddev(stddev)

    def call(self, inputs):
        if isinstance(inputs, RandomVariable):
            rv = inputs
        else:
            x = tf.convert_to_tensor(inputs)
            if not x.dtype.is_floating:
                x = tf.cast(x, self.compute_dtype)
            rv = RandomVariable(tfd.Normal(x, tf.ones([], x.dtype)), value=x)
        dist = rv.distribution
        if dist.batch_shape.rank == 0:
            raise ValueError("NCPNormalOutput needs a batch of predictions (a batch axis 0 of "
                             f"even size). Received: batch shape {dist.batch_shape}")
        half = tf.shape(rv.value)[0] // 2
        dtype = dist.dtype if dist.dtype.is_floating else tf.float32
        prior = tfd.Normal(tf.constant(self.mean, dtype), tf.constant(self.stddev, dtype))
        kl = tf.reduce_sum(prior.kl_divergence(dist[half:]))
        self.add_loss(kl / tf.cast(half, kl.dtype))
        return RandomVariable(dist[:half], value=rv.value[:half])

    def get_config(self):
        config = super().get_config()
        config.update(mean=self.mean, stddev=self.stddev)
        return config
