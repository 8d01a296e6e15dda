"""Uncertainty benchmark: is a default Bayesian layer better calibrated than its Keras twin?

One command; tasks, models and sizes come from ``uncertainty.yaml``::

    python -m benchmarks.uncertainty                       # every family, 3 seeds (~1 h, 2 CPUs)
    python -m benchmarks.uncertainty --quick               # seconds per task (the tests run it)
    python -m benchmarks.uncertainty --preset mlp --set seeds=[0]
    python -m benchmarks.uncertainty --set kernel_regularizer=normal_kl_divergence  # old prior

Each task is a layer family on an offline data set: ``mlp`` (dense) on scikit-learn's
bundled ``digits``, ``breast_cancer``, ``wine`` and ``diabetes`` and on the synthetic
``moons`` and ``friedman`` (#1) sets; ``cnn`` (conv) on the 8×8 digit images; ``lstm`` /
``gru`` on noisy sinusoids (classify the frequency; the sequence example's task);
``transformer`` on the noisy modular-sum seq2seq task of ``experiments/sequence.py``.
Each model is the same architecture with only the layer classes swapped or the network
wrapped (`benchmarks.uncertainty_models`): the deterministic Keras twin, each estimator
of ours **with default arguments**, ``tfp.layers`` (``DenseFlipout``/
``Convolution2DFlipout``, their defaults with the KL divided by the training-set size, as
tfp's examples do), and the ensemble and distance-aware baselines: ``rank1`` and
``batch_ensemble`` (``ensemble_size`` members of the registry's ``*_ensemble`` layers in
`bl.EnsembleModel`), ``deep_ensemble`` (``ensemble_size`` seeded twins), ``mc_dropout``
(the twin with dropout, ``mc_samples`` passes) and ``sngp`` (spectral normalization + a
random-feature GP output; classification). All train by the plain Keras workflow:
``set_dataset_size(model, N)`` (tokens for the transformer) then ``compile`` + ``fit``
for ``steps`` Adam steps.

Reported per task and model, mean ± std over seeds: accuracy, NLL, ECE
(`bayes_planet.uncertainty.metrics`), mean predictive entropy and mutual information for
classification; RMSE, NLL, coverage of the central ``interval`` predictive interval and
the epistemic/aleatoric stds for regression (Gaussian head, softplus scale; predictive =
the uniform mixture over weight samples or ensemble members, in the target's units);
out-of-distribution AUROC (in-distribution test inputs vs OOD inputs) of the predictive
entropy and the mutual information (regression: predictive std and epistemic std); and
the cost against the deterministic twin trained on the same task and seed in the same
process (it always runs, first): ``train_time_ratio`` (training wall-clock) and
``param_ratio`` (trainable parameters). OOD sets: digits rotated by 90°,
noise-corrupted (σ 0.5) and uniform-noise images; tabular test inputs scaled by
``far_scale`` in standardized units; sinusoids of 3× the highest training frequency and
pure noise. Writes ``config.yaml``, ``results.json``, ``summary.md`` (tables and the
goal check against the deterministic twin and tfp.layers) and a reliability diagram per
classification task into ``--out``.
"""

import argparse
import json
import pathlib
import time
import warnings

import numpy as np

from bayes_planet import yaml_config
from bayes_planet.run_dirs import make_output_dir
from bayes_planet.uncertainty import metrics, recalibration
from benchmarks import uncertainty_models

CONFIG_PATH = pathlib.Path(__file__).with_suffix(".yaml")

#: data set -> the families that take it.
DATASETS = {"digits": ("mlp", "cnn"), "breast_cancer": ("mlp",), "wine": ("mlp",),
            "moons": ("mlp",), "diabetes": ("mlp",), "friedman": ("mlp",),
            "sinusoids": ("lstm", "gru"), "mod_sum": ("transformer",)}
REGRESSION = ("diabetes", "friedman")


def parse_task(task):
    """``'mlp/digits'`` -> ``('mlp', 'digits')``; raises on an unknown pair."""
    family, _, dataset = str(task).partition("/")
    if dataset not in DATASETS or family not in DATASETS[dataset]:
        pairs = sorted(f"{f}/{d}" for d, fams in DATASETS.items() for f in fams)
        raise yaml_config.ConfigError(f"unknown task {task!r}; known tasks: {', '.join(pairs)}")
    return family, dataset


# ---------------------------------------------------------------- data
def _split(n, test_fraction, seed):
    order = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return order[n_test:], order[:n_test]


def _tabular(x, y, seed, cfg, regression):
    """Seeded split, inputs standardized by the training set; targets too for regression."""
    train, test = _split(len(x), cfg["test_fraction"], seed)
    mean, std = x[train].mean(0), x[train].std(0) + 1e-8
    x = ((x - mean) / std).astype(np.float32)
    data = {"x_train": x[train], "x_test": x[test], "ood": {"far": x[test] * cfg["far_scale"]}}
    if regression:
        y_mean, y_std = y[train].mean(), y[train].std()
        y = ((y - y_mean) / y_std).astype(np.float32)
        data["y_scale"] = float(y_std)
    data["y_train"], data["y_test"] = y[train], y[test]
    return data


def _digits(seed, cfg, image):
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    train, test = _split(len(images), cfg["test_fraction"], seed)
    rng = np.random.default_rng([seed, 1])
    test_images = images[test]
    ood = {"rotated_90": np.rot90(test_images, 1, axes=(1, 2)),
           "noisy": np.clip(test_images + rng.normal(0, 0.5, test_images.shape), 0, 1),
           "uniform": rng.uniform(0, 1, test_images.shape)}
    shape = (8, 8, 1) if image else (64,)
    fix = lambda a: np.asarray(a, np.float32).reshape((len(a),) + shape)  # noqa: E731
    return {"x_train": fix(images[train]), "y_train": digits.target[train],
            "x_test": fix(test_images), "y_test": digits.target[test],
            "ood": {k: fix(v) for k, v in ood.items()}}


def _sinusoids(cfg, num, rng, freq_scale=1.0, noise_only=False):
    """Noisy sinusoids; class k has angular frequency ``0.3 (1 + 0.15 k)``."""
    t = np.arange(cfg["length"])[None, :, None]
    labels = rng.integers(0, cfg["num_classes"], num)
    omega = freq_scale * 0.3 * (1.0 + 0.15 * labels)[:, None, None]
    phase = rng.uniform(0, 2 * np.pi, (num, 1, cfg["features"]))
    signal = 0.0 if noise_only else np.sin(omega * t + phase)
    x = signal + cfg["obs_noise"] * rng.standard_normal((num, cfg["length"], cfg["features"]))
    return x.astype(np.float32), labels.astype(np.int64)


def load_data(family, dataset, seed, cfg):
    """The task's arrays: ``x_train, y_train, x_test, y_test, ood`` (+ ``y_scale``)."""
    from sklearn import datasets as sk

    if dataset == "digits":
        return _digits(seed, cfg, image=family == "cnn")
    if dataset in ("breast_cancer", "wine", "diabetes"):
        x, y = getattr(sk, f"load_{dataset}")(return_X_y=True)
        return _tabular(x, y, seed, cfg, dataset in REGRESSION)
    if dataset == "moons":
        x, y = sk.make_moons(cfg["moons"]["num"], noise=cfg["moons"]["noise"], random_state=seed)
        return _tabular(x, y, seed, cfg, False)
    if dataset == "friedman":
        x, y = sk.make_friedman1(cfg["friedman"]["num"], noise=cfg["friedman"]["noise"],
                                 random_state=seed)
        return _tabular(x, y, seed, cfg, True)
    rng = np.random.default_rng([seed, 2])
    if dataset == "sinusoids":
        c = cfg["sinusoids"]
        n_test = int(round(c["num"] * cfg["test_fraction"]))
        x_train, y_train = _sinusoids(c, c["num"] - n_test, rng)
        x_test, y_test = _sinusoids(c, n_test, rng)
        return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test,
                "ood": {"fast": _sinusoids(c, n_test, rng, freq_scale=3.0 * 1.45)[0],
                        "noise": _sinusoids(c, n_test, rng, noise_only=True)[0]}}
    c = cfg["mod_sum"]  # y_t = (x_t + x_{L-1-t}) mod V, targets resampled with label_noise
    x = rng.integers(0, c["vocab"], (c["num"], c["length"]))
    y = (x + x[:, ::-1]) % c["vocab"]
    y = np.where(rng.random(y.shape) < c["label_noise"], rng.integers(0, c["vocab"], y.shape), y)
    train, test = _split(len(x), cfg["test_fraction"], seed)
    return {"x_train": x[train].astype(np.int32), "y_train": y[train], "ood": {},
            "x_test": x[test].astype(np.int32), "y_test": y[test]}


def hold_out(data, fraction, seed):
    """``data`` with a seeded ``fraction`` of its training set moved to ``x_val, y_val``
    (the recalibration set; the inputs' and targets' standardization keep the whole
    training set's statistics)."""
    n = len(data["x_train"])
    order = np.random.default_rng([seed, 3]).permutation(n)
    val, train = order[:int(round(n * fraction))], order[int(round(n * fraction)):]
    return {**data, "x_train": data["x_train"][train], "y_train": data["y_train"][train],
            "x_val": data["x_train"][val], "y_val": data["y_train"][val]}


# ---------------------------------------------------------------- one task
def gaussian_head(outputs):
    """``[S, N, 2]`` (mean, raw scale) outputs -> ``[S, N]`` means and scales, float64
    (``scale = softplus(raw) + 1e-3``, the head `metrics.gaussian_nll` trains)."""
    outputs = np.asarray(outputs, np.float64)
    return outputs[..., 0], np.logaddexp(0.0, outputs[..., 1]) + 1e-3


def mixture_moments(means, scales):
    """Mean and std of the uniform mixture of ``N(means[s], scales[s]²)`` over axis 0:
    the mean of the means; variance = mean of the variances + variance of the means."""
    return means.mean(0), np.sqrt((scales ** 2).mean(0) + means.var(0))


def evaluate(family, dataset, model_name, seed, config):
    """Trains one model on one task and seed; returns (metrics, arrays for the plots)."""
    import tensorflow as tf

    from bayes_planet.layers import keras, set_dataset_size

    data = load_data(family, dataset, seed, config["datasets"])
    if config["recalibration"]:
        data = hold_out(data, config["recalibration"], seed)
    fcfg = config["families"][family]
    regression = "y_scale" in data
    keras.utils.set_random_seed(seed)
    with warnings.catch_warnings():
        # tfp.layers (the reference rows) build their variables with Keras' deprecated
        # `add_variable`: TFP's own warning, expected, not this benchmark's.
        warnings.filterwarnings("ignore", message="`layer.add_variable` is deprecated",
                                category=UserWarning)
        model = uncertainty_models.build_model(family, model_name, data, fcfg, seed, config)
        if model_name not in uncertainty_models.TFP_MODELS:
            set_dataset_size(model, data["y_train"].size)
        seconds = uncertainty_models.fit(model, data, fcfg, regression, name=model_name, seed=seed)
    sets = {"test": data["x_test"], **data["ood"]}
    if "x_val" in data:
        sets["validation"] = data["x_val"]
    outs = uncertainty_models.sample_outputs(model, model_name, sets, config["mc_samples"])
    recalibrated = {}
    if regression:
        heads = {k: gaussian_head(v) for k, v in outs.items()}
        if "x_val" in data:  # one std scale for every set, fitted on the held-out one
            scale = recalibration.fit_std_scale(*heads.pop("validation"), data["y_val"])
            heads = {k: recalibration.apply_std_scale(*h, scale) for k, h in heads.items()}
            recalibrated["std_scale"] = scale
        means, scales = heads["test"]
        result = metrics.regression_metrics(means, scales, data["y_test"], config["interval"],
                                            data["y_scale"])
        scores = {"total": {k: mixture_moments(*h)[1] for k, h in heads.items()},
                  "epistemic": {k: h[0].std(0) for k, h in heads.items()}}
        arrays = None
    else:
        validation = outs.pop("validation", None)
        probs = {k: tf.nn.softmax(v).numpy().astype(np.float64) for k, v in outs.items()}
        classes = probs["test"].shape[-1]
        flat = {k: p.reshape(len(p), -1, classes) for k, p in probs.items()}  # [S, N, C]
        labels = data["y_test"].reshape(-1)
        result = metrics.classification_metrics(flat["test"], labels, config["ece_bins"])
        predictive = {k: p.mean(0) for k, p in flat.items()}  # [N, C]
        if validation is not None:  # one temperature of the pooled predictive, every set
            temperature = recalibration.fit_temperature(recalibration.predictive_log_probs(
                validation.reshape(len(validation), -1, classes)), data["y_val"].reshape(-1))
            predictive = {k: np.exp(recalibration.apply_temperature(
                recalibration.predictive_log_probs(outs[k].reshape(len(outs[k]), -1, classes)),
                temperature)) for k in outs}
            # The recalibrated predictive's numbers; the mutual information stays the
            # samples' (epistemic: not a property of the tempered mixture).
            result.update({k: v for k, v in metrics.classification_metrics(
                predictive["test"][None], labels, config["ece_bins"]).items()
                if k != "mutual_info"})
            recalibrated["temperature"] = temperature
        scores = {"total": {k: metrics.entropy(p) for k, p in predictive.items()},
                  "epistemic": {k: metrics.mutual_information(p) for k, p in flat.items()}}
        arrays = {"probs": predictive["test"], "labels": labels}
    for name in data["ood"]:
        for kind, score in scores.items():
            result[f"auroc_{kind}_{name}"] = metrics.auroc(score["test"], score[name])
    if data["ood"]:
        for kind in scores:
            result[f"auroc_{kind}"] = float(np.mean(
                [result[f"auroc_{kind}_{name}"] for name in data["ood"]]))
    result.update(recalibrated)
    result["train_seconds"] = seconds
    result["trainable_params"] = uncertainty_models.trainable_params(model)
    return result, arrays


def task_models(family, dataset, names):
    """The twin first (every ratio's reference), then the ``names`` the task can build."""
    buildable = uncertainty_models.family_models(family, regression=dataset in REGRESSION)
    return [uncertainty_models.TWIN] + [n for n in names if n != uncertainty_models.TWIN and n in buildable]


def run(config, out):
    """Every task x model x seed; writes results.json, summary.md and the plots."""
    out = make_output_dir("out", out)
    results = {"config": config, "tasks": {}}
    start = time.perf_counter()
    uncertainty_models.warm_up()
    for task in config["tasks"]:
        family, dataset = parse_task(task)
        models, pooled, twin = {}, {}, {}
        for name in task_models(family, dataset, config["models"]):
            per_seed, arrays = [], []
            for seed in config["seeds"]:
                metrics_, extra = evaluate(family, dataset, name, int(seed), config)
                reference = twin.setdefault(seed, metrics_)
                metrics_["train_time_ratio"] = (metrics_["train_seconds"]
                                                / reference["train_seconds"])
                metrics_["param_ratio"] = (metrics_["trainable_params"]
                                           / reference["trainable_params"])
                per_seed.append(metrics_)
                arrays.append(extra)
                head = ("rmse", "nll", f"coverage_{round(100 * config['interval'])}") if (
                    dataset in REGRESSION) else ("accuracy", "nll", "ece")
                print(f"{task:<20} {name:<24} seed {seed}: " + ", ".join(
                    f"{k} {metrics_[k]:.4f}" for k in head + (
                        "train_seconds", "train_time_ratio", "param_ratio")), flush=True)
            mean, std = metrics.summarize_seeds(per_seed)
            models[name] = {"mean": mean, "std": std, "per_seed": per_seed}
            if arrays[0] is not None:
                pooled[name] = arrays
        results["tasks"][task] = {"models": models}
        if pooled:
            plot_reliability(pooled, config["ece_bins"], task,
                             out / f"reliability_{task.replace('/', '_')}.png")
        (out / "results.json").write_text(json.dumps(results, indent=1))  # after every task
    results["seconds"] = time.perf_counter() - start
    results["goals"] = check_goals(results)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    summary = summary_markdown(results)
    (out / "summary.md").write_text(summary)
    print(summary)
    return results


# ---------------------------------------------------------------- goals and tables
def check_goals(results):
    """Issue #17's goals per task and Bayesian model, against the deterministic twin.

    Classification: NLL <= det, ECE <= det + 0.01, accuracy >= det - 0.01; regression:
    NLL <= det, RMSE <= 1.05 det, central-interval coverage in [0.85, 0.95]; and NLL and
    ECE (regression: NLL) below the tfp.layers Flipout model's when it ran. Means over seeds.
    """
    goals = {}
    for task, entry in results["tasks"].items():
        models = entry["models"]
        if "deterministic" not in models:
            continue
        det = models["deterministic"]["mean"]
        tfp_ = models.get("tfp_flipout", {}).get("mean")
        regression = "rmse" in det
        for name, r in models.items():
            if name in uncertainty_models.BASELINES or name in uncertainty_models.TFP_MODELS:
                continue
            m = r["mean"]
            checks = {"nll": m["nll"] <= det["nll"]}
            if regression:
                cover = next(k for k in m if k.startswith("coverage_"))
                checks["rmse"] = m["rmse"] <= 1.05 * det["rmse"]
                checks["coverage"] = 0.85 <= m[cover] <= 0.95
            else:
                checks["ece"] = m["ece"] <= det["ece"] + 0.01
                checks["accuracy"] = m["accuracy"] >= det["accuracy"] - 0.01
            if tfp_ is not None:
                checks["beats_tfp"] = m["nll"] < tfp_["nll"] and (
                    regression or m["ece"] < tfp_["ece"])
            goals.setdefault(task, {})[name] = checks
    return goals


_COLUMNS = {"classification": {"accuracy": "accuracy", "nll": "NLL", "ece": "ECE",
                               "entropy": "entropy", "mutual_info": "mutual info",
                               "auroc_total": "AUROC H", "auroc_epistemic": "AUROC MI"},
            "regression": {"rmse": "RMSE", "nll": "NLL", "coverage_90": "90 % coverage",
                           "epistemic_std": "epistemic std", "aleatoric_std": "aleatoric std",
                           "auroc_total": "AUROC std", "auroc_epistemic": "AUROC epist."}}


_RECALIBRATION = {"temperature": "temperature", "std_scale": "std scale"}


def summary_markdown(results):
    """Markdown: one table per task (mean ± std over seeds) and the goal check."""
    seeds = len(results["config"]["seeds"])
    lines = [f"Mean ± std over {seeds} seed(s). AUROC: test inputs vs the task's OOD sets "
             "(mean over sets; 0.5 = chance); H = predictive entropy, MI = mutual information "
             "(regression: predictive / epistemic std).", ""]
    for task, entry in results["tasks"].items():
        first = next(iter(entry["models"].values()))["mean"]
        kind = "regression" if "rmse" in first else "classification"
        columns = {k: v for k, v in _COLUMNS[kind].items() if k in first}
        columns.update({k: v for k, v in _RECALIBRATION.items() if k in first})
        columns.update(train_seconds="train s", train_time_ratio="time ÷ twin",
                       param_ratio="params ÷ twin")
        lines += [f"**{task}**", "", "| model | " + " | ".join(columns.values()) + " |",
                  "|---|" + "---:|" * len(columns)]
        for name, r in entry["models"].items():
            cells = [f"{r['mean'][c]:.3f} ± {r['std'][c]:.3f}" for c in columns]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    goals = results.get("goals") or {}
    if goals:
        lines += ["**Goals** (✓ met, ✗ missed; vs the deterministic twin, means over seeds)",
                  "", "| task | model | checks |", "|---|---|---|"]
        for task, models in goals.items():
            for name, checks in models.items():
                cells = ", ".join(f"{k} {'✓' if ok else '✗'}" for k, ok in checks.items())
                lines.append(f"| {task} | {name} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def plot_reliability(pooled, bins, task, path):
    """Reliability diagram per model (predictions pooled over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(pooled), figsize=(2.8 * len(pooled), 3.2), squeeze=False)
    centers = (np.arange(bins) + 0.5) / bins
    for ax, (name, arrays) in zip(axes[0], pooled.items(), strict=True):
        probs = np.concatenate([a["probs"] for a in arrays])
        labels = np.concatenate([a["labels"] for a in arrays])
        count, acc_sum, conf_sum = metrics.reliability_bins(probs, labels, bins)
        seen = count > 0
        acc = np.where(seen, acc_sum / np.maximum(count, 1), 0.0)
        conf = np.where(seen, conf_sum / np.maximum(count, 1), 0.0)
        ece = metrics.expected_calibration_error(probs, labels, bins)
        ax.bar(centers[seen], acc[seen], width=1 / bins, edgecolor="k", label="accuracy")
        ax.bar(centers[seen], (conf - acc)[seen], bottom=acc[seen], width=1 / bins,
               color="tab:red", alpha=0.35, label="gap to confidence")
        ax.plot([0, 1], [0, 1], "k--", lw=1)
        ax.set(title=f"{name}\nECE {ece:.3f}", xlabel="confidence", xlim=(0, 1), ylim=(0, 1))
    axes[0][0].set_ylabel(f"accuracy ({task})")
    axes[0][0].legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def load_config(presets=(), overrides=()):
    """Defaults ← presets ← overrides, validated (unknown tasks and models refused)."""
    config = yaml_config.load_dict(CONFIG_PATH, presets, overrides)
    for task in config["tasks"]:
        parse_task(task)
    known = uncertainty_models.known_models()
    unknown = sorted(set(config["models"]) - set(known))
    if unknown:
        raise yaml_config.ConfigError(f"unknown models {unknown}; known models: {known}")
    if not config["seeds"]:
        raise yaml_config.ConfigError("seeds: expected at least one seed, received []")
    fraction = config["recalibration"]
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(
            fraction, (int, float)) or not 0 < fraction < 1):
        raise yaml_config.ConfigError(
            f"recalibration: expected null or a fraction in (0, 1), received {fraction!r}")
    return config


def main(argv=None):
    parser = yaml_config.add_arguments(argparse.ArgumentParser(
        description=__doc__.split("\n")[0]))
    parser.add_argument("--quick", action="store_true", help="the tiny preset (= --preset quick)")
    args = parser.parse_args(argv)
    presets = (["quick"] if args.quick else []) + yaml_config.parse_presets(args.preset)
    config = load_config(presets, args.set)
    if args.out:
        config["out"] = args.out
    yaml_config.save_dict(config, config["out"])
    return run(config, config["out"])


if __name__ == "__main__":
    yaml_config.run_script(main)
