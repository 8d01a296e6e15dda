"""The TF-Agents face (`bayes_planet.envs.tf_agents_env`): a driver fills a replay buffer."""

import numpy as np

from bayes_planet import envs


def test_tf_agents_driver_fills_replay_buffer():
    from tf_agents.drivers import dynamic_step_driver
    from tf_agents.environments import tf_py_environment, utils
    from tf_agents.policies import random_tf_policy
    from tf_agents.replay_buffers import tf_uniform_replay_buffer

    py_env = envs.TFAgentsEnv(envs.make("cartpole-swingup", episode_length=24))
    assert py_env.action_spec().shape == (1,)
    assert py_env.observation_spec()["image"].shape == (64, 64, 3)
    utils.validate_py_environment(py_env, episodes=1)

    tf_env = tf_py_environment.TFPyEnvironment(py_env)
    policy = random_tf_policy.RandomTFPolicy(tf_env.time_step_spec(), tf_env.action_spec())
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        policy.trajectory_spec, batch_size=tf_env.batch_size, max_length=100
    )
    num_steps = 7  # 3 agent steps per episode: crosses two episode ends.
    driver = dynamic_step_driver.DynamicStepDriver(
        tf_env, policy, observers=[buffer.add_batch], num_steps=num_steps
    )
    driver.run()
    trajectory = buffer.gather_all()
    # The driver counts steps that are not episode boundaries (last -> first transitions).
    frames = int(buffer.num_frames())
    boundaries = int(trajectory.is_boundary().numpy().sum())
    assert boundaries == 2 and frames == num_steps + boundaries
    assert trajectory.observation["image"].shape == (1, frames, 64, 64, 3)
    assert trajectory.observation["image"].dtype.name == "uint8"
    assert trajectory.action.shape == (1, frames, 1)
    assert trajectory.reward.dtype.name == "float32"
    actions = trajectory.action.numpy()
    assert np.all(np.abs(actions) <= 1.0)
    assert trajectory.is_last().numpy().any()  # The 3rd step ends the first episode.
    info = py_env.get_info()
    assert "physics_state" in info
    tf_env.close()
