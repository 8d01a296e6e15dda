"""Planning speed: planned actions per second of the CEM `PlannerPolicy`, and the
planner's achieved GFLOP/s ÷ a plain 1024² matmul's GFLOP/s in the same run.

    python -m benchmarks.planning [--presets cpu,paper] [--weight-samples 1]

One "action" is a full CEM plan (iterations × candidates × horizon latent steps
and reward predictions) plus the posterior update, i.e. one `policy.action` call.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tf_agents.environments import tf_py_environment  # noqa: E402

from bayes_planet import envs  # noqa: E402
from bayes_planet.agent import config as config_lib  # noqa: E402
from bayes_planet.agent.policy import PlannerPolicy  # noqa: E402
from bayes_planet.agent.world_model import WorldModel  # noqa: E402
from bayes_planet.envs.tf_agents_env import TFAgentsEnv  # noqa: E402
from benchmarks.flops import plan_flops  # noqa: E402
from benchmarks.world_model_step import matmul_gflops  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="cpu,paper")
    parser.add_argument("--estimators", default="deterministic,reparameterization")
    parser.add_argument("--weight-samples", type=int, default=1)
    parser.add_argument("--actions", type=int, default=5)
    args = parser.parse_args()
    env = envs.make("cartpole-swingup", obs_type="state", seed=0)
    tf_env = tf_py_environment.TFPyEnvironment(TFAgentsEnv(env))
    print("| preset | estimator | K | candidates×iters×horizon | actions/s | s/action | GFLOP/s "
          "| ÷ matmul GFLOP/s |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for preset in args.presets.split(","):
        for estimator in args.estimators.split(","):
            config = config_lib.load([preset, "state"], [
                f"model.estimator={estimator}", f"planner.weight_samples={args.weight_samples}"])
            model = WorldModel(config, env.observation_spec()["state"].shape, 1)
            policy = PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model,
                                   config.planner)
            act = tf.function(lambda ts, st, s, policy=policy: policy.action(ts, st, seed=s))
            time_step, state = tf_env.reset(), policy.get_initial_state(1)
            act(time_step, state, tf.constant([0, 0])).action.numpy()
            mm = matmul_gflops()
            start = time.perf_counter()
            for i in range(args.actions):
                step = act(time_step, state, tf.constant([0, i + 1]))
                state = step.state
            step.action.numpy()
            seconds = (time.perf_counter() - start) / args.actions
            mm = np.mean([mm, matmul_gflops()])
            rate = plan_flops(model, config.planner) / seconds / 1e9
            p = config.planner
            print(f"| {preset} | {estimator} | {p.weight_samples} | "
                  f"{p.cem.candidates}×{p.cem.iterations}×{p.horizon} | {1 / seconds:.2f} | "
                  f"{seconds:.2f} | {rate:.1f} | {rate / mm:.2f} |", flush=True)
    env.close()


if __name__ == "__main__":
    main()
