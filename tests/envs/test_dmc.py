"""The DMC tasks (`bayes_planet.envs.dmc`, made by `bayes_planet.envs.make`): task names,
defaults and specs; dynamics: action repeat, episode length, determinism, the true state,
bad input."""

import numpy as np
import pytest

from bayes_planet import envs
from tests.envs._cases import SHORT, random_actions

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
    actions = random_actions(fine, 5)
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
        for action in random_actions(env, 3):
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
    for action in random_actions(env, 3):
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



def _render_threads():
    import threading

    return {t for t in threading.enumerate() if t.name.startswith("bayes_planet_render")}


@pytest.mark.parametrize("how", ["close_without_waiting", "garbage_collected"])
def test_a_rendering_env_frees_its_renderer_on_its_thread_without_being_waited_for(how):
    """The garbage collector may finalize an env inside any code (an import's lock held), so
    ``__del__`` only hands the freeing to the render thread (`close(wait=False)`); the thread
    does it and ends."""
    import gc

    before = _render_threads()
    env = envs.make("cartpole-swingup", obs_type="state")
    env.reset()
    assert env.render().shape == (64, 64, 3)
    (thread,) = _render_threads() - before
    if how == "close_without_waiting":
        env.close(wait=False)
        with pytest.raises(RuntimeError, match="closed"):
            env.reset()
    else:
        del env
        gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive()
