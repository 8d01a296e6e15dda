"""Cost of the run guarantees (issue #18) in the ``cpu`` preset's training loop.

    python -m benchmarks.run_overhead [--rounds 3] [--updates 100]

Per episode the loop pays for the guarantees in its training phase (``train.updates_per_episode``
updates, a fresh named stream per update for the replay chunks and one for the step's noise, a
non-finite check of every step) and in the commit (finiteness check of all weights, checkpoint
written to a temp folder, fsynced and renamed, metrics row fsynced). This script measures, in
one process and alternating A B A B (the machine is shared):

* A, the trainer's phase: `Trainer.train(updates)` + `Agent.save_checkpoint` + `Run.append_metrics`;
* B, a bare phase: the same number of ``model.train_step`` calls with one shared numpy
  generator and a seed tensor built by ``tf.constant``, then `tf.train.CheckpointManager.save`.

Both use the same compiled train step (its ``tf.cond`` skip of non-finite updates is in both).
TensorFlow's op determinism is process-wide; ``--compare-determinism`` runs this script twice
more per pair in subprocesses, with and without it (alternating), and compares their phases
(A and B alike).
Prints JSON with medians and the ratios A / B and deterministic / not.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def measure(rounds, updates, determinism=True):
    import numpy as np
    import tensorflow as tf

    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.training import Trainer
    from bayes_planet.agent.world_model import as_batch

    if not determinism:  # Run enables it; this benchmark's B-only mode turns it off again.
        tf.config.experimental.enable_op_determinism = lambda: None
    logdir = tempfile.mkdtemp(prefix="run_overhead_")
    config = config_lib.load(["cpu"], [f"train.updates_per_episode={updates}",
                                       "train.episodes=1000", "eval.video=false"])
    trainer = Trainer(config, logdir)
    agent = trainer.agent
    collector = agent.collector
    for k in range(config.train.seed_episodes):  # Data to train on (random policy).
        episode, _ = collector.collect(collector.policy("random", k), "env_reset", k)
        agent.replay.add(episode)
    c = config.train
    trainer.train(2)  # Compile.
    manager = tf.train.CheckpointManager(agent.checkpoint, f"{logdir}/bare", max_to_keep=2)
    rng = np.random.default_rng(0)
    times = {"A": [], "B": []}
    number = 100
    for _ in range(rounds):
        start = time.perf_counter()
        losses = trainer.train(updates)
        number += 1
        agent.save_checkpoint(number)
        agent.run.append_metrics({"episode": number, **losses})
        times["A"].append(time.perf_counter() - start)

        start = time.perf_counter()
        for _ in range(updates):
            chunk = agent.replay.sample(c.batch_size, c.chunk_length, rng)
            step = agent.model.train_step(as_batch(chunk, "obs"),
                                          tf.constant([0, number], tf.int32),
                                          agent.replay.num_steps)
            agent.updates.assign_add(1)
            {k: float(v) for k, v in step.items()}
        manager.save(checkpoint_number=number)
        times["B"].append(time.perf_counter() - start)
    agent.close()
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--no-determinism", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compare-determinism", action="store_true")
    parser.add_argument("--pairs", type=int, default=2,
                        help="determinism on/off subprocess pairs (alternating)")
    args = parser.parse_args(argv)
    times = measure(args.rounds, args.updates, not args.no_determinism)
    a, b = statistics.median(times["A"]), statistics.median(times["B"])
    result = {"updates": args.updates, "rounds": args.rounds, "A_seconds": times["A"],
              "B_seconds": times["B"], "A_over_B": a / b,
              "load_average": os.getloadavg()}
    if args.compare_determinism:
        by_mode = {"on": [], "off": []}
        for _ in range(args.pairs):
            for mode in ("on", "off"):
                cmd = [sys.executable, "-m", "benchmarks.run_overhead", "--rounds", "1",
                       "--updates", str(args.updates)] + (["--no-determinism"] if mode == "off"
                                                          else [])
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                by_mode[mode].extend(row["A_seconds"] + row["B_seconds"])
        result["determinism_seconds"] = by_mode
        result["determinism_on_over_off"] = (statistics.median(by_mode["on"])
                                             / statistics.median(by_mode["off"]))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
