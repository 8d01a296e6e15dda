"""Sequence examples of Bayesian Layers: a Bayesian LSTM (Fig. 1), a Bayesian Transformer.

One script; the example and its sizes come from presets in ``sequence.yaml``::

    python experiments/sequence.py --preset lstm_classifier --out runs/lstm
    python experiments/sequence.py --preset transformer --out runs/transformer
    python experiments/sequence.py --preset transformer debug --out /tmp/t   # seconds
    python experiments/sequence.py --preset transformer --set seeds=[0] --out runs/x

``lstm_classifier`` (paper Fig. 1): classify noisy multi-frequency sequences
(generated offline: class = frequency of a sinusoid with random phase, observed
through Gaussian noise, so classes overlap) with an LSTM stepped from Python as in
Fig. 1 — ``state = lstm.get_initial_state(x)``, ``h, state = lstm(x[:, t], state)``
— and the loss ``nll + sum(lstm.losses) / dataset_size``. Compares the Keras
``LSTMCell`` with ``LSTMCellReparameterization`` and ``LSTMCellFlipout`` (one weight
sample per sequence; predictions average ``num_predictive_samples`` samples).

``transformer`` (paper Sec. 3): a noisy algorithmic seq2seq task: tokens
``x ∈ {0..V-1}^L``, target ``y_t = (x_t + x_{L-1-t}) mod V``, each target replaced by
a uniform random token with probability ``label_noise`` (so the best achievable
token accuracy is ``1 - p + p/V``). The Bayesian Transformer (Flipout attention,
local-reparameterization feed-forward) is compared with the same deterministic
architecture without and with dropout (``baseline_dropout``): token accuracy (vs
noisy and clean targets), NLL and expected calibration error (ECE), per seed and as
mean ± std.

Writes ``config.yaml`` and ``results.json`` into ``--out``.
"""

import argparse
import json
import pathlib
import time

import numpy as np
import yaml

from bayes_planet import yaml_config
from bayes_planet.run_dirs import make_output_dir

CONFIG_PATH = pathlib.Path(__file__).with_suffix(".yaml")


# ---------------------------------------------------------------- configuration
def load_config(presets=(), overrides=(), path=CONFIG_PATH):
    """``defaults`` merged with each preset in order, then ``key.sub=value`` overrides."""
    return yaml_config.load(presets, overrides, path=path).to_dict()


# ---------------------------------------------------------------- metrics
def calibration(probs, labels, bins):
    """Accuracy, mean NLL and expected calibration error (equal-width confidence bins).

    ``probs``: ``[n, classes]`` predictive probabilities; ``labels``: ``[n]`` ints.
    ECE = Σ_b (|b| / n) · |accuracy(b) − confidence(b)| (Guo et al., 2017).
    """
    probs = np.asarray(probs, np.float64)
    labels = np.asarray(labels)
    confidence = probs.max(-1)
    correct = probs.argmax(-1) == labels
    nll = -np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-12))
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, bins - 1)
    ece = 0.0
    for b in range(bins):
        in_bin = which == b
        if in_bin.any():
            ece += in_bin.mean() * abs(correct[in_bin].mean() - confidence[in_bin].mean())
    return {"accuracy": float(correct.mean()), "nll": float(nll.mean()), "ece": float(ece),
            "mean_confidence": float(confidence.mean())}


def _summary(per_seed):
    """Mean and std over seeds of every metric: ``{metric: {"mean", "std"}}``."""
    keys = per_seed[0].keys()
    return {k: {"mean": float(np.mean([r[k] for r in per_seed])),
                "std": float(np.std([r[k] for r in per_seed]))} for k in keys}


def _batches(n, batch_size, rng):
    order = rng.permutation(n)
    for start in range(0, n - batch_size + 1, batch_size):  # static batch shape (XLA)
        yield order[start:start + batch_size]


# ---------------------------------------------------------------- LSTM (Fig. 1)
def lstm_data(cfg, num, rng):
    """Noisy sinusoids: class k has angular frequency ``freq_base * (1 + freq_step k)``."""
    t = np.arange(cfg["length"])[None, :, None]
    labels = rng.integers(0, cfg["num_classes"], num)
    omega = cfg["freq_base"] * (1.0 + cfg["freq_step"] * labels)[:, None, None]
    phase = rng.uniform(0, 2 * np.pi, (num, 1, cfg["features"]))
    x = np.sin(omega * t + phase) + cfg["obs_noise"] * rng.standard_normal(
        (num, cfg["length"], cfg["features"]))
    return x.astype("float32"), labels.astype("int32")


def _fit_and_predict(train_step, predict, train, x_test, cfg, rng, samples):
    """``cfg['epochs']`` epochs of ``train_step`` on shuffled minibatches, then the MC
    predictive (mean of ``samples`` calls of ``predict``) on ``x_test``.

    Returns ``(probs, last train NLL, last KL term, seconds of training + prediction)``.
    """
    x_train, y_train = train
    start = time.perf_counter()
    for _ in range(cfg["epochs"]):
        for idx in _batches(len(x_train), cfg["batch_size"], rng):
            nll, kl = train_step(x_train[idx], y_train[idx])
    probs = np.mean([predict(x_test) for _ in range(samples)], axis=0)
    return probs, float(nll), float(kl), time.perf_counter() - start


def run_lstm(cfg, seed):
    import tensorflow as tf

    from bayes_planet import layer_registry
    from bayes_planet.layers import keras

    rng = np.random.default_rng(seed)
    x_train, y_train = lstm_data(cfg, cfg["num_train"], rng)
    x_test, y_test = lstm_data(cfg, cfg["num_test"], rng)
    dataset_size = len(x_train)
    results = {}
    for estimator in cfg["estimators"]:
        keras.utils.set_random_seed(seed)
        if estimator == "deterministic":
            lstm = keras.layers.LSTMCell(cfg["units"])
        else:
            lstm = layer_registry.get("lstm_cell", estimator)(
                cfg["units"], seed=seed, sampling=cfg["sampling"])
        output_layer = keras.layers.Dense(cfg["num_classes"])
        optimizer = keras.optimizers.Adam(cfg["learning_rate"])

        def logits_fn(features, lstm=lstm, output_layer=output_layer,
                      deterministic=estimator == "deterministic"):
            if deterministic:  # Keras' own cell: zeros (its get_initial_state differs in Keras 3)
                state = [tf.zeros([tf.shape(features)[0], size], features.dtype)
                         for size in lstm.state_size]
            else:
                state = lstm.get_initial_state(features)   # a new sequence: a new weight sample
            for t in range(features.shape[1]):
                net, state = lstm(features[:, t], state)
            return output_layer(net)

        @tf.function
        def train_step(features, labels, lstm=lstm, logits_fn=logits_fn,
                       output_layer=output_layer, optimizer=optimizer):
            with tf.GradientTape() as tape:
                nll = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels, logits_fn(features)))
                kl = sum(lstm.losses) / dataset_size if lstm.losses else 0.0
                loss = nll + kl
            variables = lstm.trainable_variables + output_layer.trainable_variables
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return nll, kl

        predict = tf.function(lambda f, logits_fn=logits_fn: tf.nn.softmax(logits_fn(f)))
        probs, nll, kl, seconds = _fit_and_predict(
            train_step, predict, (x_train, y_train), x_test, cfg, rng,
            1 if estimator == "deterministic" else cfg["num_predictive_samples"])
        results[estimator] = {**calibration(probs, y_test, cfg["ece_bins"]),
                              "final_train_nll": nll, "final_kl_per_example": kl,
                              "train_seconds": seconds}
    return results


# ---------------------------------------------------------------- Transformer
def transformer_data(cfg, num, rng):
    """Tokens, noisy targets and clean targets of ``y_t = (x_t + x_{L-1-t}) mod V``."""
    v, length = cfg["vocab"], cfg["length"]
    x = rng.integers(0, v, (num, length))
    clean = (x + x[:, ::-1]) % v
    noisy = np.where(rng.random((num, length)) < cfg["label_noise"],
                     rng.integers(0, v, (num, length)), clean)
    return x.astype("int32"), noisy.astype("int32"), clean.astype("int32")


TRANSFORMER_MODELS = {  # name: (attention, feed_forward, use baseline_dropout)
    "deterministic": ("deterministic", "deterministic", False),
    "deterministic_dropout": ("deterministic", "deterministic", True),
    "bayesian": ("flipout", "local_reparameterization", False),
}


def run_transformer(cfg, seed):
    import tensorflow as tf

    from bayes_planet.layers import keras
    from bayes_planet.layers.regularizers import set_dataset_size
    from bayes_planet.layers.transformer import build_transformer

    rng = np.random.default_rng(seed)
    x_train, y_train, _ = transformer_data(cfg, cfg["num_train"], rng)
    x_test, y_test, clean_test = transformer_data(cfg, cfg["num_test"], rng)
    num_tokens = x_train.size
    results = {}
    for name in cfg["models"]:
        attention, feed_forward, dropout = TRANSFORMER_MODELS[name]
        keras.utils.set_random_seed(seed)
        model = build_transformer(
            cfg["vocab"], cfg["length"], cfg["vocab"], d_model=cfg["d_model"],
            num_heads=cfg["num_heads"], ff_dim=cfg["ff_dim"], num_layers=cfg["num_layers"],
            attention=attention, feed_forward=feed_forward,
            dropout=cfg["baseline_dropout"] if dropout else 0.0, seed=seed)
        if model.losses:  # ELBO per token: mean token NLL + KL / (number of train tokens)
            set_dataset_size(model, num_tokens)
        optimizer = keras.optimizers.Adam(cfg["learning_rate"])
        kl_scale = cfg["kl_scale"]

        @tf.function
        def train_step(tokens, targets, model=model, optimizer=optimizer, kl_scale=kl_scale):
            with tf.GradientTape() as tape:
                nll = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    targets, model(tokens, training=True)))
                kl = kl_scale * tf.add_n(model.losses) if model.losses else 0.0
                loss = nll + kl
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return nll, kl

        predict = tf.function(lambda t, model=model: tf.nn.softmax(model(t)))
        probs, nll, kl, seconds = _fit_and_predict(
            train_step, predict, (x_train, y_train), x_test, cfg, rng,
            1 if name == "deterministic" else cfg["num_predictive_samples"])
        flat = probs.reshape(-1, cfg["vocab"])
        metrics = calibration(flat, y_test.reshape(-1), cfg["ece_bins"])
        metrics["clean_accuracy"] = float((flat.argmax(-1) == clean_test.reshape(-1)).mean())
        results[name] = {**metrics, "final_train_nll": nll, "final_kl_per_token": kl,
                         "train_seconds": seconds}
    return results


# ---------------------------------------------------------------- main
EXAMPLES = {"lstm_classifier": run_lstm, "transformer": run_transformer}


def run(config):
    example = config["example"]
    if example not in EXAMPLES:
        raise ValueError(f"Unknown example {example!r}. Expected one of {sorted(EXAMPLES)}")
    cfg = config[example]
    per_seed = {int(seed): EXAMPLES[example](cfg, int(seed)) for seed in config["seeds"]}
    names = list(next(iter(per_seed.values())))
    summary = {name: _summary([r[name] for r in per_seed.values()]) for name in names}
    out = {"example": example, "seeds": [int(s) for s in config["seeds"]],
           "summary": summary, "per_seed": {str(k): v for k, v in per_seed.items()}}
    if example == "transformer":
        p, v = cfg["label_noise"], cfg["vocab"]
        out["bayes_optimal_accuracy"] = 1 - p + p / v
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    yaml_config.add_preset_argument(parser)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set transformer.epochs=5")
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args(argv)
    config = load_config(yaml_config.presets_from(args), args.set)
    out = make_output_dir("out", args.out)
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    start = time.perf_counter()
    results = run(config)
    results["seconds"] = time.perf_counter() - start
    (out / "results.json").write_text(json.dumps(results, indent=2))
    _print(results)
    return results


def _print(results):
    print(f"{results['example']}: seeds {results['seeds']}, {results['seconds']:.0f} s")
    for name, metrics in results["summary"].items():
        cells = ", ".join(f"{k} {v['mean']:.4f}±{v['std']:.4f}" for k, v in metrics.items()
                          if k in ("accuracy", "clean_accuracy", "nll", "ece"))
        print(f"  {name:20s} {cells}")


if __name__ == "__main__":
    yaml_config.run_script(main)
