"""Data-parallel scaling of world-model train steps/s from 1 to 2 workers on this machine.

    python benchmarks/scaling.py [--presets debug,cpu] [--steps 20] [--rounds 2]

Configurations, each in fresh processes, at the same *global* batch (the preset's):

- ``1 worker``: one process, no strategy, TensorFlow on both cores (2 threads);
- ``1 worker, 1 thread``: the same on one core (what each of the 2 workers gets);
- ``2 workers``: `MultiWorkerMirroredStrategy` over 2 processes on localhost (TF_CONFIG,
  gRPC ring all-reduce over loopback), one thread each, each with half the batch;
- ``half batch, 1 thread``: one process, no strategy, half the global batch on one
  thread — the local compute of one of the 2 workers.

Reported: steps/s (median over rounds), the speedup of 2 workers over 1 worker (2
threads) and over 1 worker (1 thread), the communication share of a 2-worker step —
the time of the step's collectives measured alone in the same processes (one all-reduce
of a gradient-sized buffer plus two of the 4 loss statistics, forward and backward of
`distribute.global_mean`) divided by the step time — and the non-compute share,
``1 - t(half batch, 1 thread) / t(2 workers)``: communication plus waiting for the
slower worker at each of the step's 3 synchronization points plus strategy overhead. Multi-worker
rather than 2 logical CPUs in one process because that is the configuration that scales
past one machine (separate processes, real gRPC communication); the machine is shared,
so the numbers are noisy and medians of interleaved rounds.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _worker(args):
    """Runs in a subprocess: times ``steps`` train steps; writes a JSON result."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from bayes_planet import distribute

    strategy = distribute.make_strategy(args.strategy)  # first: before other ops
    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.world_model import WorldModel

    config = config_lib.load([args.preset, "state"])
    b, t = config.train.batch_size, config.train.chunk_length
    b //= args.batch_divisor
    rng = np.random.default_rng(0)  # the same global batch on every worker
    obs = rng.standard_normal((b, t, 5)).astype(np.float32)
    batch = {"obs": tf.constant(obs),
             "action": tf.constant(rng.uniform(-1, 1, (b, t, 1)), tf.float32),
             "reward": tf.constant(obs[..., 0])}
    model = WorldModel(config, (5,), 1, strategy=strategy)

    def run(first, count):
        out = None
        for i in range(first, first + count):
            out = model.train_step(batch, tf.constant([0, i]), 10_000)
        return float(out["loss"])

    run(0, args.warmup)
    start = time.perf_counter()
    loss = run(args.warmup, args.steps)
    step_time = (time.perf_counter() - start) / args.steps
    result = {"step_time": step_time, "loss": loss,
              "replicas": strategy.num_replicas_in_sync,
              "params": int(sum(np.prod(v.shape) for v in model.trainable_variables))}
    if strategy.num_replicas_in_sync > 1:
        grads = [tf.zeros(v.shape, v.dtype) for v in model.trainable_variables]
        stats = tf.zeros([4])

        def collective(values):
            @tf.function
            def reduce():
                return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
                    tf.distribute.ReduceOp.SUM, values))
            reduce()
            begin = time.perf_counter()
            for _ in range(args.steps):
                out = reduce()
            tf.nest.map_structure(lambda x: x.numpy(),
                                  strategy.experimental_local_results(out))
            return (time.perf_counter() - begin) / args.steps

        result["allreduce_grads"] = collective(grads)
        result["allreduce_stats"] = collective(stats)
    with open(args.out, "w") as f:
        json.dump(result, f)


def _launch(preset, kind, steps, warmup, tmp):
    """Starts the processes of one configuration; returns the per-process results."""
    from bayes_planet.distribute import localhost_cluster

    divisor = 2 if kind == "half batch, 1 thread" else 1
    if kind == "2 workers":
        configs, strategy, threads = localhost_cluster(2), "multi_worker", 1
    else:
        configs, strategy = [None], "none"
        threads = 2 if kind == "1 worker" else 1
    procs, outs = [], []
    for i, tf_config in enumerate(configs):
        out = os.path.join(tmp, f"{preset}_{kind.replace(' ', '_').replace(',', '')}_{i}.json")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        env.pop("TF_CONFIG", None)
        if tf_config:
            env["TF_CONFIG"] = tf_config
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--preset", preset,
               "--strategy", strategy, "--threads", str(threads), "--steps", str(steps),
               "--warmup", str(warmup), "--batch-divisor", str(divisor), "--out", out]
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
        outs.append(out)
    for proc in procs:
        _, err = proc.communicate(timeout=3600)
        if proc.returncode:
            raise RuntimeError(f"{preset} {kind} failed:\n{err[-3000:]}")
    results = []
    for out in outs:
        with open(out) as f:
            results.append(json.load(f))
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="debug,cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    # Internal: the subprocess role.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--preset", default="debug", help=argparse.SUPPRESS)
    parser.add_argument("--strategy", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--batch-divisor", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(args)
    kinds = ("1 worker", "1 worker, 1 thread", "2 workers", "half batch, 1 thread")
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"load average before: {' '.join(load)} on {os.cpu_count()} cores")
    print("| preset | global batch × chunk | params | 1 worker (steps/s) | 1 worker, 1 thread "
          "| 2 workers | 2 workers ÷ 1 worker | ÷ 1 worker 1 thread | half batch, 1 thread "
          "| comm. share (2 workers) | non-compute share (2 workers) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            times = {k: [] for k in kinds}
            comm, info = [], None
            for _ in range(args.rounds):  # interleaved: the machine is shared
                for kind in kinds:
                    results = _launch(preset, kind, args.steps, args.warmup, tmp)
                    step = max(r["step_time"] for r in results)  # synchronous: slowest
                    times[kind].append(step)
                    if kind == "2 workers":
                        r = max(results, key=lambda r: r["step_time"])
                        comm.append((r["allreduce_grads"] + 2 * r["allreduce_stats"]) / step)
                    info = info or results[0]
            rate = {k: 1.0 / np.median(v) for k, v in times.items()}
            from bayes_planet.agent import config as config_lib
            c = config_lib.load([preset]).train
            print(f"| {preset} | {c.batch_size} × {c.chunk_length} | {info['params']:,} | "
                  f"{rate['1 worker']:.2f} | {rate['1 worker, 1 thread']:.2f} | "
                  f"{rate['2 workers']:.2f} | {rate['2 workers'] / rate['1 worker']:.2f}× | "
                  f"{rate['2 workers'] / rate['1 worker, 1 thread']:.2f}× | "
                  f"{rate['half batch, 1 thread']:.2f} | {100 * np.median(comm):.0f} % | "
                  f"{100 * (1 - rate['2 workers'] / rate['half batch, 1 thread']):.0f} % |",
                  flush=True)
    with open("/proc/loadavg") as f:
        print(f"load average after: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    main()
