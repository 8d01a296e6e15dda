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

A model of several inputs (a functional model of several named ``keras.Input``s, as a list
or a dict) is served with one argument per input, named as the input (or as its key in
the model's dict)::

    out = loaded.signatures["serving_default"](features=x, context=c, seed=tf.constant([1, 2]))
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
    """The exported object: the model's variables and the serving function.

    ``input_signature`` is a `tf.TensorSpec` (one input) or a list or dict of named ones (in
    the structure the model takes); ``serving_default`` takes the inputs flat, in
    ``tf.nest.flatten`` order, then the seed.
    """

    def __init__(self, model, num_samples, input_signature, name="predictive"):
        super().__init__(name=name)
        self.num_samples = int(num_samples)
        # Track the variables only (not the Keras model, whose own SavedModel tracing
        # is not needed); the serving function captures them.
        self.model_variables = list(model.variables)
        self._set_model(model, input_signature)
        self.serving_default = tf.function(
            self._serve, input_signature=[*tf.nest.flatten(input_signature),
                                          tf.TensorSpec([2], tf.int32, name="seed")])

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _set_model(self, model, input_signature):
        self._model, self._input_structure = model, input_signature

    def _serve(self, *args):
        inputs = tf.nest.pack_sequence_as(self._input_structure, list(args[:-1]))
        mean, stddev = predictive_moments(self._model, inputs, args[-1], self.num_samples)
        return {"mean": mean, "stddev": stddev}


def _named(spec, name):
    return tf.TensorSpec(spec.shape, spec.dtype, name=name)


def _default_signature(model):
    """The specs of ``model.input`` (a functional or Sequential model): one named
    ``inputs``, or one per input named as the input (its key in a dict)."""
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise ValueError(
            "Pass input_signature=tf.TensorSpec(...) (or a list or dict of them): the model "
            f"has no symbolic inputs to derive it from. Received: model.inputs={inputs!r}")
    if len(inputs) == 1:
        return _named(inputs[0], "inputs")
    structure = model.input
    if isinstance(structure, dict):
        return {key: _named(tensor, key) for key, tensor in structure.items()}
    return [_named(tensor, tensor.name.split(":")[0]) for tensor in tf.nest.flatten(structure)]


def _checked_signature(input_signature):
    """``input_signature`` with every spec named; a one-line error for anything else."""
    if isinstance(input_signature, tf.TensorSpec):
        return input_signature if input_signature.name else _named(input_signature, "inputs")
    if isinstance(input_signature, dict):
        names = list(input_signature)
        if not all(isinstance(key, str) for key in names):
            raise TypeError("Expected the keys of an input_signature dict to be input names. "
                            f"Received: input_signature={input_signature!r}")
        checked = {key: _named(spec, key) if isinstance(spec, tf.TensorSpec) else spec
                   for key, spec in input_signature.items()}
    elif isinstance(input_signature, list | tuple) and input_signature and all(
            isinstance(spec, tf.TensorSpec) for spec in input_signature):
        checked = list(input_signature)
        names = [spec.name for spec in checked]
        if None in names:
            raise ValueError("Expected a name on every tf.TensorSpec of several inputs (the "
                             "serving signature's arguments). Received: "
                             f"input_signature={input_signature!r}")
    else:
        raise TypeError("Expected a tf.TensorSpec, or a list or dict of them. Received: "
                        f"input_signature={input_signature!r}")
    if not all(isinstance(spec, tf.TensorSpec) for spec in tf.nest.flatten(checked)):
        raise TypeError("Expected a tf.TensorSpec, or a list or dict of them. Received: "
                        f"input_signature={input_signature!r}")
    if len(set(names)) != len(names) or "seed" in names:
        raise ValueError("Expected distinct input names other than 'seed' (the serving "
                         f"signature's arguments). Received: names={names!r}")
    return checked


def export_predictive(model, path, num_samples=32, input_signature=None):
    """Writes a SavedModel at ``path`` serving ``{'mean', 'stddev'}`` over weight samples.

    Args:
      model: a built Bayesian Keras model (any layer or model calling Bayesian layers).
      path: output directory.
      num_samples: N weight samples per request (fixed at export).
      input_signature: a `tf.TensorSpec` of the inputs (batch dim may be None), or for a
        model of several inputs a list of named specs or a dict ``{name: spec}`` in the
        structure the model takes; default: from ``model.input`` of a functional or
        Sequential model (each input named as its ``keras.Input``, or as its key).
    Returns:
      The exported `PredictiveModule` (its ``serving_default`` runs in process too, with
      the inputs positional in ``tf.nest.flatten`` order, then the seed).
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"Expected a positive integer. Received: num_samples={num_samples!r}")
    if input_signature is None:
        input_signature = _default_signature(model)
    input_signature = _checked_signature(input_signature)
    module = PredictiveModule(model, num_samples, input_signature)
    serving = module.serving_default.get_concrete_function()
    tf.saved_model.save(module, str(path), signatures={"serving_default": serving})
    return module
