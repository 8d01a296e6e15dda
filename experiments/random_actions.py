"""How often action noise alone finds a task's reward: returns of random actions per task.

An agent that has never seen a reward plans on a flat objective and collects whatever its
exploration noise does; whether that finds the reward is a property of the task and of the
noise's width, measurable without any model. Each decision draws ``a ~ clip(N(0, s²), -1, 1)``
per action dimension, independently, for each ``s`` of ``--stds`` (held for the task's
action repeat, as the agent's actions are): ``0.3`` is PlaNet's collection noise around a
plan that has nothing to go on, ``inf`` the limit of random signs (bang-bang), ``uniform``
U(-1, 1), the agent's seed episodes. Run::

    python experiments/random_actions.py          # PlaNet's six tasks and two sparse ones
    python experiments/random_actions.py --tasks finger-spin --episodes 50 --out /tmp/ra

Prints a Markdown table (per task and noise: mean return ± std over episodes, the largest,
and the fraction of episodes with any reward) and writes it with every episode's return to
``<out>/random_actions.json``. Episode ``i`` of a task starts from the stream
``random_actions_env(task, i)`` and draws its actions from ``random_actions_policy(task,
noise, i)`` of ``--seed``: every noise meets the same initial states.
"""

import argparse
import json
import math

import numpy as np

from bayes_planet import envs, seeds
from bayes_planet.run_dirs import OutputDirError, check_output_dir

#: PlaNet's six (the tasks grid's), by their canonical names, and issue #26's two sparse ones.
TASKS = tuple("-".join(envs.resolve_task(t)) for t in envs.PLANET_TASKS) + (
    "cartpole-swingup_sparse", "pendulum-swingup")
NOISES = ("0.3", "0.5", "1", "2", "inf", "uniform")


def noise_name(text):
    """A ``--stds`` entry: a positive std, ``inf`` or ``uniform`` (its canonical name)."""
    if text == "uniform":
        return text
    try:
        std = float(text)
    except ValueError:
        std = math.nan
    if not std > 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive std, inf or uniform. Received: --stds {text}")
    return "inf" if math.isinf(std) else f"{std:g}"


def draw(rng, noise, shape):
    """One action in [-1, 1]^shape of the noise ``noise`` (see the module's docstring)."""
    if noise == "uniform":
        return rng.uniform(-1.0, 1.0, shape)
    if noise == "inf":
        return rng.choice([-1.0, 1.0], shape)
    return np.clip(rng.normal(0.0, float(noise), shape), -1.0, 1.0)


def episode_return(env, noise, rng):
    """The return of one episode of ``env`` (already reset) under the noise ``noise``."""
    shape, total, done = env.action_spec().shape, 0.0, False
    while not done:
        _, reward, done, _ = env.step(draw(rng, noise, shape).astype(np.float32))
        total += reward
    return total


def measure(task, noises, episodes, seed):
    """``{noise: [return of episode i]}`` for ``task``."""
    env = envs.make(task, obs_type="state")
    index = seeds.name_index(task)
    returns = {}
    for noise in noises:
        returns[noise] = []
        for i in range(episodes):
            env.seed(seeds.int_seed(seed, "random_actions_env", index, i))
            env.reset()
            rng = seeds.numpy_rng(seed, "random_actions_policy", index,
                                  seeds.name_index(noise), i)
            returns[noise].append(episode_return(env, noise, rng))
    env.close()
    return returns


def table(results):
    """The Markdown table of ``{task: {noise: returns}}``."""
    lines = ["| task | noise | return, mean ± std | largest | episodes with reward |",
             "|---|---|---|---|---|"]
    for task, by_noise in results.items():
        for noise, returns in by_noise.items():
            r = np.asarray(returns)
            label = noise if noise in ("uniform", "inf") else f"N(0, {noise}²)"
            lines.append(f"| {task} | {label} | {r.mean():.1f} ± {r.std():.1f} | {r.max():.0f} "
                         f"| {np.mean(r > 0):.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--stds", nargs="+", type=noise_name, default=list(NOISES),
                        help="clipped normal stds, inf (random signs) or uniform")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="experiments/archive/random_actions")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"expected a positive integer. Received: --episodes {args.episodes}")
    if args.seed < 0:
        parser.error(f"expected a non-negative integer. Received: --seed {args.seed}")
    try:  # Checked before any episode runs, as an unknown task is.
        out = check_output_dir("--out", args.out)
    except OutputDirError as e:
        parser.error(str(e))
    for task in args.tasks:  # An unknown task fails before any episode runs.
        try:
            envs.resolve_task(task)
        except ValueError:
            parser.error(f"unknown task. Received: --tasks {task} "
                         "(the known ones: bayes_planet.envs.known_tasks())")
    results = {task: measure(task, args.stds, args.episodes, args.seed) for task in args.tasks}
    text = table(results)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "random_actions.json").write_text(json.dumps(
        {"episodes": args.episodes, "seed": args.seed, "returns": results, "table": text},
        indent=1))
    return results


if __name__ == "__main__":
    main()
