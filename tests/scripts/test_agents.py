"""experiments/agents.py: the grid (names, commands, priors, presets and the archives that fill
their cells, validation), its backends, its launches, and its debug preset end to end."""

import json
import math

import numpy as np
import pytest

from tests.scripts import _experiments


@pytest.fixture(scope="module")
def agents():
    return _experiments.load("agents")


# ---------------------------------------------------------------- agents: pure parts
def test_agent_grid_names_and_commands(agents, tmp_path):
    load = agents._config.load_dict
    config = load(agents.CONFIG_PATH, ["exploration"])
    assert [v["name"] for v in agents.variants(config)] == ["beta0", "beta1"]
    runs = agents.grid(config, tmp_path)
    assert len(runs) == 6 and runs[0]["logdir"] == tmp_path / "runs" / "beta0" / "seed0"
    command = agents.train_command(runs[-1], config["base_presets"])
    assert command[command.index("--preset") + 1] == "planet,cpu"
    assert "planner.beta=1.0" in command and "planner.weight_samples=4" in command
    assert "task=cartpole-swingup_sparse" in command and "seed=2" in command
    config = load(agents.CONFIG_PATH, ["comparison"])
    names = [v["name"] for v in agents.variants(config)]
    assert names == ["deterministic", "reparameterization", "flipout", "local_reparameterization"]
    config = load(agents.CONFIG_PATH, [], ["estimators=[flipout, deterministic]",
                                           "betas=[0, 2]"])
    assert [v["name"] for v in agents.variants(config)][:2] == ["flipout_beta0", "flipout_beta2"]
    config = load(agents.CONFIG_PATH, ["priors"])
    runs = agents.grid(config, tmp_path)
    assert [r["variant"] for r in runs[:2]] == ["reparameterization_normal",
                                                "reparameterization_scale_mixture"]
    command = agents.train_command(runs[1], config["base_presets"])
    assert "model.weight_prior=scale_mixture" in command and "seed=0" in command
    with pytest.raises(agents._config.ConfigError, match="model.weight_prior"):
        agents.grid(load(agents.CONFIG_PATH, [], ["weight_priors=[laplace]"]), tmp_path)
    # planner.novelty is a dimension too: the sparse grid, and its cells differ by it.
    config = load(agents.CONFIG_PATH, ["sparse"])
    runs = agents.grid(config, tmp_path)
    assert [r["variant"] for r in runs[:3]] == ["reparameterization_novelty0",
                                                "reparameterization_novelty10",
                                                "reparameterization_novelty100"]
    assert runs[0]["cell"] != runs[2]["cell"] and runs[0]["cell"][3] == 0.0
    assert runs[2]["config"]["planner"]["novelty"] == 100.0
    assert "planner.novelty=100.0" in agents.train_command(runs[2], config["base_presets"])
    with pytest.raises(agents._config.ConfigError, match="Received: planner.novelty=10.0"):
        agents.grid({**config, "estimators": ["deterministic"]}, tmp_path)


def test_agent_grid_prior_default_is_the_trainers_and_merges_check_it(agents, tmp_path):
    """The grid's default weight prior is the trainer's (configs.yaml), the presets of the
    archived experiments keep the N(0, 1) they ran with, and merging an archive run with
    another prior is refused (archives from before the key count as N(0, 1))."""
    from bayes_planet.agent import config as config_lib

    load = agents._config.load_dict
    assert load(agents.CONFIG_PATH, [])["weight_priors"] == [config_lib.load().model.weight_prior]
    for preset in ("comparison", "exploration"):
        assert load(agents.CONFIG_PATH, [preset])["weight_priors"] == ["normal"]
    config = load(agents.CONFIG_PATH, ["comparison"])
    archive = tmp_path / "old_results.json"
    # An archive from before `tasks` and `weight_priors` (and before runs kept their config):
    # one `task`, N(0, 1) priors, its base presets over PlaNet's defaults (today's `planet`).
    assert config["base_presets"] == ["planet", "cpu"]
    earlier = {"task": config["tasks"][0], "base_presets": ["cpu"],
               "overrides": config["overrides"]}
    old_run = {"finished": True, "curves": {"eval_return": [[1000, 1.0]]}}
    archive.write_text(json.dumps({"config": earlier, "variants": {"deterministic": {
        "estimator": "deterministic", "beta": 0.0, "runs": {"0": old_run}}}}))
    assert list(agents.archived_runs({**config, "merge": [str(archive)]})) == [
        (config["tasks"][0], "deterministic", 0.0, 0.0, 0.0, "normal", 0)]  # no bonus either
    with pytest.raises(agents._config.ConfigError,
                       match=r"weight_priors=\['normal'\], this grid has weight_priors="):
        agents.archived_runs({**config, "merge": [str(archive)],
                              "weight_priors": ["scale_mixture"]})


#: The archives the notes merge into a preset's grid (``--set 'merge=[...]'``: no preset
#: reads from the archive).
PRESET_ARCHIVES = {
    "proprio_mf": "experiments/archive/proprio/proprio_mf_results.json",
    "finger_spread": "experiments/archive/finger_exploration/finger_spread_results.json",
    "sparse": "experiments/archive/sparse_cartpole/sparse_proprio_results.json"}


def test_every_agent_preset_builds_and_its_archives_fill_their_cells(agents, tmp_path):
    """Each preset of experiments/agents.yaml (and the documented combinations sparse,pendulum,
    sparse,cup, sparse,finger and sparse,finger,finger_optimism)
    validates every run's training config, and the archives the notes merge into a preset
    (PRESET_ARCHIVES) still fill its cells: a preset or configs.yaml edited so that an archived
    run no longer is the agent the preset names fails here, naming the keys, not when someone
    reruns it."""
    load = agents._config.load_dict
    names = agents._config.presets(agents.CONFIG_PATH)
    assert {"tasks", "proprio_mf", "sparse", "pendulum", "cup", "finger", "debug"} <= set(names)
    filled = {}
    # finger_optimism only adds the critic's novelty to `sparse,finger` (the value-aware agent):
    # alone, on the `cpu` agent without a critic, its value.novelty is refused; it is
    # validated in that combination.
    alone = [[name] for name in names if name != "finger_optimism"]
    for presets in alone + [["sparse", "pendulum"], ["sparse", "cup"], ["sparse", "finger"],
                            ["sparse", "finger", "finger_optimism"]]:
        name = "_".join(presets)
        merge = [f"merge=[{_experiments.EXPERIMENTS.parent / PRESET_ARCHIVES[name]}]"
                 ] if name in PRESET_ARCHIVES else []
        config = load(agents.CONFIG_PATH, presets, merge)
        assert load(agents.CONFIG_PATH, presets)["merge"] == [], presets
        runs = agents.grid(config, tmp_path / name)
        archived = agents.archived_runs(config)
        local = agents.local_runs(runs, archived)
        assert set(archived) <= {run["cell"] for run in runs}, presets
        assert len(local) == len(runs) - len(archived), presets
        filled[name] = len(archived)
    # proprio_mf: the deterministic seeds 0-2 and mean-field seeds 0-1 are archived runs;
    # finger_spread: its one seed, finished at 100k; sparse: novelty 0 seed 0 at least (its
    # archive grows with the grid); the tasks layered on it (sparse,pendulum, ...) merge none.
    assert filled["proprio_mf"] >= 5
    assert filled["finger_spread"] == 1
    assert filled["sparse"] >= 1
    assert filled["sparse_pendulum"] == filled["sparse_cup"] == filled["sparse_finger"] == 0


def test_agent_grid_validates_every_run_before_launching(agents, tmp_path):
    from bayes_planet.yaml_config import ConfigError

    config = agents._config.load_dict(agents.CONFIG_PATH, ["debug"], ["overrides=[model.nope=1]"])
    with pytest.raises(ConfigError, match="unknown config key 'model.nope'"):
        agents.grid(config, tmp_path)
    assert not (tmp_path / "runs").exists()


def test_coverage_cells_wrap_angles_and_clip(agents):
    spec = {"columns": [0, 1], "low": [-math.pi, -1.0], "high": [math.pi, 1.0],
            "wrap": [True, False]}
    physics = np.array([[0.1, 0.1],             # cell (2, 2) of 4 x 4
                        [0.1 + 2 * math.pi, 0.2],   # same angle after a full turn
                        [1.5 * math.pi, -5.0],      # -> -pi/2: row 1; clipped to column 0
                        [-3.0, 0.99]])              # row 0, column 3
    assert agents.coverage_cells(physics, spec, 4) == {2 * 4 + 2, 1 * 4 + 0, 0 * 4 + 3}


def test_mean_curve_over_seeds_of_different_length(agents):
    curve = agents.mean_curve([[(0, 0.0), (10, 10.0)], [(0, 2.0), (5, 2.0), (20, 2.0)]])
    assert curve["steps"] == [0, 5, 10, 20]
    assert curve["mean"] == pytest.approx([1.0, 3.5, 6.0, 2.0])
    assert curve["std"] == pytest.approx([1.0, 1.5, 4.0, 0.0])
    assert curve["seeds"] == [2, 2, 2, 1]
    assert agents.mean_curve([[], []]) is None


def test_training_seconds_sum_resumed_segments(agents):
    records = [{"seconds": s} for s in (1.0, 5.0, 2.0, 4.0)]  # killed after 5 s, resumed
    assert agents.training_seconds(records) == 9.0


def test_launch_evaluates_each_run_as_it_finishes(agents, tmp_path, monkeypatch):
    """A run's final evaluation follows its training at once (not the whole grid's end); a
    failed run gets none."""
    import sys

    codes = {0: 0, 1: 3, 2: 0}
    monkeypatch.setattr(agents, "train_command", lambda run, presets: [
        sys.executable, "-c", f"raise SystemExit({codes[run['seed']]})"])
    events = []
    monkeypatch.setattr(agents, "final_eval",
                        lambda runs, say, name: events.append(("eval", runs[0]["seed"])) or {})
    runs = [{"logdir": tmp_path / f"seed{s}", "variant": "v", "seed": s, "episodes": 1}
            for s in codes]
    status = agents.launch(runs, [], say=lambda line: events.append(
        line.split(": ")[-1].split(" in ")[0]))  # "done in 1 s" -> "done"
    assert events[1:] == ["started", "done", ("eval", 0), "started",
                          "FAILED with code 3, see " + str(tmp_path / "seed1.launch") + "/train.log",
                          "started", "done", ("eval", 2)]
    assert list(status.values()) == ["trained", "failed (3)", "trained"]


def test_launch_says_where_a_run_or_branch_starts(agents, tmp_path, monkeypatch):
    """A resumed run says its episode; a branch copied at its parent's episode N says it was
    branched there (not "resuming"), and resuming once it has trained on."""
    import sys

    monkeypatch.setattr(agents, "train_command", lambda run, presets: [sys.executable, "-c", ""])
    monkeypatch.setattr(agents, "final_eval", lambda runs, say, name: {})
    runs = []
    for seed, on_disk, point in ((0, 0, None), (1, 2, None), (2, 3, 3), (3, 4, 3)):
        logdir = tmp_path / f"seed{seed}"
        (logdir / "episodes").mkdir(parents=True)
        for i in range(on_disk):
            (logdir / "episodes" / f"{i:06d}-16.npz").touch()
        runs.append({"logdir": logdir, "variant": "v", "seed": seed, "episodes": 9,
                     **({"branch_point": point} if point else {})})
    said = []
    agents.launch(runs, [], say=said.append)
    started = [line.split("] ")[1] for line in said if ": started" in line]
    assert started == ["v seed 0: started", "v seed 1: started (resuming at episode 2)",
                       "v seed 2: started (branched at episode 3)",
                       "v seed 3: started (resuming at episode 4)"]


@pytest.mark.parametrize("sets, message", [
    (["backend.name=x"], r"^Expected backend\.name in \['local', 'ray'\]\. Received: "
                         r"backend\.name='x'$"),
    (["backend.num_cpus=0"], r"^Expected a positive integer\. Received: backend\.num_cpus=0$"),
    (["backend.address=''"], r"^Expected null \(a local Ray\) or a Ray cluster's address .*"
                             r"Received: backend\.address=''$"),
])
@pytest.mark.parametrize("script", ["agents", "branches"])
def test_grid_backend_is_checked_in_one_line_before_anything_is_written(script, sets, message,
                                                                        tmp_path):
    """Both grids (the launcher is agents.py's) take the same ``backend`` key and refuse a
    bad one in one line, before writing."""
    module = _experiments.load(script)
    argv = ["--preset", "debug", "--out", str(tmp_path / "out")]
    for item in sets:
        argv += ["--set", item]
    with pytest.raises(module._config.ConfigError, match=message):
        module.main(argv)
    assert not (tmp_path / "out").exists()


def test_ray_backend_without_ray_is_one_line_naming_the_extra(agents, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(agents._config.ConfigError,
                       match=r'^Expected Ray installed for the ray backend: pip install -e '
                             r'"\.\[ray\]"\. Received: backend\.name=\'ray\'$'):
        agents.main(["--preset", "debug", "--out", str(tmp_path / "out"),
                     "--set", "backend.name=ray"])
    assert not (tmp_path / "out").exists()
    assert isinstance(agents.make_backend(agents._config.load_dict(agents.CONFIG_PATH)),
                      agents.LocalBackend)  # the default needs no Ray


def test_grid_backends_default_is_one_and_importing_agents_imports_no_ray(agents):
    """branches.yaml's ``backend`` defaults equal agents.yaml's (one launcher); Ray is an
    optional extra: loading agents.py does not import it."""
    import subprocess
    import sys

    branches = _experiments.load("branches")
    assert (agents._config.load_dict(branches.CONFIG_PATH)["backend"]
            == agents._config.load_dict(agents.CONFIG_PATH)["backend"]
            == {"name": "local", "address": None, "num_cpus": 1})
    code = ("import sys; from bayes_planet.experiment import load_script; "
            f"load_script({str(_experiments.EXPERIMENTS / 'agents.py')!r}); "
            "sys.exit('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


# ---------------------------------------------------------------- agents: end to end
@pytest.mark.slow  # ~2 min: the whole grid of debug runs; the launcher itself is tested above
def test_agents_debug_preset(agents, tmp_path):
    """Two tiny `bayes-planet train --preset debug` subprocesses, run side by side."""
    results = agents.main(["--preset", "debug", "--out", str(tmp_path), "--parallel", "2"])
    assert results["failed"] == []
    for name in ("config.yaml", "results.json", "summary.md", "learning_curves.png",
                 "weight_kl.png", "coverage.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    variants = json.loads((tmp_path / "results.json").read_text())["variants"]
    assert list(variants) == ["deterministic", "reparameterization"]
    for v in variants.values():
        run = v["runs"]["0"]
        assert run["status"] == "trained" and run["finished"] and run["episodes"] == 3, run
        assert run["final_eval_return"] is not None and run["training_seconds"] > 0
        assert 0 < run["coverage"]["pole"] < 1 and 0 < run["coverage"]["cart"] < 1
        assert v["curves"]["eval_return"]["seeds"] == [1]
    assert variants["deterministic"]["runs"]["0"]["final_weight_kl"] == 0
    assert variants["reparameterization"]["runs"]["0"]["final_weight_kl"] > 0
    _check_merge_of_archived_runs(agents, tmp_path / "results.json", variants, tmp_path / "m")
    # Rerunning skips finished runs; --aggregate-only launches nothing either.
    again = agents.main(["--preset", "debug", "--out", str(tmp_path)])
    assert {r["status"] for v in again["variants"].values() for r in v["runs"].values()} == {
        "finished before"}
    agents.main(["--preset", "debug", "--out", str(tmp_path), "--aggregate-only"])
    (launch,) = agents.launches({"logdir": tmp_path / "runs" / "deterministic" / "seed0"})
    assert launch["outcome"] == "finished" and launch["seconds"] > 0
    # Latent probes of the finished runs, with sampled and posterior-mean weights.
    probed = agents.main(["--preset", "debug", "--out", str(tmp_path), "--probe", "--set",
                          "probe.episodes=1", "--set", "probe.weights=[per_episode, mean]"])
    assert (tmp_path / "probe.png").stat().st_size > 0
    assert len(list((tmp_path / "probe_test_episodes").glob("*.npz"))) == 1
    modes = {n: sorted(v["summary"]["probe"]) for n, v in probed["variants"].items()}
    assert modes == {"deterministic": ["per_episode"], "reparameterization": ["mean", "per_episode"]}
    r2 = probed["variants"]["reparameterization"]["summary"]["probe"]["mean"]
    assert r2["closed_loop/ridge/velocity"]["n"] == 1
    summary = (tmp_path / "summary.md").read_text()
    assert "| reparameterization (mean weights) | ridge |" in summary
    with pytest.raises(agents._config.ConfigError, match="probe.weights"):
        agents.main(["--preset", "debug", "--out", str(tmp_path), "--aggregate-only", "--set",
                     "probe.weights=[median]"])
    _check_final_evaluations(agents, tmp_path)


def _check_final_evaluations(agents, out):
    """`final_eval.episodes`: `bayes-planet eval` of each finished run's last checkpoint into
    ``<run>.eval`` beside it, in the summary and the tasks table; a rerun reuses a current
    one, another episode count evaluates again (the same first episodes)."""
    grid = ["--preset", "debug", "--out", str(out)]
    results = agents.main([*grid, "--set", "final_eval.episodes=2"])
    assert results["failed"] == []
    for v in results["variants"].values():
        run = v["runs"]["0"]
        final = run["final_eval"]
        assert final["episodes"] == 2 and len(final["returns"]) == 2
        assert final["mean"] == pytest.approx(np.mean(final["returns"]))
        assert final["env_steps"] == run["env_steps"] == 360  # checkpoint 3 of 3
        assert v["summary"]["final_eval"]["n"] == 1
    det = out / "runs" / "deterministic" / "seed0.eval" / "eval.json"
    assert json.loads(det.read_text())["returns"] == (
        results["variants"]["deterministic"]["runs"]["0"]["final_eval"]["returns"])
    table = (out / "tasks_table.md").read_text()
    assert "| deterministic 50k | deterministic 100k | deterministic final |" in table
    assert "(n=1; 2 ep at 360)" in table
    assert "final N-episode eval" in (out / "summary.md").read_text()
    before, returns = det.stat().st_mtime_ns, json.loads(det.read_text())["returns"]
    agents.main([*grid, "--set", "final_eval.episodes=2"])
    assert det.stat().st_mtime_ns == before  # current: not evaluated again
    more = agents.main([*grid, "--set", "final_eval.episodes=3", "--only", "deterministic"])
    assert more["variants"]["deterministic"]["runs"]["0"]["final_eval"]["episodes"] == 3
    assert more["variants"]["reparameterization"]["runs"]["0"]["final_eval"] is None  # stale
    assert json.loads(det.read_text())["returns"][:2] == returns  # seeded by episode index
    replanned = dict(json.loads(det.read_text()), planning=["planner.cem.candidates=200"])
    det.write_text(json.dumps(replanned))  # e.g. a hand-run `eval --set ... --out` there
    again = agents.main([*grid, "--aggregate-only", "--set", "final_eval.episodes=3"])
    assert again["variants"]["deterministic"]["runs"]["0"]["final_eval"] is None
    with pytest.raises(agents._config.ConfigError,
                       match=r"^Expected a non-negative integer \(0: off\)\. Received: "
                             r"final_eval\.episodes=-1$"):
        agents.main([*grid, "--aggregate-only", "--set", "final_eval.episodes=-1"])


def _check_merge_of_archived_runs(agents, archive, variants, out):
    """An archived results.json fills another grid's cells: nothing is trained again, the
    merged runs aggregate to the archived numbers; a different grid or a twice-archived run
    is refused."""
    merge = f"merge=[{archive}]"
    merged = agents.main(["--preset", "debug", "--out", str(out), "--set", merge])
    assert merged["failed"] == [] and not (out / "runs").exists()
    for name, v in merged["variants"].items():
        run = v["runs"]["0"]
        assert run["status"] == f"merged from {archive}"
        assert run["final_eval_return"] == variants[name]["runs"]["0"]["final_eval_return"]
        assert v["curves"] == variants[name]["curves"]
        assert v["summary"]["final_eval_return"]["n"] == 1
    errors = agents._config.ConfigError
    with pytest.raises(errors, match=r"merge: deterministic seed 0 \(merged from .*\) was trained "
                                     r"with another config than this grid's \(train\.episodes: "
                                     r"3 -> 4\)"):
        agents.main(["--preset", "debug", "--out", str(out), "--set", merge,
                     "--set", "overrides=[eval.video=false, train.episodes=4]"])
    # The same agent spelled otherwise (its preset's value as an override), from an archive
    # of an older layout (a key added since is read as its upgrade's value): merged.
    earlier = json.loads(archive.read_text())
    for variant in earlier["variants"].values():
        del variant["runs"]["0"]["config"]["planner"]["exploration"]
    older = out.parent / "older_results.json"
    older.write_text(json.dumps(earlier))
    respelled = agents.main(["--preset", "debug", "--out", str(out), "--set", f"merge=[{older}]",
                             "--set", "overrides=[eval.video=false, train.episodes=3]"])
    assert [v["runs"]["0"]["status"] for v in respelled["variants"].values()] == [
        f"merged from {older}"] * len(variants)
    assert not (out / "runs").exists()
    with pytest.raises(errors, match="deterministic seed 0 is archived twice"):
        agents.main(["--preset", "debug", "--out", str(out), "--set",
                     f"merge=[{archive}, {archive}]"])
    with pytest.raises(errors, match="expected a results.json file"):
        agents.main(["--preset", "debug", "--out", str(out), "--set", f"merge=[{out}/no.json]"])
    # A run keeps its training config: the same preset names that meant another config then
    # (a preset edited since) are refused, naming the key.
    earlier = json.loads(archive.read_text())
    run = earlier["variants"]["deterministic"]["runs"]["0"]
    assert run["config"]["train"]["updates_per_episode"] == 3
    run["config"]["train"]["updates_per_episode"] = 4
    edited = out.parent / "edited_results.json"
    edited.write_text(json.dumps(earlier))
    with pytest.raises(errors, match=r"merge: deterministic seed 0 \(merged from .*\) was trained "
                                     r"with another config than this grid's \(train\."
                                     r"updates_per_episode: 4 -> 3\)"):
        agents.main(["--preset", "debug", "--out", str(out), "--set", f"merge=[{edited}]"])
