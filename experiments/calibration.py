"""Does a Bayesian layer help? Calibration and OOD uncertainty of swapped-layer networks.

One script; sizes and variants come from presets in ``calibration.yaml``::

    python experiments/calibration.py                                  # default: 3 seeds
    python experiments/calibration.py --preset debug --out /tmp/cal    # seconds
    python experiments/calibration.py --set models=[deterministic,flipout] --set seeds=[0]

The same MLP is built with only the layer class swapped — ``keras.layers.Dense``
(deterministic), `DenseReparameterization`, `DenseFlipout`, `DenseLocalReparameterization`
or `DenseVariationalDropout` (log-uniform prior) — trained with ``model.fit`` on
scikit-learn's bundled offline data with the KL of the Bayesian layers scaled by
`bayes_planet.layers.set_dataset_size` (the per-example ELBO), and evaluated with a Monte
Carlo predictive: the mean of ``mc_samples`` stochastic forward passes (1 for the
deterministic net). Every forward pass uses ``training=True`` so variational dropout samples
too (at ``training=False`` it uses its pruned mean weights).

* ``digits`` (classification, ``load_digits``): accuracy, NLL, expected calibration error
  (ECE: equal-width confidence bins ``(k/M, (k+1)/M]``, ``sum_b n_b/N |acc_b - conf_b|``,
  M = ``ece_bins``), and on out-of-distribution inputs built from the test digits (rotated,
  noise-corrupted, pure uniform noise) the mean predictive entropy ``H[E_W p(y|x,W)]``
  and mutual information ``H[E_W p] - E_W H[p]`` (the epistemic part; 0 for a
  deterministic net) and the AUROC of separating test digits (negatives) from OOD inputs
  (positives) by each.
* ``diabetes`` (regression, ``load_diabetes``): a Gaussian head (mean, softplus scale);
  RMSE and NLL of the predictive mixture in the target's original units, the mean epistemic
  std (spread of the sampled means), and the coverage of the central 95 % interval of the
  moment-matched Gaussian.

Each seed draws its own train/test split and initialization; tables report mean ± std
over seeds. Writes ``config.yaml``, ``results.json``, ``summary.md``,
``reliability_diagram.png`` (pooled over seeds) and ``ood_entropy.png`` into ``--out``.
"""

import argparse
import json
import pathlib
import time

import numpy as np

from bayes_planet import layer_registry  # noqa: E402
from bayes_planet import yaml_config as _config  # noqa: E402

# The metrics live in bayes_planet.uncertainty.metrics (re-exported here for the tests).
from bayes_planet.uncertainty.metrics import (  # noqa: E402, F401
    auroc,
    entropy,
    expected_calibration_error,
    gaussian_nll,
    mutual_information,
    reliability_bins,
    summarize_seeds,
)

CONFIG_PATH = pathlib.Path(__file__).with_suffix(".yaml")


# ---------------------------------------------------------------- data
def _split(n, test_fraction, seed):
    order = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return order[n_test:], order[:n_test]


def load_digits_data(cfg, seed):
    """Flattened digits in [0, 1], a seeded split, and the OOD sets built from the test set."""
    from scipy import ndimage
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    train, test = _split(len(images), cfg["test_fraction"], seed)
    rng = np.random.default_rng(seed + 12345)
    test_images = images[test]
    ood = {}
    for angle in cfg["ood"]["rotations"]:
        rotated = ndimage.rotate(test_images, angle, axes=(1, 2), reshape=False, order=1)
        ood[f"rotated_{angle:g}"] = np.clip(rotated, 0, 1)
    if cfg["ood"]["noise_std"]:
        noisy = test_images + rng.normal(0, cfg["ood"]["noise_std"], test_images.shape)
        ood[f"noisy_{cfg['ood']['noise_std']:g}"] = np.clip(noisy, 0, 1)
    if cfg["ood"]["uniform_noise"]:
        ood["uniform_noise"] = rng.uniform(0, 1, test_images.shape)
    flat = lambda x: np.asarray(x, np.float32).reshape(len(x), -1)  # noqa: E731
    return {"x_train": flat(images[train]), "y_train": digits.target[train],
            "x_test": flat(test_images), "y_test": digits.target[test],
            "ood": {name: flat(x) for name, x in ood.items()}}


def load_diabetes_data(cfg, seed):
    """Standardized diabetes features/targets and the target scale (for original units)."""
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    train, test = _split(len(x), cfg["test_fraction"], seed)
    x_mean, x_std = x[train].mean(0), x[train].std(0)
    y_mean, y_std = y[train].mean(), y[train].std()
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    return {"x_train": f32((x[train] - x_mean) / x_std), "y_train": f32((y[train] - y_mean) / y_std),
            "x_test": f32((x[test] - x_mean) / x_std), "y_test": f32((y[test] - y_mean) / y_std),
            "y_scale": float(y_std)}


# ---------------------------------------------------------------- models
#: The model names: the dense family's estimators (the layer class is the only thing
#: that differs; `layer_registry.get('dense', model)`).
MODELS = layer_registry.estimators("dense")


def build_mlp(kind, input_dim, hidden, outputs, seed, dataset_size):
    """``input → [Dense(h, relu)]* → Dense(outputs)`` with ``kind``'s layer class."""
    from bayes_planet.layers import keras, set_dataset_size

    cls = layer_registry.get("dense", kind)
    seeded = (lambda i: {}) if kind == "deterministic" else (lambda i: {"seed": seed * 1000 + i})
    layers = [keras.Input((input_dim,))]
    for i, units in enumerate(hidden):
        layers.append(cls(units, activation="relu", **seeded(i)))
    layers.append(cls(outputs, **seeded(len(hidden))))
    model = keras.Sequential(layers)
    if kind != "deterministic":
        set_dataset_size(model, dataset_size)  # KL / N: the ELBO per example.
    return model


def mc_outputs(model, kind, inputs, samples):
    """``{name: [S, N, out]}`` network outputs of ``samples`` stochastic passes per input set."""
    n = 1 if kind == "deterministic" else samples
    return {name: np.stack([model(x, training=True).numpy() for _ in range(n)])
            for name, x in inputs.items()}


def _fit(model, data, cfg, loss):
    from bayes_planet.layers import keras

    model.compile(optimizer=keras.optimizers.Adam(cfg["learning_rate"]), loss=loss)
    start = time.perf_counter()
    model.fit(data["x_train"], data["y_train"], epochs=cfg["epochs"],
              batch_size=cfg["batch_size"], shuffle=True, verbose=0)
    return time.perf_counter() - start


def run_digits(kind, seed, cfg, config):
    """Trains one classifier; returns (metrics, pooled arrays for the plots)."""
    import tensorflow as tf

    from bayes_planet.layers import keras

    data = load_digits_data(cfg, seed)
    keras.utils.set_random_seed(seed)
    model = build_mlp(kind, 64, cfg["hidden"], 10, seed, len(data["x_train"]))
    seconds = _fit(model, data, cfg, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    logits = mc_outputs(model, kind, {"test": data["x_test"], **data["ood"]},
                        config["mc_samples"])
    samples = {name: tf.nn.softmax(v).numpy().astype(np.float64) for name, v in logits.items()}
    probs, y = samples["test"].mean(0), data["y_test"]
    h_in, mi_in = entropy(probs), mutual_information(samples["test"])
    metrics = {
        "accuracy": float(np.mean(probs.argmax(-1) == y)),
        "nll": float(-np.mean(np.log(np.clip(probs[np.arange(len(y)), y], 1e-12, None)))),
        "ece": expected_calibration_error(probs, y, config["ece_bins"]),
        "entropy_test": float(h_in.mean()),
        "mutual_info_test": float(mi_in.mean()),
        "train_seconds": seconds,
    }
    entropies = {"test": h_in}
    for name in data["ood"]:
        h, mi = entropy(samples[name].mean(0)), mutual_information(samples[name])
        entropies[name] = h
        metrics[f"entropy_{name}"] = float(h.mean())
        metrics[f"mutual_info_{name}"] = float(mi.mean())
        metrics[f"auroc_entropy_{name}"] = auroc(h_in, h)
        metrics[f"auroc_mutual_info_{name}"] = auroc(mi_in, mi)
    return metrics, {"probs": probs, "labels": y, "entropies": entropies}


def run_diabetes(kind, seed, cfg, config):
    """Trains one regressor; returns its metrics in the target's original units."""
    from scipy.special import logsumexp

    from bayes_planet.layers import keras

    data = load_diabetes_data(cfg, seed)
    keras.utils.set_random_seed(seed)
    model = build_mlp(kind, data["x_train"].shape[1], cfg["hidden"], 2, seed,
                      len(data["x_train"]))
    seconds = _fit(model, data, cfg, gaussian_nll)
    out = mc_outputs(model, kind, {"test": data["x_test"]}, config["mc_samples"])["test"]
    out = out.astype(np.float64)
    means = out[..., 0]
    scales = np.logaddexp(0.0, out[..., 1]) + 1e-3  # softplus, as in gaussian_nll
    y, s = data["y_test"].astype(np.float64), data["y_scale"]
    log_prob = (-0.5 * np.log(2 * np.pi) - np.log(scales)
                - 0.5 * ((y - means) / scales) ** 2)
    log_prob = logsumexp(log_prob, axis=0) - np.log(len(means))
    mean = means.mean(0)
    std = np.sqrt((scales ** 2).mean(0) + means.var(0))
    return {
        "rmse": float(np.sqrt(np.mean((mean - y) ** 2)) * s),
        "nll": float(-np.mean(log_prob) + np.log(s)),
        "epistemic_std": float(means.std(0).mean() * s),
        "aleatoric_std": float(scales.mean() * s),
        "coverage_95": float(np.mean(np.abs(y - mean) <= 1.96 * std)),
        "train_seconds": seconds,
    }, None


# ---------------------------------------------------------------- the experiment
def run(config, out):
    out = pathlib.Path(out)
    results = {"config": config, "tasks": {}}
    pooled = {}
    start = time.perf_counter()
    for task, fn in (("digits", run_digits), ("diabetes", run_diabetes)):
        cfg = config[task]
        if not cfg["enabled"]:
            continue
        models = {}
        for kind in config["models"]:
            per_seed, arrays = [], []
            for seed in config["seeds"]:
                metrics, extra = fn(kind, seed, cfg, config)
                per_seed.append(metrics)
                arrays.append(extra)
                print(f"{task:<9} {kind:<25} seed {seed}: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in list(metrics.items())[:4]),
                      flush=True)
            mean, std = summarize_seeds(per_seed)
            models[kind] = {"mean": mean, "std": std, "per_seed": per_seed}
            if task == "digits":
                pooled[kind] = arrays
        results["tasks"][task] = {"models": models}
    results["seconds"] = time.perf_counter() - start
    if pooled:
        results["tasks"]["digits"]["pooled_ece"] = plot_reliability(
            pooled, config["ece_bins"], out / "reliability_diagram.png")
        plot_ood_entropy(pooled, out / "ood_entropy.png")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    summary = summary_markdown(results)
    (out / "summary.md").write_text(summary)
    print(summary)
    return results


_DIGITS_COLUMNS = ("accuracy", "nll", "ece", "entropy_test", "mutual_info_test",
                   "train_seconds")
_DIABETES_COLUMNS = ("rmse", "nll", "epistemic_std", "coverage_95", "train_seconds")


def summary_markdown(results):
    """Markdown tables (mean ± std over seeds) of the headline metrics."""
    lines = []
    seeds = len(results["config"]["seeds"])
    digits = results["tasks"].get("digits")
    if digits:
        first = next(iter(digits["models"].values()))["mean"]
        ood = [k[len("auroc_entropy_"):] for k in first if k.startswith("auroc_entropy_")]
        lines += [f"digits, test set (mean ± std over {seeds} seeds)", "",
                  _table(digits["models"], _DIGITS_COLUMNS), ""]
        for name in ood:
            cols = {f"entropy_{name}": "entropy", f"auroc_entropy_{name}": "AUROC(entropy)",
                    f"mutual_info_{name}": "mutual info",
                    f"auroc_mutual_info_{name}": "AUROC(mutual info)"}
            lines += [f"digits, OOD set `{name}` (AUROC: test digits vs OOD; 0.5 = chance)", "",
                      _table(digits["models"], cols), ""]
    diabetes = results["tasks"].get("diabetes")
    if diabetes:
        lines += [f"diabetes (mean ± std over {seeds} seeds; RMSE/NLL/std in original units)",
                  "", _table(diabetes["models"], _DIABETES_COLUMNS), ""]
    return "\n".join(lines)


def _table(models, columns):
    """A markdown table; ``columns`` is a list of keys or a {key: header} dict."""
    headers = columns if isinstance(columns, dict) else {c: c for c in columns}
    head = "| model | " + " | ".join(headers.values()) + " |"
    rows = [head, "|" + "---|" * (len(columns) + 1)]
    for kind, r in models.items():
        cells = [f"{r['mean'][c]:.3f} ± {r['std'][c]:.3f}" for c in columns]
        rows.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_reliability(pooled, bins, path):
    """Reliability diagram per model (predictions pooled over seeds); returns pooled ECEs."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(pooled), figsize=(3.2 * len(pooled), 3.4), squeeze=False)
    centers = (np.arange(bins) + 0.5) / bins
    eces = {}
    for ax, (kind, arrays) in zip(axes[0], pooled.items(), strict=True):
        probs = np.concatenate([a["probs"] for a in arrays])
        labels = np.concatenate([a["labels"] for a in arrays])
        count, acc_sum, conf_sum = reliability_bins(probs, labels, bins)
        seen = count > 0
        acc = np.where(seen, acc_sum / np.maximum(count, 1), 0.0)
        conf = np.where(seen, conf_sum / np.maximum(count, 1), 0.0)
        eces[kind] = expected_calibration_error(probs, labels, bins)
        ax.bar(centers[seen], acc[seen], width=1 / bins, edgecolor="k", label="accuracy")
        ax.bar(centers[seen], (conf - acc)[seen], bottom=acc[seen], width=1 / bins,
               color="tab:red", alpha=0.35, label="gap to confidence")
        ax.plot([0, 1], [0, 1], "k--", lw=1)
        ax.set(title=f"{kind}\nECE {eces[kind]:.3f}", xlabel="confidence", xlim=(0, 1),
               ylim=(0, 1))
    axes[0][0].set_ylabel("accuracy")
    axes[0][0].legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return eces


def plot_ood_entropy(pooled, path):
    """Histograms of predictive entropy on test digits and each OOD set, per model."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(pooled), figsize=(3.2 * len(pooled), 3.0), squeeze=False,
                             sharey=True)
    edges = np.linspace(0, np.log(10), 31)
    for ax, (kind, arrays) in zip(axes[0], pooled.items(), strict=True):
        for name in arrays[0]["entropies"]:
            values = np.concatenate([a["entropies"][name] for a in arrays])
            ax.hist(values, edges, density=True, histtype="step", lw=1.5, label=name)
        ax.set(title=kind, xlabel="predictive entropy (nats)")
    axes[0][0].set_ylabel("density")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = _config.add_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    args = parser.parse_args(argv)
    config = _config.load_dict(CONFIG_PATH, _config.parse_presets(args.preset), args.set)
    if args.out:
        config["out"] = args.out
    unknown = set(config["models"]) - set(MODELS)
    if unknown:
        raise _config.ConfigError(f"unknown models {sorted(unknown)}; known: {list(MODELS)}")
    out = pathlib.Path(config["out"])
    _config.save_dict(config, out)
    return run(config, out)


if __name__ == "__main__":
    _config.run_script(main)
