"""experiments/calibration.py: its metrics (ECE, entropy, mutual information, AUROC) on
hand-computed examples, its presets, and its debug preset end to end."""

import json
import math

import numpy as np
import pytest

from tests.scripts import _experiments


@pytest.fixture(scope="module")
def calibration():
    return _experiments.load("calibration")


def test_ece_on_a_hand_computed_example(calibration):
    probs = np.array([[0.9, 0.05, 0.05],    # confidence 0.9, correct  -> bin (0.8, 1.0]
                      [0.1, 0.9, 0.0],      # confidence 0.9, wrong    -> bin (0.8, 1.0]
                      [0.7, 0.2, 0.1],      # confidence 0.7, correct  -> bin (0.6, 0.8]
                      [0.35, 0.45, 0.2]])   # confidence 0.45, wrong   -> bin (0.4, 0.6]
    labels = np.array([0, 0, 0, 2])
    # (2 |0.5 - 0.9| + 1 |1 - 0.7| + 1 |0 - 0.45|) / 4 = (0.8 + 0.3 + 0.45) / 4
    assert calibration.expected_calibration_error(probs, labels, bins=5) == pytest.approx(
        0.3875, abs=1e-12)
    count, acc_sum, conf_sum = calibration.reliability_bins(probs, labels, bins=5)
    assert count.tolist() == [0, 0, 1, 1, 2]
    assert acc_sum.tolist() == [0, 0, 0, 1, 1]
    # Calibrated: confidence 0.75 and 3 of 4 right -> ECE 0; always-right at 0.75 -> 0.25.
    calibrated = np.tile([[0.75, 0.25]], (4, 1))
    assert calibration.expected_calibration_error(calibrated, np.array([0, 0, 0, 1])) == (
        pytest.approx(0.0, abs=1e-12))
    assert calibration.expected_calibration_error(calibrated, np.zeros(4, int)) == (
        pytest.approx(0.25))


def test_entropy_mutual_information_and_auroc(calibration):
    agree = np.tile([[[0.5, 0.5]]], (3, 1, 1))            # [S, N, C], samples agree
    disagree = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])     # confident, opposite
    assert calibration.entropy(agree[0])[0] == pytest.approx(math.log(2))
    assert calibration.mutual_information(agree)[0] == pytest.approx(0.0, abs=1e-9)
    assert calibration.mutual_information(disagree)[0] == pytest.approx(math.log(2), abs=1e-6)
    assert calibration.auroc([0.1, 0.2], [0.3, 0.4]) == 1.0
    assert calibration.auroc([0.3, 0.4], [0.1, 0.2]) == 0.0
    assert calibration.auroc([1.0, 1.0], [1.0, 1.0]) == 0.5


def test_calibration_presets_merge_and_validate(calibration):
    from bayes_planet.yaml_config import ConfigError

    load = calibration._config.load_dict
    config = load(calibration.CONFIG_PATH, ["debug"], ["digits.epochs=7", "seeds=[4, 5]"])
    assert config["digits"]["epochs"] == 7 and config["seeds"] == [4, 5]
    assert config["digits"]["hidden"] == [32] and config["digits"]["batch_size"] == 64
    with pytest.raises(ConfigError, match="unknown preset"):
        load(calibration.CONFIG_PATH, ["nope"])
    with pytest.raises(ConfigError, match="unknown config key"):
        load(calibration.CONFIG_PATH, [], ["digits.epoch=3"])
    with pytest.raises(ConfigError, match="expected int"):
        load(calibration.CONFIG_PATH, [], ["digits.epochs=many"])
    with pytest.raises(ConfigError, match="unknown models"):
        calibration.main(["--preset", "debug", "--set", "models=[dropout]"])


def test_calibration_debug_preset(calibration, tmp_path):
    results = calibration.main(["--preset", "debug", "--out", str(tmp_path)])
    for name in ("config.yaml", "results.json", "summary.md", "reliability_diagram.png",
                 "ood_entropy.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert (tmp_path / "reliability_diagram.png").stat().st_size > 10_000
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results))
    digits = on_disk["tasks"]["digits"]["models"]
    assert list(digits) == ["deterministic", "reparameterization", "flipout",
                            "variational_dropout"]
    for kind, r in digits.items():
        m = r["mean"]
        assert m["accuracy"] > 0.2, (kind, m)  # Chance is 0.1, even after 2 epochs.
        assert 0 <= m["ece"] <= 1 and math.isfinite(m["nll"])
        for key in ("auroc_entropy_rotated_90", "auroc_mutual_info_uniform_noise"):
            assert 0 <= m[key] <= 1
    # A deterministic net has no epistemic part: mutual information 0, its AUROC chance.
    assert digits["deterministic"]["mean"]["mutual_info_test"] == 0
    assert digits["deterministic"]["mean"]["auroc_mutual_info_uniform_noise"] == 0.5
    assert digits["flipout"]["mean"]["mutual_info_test"] > 0
    diabetes = on_disk["tasks"]["diabetes"]["models"]
    for kind, r in diabetes.items():
        assert 20 < r["mean"]["rmse"] < 200 and math.isfinite(r["mean"]["nll"]), (kind, r)
    assert diabetes["deterministic"]["mean"]["epistemic_std"] == 0
    assert diabetes["reparameterization"]["mean"]["epistemic_std"] > 0
    assert "| flipout |" in (tmp_path / "summary.md").read_text()
