"""experiments/random_actions.py: the noises' distributions, reproducible episodes, bad input."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from bayes_planet import envs
from tests.scripts import _experiments


@pytest.fixture(scope="module")
def random_actions():
    return _experiments.load("random_actions")


def test_noise_names(random_actions):
    assert [random_actions.noise_name(t) for t in ["0.30", "2", "1e9999", "uniform"]] == [
        "0.3", "2", "inf", "uniform"]
    for text in ["0", "-1", "nan", "wide"]:
        with pytest.raises(Exception, match=f"Received: --stds {text}$"):
            random_actions.noise_name(text)


@pytest.mark.parametrize("std", [0.3, 1.0, 2.0])
def test_clipped_normal_matches_its_closed_form(random_actions, std):
    """clip(N(0, s²), -1, 1): its std is the closed form's, its mass at ±1 is P(|Z| > 1/s),
    both within 5 standard errors of 200 000 draws (seed 0)."""
    rng = np.random.default_rng(0)
    x = random_actions.draw(rng, f"{std:g}", (100_000, 2)).ravel()
    a = 1 / std
    inner = std ** 2 * ((2 * stats.norm.cdf(a) - 1) - 2 * a * stats.norm.pdf(a))
    variance = inner + 2 * stats.norm.sf(a)
    assert x.min() >= -1 and x.max() <= 1
    assert abs(x.mean()) < 5 * math.sqrt(variance / x.size)
    se = math.sqrt(np.var(x ** 2) / x.size)  # of the mean of x²
    assert abs(np.mean(x ** 2) - variance) < 5 * se
    edge = 2 * stats.norm.sf(a)
    assert abs(np.mean(np.abs(x) == 1) - edge) < 5 * math.sqrt(edge * (1 - edge) / x.size) + 1e-9


def test_signs_and_uniform(random_actions):
    rng = np.random.default_rng(1)
    signs = random_actions.draw(rng, "inf", (50_000,))
    assert set(np.unique(signs)) == {-1.0, 1.0}
    assert abs(signs.mean()) < 5 / math.sqrt(signs.size)
    uniform = random_actions.draw(rng, "uniform", (50_000,))
    assert uniform.min() >= -1 and uniform.max() <= 1
    assert abs(np.var(uniform) - 1 / 3) < 5 * math.sqrt(4 / 45 / uniform.size)  # Var of U² 4/45


def test_episodes_are_reproducible_and_every_noise_meets_the_same_starts(random_actions,
                                                                          tmp_path, monkeypatch):
    """The same seed gives the same returns (JSON and table written); another seed other
    returns; episode i of every noise starts from the same initial state."""
    starts = []
    make = envs.make

    def short(task, **kwargs):  # 80 control steps per episode: seconds, not minutes.
        env = make(task, episode_length=80, **kwargs)
        reset = env.reset

        def recording_reset():
            obs = reset()
            starts.append(env.true_state()["physics_state"].copy())
            return obs

        env.reset = recording_reset
        return env

    monkeypatch.setattr(random_actions.envs, "make", short)
    argv = ["--tasks", "cartpole-swingup", "--stds", "0.3", "inf", "--episodes", "2"]
    first = random_actions.main(argv + ["--out", str(tmp_path / "a")])
    assert random_actions.main(argv + ["--out", str(tmp_path / "b")]) == first
    other = random_actions.main(argv + ["--seed", "1", "--out", str(tmp_path / "c")])
    assert other != first
    returns = first["cartpole-swingup"]
    assert sorted(returns) == ["0.3", "inf"] and all(len(r) == 2 for r in returns.values())
    on_disk = json.loads((tmp_path / "a" / "random_actions.json").read_text())
    assert on_disk["returns"] == first and "| cartpole-swingup | N(0, 0.3²) |" in on_disk["table"]
    # Starts: seed 0 (noise 0.3: episodes 0, 1; inf: 0, 1), twice, then seed 1.
    np.testing.assert_array_equal(starts[0], starts[2])
    np.testing.assert_array_equal(starts[1], starts[3])
    assert not np.array_equal(starts[0], starts[1])


def test_bad_input_is_one_line(random_actions, capsys):
    for argv, message in [(["--tasks", "nope"], "unknown task. Received: --tasks nope"),
                          (["--episodes", "0"], "Received: --episodes 0"),
                          (["--seed", "-1"], "Received: --seed -1"),
                          (["--stds", "0"], "Received: --stds 0")]:
        with pytest.raises(SystemExit):
            random_actions.main(argv)
        assert message in capsys.readouterr().err.splitlines()[-1]
