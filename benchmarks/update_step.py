"""Where an update's wall-clock goes: the world model's step and the value model's step, per
agent config, with and without XLA (``jit_compile``).

    python -m benchmarks.update_step --variants state:task=walker-walk [--xla] [--rounds 3]

Each variant (`benchmarks.agent_episode.parse_variant`: presets, then ``:key=value``
overrides) gets a `Trainer` with its seed episodes (`agent_episode.build_trainer`); one
replay batch of ``train.batch_size x train.chunk_length`` is drawn and every round times
``--steps`` world-model steps (`WorldModel.train_step`, returning its posterior) and as many
value steps (`ValueModel.train_step` on that posterior), alternating the variants round by
round (A B A B: the machine is shared). ``--xla`` adds each variant's twin whose two steps are
the same functions compiled with XLA (`tf.function(..., jit_compile=True)` of their Python
functions; its first call, which compiles, is untimed). Prints JSON: per variant the median
seconds per step of each part, their sum, each part's share, the sum relative to the first
variant, and the load average before and after.
"""

import argparse
import json
import os
import statistics
import tempfile
import time

from benchmarks.agent_episode import build_trainer


def _steps(trainer, xla):
    """``(world_step, value_step)``: callables of the update index, on one replay batch."""
    import tensorflow as tf

    from bayes_planet import seeds
    from bayes_planet.agent.world_model import as_batch

    agent = trainer.agent
    train, seed = agent.config.train, agent.config.seed
    if agent.value is None:
        raise ValueError(f"Expected a variant with value.enabled. Received: "
                         f"value.enabled={agent.config.value.enabled}")
    if agent.model.needs_observation_stats():
        trainer.train(1)  # One update sets `model.normalize_obs`'s statistics, as in a run.
    chunk = agent.replay.sample(train.batch_size, train.chunk_length,
                                seeds.numpy_rng(seed, "replay", 0))
    batch = as_batch(chunk, "obs")
    transitions = agent.replay.transitions()
    world, value = agent.model.train_step, agent.value.train_step
    if xla:
        world = tf.function(world.python_function, jit_compile=True)
        value = tf.function(value.python_function, jit_compile=True)
    posterior = {}

    def world_step(u):
        metrics, post = world(batch, seeds.tf_seed(seed, "train_step", u), transitions,
                              return_posterior=True)
        posterior.update(post)
        return metrics["loss"]

    def value_step(u):
        return value(posterior, seeds.tf_seed(seed, "value_step", u), batch["reward"])[
            "critic_loss"]

    return world_step, value_step


def _time(step, first, count):
    start = time.perf_counter()
    for u in range(first, first + count):
        out = step(u)
    float(out)
    return (time.perf_counter() - start) / count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["state"])
    parser.add_argument("--xla", action="store_true", help="also each variant under XLA")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="steps per part and round")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {v: build_trainer(v, os.path.join(tmp, f"variant{i}"))
                    for i, v in enumerate(args.variants)}
        steps = {}
        for v, trainer in trainers.items():
            for xla in (False, True) if args.xla else (False,):
                steps[v + (" (XLA)" if xla else "")] = _steps(trainer, xla)
        for world_step, value_step in steps.values():  # Trace (and compile) once, untimed.
            _time(world_step, 0, 1), _time(value_step, 0, 1)
        samples = {name: {"world": [], "value": []} for name in steps}
        for r in range(args.rounds):
            for name, (world_step, value_step) in steps.items():
                first = 1 + r * args.steps
                samples[name]["world"].append(_time(world_step, first, args.steps))
                samples[name]["value"].append(_time(value_step, first, args.steps))
        for trainer in trainers.values():
            trainer.agent.close()
    result = {"load_average_before": load_before, "load_average_after": os.getloadavg(),
              "rounds": args.rounds, "steps": args.steps, "variants": {}}
    reference = None
    for name, parts in samples.items():
        med = {part: statistics.median(times) for part, times in parts.items()}
        total = med["world"] + med["value"]
        reference = reference or total
        result["variants"][name] = {
            "world_s": round(med["world"], 6), "value_s": round(med["value"], 6),
            "update_s": round(total, 6), "value_share": round(med["value"] / total, 3),
            "relative_to_first": round(total / reference, 3)}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
