"""`export_predictive` of a model with several named inputs (a list or a dict of
``keras.Input``s): one serving argument per input, named as the input; reloaded in a fresh
process without bayes_planet, the SavedModel gives the in-process mean and stddev."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet.export import export_predictive, predictive_moments
from bayes_planet.layers import keras

NUM_SAMPLES = 16

LOAD_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.modules["bayes_planet"] = None  # the SavedModel must not need the library
    import numpy as np, tensorflow as tf
    path, features, context, out = sys.argv[1], np.load(sys.argv[2]), np.load(sys.argv[3]), sys.argv[4]
    serve = tf.saved_model.load(path).signatures["serving_default"]
    names = sorted(serve.structured_input_signature[1])
    got = serve(features=tf.constant(features), context=tf.constant(context),
                seed=tf.constant([1, 2], tf.int32))
    with open(out, "w") as f:
        json.dump({"names": names, **{k: v.numpy().tolist() for k, v in got.items()}}, f)
    print("LOADED")
""")


def _data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    features = rng.uniform(-2, 2, (n, 3)).astype("float32")
    context = rng.uniform(-1, 1, (n, 2)).astype("float32")
    y = (np.sin(features[:, :1]) + context[:, 1:] + 0.1 * rng.standard_normal((n, 1)))
    return features, context, y.astype("float32")


def _model(as_dict):
    keras.utils.set_random_seed(0)
    features = keras.Input((3,), name="features")
    context = keras.Input((2,), name="context")
    hidden = bl.DenseReparameterization(8, activation="tanh", seed=1)(
        keras.layers.Concatenate()([features, context]))
    outputs = bl.DenseReparameterization(1, seed=2)(hidden)
    inputs = {"features": features, "context": context} if as_dict else [features, context]
    model = keras.Model(inputs, outputs)
    f, c, y = _data()
    bl.set_dataset_size(model, len(f))
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    model.fit({"features": f, "context": c} if as_dict else [f, c], y, batch_size=8, epochs=2,
              verbose=0)
    return model


def _in_process(model, as_dict, features, context, seed=(1, 2)):
    inputs = {"features": features, "context": context} if as_dict else [features, context]
    mean, stddev = predictive_moments(model, inputs, tf.constant(seed), NUM_SAMPLES)
    return mean.numpy(), stddev.numpy()


@pytest.mark.parametrize("as_dict", [False, True], ids=["list", "dict"])
def test_a_two_input_model_round_trips_in_a_fresh_process(as_dict, tmp_path):
    model = _model(as_dict)
    features, context, _ = _data(5, seed=1)
    path = tmp_path / "predictive"
    module = export_predictive(model, path, num_samples=NUM_SAMPLES)
    mean, stddev = _in_process(model, as_dict, features, context)
    assert mean.shape == stddev.shape == (5, 1) and np.all(stddev > 0)
    # In process: the inputs positional in tf.nest.flatten order (a dict's sorted keys).
    args = [context, features] if as_dict else [features, context]
    here = module.serving_default(*map(tf.constant, args), tf.constant([1, 2]))
    np.testing.assert_allclose(here["mean"], mean, rtol=1e-6, atol=1e-7)
    np.save(tmp_path / "features.npy", features)
    np.save(tmp_path / "context.npy", context)
    result = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, str(path), str(tmp_path / "features.npy"),
         str(tmp_path / "context.npy"), str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""))
    assert "LOADED" in result.stdout, result.stderr[-3000:]
    there = json.loads((tmp_path / "out.json").read_text())
    assert there["names"] == ["context", "features", "seed"]
    np.testing.assert_allclose(there["mean"], mean, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(there["stddev"], stddev, rtol=1e-6, atol=1e-7)
    other = _in_process(model, as_dict, features, context, seed=(3, 4))[0]
    assert not np.allclose(other, mean, rtol=0, atol=1e-7)  # another seed, other draws


def test_an_explicit_dict_signature_names_the_arguments(tmp_path):
    model = _model(as_dict=True)
    signature = {"features": tf.TensorSpec([None, 3]), "context": tf.TensorSpec([None, 2])}
    module = export_predictive(model, tmp_path / "p", num_samples=4, input_signature=signature)
    loaded = tf.saved_model.load(str(tmp_path / "p")).signatures["serving_default"]
    features, context, _ = _data(3)
    out = loaded(features=tf.constant(features), context=tf.constant(context),
                 seed=tf.constant([7, 8]))
    here = module.serving_default(tf.constant(context), tf.constant(features),
                                  tf.constant([7, 8]))
    np.testing.assert_allclose(out["mean"], here["mean"], rtol=1e-6, atol=1e-7)


def test_a_single_input_model_still_serves_inputs(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), bl.DenseReparameterization(1, seed=1)])
    export_predictive(model, tmp_path / "p", num_samples=4)
    loaded = tf.saved_model.load(str(tmp_path / "p")).signatures["serving_default"]
    assert sorted(loaded.structured_input_signature[1]) == ["inputs", "seed"]


@pytest.mark.parametrize("signature, error, message", [
    ([tf.TensorSpec([None, 3]), tf.TensorSpec([None, 2])], ValueError,
     "Expected a name on every tf.TensorSpec of several inputs"),
    ({"seed": tf.TensorSpec([None, 3]), "context": tf.TensorSpec([None, 2])}, ValueError,
     "Expected distinct input names other than 'seed'"),
    ([tf.TensorSpec([None, 3], name="a"), tf.TensorSpec([None, 2], name="a")], ValueError,
     "Expected distinct input names other than 'seed'"),
    ({"features": tf.TensorSpec([None, 3]), "context": np.zeros(2)}, TypeError,
     "Expected a tf.TensorSpec, or a list or dict of them"),
    ("features", TypeError, "Expected a tf.TensorSpec, or a list or dict of them"),
])
def test_bad_signatures_get_one_line_errors(signature, error, message, tmp_path):
    model = keras.Sequential([keras.Input((3,)), bl.DenseReparameterization(1, seed=1)])
    with pytest.raises(error, match=message) as info:
        export_predictive(model, tmp_path / "p", input_signature=signature)
    assert "\n" not in str(info.value)
