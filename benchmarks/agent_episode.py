"""Where an agent episode's wall-clock goes, per phase, for several agent configs.

    python -m benchmarks.agent_episode [--variants cpu cpu,value] [--rounds 2]
    python -m benchmarks.agent_episode --variants \
        cpu,value:train.updates_per_episode=200 \
        cpu,value:train.updates_per_episode=200:model.estimator=rank1

For each variant (comma-separated presets of ``bayes_planet/agent/configs.yaml``, then optional
``:key=value`` overrides as ``bayes-planet train --set`` takes them) a `Trainer` is
built in a temporary run directory and its seed episodes are collected; then, alternating the
variants round by round (A B A B: the machine is shared), one episode's phases are timed:

* ``train``: the training phase, ``train.updates_per_episode`` updates (`Trainer.train`: world
  model step, and the value model's step when ``value.enabled``);
* ``collect``: one collection episode with the planner (exploration noise on);
* ``eval``: one evaluation (``eval.episodes`` episodes, no noise, no video).

Prints JSON: per variant and phase the median seconds, the episode total, episodes per hour on
this machine (train + collect, plus an evaluation every ``eval.every`` episodes) and each variant's
total relative to the first one; the load average before and after.
"""

import argparse
import json
import os
import statistics
import tempfile
import time


def parse_variant(spec):
    """``'cpu,value:a.b=1:c=2'`` -> ``(['cpu', 'value'], ['a.b=1', 'c=2'])``."""
    presets, *overrides = spec.split(":")
    if not presets or not all(overrides):
        raise ValueError("Expected a variant 'preset[,preset...][:key=value...]'. "
                         f"Received: variant={spec!r}")
    return presets.split(","), overrides


def build_trainer(spec, logdir):
    """A `Trainer` of the variant ``spec`` (`parse_variant`; videos off) in ``logdir``, with
    its seed episodes collected into the replay (random actions)."""
    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.training import Trainer

    presets, overrides = parse_variant(spec)
    config = config_lib.load(presets, ["eval.video=false", *overrides])
    trainer = Trainer(config, logdir)
    agent = trainer.agent
    for k in range(config.train.seed_episodes):  # Random seed episodes into the replay.
        episode, _ = agent.collector.collect(agent.collector.policy("random", k), "env_reset", k)
        agent.replay.add(episode)
    return trainer


def _time_phases(trainer, round_index):
    agent, config = trainer.agent, trainer.agent.config
    k = agent.replay.num_episodes
    agent.begin_episode(k)
    times = {}
    start = time.perf_counter()
    trainer.train(config.train.updates_per_episode)
    times["train"] = time.perf_counter() - start
    start = time.perf_counter()
    agent.collector.collect(agent.collector.policy("collect", k), "env_reset", k)
    times["collect"] = time.perf_counter() - start
    start = time.perf_counter()
    trainer.evaluate(1000 + round_index)
    times["eval"] = time.perf_counter() - start
    return times


def episode_seconds(phases, config):
    """Seconds per training episode: ``train + collect + eval / eval.every`` (``eval`` times
    a whole evaluation, its ``eval.episodes`` episodes)."""
    return phases["train"] + phases["collect"] + phases["eval"] / config.eval.every


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["cpu", "cpu,value"])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {v: build_trainer(v, os.path.join(tmp, f"variant{i}"))
                    for i, v in enumerate(args.variants)}
        for trainer in trainers.values():  # Trace every function once, untimed.
            _time_phases(trainer, -1)
        samples = {v: [] for v in args.variants}
        for r in range(args.rounds):
            for v, trainer in trainers.items():
                samples[v].append(_time_phases(trainer, r))
        for trainer in trainers.values():
            trainer.agent.close()
    result = {"load_average_before": load_before, "load_average_after": os.getloadavg(),
              "rounds": args.rounds, "variants": {}}
    first = None
    for v, rows in samples.items():
        cfg = trainers[v].agent.config
        med = {phase: statistics.median(r[phase] for r in rows) for phase in rows[0]}
        per_episode = episode_seconds(med, cfg)
        first = first or per_episode
        result["variants"][v] = {"updates_per_episode": cfg.train.updates_per_episode,
                                 "estimator": cfg.model.estimator,
                                 **{f"{p}_s": round(t, 3) for p, t in med.items()},
                                 "episode_s": round(per_episode, 3),
                                 "episodes_per_hour": round(3600 / per_episode, 1),
                                 "relative_to_first": round(per_episode / first, 3)}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
