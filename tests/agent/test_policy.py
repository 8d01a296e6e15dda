"""The planner policy (`bayes_planet.agent.policy`): the action spec and seeds, novelty,
optimism, latent noise, the belief in its state, warm starts, and exploration noise (its
schedule, its checks, and the trainer setting it before each collected episode)."""

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.environments import tf_py_environment

from bayes_planet import envs
from bayes_planet.agent import config as config_lib
from bayes_planet.agent.policy import PlannerPolicy, exploration_noise
from bayes_planet.agent.world_model import WorldModel
from bayes_planet.envs.tf_agents_env import TFAgentsEnv


@pytest.fixture(scope="module")
def setup():
    config = config_lib.load(["debug"], ["planner.weight_samples=2", "planner.beta=0.5"])
    env = envs.make("cartpole-swingup", obs_type="state", seed=0, episode_length=80)
    tf_env = tf_py_environment.TFPyEnvironment(TFAgentsEnv(env))
    model = WorldModel(config, env.observation_spec()["state"].shape, 1)
    yield config, tf_env, model
    env.close()


def test_policy_respects_the_action_spec_and_seeds(setup):
    config, tf_env, model = setup
    noisy = config_lib.load(["debug"], ["planner.exploration_noise=5.0"])
    for planner, explore in ((config.planner, False), (noisy.planner, True)):
        policy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, planner,
                               explore=explore)
        time_step = tf_env.reset()
        state = policy.get_initial_state(1)
        actions = []
        for i in range(3):
            step = policy.action(time_step, state, seed=tf.constant([1, i]))
            actions.append(step.action.numpy())
            assert step.action.shape == (1, 1)
            assert np.all(np.abs(step.action.numpy()) <= 1.0)
            again = policy.action(time_step, state, seed=tf.constant([1, i]))
            np.testing.assert_array_equal(step.action.numpy(), again.action.numpy())
            state = step.state
            time_step = tf_env.step(step.action)
        other = policy.action(time_step, state, seed=tf.constant([9, 9]))
        assert not np.array_equal(other.action.numpy(), actions[-1])
    # With huge exploration noise, clipping is what keeps actions in the spec.
    assert np.any(np.abs(np.concatenate(actions)) == 1.0)


def test_novelty_changes_the_plan_and_only_with_a_weight(setup):
    """planner.novelty through the policy (the setup's K = 2 mean-field samples): 0 plans as
    without it; a large weight makes the disagreement decide, so the plans differ."""
    config, tf_env, model = setup
    time_step = tf_env.reset()
    actions = {}
    for novelty in (0.0, 1e4):
        planner = config_lib.with_planning(config, [f"planner.novelty={novelty}"]).planner
        policy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, planner)
        step = policy.action(time_step, policy.get_initial_state(1), seed=tf.constant([3, 0]))
        actions[novelty] = step.action.numpy()
    plain = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, config.planner)
    step = plain.action(time_step, plain.get_initial_state(1), seed=tf.constant([3, 0]))
    np.testing.assert_array_equal(actions[0.0], step.action.numpy())
    assert not np.array_equal(actions[0.0], actions[1e4])


def test_without_optimism_the_policy_plans_for_the_expected_return(setup):
    """``optimism=False`` (the evaluation policy under ``eval.optimism: false``): a β > 0 and
    the novelty bonus are dropped, so the plan is the β = 0, novelty-0 plan of the same seed
    (the setup's K = 2 mean-field samples); with optimism they decide; a β < 0 (risk
    aversion, not exploration) stays."""
    config, tf_env, model = setup
    time_step = tf_env.reset()

    def act(overrides, **kwargs):
        planner = config_lib.with_planning(config, overrides).planner
        policy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, planner,
                               **kwargs)
        return policy.action(time_step, policy.get_initial_state(1),
                             seed=tf.constant([3, 0])).action.numpy()

    greedy = act(["planner.beta=0", "planner.novelty=0"])
    optimistic = ["planner.beta=50", "planner.novelty=1e4"]
    np.testing.assert_array_equal(act(optimistic, optimism=False), greedy)
    assert not np.array_equal(act(optimistic), greedy)
    averse = ["planner.beta=-50"]
    np.testing.assert_array_equal(act(averse, optimism=False), act(averse))
    assert not np.array_equal(act(averse), greedy)


def test_eval_optimism_is_a_checked_planning_key_off_by_default():
    """Evaluation drops the collection's optimism by default; runs from before the key
    planned their evaluations with it (upgrade: true where it had something to act on, else
    today's false: the same plans); a trained run may be evaluated either way
    (`with_planning`); a non-boolean is refused naming the key."""
    config = config_lib.load(["debug"])
    assert config.eval.optimism is False
    for planner, optimism in (([], False), (["planner.beta=-1"], False),
                              (["planner.beta=1"], True), (["planner.novelty=1",
                                                            "planner.weight_samples=2"], True)):
        data = config_lib.load(["debug"], planner).to_dict()
        del data["eval"]["optimism"]
        assert config_lib.upgrade(data)["eval"]["optimism"] is optimism, planner
    assert config_lib.with_planning(config, ["eval.optimism=true"]).eval.optimism is True
    with pytest.raises(config_lib.ConfigError, match=r"eval\.optimism"):
        config_lib.load(["debug"], ["eval.optimism=3"])


@pytest.mark.parametrize("latent", ["shared", "mean"])
def test_the_policy_plans_with_each_latent_noise(setup, latent):
    """``planner.latent`` through the policy: a seed gives one action, in the box; the plan
    differs from PlaNet's independent draws (the candidates' scores do)."""
    config, tf_env, model = setup
    time_step = tf_env.reset()
    planner = config_lib.with_planning(config, [f"planner.latent={latent}"]).planner
    policy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, planner)
    state = policy.get_initial_state(1)
    step = policy.action(time_step, state, seed=tf.constant([3, 0]))
    again = policy.action(time_step, state, seed=tf.constant([3, 0]))
    np.testing.assert_array_equal(step.action.numpy(), again.action.numpy())
    assert np.all(np.abs(step.action.numpy()) <= 1.0)
    plain = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, config.planner)
    other = plain.action(time_step, plain.get_initial_state(1), seed=tf.constant([3, 0]))
    assert not np.array_equal(step.action.numpy(), other.action.numpy())


def test_policy_state_carries_the_belief(setup):
    config, tf_env, model = setup
    policy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, config.planner)
    time_step = tf_env.reset()
    step = policy.action(time_step, policy.get_initial_state(1), seed=tf.constant([0, 0]))
    assert set(step.state) == {"mean", "std", "stoch", "deter", "action"}
    np.testing.assert_array_equal(step.state["action"].numpy(), step.action.numpy())
    # The first posterior depends on the observation (the GRU state is still 0 there).
    assert float(tf.reduce_sum(tf.abs(step.state["mean"]))) > 0


def test_warm_start_keeps_the_plan_and_starts_the_next_search_from_it(setup):
    """``planner.warm_start``: the plan (as an offset from the box's middle, 0 for [-1, 1])
    rides in the policy state and its first step is the action; the zero initial state is
    PlaNet's start (the first action is the same as without), later searches start elsewhere."""
    _, _, model = setup
    warm = config_lib.load(["debug"], ["planner.warm_start=true", "planner.cem.iterations=1"])
    cold = config_lib.load(["debug"], ["planner.cem.iterations=1"])
    actions = {}
    for name, planner in (("warm", warm.planner), ("cold", cold.planner)):
        # A fresh environment each: both episodes start from the same state (a shared one's
        # second reset would not), whatever other tests did with the fixture's.
        env = envs.make("cartpole-swingup", obs_type="state", seed=0, episode_length=80)
        tf_env = tf_py_environment.TFPyEnvironment(TFAgentsEnv(env))
        policy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, planner)
        time_step, state = tf_env.reset(), policy.get_initial_state(1)
        if name == "warm":
            assert state["plan"].shape == (1, planner.horizon, 1)
        actions[name] = []
        for i in range(4):
            step = policy.action(time_step, state, seed=tf.constant([2, i]))
            actions[name].append(float(step.action[0, 0]))
            if name == "warm":
                assert step.state["plan"].shape == (1, planner.horizon, 1)
                np.testing.assert_allclose(step.state["plan"][:, 0].numpy(),
                                           step.action.numpy(), atol=1e-6)
            else:
                assert "plan" not in step.state
            state, time_step = step.state, tf_env.step(step.action)
        env.close()
    assert actions["warm"][0] == actions["cold"][0]
    assert actions["warm"][1:] != actions["cold"][1:]


def test_older_configs_plan_without_warm_start_or_novelty():
    text = config_lib.load(["debug"]).to_dict()
    del text["planner"]["warm_start"], text["planner"]["novelty"]
    del text["planner"]["exploration_final"], text["planner"]["exploration_decay_steps"]
    import yaml
    planner = config_lib.parse(yaml.safe_dump(text)).planner
    assert planner.warm_start is False and planner.novelty == 0.0
    assert planner.exploration_final is None  # Constant noise, as before the key.
    assert planner.exploration_decay_steps == config_lib.load().planner.exploration_decay_steps


def test_exploration_noise_falls_linearly_then_stays():
    constant = config_lib.load(["debug"], ["planner.exploration_noise=0.4"]).planner
    assert [exploration_noise(constant, s) for s in (0, 10**6)] == [0.4, 0.4]
    planner = config_lib.load(["debug"], ["planner.exploration_noise=0.5",
                                          "planner.exploration_final=0.05",
                                          "planner.exploration_decay_steps=1000"]).planner
    expected = {0: 0.5, 250: 0.3875, 500: 0.275, 1000: 0.05, 5000: 0.05}
    for steps, value in expected.items():
        assert exploration_noise(planner, steps) == pytest.approx(value, abs=1e-12)
    rising = config_lib.load(["debug"], ["planner.exploration_noise=0",
                                         "planner.exploration_final=1",
                                         "planner.exploration_decay_steps=10"]).planner
    assert exploration_noise(rising, 5) == pytest.approx(0.5)


@pytest.mark.parametrize("sets, message", [
    (["planner.exploration_final=-0.1"],
     r"Expected null or a non-negative number. Received: planner.exploration_final=-0.1"),
    (["planner.exploration_final=.nan"], r"planner.exploration_final=nan"),
    (["planner.exploration_final='low'"], r"planner.exploration_final='low'"),
    (["planner.exploration=wide"], r"planner.exploration='wide'"),
    (["planner.exploration_decay_steps=0"],
     r"Expected a positive integer. Received: planner.exploration_decay_steps=0"),
])
def test_bad_exploration_settings_are_one_line_errors(sets, message):
    config = config_lib.load(["debug"], sets)
    with pytest.raises(config_lib.ConfigError, match=message) as info:
        config_lib.validate(config)
    assert "\n" not in str(info.value)


def test_collection_noise_follows_the_set_std(setup):
    """The collecting policy's noise is the std last set: 0 acts as the evaluation policy does
    (same seed), another std moves the action by std times the same normal draw."""
    config, tf_env, model = setup
    explore = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model,
                            config.planner, explore=True)
    greedy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, config.planner)
    time_step, seed = tf_env.reset(), tf.constant([4, 0])
    act = lambda policy: float(policy.action(  # noqa: E731
        time_step, policy.get_initial_state(1), seed=seed).action[0, 0])
    plan = act(greedy)
    explore.set_exploration_noise(0.0)
    assert act(explore) == plan
    explore.set_exploration_noise(0.01)
    small = act(explore) - plan
    explore.set_exploration_noise(0.02)
    assert small != 0 and act(explore) - plan == pytest.approx(2 * small, rel=1e-3)
    with pytest.raises(ValueError, match="explore=False"):
        greedy.set_exploration_noise(0.1)


def test_spread_exploration_is_as_wide_as_the_search_ended(setup):
    """``planner.exploration: spread``: the collected action moves by max(the planner's final
    std of the first action, the noise) times the normal draw that ``noise`` scales — the
    same plan, the same draw (seed); the evaluation policy never explores."""
    from bayes_planet.planners import get

    config, tf_env, model = setup
    time_step, seed = tf_env.reset(), tf.constant([4, 0])
    act = lambda policy: float(policy.action(  # noqa: E731
        time_step, policy.get_initial_state(1), seed=seed).action[0, 0])
    spread = config_lib.load(["debug"], ["planner.weight_samples=2", "planner.beta=0.5",
                                         "planner.exploration=spread"]).planner
    greedy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, spread)
    noisy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model,
                          config.planner, explore=True)
    wide = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, spread,
                         explore=True)
    plan = act(greedy)
    assert plan == act(PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model,
                                     config.planner))  # exploration is collection's only
    noisy.set_exploration_noise(0.01)
    draw = (act(noisy) - plan) / 0.01
    # The planner's own final std for this state: the same call the policy makes.
    calls = []
    cem = get("cem")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wide, "_plan", lambda *a, **k: calls.append(cem(*a, **k)) or calls[-1])
        wide.set_exploration_noise(0.0)
        moved = act(wide) - plan
    std = float(calls[0][1][0, 0, 0])
    assert 0 < std < 1 and moved == pytest.approx(std * draw, rel=1e-3, abs=1e-5)
    data = config_lib.load(["debug"]).to_dict()
    del data["planner"]["exploration"]  # a run from before the key: PlaNet's fixed noise
    assert config_lib.upgrade(data)["planner"]["exploration"] == "noise"
    wide.set_exploration_noise(5.0)  # the noise as a floor: above every spread
    assert abs(act(wide) - plan) == pytest.approx(min(abs(5.0 * draw), 1 + abs(plan)), rel=1e-3) \
        or abs(act(wide)) == 1.0  # clipped to the spec


def test_training_sets_the_scheduled_noise_before_each_collected_episode(tmp_path, monkeypatch):
    """Episodes of 120 env steps, 2 seed episodes: the planner's episodes 3 and 4 start after
    240 and 360 env steps, so a fall 0.3 -> 0.1 over 480 steps gives them 0.2 and 0.15."""
    from bayes_planet.agent.training import Trainer

    calls = []
    original = PlannerPolicy.set_exploration_noise
    monkeypatch.setattr(PlannerPolicy, "set_exploration_noise",
                        lambda self, std: calls.append(std) or original(self, std))
    config = config_lib.load(["debug"], ["eval.video=false", "train.episodes=4",
                                         "planner.exploration_final=0.1",
                                         "planner.exploration_decay_steps=480"])
    Trainer(config, tmp_path / "run").loop(progress=False)
    assert calls == pytest.approx([0.2, 0.15])
