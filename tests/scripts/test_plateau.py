"""experiments/plateau.py: its measurements on a debug run, and its value, return-to-go and
blind states against brute force."""

import numpy as np
import pytest

from tests.scripts import _experiments


@pytest.mark.slow  # ~1 min: a debug training and its measurements
def test_plateau_measurements_on_a_debug_run(tmp_path, capsys):
    """experiments/plateau.py on a tiny value-aware cartpole run (mean-field transition): each
    measurement prints its rows with finite numbers; another task is refused."""
    import subprocess
    import sys

    logdir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "bayes_planet.agent.cli", "train", "--preset",
                           "debug,value", "--logdir", str(logdir), "--set", "eval.video=false",
                           "--set", "model.normalize_obs=false",  # it reads raw observations
                           "--quiet"], capture_output=True, text=True, timeout=600)
    # The traceback in the failure message: on a layers-only install it ends in
    # MissingExtraError, which conftest reports as a skip.
    assert done.returncode == 0, done.stderr[-4000:]
    plateau = _experiments.load("plateau")
    for argv, expected in ((["openloop"], "h= 5 angle RMSE"), (["openloop", "--latent", "mean"],
                           "h= 5 angle RMSE"), (["scores", "--episodes", "2"], "other    policy"),
                           (["scores", "--latent", "shared"], "other    random"),
                           (["actor", "--episodes", "1"], "actor alone, 1 episodes"),
                           (["model", "--episodes", "2"], "open loop, 5 decisions after 5"),
                           (["novelty", "--episodes", "2"], "disagreement d over 15-step"),
                           (["novelty", "--episodes", "2", "--column", "3"],
                            "correlation of d with |physics[3]|"),
                           (["value", "--episodes", "2"], "blind states"),
                           (["error", "--episodes", "2"], "AUROC for the largest 10 % of errors"),
                           (["gradients", "--episodes", "2"], "of the total's")):
        plateau.main(argv + ["--logdir", str(logdir)])
        out = capsys.readouterr().out
        assert expected in out, (argv, out)
        assert "nan" not in out.replace("states", ""), (argv, out)
    with pytest.raises(SystemExit, match=r"^novelty: --column expected a physics column in "
                                         r"\[0, 4\)\. Received: --column=4$"):
        plateau.main(["novelty", "--episodes", "1", "--column", "4", "--logdir", str(logdir)])
    with pytest.raises(SystemExit, match="openloop: --latent sample or mean"):
        plateau.main(["openloop", "--latent", "shared", "--logdir", str(logdir)])
    with pytest.raises(SystemExit, match=r"^plateau: no run in .*missing \(not a directory\)$"):
        plateau.main(["value", "--logdir", str(tmp_path / "missing")])
    deterministic = tmp_path / "deterministic"
    done = subprocess.run([sys.executable, "-m", "bayes_planet.agent.cli", "train", "--preset",
                           "debug", "--logdir", str(deterministic), "--set", "eval.video=false",
                           "--set", "train.episodes=2", "--set", "train.seed_episodes=2",
                           "--set", "model.estimator=deterministic", "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    with pytest.raises(SystemExit, match=r"^error: a single transition with weight noise .*"
                                         r"Received: model.estimator=deterministic$"):
        plateau.main(["error", "--logdir", str(deterministic)])


def test_plateau_value_return_to_go_and_blind_states_against_brute_force():
    plateau = _experiments.load("plateau")
    rng = np.random.default_rng(0)
    rewards = np.where(rng.uniform(size=40) < 0.3, rng.uniform(size=40), 0.0)
    rewards[0] = 0.0  # (the replay's convention: no reward on arriving at step 0)
    values, gamma = rng.normal(size=40), 0.9
    g = plateau.return_to_go(rewards, values, gamma)
    for t in range(40):
        expected = sum(gamma ** k * rewards[t + 1 + k] for k in range(39 - t))
        assert g[t] == pytest.approx(expected + gamma ** (39 - t) * values[-1], rel=1e-12)
    blind = plateau.blind_states(rewards, 3)
    for t in range(40):
        assert blind[t] == (t + 3 < 40 and not rewards[t + 1:t + 4].any()), t
    assert blind.any() and not blind.all()
