"""``train.seed_actions``: the seed episodes' random actions, uniform in the action box or at
its corners (`bayes_planet.agent.collection.corners_py_policy`)."""

import numpy as np
import pytest

from bayes_planet.agent import config as config_lib
from tests.agent.conftest import debug_config, train_debug_in_process


def _corners(low, high, seed, shape=(3,)):
    from tf_agents.specs import array_spec
    from tf_agents.trajectories import time_step as ts

    from bayes_planet.agent.collection import corners_py_policy

    action_spec = array_spec.BoundedArraySpec(shape, np.float32, low, high)
    observation_spec = array_spec.ArraySpec((2,), np.float32)
    policy = corners_py_policy(ts.time_step_spec(observation_spec), action_spec, seed)
    time_step = ts.restart(np.zeros(2, np.float32))
    return lambda: policy.action(time_step).action


def test_corners_are_at_the_bounds_each_with_probability_one_half():
    """4000 draws of 3 dimensions: every value a bound; each dimension's share of upper bounds
    within 4.5 binomial standard errors of ½ (0.5 ± 0.036; a false failure has probability
    < 1e-4 per dimension); the dimensions independent (|correlation| < 4.5 / sqrt(4000))."""
    act = _corners(np.array([-1.0, -2.0, 0.0]), np.array([1.0, 3.0, 0.5]), seed=7)
    draws = np.stack([act() for _ in range(4000)])
    assert draws.shape == (4000, 3) and draws.dtype == np.float32
    low, high = np.array([-1.0, -2.0, 0.0]), np.array([1.0, 3.0, 0.5])
    upper = draws == high
    assert np.all(upper | (draws == low))
    np.testing.assert_allclose(upper.mean(axis=0), 0.5, atol=4.5 * 0.5 / np.sqrt(4000))
    correlation = np.corrcoef(upper.T.astype(float))
    assert np.all(np.abs(correlation[np.triu_indices(3, 1)]) < 4.5 / np.sqrt(4000))
    # Consecutive decisions are independent too (lag-1 correlation of each dimension).
    for d in range(3):
        lag = np.corrcoef(upper[:-1, d], upper[1:, d])[0, 1]
        assert abs(lag) < 4.5 / np.sqrt(4000)


def test_corners_are_reproducible_from_the_seed():
    first, again, other = (_corners(-1.0, 1.0, s) for s in (3, 3, 4))
    a = np.stack([first() for _ in range(50)])
    np.testing.assert_array_equal(a, np.stack([again() for _ in range(50)]))
    assert not np.array_equal(a, np.stack([other() for _ in range(50)]))


def test_the_key_is_checked_upgraded_and_fixed_for_branches():
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected one of \['uniform', 'corners'\]\. "
                             r"Received: train\.seed_actions='signs'$"):
        config_lib.validate(debug_config("train.seed_actions=signs"))
    old = debug_config().to_dict()
    del old["train"]["seed_actions"]
    assert config_lib.upgrade(old)["train"]["seed_actions"] == "uniform"
    changes = config_lib.branch_fixed_changes(debug_config(),
                                              debug_config("train.seed_actions=corners"))
    assert changes == [("train.seed_actions", "uniform", "corners")]


def test_a_run_with_corners_collects_seed_episodes_at_the_bounds(tmp_path):
    """The debug preset's 2 seed episodes (cartpole's action box [-1, 1]): with ``corners``
    every action is ±1 and both signs occur; with the default, none is at a bound (``action[0]``
    of a replay episode is the layout's 0, no action)."""
    from bayes_planet.agent.replay import EpisodeReplay

    actions = {}
    for kind in ("corners", "uniform"):
        logdir = tmp_path / kind
        assert train_debug_in_process(logdir, "train.episodes=2",
                                      f"train.seed_actions={kind}") == 0
        episodes = EpisodeReplay(logdir / "episodes", read_only=True).episodes()
        assert len(episodes) == 2
        actions[kind] = np.concatenate([ep["action"][1:] for ep in episodes])
    corners = actions["corners"]
    assert set(np.unique(corners)) == {-1.0, 1.0}
    assert 0.3 < np.mean(corners > 0) < 0.7
    assert np.all(np.abs(actions["uniform"]) < 1.0)
