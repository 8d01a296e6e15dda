"""Export a Bayesian Keras model as a SavedModel serving its predictive mean and stddev.

`export_predictive(model, path, num_samples=...)` writes a SavedModel whose serving
signature ``serving_default(inputs, seed)`` runs the model ``num_samples`` times, each
time inside `bayes_planet.layers.fixed_noise(model, seed_i)` with ``seed_i`` the
``i``-th stateless split of ``seed`` — one weight draw per sample for the
reparameterization layers (see `fixed_noise` for Flipout and local
reparameterization) — and returns ``{'mean', 'stddev'}`` of the predictive
distribution over those samples. A model whose output is a `RandomVariable` (e.g. a
`Normal` output layer) contributes its distribution's mean and variance per sample,
so ``stddev`` is the total predictive stddev ``sqrt(E[var] + Var[mean])`` (law of
total variance); a Tensor output contributes itself (``stddev`` is the epistemic
spread). The serving function is pure: it reads no noise counter and changes no
state, so the same ``(inputs, seed)`` gives the same answer in any process, without
importing `bayes_planet`::

    loaded = tf.saved_model.load(path)
    out = loaded.signatures["serving_default"](inputs=x, seed=tf.constant([1, 2]))
    out["mean"], out["stddev"]
"""

import tensorflow as tf

from bayes_planet.layers.base import fixed_noise
from bayes_planet.layers.random_variable import RandomVariable

__all__ = ["PredictiveModule", "export_predictive", "predictive_moments"]


def _moments(output):
    """(mean, variance) of one sample's output; variance 0 for a Tensor output."""
    if isinstance(output, RandomVariable):
        dist = output.distribution
        mean = tf.cast(dist.mean(), tf.float32)
        return mean, tf.cast(dist.variance(), tf.float32)
    mean = tf.cast(tf.convert_to_tensor(output), tf.float32)
    return mean, tf.zeros_like(mean)


def predictive_moments(model, inputs, seed, num_samples):
    """Predictive mean and stddev of ``model(inputs)`` over ``num_samples`` weight draws.

    Sample ``i`` runs under ``fixed_noise(model, split(seed, num_samples)[i])``; the
    samples run sequentially in a ``tf.while_loop`` (``tf.map_fn``), so memory does not
    grow with ``num_samples``. Returns ``(mean, stddev)`` as float32.
    """
    seeds = tf.random.experimental.stateless_split(
        tf.cast(tf.convert_to_tensor(seed), tf.int32), num_samples)

    def one(sample_seed):
        with fixed_noise(model, sample_seed):
            return _moments(model(inputs, training=False))

    means, variances = tf.map_fn(one, seeds, fn_output_signature=(tf.float32, tf.float32))
    mean = tf.reduce_mean(means, 0)
    variance = tf.reduce_mean(variances, 0) + tf.reduce_mean(tf.square(means - mean), 0)
    return mean, tf.sqrt(tf.maximum(variance, 0.0))


class PredictiveModule(tf.Module):
    """The exported object: the model's variables and the serving function."""

    def __init__(self, model, num_samples, input_signature, name="predictive"):
        super().__init__(name=name)
        self.num_samples = int(num_samples)
        # Track the variables only (not the Keras model, whose own SavedModel tracing
        # is not needed); the serving function captures them.
        self.model_variables = list(model.variables)
        self._set_model(model)
        self.serving_default = tf.function(
            self._serve, input_signature=[input_signature,
                                          tf.TensorSpec([2], tf.int32, name="seed")])

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _set_model(self, model):
        self._model = model

    def _serve(self, inputs, seed):
        mean, stddev = predictive_moments(self._model, inputs, seed, self.num_samples)
        return {"mean": mean, "stddev": stddev}


def _default_signature(model):
    inputs = getattr(model, "inputs", None)
    if not inputs or len(inputs) != 1:
        raise ValueError(
            "Pass input_signature=tf.TensorSpec(...): the model has no single symbolic input "
            f"to derive it from. Received: model.inputs={inputs!r}")
    spec = inputs[0]
    return tf.TensorSpec(spec.shape, spec.dtype, name="inputs")


def export_predictive(model, path, num_samples=32, input_signature=None):
    """Writes a SavedModel at ``path`` serving ``{'mean', 'stddev'}`` over weight samples.

    Args:
      model: a built Bayesian Keras model (any layer or model calling Bayesian layers).
      path: output directory.
      num_samples: N weight samples per request (fixed at export).
      input_signature: a `tf.TensorSpec` of the inputs (batch dim may be None); default:
        from ``model.inputs`` of a functional/Sequential model.
    Returns:
      The exported `PredictiveModule` (its ``serving_default`` runs in process too).
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"Expected a positive integer. Received: num_samples={num_samples!r}")
    if input_signature is None:
        input_signature = _default_signature(model)
    elif not isinstance(input_signature, tf.TensorSpec):
        raise TypeError("Expected a tf.TensorSpec. Received: "
                        f"input_signature={input_signature!r}")
    if input_signature.name is None:
        input_signature = tf.TensorSpec(input_signature.shape, input_signature.dtype,
                                        name="inputs")
    module = PredictiveModule(model, num_samples, input_signature)
    serving = module.serving_default.get_concrete_function()
    tf.saved_model.save(module, str(path), signatures={"serving_default": serving})
    return module
