"""The GP examples (experiments/gp.py) run end to end at debug size and beat baselines."""

import math

import pytest

from tests.scripts import _experiments


@pytest.fixture(scope="module")
def gp():
    return _experiments.load("gp")


def _run(gp, tmp_path, preset):
    return _experiments.run_example(gp, tmp_path, preset)


def test_config_presets_merge_in_order_and_overrides_apply(gp):
    config = gp.load_config(["cox_process", "debug"], ["cox_process.steps=7", "seed=3"])
    assert config["example"] == "cox_process" and config["seed"] == 3
    assert config["cox_process"]["steps"] == 7 and config["cox_process"]["grid"] == 12
    assert config["deep_gp"]["num_layers"] == 3  # Untouched defaults stay.
    with pytest.raises(ValueError, match="unknown preset"):
        gp.load_config(["nope"])
    with pytest.raises(ValueError, match="unknown config key"):
        gp.load_config([], ["deep_gp.stepz=1"])


def test_deep_gp_example(gp, tmp_path):
    r = _run(gp, tmp_path, "deep_gp")
    assert r["num_train"] + r["num_test"] == 442 and r["deep_gp"]["num_layers"] == 3
    baseline = r["mean_baseline"]
    for name in ("exact_gp", "sparse_gp", "deep_gp"):
        assert math.isfinite(r[name]["rmse"]) and math.isfinite(r[name]["nll"]), r[name]
    # Even briefly trained, the GPs predict better than the training mean.
    for name in ("exact_gp", "sparse_gp"):
        assert r[name]["rmse"] < 0.95 * baseline["rmse"], (name, r[name], baseline)
        assert r[name]["nll"] < baseline["nll"], (name, r[name], baseline)
    assert r["deep_gp"]["predictive_samples"] > 1 and r["deep_gp"]["rmse"] < baseline["rmse"]


def test_cox_process_example(gp, tmp_path):
    r = _run(gp, tmp_path, "cox_process")
    assert (tmp_path / "cox_intensity.png").stat().st_size > 10_000
    errors = r["relative_l2_error"]
    assert errors["sparse_gp"] < 0.8 * errors["constant"], errors
    assert errors["sparse_gp"] < errors["histogram"], errors
    assert r["correlation_with_truth"] > 0.6
    test_ll = r["test_log_likelihood_per_point"]
    assert test_ll["constant"] < test_ll["sparse_gp"] < test_ll["true_intensity"] + 0.05, test_ll
    assert abs(r["learned_integrated_intensity"] / r["num_points"] - 1) < 0.3
