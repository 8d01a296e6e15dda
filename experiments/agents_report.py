"""The reports of ``agents.py``'s grids: its plots and the table across tasks with the
published anchors of ``anchors.yaml``. A helper that ``agents.py`` loads, not a script.

**The tasks table** (``tasks_table.md``, also the last section of ``summary.md``): one row
per task of the grid; for each variant (e.g. ``deterministic`` and ``reparameterization``)
the evaluation return at each env step of ``table_steps`` (action repeat counted), then the
anchors. A cell is the mean ± std over the seeds whose run reached the step (``n=2 of 3``
when some did not), each seed's value being **its last evaluation at or before the step**
(no interpolation; with ``eval.every`` 5 and 1000 env steps an episode, as in the ``tasks``
preset, 50k and 100k are evaluation points, and an earlier evaluation is named in the cell:
``eval at 45k``). Where no seed reached the step, the first such column shows each seed's
last evaluation, marked ``last, at 70k``; later columns show '—', as do steps reached
before any evaluation, and anchors missing for a task. Where runs of a variant have a final
evaluation (``final_eval`` of the grid), a column ``<variant> final`` follows its steps:
the mean ± std over seeds of each run's N-episode mean at its last checkpoint
(``n=1; 10 ep at 100k``).
"""

import pathlib

import numpy as np
import yaml

ANCHORS_PATH = pathlib.Path(__file__).with_name("anchors.yaml")
#: The published returns from pixels, in the same format.
PIXEL_ANCHORS_PATH = pathlib.Path(__file__).with_name("anchors_pixels.yaml")
NOT_REACHED = "—"


# ---------------------------------------------------------------- the tasks table
def read_anchors(path=ANCHORS_PATH):
    """``{'columns': [(method, step)], 'sources': {method: text}, 'returns': {task:
    {(method, step): return}}, 'path': 'experiments/<file name>'}`` from an anchors file
    (columns in the file's order)."""
    raw = yaml.safe_load(pathlib.Path(path).read_text())
    methods = raw["methods"]
    returns = {}
    for task, per_method in raw["returns"].items():
        returns[task] = {}
        for method, values in per_method.items():
            if method not in methods:
                raise ValueError(f"{path}: {task}: expected a method of {sorted(methods)}, "
                                 f"received {method!r}")
            steps = [int(s) for s in methods[method]["steps"]]
            if len(values) != len(steps):
                raise ValueError(f"{path}: {task} {method}: expected one return per step "
                                 f"{steps}, received {values}")
            returns[task].update({(method, s): v for s, v in zip(steps, values, strict=True)})
    return {"columns": [(m, int(s)) for m, spec in methods.items() for s in spec["steps"]],
            "sources": {m: spec["source"] for m, spec in methods.items()}, "returns": returns,
            "path": f"experiments/{pathlib.Path(path).name}"}


def eval_at(curve, step):
    """``(env_steps, return)`` of the last evaluation of ``curve`` (``[(env_steps, return)]``)
    at or before ``step``; None if there is none."""
    before = [tuple(p) for p in curve if p[0] <= step]
    return max(before) if before else None


def steps_label(step):
    """``50000 -> '50k'``, ``45500 -> '45.5k'``, ``360 -> '360'``."""
    return f"{step / 1000:g}k" if step >= 1000 else f"{step:g}"


def _span(steps):
    low, high = min(steps), max(steps)
    return steps_label(low) + (f"–{steps_label(high)}" if high != low else "")


def _cell(values, seeds, note=""):
    n = len(values)
    count = f"n={n}" + (f" of {seeds}" if n < seeds else "") + (f"; {note}" if note else "")
    return f"{np.mean(values):.0f} ± {np.std(values):.0f} ({count})"


def return_cells(runs, steps):
    """One variant's cells at ``steps`` (ascending) from its runs (results.json's runs: each
    with ``env_steps`` and ``curves['eval_return']``); see the module docstring."""
    cells, shown_last = [], False
    for step in steps:
        done = [r for r in runs if r["env_steps"] >= step]
        points = [p for r in done if (p := eval_at(r["curves"]["eval_return"], step))]
        if points:
            at = [s for s, _ in points]
            cells.append(_cell([v for _, v in points], len(runs),
                               "" if set(at) == {step} else f"eval at {_span(at)}"))
            continue
        lasts = [r["curves"]["eval_return"][-1] for r in runs if r["curves"]["eval_return"]]
        if done or shown_last or not lasts:
            cells.append(NOT_REACHED)
            continue
        shown_last = True
        cells.append(_cell([v for _, v in lasts], len(runs),
                           f"last, at {_span([s for s, _ in lasts])}"))
    return cells


def final_cell(runs):
    """The ``<variant> final`` cell: each run's final N-episode evaluation (see the module
    docstring), '—' where no run has one."""
    finals = [r["final_eval"] for r in runs if r.get("final_eval")]
    if not finals:
        return NOT_REACHED
    episodes = sorted({f["episodes"] for f in finals})
    at = [f["env_steps"] for f in finals if f["env_steps"] is not None]
    note = "/".join(map(str, episodes)) + " ep" + (f" at {_span(at)}" if at else "")
    return _cell([f["mean"] for f in finals], len(runs), note)


def tasks_table(results, steps, anchors):
    """The tasks table (markdown) of a results dict; ``anchors`` as `read_anchors` returns."""
    variants = results["variants"].values()
    tasks = list(dict.fromkeys(v["task"] for v in variants))
    labels = list(dict.fromkeys(v["label"] for v in variants))
    steps = sorted(int(s) for s in steps)
    finals = {v["label"] for v in variants if any(r.get("final_eval")
                                                   for r in v["runs"].values())}
    header = (["task"] + [c for label in labels for c in
                          [f"{label} {steps_label(s)}" for s in steps]
                          + ([f"{label} final"] if label in finals else [])]
              + [f"{m} {steps_label(s)}" for m, s in anchors["columns"]])
    lines = [f"Evaluation return (no exploration noise) at env steps (action repeat counted): "
             "mean ± std over the seeds that reached the step, each seed's last evaluation at "
             "or before it; 'last, at X': no seed reached the step, the runs' last evaluations; "
             f"'{NOT_REACHED}': not reached (or not published)"
             + ("; 'final': each run's N-episode evaluation of its last checkpoint"
                if finals else "") + f". Anchors ({anchors['path']}):", ""]
    lines += [f"* {m}: {source}" for m, source in anchors["sources"].items()]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task in tasks:
        cells = [task]
        for label in labels:
            runs = [r for v in variants if v["task"] == task and v["label"] == label
                    for r in v["runs"].values()]
            cells += return_cells(runs, steps)
            if label in finals:
                cells.append(final_cell(runs))
        published = anchors["returns"].get(task, {})
        cells += [f"{published[c]:g}" if c in published else NOT_REACHED
                  for c in anchors["columns"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plots
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _band(ax, curve, label, color):
    x, m, s = (np.asarray(curve[k]) for k in ("steps", "mean", "std"))
    ax.plot(x, m, "o-", color=color, label=label, lw=1.5, ms=3)
    ax.fill_between(x, m - s, m + s, color=color, alpha=0.2, lw=0)


def _ran(variant):
    """How many of a variant's seeds have evaluations (a grid's later seeds may not have run)."""
    return sum(bool(run.get("curves", {}).get("eval_return")) for run in variant["runs"].values())


def plot_curves(results, out):
    """``learning_curves.png`` and ``weight_kl.png`` (a row, resp. a panel, per task),
    ``coverage.png`` (when enabled) and ``probe.png`` (when probed) into ``out``."""
    plt = _pyplot()
    variants_ = results["variants"]
    tasks = list(dict.fromkeys(v["task"] for v in variants_.values()))
    colors = {label: f"C{i}" for i, label in
              enumerate(dict.fromkeys(v["label"] for v in variants_.values()))}
    fig, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.8 * len(tasks)), squeeze=False)
    fig_kl, axes_kl = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 3.8), squeeze=False)
    for row, ax_kl, task in zip(axes, axes_kl[0], tasks, strict=True):
        ours = [v for v in variants_.values() if v["task"] == task]
        for v in ours:
            for ax, key in zip(row, ("eval_return", "return"), strict=True):
                if v["curves"].get(key):
                    _band(ax, v["curves"][key], f"{v['label']} (n={_ran(v)})",
                          colors[v["label"]])
            curve = v["curves"].get("weight_kl")
            if curve and max(curve["mean"]) > 0:  # PlaNet's deterministic transition has none.
                _band(ax_kl, curve, v["label"], colors[v["label"]])
        row[0].set(title=f"{task}: evaluation return (mean ± std over n seeds)",
                   xlabel="environment steps", ylabel="return")
        row[1].set(title=f"{task}: collection return (with exploration)",
                   xlabel="environment steps")
        row[0].legend(fontsize=8)
        ax_kl.set(title=f"{task}: weight KL(q(W) || p(W)) of the transition",
                  xlabel="environment steps", ylabel="nats")
        if ax_kl.lines:
            ax_kl.set_yscale("log")
            ax_kl.legend(fontsize=8)
    for figure, name in ((fig, "learning_curves.png"), (fig_kl, "weight_kl.png")):
        figure.tight_layout()
        figure.savefig(out / name, dpi=110)
        plt.close(figure)

    colors = {name: f"C{i}" for i, name in enumerate(variants_)}
    grids = [g["name"] for g in results["config"]["coverage"]["grids"]]
    if results["config"]["coverage"]["enabled"]:
        fig, axes = plt.subplots(1, len(grids), figsize=(5.5 * len(grids), 3.8), squeeze=False)
        for ax, g in zip(axes[0], grids, strict=True):
            for name, v in variants_.items():
                if v["curves"].get(f"coverage_{g}"):
                    _band(ax, v["curves"][f"coverage_{g}"], name, colors[name])
            ax.set(title=f"state coverage: {g} grid", xlabel="environment steps",
                   ylabel="fraction of visited cells")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "coverage.png", dpi=110)
        plt.close(fig)

    probed = {n: v["summary"]["probe"]["per_episode"] for n, v in variants_.items()
              if "per_episode" in v["summary"]["probe"]}
    if probed:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
        horizons = [0] + [int(h) for h in results["config"]["probe"]["horizons"]]
        for ax, group in zip(axes, ("velocity", "position"), strict=True):
            for name, p in probed.items():
                for probe_name, style in (("ridge", "--o"), ("mlp", "-s")):
                    keys = ["closed_loop"] + [f"open_loop_h{h}" for h in horizons[1:]]
                    pts = [(h, p.get(f"{k}/{probe_name}/{group}")) for h, k in
                           zip(horizons, keys, strict=True)]
                    pts = [(h, s["mean"]) for h, s in pts if s]
                    if pts:
                        ax.plot(*zip(*pts, strict=True), style, color=colors[name],
                                label=f"{name} {probe_name}")
            ax.set(title=f"probe R² of {group} (0 = closed loop)",
                   xlabel="open-loop horizon", ylabel="R² (held-out)")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "probe.png", dpi=110)
        plt.close(fig)
