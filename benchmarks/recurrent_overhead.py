"""Train-step cost of the Bayesian LSTM/GRU cells and attention relative to Keras.

Two step definitions, each one ``tf.function``: "fwd+bwd+KL" = forward, loss
(+ KL terms / dataset size) and gradients; "+Adam" additionally applies an Adam
update (``benchmarks/layer_overhead.make_step``, the dense/conv benchmark's step).
The Bayesian layers and their Keras twins are timed in the same process,
interleaved in rounds (the machine is shared and noisy), and reported as ratios of
median step times to the Keras layer measured in the same run. Targets (issue):
Reparameterization ≤ 1.1×, Flipout ≤ 2×.

    python -m benchmarks.recurrent_overhead           # LSTM/GRU b64 T50 256u, MHA b32 T64 d256 h8
    python -m benchmarks.recurrent_overhead --quick   # fewer rounds
    python -m benchmarks.recurrent_overhead --step    # also per-step weight sampling
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bayes_planet.layers import attention, keras, recurrent  # noqa: E402
from benchmarks.layer_overhead import make_step, time_steps  # noqa: E402


class SelfAttention(keras.layers.Layer):
    """``mha(x, x)`` as a one-input layer (the shape the shared step expects)."""

    def __init__(self, mha, **kwargs):
        super().__init__(**kwargs)
        self.mha = mha

    def call(self, inputs, training=None):
        return self.mha(inputs, inputs, training=training)


def make_grad_step(layer, x, dataset_size=50_000):
    """Forward + KL + gradients (no optimizer update)."""
    layer(x)  # build

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.convert_to_tensor(layer(x, training=True))))
            if layer.losses:
                loss += tf.add_n(layer.losses) / dataset_size
        grads = tape.gradient(loss, layer.trainable_variables)
        return loss, grads

    step()
    return lambda: step()[0]


def bench(cases, x, rounds, steps):
    """Seconds per step of each case and step definition, interleaved in rounds:
    ``{(name, kind): (median, min)}`` over rounds. Other jobs only add time, so the
    minimum is the least-disturbed estimate; the median is the typical one."""
    fns = {}
    for name, factory in cases.items():
        fns[(name, "fwd+bwd+KL")] = make_grad_step(factory(), x)
        fns[(name, "+Adam")] = make_step(factory(), x)
    times = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            times[key].append(time_steps(fn, steps))
    return {key: (float(np.median(t)), float(np.min(t))) for key, t in times.items()}


def rnn_cases(family, units, step_sampling):
    keras_cell = {"LSTM": keras.layers.LSTMCell, "GRU": keras.layers.GRUCell}[family]
    reparam = getattr(recurrent, f"{family}CellReparameterization")
    flipout = getattr(recurrent, f"{family}CellFlipout")
    cases = {
        f"keras {family}Cell": lambda: keras.layers.RNN(keras_cell(units)),
        f"{family}CellReparameterization": lambda: keras.layers.RNN(reparam(units, seed=0)),
        f"{family}CellFlipout": lambda: keras.layers.RNN(flipout(units, seed=0)),
    }
    if step_sampling:
        cases[f"{family}CellReparameterization (step)"] = lambda: keras.layers.RNN(
            reparam(units, seed=0, sampling="step"))
        cases[f"{family}CellFlipout (step)"] = lambda: keras.layers.RNN(
            flipout(units, seed=0, sampling="step"))
    return cases


def mha_cases(heads, key_dim):
    kw = {"num_heads": heads, "key_dim": key_dim}
    return {
        "keras MultiHeadAttention": lambda: SelfAttention(keras.layers.MultiHeadAttention(**kw)),
        "MultiHeadAttentionReparameterization": lambda: SelfAttention(
            attention.MultiHeadAttentionReparameterization(seed=0, **kw)),
        "MultiHeadAttentionFlipout": lambda: SelfAttention(
            attention.MultiHeadAttentionFlipout(seed=0, **kw)),
    }


def report(title, results, baseline):
    print(f"\n### {title}\n")
    print("| layer | fwd+bwd+KL median (ms) | ÷ Keras median / min | +Adam median (ms) "
          "| ÷ Keras median / min |")
    print("|---|---:|---:|---:|---:|")
    names = dict.fromkeys(name for name, _ in results)
    for name in names:
        cells = []
        for kind in ("fwd+bwd+KL", "+Adam"):
            (med, low), (base_med, base_low) = results[(name, kind)], results[(baseline, kind)]
            cells += [f"{1e3 * med:.1f}", f"{med / base_med:.2f}× / {low / base_low:.2f}×"]
        print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    parser.add_argument("--step", action="store_true", help="add sampling='step' cells")
    parser.add_argument("--rounds", type=int, default=25, help="interleaved rounds")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--units", type=int, default=256)
    args = parser.parse_args(argv)
    rounds, steps = (2, 2) if args.quick else (args.rounds, 3)
    rng = np.random.default_rng(0)
    print(f"TF {tf.__version__}, {os.cpu_count()} CPUs, {rounds} interleaved rounds x {steps} "
          "steps (median and min over rounds)")
    x = tf.constant(rng.standard_normal((args.batch, args.length, args.units)), tf.float32)
    results = {}
    for family in ("LSTM", "GRU"):
        res = bench(rnn_cases(family, args.units, args.step), x, rounds, steps)
        report(f"RNN({family}Cell), batch {args.batch}, {args.length} steps, "
               f"{args.units} → {args.units} units", res, f"keras {family}Cell")
        results[family] = res
    x = tf.constant(rng.standard_normal((32, 64, 256)), tf.float32)
    res = bench(mha_cases(8, 32), x, rounds, steps)
    report("Self-attention, batch 32, 64 tokens, d 256, 8 heads × 32", res,
           "keras MultiHeadAttention")
    results["MHA"] = res
    return results


if __name__ == "__main__":
    main()
