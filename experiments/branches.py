"""A/B tests from one trained state: arms × seeds branched from a run's newest checkpoint.

A change to how an agent plans, explores or trains its value is tried where it matters —
on a trained agent — without training from scratch: every arm (a ``--set`` list on the parent
run's config) and seed is a ``bayes-planet train --branch-from`` of the same checkpoint,
trained ``episodes`` more, then evaluated on the same evaluation episodes (seeded by the
branch's seed and the episode's index)::

    python experiments/branches.py --preset replay_cheetah          # results §7q's A/B
    python experiments/branches.py --preset replay_cheetah --aggregate-only
    python experiments/branches.py --preset debug --set parent=RUN --out /tmp/branches

**Runs.** ``<out>/runs/<arm>/seed<seed>/``: ``bayes-planet train --branch-from <parent>
--logdir <it> --quiet --set seed=<seed> --set train.episodes=<branch point + episodes>
--set <overrides...> --set <the arm's...>``, its output in ``<it>.launch/train.log``, then
``bayes-planet eval --episodes <eval.episodes> --set <eval.planning...> --out
<it>.eval`` (beside the branch). Every branch to train is copied from the parent before the
first trains, so all start from one checkpoint even while the parent trains on. The
launcher is `experiments/agents.py`'s, with its ``backend`` (local subprocesses, or Ray tasks
on a cluster: its **Backends**): rerunning the command skips finished branches,
resumes unfinished ones and evaluates those without a current ``eval.json``. Seed-major: a partly run grid has every
arm at its first seeds. Every arm's config is checked before the first launch (a key that a
branch cannot change, ``bayes_planet.agent.config.BRANCH_FIXED_KEYS``, a non-planning key in
``eval.planning``, a logdir holding a run of another config, arms that would start from
another checkpoint than the branches already made). A larger ``episodes`` trains the
branches made on, as a larger ``train.episodes`` extends a run.

**Aggregation** (always, also with ``--aggregate-only``): per arm over seeds, the evaluation
return (each branch's N-episode mean; mean ± std over seeds), the paired difference to the
first arm (same seed, so the same evaluation episodes), the training return and critic
loss over the branch's own episodes. Writes ``config.yaml``, ``results.json`` and
``summary.md`` into ``--out``.
"""

import json
import pathlib
import re
import sys

import numpy as np

from bayes_planet import yaml_config as _config
from bayes_planet.experiment import load_script
from bayes_planet.run_dirs import check_output_dir

CONFIG_PATH = pathlib.Path(__file__).with_suffix(".yaml")
agents = load_script(pathlib.Path(__file__).with_name("agents.py"), "agents_experiment")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# ---------------------------------------------------------------- the grid
def check(config):
    """One-line `ConfigError`s for the grid's own keys."""
    if not isinstance(config["parent"], str) or not config["parent"]:
        raise _config.ConfigError(f"Expected the trained run's logdir. Received: "
                                  f"parent={config['parent']!r}")
    arms = config["arms"]
    if not isinstance(arms, dict) or not arms:
        raise _config.ConfigError(f"Expected a mapping of arm names to --set lists, e.g. "
                                  f"{{control: [], longer: [planner.horizon=8]}}. Received: "
                                  f"arms={arms!r}")
    for name, sets in arms.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise _config.ConfigError(f"Expected an arm name of letters, digits, '_', '.', '-'"
                                      f" (a folder). Received: arms={name!r}")
        if not isinstance(sets, list) or not all(isinstance(s, str) for s in sets):
            raise _config.ConfigError(f"Expected a list of key=value strings. Received: "
                                      f"arms.{name}={sets!r}")
    for key, sets in (("overrides", config["overrides"]),
                      ("eval.planning", config["eval"]["planning"])):
        if not all(isinstance(s, str) for s in sets):
            raise _config.ConfigError(f"Expected a list of key=value strings. Received: "
                                      f"{key}={sets!r}")
    seeds = config["seeds"]
    if not seeds or len(set(seeds)) < len(seeds) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise _config.ConfigError(f"Expected distinct integer seeds. Received: seeds={seeds!r}")
    for key, value in (("episodes", config["episodes"]),
                       ("eval.episodes", config["eval"]["episodes"]),
                       ("parallel", config["parallel"])):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _config.ConfigError(f"Expected a positive integer. Received: {key}={value!r}")


def parent_config(config):
    """The parent run's logdir and config (one-line `ConfigError` if it holds no run)."""
    from bayes_planet.agent.run import RunError, read_config

    parent = pathlib.Path(config["parent"])
    try:
        return parent, read_config(parent)
    except RunError as e:
        raise _config.ConfigError(f"parent: {e}") from None


def branch_point(config, parent, previous, logdirs):
    """The parent's episode all branches start from: that of the branches already made
    (their ``branch.json``), else the parent's newest committed, readable checkpoint
    (`bayes_planet.agent.run.branch_checkpoint`, as ``bayes-planet train --branch-from``). Refuses, in one line,
    branches of another parent or point (a parent that has moved on since the branches were
    made is refused by `make_branches`, when a branch is to be made: reading them is fine).
    ``parent``, ``previous``: the parent's logdir and config (`parent_config`)."""
    from bayes_planet.agent.run import Run, RunError, branch_checkpoint

    points = {}
    for logdir in logdirs:
        path = logdir / "branch.json"
        if path.is_file():
            record = json.loads(path.read_text())
            if pathlib.Path(record["parent"]).resolve() != parent.resolve():
                raise _config.ConfigError(f"{logdir} is a branch of {record['parent']}, not of "
                                          f"parent={str(parent)!r}: give this grid its own out")
            points[logdir] = record["episode"]
    if len(set(points.values())) > 1:
        raise _config.ConfigError(f"the branches in {config['out']} start from different "
                                  f"checkpoints of the parent: {sorted(set(points.values()))}")
    if points:
        return next(iter(points.values()))
    try:
        return branch_checkpoint(parent, Run(parent, previous, read_only=True))[0]
    except RunError as e:
        raise _config.ConfigError(f"parent: {e}") from None


def grid(config, out):
    """Every branch (arm × seed, seed-major) with its commands and validated config."""
    from bayes_planet.agent import config as config_lib

    check(config)
    parent, previous = parent_config(config)
    cells = [(arm, seed) for seed in config["seeds"] for arm in config["arms"]]
    logdirs = [pathlib.Path(out) / "runs" / arm / f"seed{seed}" for arm, seed in cells]
    point = branch_point(config, parent, previous, logdirs)
    planning = list(config["eval"]["planning"])
    runs = []
    for (arm, seed), logdir in zip(cells, logdirs, strict=True):
        sets = [f"seed={seed}", f"train.episodes={point + config['episodes']}",
                *config["overrides"], *config["arms"][arm]]
        try:
            branch = config_lib.with_overrides(previous, sets)
            config_lib.with_planning(branch, planning)
        except _config.ConfigError as e:
            raise _config.ConfigError(f"arm {arm}: {e}") from None
        fixed = config_lib.branch_fixed_changes(previous, branch)
        if fixed:
            raise _config.ConfigError(
                f"arm {arm}: a branch keeps its parent's data and model, but it changes "
                f"{_config.describe_changes(fixed)} ({', '.join(config_lib.BRANCH_FIXED_KEYS)}"
                " are fixed)")
        agents.check_existing_run(logdir, branch)  # a larger ``episodes`` extends a branch
        command = [sys.executable, "-m", "bayes_planet.agent.cli", "train", "--branch-from",
                   str(parent), "--logdir", str(logdir), "--quiet"]
        for item in sets:
            command += ["--set", item]
        runs.append({"variant": arm, "seed": seed, "logdir": logdir, "sets": sets,
                     "command": command, "branch_point": point,
                     "episodes": point + config["episodes"],
                     "final_eval_episodes": config["eval"]["episodes"],
                     "final_eval_planning": planning, "config": branch.to_dict()})
    return runs


def make_branches(runs, config):
    """Copies the parent into every branch of ``runs`` not made yet (`bayes_planet.agent.run.branch`),
    all before any trains, so that all start from one checkpoint even while the parent trains
    on (`bayes-planet train --branch-from` would copy its newest checkpoint at each launch). A
    copy that found a newer checkpoint (the parent saved one between two copies) is removed
    again and refused in one line."""
    import shutil

    from bayes_planet.agent import run as run_lib

    for run in runs:
        if (run["logdir"] / "config.yaml").exists():
            continue
        try:
            made = run_lib.branch(config["parent"], run["logdir"],
                                  _config.Config(run["config"]))
        except run_lib.RunError as e:
            raise _config.ConfigError(f"{run['variant']} seed {run['seed']}: {e}") from None
        if made != run["branch_point"]:
            shutil.rmtree(run["logdir"])
            raise _config.ConfigError(
                f"the parent's branch checkpoint is {made}, the branches start from "
                f"{run['branch_point']}: {run['logdir']} would start elsewhere; give the "
                "branches still to make their own out")


# ---------------------------------------------------------------- reading branches
def _mean(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(values)) if values else None


def read_branch(run):
    """The branch's evaluation and its own training episodes (after the branch point)."""
    from bayes_planet.agent.run import read_metrics

    rows = [r for r in read_metrics(run["logdir"]) if r["episode"] > run["branch_point"]]
    trained = agents.episodes_on_disk(run["logdir"])
    report = agents.read_final_eval(run) if trained >= run["episodes"] else None
    return {"logdir": str(run["logdir"]), "episodes_trained": len(rows),
            "finished": trained >= run["episodes"],
            "training_return": _mean(rows, "return"), "critic_loss": _mean(rows, "critic_loss"),
            "loss": _mean(rows, "loss"),
            "eval": None if report is None else {k: report[k] for k in
                                                 ("mean", "std", "returns", "checkpoint")}}


def aggregate(config, out, runs, status=None):
    """``results.json`` and ``summary.md``: per arm over seeds (see the module docstring)."""
    out = pathlib.Path(out)
    arms = list(config["arms"])
    branches = {(r["variant"], r["seed"]): read_branch(r) for r in runs}
    for run in runs:
        branches[run["variant"], run["seed"]]["status"] = (status or {}).get(
            str(run["logdir"]), "finished" if branches[run["variant"], run["seed"]]["finished"]
            else "unfinished")
    evals = {k: (b["eval"] or {}).get("mean") for k, b in branches.items()}
    results = {"config": config, "branch_point": runs[0]["branch_point"], "arms": {}}
    for arm in arms:
        seeds = [r["seed"] for r in runs if r["variant"] == arm]
        paired = [evals[arm, s] - evals[arms[0], s] for s in seeds
                  if evals[arm, s] is not None and evals[arms[0], s] is not None]
        results["arms"][arm] = {
            "sets": config["arms"][arm],
            "eval": agents.stats([evals[arm, s] for s in seeds]),
            "versus_first": None if arm == arms[0] or not paired else {
                **agents.stats(paired), "higher": sum(d > 0 for d in paired)},
            "training_return": agents.stats([branches[arm, s]["training_return"] for s in seeds]),
            "critic_loss": agents.stats([branches[arm, s]["critic_loss"] for s in seeds]),
            "branches": {str(s): branches[arm, s] for s in seeds},
        }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "summary.md").write_text(summary_markdown(results))
    return results


def _fmt(stat, digits=1):
    if not stat:
        return "–"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f} (n={stat['n']})"


def summary_markdown(results):
    c, point = results["config"], results["branch_point"]
    first = next(iter(results["arms"]))
    planning = ", ".join(c["eval"]["planning"]) or "the branch's own planner"
    lines = [f"Branches of {c['parent']} at its episode {point}, trained to episode "
             f"{point + c['episodes']}; seeds {c['seeds']}; overrides {c['overrides']}. "
             f"Evaluation: {c['eval']['episodes']} episodes of the last checkpoint "
             f"({planning}), mean ± std over seeds of each branch's mean; 'vs {first}': the "
             "difference on the same seed (the same evaluation episodes), mean ± std over "
             "seeds, and on how many seeds it is positive.", "",
             f"| arm | --set | evaluation | per seed | vs {first} | training return, episodes "
             f"{point + 1}–{point + c['episodes']} | critic loss |",
             "|---|---|---|---|---|---|---|"]
    for arm, a in results["arms"].items():
        per_seed = ", ".join("–" if b["eval"] is None else f"{b['eval']['mean']:.1f}"
                             for b in a["branches"].values())
        versus = a["versus_first"]
        versus = "–" if versus is None else f"{_fmt(versus)}, higher on {versus['higher']}"
        lines.append(f"| {arm} | {', '.join(a['sets']) or '(parent)'} | {_fmt(a['eval'])} | "
                     f"{per_seed} | {versus} | {_fmt(a['training_return'])} | "
                     f"{_fmt(a['critic_loss'], 2)} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the command
def main(argv=None):
    parser = agents.grid_parser(__doc__.split("\n")[0], "train only this arm (repeatable); "
                                "the table shows every arm", metavar="ARM")
    args = parser.parse_args(argv)
    config = agents.grid_config(args, CONFIG_PATH)
    backend = agents.make_backend(config)
    out = check_output_dir("out", config["out"])  # Before anything is written.
    runs = grid(config, out)
    picked = agents.only_variants(runs, args.only)
    _config.save_dict(config, out)
    status = None
    if not args.aggregate_only:
        make_branches(picked, config)
        status = agents.launch(picked, [], config["parallel"], name="branches",
                               backend=backend)
        status.update(agents.final_eval(picked, name="branches"))
    results = aggregate(config, out, runs, status)
    print((out / "summary.md").read_text())
    results["failed"] = [k for k, v in (status or {}).items() if v.startswith("failed")]
    return results


if __name__ == "__main__":
    sys.exit(1 if _config.run_script(main, resumes=True)["failed"] else 0)
