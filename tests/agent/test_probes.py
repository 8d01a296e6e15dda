"""Latent probes (bayes_planet.agent.probes): the regressors, the open-loop alignment, the command."""

import json

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.agent import config as config_lib
from bayes_planet.agent.probes import encode_closed_loop, encode_open_loop, fit_probes, probe_run
from bayes_planet.agent.world_model import WorldModel
from bayes_planet.layers import posterior_mean

NAMES = ["v0", "v1", "p0", "p1"]
GROUPS = {"v0": "velocity", "v1": "velocity", "p0": "position", "p1": "position"}


def _split(x, y, n_train=2000):
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def test_probe_recovers_a_known_linear_map():
    rng = np.random.default_rng(0)
    latent = rng.normal(size=(3000, 20))
    targets = latent @ rng.normal(size=(20, 4)) + 0.01 * rng.normal(size=(3000, 4))
    report, probes = fit_probes(*_split(latent, targets), NAMES, GROUPS)
    for name in ("ridge", "mlp"):
        assert min(report[name]["r2"].values()) > 0.99, report[name]
        assert set(report[name]["mean"]) == {"velocity", "position"}
    assert probes["ridge"].predict(latent[:3]).shape == (3, 4)


def test_probe_of_noise_explains_nothing():
    rng = np.random.default_rng(1)
    latent, targets = rng.normal(size=(3000, 20)), rng.normal(size=(3000, 4))
    report, _ = fit_probes(*_split(latent, targets), NAMES, GROUPS)
    # Held-out R² of an unrelated target: about -F/N for ridge, no better than 0 for the MLP.
    assert all(abs(r) < 0.05 for r in report["ridge"]["r2"].values()), report["ridge"]
    assert all(-0.3 < r < 0.05 for r in report["mlp"]["r2"].values()), report["mlp"]


def test_mlp_probe_reads_a_nonlinear_code_the_linear_probe_misses():
    rng = np.random.default_rng(2)
    latent = rng.normal(size=(3000, 4))
    targets = np.stack([latent[:, 0] ** 2, np.abs(latent[:, 1])], 1)
    report, _ = fit_probes(*_split(latent, targets), ["a", "b"])
    assert max(report["ridge"]["r2"].values()) < 0.05, report["ridge"]
    assert min(report["mlp"]["r2"].values()) > 0.9, report["mlp"]


def test_probe_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="targets"):
        fit_probes(np.zeros((5, 3)), np.zeros((5, 2)), np.zeros((5, 3)), np.zeros((5, 2)),
                   ["only_one_name"])
    with pytest.raises(ValueError, match="as many features"):
        fit_probes(np.zeros((4, 3)), np.zeros((5, 1)), np.zeros((5, 3)), np.zeros((5, 1)), ["a"])


@pytest.fixture(scope="module")
def model():
    config = config_lib.load(["debug"])  # Bayesian (reparameterization) transition.
    return WorldModel(config, (5,), 1)


def _episode(length, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(length, 5)).astype(np.float32),
            "action": rng.uniform(-1, 1, size=(length, 1)).astype(np.float32)}


def test_open_loop_features_are_the_world_models_open_loop_prediction(model):
    context, horizon = 5, 6
    episode = _episode(context + horizon)
    horizons = list(range(1, horizon + 1))
    feats, index = encode_open_loop(model, episode, context, horizons, seed=(3, 4),
                                    latent="sample", stride=100)
    batch = {k: tf.constant(v[None]) for k, v in episode.items()}
    _, predicted = model.open_loop(batch, context, tf.constant([3, 4]))
    for h in horizons:
        assert index[h].tolist() == [context + h - 1]  # The step the feature predicts.
        decoded = model.obs_head(model.decoder(tf.constant(feats[h]))).distribution.mean()
        np.testing.assert_allclose(decoded[0], predicted[0, context + h - 1], atol=1e-5)


def test_open_loop_windows_stay_inside_the_episode(model):
    episode = _episode(12)
    feats, index = encode_open_loop(model, episode, 5, [1, 4, 10], latent="mean")
    assert index[1].tolist() == list(range(5, 12))     # windows start at 0..6
    assert index[4].tolist() == list(range(8, 12))     # windows start at 0..3
    assert feats[10] is None and index[10].size == 0   # 5 + 10 > 12 steps
    assert feats[1].shape == (7, 4 + 16) and feats[4].shape == (4, 20)  # concat(z, h)
    assert encode_closed_loop(model, episode).shape == (12, 20)


def test_a_shared_weight_seed_encodes_with_one_model_sample(model):
    episode = _episode(12)
    encode = lambda w: encode_open_loop(model, episode, 5, [1, 3], seed=(3, 4),  # noqa: E731
                                        weight_seed=w)[0][3]
    np.testing.assert_array_equal(encode((1, 2)), encode((1, 2)))
    assert not np.allclose(encode((1, 2)), encode((1, 3)))  # Another model sample.
    closed = lambda w: encode_closed_loop(model, episode, (3, 4), weight_seed=w)  # noqa: E731
    np.testing.assert_array_equal(closed((1, 2)), closed((1, 2)))
    assert not np.allclose(closed((1, 2)), closed((1, 3)))
    with posterior_mean(model):  # The mean weights: the weight seed no longer matters.
        np.testing.assert_array_equal(encode((1, 2)), encode((1, 3)))
        np.testing.assert_array_equal(closed((1, 2)), closed((1, 3)))


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A debug-size run (3 episodes, 3 updates) with physics in its replay."""
    from bayes_planet.agent.training import Trainer

    logdir = tmp_path_factory.mktemp("run")
    Trainer(config_lib.load(["debug"], ["eval.video=false"]), logdir).loop(progress=False)
    return logdir


def test_probe_command_writes_report_and_plot(trained_run, tmp_path):
    from bayes_planet.agent import cli

    shared = tmp_path / "shared"
    assert cli.main(["probe", "--logdir", str(trained_run), "--episodes", "1",
                     "--horizons", "1,3", "--test-episodes", str(shared)]) == 0
    out = trained_run.with_name(trained_run.name + ".probe")  # Beside the run, not in it.
    assert not (trained_run / "probe").exists()
    report = json.loads((out / "probe.json").read_text())
    assert (out / "probe_velocity.png").stat().st_size > 10_000
    assert report["train_source"] == "replay" and report["train_episodes"] == 3
    assert report["test_source"] == "fresh" and len(list(shared.glob("*.npz"))) == 1
    assert sorted(report["open_loop"]) == ["1", "3"]
    # cartpole: qpos (slider, hinge_1), qvel, and the 5 observation components.
    assert report["quantities"]["qvel/hinge_1"] == "velocity"
    assert report["quantities"]["qpos/slider"] == "position"
    assert sum(g == "task" for g in report["quantities"].values()) == 5
    for entry in [report["closed_loop"], *report["open_loop"].values()]:
        for probe in ("ridge", "mlp"):
            assert np.isfinite(list(entry[probe]["r2"].values())).all()
    # The reward head's own error at the probed steps: closed loop and every horizon.
    assert sorted(report["reward"]["open_loop"]) == ["1", "3"]
    for entry in [report["reward"]["closed_loop"], *report["reward"]["open_loop"].values()]:
        assert entry["rmse"] >= entry["mae"] >= abs(entry["bias"]) and np.isfinite(entry["r2"])
    # A second model (here: the same run) is probed on exactly the shared episodes.
    again = tmp_path / "again"
    assert cli.main(["probe", "--logdir", str(trained_run), "--out", str(again),
                     "--horizons", "1", "--test-episodes", str(shared)]) == 0
    second = json.loads((again / "probe.json").read_text())
    assert second["test_source"] == str(shared)
    assert second["test_samples"] == report["test_samples"]
    assert second["weights"] == "per_episode"
    shared_weights = tmp_path / "shared_weights"
    assert cli.main(["probe", "--logdir", str(trained_run), "--out", str(shared_weights),
                     "--horizons", "1", "--test-episodes", str(shared), "--weights", "shared"]) == 0
    assert json.loads((shared_weights / "probe.json").read_text())["weights"] == "shared"
    mean_weights = tmp_path / "mean_weights"
    assert cli.main(["probe", "--logdir", str(trained_run), "--out", str(mean_weights),
                     "--horizons", "1", "--test-episodes", str(shared), "--weights", "mean"]) == 0
    assert json.loads((mean_weights / "probe.json").read_text())["weights"] == "mean"
    with pytest.raises(ValueError, match="weights='all'"):
        probe_run(trained_run, weights="all")


def test_reward_errors_closed_form():
    """A reward head that predicts exactly 0.5 everywhere (zero kernel, bias 0.5): errors
    against known rewards follow from their definitions."""
    import tensorflow as tf

    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.probes import reward_errors
    from bayes_planet.agent.world_model import WorldModel

    tf.keras.utils.set_random_seed(0)
    model = WorldModel(config_lib.load(["debug"]), (5,), 1)
    out = model.reward_net.out
    out.kernel.assign(tf.zeros_like(out.kernel))
    out.bias.assign([0.5])
    rewards = np.array([0.0, 1.0, 0.5, 0.9], np.float32)
    features = np.random.default_rng(0).normal(size=(4, 20)).astype(np.float32)
    got = reward_errors(model, features, rewards)
    error = 0.5 - rewards
    np.testing.assert_allclose(got["rmse"], np.sqrt(np.mean(error ** 2)), rtol=1e-6)
    np.testing.assert_allclose(got["mae"], np.mean(np.abs(error)), rtol=1e-6)
    np.testing.assert_allclose(got["bias"], np.mean(error), rtol=1e-6, atol=1e-7)
    expected_r2 = 1 - np.sum(error ** 2) / np.sum((rewards - rewards.mean()) ** 2)
    np.testing.assert_allclose(got["r2"], expected_r2, rtol=1e-5)


def test_probe_command_reports_a_missing_run(tmp_path, capsys):
    from bayes_planet.agent import cli

    assert cli.main(["probe", "--logdir", str(tmp_path / "nope")]) == 2
    assert "no run in" in capsys.readouterr().err
