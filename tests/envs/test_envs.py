"""Tests of bayes_planet.envs: DMC env, gymnasium and TF-Agents faces, rendering, video."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bayes_planet import envs
from bayes_planet.envs import rendering

# A short episode keeps pixel tests fast (rendering is the slow part on CPU).
SHORT = 32


def _actions(env, count, seed=0):
    spec = env.action_spec()
    rng = np.random.default_rng(seed)
    return rng.uniform(spec.minimum, spec.maximum, size=(count,) + spec.shape).astype(np.float32)


# ------------------------------------------------------------------------------------------------
# Task names, defaults, specs.


def test_unknown_task_lists_known_tasks():
    with pytest.raises(ValueError, match="Unknown task") as info:
        envs.make("cartpole-swingupp", obs_type="state")
    message = str(info.value)
    for name in envs.PLANET_TASKS:
        assert name in message
    with pytest.raises(TypeError, match="task="):
        envs.make(3, obs_type="state")


@pytest.mark.parametrize(
    "task, repeat",
    [
        ("cartpole-swingup", 8),
        ("reacher-easy", 4),
        ("cheetah-run", 4),
        ("finger-spin", 2),
        ("cup-catch", 4),
        ("walker-walk", 2),
    ],
)
def test_planet_defaults(task, repeat):
    env = envs.make(task, obs_type="state")
    assert env.action_repeat == repeat == envs.default_action_repeat(task)
    assert env.max_steps == 1000 // repeat
    spec = env.action_spec()
    assert spec.dtype == np.float32
    np.testing.assert_array_equal(spec.minimum, -np.ones(spec.shape, np.float32))
    np.testing.assert_array_equal(spec.maximum, np.ones(spec.shape, np.float32))
    env.close()


def test_default_action_repeat_of_other_domains_and_unknown_tasks():
    assert envs.default_action_repeat("pendulum-swingup") == 2  # Not PlaNet's: the fallback.
    assert envs.default_action_repeat("cartpole-swingup_sparse") == 8  # By domain.
    with pytest.raises(ValueError, match="task='finger-spun'"):
        envs.default_action_repeat("finger-spun")


def test_cup_alias_and_suite_names():
    assert envs.resolve_task("cup-catch") == ("ball_in_cup", "catch")
    assert envs.resolve_task("cartpole-swingup_sparse") == ("cartpole", "swingup_sparse")
    assert "ball_in_cup-catch" in envs.known_tasks() and "cup-catch" in envs.known_tasks()
    env = envs.make("cup-catch", obs_type="state")
    assert env.task == "ball_in_cup-catch"
    env.close()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(obs_type="rgb"), "obs_type="),
        (dict(action_repeat=0), "action_repeat=0"),
        (dict(episode_length=-5), "episode_length=-5"),
        (dict(episode_length=4, action_repeat=8), "episode_length=4"),
        (dict(size=(64,)), "size="),
        (dict(seed=-1), "seed=-1"),
        (dict(camera=7), "camera=7"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    kwargs.setdefault("obs_type", "state")
    with pytest.raises(ValueError, match=match):
        envs.make("cartpole-swingup", **kwargs)


def test_pixel_specs_and_shapes():
    env = envs.make("cartpole-swingup", episode_length=SHORT, size=(48, 40))
    spec = env.observation_spec()
    assert list(spec) == ["image"]
    assert spec["image"].shape == (48, 40, 3) and spec["image"].dtype == np.uint8
    obs = env.reset()
    assert obs["image"].shape == (48, 40, 3) and obs["image"].dtype == np.uint8
    assert obs["image"].std() > 0  # Not a blank frame.
    obs, reward, done, info = env.step(np.zeros(1))
    assert obs["image"].shape == (48, 40, 3) and isinstance(reward, float) and done is False
    assert info["state"].dtype == np.float32 and info["state"].shape == (5,)
    env.close()


def test_the_task_table_gives_each_domain_its_action_repeat_and_camera():
    """One row per domain (`envs.DOMAINS`): PlaNet's action repeats, camera 0 but quadruped's
    2; a domain not in the table gets the fallback row."""
    assert {task: envs.default_action_repeat(task) for task in envs.PLANET_TASKS} == {
        "cartpole-swingup": 8, "reacher-easy": 4, "cheetah-run": 4, "finger-spin": 2,
        "cup-catch": 4, "walker-walk": 2}
    assert envs.DEFAULT_ACTION_REPEAT["walker"] == envs.DOMAINS["walker"]["action_repeat"]
    assert envs.make("quadruped-walk", episode_length=4).camera == 2
    assert envs.make("hopper-stand", episode_length=4).camera == 0
    assert envs.default_action_repeat("hopper-stand") == 2


@pytest.mark.parametrize("task", envs.PLANET_TASKS)
def test_planet_tasks_render_pixels(task):
    env = envs.make(task, episode_length=16)
    assert env.camera == 0
    first = env.reset()["image"]
    obs, reward, done, info = env.step(np.zeros(env.action_spec().shape))
    assert obs["image"].shape == (64, 64, 3) and obs["image"].dtype == np.uint8
    assert first.std() > 0 and np.isfinite(reward) and not done
    assert info["physics_state"].shape == (env.physics.model.nq + env.physics.model.nv,)
    env.close()


def test_state_specs_and_render_in_state_mode():
    env = envs.make("cheetah-run", obs_type="state", episode_length=SHORT)
    spec = env.observation_spec()
    assert list(spec) == ["state"] and spec["state"].shape == (17,)
    assert spec["state"].dtype == np.float32
    obs = env.reset()
    assert obs["state"].shape == (17,) and obs["state"].dtype == np.float32
    assert env._camera is None  # No GL context is opened while stepping in state mode.
    obs, _, _, _ = env.step(np.zeros(6))
    assert env._camera is None
    frame = env.render()
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    env.close()


def test_loading_a_suite_task_logs_no_notice_about_the_suite_model(caplog):
    """cheetah.xml's deprecated ``settotalmass`` is not the user's problem: no log line (it
    was "WARNING:absl:compiler attribute 'settotalmass' is deprecated ..." per env); other
    absl warnings still pass."""
    import logging

    with caplog.at_level(logging.WARNING):
        envs.make("cheetah-run", obs_type="state", episode_length=SHORT).close()
        logging.getLogger("absl").warning("a genuine warning")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["a genuine warning"], messages


def test_state_slices_locate_each_observation_component():
    env = envs.make("reacher-easy", obs_type="state", seed=3, episode_length=SHORT)
    slices = env.state_slices
    assert list(slices) == list(env.state_keys) == ["position", "to_target", "velocity"]
    assert slices["to_target"] == slice(2, 4) and slices["velocity"] == slice(4, 6)
    state = env.reset()["state"]
    # to_target is the target's position minus the finger's (the suite's definition).
    physics = env.physics
    expected = (physics.named.data.geom_xpos["target", :2]
                - physics.named.data.geom_xpos["finger", :2])
    np.testing.assert_allclose(state[slices["to_target"]], expected, atol=1e-6)
    env.close()


# ------------------------------------------------------------------------------------------------
# Dynamics: action repeat, episode length, determinism, true state, bad input.


def test_action_repeat_sums_rewards_and_shortens_episodes():
    repeat = 4
    task = "cartpole-swingup"
    fine = envs.make(task, obs_type="state", seed=3, action_repeat=1, episode_length=40)
    coarse = envs.make(task, obs_type="state", seed=3, action_repeat=repeat, episode_length=40)
    actions = _actions(fine, 5)
    assert fine.max_steps == 40 and coarse.max_steps == 10
    fine.reset()
    coarse.reset()
    for action in actions:
        expected = sum(fine.step(action)[1] for _ in range(repeat))
        obs, reward, _, info = coarse.step(action)
        assert reward == pytest.approx(expected, rel=1e-9, abs=1e-12)
        np.testing.assert_allclose(info["physics_state"], fine.true_state()["physics_state"])
    assert reward != 0.0

    # An episode is episode_length // action_repeat agent steps, ending truncated.
    coarse.reset()
    dones = [coarse.step(actions[0])[2] for _ in range(coarse.max_steps)]
    assert dones == [False] * (coarse.max_steps - 1) + [True]
    with pytest.raises(RuntimeError, match="reset"):
        coarse.step(actions[0])
    fine.close()
    coarse.close()


def test_episode_end_flags():
    env = envs.make("cartpole-swingup", obs_type="state", episode_length=16)
    assert env.max_steps == 2
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(1))  # Before the first reset.
    env.reset()
    _, _, done, info = env.step(np.zeros(1))
    assert not done and not info["truncated"] and not info["terminated"]
    _, _, done, info = env.step(np.zeros(1))
    assert done and info["truncated"] and not info["terminated"] and info["discount"] == 1.0
    env.close()


def test_same_seed_same_frames_and_rewards():
    def rollout(seed):
        env = envs.make("reacher-easy", seed=seed, episode_length=SHORT)
        frames = [env.reset()["image"]]
        rewards = []
        for action in _actions(env, 3):
            obs, reward, _, _ = env.step(action)
            frames.append(obs["image"])
            rewards.append(reward)
        env.close()
        return np.stack(frames), rewards

    frames_a, rewards_a = rollout(seed=1)
    frames_b, rewards_b = rollout(seed=1)
    frames_c, _ = rollout(seed=2)
    np.testing.assert_array_equal(frames_a, frames_b)
    assert rewards_a == rewards_b
    assert not np.array_equal(frames_a[0], frames_c[0])


def test_reseed_repeats_initial_state():
    env = envs.make("reacher-easy", obs_type="state", seed=5)
    first = env.reset()["state"]
    second = env.reset()["state"]
    assert not np.array_equal(first, second)
    env.seed(5)
    np.testing.assert_array_equal(env.reset()["state"], first)
    env.close()


def test_true_state_matches_physics():
    env = envs.make("cartpole-swingup", obs_type="state", episode_length=SHORT)
    env.reset()
    state = env.true_state()
    data = env.physics.data
    np.testing.assert_array_equal(state["qpos"], data.qpos)
    for action in _actions(env, 3):
        _, _, _, info = env.step(action)
        np.testing.assert_array_equal(info["qpos"], data.qpos)
        np.testing.assert_array_equal(info["qvel"], data.qvel)
        np.testing.assert_array_equal(
            info["physics_state"], np.concatenate([data.qpos, data.qvel, data.act])
        )
        np.testing.assert_array_equal(info["physics_state"], env.physics.get_state())
        # The task's named components: cartpole's bounded position and velocity.
        assert set(info["task_state"]) == {"position", "velocity"}
        np.testing.assert_allclose(info["task_state"]["position"], env.physics.bounded_position())
        np.testing.assert_allclose(info["task_state"]["velocity"], data.qvel)
        np.testing.assert_allclose(
            info["state"], np.concatenate(list(info["task_state"].values())), rtol=1e-6
        )
    # Returned arrays are copies, not views that change with the simulation.
    qpos = info["qpos"].copy()
    env.step(np.ones(1))
    np.testing.assert_array_equal(info["qpos"], qpos)
    env.close()


def test_bad_actions():
    env = envs.make("cheetah-run", obs_type="state", episode_length=SHORT)
    env.reset()
    with pytest.raises(ValueError, match=r"shape \(6,\).*\(5,\)"):
        env.step(np.zeros(5))
    with pytest.raises(ValueError, match=r"shape \(6,\).*\(1, 6\)"):
        env.step(np.zeros((1, 6)))
    for bad in (np.nan, np.inf, -np.inf):
        action = np.zeros(6)
        action[2] = bad
        with pytest.raises(ValueError, match="finite"):
            env.step(action)
    with pytest.raises(TypeError, match="numeric"):
        env.step(["a"] * 6)
    # Out-of-range actions are clipped to the spec.
    env.step(np.full(6, 5.0))
    np.testing.assert_array_equal(env.physics.data.ctrl, np.ones(6))
    env.close()


def test_closed_env_raises():
    env = envs.make("cartpole-swingup", obs_type="state")
    env.reset()
    env.close()
    env.close()  # Idempotent.
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


# ------------------------------------------------------------------------------------------------
# Gymnasium faces.


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


# ------------------------------------------------------------------------------------------------
# TF-Agents face.


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


# ------------------------------------------------------------------------------------------------
# Video.


@pytest.mark.parametrize("extension", [".mp4", ".gif"])
def test_write_video_round_trip(tmp_path, extension):
    import imageio.v2 as imageio

    env = envs.make("cartpole-swingup", episode_length=SHORT)
    real = [env.reset()["image"]]
    real += [env.step(action)[0]["image"] for action in _actions(env, 3)]
    model = np.stack(real).astype(np.float32) / 255.0  # Stand-in for model predictions.
    video = envs.side_by_side(real, model, gap=2)
    assert video.shape == (4, 64, 130, 3) and video.dtype == np.uint8
    path = envs.write_video(video, tmp_path / "sub" / f"episode{extension}", fps=env.fps)
    frames = np.stack(imageio.mimread(path))
    assert frames.shape[0] == 4 and frames.shape[1:3] == (64, 130)
    if extension == ".gif":  # Lossless colours up to GIF's palette.
        assert np.abs(frames[..., :3].astype(int) - video.astype(int)).mean() < 8
    env.close()


def test_write_video_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="path="):
        envs.write_video(np.zeros((2, 8, 8, 3), np.uint8), tmp_path / "video.avi")
    with pytest.raises(ValueError, match="shape"):
        envs.write_video(np.zeros((8, 8, 3, 3, 3), np.uint8), tmp_path / "video.gif")
    with pytest.raises(ValueError, match="fps=0"):
        envs.write_video(np.zeros((2, 8, 8, 3), np.uint8), tmp_path / "video.gif", fps=0)
    with pytest.raises(ValueError, match="height"):
        envs.side_by_side(np.zeros((2, 8, 8, 3)), np.zeros((2, 9, 8, 3)))


# ------------------------------------------------------------------------------------------------
# Rendering backend selection and clean exit.


def test_backend_selected_automatically():
    backend = rendering.selected_backend()
    assert backend in ("egl", "osmesa", "glfw")
    assert os.environ["MUJOCO_GL"] == backend


def test_choose_backend_falls_back_and_reports_packages():
    results = {"egl": (False, "no EGL display"), "osmesa": (True, "")}
    chosen, failures = rendering.choose_backend(probe=lambda name: results[name])
    assert chosen == "osmesa" and failures == {"egl": "no EGL display"}

    chosen, failures = rendering.choose_backend(probe=lambda name: (False, f"{name} broken"))
    assert chosen is None
    message = rendering._unavailable_message(failures)
    for package in ("libegl1", "libgl1-mesa-dri", "libosmesa6"):
        assert package in message
    assert "egl broken" in message and "osmesa broken" in message


def _run_script(code, **env_overrides):
    env = dict(os.environ)
    for key, value in env_overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


_EXIT_SCRIPT = """
    import os
    import numpy as np
    from bayes_planet.envs import make, rendering
    env = make("cartpole-swingup", episode_length=16)
    env.reset()
    env.step(np.zeros(1))
    print(rendering.selected_backend(), os.environ["MUJOCO_GL"], env.render().shape)
    # No close(): the interpreter's exit must free the renderer without a traceback.
"""


def test_fresh_process_selects_backend_and_exits_cleanly():
    result = _run_script(_EXIT_SCRIPT, MUJOCO_GL=None, PYOPENGL_PLATFORM=None)
    assert result.returncode == 0, result.stderr
    backend, variable, shape = result.stdout.split(maxsplit=2)
    assert backend == variable and backend in ("egl", "osmesa")
    assert shape.strip() == "(64, 64, 3)"
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr


def test_cleanup_hook_runs_while_worker_threads_live():
    # The mechanism behind the clean exit, independent of the GL backend: a registered object
    # whose close() needs a thread-pool worker (as dm_control's offloading render executor does)
    # is closed before Python shuts the pools down.
    code = """
        from concurrent import futures
        from bayes_planet.envs import rendering

        class Holder:
            def __init__(self):
                self.executor = futures.ThreadPoolExecutor(max_workers=1)
                self.executor.submit(int).result()

            def close(self):
                print(self.executor.submit(str, "closed with a live worker").result())
                self.executor.shutdown()

        holder = rendering.register_for_cleanup(Holder())
    """
    result = _run_script(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "closed with a live worker"
    assert "Traceback" not in result.stderr


def test_osmesa_exits_cleanly():
    # OSMesa renders on an offloading thread: the case that printed "cannot schedule new
    # futures after shutdown" at exit.
    ok, message = rendering.probe_backend("osmesa")
    if not ok:
        pytest.skip(f"OSMesa is not available here: {message}")
    result = _run_script(_EXIT_SCRIPT, MUJOCO_GL="osmesa", PYOPENGL_PLATFORM=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("osmesa osmesa")
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
