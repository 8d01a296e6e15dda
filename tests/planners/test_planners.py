"""Tests for bayes_planet.planners: CEM, random shooting, uncertainty-aware scores, and the
true-simulator experiment's simulator and debug run."""

import json

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.planners import (
    cross_entropy_method,
    random_shooting,
    uncertainty_aware_score,
)
from tests.scripts import _experiments

H, A = 12, 2  # PlaNet's horizon; a 2-D action.


def quadratic(target):
    """Objective with maximum 0 at ``target`` ``[..., H, A]`` (broadcast over candidates)."""
    target = tf.constant(target, tf.float32)

    def objective(actions):  # [..., N, H, A] -> [..., N]
        return -tf.reduce_sum((actions - target[..., None, :, :]) ** 2, axis=[-2, -1])

    return objective


def targets(seed, shape=(H, A), bound=0.8):
    return np.random.default_rng(seed).uniform(-bound, bound, shape).astype(np.float32)


# ---------------------------------------------------------------- CEM
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cem_finds_quadratic_optimum_and_beats_random_shooting(seed):
    target = targets(seed)
    objective = quadratic(target)
    plan = cross_entropy_method(objective, H, A, -1.0, 1.0, num_candidates=1000, top_k=100,
                                iterations=10, seed=seed)
    assert plan.shape == (H, A)
    cem_error = np.abs(plan.numpy() - target).max()
    assert cem_error < 0.05
    # Random shooting with the same number of objective evaluations (1000 * 10).
    best = random_shooting(objective, H, A, -1.0, 1.0, num_candidates=10_000, seed=seed)
    assert best.shape == (H, A)
    shooting_error = np.abs(best.numpy() - target).max()
    assert shooting_error > 5 * cem_error
    assert objective(best[None])[0] < objective(plan[None])[0]


def test_cem_respects_bounds_and_returns_clipped_optimum():
    low = np.array([-1.0, 0.0], np.float32)
    high = np.array([1.0, 0.5], np.float32)
    target = np.tile(np.array([[3.0, 0.25]], np.float32), [H, 1])  # dim 0 beyond `high`.
    plan = cross_entropy_method(quadratic(target), H, A, low, high, seed=0).numpy()
    assert np.all(plan >= low) and np.all(plan <= high)
    np.testing.assert_allclose(plan[:, 0], 1.0, atol=0.02)  # Clipped to the boundary.
    np.testing.assert_allclose(plan[:, 1], 0.25, atol=0.05)
    best = random_shooting(quadratic(target), H, A, low, high, num_candidates=100, seed=0)
    assert np.all(best.numpy() >= low) and np.all(best.numpy() <= high)


def test_seeding_is_reproducible():
    objective = quadratic(targets(0))
    kwargs = dict(num_candidates=50, top_k=5, iterations=3)
    a = cross_entropy_method(objective, H, A, -1.0, 1.0, seed=7, **kwargs)
    b = cross_entropy_method(objective, H, A, -1.0, 1.0, seed=7, **kwargs)
    c = cross_entropy_method(objective, H, A, -1.0, 1.0, seed=8, **kwargs)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3
    tensor_seed = tf.constant([3, 4], tf.int32)
    d = cross_entropy_method(objective, H, A, -1.0, 1.0, seed=tensor_seed, **kwargs)
    e = cross_entropy_method(objective, H, A, -1.0, 1.0, seed=tensor_seed, **kwargs)
    np.testing.assert_array_equal(d, e)
    unseeded = [cross_entropy_method(objective, H, A, -1.0, 1.0, **kwargs) for _ in range(2)]
    assert np.abs(unseeded[0] - unseeded[1]).max() > 1e-3
    r1, r2, r3 = (random_shooting(objective, H, A, -1.0, 1.0, num_candidates=50, seed=s)
                  for s in (7, 7, 8))
    np.testing.assert_array_equal(r1, r2)
    assert np.abs(r1 - r3).max() > 1e-3


def test_batch_shape_solves_independent_problems():
    batch = (2, 3)
    target = targets(5, (*batch, H, A))
    calls = []

    def objective(actions):
        calls.append(actions.shape)
        return quadratic(target)(actions)

    plan = cross_entropy_method(objective, H, A, -1.0, 1.0, num_candidates=500, top_k=50,
                                iterations=8, seed=0, batch_shape=batch)
    assert plan.shape == (*batch, H, A)
    assert calls[0] == (*batch, 500, H, A) and len(calls) == 8  # One call per iteration.
    assert np.abs(plan.numpy() - target).max() < 0.1
    calls.clear()
    candidates = []

    def recording(actions):
        candidates.append(actions)
        return objective(actions)

    best = random_shooting(recording, H, A, -1.0, 1.0, num_candidates=100, seed=0,
                           batch_shape=batch)
    assert best.shape == (*batch, H, A) and calls == [(*batch, 100, H, A)]
    # Each problem's result is the best of its own candidates.
    scores = quadratic(target)(candidates[0]).numpy()  # [2, 3, 100]
    expected = np.take_along_axis(candidates[0].numpy(),
                                  scores.argmax(-1)[..., None, None, None], axis=2)[:, :, 0]
    np.testing.assert_array_equal(best, expected)


def test_initial_mean_and_stddev():
    target = targets(3)
    # A tiny stddev around the right answer stays there; around a wrong one it cannot move far.
    good = cross_entropy_method(quadratic(target), H, A, -1.0, 1.0, num_candidates=50,
                                top_k=5, iterations=2, seed=0, initial_mean=target,
                                initial_stddev=1e-3)
    np.testing.assert_allclose(good, target, atol=2e-3)
    stuck = cross_entropy_method(quadratic(target), H, A, -1.0, 1.0, num_candidates=50,
                                 top_k=5, iterations=2, seed=0, initial_mean=0.0,
                                 initial_stddev=1e-3)
    np.testing.assert_allclose(stuck, 0.0, atol=5e-3)


def test_final_stddev_is_the_last_elite_spread():
    """``return_stddev``: the same mean as without it; narrow where the objective tells the
    candidates apart (a quadratic), as wide as the clipped sampling where it cannot (a
    constant): with every candidate elite, the std of N(0, 1) clipped to [-1, 1] is 0.7184
    after one refit, that of N(0, 0.7184²) clipped 0.6148 after two (closed forms; 4 000
    candidates per step and dim, averaged over 24: Monte Carlo error ≈ 0.002)."""
    target = targets(4, shape=(1, 1))  # one action: 200 candidates resolve it
    args = dict(num_candidates=200, top_k=20, iterations=2, seed=3)
    mean, stddev = cross_entropy_method(quadratic(target), 1, 1, -1.0, 1.0,
                                        return_stddev=True, **args)
    np.testing.assert_array_equal(mean, cross_entropy_method(quadratic(target), 1, 1, -1.0,
                                                             1.0, **args))
    assert stddev.shape == (1, 1) and float(stddev[0, 0]) < 0.05
    flat = lambda actions: tf.zeros(actions.shape[:-2])  # noqa: E731
    _, wide = cross_entropy_method(flat, H, A, -1.0, 1.0, return_stddev=True,
                                   **dict(args, num_candidates=4000, top_k=4000))
    assert float(tf.reduce_mean(wide)) == pytest.approx(0.6148, abs=0.008)


def test_xla_compiled_and_tf_function():
    target = targets(1)
    objective = quadratic(target)
    kwargs = dict(num_candidates=300, top_k=30, iterations=6)

    @tf.function(jit_compile=True)
    def plan_xla(seed):  # One compilation for both planners.
        return (cross_entropy_method(objective, H, A, -1.0, 1.0, seed=seed, **kwargs),
                random_shooting(objective, H, A, -1.0, 1.0, num_candidates=300, seed=seed))

    @tf.function
    def plan_graph(seed):
        return cross_entropy_method(objective, H, A, -1.0, 1.0, seed=seed, **kwargs)

    seed = tf.constant([0, 1], tf.int32)
    eager = cross_entropy_method(objective, H, A, -1.0, 1.0, seed=seed, **kwargs)
    np.testing.assert_allclose(plan_graph(seed), eager, atol=1e-5)
    xla, best = plan_xla(seed)
    assert xla.shape == (H, A) and best.shape == (H, A)
    # XLA draws its stateless normals with its own kernel, so compare quality, not values.
    np.testing.assert_array_equal(xla, plan_xla(seed)[0])
    assert np.abs(xla.numpy() - plan_xla(tf.constant([0, 2], tf.int32))[0].numpy()).max() > 1e-3
    error = lambda plan: np.abs(plan.numpy() - target).max()  # noqa: E731
    assert error(xla) < 0.15 and error(eager) < 0.15 and error(best) > error(xla)


def test_nan_scores_are_never_elite():
    # Candidates with any action above 0.5 score NaN; the optimum (0.8) is among them.
    def objective(actions):
        score = -tf.reduce_sum((actions - 0.8) ** 2, axis=[-2, -1])
        bad = tf.reduce_any(actions > 0.5, axis=[-2, -1])
        return tf.where(bad, tf.constant(np.nan, tf.float32), score)

    plan = cross_entropy_method(objective, 2, 1, -1.0, 1.0, num_candidates=500, top_k=20,
                                iterations=6, seed=0).numpy()
    assert np.all(np.isfinite(plan)) and np.all(plan <= 0.5)
    np.testing.assert_allclose(plan, 0.5, atol=0.05)


@pytest.mark.parametrize("kwargs, match", [
    (dict(horizon=0), "horizon=0"),
    (dict(action_dim=1.5), "action_dim=1.5"),
    (dict(num_candidates=-3), "num_candidates=-3"),
    (dict(top_k=True), "top_k=True"),
    (dict(top_k=11, num_candidates=10), "top_k=11"),
    (dict(iterations=0), "iterations=0"),
    (dict(action_low=1.0, action_high=1.0), "action_low"),
    (dict(action_low=[0.0, 2.0], action_high=[1.0, 1.0]), "action_low"),
    (dict(action_low=[-1.0, -1.0, -1.0]), r"action_low.*\[2\]"),
    (dict(action_high=np.inf), "finite"),
    (dict(seed=-1), "seed=-1"),
    (dict(seed=[1, 2, 3]), "seed"),
    (dict(seed=1.5), "seed=1.5"),
    (dict(batch_shape=(2, 0)), "batch_shape"),
    (dict(batch_shape=4), "batch_shape=4"),
    (dict(dtype=tf.int32), "dtype"),
])
def test_bad_arguments_raise(kwargs, match):
    args = dict(objective_fn=quadratic(targets(0, (2, 2))), horizon=2, action_dim=2,
                action_low=-1.0, action_high=1.0, num_candidates=10, top_k=2, iterations=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        cross_entropy_method(**args)
    if "top_k" not in kwargs and "iterations" not in kwargs:
        shooting = {k: v for k, v in args.items() if k not in ("top_k", "iterations")}
        with pytest.raises(ValueError, match=match):
            random_shooting(**shooting)


def test_objective_with_wrong_score_shape_raises():
    with pytest.raises(ValueError, match="scores.shape"):
        cross_entropy_method(lambda a: tf.reduce_sum(a, axis=-1), 3, 1, -1.0, 1.0,
                             num_candidates=10, top_k=2, iterations=1, seed=0)


# ---------------------------------------------------------------- uncertainty-aware score
def test_uncertainty_aware_score_closed_form():
    returns = np.random.default_rng(0).normal(size=(5, 3, 7)).astype(np.float32)
    for beta in (-1.0, 0.0, 0.5):
        score = uncertainty_aware_score(returns, beta)
        np.testing.assert_allclose(score, returns.mean(0) + beta * returns.std(0), rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_allclose(uncertainty_aware_score(returns, 2.0, axis=1),
                               returns.mean(1) + 2.0 * returns.std(1), rtol=1e-5, atol=1e-6)
    single = returns[:1]  # K = 1: the score is the return, whatever beta.
    np.testing.assert_allclose(uncertainty_aware_score(single, 3.0), single[0], rtol=1e-6)
    with pytest.raises(ValueError, match="axis=3"):
        uncertainty_aware_score(returns, 1.0, axis=3)
    with pytest.raises(ValueError, match="beta"):
        uncertainty_aware_score(returns, [1.0, 2.0])


@pytest.mark.parametrize("beta, expected", [(0.0, "safe"), (1.0, "uncertain"), (-1.0, "safe")])
def test_beta_steers_cem_toward_or_away_from_uncertain_branch(beta, expected):
    """Toy ensemble of K=8 models: a = -1 returns 1.0 for sure, a = +1 returns 0.9 on average
    with a large spread across models; returns interpolate linearly in between."""
    spread = tf.constant([0.5, -0.5, 0.4, -0.4, 0.6, -0.6, 0.3, -0.3])  # mean 0, std ~0.46
    uncertain = 0.9 + spread  # [K]

    def objective(actions):  # [N, 1, 1] -> [N]
        w = (actions[:, 0, 0] + 1) / 2  # 0 for a = -1 (safe), 1 for a = +1 (uncertain).
        returns = (1 - w)[None] * 1.0 + w[None] * uncertain[:, None]  # [K, N]
        return uncertainty_aware_score(returns, beta)

    plan = cross_entropy_method(objective, 1, 1, -1.0, 1.0, num_candidates=200, top_k=20,
                                iterations=5, seed=0)
    assert float(plan[0, 0]) == pytest.approx(-1.0 if expected == "safe" else 1.0, abs=0.05)


# ---------------------------------------------------------------- true-simulator experiment
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


# ---------------------------------------------------------------- planners by name
def test_planners_get_returns_the_registered_cem_planner():
    """``planner.name: cem`` is `cross_entropy_method` with the ``planner.cem`` settings."""
    from bayes_planet import planners
    from bayes_planet.agent import config as config_lib

    assert planners.names() == ["cem"]
    cem = config_lib.load(["debug"]).planner.cem
    objective = quadratic(targets(3))
    plan = planners.get("cem")(objective, cem, horizon=H, action_dim=A, action_low=-1.0,
                               action_high=1.0, seed=5, batch_shape=())
    direct = cross_entropy_method(objective, H, A, -1.0, 1.0, num_candidates=cem.candidates,
                                  top_k=cem.top_k, iterations=cem.iterations, seed=5)
    np.testing.assert_array_equal(plan.numpy(), direct.numpy())
    # ``initial_mean`` (the policy's warm start) reaches the method: one iteration from the
    # optimum equals the direct call and ends nearer the optimum than from the middle.
    target = targets(4)
    one = {"candidates": 100, "top_k": 10, "iterations": 1}
    warm = planners.get("cem")(quadratic(target), one, horizon=H, action_dim=A, action_low=-1.0,
                               action_high=1.0, seed=5, initial_mean=target)
    cold = planners.get("cem")(quadratic(target), one, horizon=H, action_dim=A, action_low=-1.0,
                               action_high=1.0, seed=5)
    direct = cross_entropy_method(quadratic(target), H, A, -1.0, 1.0, num_candidates=100,
                                  top_k=10, iterations=1, seed=5, initial_mean=target)
    np.testing.assert_array_equal(warm.numpy(), direct.numpy())
    assert np.abs(warm.numpy() - target).mean() < np.abs(cold.numpy() - target).mean()


def test_every_registered_planner_has_a_config_section_and_vice_versa():
    from bayes_planet import planners
    from bayes_planet.agent import config as config_lib

    planner = config_lib.load().planner.to_dict()
    assert sorted(k for k, v in planner.items() if isinstance(v, dict)) == planners.names()
    assert planner["name"] in planners.names()


@pytest.mark.parametrize("name", ["mppi", "", None, "CEM"])
def test_planners_get_with_an_unknown_name_is_a_one_line_error_naming_it(name):
    from bayes_planet import planners

    with pytest.raises(ValueError) as info:
        planners.get(name)
    message = str(info.value)
    assert "\n" not in message and f"name={name!r}" in message and "'cem'" in message


def test_an_unknown_planner_name_in_the_config_is_a_one_line_error():
    from bayes_planet.agent import config as config_lib

    with pytest.raises(config_lib.ConfigError, match=r"Received: planner.name='mppi'$"):
        config_lib.validate(config_lib.load(overrides=["planner.name=mppi"]))
    with pytest.raises(config_lib.ConfigError, match=r"planner.cem.top_k=21$"):
        config_lib.validate(config_lib.load(["debug"], ["planner.cem.top_k=21"]))
