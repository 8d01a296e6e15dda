"""Ensemble layers under `MirroredStrategy` and ensemble models reloaded in a fresh process.

MirroredStrategy (2 logical CPUs, `distribute.set_logical_cpus`) needs a fresh process, so
the checks run this file as a script (``python tests/layers/ensemble/test_strategy.py COMMAND``,
as `tests/layers/_distribute_scripts.py` is run by test_distribute.py) and compare what it prints.

The batch convention under a strategy is edward2's and uncertainty-baselines': each
replica takes its rows of the global batch and tiles them ``E`` times (E contiguous member
blocks of its own rows). The single-device step tiles the whole global batch; both steps
see the same (member, example) pairs, so with per-member noise (``sampling='per_member'``:
one draw per member and call, the same on every replica) or none (BatchEnsemble) the
2-replica losses and updated weights equal the single-device ones. (Per-example draws
are made per replica-local row, a different assignment of draws to pairs than on one
device: the same distribution, not the same numbers.)

Save/load: the parent process builds, trains a step and saves an `EnsembleModel`
(rank-1 members), a `DeepEnsemble` and an MC-dropout `MonteCarloModel` as ``.keras``, the
fresh process loads them and predicts, and its predictions equal the parent's next ones
(same weights and noise counters).

Default run: the dense layers' mirrored step (one subprocess, ~10-30 s); ``-m slow`` adds
the convolutions' (~50 s) and the fresh-process reload (~60 s; test_models.py checks the
same save/load in-process by default).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
E = 2  # members
RTOL, ATOL = 2e-5, 2e-6
TIMEOUT = 900  # seconds, for a loaded machine

#: name -> (x shape of the global batch before tiling, y shape)
CASES = {"DenseRank1": ((4, 5), (4, 3)), "DenseBatchEnsemble": ((4, 5), (4, 3)),
         "Conv2DRank1": ((4, 5, 5, 2), (4, 5, 5, 2)),
         "Conv2DBatchEnsemble": ((4, 5, 5, 2), (4, 5, 5, 2)),
         "Conv1DRank1": ((4, 6, 2), (4, 6, 2)), "Conv1DBatchEnsemble": ((4, 6, 2), (4, 6, 2))}
DEFAULT_CASES = ["DenseRank1", "DenseBatchEnsemble"]
WRAPPERS = ["EnsembleModel", "DeepEnsemble", "MonteCarloModel"]


def _run(*args):
    """Runs this file as a script in a fresh process; returns its RESULT records."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *args], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-5000:]
    return [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines()
            if line.startswith("RESULT ")]


# The subprocess side --------------------------------------------------------------------

def _layer(name):
    """A fresh layer of case ``name`` (rank-1 ones draw per member: see the docstring)."""
    import bayes_planet.layers as bl
    from bayes_planet.layers import regularizers
    # The factors' KL per example of a 1000-example data set: the steps stay small.
    prior = regularizers.Rank1NormalKLDivergence(dataset_size=1000)
    per_member = {"ensemble_size": E, "sampling": "per_member", "seed": 1,
                  "alpha_regularizer": prior, "gamma_regularizer": prior}
    return {
        "DenseRank1": lambda: bl.DenseRank1(3, "tanh", **per_member),
        "DenseBatchEnsemble": lambda: bl.DenseBatchEnsemble(3, "tanh", ensemble_size=E),
        "Conv2DRank1": lambda: bl.Conv2DRank1(2, 3, padding="same", **per_member),
        "Conv2DBatchEnsemble": lambda: bl.Conv2DBatchEnsemble(2, 3, padding="same",
                                                              ensemble_size=E),
        "Conv1DRank1": lambda: bl.Conv1DRank1(2, 3, padding="causal", **per_member),
        "Conv1DBatchEnsemble": lambda: bl.Conv1DBatchEnsemble(2, 3, padding="causal",
                                                              ensemble_size=E),
    }[name]()


def _tiled_model(name, x_shape):
    """A Keras model whose call tiles its (replica's) batch E times, then the layer."""
    import tensorflow as tf

    from bayes_planet._keras import keras

    class Tiled(keras.Model):
        def __init__(self):
            super().__init__()
            self.inner = _layer(name)

        def call(self, x, training=None):
            del training
            return self.inner(tf.tile(x, [E] + [1] * (x.shape.rank - 1)))

    model = Tiled()
    model(tf.zeros([2, *x_shape[1:]]))
    return model


def _mse_of_tiled(y, out):
    """Per-(member, example) squared error ``[E·b]``, the labels tiled like the inputs."""
    import tensorflow as tf
    y = tf.tile(y, [E] + [1] * (y.shape.rank - 1))
    return tf.reduce_mean(tf.square(out - y), axis=list(range(1, out.shape.rank)))


def mirrored(names):
    """For each case: 2 steps of `distribute.make_train_step` on one device and on 2
    replicas from the same weights; prints losses, weight differences and whether the
    replicas agree."""
    from bayes_planet import distribute
    devices = distribute.set_logical_cpus(2)  # first thing: before TF initializes
    import tensorflow as tf

    from bayes_planet._keras import keras
    from bayes_planet.layers import _compat
    strategy = tf.distribute.MirroredStrategy(devices[:2])
    rng = np.random.default_rng(0)
    for name in names:
        x_shape, y_shape = CASES[name]
        x = tf.constant(rng.standard_normal(x_shape), tf.float32)
        y = tf.constant(rng.standard_normal(y_shape), tf.float32)
        single = _tiled_model(name, x_shape)
        with strategy.scope():
            multi = _tiled_model(name, x_shape)
            opt_multi = keras.optimizers.SGD(0.1)
        multi.set_weights(single.get_weights())  # the seed counters too
        steps = [distribute.make_train_step(m, o, _mse_of_tiled, E * x_shape[0], s)
                 for m, o, s in ((single, keras.optimizers.SGD(0.1),
                                  tf.distribute.get_strategy()), (multi, opt_multi, strategy))]
        losses = [[float(step(x, y)) for step in steps] for _ in range(2)]
        diff, agree = 0.0, True
        for a, b in zip(single.weights, multi.weights, strict=True):
            # Its per-replica values (Keras 3 wraps the distributed tf.Variable).
            local = [np.asarray(v) for v in
                     strategy.experimental_local_results(_compat.tf_variable(b))]
            agree &= all(np.array_equal(local[0], v) for v in local[1:])
            diff = max(diff, float(np.max(np.abs(np.asarray(a) - local[0]), initial=0.0)))
        print("RESULT " + json.dumps({"case": name, "losses": losses, "weight_diff": diff,
                                      "replicas_agree": bool(agree)}), flush=True)
    print("DONE", flush=True)


def load_and_predict(directory):
    """Loads every ``<wrapper>.keras`` in ``directory`` and saves its predictions on
    ``x.npy`` as ``<wrapper>.loaded.npy``."""
    import bayes_planet.layers  # noqa: F401  (registers the library's classes)
    from bayes_planet._keras import keras
    x = np.load(os.path.join(directory, "x.npy"))
    for name in WRAPPERS:
        model = keras.models.load_model(os.path.join(directory, f"{name}.keras"))
        np.save(os.path.join(directory, f"{name}.loaded.npy"),
                np.asarray(model.predict(x, verbose=0)))
        print("RESULT " + json.dumps({"wrapper": name, "type": type(model).__name__}),
              flush=True)
    print("DONE", flush=True)


# The tests ------------------------------------------------------------------------------

def _check_mirrored(records, names):
    assert [r["case"] for r in records] == names
    for record in records:
        losses = np.asarray(record["losses"])  # [step, single|mirrored]
        assert np.all(np.isfinite(losses)) and losses[1, 0] < losses[0, 0], record  # trains
        np.testing.assert_allclose(losses[:, 1], losses[:, 0], rtol=RTOL, atol=ATOL,
                                   err_msg=record["case"])
        assert record["weight_diff"] < 1e-5 and record["replicas_agree"], record


def test_dense_ensembles_mirrored_step_equals_single_device():
    _check_mirrored(_run("mirrored", *DEFAULT_CASES), DEFAULT_CASES)


@pytest.mark.slow
def test_conv_ensembles_mirrored_step_equals_single_device():
    names = [n for n in CASES if n not in DEFAULT_CASES]
    _check_mirrored(_run("mirrored", *names), names)


def _wrappers():
    import bayes_planet.layers as bl
    from bayes_planet._keras import keras

    def rank1_net():
        return keras.Sequential([keras.Input((5,)),
                                 bl.DenseRank1(8, "tanh", ensemble_size=E, seed=1),
                                 bl.DenseRank1(4, ensemble_size=E, seed=2)])

    def member(seed):
        return keras.Sequential([keras.Input((5,)), keras.layers.Dense(
            4, kernel_initializer=keras.initializers.GlorotUniform(seed))])

    dropout_net = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, "relu"),
                                    keras.layers.Dropout(0.3), keras.layers.Dense(4)])
    return {"EnsembleModel": bl.EnsembleModel(rank1_net(), E, seed=3),
            "DeepEnsemble": bl.deep_ensemble(member, 2, seed=4),
            "MonteCarloModel": bl.mc_dropout(dropout_net, 4, seed=5)}


@pytest.mark.slow  # about a minute; test_models.py checks the same save/load in-process
def test_ensemble_models_reload_in_a_fresh_process_with_identical_predictions(tmp_path):
    from bayes_planet._keras import keras
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5)).astype("float32")
    y = rng.integers(0, 4, 6)
    np.save(tmp_path / "x.npy", x)
    expected = {}
    for name, model in _wrappers().items():
        model.compile(keras.optimizers.Adam(1e-2),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=6, epochs=1, verbose=0)  # trained, noise counters moved
        model.save(tmp_path / f"{name}.keras")
        expected[name] = model.predict(x, verbose=0)  # the next predictions
    records = _run("load_and_predict", str(tmp_path))
    assert [(r["wrapper"], r["type"]) for r in records] == [(n, n) for n in WRAPPERS]
    for record in records:
        name = record["wrapper"]
        loaded = np.load(tmp_path / f"{name}.loaded.npy")
        np.testing.assert_array_equal(loaded, expected[name], err_msg=name)


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    if command == "mirrored":
        mirrored(arguments)
    elif command == "load_and_predict":
        load_and_predict(arguments[0])
    else:
        raise SystemExit(f"unknown command {command!r}")
