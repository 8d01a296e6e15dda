"""No script writes into a directory that holds a run unless it is that run's trainer
(`bayes_planet.run_dirs`), and branches refuse what a run refuses.

Each case is what an adversarial tester tried, with the run directory hashed before and
after: one line naming the argument and the value, exit status 2, nothing written. The CLI
runs in-process (`cli.main`), the grid scripts through their ``main``.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from bayes_planet import run_dirs
from bayes_planet.agent import cli
from bayes_planet.agent import config as config_lib
from tests.agent.conftest import DEBUG_ARGS, branch_debug_in_process, one_error_line, snapshot
from tests.scripts import _experiments


@pytest.fixture(scope="module")
def agents():
    return _experiments.load("agents")


@pytest.fixture(scope="module")
def branches():
    return _experiments.load("branches")


# ---------------------------------------------------------------- the guard
def test_what_holds_a_run_and_what_lies_inside_one(run, tmp_path):
    assert run_dirs.holds_run(run) and run_dirs.enclosing_run(run / "a" / "b") == run.resolve()
    assert not run_dirs.holds_run(tmp_path) and run_dirs.enclosing_run(tmp_path / "x") is None
    grid = tmp_path / "grid"  # a grid's out: a config.yaml, but no run of its own
    grid.mkdir()
    (grid / "config.yaml").write_text("out: grid\n")
    assert run_dirs.enclosing_run(grid) is None
    assert run_dirs.check_output_dir("logdir", run, own=True) == run  # the trainer's own
    with pytest.raises(run_dirs.OutputDirError, match=r"^Expected a folder outside any run "
                       r"\(only a run's trainer writes into it\)\. Received: out='.*/run' is "
                       r"the run '.*/run'$"):
        run_dirs.check_output_dir("out", run)
    with pytest.raises(run_dirs.OutputDirError, match=r"Received: logdir='.*/run/sub' lies "
                       r"inside the run '.*/run'$"):
        run_dirs.check_output_dir("logdir", run / "sub", own=True)
    (tmp_path / "afile.txt").write_text("mine")
    for path, message in (("", r"out=''$"), (tmp_path / "afile.txt", r"afile.txt' is a file$"),
                          (tmp_path / "afile.txt" / "x",
                           r"afile.txt/x' lies inside '.*afile.txt', a file$")):
        with pytest.raises(run_dirs.OutputDirError,
                           match="^Expected a directory. Received: .*" + message):
            run_dirs.check_output_dir("out", path)


@pytest.mark.parametrize("entry", ["train inside", "eval --out", "eval --out another run",
                                   "probe --out", "probe --test-episodes",
                                   "branch inside another run"])
def test_every_cli_writer_refuses_a_run_directory_before_writing(run, finished, tmp_path,
                                                                 capsys, entry):
    other = tmp_path / "other"
    shutil.copytree(finished, other)
    before, before_other = snapshot(run), snapshot(other)
    args = {
        "train inside": ["train", "--logdir", str(run / "sub"), *DEBUG_ARGS],
        "eval --out": ["eval", "--logdir", str(run), "--out", str(run / "eval")],
        "eval --out another run": ["eval", "--logdir", str(run), "--out", str(other)],
        "probe --out": ["probe", "--logdir", str(run), "--out", str(other / "probe")],
        "probe --test-episodes": ["probe", "--logdir", str(run), "--test-episodes",
                                  str(run / "episodes")],
        "branch inside another run": ["train", "--branch-from", str(run), "--logdir",
                                      str(other / "branch"), "--quiet"],
    }[entry]
    assert cli.main(args) == 2
    one_error_line(capsys, "Expected a folder outside any run", "Received: ")
    assert snapshot(run) == before and snapshot(other) == before_other


def test_the_grid_launchers_refuse_an_out_that_holds_a_run(run, agents, branches, tmp_path):
    """agents.py (also with --aggregate-only) and branches.py (also the parent itself as
    --out): the run's config.yaml stays the run's; a file as --out is one line naming out."""
    before = snapshot(run)
    calls = [(agents, ["--preset", "debug", "--out", str(run), "--aggregate-only"]),
             (agents, ["--preset", "debug", "--out", str(run / "grid")]),
             (branches, ["--preset", "debug", "--set", f"parent={run}", "--out", str(run)]),
             (branches, ["--preset", "debug", "--set", f"parent={run}", "--aggregate-only",
                         "--out", str(run / "inside")])]
    for script, argv in calls:
        with pytest.raises(run_dirs.OutputDirError, match="Expected a folder outside any run"):
            script.main(argv)
        assert snapshot(run) == before, argv
    assert config_lib.read(run / "config.yaml").train.episodes == 3
    afile = tmp_path / "afile.txt"
    afile.write_text("mine")
    for script, argv in ((agents, ["--preset", "debug"]),
                         (branches, ["--preset", "debug", "--set", f"parent={run}"])):
        with pytest.raises(run_dirs.OutputDirError,
                           match=r"^Expected a directory. Received: out='.*afile.txt' is a "
                                 r"file$"):
            script.main([*argv, "--out", str(afile)])
        assert afile.read_text() == "mine"


def test_a_refused_out_ends_a_grid_script_in_one_line_with_status_2(tmp_path):
    (tmp_path / "afile.txt").write_text("mine")
    script = _experiments.EXPERIMENTS / "agents.py"
    result = subprocess.run([sys.executable, str(script), "--preset", "debug", "--out",
                             str(tmp_path / "afile.txt"), "--aggregate-only"],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("agents.py")]
    assert lines == [f"agents.py: error: Expected a directory. Received: "
                     f"out={str(tmp_path / 'afile.txt')!r} is a file"], result.stderr
    assert "Traceback" not in result.stderr


def test_example_scripts_refuse_a_run_as_out(run):
    before = snapshot(run)
    gp = _experiments.load("gp")
    with pytest.raises(run_dirs.OutputDirError, match="Expected a folder outside any run"):
        gp.main(["--preset", "debug", "--out", str(run / "gp")])
    assert snapshot(run) == before


# ---------------------------------------------------------------- branches
def test_an_empty_branch_from_is_refused_and_writes_nothing(tmp_path, capsys):
    logdir = tmp_path / "bE"
    assert cli.main(["train", "--branch-from", "", "--logdir", str(logdir), "--quiet"]) == 2
    assert one_error_line(capsys) == ("bayes-planet train: error: Expected a run directory. "
                                      "Received: --branch-from=''")
    assert not logdir.exists()


def test_a_branch_into_a_run_that_is_not_its_branch_is_refused(run, finished, tmp_path,
                                                               capsys):
    other = tmp_path / "other"  # an ordinary run
    shutil.copytree(finished, other)
    before = snapshot(other)
    assert branch_debug_in_process(run, other, "train.episodes=6") == 2
    one_error_line(capsys, f"Expected an empty or new logdir, or a branch of {str(run)!r}",
                   f"logdir={str(other)!r} holds a run that is not a branch")
    assert snapshot(other) == before
    from bayes_planet.agent import run as run_lib

    config = config_lib.read(run / "config.yaml")
    branch = tmp_path / "branch"
    assert run_lib.branch(other, branch, config) == 3  # a branch of `other`, not of `run`
    made = snapshot(branch)
    with pytest.raises(run_lib.RunError, match=r"holds a run that is a branch of '.*other'$"):
        run_lib.branch(run, branch, config)
    assert run_lib.branch(other, branch, config) is None and snapshot(branch) == made


def test_a_branch_with_fewer_episodes_than_its_copy_is_refused_before_copying(run, tmp_path,
                                                                             capsys):
    logdir = tmp_path / "bf"
    assert branch_debug_in_process(run, logdir, "train.episodes=2") == 2
    one_error_line(capsys, "Expected train.episodes >= the 3 episodes collected",
                   "Received: train.episodes=2")
    assert not logdir.exists() and not list(tmp_path.glob(".bf.branch-tmp-*"))


def test_a_branch_starts_at_the_newest_committed_readable_checkpoint(run, tmp_path, capsys,
                                                                     monkeypatch):
    """A parent caught between its checkpoint and that episode's file, a parent whose newest
    checkpoint is damaged, and one that removes the checkpoint being copied: each branches
    from its newest checkpoint that is committed and readable, never "damaged"."""
    from bayes_planet.agent import run as run_lib

    config = config_lib.read(run / "config.yaml")
    last = sorted((run / "episodes").iterdir())[-1]
    moved = tmp_path / last.name
    shutil.move(last, moved)  # checkpoint 3 written, episode 3's file not yet
    assert run_lib.branch_checkpoint(run)[0] == 2
    assert run_lib.branch(run, tmp_path / "caught", config) == 2
    assert sorted(p.name for p in (tmp_path / "caught" / "checkpoints").iterdir()) == [
        "ckpt-000002"]
    assert len(list((tmp_path / "caught" / "episodes").iterdir())) == 2
    shutil.move(moved, last)
    for data in (run / "checkpoints" / "ckpt-000003").glob("ckpt.data-*"):
        data.write_bytes(b"garbage")
    capsys.readouterr()
    assert run_lib.branch(run, tmp_path / "damaged", config) == 2
    assert "ckpt-000003 is unreadable" in capsys.readouterr().err
    shutil.rmtree(run / "checkpoints" / "ckpt-000003")
    copytree = shutil.copytree

    def parent_trains_on(source, target, **kwargs):  # removes ckpt 2 and commits ckpt 3
        if source.name == "ckpt-000002" and not (run / "checkpoints" / "ckpt-000003").exists():
            copytree(tmp_path / "damaged" / "checkpoints" / "ckpt-000002",
                     run / "checkpoints" / "ckpt-000003")
            shutil.rmtree(source)
        return copytree(source, target, **kwargs)

    monkeypatch.setattr(shutil, "copytree", parent_trains_on)
    assert run_lib.branch(run, tmp_path / "raced", config) == 3
    monkeypatch.setattr(shutil, "copytree", copytree)
    assert sorted(p.name for p in (tmp_path / "raced" / "checkpoints").iterdir()) == [
        "ckpt-000003"]


def test_eval_refuses_what_it_cannot_do_in_one_line(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(run)  # `--logdir ""` would have evaluated the current folder
    assert cli.main(["eval", "--logdir", ""]) == 2
    one_error_line(capsys, "Expected a run directory. Received: logdir=''")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["eval", "--logdir", str(run), "--episodes", "1e3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("argument --episodes: Expected a positive integer. "
                            "Received: '1e3'"), err
    config = config_lib.with_overrides(config_lib.read(run / "config.yaml"),
                                       ["value.enabled=false"])  # PlaNet: no value model
    with pytest.raises(config_lib.ConfigError, match=r"^Expected a run with a value model "
                       r"\(value.enabled: true\) for value.policy_proposals: .*Received: "
                       r"value.policy_proposals=3$"):
        config_lib.with_planning(config, ["value.policy_proposals=3"])


# ---------------------------------------------------------------- launches
def test_every_launch_is_recorded_interrupted_and_orphaned_ones_too(agents, tmp_path,
                                                                    monkeypatch):
    """A finished and a failed launch; one the launcher stopped on Ctrl-C (re-raised, the
    trainer terminated); one whose launcher was killed, recorded as orphaned by the next."""
    monkeypatch.setattr(agents, "final_eval", lambda runs, say, name: {})
    codes = {0: "0", 1: "3", 2: "sleep"}
    monkeypatch.setattr(agents, "train_command", lambda run, presets: [
        sys.executable, "-c", "import time; time.sleep(60)" if codes[run["seed"]] == "sleep"
        else f"raise SystemExit({codes[run['seed']]})"])
    runs = [{"logdir": tmp_path / f"seed{s}", "variant": "v", "seed": s, "episodes": 1}
            for s in codes]
    agents.launch(runs[:2], [], say=lambda line: None)
    assert [launch["outcome"] for launch in agents.launches(runs[0])] == ["finished"]
    assert [(x["outcome"], x["returncode"]) for x in agents.launches(runs[1])] == [
        ("failed", 3)]
    assert not (runs[0]["logdir"] / "launches.jsonl").exists()  # beside the run, not in it
    sleep = agents.time.sleep

    def interrupt(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(agents.time, "sleep", interrupt)
    with pytest.raises(KeyboardInterrupt):
        agents.launch(runs[2:], [], say=lambda line: None)
    monkeypatch.setattr(agents.time, "sleep", sleep)
    (launch,) = agents.launches(runs[2])
    assert launch["outcome"] == "interrupted" and launch["returncode"] == -15
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()  # a launcher killed mid-run: its start row and no end row
    with open(agents.launch_logs(runs[0]) / "launches.jsonl", "a") as f:
        f.write(json.dumps({"event": "start", "launch": "killed", "started": 1.0,
                            "command": ["x"], "pid": dead.pid, "launcher": dead.pid,
                            "host": agents.socket.gethostname(), "resumed_at": 0}) + "\n")
        f.write('{"event": "end", "launch": "kil')  # and a torn row
    said = []
    assert agents.record_orphans(runs[0], say=said.append) == 1
    assert [x["outcome"] for x in agents.launches(runs[0])] == ["finished", "orphaned"]
    assert "recorded as orphaned" in said[0]
    assert agents.record_orphans(runs[0], say=said.append) == 0
    lines = (agents.launch_logs(runs[0]) / "launches.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(lines), lines  # start, end, start, torn, orphaned


def test_ctrl_c_ends_a_grid_script_in_one_line_saying_the_same_command_resumes(capsys):
    from bayes_planet import yaml_config

    def interrupted(argv):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_info:
        yaml_config.run_script(interrupted, resumes=True)
    assert exit_info.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(": interrupted; run the same command again to "
                                             "resume (what finished is kept)"), err
