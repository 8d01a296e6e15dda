"""The cross-entropy method and random shooting (`bayes_planet.planners.cem`): optimum,
bounds, seeds, batch shapes, initial and final spread, XLA, NaN scores, bad arguments."""

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.planners import cross_entropy_method, random_shooting
from tests.planners._problems import A, H, quadratic, targets


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
