"""World-model train step: Bayesian RSSM ÷ deterministic RSSM, and achieved GFLOP/s
of the train step ÷ a plain 1024² float32 matmul's GFLOP/s, measured in the same run.

    python benchmarks/world_model_step.py [--presets cpu,paper] [--obs state,pixels]

Timings are medians over rounds that interleave the variants (the machine is
shared); FLOPs are analytic lower bounds (see benchmarks/flops.py).
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bayes_planet.agent import config as config_lib  # noqa: E402
from bayes_planet.agent.world_model import WorldModel  # noqa: E402
from benchmarks.flops import train_step_flops  # noqa: E402


def matmul_gflops(n=1024, steps=20):
    a, b = tf.random.normal([n, n]), tf.random.normal([n, n])
    f = tf.function(lambda: tf.matmul(a, b))
    f().numpy()
    start = time.perf_counter()
    for _ in range(steps):
        out = f()
    out.numpy()
    return 2 * n**3 * steps / (time.perf_counter() - start) / 1e9


def make(preset, obs, estimator):
    config = config_lib.load([preset, obs], [f"model.estimator={estimator}"])
    shape = (64, 64, 3) if obs == "pixels" else (5,)
    model = WorldModel(config, shape, 1)
    b, t = config.train.batch_size, config.train.chunk_length
    rng = np.random.default_rng(0)
    if obs == "pixels":
        data = rng.integers(0, 256, (b, t) + shape, dtype=np.uint8)
    else:
        data = rng.standard_normal((b, t) + shape).astype(np.float32)
    batch = {"obs": tf.constant(data), "action": tf.constant(rng.uniform(-1, 1, (b, t, 1)),
                                                             tf.float32),
             "reward": tf.constant(rng.standard_normal((b, t)), tf.float32)}
    step = lambda i: model.train_step(batch, tf.constant([0, i]), 10_000)  # noqa: E731
    step(0)["loss"].numpy()
    return model, step, train_step_flops(model, b, t)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="cpu,paper")
    parser.add_argument("--obs", default="state,pixels")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("| preset | obs | det step (s) | Bayes step (s) | Bayes ÷ det | GFLOP/s (Bayes) "
          "| ÷ matmul GFLOP/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for preset in args.presets.split(","):
        for obs in args.obs.split(","):
            variants = {e: make(preset, obs, e) for e in ("deterministic", "reparameterization")}
            times = {e: [] for e in variants}
            steps = 1 if (preset == "paper" and obs == "pixels") else 3
            mm = []
            for r in range(args.rounds):
                mm.append(matmul_gflops())
                for e, (_, step, _) in variants.items():
                    start = time.perf_counter()
                    for i in range(steps):
                        out = step(1 + r * steps + i)
                    out["loss"].numpy()
                    times[e].append((time.perf_counter() - start) / steps)
            det, bayes = np.median(times["deterministic"]), np.median(times["reparameterization"])
            flops = variants["reparameterization"][2]
            rate = flops / bayes / 1e9
            print(f"| {preset} | {obs} | {det:.3f} | {bayes:.3f} | {bayes / det:.2f}× | "
                  f"{rate:.1f} | {rate / np.median(mm):.2f} |", flush=True)


if __name__ == "__main__":
    main()
