"""experiments/agents.py across tasks: the task dimension of the grid, archived grids merged
into it, the anchors file and the tasks table (agents_report.py), a 2-task debug grid."""

import json
import pathlib

import numpy as np
import pytest

from tests.scripts import _experiments

ARCHIVE = _experiments.EXPERIMENTS / "archive"


@pytest.fixture(scope="module")
def agents():
    return _experiments.load("agents")


def _load(agents, presets=(), sets=()):
    return agents._config.load_dict(agents.CONFIG_PATH, list(presets), list(sets))


# ---------------------------------------------------------------- the grid
def test_tasks_preset_grid(agents, tmp_path):
    """Every task from states with both estimators; cartpole with 3 seeds, seed-major order,
    runs in runs/<task>/<variant>/seed<s>, every run config validated."""
    config = _load(agents, ["tasks"])
    seeds = agents.task_seeds(config)
    assert seeds == {"cartpole-swingup": [0, 1, 2], "reacher-easy": [0], "finger-spin": [0],
                     "ball_in_cup-catch": [0], "cheetah-run": [0], "walker-walk": [0]}
    runs = agents.grid(config, tmp_path)
    assert len(runs) == 2 * sum(len(s) for s in seeds.values())
    assert [r["seed"] for r in runs] == [0] * 12 + [1, 1, 2, 2]
    first = runs[0]
    assert first["variant"] == "cartpole-swingup/deterministic"
    assert first["logdir"] == tmp_path / "runs" / "cartpole-swingup" / "deterministic" / "seed0"
    command = agents.train_command(runs[11], config["base_presets"])
    assert command[command.index("--preset") + 1] == "cpu,value,proprio"
    assert "task=walker-walk" in command and "model.estimator=reparameterization" in command
    from bayes_planet.agent import config as config_lib

    merged = config_lib.validate(config_lib.load(config["base_presets"], runs[11]["sets"]))
    assert (merged.train.updates_per_episode, merged.planner.cem.iterations,
            merged.model.obs_stddev, merged.model.normalize_obs, merged.value.enabled) == (
                100, 2, 0.1, True, True)
    labels = {(v["task"], v["label"]) for v in agents.variants(config)}
    assert labels == {(t, e) for t in seeds for e in ("deterministic", "reparameterization")}


def test_tasks_preset_reaches_the_last_table_step_on_every_task(agents, tmp_path):
    """train.episodes x the env steps an episode takes (agent steps x the task's action
    repeat, PlaNet's per-domain default) is the last column's env steps on every task."""
    from bayes_planet import envs
    from bayes_planet.agent import config as config_lib

    config = _load(agents, ["tasks"])
    target = max(config["table_steps"])
    for run in agents.grid(config, tmp_path)[:6 * 2:2]:
        c = config_lib.validate(config_lib.load(config["base_presets"], run["sets"]))
        env = envs.make(c.task, obs_type=c.obs_type, action_repeat=c.env.action_repeat,
                        episode_length=c.env.episode_length)
        per_episode = env.max_steps * env.action_repeat
        assert env.action_repeat == envs.DEFAULT_ACTION_REPEAT[c.task.split("-")[0]]
        assert c.train.episodes * per_episode == target, (c.task, env.action_repeat)


def test_one_task_grids_keep_their_layout(agents, tmp_path):
    for preset in ("comparison", "priors", "value", "exploration", "debug"):
        runs = agents.grid(_load(agents, [preset]), tmp_path)
        assert all(r["logdir"].parent.parent == tmp_path / "runs" for r in runs), preset
        assert all("/" not in r["variant"] for r in runs), preset


def test_a_grid_refuses_a_logdir_that_holds_another_runs_config(agents, tmp_path):
    """Two one-task grids of different tasks in one out share runs/<variant>/seed<s>: the
    second must not count the first's run as its own (it once reported cartpole's returns
    as cheetah-run's). The same config passes, and so does a larger train.episodes (an
    extended run)."""
    from bayes_planet import yaml_config
    from bayes_planet.agent import config as config_lib

    cartpole = _load(agents, ["debug"])
    run = agents.grid(cartpole, tmp_path)[0]
    run["logdir"].mkdir(parents=True)
    yaml_config.write(config_lib.validate(config_lib.load(cartpole["base_presets"],
                                                          run["sets"])),
                      run["logdir"] / "config.yaml")
    assert agents.grid(cartpole, tmp_path)[0]["logdir"] == run["logdir"]
    longer = _load(agents, ["debug"], ["overrides=[eval.video=false, train.episodes=5]"])
    assert agents.grid(longer, tmp_path)[0]["logdir"] == run["logdir"]
    other = _load(agents, ["debug"], ["tasks=[cheetah-run]"])
    with pytest.raises(agents._config.ConfigError,
                       match=r"^.*seed0 holds a run of another config \(task: "
                             r"'cartpole-swingup' -> 'cheetah-run'\); give this grid its own "
                             r"out") as info:
        agents.grid(other, tmp_path)
    assert "\n" not in str(info.value)


def test_task_seeds_are_checked(agents):
    errors = agents._config.ConfigError
    with pytest.raises(errors, match=r"seeds_per_task: expected a mapping of tasks of the grid"):
        agents.task_seeds(_load(agents, [], ["seeds_per_task={cheetah-run: [1]}"]))
    with pytest.raises(errors, match="tasks: expected distinct task names"):
        agents.task_seeds(_load(agents, [], ["tasks=[cheetah-run, cheetah-run]"]))
    with pytest.raises(errors, match="integer seeds for reacher-easy, received"):
        agents.task_seeds(_load(agents, ["tasks"], ["seeds=[]"]))
    config = _load(agents, [], ["tasks=[reacher-easy, cheetah-run]", "seeds=[3]",
                                "seeds_per_task={cheetah-run: [0, 1]}"])
    assert agents.task_seeds(config) == {"reacher-easy": [3], "cheetah-run": [0, 1]}


def test_main_refuses_coverage_of_several_tasks_and_bad_table_steps(agents, tmp_path):
    errors = agents._config.ConfigError
    with pytest.raises(errors, match="coverage.enabled"):
        agents.main(["--preset", "debug", "--out", str(tmp_path), "--aggregate-only", "--set",
                     "tasks=[cartpole-swingup, reacher-easy]"])
    with pytest.raises(errors, match="table_steps: expected positive integer env steps"):
        agents.main(["--preset", "debug", "--out", str(tmp_path), "--aggregate-only", "--set",
                     "table_steps=[0]"])
    assert not (tmp_path / "config.yaml").exists()


def test_only_trains_a_subset_under_the_full_grids_names(agents, tmp_path):
    """A subset of a grid's novelties would drop the novelty from the labels (another
    logdir); ``--only`` keeps the grid and picks variants, and names the choices on a typo."""
    config = _load(agents, ["sparse"], ["seeds=[0, 1]"])
    runs = agents.grid(config, tmp_path)
    picked = agents.only_variants(runs, ["reparameterization_novelty10"])
    assert [(r["variant"], r["seed"]) for r in picked] == [
        ("reparameterization_novelty10", 0), ("reparameterization_novelty10", 1)]
    assert picked[0]["logdir"] == tmp_path / "runs" / "reparameterization_novelty10" / "seed0"
    assert agents.only_variants(runs, None) == runs
    subset = agents.grid(_load(agents, ["sparse"], ["novelties=[10.0]"]), tmp_path)
    assert subset[0]["variant"] == "reparameterization"  # what --only avoids
    with pytest.raises(agents._config.ConfigError,
                       match=r"^--only: expected variants of this grid, one of "
                             r"\['reparameterization_novelty0', .*received \['novelty10'\]$"):
        agents.only_variants(runs, ["novelty10"])
    with pytest.raises(agents._config.ConfigError, match="^--only: "):  # before writing out
        agents.main(["--preset", "debug", "--out", str(tmp_path / "grid"), "--only", "nope"])
    assert not (tmp_path / "grid").exists()


@pytest.mark.parametrize("preset, task, grids", [("pendulum", "pendulum-swingup", ["pole"]),
                                                  ("finger", "finger-spin", ["spinner"])])
def test_sparse_task_presets_are_the_sparse_grid_on_their_task(agents, tmp_path, preset, task,
                                                               grids):
    """`--preset sparse,pendulum` and `sparse,finger`: the sparse grid's variants on their
    task, runs the trainer accepts, and coverage grids of columns the task's physics has."""
    from bayes_planet import envs
    from bayes_planet.agent import config as config_lib

    config = _load(agents, ["sparse", preset])
    runs = agents.grid(config, tmp_path)
    assert {r["variant"] for r in runs} == {f"reparameterization_novelty{n}"
                                            for n in ("0", "10", "100")}
    assert all(f"task={task}" in r["sets"] for r in runs)
    config_lib.validate(config_lib.load(config["base_presets"], runs[0]["sets"]))
    env = envs.make(task, obs_type="state")
    env.reset()
    width = env.true_state()["physics_state"].size  # the replay's `physics` row
    assert [g["name"] for g in config["coverage"]["grids"]] == grids
    assert all(max(g["columns"]) < width for g in config["coverage"]["grids"])


def test_finger_optimism_grid_crosses_beta_with_the_critics_novelty(agents, tmp_path):
    """`--preset sparse,finger,finger_optimism`: β ∈ {0, 1} × value.novelty ∈ {0, 30} on
    finger-spin, planner novelty 0; each run trains with its value.novelty, and a run of
    the `finger` grid without any bonus is the same cell as beta0_value_novelty0 (the
    control is not trained twice: its config is the trainer's equal)."""
    from bayes_planet.agent import config as config_lib

    config = _load(agents, ["sparse", "finger", "finger_optimism"])
    runs = agents.grid(config, tmp_path)
    labels = {r["variant"] for r in runs}
    assert labels == {f"beta{b}_value_novelty{n}" for b in ("0", "1") for n in ("0", "30")}
    for run in runs:
        variant = next(v for v in agents.variants(config) if v["name"] == run["variant"])
        trained = config_lib.validate(config_lib.load(config["base_presets"], run["sets"]))
        assert trained.value.novelty == variant["value_novelty"]
        assert trained.planner.beta == variant["beta"] and trained.planner.novelty == 0.0
        assert trained.task == "finger-spin" and trained.planner.weight_samples == 2
    control = next(r for r in runs if r["variant"] == "beta0_value_novelty0" and r["seed"] == 0)
    finger = next(r for r in agents.grid(_load(agents, ["sparse", "finger"]), tmp_path / "f")
                  if r["variant"] == "reparameterization_novelty0" and r["seed"] == 0)
    assert control["cell"] == finger["cell"] and control["config"] == finger["config"]
    with pytest.raises(agents._config.ConfigError, match="value novelty"):
        agents.variants({**config, "value_novelties": []})


# ---------------------------------------------------------------- merging archives
ARCHIVES = {"comparison/comparison": "comparison", "comparison/comparison_fl": "comparison",
            "priors/priors": "priors", "exploration/exploration": "exploration"}


@pytest.mark.parametrize("archive", sorted(ARCHIVES))
def test_archived_results_still_merge(agents, tmp_path, archive):
    """experiments/archive/<study>/<grid>_results.json (one `task`, written before `tasks`) fills
    every finished cell of its preset's grid, and of a grid of several tasks."""
    path = ARCHIVE / f"{archive}_results.json"
    earlier = json.loads(path.read_text())
    finished = {(name, int(seed)) for name, v in earlier["variants"].items()
                for seed, run in v["runs"].items() if run["finished"]}
    sets = [f"overrides={json.dumps(earlier['config']['overrides'])}",
            f"seeds={json.dumps(earlier['config']['seeds'])}", f"merge=[{path}]"]
    config = _load(agents, [ARCHIVES[archive]], sets)
    runs = agents.grid(config, tmp_path)
    archived = agents.archived_runs(config)
    assert {(r["variant"], r["seed"]) for r in runs if r["cell"] in archived} == finished
    task = config["tasks"][0]
    several = _load(agents, [ARCHIVES[archive]], sets + [f"tasks=[{task}, reacher-easy]"])
    runs = agents.grid(several, tmp_path)
    assert {(r["variant"], r["seed"]) for r in runs if r["cell"] in archived} == {
        (f"{task}/{name}", seed) for name, seed in finished}
    with pytest.raises(agents._config.ConfigError, match="this grid has tasks=.'reacher-easy'"):
        agents.archived_runs({**config, "tasks": ["reacher-easy"]})


# ---------------------------------------------------------------- the tasks table
@pytest.fixture(scope="module")
def report(agents):
    return agents.report


def test_anchors_file(report, agents, tmp_path):
    """One return per (method, step) for every task of the tasks preset, rows for the sparse
    tasks (a method that did not publish one left out), all within DMC's [0, 1000]; a row
    with the wrong number of returns is refused."""
    anchors = report.read_anchors()
    assert anchors["columns"] == [("TD-MPC", 40000), ("TD-MPC", 60000), ("TD-MPC", 100000),
                                  ("TD-MPC2", 100000), ("DreamerV3", 50000),
                                  ("DreamerV3", 100000), ("SAC", 100000), ("BRO", 50000),
                                  ("BRO", 100000), ("SimbaV2", 100000), ("MR.Q", 50000),
                                  ("MR.Q", 100000), ("DC-MPC", 50000), ("DC-MPC", 100000)]
    for task in _load(agents, ["tasks"])["tasks"]:
        assert sorted(anchors["returns"][task]) == sorted(anchors["columns"]), task
    for task in ["cartpole-swingup_sparse", "pendulum-swingup"]:  # issue #26 item 6's others
        assert set(anchors["returns"][task]) <= set(anchors["columns"]), task
    assert set(_load(agents, ["sparse"])["tasks"]) <= set(anchors["returns"])
    for task, row in anchors["returns"].items():
        assert all(0 <= v <= 1000 for v in row.values()), task
    assert set(anchors["sources"]) == {m for m, _ in anchors["columns"]}
    text = report.ANCHORS_PATH.read_text().replace("SAC: [835]", "SAC: [835, 900]")
    (tmp_path / "anchors.yaml").write_text(text)
    with pytest.raises(ValueError, match=r"cartpole-swingup SAC: expected one return per step"):
        report.read_anchors(tmp_path / "anchors.yaml")


def test_eval_at_is_the_last_evaluation_at_or_before(report):
    curve = [(20, 2.0), (10, 1.0), (30, 3.0)]
    assert report.eval_at(curve, 25) == (20, 2.0)
    assert report.eval_at(curve, 30) == (30, 3.0)
    assert report.eval_at(curve, 9) is None
    assert [report.steps_label(s) for s in (50000, 49600, 360)] == ["50k", "49.6k", "360"]


def _run(evals, env_steps):
    return {"env_steps": env_steps, "curves": {"eval_return": evals}}


def _cell(values, n, note):
    return f"{np.mean(values):.0f} ± {np.std(values):.0f} ({n}{note})"


def test_return_cells(report):
    """Each case of the module docstring: exact evaluations, an earlier evaluation named,
    seeds that did not reach a step, the last evaluations once, '—' otherwise."""
    a, b, c = 100.0, 300.0, 700.0
    runs = [_run([(10_000, a), (20_000, b)], 20_000), _run([(10_000, c)], 15_000)]
    steps = [5_000, 10_000, 15_000, 20_000, 30_000, 40_000]
    assert report.return_cells(runs, steps) == [
        "—",                                       # reached, no evaluation yet
        _cell([a, c], "n=2", ""),                  # both evaluated at 10k
        _cell([a, c], "n=2", "; eval at 10k"),     # both reached 15k, evaluated at 10k
        _cell([b], "n=1 of 2", ""),                # one seed reached 20k
        _cell([b, c], "n=2", "; last, at 10k–20k"),  # none reached: the last evaluations
        "—"]
    assert report.return_cells([], steps) == ["—"] * len(steps)


def _variant(task, label, runs):
    return {"task": task, "label": label, "runs": dict(enumerate(runs))}


def test_tasks_table_rows_and_anchor_columns(report):
    anchors = {"columns": [("X", 100), ("Y", 200)], "sources": {"X": "x.csv", "Y": "y.csv"},
               "returns": {"t1": {("X", 100): 5, ("Y", 200): 6}, "t2": {("Y", 200): 7}},
               "path": "experiments/anchors.yaml"}
    results = {"variants": {
        "t1/det": _variant("t1", "det", [_run([(100, 1.0)], 100)]),
        "t1/bayes": _variant("t1", "bayes", [_run([(100, 2.0)], 100)]),
        "t2/det": _variant("t2", "det", [_run([(50, 3.0)], 50)]),
        "t2/bayes": _variant("t2", "bayes", [])}}
    lines = report.tasks_table(results, [200, 100], anchors).splitlines()
    assert "* X: x.csv" in lines and "* Y: y.csv" in lines
    table = [[c.strip() for c in line.strip("|").split("|")] for line in lines
             if line.startswith("| ")]
    assert table[0] == ["task", "det 100", "det 200", "bayes 100", "bayes 200", "X 100",
                        "Y 200"]
    assert table[1] == ["t1", "1 ± 0 (n=1)", "1 ± 0 (n=1; last, at 100)", "2 ± 0 (n=1)",
                        "2 ± 0 (n=1; last, at 100)", "5", "6"]
    assert table[2] == ["t2", "3 ± 0 (n=1; last, at 50)", "—", "—", "—", "—", "7"]
    # Final N-episode evaluations: a "final" column for the variants that have one.
    results["variants"]["t1/det"]["runs"][0]["final_eval"] = {
        "mean": 4.0, "std": 1.0, "episodes": 10, "returns": [3.0, 5.0] * 5, "env_steps": 100}
    results["variants"]["t2/det"]["runs"][0]["final_eval"] = None
    lines = report.tasks_table(results, [100], anchors).splitlines()
    table = [[c.strip() for c in line.strip("|").split("|")] for line in lines
             if line.startswith("| ")]
    assert table[0] == ["task", "det 100", "det final", "bayes 100", "X 100", "Y 200"]
    assert table[1][:3] == ["t1", "1 ± 0 (n=1)", "4 ± 0 (n=1; 10 ep at 100)"]
    assert table[2][:3] == ["t2", "3 ± 0 (n=1; last, at 50)", "—"]
    assert any("'final': each run's N-episode evaluation" in line for line in lines)


def test_curves_count_the_seeds_that_ran(agents):
    """The learning curves' legend says over how many seeds each variant's mean is: the seeds
    with evaluations, not the grid's (a partly run grid's later seeds have none)."""
    ran = {"curves": {"eval_return": [[1000, 1.0]]}}
    variant = {"runs": {"0": ran, "1": {"curves": {"eval_return": []}}, "2": {}}}
    assert agents.report._ran(variant) == 1
    assert agents.report._ran({"runs": {"0": ran, "1": ran}}) == 2


# ---------------------------------------------------------------- end to end
def _table(path):
    lines = [line for line in pathlib.Path(path).read_text().splitlines()
             if line.startswith("| ")]
    header, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return header, {row[0]: dict(zip(header, row, strict=True)) for row in rows}


@pytest.mark.slow
def test_two_task_debug_grid(agents, tmp_path):
    """Four tiny `bayes-planet train --preset debug` runs (2 tasks x 2 estimators), the tasks
    table at steps before any evaluation, at the last evaluation and beyond it, probes."""
    sets = ["--set", "tasks=[cartpole-swingup, reacher-easy]", "--set", "coverage.enabled=false"]
    results = agents.main(["--preset", "debug", "--out", str(tmp_path), "--parallel", "2",
                           *sets])
    assert results["failed"] == []
    names = [f"{t}/{e}" for t in ("cartpole-swingup", "reacher-easy")
             for e in ("deterministic", "reparameterization")]
    assert list(results["variants"]) == names
    for name in names:
        assert (tmp_path / "runs" / name / "seed0" / "metrics.jsonl").exists()
    for name in ("learning_curves.png", "weight_kl.png", "tasks_table.md"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert (tmp_path / "tasks_table.md").read_text() in (tmp_path / "summary.md").read_text()
    final = {n: v["runs"]["0"]["curves"]["eval_return"][-1] for n, v in
             results["variants"].items()}  # [env steps, return] of each run's only evaluation
    anchors = agents.report.read_anchors()
    anchor_cells = {f"{m} {agents.report.steps_label(s)}": f"{anchors['returns'][t][m, s]:g}"
                    for t in ("cartpole-swingup",) for m, s in anchors["columns"]}
    # The default columns (50k, 100k): not reached, the last evaluation once, then '—'.
    header, rows = _table(tmp_path / "tasks_table.md")
    assert list(rows) == ["cartpole-swingup", "reacher-easy"]
    assert header[1:5] == ["deterministic 50k", "deterministic 100k", "reparameterization 50k",
                           "reparameterization 100k"]
    for name, (steps, value) in final.items():
        task, label = name.split("/")
        assert rows[task][f"{label} 50k"] == f"{value:.0f} ± 0 (n=1; last, at {steps:g})"
        assert rows[task][f"{label} 100k"] == "—"
    assert {k: rows["cartpole-swingup"][k] for k in anchor_cells} == anchor_cells
    # Re-aggregated at 1 step (reached, no evaluation yet), the last evaluation and one more.
    last = int(max(steps for steps, _ in final.values()))
    again = agents.main(["--preset", "debug", "--out", str(tmp_path), "--aggregate-only",
                         *sets, "--set", f"table_steps=[1, {last}, {last + 1}]"])
    assert {r["status"] for v in again["variants"].values() for r in v["runs"].values()} == {
        "finished"}
    _, rows = _table(tmp_path / "tasks_table.md")
    for name, (steps, value) in final.items():
        task, label = name.split("/")
        cells = [rows[task][f"{label} {s}"] for s in (1, last, last + 1)]
        exact, marked = f"{value:.0f} ± 0 (n=1)", f"{value:.0f} ± 0 (n=1; last, at {steps:g})"
        assert cells == ["—", exact, marked] if steps == last else ["—", marked, "—"], name
    # Probes: each task's runs on held-out episodes of their own task.
    probed = agents.main(["--preset", "debug", "--out", str(tmp_path), *sets, "--probe",
                          "--set", "probe.episodes=1"])
    for task in ("cartpole-swingup", "reacher-easy"):
        assert len(list((tmp_path / "probe_test_episodes" / task).glob("*.npz"))) == 1, task
    assert all(v["summary"]["probe"]["per_episode"]["closed_loop/ridge/velocity"]["n"] == 1
               for v in probed["variants"].values())
