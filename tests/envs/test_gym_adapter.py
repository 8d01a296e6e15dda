"""The gymnasium faces (`bayes_planet.envs.gym_adapter`): a DMC task as a gymnasium env and a
gymnasium env as a DMC-style one."""

import numpy as np
import pytest

from bayes_planet import envs
from tests.envs._cases import SHORT


@pytest.mark.filterwarnings("ignore:.*Box observation space (minimum|maximum) value")
def test_gymnasium_adapter_state():
    from gymnasium import spaces
    from gymnasium.utils.env_checker import check_env

    env = envs.GymnasiumEnv(envs.make("cartpole-swingup", obs_type="state", episode_length=16))
    assert isinstance(env.observation_space, spaces.Dict)
    assert env.observation_space["state"].shape == (5,)
    assert env.action_space.shape == (1,) and env.action_space.dtype == np.float32
    check_env(env, skip_render_check=True)

    obs, info = env.reset(seed=4)
    assert env.observation_space.contains(obs) and "physics_state" in info
    outcomes = [env.step(env.action_space.sample()) for _ in range(2)]
    assert [len(outcome) for outcome in outcomes] == [5, 5]
    assert outcomes[0][2:4] == (False, False)
    assert outcomes[1][2:4] == (False, True)  # The time limit truncates.
    again, _ = env.reset(seed=4)
    np.testing.assert_array_equal(again["state"], obs["state"])
    env.close()


def test_gymnasium_adapter_pixels():
    env = envs.GymnasiumEnv(envs.make("cartpole-swingup", episode_length=SHORT))
    assert env.observation_space["image"].shape == (64, 64, 3)
    assert env.observation_space["image"].dtype == np.uint8
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    obs, reward, terminated, truncated, info = env.step(np.zeros(1, np.float32))
    assert env.observation_space.contains(obs)
    assert env.render().shape == (64, 64, 3)
    assert env.metadata["render_fps"] == pytest.approx(1 / (0.01 * 8))
    env.close()


def test_from_gymnasium_pendulum_pixels():
    env = envs.FromGymnasium("Pendulum-v1", pixels=True, size=(64, 64), action_repeat=2, seed=0)
    assert env.max_steps == 100  # Pendulum's 200-step limit, halved by the repeat.
    assert env.observation_spec()["image"].shape == (64, 64, 3)
    spec = env.action_spec()
    assert spec.shape == (1,) and spec.minimum[0] == -2.0 and spec.maximum[0] == 2.0
    obs = env.reset()
    assert obs["image"].shape == (64, 64, 3) and obs["image"].dtype == np.uint8
    assert obs["image"].std() > 0
    obs, reward, done, info = env.step(np.array([0.5]))
    assert obs["image"].shape == (64, 64, 3) and reward < 0 and not done
    assert info["physics_state"].shape == (2,) and info["state"].shape == (3,)
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([np.nan]))
    env.close()


def test_from_gymnasium_repeat_and_seed():
    def rollout(repeat):
        env = envs.make("gym:Pendulum-v1", obs_type="state", action_repeat=repeat, seed=7)
        env.reset()
        rewards = [env.step(np.array([1.0]))[1] for _ in range(6 // repeat)]
        return rewards, env.true_state()["physics_state"]

    fine, fine_state = rollout(1)
    coarse, coarse_state = rollout(3)
    assert coarse == pytest.approx([sum(fine[:3]), sum(fine[3:])])
    np.testing.assert_allclose(coarse_state, fine_state)

    env = envs.make("gym:Pendulum-v1", obs_type="state", episode_length=4, seed=0)
    env.reset()
    dones = [env.step(np.zeros(1))[2] for _ in range(4)]
    assert dones == [False, False, False, True]
    env.close()


def test_a_state_based_gymnasium_env_renders_frames_for_videos():
    env = envs.make("gym:Pendulum-v1", obs_type="state", seed=0, size=(32, 32))
    env.reset()
    frame = env.render()
    assert frame.shape == (32, 32, 3) and frame.dtype == np.uint8 and frame.std() > 0
    env.close()


def test_an_unknown_gymnasium_env_is_a_one_line_error():
    with pytest.raises(ValueError, match=r"Unknown gymnasium environment .*NoSuchEnv.*"
                                         r"Received: gym_env='NoSuchEnv-v0'$"):
        envs.make("gym:NoSuchEnv-v0", obs_type="state")
