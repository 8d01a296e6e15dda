"""Train-step cost of Bayesian layers relative to their Keras twin and to tfp.layers.

One train step = forward, loss (+ KL terms), backward and an Adam update, inside
one ``tf.function``. All layers are timed in the same process, interleaved in
rounds (this machine is shared and noisy), and reported as ratios of median step
times to the Keras layer measured in the same run.

    python benchmarks/layer_overhead.py            # dense 256x512->512, 4096x512->512, conv
    python benchmarks/layer_overhead.py --quick    # fewer rounds
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

import bayes_planet.layers as bl  # noqa: E402
from bayes_planet._keras import keras  # noqa: E402


def make_step(layer, x, dataset_size=50_000):
    layer(x)  # build
    opt = keras.optimizers.Adam(1e-3)
    opt.build(layer.trainable_variables)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            out = tf.convert_to_tensor(layer(x, training=True))
            loss = tf.reduce_mean(tf.square(out))
            if layer.losses:
                loss += tf.add_n(layer.losses) / dataset_size
        grads = tape.gradient(loss, layer.trainable_variables)
        opt.apply_gradients(zip(grads, layer.trainable_variables, strict=True))
        return loss

    step()
    return step


def time_steps(step, n):
    start = time.perf_counter()
    for _ in range(n):
        loss = step()
    loss.numpy()
    return (time.perf_counter() - start) / n


def bench(cases, x, rounds, steps):
    fns = {name: make_step(factory(), x) for name, factory in cases.items()}
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(time_steps(fn, steps))
    return {name: float(np.median(t)) for name, t in times.items()}


def dense_cases(units):
    tfpl = tfp.layers
    return {
        "keras Dense": lambda: keras.layers.Dense(units),
        "DenseReparameterization": lambda: bl.DenseReparameterization(units, seed=0),
        "DenseFlipout": lambda: bl.DenseFlipout(units, seed=0),
        "DenseLocalReparameterization": lambda: bl.DenseLocalReparameterization(units, seed=0),
        "DenseVariationalDropout": lambda: bl.DenseVariationalDropout(units, seed=0),
        "DenseDVI": lambda: bl.DenseDVI(units, seed=0),
        "tfp DenseReparameterization": lambda: tfpl.DenseReparameterization(units),
        "tfp DenseFlipout": lambda: tfpl.DenseFlipout(units),
        "tfp DenseLocalReparameterization": lambda: tfpl.DenseLocalReparameterization(units),
    }


def conv_cases(filters):
    tfpl = tfp.layers
    kw = dict(filters=filters, kernel_size=3, padding="same")
    return {
        "keras Conv2D": lambda: keras.layers.Conv2D(**kw),
        "Conv2DReparameterization": lambda: bl.Conv2DReparameterization(seed=0, **kw),
        "Conv2DFlipout": lambda: bl.Conv2DFlipout(seed=0, **kw),
        "Conv2DLocalReparameterization": lambda: bl.Conv2DLocalReparameterization(seed=0, **kw),
        "tfp Convolution2DReparameterization": lambda: tfpl.Convolution2DReparameterization(**kw),
        "tfp Convolution2DFlipout": lambda: tfpl.Convolution2DFlipout(**kw),
    }


def report(title, results, baseline, tfp_twins):
    print(f"\n### {title}\n")
    print("| layer | step (ms) | ÷ Keras | ÷ tfp.layers twin |")
    print("|---|---:|---:|---:|")
    for name, t in results.items():
        twin = tfp_twins.get(name)
        vs_tfp = f"{t / results[twin]:.2f}×" if twin in results else ""
        print(f"| {name} | {1e3 * t:.2f} | {t / results[baseline]:.2f}× | {vs_tfp} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    args = parser.parse_args()
    rounds, steps = (3, 5) if args.quick else (9, 20)
    rng = np.random.default_rng(0)
    twins = {
        "DenseReparameterization": "tfp DenseReparameterization",
        "DenseFlipout": "tfp DenseFlipout",
        "DenseLocalReparameterization": "tfp DenseLocalReparameterization",
        "Conv2DReparameterization": "tfp Convolution2DReparameterization",
        "Conv2DFlipout": "tfp Convolution2DFlipout",
    }
    print(f"TF {tf.__version__}, TFP {tfp.__version__}, {os.cpu_count()} CPUs, "
          f"median of {rounds} rounds x {steps} steps")
    for batch in (256, 4096):
        x = tf.constant(rng.standard_normal((batch, 512)), tf.float32)
        res = bench(dense_cases(512), x, rounds, steps if batch == 256 else max(2, steps // 4))
        report(f"Dense, batch {batch}, 512 → 512", res, "keras Dense", twins)
    x = tf.constant(rng.standard_normal((32, 32, 32, 64)), tf.float32)
    res = bench(conv_cases(64), x, rounds, max(2, steps // 4))
    report("Conv2D 3×3, batch 32, 32×32×64 → 64", res, "keras Conv2D", twins)


if __name__ == "__main__":
    main()
