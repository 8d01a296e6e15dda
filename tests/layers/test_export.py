"""Export: a trained Bayesian Keras model as a SavedModel serving the predictive mean and
stddev over N weight samples; reloaded in a fresh process (without bayes_planet) it
reproduces them for the same seed."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.export import export_predictive, predictive_moments
from bayes_planet.layers.outputs import Normal

NUM_SAMPLES = 32

LOAD_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.modules["bayes_planet"] = None  # the SavedModel must not need the library
    import numpy as np, tensorflow as tf
    path, inputs, out = sys.argv[1], np.load(sys.argv[2]), sys.argv[3]
    serve = tf.saved_model.load(path).signatures["serving_default"]
    results = {}
    for seed in ([1, 2], [3, 4]):
        got = serve(inputs=tf.constant(inputs), seed=tf.constant(seed, tf.int32))
        results[str(seed)] = {k: v.numpy().tolist() for k, v in got.items()}
    with open(out, "w") as f:
        json.dump(results, f)
    print("LOADED")
""")


def _data(n=32):
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (n, 3)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.1 * rng.standard_normal((n, 1))).astype("float32")
    return x, y


@pytest.fixture(scope="module")
def trained():
    """A functional Bayesian MLP trained for a few epochs (module scope: built once)."""
    keras.utils.set_random_seed(0)
    x, y = _data()
    inputs = keras.Input((3,))
    hidden = bl.DenseReparameterization(16, activation="tanh", seed=1)(inputs)
    outputs = bl.DenseReparameterization(1, seed=2)(hidden)
    model = keras.Model(inputs, outputs)
    bl.set_dataset_size(model, len(x))
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    return model, x


def test_export_round_trip_in_a_fresh_process(trained, tmp_path):
    model, x = trained
    path = tmp_path / "predictive"
    module = export_predictive(model, path, num_samples=NUM_SAMPLES)
    inputs = x[:5]
    here = {str(s): module.serving_default(tf.constant(inputs), tf.constant(s, tf.int32))
            for s in ([1, 2], [3, 4])}
    np.save(tmp_path / "inputs.npy", inputs)
    result = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, str(path), str(tmp_path / "inputs.npy"),
         str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""))
    assert "LOADED" in result.stdout, result.stderr[-3000:]
    with open(tmp_path / "out.json") as f:
        there = json.load(f)
    for seed in here:  # Same seed: the same mean and stddev as in process.
        for key in ("mean", "stddev"):
            np.testing.assert_allclose(there[seed][key], here[seed][key].numpy(),
                                       rtol=1e-6, atol=1e-7, err_msg=f"{seed} {key}")
    a, b = here["[1, 2]"], here["[3, 4]"]  # Another seed: other weight samples.
    assert not np.allclose(a["mean"], b["mean"], rtol=0, atol=1e-7)
    assert not np.allclose(a["stddev"], b["stddev"], rtol=0, atol=1e-7)
    assert a["mean"].shape == a["stddev"].shape == (5, 1)
    assert np.all(a["stddev"].numpy() > 0)


def test_serving_is_the_average_over_fixed_noise_weight_samples(trained):
    """Each sample is one weight draw: the export equals direct calls under `fixed_noise`
    with the same seeds, and its mean agrees with plain Monte Carlo calls."""
    model, x = trained
    seed = tf.constant([5, 6])
    mean, stddev = predictive_moments(model, x[:8], seed, NUM_SAMPLES)
    draws = []
    for sample_seed in tf.random.experimental.stateless_split(seed, NUM_SAMPLES):
        with bl.fixed_noise(model, sample_seed):
            first = model(x[:8], training=False)
            np.testing.assert_array_equal(first, model(x[:8], training=False))  # one draw
            draws.append(first.numpy())
    draws = np.stack(draws)
    np.testing.assert_allclose(mean, draws.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stddev, draws.std(0), rtol=1e-4, atol=1e-6)
    # Plain calls draw fresh weights each time (the layers' own counters): M = 400 calls.
    mc = np.stack([model(x[:8], training=False).numpy() for _ in range(400)])
    sigma = mc.std(0)
    tolerance = 5 * sigma * np.sqrt(1 / NUM_SAMPLES + 1 / 400) + 1e-6  # 5 standard errors
    assert np.all(np.abs(mean.numpy() - mc.mean(0)) < tolerance)
    # The predictive spread agrees too (loose: N = 32 samples).
    np.testing.assert_allclose(stddev, sigma, rtol=0.5)


class _Heteroscedastic(keras.Model):
    """Bayesian hidden layer + a Normal output layer (a RandomVariable output)."""

    def __init__(self):
        # Named: Keras 3 would name it "__heteroscedastic" after the class, which SavedModel
        # refuses as a variable scope.
        super().__init__(name="heteroscedastic")
        self.hidden = bl.DenseFlipout(8, activation="relu", seed=3)
        self.head = Normal(units=1, seed=4)

    def call(self, x, training=None):
        return self.head(self.hidden(x))


def test_random_variable_outputs_give_the_total_predictive_stddev(tmp_path):
    model = _Heteroscedastic()
    x, _ = _data(6)
    model(x)
    spec = tf.TensorSpec([None, 3], tf.float32)
    module = export_predictive(model, tmp_path / "hetero", num_samples=8, input_signature=spec)
    out = module.serving_default(tf.constant(x), tf.constant([1, 2]))
    # sqrt(E[var] + Var[mean]) over the 8 samples, recomputed from the distributions.
    means, variances = [], []
    for s in tf.random.experimental.stateless_split(tf.constant([1, 2]), 8):
        with bl.fixed_noise(model, s):
            dist = model(x).distribution
            means.append(dist.mean().numpy())
            variances.append(dist.variance().numpy())
    means, variances = np.stack(means), np.stack(variances)
    np.testing.assert_allclose(out["mean"], means.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["stddev"], np.sqrt(variances.mean(0) + means.var(0)),
                               rtol=1e-5, atol=1e-6)
    assert np.all(out["stddev"].numpy() > np.sqrt(variances.mean(0)) - 1e-6)
    loaded = tf.saved_model.load(str(tmp_path / "hetero"))
    again = loaded.signatures["serving_default"](inputs=tf.constant(x), seed=tf.constant([1, 2]))
    np.testing.assert_allclose(again["stddev"], out["stddev"], rtol=1e-6)


def test_bad_arguments_are_named(trained, tmp_path):
    model, _ = trained
    with pytest.raises(ValueError, match="num_samples=0"):
        export_predictive(model, tmp_path / "a", num_samples=0)
    with pytest.raises(TypeError, match="input_signature"):
        export_predictive(model, tmp_path / "b", input_signature=(None, 3))
    with pytest.raises(ValueError, match="input_signature"):
        export_predictive(_Heteroscedastic(), tmp_path / "c")
