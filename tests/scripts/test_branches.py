"""experiments/branches.py: A/B tests from one trained state (arms × seeds of branches)."""

import json
import pathlib
import subprocess
import sys

import pytest

from bayes_planet import yaml_config
from bayes_planet.agent import config as config_lib
from tests.scripts import _experiments


@pytest.fixture(scope="module")
def branches():
    return _experiments.load("branches")


def _fake_parent(path, checkpoints=(3,)):
    """A run folder as `branch_point` and `grid` read it: the debug config and checkpoints
    of one variable, the checkpoint's number (readable, as a branch checkpoint must be)."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml_config.dump(config_lib.load(["debug"])))
    for number in checkpoints:
        _fake_checkpoint(path, number)
    return path


def _fake_checkpoint(path, number):
    """Checkpoint ``number`` with its episodes and metrics row (as `run.branch` copies them)."""
    import tensorflow as tf

    tf.train.Checkpoint(number=tf.Variable(float(number))).write(
        str(path / "checkpoints" / f"ckpt-{number:06d}" / "ckpt"))
    (path / "episodes").mkdir(exist_ok=True)
    for i in range(number):
        (path / "episodes" / f"{i:06d}-16.npz").touch()
    with open(path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"episode": number, "env_steps": 16 * number, "return": 1.0,
                            "seconds": 1.0}) + "\n")


def _checkpoint_number(folder):
    import tensorflow as tf

    return tf.train.load_variable(str(folder / "ckpt"), "number/.ATTRIBUTES/VARIABLE_VALUE")


def _debug(branches, parent, *sets):
    overrides = [f"parent={parent}", *sets]
    return branches._config.load_dict(branches.CONFIG_PATH, ["debug"], overrides)


def test_grid_commands_are_branches_of_the_newest_checkpoint(branches, tmp_path):
    parent = _fake_parent(tmp_path / "parent", checkpoints=(2, 3))
    config = _debug(branches, parent, "seeds=[0, 1]", "episodes=4")
    runs = branches.grid(config, tmp_path / "out")
    assert [(r["variant"], r["seed"]) for r in runs] == [
        ("control", 0), ("horizon3", 0), ("control", 1), ("horizon3", 1)]  # seed-major
    run = runs[3]
    assert run["logdir"] == tmp_path / "out" / "runs" / "horizon3" / "seed1"
    assert branches.agents.launch_logs(run) == tmp_path / "out" / "runs" / "horizon3" / \
        "seed1.launch"
    assert run["command"][1:] == [
        "-m", "bayes_planet.agent.cli", "train", "--branch-from", str(parent), "--logdir",
        str(run["logdir"]), "--quiet", "--set", "seed=1", "--set", "train.episodes=7",
        "--set", "eval.video=false", "--set", "planner.horizon=3"]
    assert run["branch_point"] == 3 and run["episodes"] == 7
    assert run["config"]["planner"]["horizon"] == 3 and run["config"]["seed"] == 1
    assert runs[2]["config"]["planner"]["horizon"] == config_lib.load(["debug"]).planner.horizon


@pytest.mark.parametrize("sets, message", [
    (["parent=null"], r"^Expected the trained run's logdir\. Received: parent=None$"),
    (["arms=[a, b]"], r"Received: arms=\['a', 'b'\]$"),
    (["arms={}"], r"Received: arms=\{\}$"),
    (["arms={a/b: []}"], r"\(a folder\)\. Received: arms='a/b'$"),
    (["arms={a: planner.horizon=3}"], r"^Expected a list of key=value strings\. Received: "
                                      r"arms\.a='planner\.horizon=3'$"),
    (["overrides=[1]"], r"^Expected a list of key=value strings\. Received: overrides=\[1\]$"),
    (["seeds=[0, 0]"], r"^Expected distinct integer seeds\. Received: seeds=\[0, 0\]$"),
    (["episodes=0"], r"^Expected a positive integer\. Received: episodes=0$"),
    (["eval.episodes=0"], r"^Expected a positive integer\. Received: eval\.episodes=0$"),
    (["arms={big: [model.deter=64]}"],
     r"^arm big: a branch keeps its parent's data and model, but it changes model\.deter"),
    (["arms={a: [planner.horizon=0]}"], r"^arm a: .*planner\.horizon"),
    (["arms={a: [no.such_key=1]}"], r"^arm a: unknown config key 'no'"),
    (["eval.planning=[train.batch_size=8]"],
     r"^arm control: Expected a planning key .*Received: train\.batch_size=8$"),
])
def test_grid_refuses_bad_arms_in_one_line(branches, tmp_path, sets, message):
    parent = _fake_parent(tmp_path / "parent")
    with pytest.raises(branches._config.ConfigError, match=message):
        branches.grid(_debug(branches, parent, *sets), tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_grid_refuses_a_parent_without_a_run_or_checkpoint(branches, tmp_path):
    with pytest.raises(branches._config.ConfigError, match=r"^parent: .*missing"):
        branches.grid(_debug(branches, tmp_path / "missing"), tmp_path / "out")
    parent = _fake_parent(tmp_path / "parent", checkpoints=())
    with pytest.raises(branches._config.ConfigError, match=r"^parent: no checkpoint in "):
        branches.grid(_debug(branches, parent), tmp_path / "out")


def _fake_branch(run, parent, point, episodes, returns, eval_returns=None, planning=()):
    """A branch as the trainer and `bayes-planet eval --out` leave it (rows and files)."""
    logdir = run["logdir"]
    (logdir / "episodes").mkdir(parents=True)
    for i in range(episodes):
        (logdir / "episodes" / f"{i:06d}-16.npz").write_bytes(b"")
    (logdir / "config.yaml").write_text(yaml_config.dump(yaml_config.Config(run["config"])))
    (logdir / "branch.json").write_text(json.dumps({"parent": str(parent), "episode": point}))
    rows = [{"episode": e + 1, "env_steps": 0, "return": r, "critic_loss": 2.0 * r,
             "seconds": 1.0} for e, r in enumerate(returns)]
    (logdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if eval_returns is not None:
        target = logdir.with_name(logdir.name + ".eval")
        target.mkdir()
        mean = sum(eval_returns) / len(eval_returns)
        (target / "eval.json").write_text(json.dumps({
            "checkpoint": episodes, "episodes": len(eval_returns), "planning": list(planning),
            "returns": eval_returns, "mean": mean, "std": 0.0}))


def test_aggregate_pairs_arms_by_seed_and_counts_only_the_branch_episodes(branches, tmp_path):
    parent = _fake_parent(tmp_path / "parent")
    out = tmp_path / "out"
    config = _debug(branches, parent, "seeds=[0, 1]", "episodes=2", "eval.episodes=2")
    runs = {(r["variant"], r["seed"]): r for r in branches.grid(config, out)}
    # Episodes 1-3 are the parent's (copied rows), 4-5 the branch's own.
    _fake_branch(runs["control", 0], parent, 3, 5, [9, 9, 9, 10, 20], [100.0, 200.0])
    _fake_branch(runs["control", 1], parent, 3, 5, [9, 9, 9, 30, 40], [300.0, 300.0])
    _fake_branch(runs["horizon3", 0], parent, 3, 5, [9, 9, 9, 50, 60], [200.0, 300.0])
    _fake_branch(runs["horizon3", 1], parent, 3, 5, [9, 9, 9, 70, 80], [250.0, 250.0],
                 planning=["planner.cem.candidates=9"])  # another planner: not current
    results = branches.aggregate(config, out, list(runs.values()))
    control, other = results["arms"]["control"], results["arms"]["horizon3"]
    assert results["branch_point"] == 3
    assert control["eval"] == {"mean": 225.0, "std": 75.0, "n": 2}
    assert control["training_return"] == {"mean": 25.0, "std": 10.0, "n": 2}  # 15 and 35
    assert control["critic_loss"]["mean"] == 50.0 and control["versus_first"] is None
    assert other["eval"] == {"mean": 250.0, "std": 0.0, "n": 1}
    assert other["versus_first"] == {"mean": 100.0, "std": 0.0, "n": 1, "higher": 1}
    assert other["branches"]["1"]["eval"] is None and other["branches"]["1"]["finished"]
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))
    summary = (out / "summary.md").read_text()
    assert "| horizon3 | planner.horizon=3 | 250.0 ± 0.0 (n=1) | 250.0, – | " \
           "100.0 ± 0.0 (n=1), higher on 1 |" in summary
    assert "training return, episodes 4–5" in summary


def test_branch_point_refuses_mixed_or_moved_on_parents(branches, tmp_path):
    parent = _fake_parent(tmp_path / "parent")
    out = tmp_path / "out"
    config = _debug(branches, parent, "episodes=2")
    runs = {r["variant"]: r for r in branches.grid(config, out)}
    _fake_branch(runs["control"], parent, 3, 5, [0] * 5)
    assert [r["branch_point"] for r in branches.grid(config, out)] == [3, 3]
    _fake_checkpoint(parent, 4)  # the parent trained on: the branches made are still read
    runs = branches.grid(config, out)
    assert [r["branch_point"] for r in runs] == [3, 3]
    with pytest.raises(branches._config.ConfigError,
                       match=r"^the parent's branch checkpoint is 4, the branches start from 3: "
                             r".*horizon3/seed0 would start elsewhere; give the branches still "
                             r"to make their own out$"):
        branches.make_branches(runs, config)
    assert not runs[1]["logdir"].exists()
    _fake_branch(runs[1], parent, 3, 5, [0] * 5)
    assert [r["branch_point"] for r in branches.grid(config, out)] == [3, 3]  # all made
    other = _fake_parent(tmp_path / "other")
    with pytest.raises(branches._config.ConfigError, match=r"is a branch of .*parent, not of "):
        branches.grid(_debug(branches, other, "episodes=2"), out)
    longer = branches.grid(_debug(branches, parent, "episodes=3"), out)  # extends them
    assert [(r["branch_point"], r["episodes"]) for r in longer] == [(3, 6), (3, 6)]
    with pytest.raises(branches._config.ConfigError,
                       match=r"control/seed0 holds a run of another config \(planner\.horizon: "
                             r"3 -> 4\)"):
        branches.grid(_debug(branches, parent, "episodes=2",
                             "overrides=[eval.video=false, planner.horizon=4]"), out)


def test_make_branches_copies_every_branch_from_one_checkpoint(branches, tmp_path,
                                                               monkeypatch):
    """All branches are copied before any trains; a parent that saves a checkpoint between
    two copies leaves no branch of the newer one."""
    from bayes_planet.agent import run as run_lib

    parent = _fake_parent(tmp_path / "parent")
    config = _debug(branches, parent, "seeds=[0, 1]")
    runs = branches.grid(config, tmp_path / "out")
    branches.make_branches(runs[:2], config)
    for run in runs[:2]:
        assert json.loads((run["logdir"] / "branch.json").read_text())["episode"] == 3
        assert _checkpoint_number(run["logdir"] / "checkpoints" / "ckpt-000003") == 3
        assert len(list((run["logdir"] / "episodes").iterdir())) == 3
    assert not runs[2]["logdir"].exists()
    assert [r["branch_point"] for r in branches.grid(config, tmp_path / "out")] == [3] * 4
    copy = run_lib.branch

    def parent_trains_on(*args):  # the parent saves checkpoint 4 after this copy
        made = copy(*args)
        if not (parent / "checkpoints" / "ckpt-000004").exists():
            _fake_checkpoint(parent, 4)
        return made

    monkeypatch.setattr(run_lib, "branch", parent_trains_on)
    with pytest.raises(branches._config.ConfigError,
                       match=r"^the parent's branch checkpoint is 4, the branches start "
                             r"from 3: .*horizon3/seed1 would start elsewhere"):
        branches.make_branches(runs[2:], config)
    assert (runs[2]["logdir"] / "config.yaml").exists() and not runs[3]["logdir"].exists()


@pytest.mark.slow
def test_branches_debug_preset_end_to_end(branches, tmp_path):
    """A 3-episode debug run, branched into two arms of one more episode each, evaluated;
    a rerun trains nothing."""
    parent = tmp_path / "parent"
    subprocess.run([sys.executable, "-m", "bayes_planet.agent.cli", "train", "--preset", "debug",
                    "--logdir", str(parent), "--quiet", "--set", "eval.video=false"],
                   check=True)
    out = tmp_path / "out"
    grid = ["--preset", "debug", "--set", f"parent={parent}", "--out", str(out)]
    results = branches.main(grid)
    assert results["failed"] == [] and results["branch_point"] == 3
    for arm, horizon in (("control", config_lib.load(["debug"]).planner.horizon),
                         ("horizon3", 3)):
        branch = results["arms"][arm]["branches"]["0"]
        logdir = pathlib.Path(branch["logdir"])
        assert json.loads((logdir / "branch.json").read_text())["episode"] == 3
        assert config_lib.read(logdir / "config.yaml").planner.horizon == horizon
        assert branch["status"] == "trained" and branch["episodes_trained"] == 1
        report = json.loads((logdir.with_name("seed0.eval") / "eval.json").read_text())
        assert report["checkpoint"] == 4 and branch["eval"]["returns"] == report["returns"]
    again = branches.main(grid)
    assert {a["branches"]["0"]["status"] for a in again["arms"].values()} == {"finished before"}
    (launch,) = branches.agents.launches({"logdir": out / "runs" / "control" / "seed0"})
    assert launch["outcome"] == "finished"
