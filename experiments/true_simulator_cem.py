"""PlaNet's "CEM + true simulator" sanity check: MPC with CEM planning in the real MuJoCo physics.

Before trusting a learned world model, check that the planner can solve the task when it plans
with the *true* dynamics and reward (PlaNet, Hafner et al. 2018, Table 1: 850 on
cartpole-swingup). At every decision the objective copies the environment's MuJoCo state
(``physics.get_state``), rolls out each candidate action sequence (``horizon`` decisions, each
repeated ``action_repeat`` times) in a private copy of the same simulator and sums the task's
rewards; :func:`bayes_planet.planners.cross_entropy_method` maximizes it through a
``tf.numpy_function``. The first action of the plan is executed ``action_repeat`` times in the
real environment and the agent replans (model-predictive control)::

    python experiments/true_simulator_cem.py --out runs/true_sim_cem
    python experiments/true_simulator_cem.py --candidates 1000 --top-k 100 --iterations 10 \
        --out runs/true_sim_cem_full                     # PlaNet's full planner budget
    python experiments/true_simulator_cem.py --debug --out /tmp/true_sim   # seconds

Simulators (``--simulator``):

* ``loop`` (any dm_control task): for each candidate, ``set_state`` then the exact
  ``dm_control`` step (``task.before_step``, ``physics.step``, ``task.after_step``,
  ``task.get_reward``) in Python. About 6k env steps/s here; the Python reward dominates.
* ``rollout`` (tasks in ``VECTORIZED_REWARDS``): all candidates stepped by
  ``mujoco.rollout`` (C, one thread per ``--threads``) from the same full physics state, then
  the task's reward evaluated on the whole batch of states with dm_control's own
  ``rewards.tolerance``. Same numbers as ``loop`` (checked in ``tests/scripts/test_true_simulator_cem.py``),
  several times faster. ``auto`` (default) picks ``rollout`` when available.

Writes ``results.json`` (settings, per-episode returns, timings) into ``--out``.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# bayes_planet.envs first: it sets up headless rendering before dm_control and mujoco load.
from bayes_planet.envs import default_action_repeat, resolve_task  # noqa: E402  isort: skip
from bayes_planet.run_dirs import OutputDirError, make_output_dir  # noqa: E402  isort: skip
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from dm_control import suite  # noqa: E402
from dm_control.utils import rewards  # noqa: E402
from mujoco import rollout as mj_rollout  # noqa: E402

FULL_STATE = mujoco.mjtState.mjSTATE_FULLPHYSICS


def load_env(task, seed):
    """``dm_control.suite`` environment for a task name of ``bayes_planet.envs``
    (``'domain-task'``, e.g. ``cartpole-swingup``, or an alias such as ``cup-catch``)."""
    domain, name = resolve_task(task)
    return suite.load(domain, name, task_kwargs={"random": seed})


# ---------------------------------------------------------------- vectorized task rewards
def _cartpole_dense_reward(qpos, qvel, ctrl):
    """``cartpole.Balance._get_reward(sparse=False)`` for arrays of states ``[..., nq]``."""
    upright = (np.cos(np.cumsum(qpos[..., 1:], axis=-1)) + 1) / 2  # xmat 'zz' of each pole.
    centered = (1 + rewards.tolerance(qpos[..., 0], margin=2)) / 2
    small_control = rewards.tolerance(ctrl[..., 0], margin=1, value_at_margin=0,
                                      sigmoid="quadratic")
    small_control = (4 + small_control) / 5
    small_velocity = (1 + rewards.tolerance(qvel[..., 1:], margin=5).min(axis=-1)) / 2
    return upright.mean(axis=-1) * small_control * small_velocity * centered


def _finger_spin_reward(qpos, qvel, ctrl):
    """``finger.Spin.get_reward``: 1 while the spinner's hinge turns at 15 rad/s or faster
    (negative direction; dm_control's ``_SPIN_VELOCITY``); the hinge is the third joint."""
    return (qvel[..., 2] <= -15.0).astype(np.float64)


#: Tasks whose reward is a function of (qpos, qvel, ctrl) evaluated on batches of states.
VECTORIZED_REWARDS = {
    "cartpole-swingup": _cartpole_dense_reward,
    "cartpole-balance": _cartpole_dense_reward,
    "cartpole-two_poles": _cartpole_dense_reward,
    "cartpole-three_poles": _cartpole_dense_reward,
    "finger-spin": _finger_spin_reward,
}


class TrueSimulator:
    """Scores action sequences by rolling them out in a private copy of the task's physics.

    ``returns(state, actions)``: ``state`` is a full physics state
    (``physics.get_state(mjSTATE_FULLPHYSICS)``) of the real environment, ``actions`` is
    ``[N, horizon, action_dim]``; returns ``[N]`` float32 sums of the rewards of the
    ``horizon * action_repeat`` environment steps.
    """

    def __init__(self, task, action_repeat, simulator="auto", threads=2):
        if simulator == "auto":
            simulator = "rollout" if task in VECTORIZED_REWARDS else "loop"
        if simulator == "rollout" and task not in VECTORIZED_REWARDS:
            raise ValueError(f"No vectorized reward for task={task!r}; use simulator='loop'. "
                             f"Available: {sorted(VECTORIZED_REWARDS)}")
        if simulator not in ("rollout", "loop"):
            raise ValueError(f"Expected simulator in ('auto', 'rollout', 'loop'). "
                             f"Received: simulator={simulator!r}")
        self.simulator = simulator
        self.action_repeat = action_repeat
        self.env = load_env(task, seed=0)
        self.env.reset()
        self.physics, self.task = self.env.physics, self.env.task
        self.n_sub_steps = self.env._n_sub_steps  # Physics steps per env step.
        self._reward = VECTORIZED_REWARDS.get(task)
        model = self.physics.model.ptr
        self._datas = [mujoco.MjData(model) for _ in range(max(1, threads))]
        self.env_steps = 0  # Simulated environment steps, for throughput reports.

    def returns(self, state, actions):
        actions = np.asarray(actions, np.float64)
        self.env_steps += actions.shape[0] * actions.shape[1] * self.action_repeat
        if self.simulator == "rollout":
            return self._rollout_returns(state, actions).astype(np.float32)
        return self._loop_returns(state, actions).astype(np.float32)

    def _loop_returns(self, state, actions):
        physics, task = self.physics, self.task
        totals = np.zeros(actions.shape[0])
        for n, sequence in enumerate(actions):
            with physics.reset_context():
                physics.set_state(state, FULL_STATE)
            for action in sequence:
                for _ in range(self.action_repeat):
                    task.before_step(action, physics)
                    physics.step(self.n_sub_steps)
                    task.after_step(physics)
                    totals[n] += task.get_reward(physics)
        return totals

    def _rollout_returns(self, state, actions):
        num, horizon, _ = actions.shape
        repeat = self.action_repeat * self.n_sub_steps
        control = np.repeat(actions, repeat, axis=1)  # [N, horizon * repeat, nu]
        model = self.physics.model.ptr
        states, _ = mj_rollout.rollout(model, self._datas, np.tile(state, (num, 1)), control)
        # Reward after each env step (every n_sub_steps physics steps), as dm_control computes.
        states = states[:, self.n_sub_steps - 1::self.n_sub_steps]
        control = control[:, self.n_sub_steps - 1::self.n_sub_steps]
        nq, nv = model.nq, model.nv
        qpos, qvel = states[..., 1:1 + nq], states[..., 1 + nq:1 + nq + nv]  # [time, qpos, ...]
        return self._reward(qpos, qvel, control).sum(axis=1)


# ---------------------------------------------------------------- MPC episode
def run_episode(task, seed, candidates, top_k, iterations, horizon, action_repeat,
                simulator="auto", threads=2, warm_start=False, max_decisions=None, log=print):
    """One MPC episode in the real environment; returns a dict of its statistics."""
    import tensorflow as tf

    from bayes_planet.planners import cross_entropy_method

    env = load_env(task, seed)
    sim = TrueSimulator(task, action_repeat, simulator, threads)
    spec = env.action_spec()
    low, high = spec.minimum.astype(np.float32), spec.maximum.astype(np.float32)
    action_dim = spec.shape[0]
    env.reset()
    total, decisions, env_steps, plan = 0.0, 0, 0, None
    start, cpu_start = time.perf_counter(), time.process_time()
    done = False
    while not done and (max_decisions is None or decisions < max_decisions):
        state = env.physics.get_state(FULL_STATE)

        def objective(actions, state=state):
            return tf.numpy_function(lambda a: sim.returns(state, a), [actions], tf.float32,
                                     stateful=False)

        initial_mean = None
        if warm_start and plan is not None:  # Shift the last plan by one step.
            initial_mean = np.concatenate([plan[1:], np.zeros_like(plan[:1])], axis=0)
        plan = cross_entropy_method(
            objective, horizon, action_dim, low, high, num_candidates=candidates, top_k=top_k,
            iterations=iterations, seed=tf.constant([seed, decisions], tf.int64),
            initial_mean=initial_mean).numpy()
        for _ in range(action_repeat):
            timestep = env.step(plan[0])
            total += timestep.reward
            env_steps += 1
            if timestep.last():
                done = True
                break
        decisions += 1
        if decisions % 25 == 0:
            log(f"  decision {decisions}: return so far {total:.1f} "
                f"({time.perf_counter() - start:.0f} s)")
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {"return": float(total), "decisions": decisions, "env_steps": env_steps,
            "seconds": seconds, "cpu_seconds": cpu_seconds,
            "seconds_per_decision": seconds / max(decisions, 1),
            "simulated_env_steps": sim.env_steps, "simulator": sim.simulator,
            "complete": done}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="cartpole-swingup")
    parser.add_argument("--candidates", type=int, default=300)
    parser.add_argument("--top-k", type=int, default=None,
                        help="Elite set size (default: candidates // 10, PlaNet's ratio).")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--horizon", type=int, default=12)
    parser.add_argument("--action-repeat", type=int, default=None,
                        help="Env steps per decision (default: PlaNet's for the task, as the "
                             "agent's env.action_repeat: cartpole 8, finger 2, ...).")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--simulator", choices=("auto", "rollout", "loop"), default="auto")
    parser.add_argument("--threads", type=int, default=2, help="mujoco.rollout threads.")
    parser.add_argument("--warm-start", action="store_true",
                        help="Initialize CEM's mean with the previous plan shifted by one.")
    parser.add_argument("--max-decisions", type=int, default=None,
                        help="Stop episodes early (debugging); results are then partial.")
    parser.add_argument("--debug", action="store_true",
                        help="Tiny run: 3 decisions, 20 candidates, 2 iterations, horizon 4.")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.debug:
        args.candidates, args.iterations, args.horizon = 20, 2, 4
        args.max_decisions = args.max_decisions or 3
    if args.top_k is None:
        args.top_k = max(1, args.candidates // 10)
    if args.action_repeat is None:
        try:
            args.action_repeat = default_action_repeat(args.task)
        except ValueError as e:
            parser.error(str(e))
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        out = make_output_dir("--out", args.out)
    except OutputDirError as e:
        raise SystemExit(f"true_simulator_cem.py: error: {e}") from None
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    print(f"true-simulator CEM: {json.dumps(settings)}", flush=True)
    episodes = []
    for episode in range(args.episodes):
        stats = run_episode(
            args.task, args.seed + episode, args.candidates, args.top_k, args.iterations,
            args.horizon, args.action_repeat, args.simulator, args.threads, args.warm_start,
            args.max_decisions, log=lambda msg: print(msg, flush=True))
        episodes.append(stats)
        print(f"episode {episode} (seed {args.seed + episode}): return {stats['return']:.1f} "
              f"in {stats['seconds']:.0f} s wall, {stats['cpu_seconds']:.0f} s CPU "
              f"({stats['seconds_per_decision']:.2f} s/decision, "
              f"{stats['simulated_env_steps'] / stats['seconds']:.0f} simulated env steps/s)",
              flush=True)
    returns = [e["return"] for e in episodes]
    results = {"settings": settings, "episodes": episodes, "returns": returns,
               "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
               "command": " ".join(["python", "experiments/true_simulator_cem.py",
                                    *(sys.argv[1:] if argv is None else argv)])}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"mean return {results['mean_return']:.1f} over {len(returns)} episode(s); "
          f"wrote {out / 'results.json'}", flush=True)
    return results


if __name__ == "__main__":
    main()
