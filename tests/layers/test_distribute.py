"""Data parallelism with tf.distribute: every layer family and the world model under
`MirroredStrategy` (2 logical CPUs) and `MultiWorkerMirroredStrategy` (2 localhost
workers), against single-device runs on the same global batch.

Strategy runs need a fresh process (logical devices / TF_CONFIG are fixed when
TensorFlow initializes), so a module fixture starts every run of
``tests/layers/_distribute_scripts.py`` at once (they overlap on the 2 cores) and each test
reads its results. See that module for what "exact" and "per_example" cases assert.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet import distribute
from bayes_planet._extras import agent_extra_installed
from bayes_planet._keras import KERAS3
from tests.layers._distribute_scripts import (
    CHECKS,
    DEFAULT_CASES,
    FIT_CASES,
    MULTI_WORKER_CASES,
)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "_distribute_scripts.py")

#: Layer cases of the default multi-worker run (a custom step: `_run_case`).
MULTI_WORKER_DEFAULT = ["DenseReparameterization", "DenseFlipout"]
TIMEOUT = 1500  # seconds; generous for a loaded machine (about 60 s of CPU when idle)
RTOL, ATOL = 2e-5, 2e-6


ROOT = os.path.dirname(os.path.dirname(HERE))


def _env(**extra):
    # The scripts import this checkout's bayes_planet (as `python -m pytest` from the
    # root does), whatever an editable install elsewhere points at.
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=path)
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


class _Run:
    """A started subprocess; ``.results()`` waits and parses its RESULT lines."""

    def __init__(self, args, env=None):
        self.args = args
        self.proc = subprocess.Popen([sys.executable, SCRIPT, *args], env=env or _env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self._out = None

    def wait(self, deadline):
        if self._out is None:
            try:
                out, err = self.proc.communicate(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                out, err = self.proc.communicate()
                err += "\nTIMEOUT"
            self._out = (out, err)
        return self._out

    def results(self, deadline):
        out, err = self.wait(deadline)
        assert "DONE" in out, f"{self.args} failed:\n{out[-3000:]}\n{err[-5000:]}"
        return [json.loads(line[len("RESULT "):]) for line in out.splitlines()
                if line.startswith("RESULT ")]


# The tests that read these runs are marked slow: the subprocesses take 1-3 minutes in all.
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multi_worker")
    deadline = time.time() + TIMEOUT
    started = {
        "layers": _Run(["mirrored_layers"]),
        "fit": _Run(["mirrored_fit"]),
        "world_model": _Run(["mirrored_world_model"]),
        "workers": [_Run(["multi_worker", str(tmp / f"worker{i}.npz"), *MULTI_WORKER_DEFAULT],
                         _env(TF_CONFIG=config))
                    for i, config in enumerate(distribute.localhost_cluster(2))],
    }
    yield started, deadline, tmp
    for run in [started["layers"], started["fit"], started["world_model"], *started["workers"]]:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, 9)
            run.proc.communicate()


def _by_case(runs, key):
    started, deadline, _ = runs
    return {r["case"]: r for r in started[key].results(deadline)}


# In-process checks of the helpers (default strategy: one replica) -----------------------

def test_make_strategy_names_and_defaults():
    assert distribute.make_strategy("none") is tf.distribute.get_strategy()
    assert distribute.num_replicas() == 1 and distribute.is_chief()
    with pytest.raises(ValueError, match="strategy='gpu'"):
        distribute.make_strategy("gpu")
    with pytest.raises(ValueError, match="heartbeat_timeout=0"):
        distribute.make_strategy("multi_worker", heartbeat_timeout=0)
    with pytest.raises(ValueError, match="num_workers=0"):
        distribute.localhost_cluster(0)
    configs = [json.loads(c) for c in distribute.localhost_cluster(2)]
    workers = configs[0]["cluster"]["worker"]
    assert [c["task"]["index"] for c in configs] == [0, 1] and len(set(workers)) == 2
    assert all(w.startswith("localhost:") for w in workers)


def test_replica_loss_is_the_plain_loss_on_one_replica():
    per_example = tf.constant([1.0, 2.0, 3.0, 6.0])
    kl = [tf.constant(5.0), tf.constant(1.0)]
    loss = distribute.replica_loss(per_example, 4, kl)
    np.testing.assert_allclose(float(loss), 3.0 + 6.0, rtol=1e-6)
    # A replica holding half of a global batch of 8: its share of the data term.
    np.testing.assert_allclose(float(distribute.replica_loss(per_example, 8)), 1.5, rtol=1e-6)
    means = distribute.global_mean([tf.constant([[1.0, 2.0]]), tf.constant([[3.0, 5.0]])])
    np.testing.assert_allclose([float(m) for m in means], [1.5, 4.0])
    batch = {"x": tf.range(4)}
    assert distribute.replica_rows(batch) is batch
    with pytest.raises(ValueError, match="positive integer"):
        distribute.set_logical_cpus(0)


# MirroredStrategy over 2 logical CPUs: every layer family ------------------------------

@pytest.mark.parametrize("case", DEFAULT_CASES)
@pytest.mark.slow
def test_layer_family_under_mirrored_strategy(runs, case):
    record = _by_case(runs, "layers")[case]
    assert record["status"] == "ok", record
    noisy = record["noisy"]
    # Always: finite, replicas hold identical weights, noise counters in lockstep and
    # equal to the single-device counters (one draw per call on every replica).
    assert noisy["finite"] and noisy["replicas_agree"], noisy
    assert noisy["counters_lockstep"] and noisy["counters_match_single"], noisy
    losses = np.asarray(noisy["losses"])  # [step, single|mirrored, data|KL]
    # The KL is counted once: the same regularization loss as on one device.
    np.testing.assert_allclose(losses[0, 1, 1], losses[0, 0, 1], rtol=RTOL, atol=ATOL)
    # Weight noise: every replica draws the single-device weight sample; per-example
    # noise: each replica's rows get their single-device draws (sliced from the global
    # draw). Either way the 2-replica steps reproduce the single-device steps.
    np.testing.assert_allclose(losses[:, 1], losses[:, 0], rtol=RTOL, atol=ATOL)
    assert noisy["weight_diff"] < 1e-5 and noisy["equal_to_single"], noisy


@pytest.mark.slow
def test_exact_gp_replicas_draw_their_own_noise(runs):
    """Issue #19: GP samples were identical on both replicas (duplicated noise)."""
    record = _by_case(runs, "layers")["GaussianProcess(replica noise)"]
    assert record["status"] == "ok", record
    assert record["finite"] and record["replicas_differ"], record
    assert record["replica0_equals_single_rows"], record


@pytest.mark.slow
def test_noise_drawn_in_a_while_loop_under_mirrored_strategy(runs):
    """The noise counter is per replica (ON_READ): a draw in a `tf.while_loop` of a replica
    step needs no cross-replica sync (a counter synchronized on write cannot be updated
    there), and the draws are the single-device ones."""
    record = _by_case(runs, "layers")["noise in a while_loop"]
    assert record["status"] == "ok", record
    np.testing.assert_allclose(record["mirrored"], record["single"], rtol=RTOL, atol=ATOL)
    assert record["counters"] == [[3, 3]] and record["single_counters"] == [[3]], record


@pytest.mark.slow
def test_keras_add_loss_before_a_collective(runs):
    """A plain Keras layer's ``add_loss`` (`ActivityRegularization`), then a layer whose call
    runs a collective (`VectorQuantizer(ema=True)`). Keras 2 keeps each replica's losses
    apart. Keras 3 keeps them in one list per layer, shared by the replica threads, which
    take turns at the collective: each replica reads back the other's activity loss
    (docs/distributed.md). The library's own ``add_loss`` (`VectorQuantizer`) is kept per
    replica on both (`_compat.ReplicaLocalLosses`); without the collective both are exact."""
    records = _by_case(runs, "layers")
    control = records["ActivityRegularization+VectorQuantizer"]
    assert control["status"] == "ok" and control["noisy"]["equal_to_single"], control
    record = records["ActivityRegularization+VectorQuantizer(ema)"]
    assert record["status"] == "ok", record
    losses = np.asarray(record["noisy"]["losses"])  # [step, single|mirrored, data|reg]
    np.testing.assert_allclose(losses[0, 1, 0], losses[0, 0, 0], rtol=RTOL, atol=ATOL)
    if KERAS3:  # the first step's regularization loss is not the single-device one
        assert not np.isclose(losses[0, 1, 1], losses[0, 0, 1], RTOL, ATOL), record
    else:
        assert record["noisy"]["equal_to_single"], record


@pytest.mark.parametrize("case", FIT_CASES)
@pytest.mark.slow
def test_model_fit_under_mirrored_strategy_equals_single_device(runs, case):
    """Keras' own step: the KL in model.losses is scaled by 1/replicas, counted once."""
    record = _by_case(runs, "fit")[case]
    assert record["status"] == "ok", record
    single, mirrored = record["losses"]
    np.testing.assert_allclose(mirrored, single, rtol=RTOL, atol=ATOL)
    assert record["weight_diff"] < 1e-5 and record["replicas_agree"], record
    assert record["counters_lockstep"] and all(c[0] == 2 for c in record["counters"]), record


@pytest.mark.slow
def test_make_train_step_under_mirrored_strategy_equals_single_device(runs):
    record = _by_case(runs, "fit")["make_train_step"]
    losses = np.asarray(record["losses"])  # [step, single|mirrored]: data + KL, global
    np.testing.assert_allclose(losses[:, 1], losses[:, 0], rtol=RTOL, atol=ATOL)
    assert record["weight_diff"] < 1e-5 and record["replicas_agree"], record


# The world model --------------------------------------------------------------------------

def _world(runs, test):
    started, deadline, _ = runs
    return [r for r in started["world_model"].results(deadline) if r["test"] == test]


@pytest.mark.parametrize("estimator", ["reparameterization", "flipout"])
@pytest.mark.slow
def test_world_model_mirrored_step_equals_single_device(runs, estimator):
    """A global batch of distinct rows: loss, metrics and updated weights of the 2-replica
    step equal the single-device step (weight sample shared, latent noise per row)."""
    (record,) = [r for r in _world(runs, "global_batch") if r["estimator"] == estimator]
    for key, value in record["single"].items():
        np.testing.assert_allclose(record["mirrored"][key], value, rtol=RTOL, atol=ATOL,
                                   err_msg=key)
    assert record["single"]["weight_kl"] > 0  # Bayesian transition: the KL is counted once.
    assert record["weight_diff"] < 1e-5 and record["replicas_agree"], record


@pytest.mark.parametrize("estimator", ["reparameterization", "flipout"])
@pytest.mark.slow
def test_world_model_free_nats_clip_the_global_state_kl(runs, estimator):
    """Free nats between the shards' KLs: per-replica clipping would differ from the
    single-device step; the 2-replica step equals it."""
    (record,) = [r for r in _world(runs, "distinct_shards") if r["estimator"] == estimator]
    low, high = record["shard_kls"]
    assert low < record["free_nats"] < (low + high) / 2  # per-replica clipping would differ
    for key, value in record["single"].items():
        np.testing.assert_allclose(record["mirrored"][key], value, rtol=RTOL, atol=ATOL,
                                   err_msg=key)
    assert record["weight_diff"] < 1e-5, record


@pytest.mark.slow
def test_world_model_mirrored_debug_steps_are_finite(runs):
    (record,) = _world(runs, "few_steps")
    assert record["finite"] and len(record["losses"]) == 3, record


# MultiWorkerMirroredStrategy: 2 worker processes on localhost --------------------------

def _worker_arrays(runs):
    """Both workers' saved arrays, once both have finished."""
    started, deadline, tmp = runs
    outputs = [worker.wait(deadline) for worker in started["workers"]]
    for i, (worker, (out, _)) in enumerate(zip(started["workers"], outputs, strict=True)):
        assert worker.proc.returncode == 0 and "DONE" in out, (
            f"worker {i} failed:\n" + "\n\n".join(f"worker {j} stderr:\n{e[-4000:]}"
                                                  for j, (_, e) in enumerate(outputs)))
    return [np.load(tmp / f"worker{i}.npz") for i in range(2)]


def _same_on_both_workers(first, second, prefix):
    keys = [k for k in first.files if k.startswith(prefix)]
    assert keys and sorted(keys) == sorted(k for k in second.files if k.startswith(prefix))
    for key in keys:  # Both workers hold the same weights after the steps.
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)
        assert np.all(np.isfinite(first[key])), key
    return keys


@pytest.mark.slow
def test_multi_worker_custom_step_equals_single_device(runs):
    """Bayesian layers in a custom step (`strategy.run`) on 2 localhost workers: each worker's
    2-replica steps equal the single-device steps, and both end with identical weights."""
    _, _, tmp = runs
    _worker_arrays(runs)
    first, second = (json.loads((tmp / f"worker{i}.npz.json").read_text()) for i in range(2))
    assert [r["case"] for r in first] == MULTI_WORKER_DEFAULT
    for a, b in zip(first, second, strict=True):
        assert _case_ok(a) and _case_ok(b), (a, b)
        assert a["noisy"]["weights_sha1"] == b["noisy"]["weights_sha1"], a["case"]


@pytest.mark.slow
def test_multi_worker_localhost_workers_agree_under_fit(runs):
    """`model.fit` of Bayesian layers on 2 localhost workers: identical losses and weights.

    Keras 3.15 cannot `fit` under `MultiWorkerMirroredStrategy`, with any layer: its
    `_maybe_symbolic_build` reduces the first distributed batch with `strategy.reduce`, which
    this strategy cannot do for a nest (keras-team/keras#20585; docs/distributed.md)."""
    _, _, tmp = runs
    first, second = _worker_arrays(runs)
    records = [json.loads((tmp / f"worker{i}.npz.fit.json").read_text()) for i in range(2)]
    if KERAS3:
        for record in records:
            assert record["status"] == "error" and "PerReplica" in record["error"], record
            assert "keras/src/backend/tensorflow/trainer.py:_maybe_symbolic_build" in (
                record["where"]), record
            # Not the Bayesian layers: a plain Dense layer fails in the same place.
            assert record["plain_dense_where"] == record["where"], record
    else:
        assert all(record["status"] == "ok" for record in records), records
        _same_on_both_workers(first, second, "keras_")
        np.testing.assert_array_equal(first["fit_losses"], second["fit_losses"])
        assert np.all(np.isfinite(first["fit_losses"]))


@pytest.mark.slow
def test_multi_worker_world_model_equals_single_device(runs):
    if not agent_extra_installed():  # the workers skipped it (see multi_worker)
        pytest.skip("the world model needs the 'agent' extra (Python 3.10-3.11), not installed")
    first, second = _worker_arrays(runs)
    keys = _same_on_both_workers(first, second, "world_")
    # The 2-worker loss equals the single-device loss at every step.
    losses = first["world_losses"]
    assert losses.shape == (3, 2) and np.all(np.isfinite(losses))
    np.testing.assert_allclose(losses[:, 1], losses[:, 0], rtol=RTOL, atol=ATOL)
    for i in range(sum(k.startswith("world_single_") for k in keys)):
        np.testing.assert_allclose(first[f"world_{i}"], first[f"world_single_{i}"],
                                   rtol=1e-5, atol=1e-6)


# Everything (slow) ------------------------------------------------------------------------

def _case_ok(record):
    noisy = record.get("noisy", {})
    if record["status"] != "ok":
        return False
    equal = noisy["equal_to_single"]
    return noisy["finite"] and noisy["replicas_agree"] and noisy["counters_lockstep"] and equal


@pytest.mark.slow
def test_every_layer_case_under_mirrored_strategy():
    records = _Run(["mirrored_layers", "all"]).results(time.time() + 3 * TIMEOUT)
    records = [r for r in records if r["case"] not in CHECKS]
    failures = [r for r in records if not _case_ok(r)]
    assert len(records) > len(DEFAULT_CASES) and not failures, failures


@pytest.mark.slow
def test_layer_families_under_multi_worker_strategy(tmp_path):
    """Each family on 2 localhost workers: the single-device comparison of the mirrored
    test, and both workers end with bitwise identical weights."""
    workers = [_Run(["multi_worker", str(tmp_path / f"w{i}.npz"), *MULTI_WORKER_CASES],
                    _env(TF_CONFIG=config))
               for i, config in enumerate(distribute.localhost_cluster(2))]
    deadline = time.time() + 3 * TIMEOUT
    for worker in workers:
        out, err = worker.wait(deadline)
        assert "DONE" in out, err[-5000:]
    first, second = (json.loads((tmp_path / f"w{i}.npz.json").read_text()) for i in range(2))
    assert [r["case"] for r in first] == MULTI_WORKER_CASES
    for a, b in zip(first, second, strict=True):
        assert _case_ok(a) and _case_ok(b), (a, b)
        assert a["noisy"]["weights_sha1"] == b["noisy"]["weights_sha1"], a["case"]


@pytest.mark.slow
def test_agent_loop_with_mirrored_strategy(tmp_path):
    """`Trainer` with ``strategy: mirrored`` on 2 logical CPUs: collect, train (2
    replicas), plan, evaluate, checkpoint, and resume from the mirrored checkpoint."""
    (record,) = _Run(["trainer_mirrored", str(tmp_path / "run")]).results(
        time.time() + TIMEOUT)
    assert record["replicas"] == 2 and record["restored"] and record["updates"] == 3
    last = record["records"][-1]
    assert np.isfinite(last["loss"]) and last["weight_kl"] > 0 and "eval_return" in last
