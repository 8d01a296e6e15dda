"""The ``bayes-planet`` command line.

    bayes-planet train --task cartpole-swingup --preset cpu --logdir runs/x [--set key=value ...]
    bayes-planet train --branch-from runs/x --logdir runs/y [--set key=value ...]
    bayes-planet eval --logdir runs/x [--episodes 5] [--policy collect] [--out DIR [--video]]
    bayes-planet probe --logdir runs/x [--episodes 5] [--out DIR] [--test-episodes DIR]
    bayes-planet export --logdir runs/x --out DIR
    (eval, probe and export take --checkpoint N: the run after N episodes, if it kept it)
    bayes-planet demo [--epochs 20] [--samples 20] [--seed 0]

Errors in arguments are reported as one-line messages, not tracebacks.
"""

import argparse
import errno
import json
import logging
import os
import re
import shutil
import sys
import warnings

from bayes_planet import _startup

__all__ = ["main"]


# Each command first imports TensorFlow (and gym, which TF-Agents imports) without their
# start-up lines that are not errors (`_startup`); `train` checks its config before that.


def _demo(args):
    _startup.quiet_import("tensorflow")
    from bayes_planet.layers import demo

    demo.main(epochs=args.epochs, samples=args.samples, seed=args.seed)


def _branch_config(args):
    """``train --branch-from RUN``: the config of the branch — its own when ``--logdir`` holds
    it already (the same command resumes), else the parent's — with the ``--set`` values."""
    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent import run as run_lib

    if args.preset or args.task:
        given = (f"--preset {' '.join(sum(args.preset, []))}".rstrip() if args.preset
                 else f"--task {args.task}")
        raise run_lib.RunError(f"--branch-from takes the parent run's config; change it with "
                               f"--set. Received: {given}")
    parent = run_lib.check_logdir(args.branch_from, "--branch-from")
    own = run_lib.check_logdir(args.logdir) / "config.yaml"
    base = run_lib.read_config(args.logdir if own.exists() else parent)
    config = config_lib.with_overrides(base, list(args.set or []))
    run_lib.branch(args.branch_from, args.logdir, config)
    return config


def _train(args):
    from bayes_planet import yaml_config
    from bayes_planet.agent import config as config_lib

    if args.branch_from is not None:  # An empty one is refused, not taken as none.
        config = _branch_config(args)
    else:
        presets = yaml_config.parse_presets(args.preset)
        overrides = list(args.set or [])
        if args.task:
            overrides.insert(0, f"task={args.task}")
        config = config_lib.load(presets, overrides)  # Fails fast, before TensorFlow loads.
        config_lib.validate(config)
    _startup.quiet_import(*_startup.AGENT_STACK)
    from bayes_planet.agent.training import Trainer

    trainer = Trainer(config, args.logdir)
    records = trainer.loop(progress=not args.quiet)
    evals = [r["eval_return"] for r in records if r.get("eval_return") is not None]
    print(f"done: {len(records)} episodes, {records[-1]['env_steps']} env steps, "
          f"last eval return {evals[-1] if evals else float('nan'):.1f}; logdir {args.logdir}")


def _eval(args):
    from bayes_planet.agent.run import check_logdir
    from bayes_planet.run_dirs import check_output_dir

    logdir = check_logdir(args.logdir)  # Checked before TensorFlow loads and any episode runs.
    if args.video and not args.out:
        raise ValueError("eval --video needs --out DIR (eval never writes into the run). "
                         "Received: --out=None")
    if args.out:
        out = check_output_dir("--out", args.out)
    _startup.quiet_import(*_startup.AGENT_STACK)
    import numpy as np

    from bayes_planet import envs
    from bayes_planet.agent.agent import Agent

    agent = Agent(logdir, read_only=True, planning=args.set or (), checkpoint=args.checkpoint)
    collector = agent.collector
    if args.policy == "collect":  # Its noise after the checkpoint's episodes, as in training.
        from bayes_planet.agent.policy import exploration_noise

        collector.collect_policy.set_exploration_noise(
            exploration_noise(agent.config.planner, agent.env_steps(agent.restored)))
    returns = []
    for i in range(args.episodes):
        policy = collector.policy(args.policy, i, stream="cli_eval_policy")
        episode, frames = collector.collect(policy, "cli_eval_env", i, evaluation=True,
                                            render=args.video)
        returns.append(float(episode["reward"].sum()))
        if args.video:
            out.mkdir(parents=True, exist_ok=True)
            envs.write_video(np.stack(frames), out / f"eval_cli_{i}.mp4", fps=20)
    changes = (["policy collect"] if args.policy == "collect" else []) + list(args.set or ())
    changed = "".join(f", {change}" for change in changes)
    print(f"eval over {args.episodes} episodes (checkpoint {agent.restored}{changed}): return "
          f"{np.mean(returns):.1f} ± {np.std(returns):.1f} "
          f"({', '.join(f'{r:.1f}' for r in returns)})")
    if args.out:  # Last, whole: a killed evaluation leaves no eval.json.
        out.mkdir(parents=True, exist_ok=True)
        report = {"checkpoint": agent.restored, "episodes": args.episodes,
                  "policy": args.policy, "planning": list(args.set or ()),
                  "returns": returns, "mean": float(np.mean(returns)),
                  "std": float(np.std(returns))}
        temp = out / f".eval.json.tmp.{os.getpid()}"
        temp.write_text(json.dumps(report, indent=1) + "\n")
        os.replace(temp, out / "eval.json")


# PolicySaver's signatures name inputs by nest path ("0/step_type"), which tf.function
# renames with a warning per input, and TFP warns that loading its distribution's type needs
# TFP imported: expected, and said once in `_export`'s own line.
_EXPORT_NOTICES = (re.compile(r"is not a valid tf\.function parameter name\. Sanitizing to"),)


class _DropExportNotices(logging.Filter):
    def filter(self, record):
        return not any(p.search(record.getMessage()) for p in _EXPORT_NOTICES)


def _export(args):
    from bayes_planet.agent.run import check_logdir
    from bayes_planet.run_dirs import check_output_dir, holds_run

    logdir = check_logdir(args.logdir, "--logdir")  # Checked before TensorFlow loads.
    if not holds_run(logdir):
        raise ValueError(f"Expected a run directory. Received: --logdir={str(logdir)!r}")
    out = check_output_dir("--out", args.out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"Expected a new or empty folder. Received: --out={str(out)!r} holds "
                         "files")
    _startup.quiet_import(*_startup.AGENT_STACK)
    import tensorflow as tf
    from tf_agents.policies import policy_saver

    from bayes_planet import seeds
    from bayes_planet.agent import Agent

    agent = Agent(logdir, read_only=True, checkpoint=args.checkpoint)
    policy = agent.collector.eval_policy  # The greedy plan, as `eval --policy eval` acts.
    policy.reseed(*seeds.pair(agent.config.seed, "cli_export_policy", agent.worker))
    checkpoint = tf.Variable(agent.restored, dtype=tf.int64, trainable=False)
    saver = policy_saver.PolicySaver(policy, train_step=agent.updates,
                                     metadata={"checkpoint": checkpoint})
    # Whole or not at all: written beside --out, then renamed to it.
    target = out.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}.tmp.{os.getpid()}"
    absl, notices = logging.getLogger("absl"), _DropExportNotices()
    absl.addFilter(notices)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Encoding a StructuredValue with type tfp\\.")
            saver.save(str(temp))
        if target.exists():
            target.rmdir()
        os.replace(temp, target)
    finally:
        absl.removeFilter(notices)
        shutil.rmtree(temp, ignore_errors=True)
    print(f"exported the evaluation policy of checkpoint {agent.restored} "
          f"({int(agent.updates.numpy())} updates) to {out}: a TF-Agents SavedModel policy "
          "of any batch size; load it with tf.saved_model.load after importing "
          "tensorflow_probability (docs/tf_agents.md)")


def _probe(args):
    _startup.quiet_import(*_startup.AGENT_STACK)
    from bayes_planet.agent import probes

    horizons = [int(h) for h in args.horizons.split(",") if h.strip()]
    probes.probe_run(args.logdir, episodes=args.episodes, out=args.out,
                     train_episodes=args.train_episodes, train_source=args.train_source,
                     test_episodes=args.test_episodes, context=args.context, horizons=horizons,
                     latent=args.latent, weights=args.weights, seed=args.seed,
                     checkpoint=args.checkpoint)


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"Expected a positive integer. Received: {text!r}")
    return value


def add_checkpoint_argument(parser):
    """``--checkpoint N``: a reader opens the run at its checkpoint N (`Agent`'s ``checkpoint``)."""
    parser.add_argument("--checkpoint", type=_positive_int, default=None, metavar="N",
                        help="the run's checkpoint after N episodes (the 2 newest are kept, "
                             "and more with train.keep_checkpoint_every), with the episodes "
                             "collected up to it; default: the newest")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="bayes-planet",
        description="Bayesian Layers for Keras and a Bayesian PlaNet agent.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a (Bayesian) PlaNet agent")
    train.add_argument("--task", default=None, help="e.g. cartpole-swingup (config: task)")
    train.add_argument("--preset", nargs="*", action="append", default=None,
                       help="presets merged left to right: --preset cpu,pixels or cpu pixels")
    train.add_argument("--logdir", required=True)
    train.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override any config key, e.g. --set train.batch_size=8")
    train.add_argument("--branch-from", metavar="RUN", default=None,
                       help="start --logdir as a copy of RUN at its newest checkpoint and train "
                            "on with RUN's config and the --set changes (not its task, "
                            "observations or model); the same command resumes")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=_train)
    evaluate = sub.add_parser("eval", help="evaluate a trained agent")
    evaluate.add_argument("--logdir", required=True)
    evaluate.add_argument("--episodes", type=_positive_int, default=5)
    evaluate.add_argument("--video", action="store_true", help="write mp4s to --out")
    evaluate.add_argument("--policy", choices=("eval", "collect"), default="eval",
                          help="eval: the greedy plan, no exploration noise (as training "
                               "evaluates); collect: as training collects, with its "
                               "exploration noise after the checkpoint's episodes and its "
                               "optimism (planner.beta, planner.novelty); the same episodes")
    evaluate.add_argument("--out", default=None,
                          help="folder outside the run for eval.json (the returns and the "
                               "checkpoint: episodes trained) and --video's mp4s")
    evaluate.add_argument("--set", action="append", metavar="KEY=VALUE",
                          help="plan differently with the trained model: planner.* or "
                               "value.policy_proposals, e.g. --set planner.beta=1")
    add_checkpoint_argument(evaluate)
    evaluate.set_defaults(func=_eval)
    probe = sub.add_parser("probe", help="latent probes: R² of true physics from the latent")
    probe.add_argument("--logdir", required=True)
    probe.add_argument("--episodes", type=_positive_int, default=5,
                       help="fresh held-out test episodes (eval policy, eval environment)")
    probe.add_argument("--out", default=None,
                       help="output folder outside the run (default: LOGDIR.probe beside it)")
    probe.add_argument("--train-episodes", type=_positive_int, default=None,
                       help="probe training episodes (default: replay's last 100, or 20 fresh)")
    probe.add_argument("--train-source", choices=("replay", "fresh"), default="replay")
    probe.add_argument("--test-episodes", default=None, metavar="DIR",
                       help="shared test episodes (.npz); filled on first use")
    probe.add_argument("--context", type=_positive_int, default=5)
    probe.add_argument("--horizons", default="1,5,10,20", help="open-loop horizons")
    probe.add_argument("--latent", choices=("mean", "sample"), default="mean")
    probe.add_argument("--weights", choices=("per_episode", "shared", "mean"),
                       default="per_episode",
                       help="a Bayesian model's weights: a sample per episode, one shared "
                            "sample, or the posterior mean")
    probe.add_argument("--seed", type=int, default=0)
    add_checkpoint_argument(probe)
    probe.set_defaults(func=_probe)
    export = sub.add_parser("export", help="save a trained agent's evaluation policy as a "
                                           "TF-Agents SavedModel policy (PolicySaver)")
    export.add_argument("--logdir", required=True)
    export.add_argument("--out", required=True,
                        help="a new or empty folder outside the run for the SavedModel: "
                             "tf.saved_model.load(DIR).action(time_step, policy_state) at any "
                             "batch size")
    add_checkpoint_argument(export)
    export.set_defaults(func=_export)
    demo = sub.add_parser("demo", help="drop-in Bayesian CNN on scikit-learn's digits")
    demo.add_argument("--epochs", type=_positive_int, default=20)
    demo.add_argument("--samples", type=_positive_int, default=20,
                      help="Monte Carlo samples for the predictive distribution")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)
    return parser


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def main(argv=None):
    """Runs a command; returns the exit status (0; 2 for a user error or a full disk; 1 for a
    diverged run; 130 when interrupted)."""
    args = build_parser().parse_args(argv)
    say = lambda text: print(f"bayes-planet {args.command}: {text}", file=sys.stderr)  # noqa: E731
    try:
        args.func(args)
    except KeyboardInterrupt:
        say("interrupted" + ("; run the same command again to resume (what was committed is "
                             "kept)" if args.command == "train" else ""))
        return 130
    except (ValueError, TypeError, FileNotFoundError, KeyError) as e:
        say(f"error: {_one_line(e)}")
        return 2
    except OSError as e:
        if e.errno not in _NO_SPACE:
            raise
        say(f"error: no space left on the device ({e.filename or e.strerror}); free some and "
            "run the same command again")
        return 2
    except RuntimeError as e:
        from bayes_planet.agent.run import NonFiniteError

        if not isinstance(e, NonFiniteError):
            raise
        say(f"error: {_one_line(e)}")
        return 1
    except Exception as e:  # noqa: BLE001 (TensorFlow reports a full disk as its own error)
        if type(e).__name__ != "ResourceExhaustedError" or "space" not in str(e).lower():
            raise
        say(f"error: no space left on the device ({_one_line(e)}); free some and run the "
            "same command again")
        return 2
    return 0


def _one_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
