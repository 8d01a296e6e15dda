"""A damaged run or a bad input is answered before anything is written (issue #29).

Each case is what an adversarial tester tried: the command, then what it must do — one line
naming the file, key or value, exit status 2, and the run directory exactly as before; or, for
a run that lost a checkpoint, a rerun that repairs it. The CLI runs in-process (`cli.main`).
"""

import errno
import shutil

import numpy as np
import pytest

from bayes_planet.agent import cli
from tests.agent.conftest import (
    DEBUG_ARGS,
    checkpoint_tensors,
    one_error_line,
    snapshot,
    train_debug_in_process,
)

# `finished` (a debug run) and `run` (a copy of it): tests/agent/conftest.py.


@pytest.mark.parametrize(("presets", "sets", "needle"), [
    (["debug"], ["train.chunk_length=100"], "train.chunk_length=100"),
    (["debug"], ["env.episode_length=4"], "train.chunk_length=8"),
    (["debug", "pixels"], ["env.image_size=8"], "env.image_size=8"),
    (["debug"], ["task=gym:NoSuchEnv-v0"], "NoSuchEnv-v0"),
    (["debug"], ["task=[1,2"], "not valid YAML"),
    (["debug"], ["task=\tx"], "not valid YAML"),
])
def test_a_config_the_run_cannot_use_is_refused_before_anything_is_written(
        tmp_path, capsys, presets, sets, needle):
    logdir = tmp_path / "run"
    args = ["train", "--logdir", str(logdir), "--quiet", "--preset", ",".join(presets)]
    for s in sets:
        args += ["--set", s]
    assert cli.main(args) == 2
    one_error_line(capsys, needle)
    assert not logdir.exists()


def test_an_empty_logdir_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert train_debug_in_process("") == 2
    one_error_line(capsys, "logdir=''")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncate", "remove"])
def test_a_rerun_repairs_a_finished_run_that_lost_its_latest_checkpoint(run, finished, damage,
                                                                         capsys):
    latest = run / "checkpoints" / "ckpt-000003"
    if damage == "truncate":
        for data in latest.glob("*.data-*"):
            data.write_bytes(b"")
    else:
        shutil.rmtree(run / "checkpoints")
    assert train_debug_in_process(run) == 0
    got = checkpoint_tensors(str(latest / "ckpt"))
    original = checkpoint_tensors(str(finished / "checkpoints" / "ckpt-000003" / "ckpt"))
    for key, value in original.items():
        # Counters are reset from the episode index at every episode start; the object graph
        # holds Keras' process-wide layer names.
        if "seed_counter" not in key and key != "_CHECKPOINTABLE_OBJECT_GRAPH":
            np.testing.assert_array_equal(got[key], value, err_msg=key)
    assert cli.main(["eval", "--logdir", str(run), "--episodes", "1"]) == 0
    assert "(checkpoint 3)" in capsys.readouterr().out


DAMAGE = {"config_cut": ("config.yaml lacks the keys", "planner.cem"),
          "config_binary": ("config.yaml is not UTF-8",),
          "episode_gone": ("lacks the files of episodes 1",),
          "metrics_gone": ("metrics.jsonl lacks the rows of episodes 1, 2, 3",)}


@pytest.mark.parametrize(("damage", "needles", "command"), [
    (damage, needles, command) for damage, needles in DAMAGE.items()
    for command in ("train", "eval") if (damage, command) != ("metrics_gone", "eval")])
def test_a_run_that_lost_data_is_refused_with_one_line_and_left_as_it_is(
        run, capsys, damage, needles, command):
    if damage == "config_cut":
        text = (run / "config.yaml").read_text()
        (run / "config.yaml").write_text(text[:text.index("planner:") + len("planner:")] +
                                         "\n  name: cem\n")
    elif damage == "config_binary":
        (run / "config.yaml").write_bytes(b"\xff\xfe\x00")
    elif damage == "episode_gone":
        next((run / "episodes").glob("000001-*.npz")).unlink()
    else:
        (run / "metrics.jsonl").unlink()
    before = snapshot(run)
    args = (["train", "--logdir", str(run), *DEBUG_ARGS] if command == "train"
            else ["eval", "--logdir", str(run), "--episodes", "1"])
    assert cli.main(args) == 2
    one_error_line(capsys, *needles)
    assert snapshot(run) == before


def test_an_old_config_without_weight_prior_reads_as_the_normal_prior_it_ran_with(run):
    from bayes_planet.agent import config as config_lib

    text = (run / "config.yaml").read_text()
    lines = [line for line in text.splitlines() if not line.strip().startswith("weight_prior:")]
    (run / "config.yaml").write_text("\n".join(lines) + "\n")
    assert config_lib.read(run / "config.yaml").model.weight_prior == "normal"


@pytest.mark.parametrize("args", [
    ["eval", "--episodes", "1", "--video", "--out", "{file}"],
    ["probe", "--episodes", "1", "--test-episodes", "{file}"],
    ["probe", "--episodes", "1", "--out", "{run}/probe"],
])
def test_reader_outputs_are_checked_before_any_episode_is_collected(run, tmp_path, capsys,
                                                                    args, monkeypatch):
    from bayes_planet.agent.collection import Collector

    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setattr(Collector, "collect", lambda *a, **k: pytest.fail("collected first"))
    before = snapshot(run)
    args = [a.format(file=afile, run=run) for a in args]
    assert cli.main([args[0], "--logdir", str(run), *args[1:]]) == 2
    one_error_line(capsys, "Expected a")
    assert snapshot(run) == before


def test_a_full_disk_is_one_line_and_leaves_no_half_written_checkpoint(tmp_path, capsys,
                                                                       monkeypatch):
    import tensorflow as tf

    def full(self, *args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "ckpt.data: No space left on device")

    monkeypatch.setattr(tf.train.Checkpoint, "write", full)
    logdir = tmp_path / "run"
    assert train_debug_in_process(logdir) == 2
    one_error_line(capsys, "no space left on the device")
    assert not list((logdir / "checkpoints").glob(".tmp-*"))


def test_a_full_disk_while_writing_metrics_is_one_line(tmp_path, capsys, monkeypatch):
    from bayes_planet.agent.run import Run

    def full(self, record):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.logdir / "metrics.jsonl"))

    monkeypatch.setattr(Run, "append_metrics", full)
    assert train_debug_in_process(tmp_path / "run") == 2
    one_error_line(capsys, "no space left on the device", "metrics.jsonl")


def test_ctrl_c_is_one_line_and_the_same_command_resumes_to_the_same_run(finished, tmp_path,
                                                                         capsys, monkeypatch):
    from bayes_planet.agent.collection import Collector

    collect, calls = Collector.collect, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # In the second episode.
            raise KeyboardInterrupt
        return collect(self, *args, **kwargs)

    monkeypatch.setattr(Collector, "collect", interrupted)
    logdir = tmp_path / "run"
    assert train_debug_in_process(logdir) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["bayes-planet train: interrupted; run the same command again to resume "
                   "(what was committed is kept)"]
    monkeypatch.setattr(Collector, "collect", collect)
    assert train_debug_in_process(logdir) == 0
    strip = lambda p: [{k: v for k, v in r.items() if not k.startswith("seconds")}  # noqa: E731
                       for r in __import__("bayes_planet.agent.run").agent.run.read_metrics(p)]
    assert strip(logdir) == strip(finished)
