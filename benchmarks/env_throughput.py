"""Environment throughput: physics steps/s, rendered frames/s and agent steps/s per face.

Run::

    python benchmarks/env_throughput.py                  # cartpole-swingup and cheetah-run
    python benchmarks/env_throughput.py --tasks walker-walk --rounds 3

For each task it measures

* physics steps/s: raw MuJoCo steps (``physics.step()``), no observations;
* frames/s: 64x64 renders through ``DMCEnv.render`` with the fast settings (no shadows, no
  multisampling, 64x64 offscreen buffer) and with the model's default quality;
* agent steps/s (one agent step = ``action_repeat`` control steps, plus a render in pixel mode)
  through each face: the plain ``DMCEnv``, ``GymnasiumEnv``, TF-Agents ``PyEnvironment``
  (``TFAgentsEnv``) and, for reference, ``TFPyEnvironment`` (eager TensorFlow). The overhead
  column is ``1 - face / plain``; the target is under 10 % for the gymnasium and TF-Agents faces.

Each number is the best of ``--rounds`` interleaved rounds (face order rotated every round), which
filters out noise from other processes on the machine; rounds are at most one episode long.
Prints a Markdown table.
"""

import argparse
import time

import numpy as np

from bayes_planet import envs
from bayes_planet.envs import rendering


def _rate(count, seconds):
    return count / seconds if seconds > 0 else float("inf")


def physics_steps_per_second(task, steps, rounds):
    """Returns raw MuJoCo ``physics.step()`` calls per second for ``task`` (best round)."""
    env = envs.make(task, obs_type="state")
    env.reset()
    physics = env.physics
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            physics.step()
        best = max(best, _rate(steps, time.perf_counter() - start))
    env.close()
    return best


def frames_per_second(task, frames, rounds, fast_render):
    """Returns ``DMCEnv.render()`` calls per second at 64x64 (best round)."""
    env = envs.make(task, obs_type="state", fast_render=fast_render)
    env.reset()
    env.render()  # Creates the GL context outside the timing.
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(frames):
            env.render()
        best = max(best, _rate(frames, time.perf_counter() - start))
    env.close()
    return best


class _Faces:
    """One plain environment and its faces, each with a ``run(actions) -> seconds`` method."""

    def __init__(self, task, obs_type, with_tf):
        from bayes_planet.envs.tf_agents_env import TFAgentsEnv

        self.plain = envs.make(task, obs_type=obs_type, seed=0)
        self.gym = envs.GymnasiumEnv(self.plain)
        self.tf_agents = TFAgentsEnv(self.plain)
        self.tf_env = None
        if with_tf:
            from tf_agents.environments import tf_py_environment

            self.tf_env = tf_py_environment.TFPyEnvironment(self.tf_agents)

    def names(self):
        names = ["plain", "gymnasium", "tf-agents py"]
        return names + (["tf-agents TFPyEnvironment"] if self.tf_env is not None else [])

    def run(self, name, actions):
        """Steps ``len(actions)`` agent steps through face ``name``; returns elapsed seconds."""
        if name == "plain":
            self.plain.reset()
            step = self.plain.step
        elif name == "gymnasium":
            self.gym.reset()
            step = self.gym.step
        elif name == "tf-agents py":
            self.tf_agents.reset()
            step = self.tf_agents.step
        else:
            import tensorflow as tf

            self.tf_env.reset()
            actions = [tf.constant(action[None]) for action in actions]
            step = self.tf_env.step
        start = time.perf_counter()
        for action in actions:
            step(action)
        return time.perf_counter() - start

    def close(self):
        self.plain.close()


def agent_steps_per_second(task, obs_type, steps, rounds, with_tf):
    """Returns ``{face: best agent steps/s}`` over ``rounds`` interleaved rounds."""
    faces = _Faces(task, obs_type, with_tf)
    spec = faces.plain.action_spec()
    steps = min(steps, faces.plain.max_steps)
    rng = np.random.default_rng(0)
    actions = rng.uniform(spec.minimum, spec.maximum, (steps,) + spec.shape).astype(np.float32)
    names = faces.names()
    best = {name: 0.0 for name in names}
    for name in names:  # Warm-up: GL contexts, TF tracing.
        faces.run(name, actions[:2])
    for round_index in range(rounds):
        # Rotate the order each round so no face is always measured right after another.
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            best[name] = max(best[name], _rate(steps, faces.run(name, actions)))
    faces.close()
    return best


def main(argv=None):
    """Runs the benchmark and prints a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["cartpole-swingup", "cheetah-run"])
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds (best kept)")
    parser.add_argument("--steps", type=int, default=250, help="agent steps per round, state")
    parser.add_argument("--pixel-steps", type=int, default=60, help="agent steps per round, pixels")
    parser.add_argument("--no-tf", action="store_true", help="skip TFPyEnvironment")
    args = parser.parse_args(argv)
    for name in ("rounds", "steps", "pixel_steps"):
        if getattr(args, name) <= 0:
            parser.error(f"Expected a positive integer. Received: --{name.replace('_', '-')}")

    print(f"MUJOCO_GL={rendering.selected_backend()}\n")
    task_rows, face_rows = [], []
    for task in args.tasks:
        env = envs.make(task, obs_type="state")
        repeat = env.action_repeat
        env.close()
        physics = physics_steps_per_second(task, 5000, args.rounds)
        fast = frames_per_second(task, 50, args.rounds, fast_render=True)
        slow = frames_per_second(task, 10, 3, fast_render=False)
        task_rows.append((task, repeat, physics, fast, slow))
        for obs_type, steps in (("state", args.steps), ("pixels", args.pixel_steps)):
            rates = agent_steps_per_second(task, obs_type, steps, args.rounds, not args.no_tf)
            for face, rate in rates.items():
                face_rows.append((task, obs_type, face, rate, 1.0 - rate / rates["plain"]))

    print("| task | action repeat | physics steps/s | 64x64 frames/s (fast) | (default quality) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for task, repeat, physics, fast, slow in task_rows:
        print(f"| {task} | {repeat} | {physics:,.0f} | {fast:,.0f} | {slow:,.0f} |")
    print("\n| task | obs | face | agent steps/s | overhead vs plain |")
    print("| --- | --- | --- | ---: | ---: |")
    for task, obs_type, face, rate, overhead in face_rows:
        shown = "—" if face == "plain" else f"{100 * overhead:.1f} %"
        print(f"| {task} | {obs_type} | {face} | {rate:,.0f} | {shown} |")


if __name__ == "__main__":
    main()
