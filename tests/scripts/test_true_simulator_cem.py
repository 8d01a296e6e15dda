"""experiments/true_simulator_cem.py: its simulator's rollout against dm_control's steps, the
agent's action repeat, and a debug run."""

import json

import numpy as np
import pytest

from tests.scripts import _experiments


def _load_experiment():
    return _experiments.load("true_simulator_cem")


def _spin_the_finger(env):
    """A state where finger-spin pays: the spinner turned past the task's 15 rad/s."""
    env.physics.named.data.qvel["hinge"] = -25.0


@pytest.mark.parametrize("task, action_repeat, prepare", [
    ("cartpole-swingup", 8, None),
    ("finger-spin", 2, _spin_the_finger),
])
def test_true_simulator_rollout_matches_dm_control_steps(task, action_repeat, prepare):
    """The fast batched simulator gives the same returns as dm_control's own step loop and
    as executing the sequence in a real environment."""
    exp = _load_experiment()
    env = exp.load_env(task, 3)
    env.reset()
    rng = np.random.default_rng(0)
    if prepare is not None:
        prepare(env)
    for _ in range(4 if prepare else 40):  # Move away from the initial (or prepared) state,
        # a few steps only from a prepared one, which must still pay when the rollouts start.
        env.step(rng.uniform(-1, 1, env.action_spec().shape))
    state = env.physics.get_state(exp.FULL_STATE)
    actions = rng.uniform(-1, 1, (6, 3) + env.action_spec().shape).astype(np.float32)
    fast = exp.TrueSimulator(task, action_repeat, "rollout").returns(state, actions)
    exact = exp.TrueSimulator(task, action_repeat, "loop").returns(state, actions)
    np.testing.assert_allclose(fast, exact, rtol=1e-6)
    executed = sum(env.step(a).reward for a in np.repeat(actions[0], action_repeat, axis=0))
    assert fast[0] == pytest.approx(executed, rel=1e-6)
    assert np.std(fast) > 0  # Different sequences, different returns (not all zeros).


def test_true_simulator_plans_with_the_agents_action_repeat(capsys):
    """Without --action-repeat a task is planned with the agent's env steps per decision."""
    exp = _load_experiment()
    assert exp.parse_args(["--task", "finger-spin", "--out", "x"]).action_repeat == 2
    assert exp.parse_args(["--task", "cup-catch", "--out", "x"]).action_repeat == 4
    assert exp.parse_args(["--task", "finger-spin", "--action-repeat", "3",
                           "--out", "x"]).action_repeat == 3
    with pytest.raises(SystemExit):
        exp.parse_args(["--task", "finger-spun", "--out", "x"])
    assert "task='finger-spun'" in capsys.readouterr().err


def test_true_simulator_debug_run(tmp_path):
    exp = _load_experiment()
    results = exp.main(["--debug", "--seed", "1", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["returns"] == results["returns"] and len(saved["returns"]) == 1
    episode = saved["episodes"][0]
    assert episode["decisions"] == 3 and episode["env_steps"] == 24
    assert episode["simulator"] == "rollout"
    assert episode["simulated_env_steps"] == 3 * 2 * 20 * 4 * 8
    assert 0 < saved["returns"][0] <= 24  # Rewards are in [0, 1] per env step.
