"""benchmarks/uncertainty.py: the quick preset end to end, config validation, goal checks."""

import json

import pytest

from bayes_planet.yaml_config import ConfigError
from benchmarks import uncertainty


def test_quick_preset_runs_every_family(tmp_path):
    results = uncertainty.main(["--quick", "--out", str(tmp_path),
                                "--set", "models=[deterministic,flipout,tfp_flipout]"])
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["tasks"].keys() == results["tasks"].keys()
    assert set(results["tasks"]) == {"mlp/digits", "mlp/diabetes", "cnn/digits",
                                     "lstm/sinusoids", "transformer/mod_sum"}
    digits = results["tasks"]["mlp/digits"]["models"]
    assert set(digits) == {"deterministic", "flipout", "tfp_flipout"}
    # tfp.layers have no recurrent/attention twin: those families skip it.
    assert "tfp_flipout" not in results["tasks"]["lstm/sinusoids"]["models"]
    for name, entry in digits.items():
        m = entry["mean"]
        assert 0.0 <= m["accuracy"] <= 1.0 and m["nll"] > 0 and 0.0 <= m["ece"] <= 1.0
        for ood in ("rotated_90", "noisy", "uniform"):
            assert 0.0 <= m[f"auroc_epistemic_{ood}"] <= 1.0
        if name == "deterministic":  # no weight samples: zero mutual information
            assert m["mutual_info"] == 0.0 and m["auroc_epistemic"] == 0.5
    diabetes = results["tasks"]["mlp/diabetes"]["models"]["flipout"]["mean"]
    assert diabetes["rmse"] > 0 and 0.0 <= diabetes["coverage_90"] <= 1.0
    assert set(results["goals"]["mlp/diabetes"]["flipout"]) == {
        "nll", "rmse", "coverage", "beats_tfp"}
    for task in ("mlp_digits", "cnn_digits", "lstm_sinusoids", "transformer_mod_sum"):
        assert (tmp_path / f"reliability_{task}.png").stat().st_size > 0
    assert "**Goals**" in (tmp_path / "summary.md").read_text()


def test_goal_check_compares_with_the_deterministic_twin_and_tfp():
    def entry(**m):
        return {"mean": m}

    results = {"tasks": {"mlp/x": {"models": {
        "deterministic": entry(accuracy=0.90, nll=0.30, ece=0.02),
        "tfp_flipout": entry(accuracy=0.90, nll=0.35, ece=0.05),
        "flipout": entry(accuracy=0.895, nll=0.29, ece=0.03),
        "reparameterization": entry(accuracy=0.88, nll=0.31, ece=0.04)}}}}
    goals = uncertainty.check_goals(results)["mlp/x"]
    assert goals["flipout"] == {"nll": True, "ece": True, "accuracy": True, "beats_tfp": True}
    assert goals["reparameterization"] == {"nll": False, "ece": False, "accuracy": False,
                                           "beats_tfp": True}


def test_config_refuses_unknown_tasks_models_and_empty_seeds():
    with pytest.raises(ConfigError, match="cnn/wine"):
        uncertainty.load_config([], ["tasks=[cnn/wine]"])
    with pytest.raises(ConfigError, match="dropout_everywhere"):
        uncertainty.load_config([], ["models=[dropout_everywhere]"])
    with pytest.raises(ConfigError, match="seeds"):
        uncertainty.load_config(["quick"], ["seeds=[]"])
