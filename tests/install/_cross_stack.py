"""Save a model of Bayesian layers on one TF/Keras stack, load it on another.

    python -m tests.install._cross_stack save DIR   # DIR/model.keras, model.weights.h5, x.npy, y.npy, kl.json
    python -m tests.install._cross_stack load DIR   # loads both ways, prints outputs' and KL's differences

Run from the repository root (``-m`` keeps this checkout's ``bayes_planet`` first on the
path). Used by ``tests/install/test_packaging.py::test_save_load_across_stacks`` with two
interpreters (TF 2.15 with ``tf.keras``; TF >= 2.16 with tf-keras).
"""

import json
import pathlib
import sys

import numpy as np

import bayes_planet.layers as bl
from bayes_planet._keras import keras, tf


def build():
    """A small model touching the main families: mean-field conv, dense and recurrent, and the
    rank-1 and BatchEnsemble dense layers (batch 5 = 5 members)."""
    inputs = keras.Input((6, 4))
    h = bl.Conv1DFlipout(8, 3, padding="same", activation="relu", seed=1)(inputs)
    h = keras.layers.RNN(bl.LSTMCellReparameterization(8, seed=2))(h)
    h = bl.DenseReparameterization(
        6, kernel_regularizer=bl.ScaleMixtureKLDivergence(), seed=3, activation="tanh")(h)
    h = bl.DenseRank1(6, ensemble_size=5, seed=5, activation="tanh")(h)
    h = bl.DenseBatchEnsemble(6, ensemble_size=5, activation="tanh")(h)
    h = bl.DenseFlipout(4, seed=4)(h)
    return keras.Model(inputs, h)


def _outputs(model, x):
    with bl.posterior_mean(model):
        y = model(x).numpy()
    return y, float(tf.add_n(model.losses).numpy())


def _with_weights(model, path):
    model.load_weights(path)
    return model


def main(command, directory):
    directory = pathlib.Path(directory)
    keras.utils.set_random_seed(0)
    if command == "save":
        model = build()
        x = np.random.default_rng(0).normal(size=(5, 6, 4)).astype("float32")
        y, kl = _outputs(model, x)
        model.save(directory / "model.keras")
        model.save_weights(directory / "model.weights.h5")
        np.save(directory / "x.npy", x)
        np.save(directory / "y.npy", y)
        (directory / "kl.json").write_text(json.dumps(kl))
    elif command == "load":
        x, saved_y = np.load(directory / "x.npy"), np.load(directory / "y.npy")
        saved_kl = json.loads((directory / "kl.json").read_text())
        result = {"tf": tf.__version__, "keras": keras.__name__}
        loaders = {"model": lambda: keras.models.load_model(directory / "model.keras"),
                   "weights": lambda: _with_weights(build(), directory / "model.weights.h5")}
        for way, load in loaders.items():
            try:
                y, kl = _outputs(load(), x)
            except Exception as e:  # noqa: BLE001 - reported, the caller decides
                result[way] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            else:
                result[way] = {"max_abs_output_diff": float(np.max(np.abs(y - saved_y))),
                               "kl": kl, "saved_kl": saved_kl}
        print(json.dumps(result))
    else:
        raise ValueError(f"Expected command 'save' or 'load'. Received: command={command!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
