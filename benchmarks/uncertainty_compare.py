"""Do two uncertainty-benchmark runs agree within their seed spread?

Compares two ``results.json`` files of ``benchmarks/uncertainty.py`` (e.g. the same
config on the Keras 2 and the Keras 3 stack) cell by cell::

    python -m benchmarks.uncertainty_compare A/results.json B/results.json \\
        --names keras2 keras3 --out comparison.md

A cell is one (task, model, metric) that both runs measured. Quality metrics (accuracy,
NLL, ECE, RMSE, coverage, entropies, AUROCs, ...) get Welch's two-sample t-test over the
per-seed values (two-sided; seeds are the replicates); a cell whose values are identical
in both runs agrees (up to float noise), and a metric that repeats another's values for the
same model (a task's mean AUROC over a single OOD set) is counted once. The parameter count must be equal (the same architecture); timing
(``train_seconds``, ``train_time_ratio``) is not compared (a shared machine's clock).

With hundreds of cells some p-values fall below ``alpha`` by chance alone (about
``alpha`` × cells when the runs do agree), so the verdict is taken at a false discovery
rate: the runs **agree within seed spread** when no cell survives the Benjamini–Hochberg
procedure at level ``alpha`` and every parameter count matches. The report also gives
the raw count below ``alpha`` beside its expectation, and lists every cell below it.
"""

import argparse
import json
import pathlib

import numpy as np

from bayes_planet.run_dirs import OutputDirError, check_output_dir

#: metrics never compared: wall-clock training time and its ratio to the twin's.
TIMING = ("train_seconds", "train_time_ratio")
#: metrics that must match exactly: the architecture.
EXACT = ("trainable_params", "param_ratio")


def welch_p(a, b):
    """Two-sided p-value of Welch's t-test; 1.0 when both samples are one identical value."""
    from scipy import stats

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Expected at least 2 seeds per run. Received: {len(a)} and {len(b)}")
    tol = 1e-9 * max(1.0, np.abs(a).max(), np.abs(b).max())  # float noise, not spread
    if np.ptp(a) <= tol and np.ptp(b) <= tol:
        return 1.0 if abs(a.mean() - b.mean()) <= tol else 0.0
    # Welch's statistic and Welch-Satterthwaite df, a constant run's variance exactly 0 (then
    # the test is a one-sample t-test against its value; scipy warns on constant samples).
    var = [0.0 if np.ptp(x) <= tol else x.var(ddof=1) / len(x) for x in (a, b)]
    t = (a.mean() - b.mean()) / np.sqrt(sum(var))
    df = sum(var) ** 2 / sum(v ** 2 / (len(x) - 1) for v, x in zip(var, (a, b), strict=True))
    return float(2 * stats.t.sf(abs(t), df))


def benjamini_hochberg(pvalues, alpha):
    """Boolean mask of the p-values rejected at false discovery rate ``alpha``."""
    p = np.asarray(pvalues, np.float64)
    if p.size == 0:
        return np.zeros(0, bool)
    order = np.argsort(p)
    thresholds = alpha * np.arange(1, p.size + 1) / p.size
    below = p[order] <= thresholds
    rejected = np.zeros(p.size, bool)
    if below.any():
        rejected[order[:np.nonzero(below)[0].max() + 1]] = True
    return rejected


def _per_seed(entry, metric):
    return [row[metric] for row in entry["per_seed"]]


def compare(a, b, alpha=0.05):
    """Cell-by-cell comparison of two results dicts; returns a report dict."""
    if not 0 < alpha < 1:
        raise ValueError(f"Expected 0 < alpha < 1. Received: alpha={alpha}")
    cells, mismatched, only = [], [], []
    for task in sorted(set(a["tasks"]) | set(b["tasks"])):
        models_a = a["tasks"].get(task, {}).get("models", {})
        models_b = b["tasks"].get(task, {}).get("models", {})
        for model in sorted(set(models_a) | set(models_b)):
            if model not in models_a or model not in models_b:
                only.append((task, model, "a" if model in models_a else "b"))
                continue
            ea, eb = models_a[model], models_b[model]
            seen = []
            for metric in ea["per_seed"][0]:
                if metric in TIMING or metric not in eb["per_seed"][0]:
                    continue
                va, vb = _per_seed(ea, metric), _per_seed(eb, metric)
                if (va, vb) in seen:
                    continue
                seen.append((va, vb))
                if metric in EXACT:
                    if va != vb:
                        mismatched.append((task, model, metric, va, vb))
                    continue
                cells.append({"task": task, "model": model, "metric": metric,
                              "mean_a": float(np.mean(va)), "std_a": float(np.std(va)),
                              "mean_b": float(np.mean(vb)), "std_b": float(np.std(vb)),
                              "p": welch_p(va, vb)})
    rejected = benjamini_hochberg([c["p"] for c in cells], alpha)
    for cell, r in zip(cells, rejected, strict=True):
        cell["fdr_rejected"] = bool(r)
    below = sum(c["p"] < alpha for c in cells)
    return {"alpha": alpha, "cells": cells, "below_alpha": below,
            "expected_below_alpha": alpha * len(cells),
            "fdr_rejected": int(rejected.sum()), "param_mismatches": mismatched,
            "only_in_one": only,
            "agree": not rejected.any() and not mismatched}


def report_markdown(report, names=("a", "b")):
    """The verdict, the counts and every cell with p < alpha."""
    a, b = names
    alpha, cells = report["alpha"], report["cells"]
    verdict = "agree" if report["agree"] else "do NOT agree"
    lines = [f"**{a} vs {b}: the runs {verdict} within seed spread** "
             f"({len(cells)} cells; Welch's t-test per cell over seeds; "
             f"Benjamini–Hochberg at FDR {alpha}).", "",
             f"- cells with p < {alpha}: {report['below_alpha']} "
             f"(expected by chance if the runs agree: {report['expected_below_alpha']:.1f})",
             f"- cells rejected at FDR {alpha}: {report['fdr_rejected']}",
             f"- parameter-count mismatches: {len(report['param_mismatches'])}"]
    for task, model, metric, va, vb in report["param_mismatches"]:
        lines.append(f"  - {task} {model} {metric}: {va} vs {vb}")
    if report["only_in_one"]:
        lines.append("- models in one run only: " + ", ".join(
            f"{t} {m} ({names[0] if w == 'a' else names[1]})" for t, m, w in report["only_in_one"]))
    low = sorted((c for c in cells if c["p"] < alpha), key=lambda c: c["p"])
    if low:
        lines += ["", f"| task | model | metric | {a} | {b} | p | rejected at FDR |",
                  "|---|---|---|---:|---:|---:|:---:|"]
        for c in low:
            lines.append(f"| {c['task']} | {c['model']} | {c['metric']} | "
                         f"{c['mean_a']:.3f} ± {c['std_a']:.3f} | "
                         f"{c['mean_b']:.3f} ± {c['std_b']:.3f} | {c['p']:.2g} | "
                         f"{'yes' if c['fdr_rejected'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=pathlib.Path, help="first results.json")
    parser.add_argument("b", type=pathlib.Path, help="second results.json")
    parser.add_argument("--names", nargs=2, default=("a", "b"), help="labels of the two runs")
    parser.add_argument("--alpha", type=float, default=0.05, help="test level and FDR")
    parser.add_argument("--out", type=pathlib.Path, help="write the markdown report here too")
    args = parser.parse_args(argv)
    if args.out:  # Its folder: never a run's.
        try:
            check_output_dir("--out", args.out.parent)
        except OutputDirError as e:
            parser.error(str(e))
    report = compare(json.loads(args.a.read_text()), json.loads(args.b.read_text()), args.alpha)
    text = report_markdown(report, args.names)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
    print(text)
    return report


if __name__ == "__main__":
    main()
