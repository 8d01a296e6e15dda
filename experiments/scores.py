"""The score files and the README's agent table, from the archive.

Every archived run (a grid's ``results.json`` with its runs' configs and evaluation curves, or
a run's own ``config.yaml`` + ``metrics.jsonl``) whose recorded config is one of the methods of
``scores/methods.yaml`` is written to ``scores/<suite>/<task>.csv`` (``dmc_proprio`` from
states, ``dmc_pixels`` from pixels; columns ``method,seed,env_step,return``, one row per
evaluation: tdmpc2's ``results/`` layout). The README's two tables, between ``<!-- scores:begin
-->`` and ``<!-- scores:end -->`` (states) and between ``<!-- pixel-scores:begin -->`` and
``<!-- pixel-scores:end -->`` (pixels), are computed from those files and the suite's anchors
(``anchors.yaml``, ``anchors_pixels.yaml``); each has a row for every task of its files or its
anchors, and under it the runs whose evaluations collapsed (`collapses`: from 50k on, an
evaluation below half of the run's best before it, a best of at least 100)::

    python experiments/scores.py            # write scores/ and the README's table
    python experiments/scores.py --check    # exit 1 if either differs from what the archive gives

A run met in several archives (a grid merged into another) is filed once, from the copy that
reached furthest; two copies that disagree on an evaluation both ran (e.g. one on a machine
that was lost): the further one is filed and the other reported.
"""

import argparse
import csv
import io
import json
import pathlib
import sys

import yaml

from bayes_planet import yaml_config
from bayes_planet.agent import config as config_lib
from bayes_planet.experiment import load_script

report = load_script(pathlib.Path(__file__).with_name("agents_report.py"), "agents_report")
ROOT = pathlib.Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "experiments" / "archive"
SCORES = ROOT / "scores"
README = ROOT / "README.md"
BEGIN, END = "<!-- scores:begin -->", "<!-- scores:end -->"
#: Per suite: the README's markers of its table and its anchors file.
SUITES = {"dmc_proprio": (BEGIN, END, report.ANCHORS_PATH),
          "dmc_pixels": ("<!-- pixel-scores:begin -->", "<!-- pixel-scores:end -->",
                         report.PIXEL_ANCHORS_PATH)}
COLUMNS = ("method", "seed", "env_step", "return")
#: Keys that are not part of a method: they change nothing a run learns or scores, or, like
#: the pixel networks' compute precision (a device's choice), only its rounding.
NEUTRAL_KEYS = ("task", "seed", "eval.video", "train.checkpoint_every",
                "train.max_nonfinite_steps", "model.cnn_precision", *config_lib.EXTENDABLE_KEYS)
TABLE_STEPS = (50000, 100000)
ANCHOR_STEP = 100000
#: An evaluation collapse: from this env step on, an evaluation below ``COLLAPSE_SHARE`` of the
#: run's best evaluation before it, where that best is at least ``COLLAPSE_MIN_BEST`` (a run
#: that never scored that much has not learned its task: its dips are noise, not collapses).
COLLAPSE_FROM, COLLAPSE_SHARE, COLLAPSE_MIN_BEST = 50000, 0.5, 100.0


def read_methods(path=SCORES / "methods.yaml"):
    """``{name: {'main': bool, 'about': str, 'config': config dict}}`` of the methods file."""
    methods = {}
    for name, spec in yaml.safe_load(pathlib.Path(path).read_text())["methods"].items():
        config = config_lib.validate(config_lib.load([], spec["overrides"])).to_dict()
        methods[name] = {"main": bool(spec.get("main", False)), "about": spec["about"],
                         "config": config}
    return methods


def method_of(config, methods):
    """The method whose config ``config`` (a recorded run config, any layout) is; None if none."""
    config = config_lib.upgrade(json.loads(json.dumps(config)))
    matches = [name for name, m in methods.items()
               if all(key in NEUTRAL_KEYS for key, _, _ in yaml_config.changes(m["config"], config))]
    return matches[0] if matches else None


def suite_of(config):
    """``'dmc_pixels'`` for a config from pixels, else ``'dmc_proprio'``."""
    return "dmc_pixels" if config.get("obs_type") == "pixels" else "dmc_proprio"


def archived_runs(archive=ARCHIVE):
    """``[(source, config, [(env_step, return)])]`` of every run in the archive. A branch (a
    run directory with the ``branch.json`` of ``train --branch-from``) is left out: its config
    is recorded as it is after the branch point, its curve before it is its parent's."""
    runs = []
    for path in sorted(archive.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("variants"), dict):
            continue
        for name, variant in data["variants"].items():
            for seed, run in variant.get("runs", {}).items():
                curve = run.get("curves", {}).get("eval_return")
                if run.get("config") and curve:
                    source = f"{path.relative_to(archive)}:{name}:{seed}"
                    runs.append((source, run["config"], [tuple(p) for p in curve]))
    for path in sorted(archive.rglob("metrics.jsonl")):
        if (path.parent / "config.yaml").exists() and not (path.parent / "branch.json").exists():
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            curve = [(r["env_steps"], r["eval_return"]) for r in rows if "eval_return" in r]
            config = config_lib.read(path.parent / "config.yaml").to_dict()
            if curve:
                runs.append((str(path.parent.relative_to(archive)), config, curve))
    return runs


def _agree(a, b):
    common = dict(a).keys() & dict(b).keys()
    return all(abs(dict(a)[s] - dict(b)[s]) < 1e-6 for s in common)


def collect(runs, methods, log=sys.stderr):
    """``{(suite, task): {(method, seed): curve}}`` of the runs of a method, each run once."""
    files = {}
    for source, config, curve in runs:
        method = method_of(config, methods)
        if method is None:
            continue
        key = (method, int(config["seed"]))
        entries = files.setdefault((suite_of(config), config["task"]), {})
        old = entries.get(key)
        if old is not None and not _agree(old[1], curve):
            kept, dropped = (old, (source, curve)) if max(old[1])[0] >= max(curve)[0] else (
                (source, curve), old)
            print(f"scores: {config['task']} {method} seed {key[1]}: {kept[0]} and {dropped[0]} "
                  f"disagree; filed {kept[0]} (to {max(kept[1])[0]} env steps)", file=log)
            entries[key] = kept
        elif old is None or max(curve)[0] > max(old[1])[0]:
            entries[key] = (source, curve)
    return {k: {key: sorted(c) for key, (_, c) in v.items()} for k, v in files.items()}


def score_text(entries):
    """The CSV text of one task's ``{(method, seed): curve}``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for (method, seed), curve in sorted(entries.items()):
        for step, value in curve:
            writer.writerow([method, seed, int(step), f"{value:.1f}"])
    return out.getvalue()


def score_files(archive=ARCHIVE, methods=None, log=sys.stderr):
    """``{relative path: CSV text}`` of the score files the archive gives."""
    methods = read_methods() if methods is None else methods
    files = collect(archived_runs(archive), methods, log)
    return {f"{suite}/{task}.csv": score_text(entries)
            for (suite, task), entries in sorted(files.items())}


def read_curves(text):
    """``{(method, seed): [(env_step, return)]}`` of a score file's text, each curve sorted."""
    curves = {}
    for row in csv.DictReader(io.StringIO(text)):
        curves.setdefault((row["method"], int(row["seed"])), []).append(
            (int(row["env_step"]), float(row["return"])))
    return {key: sorted(curve) for key, curve in curves.items()}


def parse_scores(text):
    """``{method: [run]}`` of a score file's text, runs as `agents_report.return_cells` takes
    them (``env_steps`` and ``curves['eval_return']``), in the order of their seeds."""
    runs = {}
    for (method, _), curve in sorted(read_curves(text).items()):
        runs.setdefault(method, []).append({"env_steps": curve[-1][0],
                                            "curves": {"eval_return": curve}})
    return runs


def main_methods(methods, suite):
    """The ``main: true`` methods of ``suite``, in the methods file's order."""
    return [name for name, m in methods.items() if m["main"] and suite_of(m["config"]) == suite]


def table(files, methods, anchors, suite="dmc_proprio"):
    """The README's table (markdown) of ``suite`` from ``{relative path: CSV text}``: a row for
    every task of the suite's files or of ``anchors``, the suite's main methods' columns."""
    main = main_methods(methods, suite)
    others = [name for name, m in methods.items()
              if suite_of(m["config"]) == suite and name not in main]
    columns = [(m, s) for m, s in anchors["columns"] if s == ANCHOR_STEP]
    header = (["task"] + [f"{name} {report.steps_label(s)}" for name in main for s in TABLE_STEPS]
              + [f"other configs {report.steps_label(ANCHOR_STEP)}"]
              + [f"{m} {report.steps_label(s)}" for m, s in columns])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    order = list(anchors["returns"])
    prefix = f"{suite}/"
    tasks = {p[len(prefix):-4] for p in files if p.startswith(prefix)} | set(order)
    for task in sorted(tasks, key=lambda t: (order.index(t) if t in order else len(order), t)):
        path = f"{prefix}{task}.csv"
        scores = parse_scores(files[path]) if path in files else {}
        cells = [task]
        for name in main:
            cells += (report.return_cells(scores[name], list(TABLE_STEPS)) if name in scores
                      else [report.NOT_REACHED] * len(TABLE_STEPS))
        other = [f"{name}: {report.return_cells(scores[name], [ANCHOR_STEP])[0]}"
                 for name in others if name in scores]
        cells.append("; ".join(other) or report.NOT_REACHED)
        published = anchors["returns"].get(task, {})
        cells += [f"{published[c]:g}" if c in published else report.NOT_REACHED for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def collapses(curve, start=COLLAPSE_FROM, share=COLLAPSE_SHARE, min_best=COLLAPSE_MIN_BEST):
    """``[(env_step, return, best_step, best)]``: the evaluations of ``curve`` (``[(env_step,
    return)]``) at or after ``start`` below ``share`` of the best evaluation before them, where
    that best is at least ``min_best``."""
    found, best = [], None
    for step, value in sorted(curve):
        if (step >= start and best is not None and best[1] >= min_best
                and value < share * best[1]):
            found.append((step, value, *best))
        if best is None or value > best[1]:
            best = (step, value)
    return found


def collapse_lines(files, suite="dmc_proprio", only=None):
    """The markdown lines under a table: every run of the suite's files (of the methods
    ``only``, if given) with a collapse; none if the suite has no files."""
    prefix, lines = f"{suite}/", []
    paths = sorted(p for p in files if p.startswith(prefix))
    for path in paths:
        for (method, seed), curve in sorted(read_curves(files[path]).items()):
            if only is not None and method not in only:
                continue
            found = collapses(curve)
            if found:
                worst = min(found, key=lambda f: f[1] / f[3])
                lines.append(f"- {path[len(prefix):-4]}, {method} seed {seed}: {len(found)} of "
                             f"{sum(s >= COLLAPSE_FROM for s, _ in curve)} evaluations from "
                             f"{report.steps_label(COLLAPSE_FROM)}; lowest {worst[1]:.0f} at "
                             f"{report.steps_label(worst[0])} after {worst[3]:.0f} at "
                             f"{report.steps_label(worst[2])}")
    head = (("The main methods' e" if only is not None else "E")
            + f"valuation collapses (from {report.steps_label(COLLAPSE_FROM)} on, an evaluation "
            f"below {COLLAPSE_SHARE:g} of the run's best before it, a best of at least "
            f"{COLLAPSE_MIN_BEST:g}): ")
    return [head + ("none." if not lines else f"{len(lines)} run{'s' * (len(lines) > 1)}."), *lines] if paths else []


def readme_with(text, block, begin=BEGIN, end=END):
    """``text`` (the README) with ``block`` between the markers ``begin`` and ``end``."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"Expected one '{begin}' before one '{end}' in the README")
    head, rest = text.split(begin)
    return head + begin + "\n" + block + rest[rest.index(end):]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if scores/ or the README's table differ")
    args = parser.parse_args(argv)
    methods = read_methods()
    files = score_files(methods=methods)
    readme, blocks = README.read_text(), []
    for suite, (begin, end, anchors) in SUITES.items():
        below = collapse_lines(files, suite, main_methods(methods, suite))
        blocks.append(table(files, methods, report.read_anchors(anchors), suite)
                      + "".join(f"{line}\n" for line in ["", *below] if below))
        readme = readme_with(readme, blocks[-1], begin, end)
    stale = [p for p, text in files.items()
             if not (SCORES / p).exists() or (SCORES / p).read_text() != text]
    extra = [str(p.relative_to(SCORES)) for p in SCORES.rglob("*.csv")
             if str(p.relative_to(SCORES)) not in files]
    if args.check:
        if readme != README.read_text():
            stale.append("README.md (its table)")
        for path in stale + extra:
            print(f"scores: {path} is not what the archive gives; run python "
                  "experiments/scores.py", file=sys.stderr)
        return 1 if stale or extra else 0
    for path in extra:
        (SCORES / path).unlink()
    for path, text in files.items():
        (SCORES / path).parent.mkdir(parents=True, exist_ok=True)
        (SCORES / path).write_text(text)
    README.write_text(readme)
    print("\n".join(blocks), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
