"""Subprocess entry points for the tf.distribute tests (not collected by pytest).

Logical CPU devices and multi-worker clusters must be configured before TensorFlow
initializes its devices, so every strategy run happens in a fresh process::

    python tests/layers/_distribute_scripts.py mirrored_layers [case ...]
    python tests/layers/_distribute_scripts.py mirrored_fit [case ...]
    python tests/layers/_distribute_scripts.py mirrored_world_model
    python tests/layers/_distribute_scripts.py multi_worker OUT.npz      (TF_CONFIG set)

Each prints one JSON line per result, prefixed with ``RESULT ``, then ``DONE``.

Layer cases (`CASES`) build a small Keras model around one layer family member; the
2-replica loss, KL and updated weights must equal the single-device ones on the same
global batch. ``mode`` says why that holds: ``exact`` — weight noise only (every replica
draws the single-device weight sample) or no noise; ``per_example`` — per-example noise
(Flipout signs, local reparameterization), which each replica slices from the global
batch's draw (`bayes_planet.layers.noise.per_example`), i.e. the single-device noise of
its rows.
"""

import hashlib
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402

from tests.layers import _layer_cases as layer_cases  # noqa: E402  (the root is on PYTHONPATH)

RTOL, ATOL = 2e-5, 2e-6

# The default (fast) selection: every family, one weight-noise and one per-example-noise
# member where the family has both. `mirrored_layers all` runs every case.
DEFAULT_CASES = [
    "DenseReparameterization", "DenseFlipout", "DenseDVI", "Conv2DReparameterization",
    "Conv2DLocalReparameterization", "SparseGaussianProcess", "RandomFourierFeatures", "SNGP",
    "Normal", "MixtureLogistic+Discretize", "RealNVP+Permutation+ActNorm", "ActNorm(data_init)",
    "RevNetSequence", "VectorQuantizer", "VectorQuantizer(ema)", "LSTMCellReparameterization",
    "GRUCellFlipout", "MultiHeadAttentionFlipout", "TransformerBlock(reparameterization)",
    # Losses on the *samples* of stochastic outputs / GPs (per-example noise, #19).
    "SparseGaussianProcess(2 layers, sample)", "Normal(sample)",
    "MixtureLogistic+Discretize(sample)", "DenseDVI(sample)",
]
MULTI_WORKER_CASES = [
    "DenseReparameterization", "DenseFlipout", "Conv2DReparameterization",
    "SparseGaussianProcess", "RandomFourierFeatures", "MixtureLogistic+Discretize",
    "RealNVP+Permutation+ActNorm", "ActNorm(data_init)", "RevNetSequence", "VectorQuantizer",
    "VectorQuantizer(ema)", "LSTMCellReparameterization", "GRUCellFlipout",
    "MultiHeadAttentionFlipout", "TransformerBlock(reparameterization)",
]
FIT_CASES = ["DenseReparameterization", "Conv2DReparameterization",
             "TransformerBlock(flipout+local)", "VectorQuantizer(ema)"]
#: Records of `mirrored_layers` (default and ``all``) beyond the layer cases (`_checks`).
CHECKS = ["GaussianProcess(replica noise)", "noise in a while_loop",
          "ActivityRegularization+VectorQuantizer(ema)", "ActivityRegularization+VectorQuantizer"]

def _emit(**record):
    print("RESULT " + json.dumps(record), flush=True)


def _local_values(variable, strategy):
    """The per-replica values of a layer variable (Keras 3 wraps the distributed
    `tf.Variable`; on its wrapper `experimental_local_results` would see one value)."""
    from bayes_planet.layers import _compat
    return strategy.experimental_local_results(_compat.tf_variable(variable))


def _seed_counters(model, strategy):
    from bayes_planet.layers.base import bayesian_layers
    out = []
    for layer in bayesian_layers(model):
        if getattr(layer, "_seed_counter", None) is not None:
            out.append([int(v) for v in _local_values(layer._seed_counter, strategy)])
    return out


def _build_pair(case, strategy, x):
    """Single-device and mirrored models with identical initial weights."""
    import tensorflow as tf

    from bayes_planet._keras import keras
    single = layer_cases.model(case)
    single(x[:2], training=True)
    with strategy.scope():
        multi = layer_cases.model(case)
        multi(x[:2], training=True)
    for a, b in zip(multi.weights, single.weights, strict=True):
        a.assign(b)
    # The build calls advanced the noise counters equally and ran ActNorm's data-dependent
    # initialization: reset both, so the first training step does them.
    for m in (single, multi):
        for w in m.weights:
            if w.dtype == tf.int64 and "seed_counter" in w.name:
                w.assign(0)
            if w.dtype == tf.int32 and w.name.endswith("initialized:0"):
                w.assign(0)
    with strategy.scope():
        opt_multi = keras.optimizers.SGD(0.1)
    return single, multi, keras.optimizers.SGD(0.1), opt_multi


def _step_fn(model, optimizer, loss_fn, global_batch, strategy):
    """Custom data-parallel step returning (data loss, regularization loss), both global."""
    import tensorflow as tf

    from bayes_planet import distribute

    def replica(x, y):
        x, y = distribute.replica_rows((x, y))
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            data = distribute.replica_loss(loss_fn(y, out), global_batch)
            reg = distribute.replica_loss(tf.zeros([0]), global_batch, model.losses)
            loss = data + reg
        grads = tape.gradient(loss, model.trainable_variables)
        grads = [tf.zeros_like(v) if g is None else g
                 for g, v in zip(grads, model.trainable_variables, strict=True)]
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return data, reg

    @tf.function
    def step(x, y):
        data, reg = strategy.run(replica, (x, y))
        return (strategy.reduce("SUM", data, axis=None), strategy.reduce("SUM", reg, axis=None))

    return step


def _compare(single, multi, strategy):
    """(max |single - mirrored| over weights, replicas identical?)."""
    diff = 0.0
    agree = True
    for a, b in zip(single.weights, multi.weights, strict=True):
        locals_ = [np.asarray(v) for v in _local_values(b, strategy)]
        agree &= all(np.array_equal(locals_[0], v) for v in locals_[1:])
        if "float" in str(a.dtype):  # a tf.DType (Keras 2) or a name (Keras 3)
            diff = max(diff, float(np.max(np.abs(np.asarray(a) - locals_[0]), initial=0.0)))
    return diff, agree


def _finite(model):
    return all(np.all(np.isfinite(np.asarray(w))) for w in model.weights if "float" in str(w.dtype))


def _run_case(name, case, strategy, steps=2):
    import tensorflow as tf
    x, y = layer_cases.data(case.x_shape, case.y_shape, case.y_kind)
    x, y = tf.constant(x), tf.constant(y)
    loss_fn = layer_cases.loss_fn(case.loss)
    record = {"case": name, "family": case.family, "mode": case.mode}
    single, multi, opt_s, opt_m = _build_pair(case, strategy, x)
    step_s = _step_fn(single, opt_s, loss_fn, x.shape[0], tf.distribute.get_strategy())
    step_m = _step_fn(multi, opt_m, loss_fn, x.shape[0], strategy)
    losses = []
    for _ in range(steps):
        ls, lm = step_s(x, y), step_m(x, y)
        losses.append([[float(ls[0]), float(ls[1])], [float(lm[0]), float(lm[1])]])
    diff, agree = _compare(single, multi, strategy)
    counters = _seed_counters(multi, strategy)
    single_counters = _seed_counters(single, tf.distribute.get_strategy())
    digest = hashlib.sha1()
    for w in multi.weights:
        digest.update(np.asarray(_local_values(w, strategy)[0]).tobytes())
    record["noisy"] = {
        "weights_sha1": digest.hexdigest(),
        "losses": losses, "weight_diff": diff, "replicas_agree": bool(agree),
        "finite": bool(_finite(multi) and np.all(np.isfinite(losses))),
        "counters_lockstep": all(len(set(c)) == 1 for c in counters),
        "counters_match_single": [c[0] for c in counters] == [c[0] for c in
                                                               single_counters],
        "equal_to_single": bool(np.allclose(np.asarray(losses)[:, 0],
                                            np.asarray(losses)[:, 1], RTOL, ATOL)
                                and diff < 1e-5),
    }
    return record


def _mirrored():
    from bayes_planet import distribute
    devices = distribute.set_logical_cpus(2)
    import tensorflow as tf
    return tf.distribute.MirroredStrategy(devices[:2])


def _exact_gp_replica_noise(strategy):
    """An exact GP's sample is a joint over the batch, so a replica's sample of its own
    rows cannot equal the single-device joint sample in general; its noise must still be
    its rows of the global draw. Global batch [h, h] (both replicas hold the same inputs):
    duplicated noise would give identical replica samples. Replica 0's sample equals the
    single-device sample's first rows (the leading block of a Cholesky factor is the
    factor of the leading block)."""
    import tensorflow as tf

    from bayes_planet import distribute
    half = tf.constant(layer_cases.data((4, 2), (4, 2))[0])
    x = tf.concat([half, half], 0)
    single = layer_cases.bl().GaussianProcess(2, seed=1)
    reference = tf.convert_to_tensor(single(x)).numpy()
    with strategy.scope():
        multi = layer_cases.bl().GaussianProcess(2, seed=1)
        multi.build(x.shape)

    @tf.function
    def run(x):
        return strategy.run(lambda t: tf.convert_to_tensor(multi(distribute.replica_rows(t))),
                            (x,))

    outs = [t.numpy() for t in strategy.experimental_local_results(run(x))]
    return {"case": "GaussianProcess(replica noise)", "status": "ok",
            "finite": bool(all(np.all(np.isfinite(o)) for o in outs)),
            "replicas_differ": bool(not np.allclose(outs[0], outs[1])),
            "replica0_equals_single_rows": bool(np.allclose(outs[0], reference[:4],
                                                            RTOL, ATOL))}


def _noise_in_while_loop(strategy):
    """Weight noise drawn in a `tf.while_loop` of a replica step (3 draws). Each replica
    advances its own copy of the counter (ON_READ), so nothing synchronizes in the loop
    (a counter synchronized on write would ``merge_call`` there, which TensorFlow refuses),
    and each draw is the single-device draw: the replicas' output sums add up to the
    single-device sum over the global batch."""
    import tensorflow as tf

    from bayes_planet import distribute
    x = tf.constant(layer_cases.data((8, 3), (8, 4))[0])
    single = layer_cases.bl().DenseReparameterization(4, seed=1)
    single.build(x.shape)
    with strategy.scope():
        multi = layer_cases.bl().DenseReparameterization(4, seed=1)
        multi.build(x.shape)
    for a, b in zip(multi.weights, single.weights, strict=True):
        a.assign(b)

    def draws(layer, x):
        def body(i, total):
            return i + 1, total + tf.reduce_sum(layer(x))
        return tf.while_loop(lambda i, _: i < 3, body, [0, 0.0])[1]

    reference = float(tf.function(lambda x: draws(single, x))(x))
    sums = tf.function(lambda x: strategy.run(
        lambda t: draws(multi, distribute.replica_rows(t)), (x,)))(x)
    return {"case": "noise in a while_loop", "status": "ok", "single": reference,
            "mirrored": sum(float(t) for t in strategy.experimental_local_results(sums)),
            "counters": _seed_counters(multi, strategy),
            "single_counters": _seed_counters(single, tf.distribute.get_strategy())}


def _checks(strategy):
    """The records of `CHECKS` (beyond the layer cases)."""
    yield "GaussianProcess(replica noise)", lambda: _exact_gp_replica_noise(strategy)
    yield "noise in a while_loop", lambda: _noise_in_while_loop(strategy)
    for name, case in layer_cases.keras_add_loss_cases().items():
        yield name, lambda name=name, case=case: {**_run_case(name, case, strategy),
                                                  "status": "ok"}


def mirrored_layers(names):
    strategy = _mirrored()
    import tensorflow as tf
    table = layer_cases.case_table()
    if not names or names == ["all"]:
        for name, check in _checks(strategy):
            tf.keras.utils.set_random_seed(0)
            try:
                _emit(**check())
            except Exception as error:  # noqa: BLE001 - reported, asserted by the test
                _emit(case=name, status="error", error=f"{type(error).__name__}: {error}"[-800:])
    names = list(table) if names == ["all"] else (names or DEFAULT_CASES)
    for name in names:
        tf.keras.utils.set_random_seed(0)
        try:
            record = _run_case(name, table[name], strategy)
            record["status"] = "ok"
        except (ImportError, AttributeError) as error:
            record = {"case": name, "family": table[name].family, "status": "unavailable",
                      "error": f"{type(error).__name__}: {error}"[:500]}
        except Exception as error:  # noqa: BLE001 - reported per case, asserted by the test
            record = {"case": name, "family": table[name].family, "status": "error",
                      "error": f"{type(error).__name__}: {error}"[-800:]}
        _emit(**record)
    print("DONE", flush=True)


def mirrored_fit(names):
    """``model.fit`` (Keras' own data-parallel step) single-device vs 2 replicas."""
    strategy = _mirrored()
    import tensorflow as tf

    from bayes_planet._keras import keras
    table = layer_cases.case_table()
    if names == ["all"]:
        names = [n for n, c in table.items() if c.fit]
    for name in names or FIT_CASES:
        case = table[name]
        tf.keras.utils.set_random_seed(0)
        try:
            x, y = layer_cases.data(case.x_shape, case.y_shape, case.y_kind)
            single, multi, _, _ = _build_pair(case, strategy, tf.constant(x))
            histories = []
            for model, scope in ((single, tf.distribute.get_strategy()), (multi, strategy)):
                with scope.scope():
                    model.compile(keras.optimizers.SGD(0.1), "mse")
                hist = model.fit(x, y, batch_size=len(x), epochs=2, shuffle=False, verbose=0)
                histories.append(hist.history["loss"])
            diff, agree = _compare(single, multi, strategy)
            counters = _seed_counters(multi, strategy)
            record = {"case": name, "family": case.family, "status": "ok",
                      "losses": histories, "weight_diff": diff, "replicas_agree": bool(agree),
                      "counters": counters,
                      "counters_lockstep": all(len(set(c)) == 1 for c in counters),
                      "equal_to_single": bool(np.allclose(*histories, RTOL, ATOL)
                                              and diff < 1e-5)}
        except Exception as error:  # noqa: BLE001
            record = {"case": name, "family": case.family, "status": "error",
                      "error": f"{type(error).__name__}: {error}"[-800:]}
        _emit(**record)
    # The library's custom step, `distribute.make_train_step`, on the same comparison.
    from bayes_planet import distribute
    case = table["DenseReparameterization"]
    tf.keras.utils.set_random_seed(0)
    x, y = (tf.constant(a) for a in layer_cases.data(case.x_shape, case.y_shape))
    single, multi, opt_s, opt_m = _build_pair(case, strategy, x)
    steps = [distribute.make_train_step(m, o, layer_cases.mse, 8, s) for m, o, s in
             ((single, opt_s, tf.distribute.get_strategy()), (multi, opt_m, strategy))]
    losses = [[float(step(x, y)) for step in steps] for _ in range(2)]
    diff, agree = _compare(single, multi, strategy)
    _emit(case="make_train_step", status="ok", losses=losses, weight_diff=diff,
          replicas_agree=bool(agree))
    print("DONE", flush=True)


# World model --------------------------------------------------------------------------

def _world_batch(batch, length=8, seed=0):
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(batch, length, 5)).astype(np.float32)
    action = rng.uniform(-1, 1, (batch, length, 1)).astype(np.float32)
    return {"obs": tf.constant(obs), "action": tf.constant(action),
            "reward": tf.constant(obs[..., 0] * 0.5 + action[..., 0])}


def _world_models(estimator, strategy, overrides=(), learning_rate=1.0):
    from bayes_planet._keras import keras
    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.world_model import WorldModel
    # PlaNet's world model (unit observation std, raw observations): with SGD(1) a sharper
    # likelihood scales the gradients, and so the reduction-order differences, by 1/std².
    config = config_lib.load(["planet", "debug"], [f"model.estimator={estimator}",
                                                   "loss.free_nats=0.5", *overrides])
    single = WorldModel(config, (5,), 1)
    multi = WorldModel(config, (5,), 1, strategy=strategy)
    for a, b in zip(multi.variables, single.variables, strict=True):
        a.assign(b)
    for model in (single, multi):  # SGD(1): the weight change is the clipped gradient.
        with model.strategy.scope():
            model.optimizer = keras.optimizers.SGD(learning_rate)
            model.optimizer.build(model.trainable_variables)
    return single, multi


def _weights_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)), initial=0.0))
               for x, y in zip(a.trainable_variables, b.trainable_variables, strict=True))


def mirrored_world_model():
    strategy = _mirrored()
    import tensorflow as tf

    from bayes_planet.agent import config as config_lib
    seed = tf.constant([3, 4])
    for estimator in ("reparameterization", "flipout"):
        # 1. A global batch of distinct rows: each replica trains on its rows with their
        #    single-device noise (weight sample shared, per-example noise sliced from the
        #    global draw), so the 2-replica step must equal the single-device step.
        single, multi = _world_models(estimator, strategy)
        batch = _world_batch(4)
        m1 = single.train_step(batch, seed, 100)
        m2 = multi.train_step(batch, seed, 100)
        _emit(test="global_batch", estimator=estimator,
              single={k: float(v) for k, v in m1.items()},
              mirrored={k: float(v) for k, v in m2.items()},
              weight_diff=_weights_diff(single, multi),
              replicas_agree=all(np.array_equal(*map(np.asarray, _local_values(v, strategy)))
                                 for v in multi.trainable_variables))
        # 2. Free nats between the two shards' state KLs: clipping each replica's own mean
        #    (instead of the global one) would change the loss and gradient.
        single, multi = _world_models(estimator, strategy)
        batch = _world_batch(4, seed=1)
        shards = [{k: v[:2] for k, v in batch.items()}, {k: v[2:] for k, v in batch.items()}]
        # The shards' state KLs (their own latent noise; the replicas' differs a little).
        kls = sorted(float(single.loss(s, seed, 100)[1]["state_kl"]) for s in shards)
        free_nats = kls[0] + 0.25 * (kls[1] - kls[0])
        for model in (single, multi):
            model.loss_config = config_lib.load(["debug"], [f"loss.free_nats={free_nats}"]).loss
        ref = single.train_step(batch, seed, 100)
        got = multi.train_step(batch, seed, 100)
        _emit(test="distinct_shards", estimator=estimator, shard_kls=kls, free_nats=free_nats,
              single={k: float(v) for k, v in ref.items()},
              mirrored={k: float(got[k]) for k in ref},
              weight_diff=_weights_diff(single, multi))
    # 3. A few debug-sized steps with the default optimizer (Adam), finite.
    from bayes_planet.agent.world_model import WorldModel
    config = config_lib.load(["debug"], ["model.estimator=flipout"])
    model = WorldModel(config, (5,), 1, strategy=strategy)
    losses = [float(model.train_step(_world_batch(4, seed=i), tf.constant([0, i]), 100)["loss"])
              for i in range(3)]
    _emit(test="few_steps", losses=losses,
          finite=bool(np.all(np.isfinite(losses))
                      and all(np.all(np.isfinite(np.asarray(v))) for v in model.variables)))
    print("DONE", flush=True)


def trainer_mirrored(logdir):
    """The agent loop (`Trainer`, debug preset) with ``strategy: mirrored`` on 2 CPUs."""
    _mirrored()
    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.training import Trainer
    config = config_lib.load(["debug"], ["strategy=mirrored", "eval.video=false"])
    trainer = Trainer(config, logdir)
    records = trainer.loop(progress=False)
    replicas = trainer.agent.strategy.num_replicas_in_sync
    # Resume: a second Trainer on the same logdir restores the mirrored checkpoint.
    again = Trainer(config, logdir)
    same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
               zip(trainer.agent.model.trainable_variables,
                   again.agent.model.trainable_variables,
                   strict=True))
    _emit(test="trainer", replicas=replicas, records=records, restored=bool(same),
          updates=int(again.agent.updates.numpy()))
    print("DONE", flush=True)


# Multi-worker -------------------------------------------------------------------------

def _raised_in(error):
    """``module.function`` of each frame of ``error``'s traceback, innermost last."""
    import traceback
    return [f"{frame.filename.rsplit('site-packages/', 1)[-1]}:{frame.name}"
            for frame in traceback.extract_tb(error.__traceback__)]


def multi_worker(out_path, cases=(), steps=3):
    """One worker of a localhost MultiWorkerMirroredStrategy cluster (TF_CONFIG).

    Writes weights and losses to ``out_path`` (npz) and, for the layer ``cases``, their
    records (as `mirrored_layers`, with a digest of the final weights) to
    ``out_path + '.json'``."""
    from bayes_planet import distribute
    strategy = distribute.make_strategy("multi_worker")  # first: before any other op
    import tensorflow as tf

    from bayes_planet._extras import agent_extra_installed
    from bayes_planet._keras import KERAS3, keras
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    tf.keras.utils.set_random_seed(0)  # the same single-device reference on both workers
    arrays = {}
    if agent_extra_installed():  # the world model is the agent's (Python 3.10-3.11)
        # The global batch is the same on both workers; each trains on its rows.
        seed = tf.constant([3, 4])
        single, multi = _world_models("reparameterization", strategy, learning_rate=0.05)
        batch = _world_batch(4)
        world_losses = []
        for i in range(steps):
            s = single.train_step(batch, seed + i, 100)
            m = multi.train_step(batch, seed + i, 100)
            world_losses.append([float(s["loss"]), float(m["loss"])])
        arrays["world_losses"] = np.asarray(world_losses)
        arrays.update({f"world_{i}": np.asarray(v)
                       for i, v in enumerate(multi.trainable_variables)})
        arrays.update({f"world_single_{i}": np.asarray(v)
                       for i, v in enumerate(single.trainable_variables)})
    # A Bayesian Keras model under model.fit (Keras' data-parallel step).
    x, y = layer_cases.data((8, 3), (8, 2))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options)

    def fit(layers):
        with strategy.scope():
            model = keras.Sequential(layers)
            model.build((None, 3))
            model.compile(keras.optimizers.Adam(1e-2), "mse")
        hist = model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
        return model, hist.history["loss"]

    if KERAS3:  # the frames of a fit error (asserted by the test) where Keras raises it
        keras.config.disable_traceback_filtering()
    fit_record = {"status": "ok"}
    try:
        model, fit_losses = fit([layer_cases.bl().DenseReparameterization(8, activation="relu", seed=1),
                                 layer_cases.bl().DenseFlipout(2, seed=2)])
        arrays.update({f"keras_{i}": np.asarray(v) for i, v in enumerate(model.weights)})
        arrays["fit_losses"] = np.asarray(fit_losses)
    except Exception as error:  # noqa: BLE001 - Keras 3 (see the test); asserted by the test
        fit_record = {"status": "error", "error": f"{type(error).__name__}: {error}"[:300],
                      "where": _raised_in(error)}
        try:  # the same fit of a plain Keras Dense layer
            fit([keras.layers.Dense(2)])
            fit_record["plain_dense"] = "ok"
        except Exception as plain:  # noqa: BLE001
            fit_record["plain_dense"] = f"{type(plain).__name__}: {plain}"[:300]
            fit_record["plain_dense_where"] = _raised_in(plain)
    with open(out_path + ".fit.json", "w") as f:
        json.dump(fit_record, f)
    np.savez(out_path, **arrays)
    table, records = layer_cases.case_table(), []
    for name in cases:
        tf.keras.utils.set_random_seed(0)
        try:
            records.append({**_run_case(name, table[name], strategy), "status": "ok"})
        except Exception as error:  # noqa: BLE001 - reported per case
            records.append({"case": name, "status": "error",
                            "error": f"{type(error).__name__}: {error}"[-800:]})
    with open(out_path + ".json", "w") as f:
        json.dump(records, f)
    print("DONE", flush=True)


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "mirrored_layers":
        mirrored_layers(args)
    elif command == "mirrored_fit":
        mirrored_fit(args)
    elif command == "mirrored_world_model":
        mirrored_world_model()
    elif command == "trainer_mirrored":
        trainer_mirrored(args[0])
    elif command == "multi_worker":
        multi_worker(args[0], args[1:])
    else:
        raise SystemExit(f"unknown command {command!r}")
