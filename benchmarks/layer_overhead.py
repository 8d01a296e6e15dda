"""Train-step cost of Bayesian layers relative to their Keras twin and to tfp.layers.

One train step = forward, loss (+ KL terms), backward and an optimizer update (SGD
or Adam), inside one ``tf.function``. All layers are timed in the same process,
interleaved in rounds (this machine is shared and noisy), and reported as ratios of
median step times to the Keras layer measured in the same run.

    python benchmarks/layer_overhead.py                  # SGD and Adam: dense 256 and 4096, conv
    python benchmarks/layer_overhead.py --optimizer sgd  # one optimizer
    python benchmarks/layer_overhead.py --profile        # where a Bayesian dense step's time goes
    python benchmarks/layer_overhead.py --quick          # fewer rounds
    python benchmarks/layer_overhead.py --ensemble       # rank-1 / BatchEnsemble dense layers
"""

import argparse
import contextlib
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

import bayes_planet.layers as bl  # noqa: E402
from bayes_planet.layers import keras  # noqa: E402
from bayes_planet.layers.noise import standard_normal  # noqa: E402

OPTIMIZERS = {"sgd": lambda: keras.optimizers.SGD(1e-3), "adam": lambda: keras.optimizers.Adam(1e-3)}


def make_step(layer, x, dataset_size=50_000, optimizer="adam", context=contextlib.nullcontext,
              input_gradient=False):
    """A traced train step of ``layer`` on ``x``; ``context()`` is active while tracing
    (e.g. ``lambda: bl.posterior_mean(layer)``). ``input_gradient=True`` also computes
    (and returns) the gradient to ``x``, as for a layer inside a network."""
    layer(x)  # build
    opt = OPTIMIZERS[optimizer]()
    opt.build(layer.trainable_variables)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = tf.convert_to_tensor(layer(x, training=True))
            loss = tf.reduce_mean(tf.square(out))
            if layer.losses:
                loss += tf.add_n(layer.losses) / dataset_size
        variables = layer.trainable_variables
        grads = tape.gradient(loss, variables + [x] if input_gradient else variables)
        opt.apply_gradients(zip(grads[:len(variables)], variables, strict=True))
        return (loss, grads[-1]) if input_gradient else loss

    with context():
        step()
    return step


def time_steps(step, n, clock=time.perf_counter):
    """Seconds per call of ``step`` by ``clock``: the wall clock, or ``time.process_time``
    (``--cpu-time``: all of TensorFlow's threads, not other processes on a shared machine)."""
    start = clock()
    for _ in range(n):
        out = step()
    tf.nest.flatten(out)[0].numpy()
    return (clock() - start) / n


def bench(cases, x, rounds, steps, optimizer="adam", clock=time.perf_counter):
    fns = {name: make_step(factory(), x, optimizer=optimizer) for name, factory in cases.items()}
    return run_rounds(fns, rounds, steps, clock)


def run_rounds(fns, rounds, steps, clock=time.perf_counter):
    """Median seconds per call of each zero-argument function, interleaved A B A B."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(time_steps(fn, steps, clock))
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


def ensemble_cases(units):
    """The rank-1 and BatchEnsemble dense layers (4 members) against Keras Dense."""
    return {
        "keras Dense": lambda: keras.layers.Dense(units),
        "DenseRank1 (per example)": lambda: bl.DenseRank1(units, seed=0),
        "DenseRank1 (per member)": lambda: bl.DenseRank1(units, seed=0, sampling="per_member"),
        # The earlier default factors: their normal KL against the sign mixture's bound.
        "DenseRank1 (per example, N(1, 0.1²) prior)": lambda: bl.DenseRank1(
            units, seed=0, alpha_initializer="trainable_rank1_normal",
            gamma_initializer="trainable_rank1_normal",
            alpha_regularizer="rank1_normal_kl_divergence",
            gamma_regularizer="rank1_normal_kl_divergence"),
        "DenseBatchEnsemble": lambda: bl.DenseBatchEnsemble(units),
    }


def run_ensemble(x, units, rounds, steps, optimizer, clock=time.perf_counter):
    """`ensemble_cases` with a constant input and with the input's gradient (as inside a
    network: there Keras also computes ``g @ Wᵀ``, which an ensemble layer needs anyway for
    α's gradient), plus DenseRank1 under `posterior_mean` (its step without the noise)."""
    fns = {}
    for grad in (False, True):
        where = "input gradient" if grad else "constant input"
        for name, factory in ensemble_cases(units).items():
            fns[f"{name}, {where}"] = make_step(factory(), x, optimizer=optimizer,
                                                input_gradient=grad)
        layer = bl.DenseRank1(units, seed=0)
        fns[f"DenseRank1 (posterior_mean), {where}"] = make_step(
            layer, x, optimizer=optimizer, input_gradient=grad,
            context=lambda layer=layer: bl.posterior_mean(layer))
    return run_rounds(fns, rounds, steps, clock)


def report_ensemble(title, results):
    print(f"\n### {title}\n")
    print("| layer | input | step (ms) | ÷ Keras Dense (same input) |")
    print("|---|---|---:|---:|")
    for key, t in results.items():
        name, where = key.rsplit(", ", 1)
        base = results[f"keras Dense, {where}"]
        print(f"| {name} | {where} | {1e3 * t:.2f} | {t / base:.2f}× |")


def profile_cases(units, x, optimizer):
    """Ablations of the Bayesian dense steps: what the noise, the KL and the estimator's
    extra matmul each cost, as parts of one step (all functions are traced train steps
    except the two 'alone' rows, which time one piece by itself)."""
    in_dim = x.shape[-1]
    fns = {"keras Dense": make_step(keras.layers.Dense(units), x, optimizer=optimizer)}
    for name, cls in [("DenseReparameterization", bl.DenseReparameterization),
                      ("DenseFlipout", bl.DenseFlipout)]:
        fns[name] = make_step(cls(units, seed=0), x, optimizer=optimizer)
        fns[f"{name}, no KL"] = make_step(cls(units, seed=0, kernel_regularizer=None), x,
                                          optimizer=optimizer)
        layer = cls(units, seed=0)
        fns[f"{name}, no noise (posterior_mean)"] = make_step(
            layer, x, optimizer=optimizer, context=lambda layer=layer: bl.posterior_mean(layer))
    seed = tf.Variable(0)

    @tf.function
    def noise_alone():
        seed.assign_add(1)
        return standard_normal([in_dim, units], tf.stack([0, seed]))

    layer = bl.DenseReparameterization(units, seed=0)
    layer(x)
    weights = layer.trainable_variables

    @tf.function
    def kl_alone():
        with tf.GradientTape() as tape:
            kl = tf.add_n(layer.losses)
        grads = tape.gradient(kl, weights, unconnected_gradients="zero")
        return tf.add_n([tf.reduce_sum(g) for g in grads])

    fns[f"noise alone ({in_dim}x{units} N(0, 1) draws)"] = noise_alone
    fns["KL alone (value and gradient)"] = kl_alone
    return fns


def report_profile(title, results):
    base = results["keras Dense"]
    print(f"\n### {title}\n")
    print("| step or piece | ms | ÷ Keras step | extra vs Keras step, ms |")
    print("|---|---:|---:|---:|")
    for name, t in results.items():
        extra = "" if "alone" in name or name == "keras Dense" else f"{1e3 * (t - base):.2f}"
        print(f"| {name} | {1e3 * t:.2f} | {t / base:.2f}× | {extra} |")


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
    parser.add_argument("--optimizer", choices=["sgd", "adam", "both"], default="both")
    parser.add_argument("--profile", action="store_true",
                        help="ablate the dense steps (noise, KL) instead of the layer tables")
    parser.add_argument("--no-conv", action="store_true", help="skip the conv table")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time steps by this process's CPU time instead of the wall clock")
    parser.add_argument("--ensemble", action="store_true",
                        help="the rank-1 / BatchEnsemble dense table instead of the layer tables")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    rounds, steps = (3, 5) if args.quick else (9, 20)
    optimizers = ["sgd", "adam"] if args.optimizer == "both" else [args.optimizer]
    rng = np.random.default_rng(0)
    twins = {
        "DenseReparameterization": "tfp DenseReparameterization",
        "DenseFlipout": "tfp DenseFlipout",
        "DenseLocalReparameterization": "tfp DenseLocalReparameterization",
        "Conv2DReparameterization": "tfp Convolution2DReparameterization",
        "Conv2DFlipout": "tfp Convolution2DFlipout",
    }
    print(f"TF {tf.__version__}, TFP {tfp.__version__}, {os.cpu_count()} CPUs, "
          f"median of {rounds} rounds x {steps} steps, "
          f"{'process CPU' if args.cpu_time else 'wall-clock'} time, load average at start "
          f"{' / '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for optimizer in optimizers:
        name = {"sgd": "SGD", "adam": "Adam"}[optimizer]
        if args.ensemble:
            x = tf.constant(rng.standard_normal((256, 512)), tf.float32)
            res = run_ensemble(x, 512, rounds, steps, optimizer, clock)
            report_ensemble(f"Ensembles, {name}: Dense, batch 256 (4 members × 64), 512 → 512",
                            res)
            continue
        if args.profile:
            x = tf.constant(rng.standard_normal((256, 512)), tf.float32)
            res = run_rounds(profile_cases(512, x, optimizer), rounds, steps, clock)
            report_profile(f"Profile, {name}: Dense, batch 256, 512 → 512", res)
            continue
        for batch in (256, 4096):
            x = tf.constant(rng.standard_normal((batch, 512)), tf.float32)
            res = bench(dense_cases(512), x, rounds, steps if batch == 256 else max(2, steps // 4),
                        optimizer, clock)
            report(f"{name}: Dense, batch {batch}, 512 → 512", res, "keras Dense", twins)
        if not args.no_conv:
            x = tf.constant(rng.standard_normal((32, 32, 32, 64)), tf.float32)
            res = bench(conv_cases(64), x, rounds, max(2, steps // 4), optimizer, clock)
            report(f"{name}: Conv2D 3×3, batch 32, 32×32×64 → 64", res, "keras Conv2D", twins)
    print(f"\nload average at end {' / '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
