"""The contract harness every layer test calls (after keras ``run_layer_test``).

`run_layer_test` checks, for one layer class and constructor arguments: the
output shape, the number of trainable/non-trainable weights and loss terms, the
``get_config``/``from_config`` round trip, ``.keras``, HDF5 and (Keras 2) SavedModel save/load
(the reloaded model reproduces the original's next output exactly, seeds
included), gradients to every trainable variable across two separate
``GradientTape``s, ``tf.function`` with ``jit_compile=True``, one
``model.fit`` step with a finite loss, and that no two weights start equal (a layer
that hands one initializer to several weights gets each its own draw).
"""

import contextlib
import copy
import inspect
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import warnings

import numpy as np
import tensorflow as tf

from bayes_planet._keras import KERAS3, keras
from bayes_planet.layers._compat import submodules, variable_name, weight_losses
from bayes_planet.layers.base import moments, posterior_mean
from bayes_planet.layers.initializers import DistributionInitializer, TrainableRandomSignNormal
from bayes_planet.layers.random_variable import RandomVariable

# Stack-neutral views for tests (Keras 2 and Keras 3 differ: `bayes_planet.layers._compat`):
# `submodules(module)` the layers inside a layer/model; `weight_losses(module)` its distribution
# weights' KL terms, computed now.
__all__ = ["CellRNN", "SelfAttention", "assert_reloads_in_a_fresh_process",
           "check_batch_checked_at_run_time", "check_distinct_initial_weights",
           "check_gradients", "check_mixed_precision_fit", "factor_means", "global_policy",
           "mean_prediction", "normal_array", "normal_kl",
           "run_layer_test", "run_python", "save_saved_model", "submodules", "to_tensor",
           "weight_losses", "wide_factors"]


def to_tensor(x):
    """Converts a layer output (Tensor, RandomVariable, nest) to a flat list of Tensors."""
    return [tf.convert_to_tensor(t) for t in tf.nest.flatten(x)]


def normal_array(*shape, seed=0, dtype="float32"):
    """A standard-normal numpy array of ``shape`` from ``np.random.default_rng(seed)``."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _inputs(input_shape, input_data, dtype, seed):
    if input_data is not None:
        return input_data
    return normal_array(*input_shape, seed=seed, dtype=dtype)


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_shape=None,
    *,
    input_data=None,
    input_dtype="float32",
    expected_output_shape=None,
    expected_num_trainable_weights=None,
    expected_num_non_trainable_weights=None,
    expected_num_losses=None,
    call_kwargs=None,
    run_fit=True,
    run_save=True,
    run_jit=True,
    loss="mse",
    seed=1234,
    equal_initial_weights=(),
):
    """Runs the layer contract; raises AssertionError on the first violation.

    Args:
      layer_cls: the layer class.
      init_kwargs: constructor kwargs; ``seed`` is added if the class takes one.
      input_shape: full input shape including batch (random normal inputs), or
      input_data: explicit inputs (array or nest of arrays).
      expected_output_shape: full output shape (a tuple), or a nest of shapes.
      expected_num_*: counts to check (None skips the check).
      call_kwargs: extra kwargs for ``layer(x, **call_kwargs)``.
      run_fit / run_save / run_jit: toggles for the model-level checks.
      loss: Keras loss used by the fit step.
      equal_initial_weights: pairs of weight names (without the layer's prefix) that start
        equal by design (e.g. an EMA sum initialized to the codebook).
    Returns:
      The built layer.
    """
    init_kwargs = dict(init_kwargs)
    if "seed" in inspect.signature(layer_cls.__init__).parameters or _takes_seed(layer_cls):
        init_kwargs.setdefault("seed", seed)
    call_kwargs = call_kwargs or {}
    x = _inputs(input_shape, input_data, input_dtype, seed)

    layer = layer_cls(**init_kwargs)
    with warnings.catch_warnings():  # Keras: an initializer instance reused for several weights.
        warnings.filterwarnings("error", message=".*unseeded and being called multiple times")
        outputs = to_tensor(layer(x, **call_kwargs))
    check_distinct_initial_weights(layer, equal_initial_weights)
    if expected_output_shape is not None:
        expected = [tuple(s) for s in _flatten_shapes(expected_output_shape)]
        got = [tuple(o.shape) for o in outputs]
        assert got == expected, f"output shapes {got} != expected {expected}"
    for out in outputs:
        if out.dtype.is_floating:
            assert np.all(np.isfinite(out.numpy())), "non-finite layer output"
    _check_count("trainable weights", layer.trainable_weights, expected_num_trainable_weights)
    _check_count("non-trainable weights", layer.non_trainable_weights,
                 expected_num_non_trainable_weights)
    _check_count("losses", layer.losses, expected_num_losses)

    # Config round trip: same config, same kind of outputs.
    config = layer.get_config()
    clone = layer_cls.from_config(json.loads(json.dumps(config)))
    assert json.dumps(clone.get_config(), sort_keys=True) == json.dumps(config, sort_keys=True), (
        "get_config -> from_config -> get_config changed the config"
    )
    clone_out = to_tensor(clone(x, **call_kwargs))
    assert [o.shape for o in clone_out] == [o.shape for o in outputs]

    _check_gradients(layer, x, call_kwargs)
    if run_jit:
        jitted = tf.function(lambda t: to_tensor(layer(t, **call_kwargs)), jit_compile=True)
        jit_out = jitted(x)
        assert [o.shape for o in jit_out] == [o.shape for o in outputs]
    if run_save or run_fit:
        model = _wrap(layer_cls, init_kwargs, x, call_kwargs)
    if run_save:
        _check_save(model, x)
    if run_fit:
        _check_fit(model, x, loss)
    return layer


@keras.saving.register_keras_serializable(package="bayes_planet_testing")
class CellRNN(keras.layers.RNN):
    """`keras.layers.RNN` taking a serialized cell, so the contract harness can build
    fresh RNN layers (each with its own cell) from constructor kwargs:
    ``run_layer_test(CellRNN, {"cell": keras.saving.serialize_keras_object(cell)}, ...)``."""

    def __init__(self, cell, **kwargs):
        if isinstance(cell, dict):
            cell = keras.saving.deserialize_keras_object(copy.deepcopy(cell))
        super().__init__(cell, **kwargs)

    def build_from_config(self, config):
        # Keras 2.15's RNN.build reads a JSON list shape as a list of input shapes.
        self.build(tuple(config["input_shape"]))


@keras.saving.register_keras_serializable(package="bayes_planet_testing")
class SelfAttention(keras.layers.Layer):
    """``attention(x, x)``: a one-input face of an attention layer for the contract harness
    (``run_layer_test(SelfAttention, {"attention": serialized attention layer}, ...)``)."""

    def __init__(self, attention, **kwargs):
        super().__init__(**kwargs)
        if isinstance(attention, dict):
            attention = keras.saving.deserialize_keras_object(copy.deepcopy(attention))
        self.attention = attention

    def call(self, inputs):
        return self.attention(inputs, inputs)

    def get_config(self):
        return {**super().get_config(),
                "attention": keras.saving.serialize_keras_object(self.attention)}


def check_distinct_initial_weights(layer, allowed=()):
    """Asserts that no two same-shape weights of ``layer`` start with identical values.

    Weights that do not vary (zeros, constants) are exempt; so are the ``allowed`` name pairs.
    """
    allowed = {frozenset(pair) for pair in allowed}
    named = [(variable_name(w).split(layer.name + "/", 1)[-1], np.asarray(w))
             for w in layer.weights]
    for (a, va), (b, vb) in itertools.combinations(named, 2):
        if (va.shape == vb.shape and va.size > 1 and np.ptp(va) > 0
                and frozenset((a, b)) not in allowed):
            assert not np.array_equal(va, vb), f"weights {a} and {b} start identical"


def _takes_seed(layer_cls):
    return any("seed" in inspect.signature(c.__init__).parameters
               for c in layer_cls.__mro__ if "__init__" in vars(c))


def _flatten_shapes(shapes):
    if isinstance(shapes, tuple) and all(isinstance(d, int | type(None)) for d in shapes):
        return [shapes]
    return [s for item in shapes for s in _flatten_shapes(item)]


def _check_count(what, items, expected):
    if expected is not None:
        assert len(items) == expected, f"expected {expected} {what}, got {len(items)}: {items}"


def _check_gradients(layer, x, call_kwargs):
    for attempt in range(2):  # A second tape catches variables created inside the first.
        with tf.GradientTape() as tape:
            outs = to_tensor(layer(x, **call_kwargs))
            total = sum(tf.reduce_sum(tf.cast(o, tf.float32)) for o in outs if o.dtype.is_floating)
            total += tf.add_n([tf.cast(v, tf.float32) for v in layer.losses] or [0.0])
        grads = tape.gradient(total, layer.trainable_variables)
        missing = [v.name for v, g in zip(layer.trainable_variables, grads, strict=True) if g is None]
        assert not missing, f"tape {attempt}: no gradient for {missing}"


class _Wrapper(keras.Model):
    """A one-layer model that forwards ``call_kwargs`` (for layers with extra args)."""

    def __init__(self, layer, call_kwargs, **kwargs):
        super().__init__(**kwargs)
        self.inner, self.call_kwargs = layer, call_kwargs

    def call(self, inputs):
        return to_tensor(self.inner(inputs, **self.call_kwargs))[0]


def _wrap(layer_cls, init_kwargs, x, call_kwargs):
    layer = layer_cls(**init_kwargs)
    if not call_kwargs and not isinstance(x, list | tuple | dict):
        inputs = keras.Input(shape=x.shape[1:], batch_size=x.shape[0], dtype=x.dtype)
        return keras.Model(inputs, layer(inputs))
    model = _Wrapper(layer, call_kwargs, name="wrapper")  # (Keras 3: no leading "_" in scopes)
    model(x)
    return model


#: The whole-model formats of the round trip: ``(file name, model.save kwargs)``. Keras 3 has no
#: SavedModel format in ``model.save`` (``model.export`` writes an inference-only artifact).
_SAVE_FORMATS = (("m.keras", {}), ("m.h5", {})) + (
    () if KERAS3 else (("saved_model", {"save_format": "tf"}),))


def _check_save(model, x):
    first = to_tensor(model(x))
    with tempfile.TemporaryDirectory() as tmp:
        for name, kwargs in _SAVE_FORMATS:
            path = os.path.join(tmp, name)
            _save(model, path, **kwargs)
            loaded = keras.models.load_model(path)
            assert len(loaded.weights) == len(model.weights), "save/load lost weights"
            for a, b in zip(model.weights, loaded.weights, strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.name)
            # Same weights and noise state: the next outputs agree exactly.
            ours, theirs = to_tensor(model(x)), to_tensor(loaded(x))
            for o, t in zip(ours, theirs, strict=True):
                np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-5, atol=1e-6)
    assert [o.shape for o in first] == [o.shape for o in to_tensor(model(x))]


def _save(model, path, **kwargs):
    """``model.save``; the HDF5 round trip is tested on purpose, so Keras' "legacy format"
    warning for ``.h5`` is expected there (and required: it is how Keras marks the format).
    Any other warning is passed on."""
    with _passing_on_all_but(lambda w: str(path).endswith(".h5")
                             and issubclass(w.category, UserWarning)
                             and "HDF5 file" in str(w.message) and "legacy" in str(w.message)):
        model.save(path, **kwargs)


@contextlib.contextmanager
def _passing_on_all_but(expected):
    """Records the warnings raised inside and passes on each one for which
    ``expected(warning)`` is false (the expected ones are dropped)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if not expected(w):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def save_saved_model(model, path):
    """Writes ``model`` as a TensorFlow SavedModel (for ``tf.saved_model.load``): Keras 2's
    ``model.save(path)`` without an extension, Keras 3's ``model.export(path)``."""
    if KERAS3:
        model.export(str(path), verbose=False)
    else:
        model.save(path)


def _check_fit(model, x, loss):
    """One ``fit`` epoch with a finite loss. A layer without trainable weights (a noise or
    output layer) makes Keras 3 warn "The model does not have any trainable weights": that
    warning is expected there, and only there; any other is passed on."""
    y = to_tensor(model(x))[0]
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    with _passing_on_all_but(lambda w: not model.trainable_weights
                             and "does not have any trainable weights" in str(w.message)):
        history = model.fit(x, tf.zeros_like(y), epochs=1, batch_size=len(y), verbose=0)
    assert np.isfinite(history.history["loss"][0]), f"fit loss {history.history['loss']}"


# Helpers of the ensemble-layer tests (rank-1, BatchEnsemble) ----------------------------


def factor_means(layer, names=("alpha", "gamma")):
    """The factors ``layer.<name>`` as numpy arrays at their means: a rank-1 posterior's
    mean, a BatchEnsemble fast weight itself (what `posterior_mean` computes with)."""
    return [moments(getattr(layer, name), tf.float32)[0].numpy() for name in names]


def wide_factors(names=("alpha", "gamma"), stddev=0.3):
    """``{<name>_initializer: TrainableRandomSignNormal}`` with posterior stddev ``stddev``
    (instead of the default ≈ 0.03), so that sampling shows in the outputs."""
    return {f"{name}_initializer": TrainableRandomSignNormal(
        stddev_initializer=keras.initializers.Constant(np.log(stddev))) for name in names}


def normal_kl(weights, loc=1.0, scale=0.1):
    """Closed-form KL of each normal posterior weight (``w.loc()``, ``w.scale()``) to
    N(loc, scale²), summed over the weight's entries: a list of floats (tfp's KL)."""
    import tensorflow_probability as tfp
    prior = tfp.distributions.Normal(loc, scale)
    return [float(tf.reduce_sum(tfp.distributions.kl_divergence(
        tfp.distributions.Normal(w.loc(), w.scale()), prior))) for w in weights]


@contextlib.contextmanager
def global_policy(name):
    """Sets Keras' global dtype policy (e.g. ``'mixed_float16'``) in the block, float32 after."""
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def check_mixed_precision_fit(model, x, y):
    """Under a mixed policy: the model computes in the policy's compute dtype, its
    variables and losses stay float32 (losses finite), and a Keras ``fit`` step (SGD;
    Keras adds loss scaling for float16) has a finite loss."""
    compute = keras.mixed_precision.global_policy().compute_dtype
    out = model(x)
    assert out.dtype == compute, f"output dtype {out.dtype} != {compute}"
    assert all(v.dtype == tf.float32 for v in model.trainable_variables)
    for loss in model.losses:
        assert loss.dtype == tf.float32 and np.isfinite(float(loss)), loss
    model.compile(keras.optimizers.SGD(1e-3), "mse")
    history = model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0]), history.history


def check_gradients(loss_fn, variables, nonzero=True):
    """The gradient of ``loss_fn()`` reaches every variable in ``variables``: not None,
    finite and (with ``nonzero``) not all zero."""
    with tf.GradientTape() as tape:
        loss = loss_fn()
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads, strict=True):
        assert g is not None, f"no gradient for {v.name}"
        g = np.asarray(tf.cast(tf.convert_to_tensor(g), tf.float32))
        assert np.all(np.isfinite(g)), f"non-finite gradient for {v.name}"
        assert not nonzero or np.abs(g).max() > 0, f"zero gradient for {v.name}"


def check_batch_checked_at_run_time(layer, shape, ensemble_size):
    """``layer`` traced with an unknown batch size (input ``[None, *shape]``): a batch of
    ``2·ensemble_size`` rows runs, one of ``2·ensemble_size - 2`` raises the run-time
    "divisible by ensemble_size" error. Returns the first output."""
    fn = tf.function(layer, input_signature=[tf.TensorSpec([None, *shape])])
    out = fn(tf.zeros([2 * ensemble_size, *shape]))
    assert out.shape[0] == 2 * ensemble_size, out.shape
    try:
        fn(tf.zeros([2 * ensemble_size - 2, *shape]))
    except tf.errors.InvalidArgumentError as error:
        assert f"divisible by ensemble_size={ensemble_size}" in str(error), str(error)
    else:
        raise AssertionError("a batch not divisible by ensemble_size ran")
    return out


# Fresh-process reloads (shared by the Keras 3 tests, tests/layers/test_keras3*.py).

#: Where a fresh interpreter imports this same ``bayes_planet`` from (a source checkout's root).
_IMPORT_ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_python(code, env=None):
    """Runs ``code`` in a fresh interpreter (this one), importing this ``bayes_planet``; its
    last stdout line, parsed as JSON."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, cwd=_IMPORT_ROOT, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def mean_prediction(model, x):
    """``model(x)`` as numpy at the posterior mean: every distribution weight at its mean
    (`posterior_mean`, when the model has any) and a `RandomVariable` output as its
    distribution's mean (a nest of outputs as a nest of arrays)."""
    has_posteriors = any(isinstance(m, DistributionInitializer) for m in submodules(model))
    with posterior_mean(model) if has_posteriors else contextlib.nullcontext():
        outputs = model(x)
    return tf.nest.map_structure(
        lambda t: np.asarray(t.distribution.mean() if isinstance(t, RandomVariable) else t),
        outputs)


_LOAD_AND_PREDICT = """
    import json, os
    import numpy as np
    import bayes_planet.layers  # registers the layers
    from bayes_planet._keras import KERAS3, keras
    from bayes_planet.layers.testing import mean_prediction
    directory = {directory!r}
    model = keras.models.load_model(os.path.join(directory, "model.keras"))
    x = np.load(os.path.join(directory, "x.npy"))
    np.save(os.path.join(directory, "reloaded.npy"), mean_prediction(model, x))
    print(json.dumps({{"keras3": KERAS3, "kl": float(sum(model.losses)),
                      "env": os.environ.get("TF_USE_LEGACY_KERAS")}}))
"""


def assert_reloads_in_a_fresh_process(model, x, directory, atol=0.0):
    """Saves ``model`` to ``.keras`` in ``directory``; a fresh Keras 3 process (without
    TF_USE_LEGACY_KERAS) loads it with the same `mean_prediction` on ``x`` (to ``atol``;
    0: identical) and the same KL (``sum(model.losses)``, to 1e-6 relative)."""
    directory = pathlib.Path(directory)
    model.save(directory / "model.keras")
    np.save(directory / "x.npy", x)
    ours = mean_prediction(model, x)
    kl = float(sum(model.losses))
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    fresh = run_python(_LOAD_AND_PREDICT.format(directory=str(directory)), env)
    assert fresh["keras3"] and fresh["env"] is None
    np.testing.assert_allclose(np.load(directory / "reloaded.npy"), ours, rtol=0, atol=atol)
    assert abs(fresh["kl"] - kl) <= 1e-6 * abs(kl), (fresh["kl"], kl)
