"""Sampling-based planners over open-loop action sequences: CEM and random shooting.

Both planners maximize a black-box ``objective_fn`` that scores a batch of candidate action
sequences in **one** call::

    scores = objective_fn(actions)  # actions [*batch_shape, N, horizon, action_dim]
                                    # scores  [*batch_shape, N], higher is better

They are pure TensorFlow functions with static shapes: they run eagerly, inside ``tf.function``
and under XLA (``jit_compile=True``), and are reproducible given ``seed`` (stateless sampling).
A batch dimension may also be known only when the graph runs (``batch_shape=(tf.shape(x)[0],)``
in a ``tf.function`` over ``[None, ...]`` inputs, e.g. TF-Agents' ``PolicySaver``): the plan is
then the same as at that static batch size.
"""

import numbers

import numpy as np
import tensorflow as tf

from bayes_planet.planners.registry import register
from bayes_planet.seeds import stateless_seed

__all__ = ["cross_entropy_method", "plan_cem", "random_shooting"]


def cross_entropy_method(
    objective_fn,
    horizon,
    action_dim,
    action_low,
    action_high,
    num_candidates=1000,
    top_k=100,
    iterations=10,
    seed=None,
    initial_mean=None,
    initial_stddev=None,
    batch_shape=(),
    dtype=tf.float32,
    proposals=None,
    return_stddev=False,
):
    """Plans an action sequence with the cross-entropy method (CEM).

    CEM (Rubinstein, 1997, "Optimization of computer simulation models with rare events";
    as used for planning in PlaNet, Hafner et al., 2018, "Learning Latent Dynamics for
    Planning from Pixels", Alg. 2) keeps a diagonal Gaussian belief over action sequences
    ``q = N(mean, diag(stddev**2))`` of shape ``[horizon, action_dim]`` and repeats
    ``iterations`` times:

    1. draw ``num_candidates`` sequences from ``q`` and clip them to
       ``[action_low, action_high]``;
    2. score all of them with one call of ``objective_fn``;
    3. refit ``mean`` and ``stddev`` (per time step and action dimension) to the ``top_k``
       highest-scoring candidates.

    The final ``mean`` is returned; an MPC agent executes its first action and replans.
    ``q`` starts at ``initial_mean`` (default: the middle of the box, 0 for ``[-1, 1]``) and
    ``initial_stddev`` (default: half the box width, 1 for ``[-1, 1]``), PlaNet's choice.
    Warm-starting is done by passing the previous plan shifted by one step as
    ``initial_mean``. ``proposals`` (e.g. rollouts of a learned policy, TD-MPC's policy
    prior, Hansen et al., 2022) join the sampled candidates in every iteration, so the elite
    set can hold them. NaN scores are treated as ``-inf``.

    Args:
        objective_fn: Callable ``actions -> scores``; ``actions`` is ``[*batch_shape,
            num_candidates, horizon, action_dim]`` of ``dtype``, ``scores`` is
            ``[*batch_shape, num_candidates]`` (to be maximized).
        horizon: Positive int, planning horizon (PlaNet: 12).
        action_dim: Positive int, size of one action.
        action_low: Lower bound, a scalar or ``[action_dim]`` (python, numpy or tensor).
        action_high: Upper bound, same shape rules; must exceed ``action_low`` elementwise.
        num_candidates: Positive int, sequences sampled per iteration (PlaNet: 1000).
        top_k: Positive int ``<= num_candidates``, elite set size (PlaNet: 100).
        iterations: Positive int, refitting rounds (PlaNet: 10).
        seed: ``None`` (fresh randomness on every call), a non-negative int, or a shape-``[2]``
            int32/int64 tensor (stateless seed). The same seed gives the same plan.
        initial_mean: Optional, broadcastable to ``[*batch_shape, horizon, action_dim]``.
        initial_stddev: Optional, broadcastable to ``[*batch_shape, horizon, action_dim]``.
        batch_shape: Tuple of positive ints; independent planning problems solved at once. An
            entry may be a scalar integer tensor instead (a size known only when the graph
            runs, e.g. ``tf.shape(x)[0]``); the plan is the same as at that static size.
        dtype: Floating dtype of the actions.
        proposals: Optional ``[*batch_shape, M, horizon, action_dim]`` extra candidates
            (clipped to the bounds), scored with the sampled ones in every iteration;
            ``top_k <= num_candidates`` still holds.
        return_stddev: Also return the final ``stddev`` (of the last elite set): how far the
            search was from settling, wide where the scores do not tell candidates apart
            (TD-MPC draws its exploratory action from it, Hansen et al., 2022).

    Returns:
        The planned action sequence (the final mean), ``[*batch_shape, horizon, action_dim]``,
        within the bounds; with ``return_stddev``, the pair ``(mean, stddev)`` of that shape.

    Raises:
        ValueError: For a non-positive size, ``top_k > num_candidates``, bounds with
            ``action_low >= action_high``, a bad seed or ``batch_shape``, or scores of the
            wrong shape.
    """
    horizon = _check_positive_int("horizon", horizon)
    action_dim = _check_positive_int("action_dim", action_dim)
    num_candidates = _check_positive_int("num_candidates", num_candidates)
    top_k = _check_positive_int("top_k", top_k)
    iterations = _check_positive_int("iterations", iterations)
    if top_k > num_candidates:
        raise ValueError(f"Expected top_k <= num_candidates={num_candidates}. "
                         f"Received: top_k={top_k}")
    batch_shape, static_batch = _check_batch_shape(batch_shape)
    dtype = _check_dtype(dtype)
    low, high = _check_bounds(action_low, action_high, action_dim, dtype)
    seeds = tf.random.experimental.stateless_split(stateless_seed(seed), iterations)

    event_shape = (*batch_shape, horizon, action_dim)
    mean = (low + high) / 2 if initial_mean is None else tf.cast(initial_mean, dtype)
    stddev = (high - low) / 2 if initial_stddev is None else tf.cast(initial_stddev, dtype)
    mean = tf.broadcast_to(mean, event_shape)
    stddev = tf.broadcast_to(stddev, event_shape)
    candidate_shape = (*batch_shape, num_candidates, horizon, action_dim)
    axis = len(batch_shape)  # The candidate axis.
    extra = _check_proposals(proposals, static_batch, horizon, action_dim, dtype, low, high)
    scored_shape = (*static_batch, num_candidates + (0 if extra is None else extra.shape[axis]))

    def body(i, mean, stddev):
        noise = tf.random.stateless_normal(candidate_shape, seeds[i], dtype=dtype)
        actions = tf.expand_dims(mean, axis) + tf.expand_dims(stddev, axis) * noise
        actions = tf.clip_by_value(actions, low, high)
        if extra is not None:
            actions = tf.concat([actions, extra], axis)
        scores = _score(objective_fn, actions, scored_shape)
        _, elite = tf.math.top_k(scores, k=top_k, sorted=False)
        elite_actions = tf.gather(actions, elite, axis=axis, batch_dims=axis)
        mean, variance = tf.nn.moments(elite_actions, axes=[axis])
        return i + 1, mean, tf.sqrt(variance)

    _, mean, stddev = tf.while_loop(
        lambda i, *_: i < iterations,
        body,
        (tf.constant(0), mean, stddev),
        maximum_iterations=iterations,
    )
    return (mean, stddev) if return_stddev else mean


@register("cem")
def plan_cem(objective_fn, settings, horizon, action_dim, action_low, action_high, seed,
             batch_shape=(), proposals=None, initial_mean=None, return_spread=False):
    """The agent's ``cem`` planner: `cross_entropy_method` with the ``planner.cem`` settings
    (``candidates``, ``top_k``, ``iterations``); its spread is the final stddev; see
    `bayes_planet.planners.registry`."""
    return cross_entropy_method(
        objective_fn, horizon=horizon, action_dim=action_dim, action_low=action_low,
        action_high=action_high, num_candidates=settings["candidates"],
        top_k=settings["top_k"], iterations=settings["iterations"], seed=seed,
        batch_shape=batch_shape, proposals=proposals, initial_mean=initial_mean,
        return_stddev=return_spread)


def random_shooting(
    objective_fn,
    horizon,
    action_dim,
    action_low,
    action_high,
    num_candidates=1000,
    seed=None,
    batch_shape=(),
    dtype=tf.float32,
):
    """Returns the best of ``num_candidates`` action sequences drawn uniformly in the box.

    The random-shooting baseline of model-predictive control (e.g. Nagabandi et al., 2018):
    no refitting, one call of ``objective_fn``. Arguments, seeding and shapes are as in
    `cross_entropy_method`; the result is ``[*batch_shape, horizon, action_dim]``.
    """
    horizon = _check_positive_int("horizon", horizon)
    action_dim = _check_positive_int("action_dim", action_dim)
    num_candidates = _check_positive_int("num_candidates", num_candidates)
    batch_shape, static_batch = _check_batch_shape(batch_shape)
    dtype = _check_dtype(dtype)
    low, high = _check_bounds(action_low, action_high, action_dim, dtype)
    candidate_shape = (*batch_shape, num_candidates, horizon, action_dim)
    axis = len(batch_shape)
    uniform = tf.random.stateless_uniform(candidate_shape, stateless_seed(seed), dtype=dtype)
    actions = low + (high - low) * uniform
    scores = _score(objective_fn, actions, (*static_batch, num_candidates))
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    return tf.gather(actions, best, axis=axis, batch_dims=axis)


# ---------------------------------------------------------------- helpers
def _score(objective_fn, actions, expected_shape):
    scores = tf.convert_to_tensor(objective_fn(actions))
    if not scores.shape.is_compatible_with(expected_shape):
        raise ValueError(f"Expected objective_fn to return scores of shape {list(expected_shape)}"
                         f". Received: scores.shape={scores.shape}")
    scores = tf.ensure_shape(scores, expected_shape)
    if scores.dtype.is_floating:
        scores = tf.where(tf.math.is_nan(scores), tf.constant(-np.inf, scores.dtype), scores)
    return scores


def _check_proposals(proposals, batch_shape, horizon, action_dim, dtype, low, high):
    """``proposals`` as a clipped tensor of a static ``[*batch_shape, M, horizon, action_dim]``
    shape (M >= 1), or None."""
    if proposals is None:
        return None
    proposals = tf.convert_to_tensor(proposals, dtype)
    shape = proposals.shape
    if (shape.rank != len(batch_shape) + 3 or not shape[:len(batch_shape)].is_compatible_with(
            batch_shape) or shape[-2:] != (horizon, action_dim)
            or shape[len(batch_shape)] in (None, 0)):
        raise ValueError(f"Expected proposals of shape [{', '.join(map(str, batch_shape))}"
                         f"{', ' if batch_shape else ''}M, {horizon}, {action_dim}] with a static "
                         f"M >= 1. Received: proposals with shape {shape}")
    return tf.clip_by_value(proposals, low, high)


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"Expected a positive integer. Received: {name}={value!r}")
    return int(value)


def _check_batch_shape(batch_shape):
    """``(dims, static)``: ``dims`` the sizes as python ints, or scalar int32 tensors where a
    size is known only when the graph runs; ``static`` the same with None for those."""
    if isinstance(batch_shape, tf.TensorShape):
        batch_shape = batch_shape.as_list() if batch_shape.rank is not None else None
    try:
        dims = tuple(batch_shape)
    except TypeError:
        dims = None
    if dims is not None:
        dims = tuple(_check_batch_dim(d) for d in dims)
    if dims is None or any(d is None for d in dims):
        raise ValueError("Expected batch_shape to be a tuple of positive integers or scalar "
                         f"integer tensors. Received: batch_shape={batch_shape!r}")
    return dims, tuple(d if isinstance(d, int) else None for d in dims)


def _check_batch_dim(dim):
    """One ``batch_shape`` entry: a positive int (a tensor's static value counts as one), a
    scalar integer tensor of a size known only when the graph runs (as int32), or None for
    anything else."""
    if isinstance(dim, np.ndarray):
        if dim.ndim != 0:
            return None
        dim = dim.item()
    elif tf.is_tensor(dim):
        if not dim.dtype.is_integer or dim.shape.rank != 0:
            return None
        static = tf.get_static_value(dim)
        if static is None:
            return tf.cast(dim, tf.int32)
        dim = static.item()
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
        return None
    return int(dim)


def _check_dtype(dtype):
    dtype = tf.as_dtype(dtype)
    if not dtype.is_floating:
        raise ValueError(f"Expected a floating dtype. Received: dtype={dtype!r}")
    return dtype


def _check_bounds(action_low, action_high, action_dim, dtype):
    """Bounds as ``[action_dim]`` tensors; statically known bounds are checked eagerly."""
    bounds = []
    for name, value in (("action_low", action_low), ("action_high", action_high)):
        tensor = tf.cast(value, dtype)
        if tensor.shape.rank is None or tensor.shape.rank > 1 or not (
                tensor.shape.rank == 0 or tensor.shape[0] in (1, action_dim, None)):
            raise ValueError(f"Expected {name} to be a scalar or of shape [{action_dim}]. "
                             f"Received: {name} with shape {tensor.shape}")
        bounds.append(tf.broadcast_to(tensor, [action_dim]))
    low, high = bounds
    static_low, static_high = tf.get_static_value(low), tf.get_static_value(high)
    if static_low is not None and static_high is not None:
        if not np.all(np.isfinite(static_low)) or not np.all(np.isfinite(static_high)):
            raise ValueError("Expected finite action bounds. Received: "
                             f"action_low={action_low!r}, action_high={action_high!r}")
        if not np.all(static_low < static_high):
            raise ValueError("Expected action_low < action_high elementwise. Received: "
                             f"action_low={action_low!r}, action_high={action_high!r}")
    return low, high
