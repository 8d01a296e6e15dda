"""Keras 3 (TF >= 2.16): the layers are native Keras 3 layers, and importing the library leaves
the process's Keras as it was (issue #28).

The Keras 3 tests skip on TF 2.15, whose ``tf.keras`` is Keras 2 (the agent's stack): there the
rest of the suite is the Keras 2 test.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import KERAS3, TF_VERSION, keras
from bayes_planet.layers.testing import assert_reloads_in_a_fresh_process, run_python

keras3_only = pytest.mark.skipif(
    not KERAS3, reason=f"needs Keras 3 (TF >= 2.16 without TF_USE_LEGACY_KERAS); this process "
    f"has TF {tf.__version__} with Keras 2 (the agent's stack)")


_WHICH_KERAS = """
    import json, os
    env_before = os.environ.get("TF_USE_LEGACY_KERAS")
    import bayes_planet.layers as bl
    from bayes_planet.layers import KERAS3, keras  # the public names of the chosen Keras
    import bayes_planet._keras as chosen
    import tensorflow as tf
    print(json.dumps({"public": keras is chosen.keras and KERAS3 is chosen.KERAS3,
                      "env_before": env_before, "env": os.environ.get("TF_USE_LEGACY_KERAS"),
                      "tf_keras": tf.keras.layers.Dense.__module__.split(".")[0],
                      "ours_is_tf_keras": keras.layers.Dense is tf.keras.layers.Dense,
                      "subclass": issubclass(bl.DenseFlipout, tf.keras.layers.Dense),
                      "keras3": KERAS3}))
"""


@pytest.mark.parametrize("legacy", [None, "1"], ids=["default", "TF_USE_LEGACY_KERAS=1"])
def test_importing_bayes_planet_keeps_the_process_keras(legacy):
    """In a fresh process, importing the library leaves TF_USE_LEGACY_KERAS as it was, so
    ``tf.keras`` is what TensorFlow makes of the process's own setting (Keras 3 on TF >= 2.16,
    tf-keras where the process opted in, Keras 2 on TF 2.15), the layers subclass it, and
    ``bayes_planet.layers.keras``/``KERAS3`` name it for scripts and users."""
    if legacy and TF_VERSION < (2, 16):
        pytest.skip("TF_USE_LEGACY_KERAS selects tf-keras only on TF >= 2.16 (TF 2.15 has "
                    "Keras 2 as tf.keras and no tf-keras)")
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = legacy
    got = run_python(_WHICH_KERAS, env)
    assert got["env_before"] == got["env"] == legacy
    assert got["public"] and got["ours_is_tf_keras"] and got["subclass"]
    expect_keras3 = TF_VERSION >= (2, 16) and not legacy
    assert got["keras3"] is expect_keras3
    assert got["tf_keras"] == ("tf_keras" if legacy else "keras")


@keras3_only
def test_layers_are_native_keras3_layers():
    """The issue's reproduction: a Bayesian layer inside `keras.Sequential`, next to Keras
    layers, with the KL in ``model.losses``."""
    import keras as keras3  # the user's own `import keras`

    layer = bl.DenseFlipout(16, activation="relu", seed=0)
    assert isinstance(layer, keras3.Layer)
    model = keras3.Sequential([keras3.Input((5,)), layer, keras3.layers.Dense(3)])
    assert model(np.ones((2, 5), "float32")).shape == (2, 3)
    assert len(model.losses) == 1 and float(model.losses[0]) > 0


def _fig4_cnn():
    """Bayesian Layers' Fig. 4 (Tran et al., 2019): a Bayesian CNN of Flipout layers, on
    28×28 grey images (smaller widths, for speed)."""
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        bl.Conv2DFlipout(4, 5, 1, "same", activation="relu", seed=1),
        keras.layers.MaxPooling2D(2),
        bl.Conv2DFlipout(8, 5, 1, "same", activation="relu", seed=2),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        bl.DenseFlipout(10, seed=3),
    ])


def _images(n, seed):
    """Class k: a bright 7×7 square in cell k of a 4×4 grid (10 classes), plus noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    x = 0.1 * rng.standard_normal((n, 28, 28, 1)).astype("float32")
    for i, k in enumerate(labels):
        row, col = divmod(int(k), 4)
        x[i, 7 * row:7 * row + 7, 7 * col:7 * col + 7] += 1.0
    return x, labels.astype("int32")


@keras3_only
def test_fig4_cnn_trains_saves_and_reloads_in_a_fresh_process(tmp_path):
    """`keras.Sequential` of Conv2DFlipout/DenseFlipout: ``fit`` trains it with the KL in its
    loss, it saves to ``.keras``, and a fresh process loads it with identical posterior-mean
    predictions and KL."""
    x, y = _images(128, seed=0)
    model = _fig4_cnn()
    assert len(model.losses) == 3  # one KL per Bayesian layer
    assert bl.set_dataset_size(model, len(x)) == 3
    model.compile(keras.optimizers.Adam(3e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, epochs=8, batch_size=32, verbose=0).history["loss"]
    assert history[-1] < history[0], history  # KL / N dominates it (N = 128)
    with bl.posterior_mean(model):
        accuracy = np.mean(np.argmax(model(x).numpy(), -1) == y)
    assert accuracy > 0.9, accuracy  # chance: 0.1

    # fit's loss is the data term plus the KL / N (checked deterministically, at the mean).
    with bl.posterior_mean(model):
        logits = model(x[:64]).numpy()
        evaluated = model.evaluate(x[:64], y[:64], batch_size=64, verbose=0)
    data = float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y[:64], logits))
    kl = float(sum(model.losses))
    assert evaluated == pytest.approx(data + kl, rel=1e-5)

    assert_reloads_in_a_fresh_process(model, _images(16, seed=1)[0], tmp_path)


def _sequences(n, seed, length=8):
    """Sequences of 2 features; the label: whether the first feature sums to more than 0."""
    x = np.random.default_rng(seed).standard_normal((n, length, 2)).astype("float32")
    return x, (x[:, :, 0].sum(axis=1) > 0).astype("int32")


@keras3_only
@pytest.mark.parametrize("cell", [
    "LSTMCellReparameterization",  # the check: in the default run (~40 s)
    pytest.param("GRUCellFlipout", marks=pytest.mark.slow)])
def test_rnn_of_a_bayesian_cell_trains_saves_and_reloads_in_a_fresh_process(cell, tmp_path):
    """`keras.layers.RNN` of a Bayesian cell in `keras.Sequential`: ``fit`` trains it with the
    cell's two KL terms in its loss; it saves to ``.keras`` and a fresh process loads it with
    identical posterior-mean predictions and KL."""
    x, y = _sequences(256, seed=0)
    model = keras.Sequential([keras.Input((8, 2)),
                              keras.layers.RNN(getattr(bl, cell)(8, seed=1)),
                              keras.layers.Dense(2)])
    assert len(model.losses) == 2  # kernel and recurrent kernel
    assert bl.set_dataset_size(model, len(x)) == 2
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, epochs=10, batch_size=32, verbose=0).history["loss"]
    assert history[-1] < history[0], history
    with bl.posterior_mean(model):
        accuracy = np.mean(np.argmax(model(x).numpy(), -1) == y)
    assert accuracy > 0.85, accuracy  # chance: about 0.5
    assert_reloads_in_a_fresh_process(model, _sequences(16, seed=1)[0], tmp_path)
