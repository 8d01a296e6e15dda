"""The sequence examples (experiments/sequence.py) run end to end at debug size."""

import math

import numpy as np
import pytest

from tests.scripts import _experiments


@pytest.fixture(scope="module")
def seq():
    return _experiments.load("sequence")


def _run(seq, tmp_path, preset):
    return _experiments.run_example(seq, tmp_path, preset)


def test_config_presets_merge_in_order_and_overrides_apply(seq):
    config = seq.load_config(["transformer", "debug"], ["transformer.epochs=7", "seeds=[4]"])
    assert config["example"] == "transformer" and config["seeds"] == [4]
    assert config["transformer"]["epochs"] == 7 and config["transformer"]["d_model"] == 16
    assert config["lstm_classifier"]["units"] == 8 and config["transformer"]["vocab"] == 10
    with pytest.raises(ValueError, match="unknown preset"):
        seq.load_config(["nope"])
    with pytest.raises(ValueError, match="unknown config key"):
        seq.load_config([], ["transformer.epochz=1"])
    with pytest.raises(ValueError, match="expected int"):
        seq.load_config([], ["transformer.epochs=many"])


def test_calibration_metrics_match_hand_computed_values(seq):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 1000)
    sure = np.eye(4)[labels]
    m = seq.calibration(sure, labels, bins=10)
    assert m["accuracy"] == 1.0 and m["ece"] < 1e-9 and m["nll"] < 1e-9
    # Always 0.9 confident in class 0, right half the time: ECE = |0.5 - 0.9| = 0.4.
    labels = np.repeat([0, 1], 500)
    probs = np.tile([0.9, 0.1 / 3, 0.1 / 3, 0.1 / 3], (1000, 1))
    m = seq.calibration(probs, labels, bins=15)
    assert m["accuracy"] == 0.5 and math.isclose(m["ece"], 0.4, abs_tol=1e-9)
    assert math.isclose(m["nll"], -0.5 * (math.log(0.9) + math.log(0.1 / 3)), rel_tol=1e-9)
    # Two bins, each calibrated: ECE 0.
    probs = np.concatenate([np.tile([0.6, 0.4], (500, 1)), np.tile([0.2, 0.8], (500, 1))])
    labels = np.concatenate([np.repeat([0, 1], [300, 200]), np.repeat([1, 0], [400, 100])])
    assert seq.calibration(probs, labels, bins=10)["ece"] < 1e-9


def test_noisy_seq2seq_data(seq):
    cfg = {"vocab": 10, "length": 8, "label_noise": 0.2}
    x, noisy, clean = seq.transformer_data(cfg, 4000, np.random.default_rng(0))
    np.testing.assert_array_equal(clean, (x + x[:, ::-1]) % 10)
    agree = (noisy == clean).mean()
    assert abs(agree - (1 - 0.2 + 0.2 / 10)) < 0.01  # the Bayes-optimal token accuracy


def test_lstm_classifier_example(seq, tmp_path):
    r = _run(seq, tmp_path, "lstm_classifier")
    assert set(r["summary"]) == {"deterministic", "reparameterization", "flipout"}
    per_seed = r["per_seed"]["0"]
    for name, m in per_seed.items():
        assert 0.0 <= m["accuracy"] <= 1.0 and 0.0 <= m["ece"] <= 1.0, (name, m)
        assert math.isfinite(m["nll"]) and math.isfinite(m["final_train_nll"]), (name, m)
    # The Fig. 1 loss: the Bayesian cells add KL / dataset_size, the Keras cell nothing.
    assert per_seed["deterministic"]["final_kl_per_example"] == 0.0
    assert per_seed["flipout"]["final_kl_per_example"] > 0.0
    assert per_seed["reparameterization"]["final_kl_per_example"] > 0.0


def test_transformer_example(seq, tmp_path):
    r = _run(seq, tmp_path, "transformer")
    assert set(r["summary"]) == {"deterministic", "bayesian"}
    assert math.isclose(r["bayes_optimal_accuracy"], 0.82)
    per_seed = r["per_seed"]["0"]
    for name, m in per_seed.items():
        for key in ("accuracy", "clean_accuracy", "ece"):
            assert 0.0 <= m[key] <= 1.0, (name, key, m)
        assert math.isfinite(m["nll"]), (name, m)
    assert per_seed["bayesian"]["final_kl_per_token"] > 0.0
    assert per_seed["deterministic"]["final_kl_per_token"] == 0.0
    assert r["summary"]["bayesian"]["ece"]["std"] == 0.0  # one seed in debug
