"""benchmarks/uncertainty_compare.py: the cross-run "agree within seed spread" check."""

import json

import numpy as np
import pytest
from scipy import stats

from benchmarks import uncertainty_compare as uc


def _results(values, params=100, timing=1.0):
    """A results dict: values[task][model][metric] = per-seed list."""
    tasks = {}
    for task, models in values.items():
        entry = tasks.setdefault(task, {"models": {}})
        for model, metrics in models.items():
            seeds = len(next(iter(metrics.values())))
            per_seed = [{**{m: v[i] for m, v in metrics.items()}, "trainable_params": params,
                         "param_ratio": 1.0, "train_seconds": timing * (i + 1)}
                        for i in range(seeds)]
            entry["models"][model] = {"per_seed": per_seed}
    return {"tasks": tasks}


def test_welch_p_matches_scipy_and_handles_constant_samples():
    a, b = [0.1, 0.3, 0.2], [0.5, 0.45, 0.7]
    assert uc.welch_p(a, b) == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue)
    assert uc.welch_p([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) == 1.0
    assert uc.welch_p([1.0, 1.0, 1.0], [0.9, 0.9, 0.9]) == 0.0
    assert uc.welch_p([1.0, 1.0, 1.0 - 1e-16], [1.0, 1.0, 1.0]) == 1.0  # float noise only
    # One constant run: a one-sample t-test of the other against its value.
    b = [0.99, 0.992, 0.998]
    assert uc.welch_p([0.992] * 3, b) == pytest.approx(stats.ttest_1samp(b, 0.992).pvalue)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        uc.welch_p([1.0], [1.0, 2.0])


def test_benjamini_hochberg_step_up():
    # Sorted 0.01, 0.03, 0.04, 0.2 against 0.0125, 0.025, 0.0375, 0.05: only 0.01 passes.
    assert uc.benjamini_hochberg([0.04, 0.01, 0.2, 0.03], 0.05).tolist() == [
        False, True, False, False]
    # Step-up: 0.04 <= 2/2 * 0.05 rejects both, although 0.03 > 1/2 * 0.05.
    assert uc.benjamini_hochberg([0.04, 0.03], 0.05).tolist() == [True, True]
    assert uc.benjamini_hochberg([], 0.05).size == 0


def test_same_distribution_agrees_at_the_stated_rate():
    """Global null, 40 cells of 3 seeds each: FDR control bounds P(any rejection) by alpha."""
    rng = np.random.default_rng(0)
    trials, cells, alpha, disagree, below = 150, 40, 0.05, 0, 0
    for _ in range(trials):
        draw = lambda: {"t": {f"m{i}": {"nll": rng.normal(0, 1, 3).tolist()}  # noqa: E731
                              for i in range(cells)}}
        report = uc.compare(_results(draw()), _results(draw(), timing=7.0), alpha)
        disagree += not report["agree"]
        below += report["below_alpha"]
    rate = disagree / trials
    assert rate <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / trials), rate
    # Raw p < alpha: Welch's test at 3 seeds per run is conservative (its
    # Welch-Satterthwaite df; measured 0.033 at alpha 0.05 over 18,000 cells): at most
    # alpha (+ 4 SE), and not degenerate.
    n = cells * trials
    assert alpha / 2 < below / n <= alpha + 4 * np.sqrt(alpha * (1 - alpha) / n), below / n


def test_a_shifted_cell_and_a_parameter_mismatch_disagree():
    rng = np.random.default_rng(1)
    base = {"t": {f"m{i}": {"nll": rng.normal(0, 1, 3).tolist()} for i in range(20)}}
    shifted = json.loads(json.dumps(base))
    shifted["t"]["m3"]["nll"] = [v + 0.01 for v in rng.normal(0, 0.001, 3)]
    base["t"]["m3"]["nll"] = rng.normal(0, 0.001, 3).tolist()
    report = uc.compare(_results(base), _results(shifted))
    assert not report["agree"]
    flagged = [c for c in report["cells"] if c["fdr_rejected"]]
    assert [(c["model"], c["metric"]) for c in flagged] == [("m3", "nll")]
    assert "do NOT agree" in uc.report_markdown(report, ("k2", "k3"))

    same = _results(base)
    report = uc.compare(same, _results(base, params=101))
    assert not report["agree"] and len(report["param_mismatches"]) == 20
    assert uc.compare(same, same)["agree"]


def test_models_in_one_run_only_are_listed_timing_ignored_repeats_counted_once():
    a = _results({"t": {"x": {"nll": [1.0, 2.0], "auroc_far": [0.1, 0.2], "auroc": [0.1, 0.2]},
                        "y": {"nll": [1.0, 2.0]}}})
    b = _results({"t": {"x": {"nll": [1.0, 2.0], "auroc_far": [0.3, 0.2], "auroc": [0.3, 0.2]}}},
                 timing=50.0)
    report = uc.compare(a, b)
    assert [c["metric"] for c in report["cells"]] == ["nll", "auroc_far"]
    a = _results({"t": {"x": {"nll": [1.0, 2.0]}, "y": {"nll": [1.0, 2.0]}}})
    b = _results({"t": {"x": {"nll": [1.0, 2.0]}}}, timing=50.0)
    report = uc.compare(a, b)
    assert report["only_in_one"] == [("t", "y", "a")]
    assert [c["metric"] for c in report["cells"]] == ["nll"] and report["agree"]
    with pytest.raises(ValueError, match="alpha=1.5"):
        uc.compare(a, b, alpha=1.5)


def test_cli_writes_the_report(tmp_path, capsys):
    a = _results({"t": {"x": {"nll": [1.0, 2.0, 1.5]}}})
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(a))
    uc.main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--names", "k2", "k3",
             "--out", str(tmp_path / "cmp.md")])
    text = (tmp_path / "cmp.md").read_text()
    assert "k2 vs k3: the runs agree within seed spread" in text
    assert json.loads((tmp_path / "cmp.json").read_text())["agree"] is True
    assert "agree within seed spread" in capsys.readouterr().out
