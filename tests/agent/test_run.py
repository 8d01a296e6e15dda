"""Trustworthy runs (issue #18): reproducible from a seed, crash-safe, one owner of the logdir.

Crashes are injected with ``BAYES_PLANET_FAULT=point:n`` (`bayes_planet.agent.faults.fault_point`), which
SIGKILLs the trainer the n-th time it reaches a named point: no timing luck.
"""

import fcntl
import json
import os
import shutil

import numpy as np
import pytest
import yaml

from bayes_planet import seeds, yaml_config
from bayes_planet.agent import config as config_lib
from tests.agent.conftest import (
    branch_debug,
    checkpoint_tensors,
    latest_checkpoint,
    metrics_rows,
    run_cli,
    snapshot,
    train_debug,
)


def _error_lines(stderr):
    """The CLI's error lines (third-party import warnings such as gym's are not ours)."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("bayes-planet")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted debug run (seed 0): 2 seed episodes, 1 planning episode + eval."""
    logdir = tmp_path_factory.mktemp("reference") / "run"
    result = train_debug(logdir)
    assert result.returncode == 0, result.stderr[-3000:]
    return logdir


# -- reproducibility ------------------------------------------------------------------------
def test_same_seed_gives_identical_metrics_and_checkpoints_another_seed_differs(reference,
                                                                                tmp_path):
    again = train_debug(tmp_path / "again")
    other = train_debug(tmp_path / "other", "seed=1")
    assert again.returncode == 0 and other.returncode == 0, again.stderr[-2000:]
    ref_rows = metrics_rows(reference)
    assert [r["episode"] for r in ref_rows] == [1, 2, 3]
    assert "loss" in ref_rows[-1] and "eval_return" in ref_rows[-1]
    assert metrics_rows(tmp_path / "again") == ref_rows
    a, b = (checkpoint_tensors(latest_checkpoint(d)) for d in (reference, tmp_path / "again"))
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    c = checkpoint_tensors(latest_checkpoint(tmp_path / "other"))
    kernels = [k for k in a if "kernel" in k and "optimizer" not in k and "OPTIMIZER" not in k]
    assert kernels and all(not np.array_equal(a[k], c[k]) for k in kernels)
    other_rows = metrics_rows(tmp_path / "other")
    assert other_rows[0]["return"] != ref_rows[0]["return"]  # Another initial state.


@pytest.mark.slow  # two debug runs; tests/agent/test_ensemble_transition.py covers the rank-1 logic
def test_a_rank1_transition_run_is_reproducible(tmp_path):
    """``--set model.estimator=rank1`` (an ensemble transition, issue #27): end to end twice
    with the same seed gives the same metrics (but wall-clock) and checkpoint."""
    runs = [tmp_path / "a", tmp_path / "b"]
    for logdir in runs:
        result = train_debug(logdir, "model.estimator=rank1")
        assert result.returncode == 0, result.stderr[-3000:]
    rows = metrics_rows(runs[0])
    assert [r["episode"] for r in rows] == [1, 2, 3] and rows[-1]["weight_kl"] > 0
    assert np.isfinite(rows[-1]["loss"]) and "eval_return" in rows[-1]
    assert metrics_rows(runs[1]) == rows
    a, b = (checkpoint_tensors(latest_checkpoint(logdir)) for logdir in runs)
    assert sorted(a) == sorted(b) and any("alpha" in k for k in a)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.slow
def test_a_killed_rank1_run_resumes_to_the_uninterrupted_run(tmp_path):
    full, logdir = tmp_path / "full", tmp_path / "run"
    assert train_debug(full, "model.estimator=rank1").returncode == 0
    killed = train_debug(logdir, "model.estimator=rank1", fault="train:2")
    assert killed.returncode == -9, killed.stderr[-2000:]
    rerun = train_debug(logdir, "model.estimator=rank1")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert metrics_rows(logdir) == metrics_rows(full)
    a, b = (checkpoint_tensors(latest_checkpoint(d)) for d in (full, logdir))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


# -- crash safety -----------------------------------------------------------------------------
FAULTS = [
    pytest.param("config_write", marks=pytest.mark.slow),
    pytest.param("seed_episode:20", marks=pytest.mark.slow),  # During the 2nd seed episode.
    "train:2",  # After the 2nd update of the first training phase.
    pytest.param("plan:5", marks=pytest.mark.slow),  # 5 steps into the planning episode.
    pytest.param("eval:5", marks=pytest.mark.slow),
    "checkpoint_write:3",  # The 3rd checkpoint: written, not yet renamed into place.
    pytest.param("metrics_write:3", marks=pytest.mark.slow),  # A torn 3rd row.
]


@pytest.mark.parametrize("fault", FAULTS)
def test_sigkill_at_any_phase_then_rerun_equals_the_uninterrupted_run(reference, tmp_path,
                                                                      fault):
    logdir = tmp_path / "run"
    killed = train_debug(logdir, fault=fault)
    assert killed.returncode == -9, (fault, killed.returncode, killed.stderr[-2000:])
    rerun = train_debug(logdir)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "done: 3 episodes" in rerun.stdout
    # Every episode's row exactly once, same numbers.
    assert metrics_rows(logdir) == metrics_rows(reference)
    a, b = (checkpoint_tensors(latest_checkpoint(d)) for d in (reference, logdir))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    leftovers = [p.name for p in logdir.rglob("*") if ".tmp" in p.name]
    assert not leftovers


@pytest.mark.slow  # ~2.5 min; the default suite resumes killed runs (the SIGKILL cases below)
def test_resume_from_an_older_checkpoint_redoes_the_updates_exactly(reference, tmp_path):
    """checkpoint_every=2: a kill after episode 3's row resumes from ckpt-2 and retrains."""
    logdir = tmp_path / "run"
    sets = ("train.episodes=4", "train.checkpoint_every=3")
    full = train_debug(tmp_path / "full", *sets)
    assert full.returncode == 0, full.stderr[-2000:]
    killed = train_debug(logdir, *sets, fault="metrics_write:4")  # ckpt-3 exists, episode 4 not.
    assert killed.returncode == -9
    shutil.rmtree(next((logdir / "checkpoints").glob("ckpt-000003")))  # Force the fallback.
    rerun = train_debug(logdir, *sets)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert metrics_rows(logdir) == metrics_rows(tmp_path / "full")
    a, b = (checkpoint_tensors(latest_checkpoint(d)) for d in (tmp_path / "full", logdir))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.slow  # ~1.5 min: two debug trainings
def test_a_finished_run_extended_with_more_episodes_equals_the_longer_run(reference, tmp_path):
    """train.episodes may grow on a rerun (config.EXTENDABLE_KEYS): 2 episodes, then 3, equal the
    uninterrupted 3 (rows and checkpoint); fewer than collected, or any other key, is refused."""
    logdir = tmp_path / "run"
    short = train_debug(logdir, "train.episodes=2")
    assert short.returncode == 0, short.stderr[-2000:]
    assert [r["episode"] for r in metrics_rows(logdir)] == [1, 2]
    extended = train_debug(logdir)  # The debug preset's 3 episodes.
    assert extended.returncode == 0, extended.stderr[-3000:]
    assert "train.episodes: 2 -> 3 (2 episodes collected)" in extended.stderr
    assert metrics_rows(logdir) == metrics_rows(reference)
    assert config_lib.read(logdir / "config.yaml").train.episodes == 3
    a, b = (checkpoint_tensors(latest_checkpoint(d)) for d in (reference, logdir))
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    def files():  # The writer's lock file names its pid: not data.
        return {k: v for k, v in snapshot(logdir).items() if k != ".lock"}

    before = files()
    fewer = train_debug(logdir, "train.episodes=2")
    assert fewer.returncode == 2
    assert _error_lines(fewer.stderr) == [
        f"bayes-planet train: error: Expected train.episodes >= the 3 episodes collected in {logdir}. "
        "Received: train.episodes=2"], fewer.stderr[-2000:]
    other = train_debug(logdir, "train.episodes=4", "train.updates_per_episode=4")
    assert other.returncode == 2
    assert "train.updates_per_episode: 3 -> 4" in other.stderr
    assert "train.episodes" not in _error_lines(other.stderr)[0], other.stderr[-2000:]
    assert files() == before  # Both refusals wrote nothing.


# -- branches: train on from another run's checkpoint with changes (train --branch-from) --------
def test_a_branch_is_a_copy_of_its_parent_at_its_checkpoint_with_the_new_config(reference,
                                                                                tmp_path):
    """`run.branch` in-process (no training): the parent's newest checkpoint and its episodes
    and rows up to it, byte for byte; the new config and branch.json; the parent is not
    written; a second call leaves the branch to the trainer."""
    from bayes_planet.agent import run as run_lib

    before = snapshot(reference)
    config = config_lib.with_overrides(config_lib.read(reference / "config.yaml"),
                                       ["train.episodes=5", "train.updates_per_episode=1"])
    branch = tmp_path / "branch"
    assert run_lib.branch(reference, branch, config) == 3
    copied = snapshot(branch)
    for folder in ("episodes", "checkpoints/ckpt-000003"):
        theirs = {k: v for k, v in before.items() if k.startswith(folder)}
        assert theirs and {k: copied[k] for k in theirs} == theirs
        assert {k for k in copied if k.startswith(folder)} == set(theirs)
    assert [p.name for p in (branch / "checkpoints").iterdir()] == ["ckpt-000003"]
    assert metrics_rows(branch) == metrics_rows(reference)
    assert config_lib.read(branch / "config.yaml") == config
    updates = metrics_rows(reference)[2]["updates"]  # The parent's, at its checkpoint 3.
    assert updates == 3
    assert json.loads(copied["branch.json"]) == {
        "parent": str(reference.resolve()), "episode": 3, "updates": updates,
        "changes": [["train.episodes", 3, 5], ["train.updates_per_episode", 3, 1]]}
    assert run_lib.Run(branch, config, read_only=True).branch_point() == (3, updates)
    assert run_lib.branch(reference, branch, config) is None
    assert snapshot(branch) == copied and snapshot(reference) == before
    # A branch.json from before the count was kept: the parent's schedule, from its changes.
    old = tmp_path / "old_branch"
    old.mkdir()
    (old / "branch.json").write_text(json.dumps({
        "parent": str(reference), "episode": 3,
        "changes": [["train.updates_per_episode", 3, 1]]}))
    assert run_lib.Run(old, config, read_only=True).branch_point() == (3, 3)
    assert run_lib.Run(reference, config, read_only=True).branch_point() is None


def test_target_updates_of_a_run_and_of_a_branch_that_changes_the_rate():
    """A branch keeps its parent's count at the branch point and adds its own rate from there
    (not its rate over all the parent's episodes: walker-walk branched at 44 episodes of 100
    updates into 250 would have redone 6100 updates first); a lost branch checkpoint spreads
    the parent's count over the parent's episodes."""
    from types import SimpleNamespace

    from bayes_planet.agent.config import target_updates

    train = SimpleNamespace(seed_episodes=5, updates_per_episode=100, pretrain_updates=0)
    assert [target_updates(k, train) for k in (0, 4, 5, 43)] == [0, 0, 100, 3900]
    branch = SimpleNamespace(seed_episodes=5, updates_per_episode=250, pretrain_updates=0)
    point = (44, target_updates(43, train))
    assert [target_updates(k, branch, point) for k in (44, 45, 54)] == [4150, 4400, 6650]
    # Before the branch point (its checkpoint lost): the parent's own schedule, exactly.
    assert [target_updates(k, branch, point) for k in range(44)] == [
        target_updates(k, train) for k in range(44)]
    # Branched during the seed episodes: its own rate from seed_episodes on.
    assert [target_updates(k, branch, (3, 0)) for k in (2, 3, 4, 5, 6)] == [0, 0, 0, 250, 500]


def test_target_updates_with_a_burst_after_the_seed_episodes():
    """``train.pretrain_updates`` adds its updates once, to the first training phase (before
    episode ``seed_episodes``); a branch counts its own burst only if it branched before it."""
    from types import SimpleNamespace

    from bayes_planet.agent.config import target_updates

    burst = SimpleNamespace(seed_episodes=5, updates_per_episode=100, pretrain_updates=1000)
    assert [target_updates(k, burst) for k in (0, 4, 5, 6, 43)] == [0, 0, 1100, 1200, 4900]
    later = (44, target_updates(43, burst))  # The parent's burst is in its count.
    assert [target_updates(k, burst, later) for k in (44, 45)] == [5000, 5100]
    assert [target_updates(k, burst, (3, 0)) for k in (4, 5, 6)] == [0, 1100, 1200]
    with pytest.raises(config_lib.ConfigError, match=r"Expected a non-negative integer\. "
                       r"Received: train\.pretrain_updates=-1"):
        config_lib.validate(config_lib.load(["debug"], ["train.pretrain_updates=-1"]))
    data = config_lib.load().to_dict()
    del data["train"]["pretrain_updates"]  # A run recorded before the key: no burst.
    assert config_lib.upgrade(data)["train"]["pretrain_updates"] == 0


def test_a_run_killed_during_its_burst_resumes_to_the_uninterrupted_run(tmp_path):
    sets = ("train.pretrain_updates=5",)
    full, logdir = tmp_path / "full", tmp_path / "run"
    assert train_debug(full, *sets).returncode == 0
    rows = metrics_rows(full)
    # debug: 2 seed episodes, 3 updates per episode; the burst comes before episode 3.
    assert [row["updates"] for row in rows] == [0, 0, 8]
    killed = train_debug(logdir, *sets, fault="train:4")  # Inside the burst.
    assert killed.returncode == -9, killed.stderr[-2000:]
    rerun = train_debug(logdir, *sets)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert metrics_rows(logdir) == rows
    a, b = (checkpoint_tensors(latest_checkpoint(d)) for d in (full, logdir))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_env_steps_have_one_source(reference):
    """The metrics rows' env steps (and the collection noise's, in training and in ``eval
    --policy collect``) are `Agent.env_steps`: the replay's transitions times the action
    repeat."""
    from bayes_planet.agent.agent import Agent

    agent = Agent(reference, read_only=True)
    rows = metrics_rows(reference)
    assert [r["env_steps"] for r in rows] == [agent.env_steps(k + 1) for k in range(len(rows))]
    first, second = agent.replay.episodes()[:2]
    repeat = agent.collector.env.action_repeat
    assert agent.env_steps(1) == (len(first["action"]) - 1) * repeat
    assert agent.env_steps(1, pending=second) == agent.env_steps(2)
    assert agent.env_steps() == agent.replay.num_steps * repeat == rows[-1]["env_steps"]
    agent.close()


def test_a_train_validates_its_config_once(monkeypatch, tmp_path):
    """``bayes-planet train`` checks the config before TensorFlow loads; the agent it builds
    trusts that check instead of repeating it."""
    from bayes_planet.agent import cli, training

    checked = []
    check = config_lib._check
    monkeypatch.setattr(config_lib, "_check", lambda data: (checked.append(1), check(data)))
    monkeypatch.setattr(training.Trainer, "loop", lambda self, progress: [{"env_steps": 0}])
    assert cli.main(["train", "--preset", "debug", "--logdir", str(tmp_path / "run"),
                     "--quiet"]) == 0
    assert checked == [1]
    with pytest.raises(config_lib.ConfigError, match="model.deter=0"):
        config_lib.validate(config_lib.load(["debug"], ["model.deter=0"]))


@pytest.mark.slow  # five debug trainings; the copy itself is checked above
def test_a_branch_continues_its_parent_exactly_and_a_killed_copy_is_redone(reference, tmp_path):
    """A 2-episode run branched with only train.episodes=3 equals the uninterrupted 3-episode
    run (rows and checkpoint): the copy is the parent's state. A branch killed while copying
    leaves no run; the same command redoes it, and resumes a finished branch. A branch with a
    change trains on with it from the parent's rows; the parent is never written."""
    parent = tmp_path / "parent"
    assert train_debug(parent, "train.episodes=2").returncode == 0
    before = snapshot(parent)
    branch = tmp_path / "branch"
    killed = branch_debug(parent, branch, "train.episodes=3", fault="branch_copy:1")
    assert killed.returncode == -9
    assert not branch.exists() and list(tmp_path.glob(".branch.branch-tmp-*"))
    done = branch_debug(parent, branch, "train.episodes=3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(tmp_path.glob(".branch.branch-tmp-*"))
    assert metrics_rows(branch) == metrics_rows(reference)
    a, b = (checkpoint_tensors(latest_checkpoint(d)) for d in (reference, branch))
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    copied = branch / "checkpoints" / "ckpt-000002" / "ckpt"  # The parent's, not redone.
    a = checkpoint_tensors(str(parent / "checkpoints" / "ckpt-000002" / "ckpt"))
    b = checkpoint_tensors(str(copied))
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    record = json.loads((branch / "branch.json").read_text())
    assert record == {"parent": str(parent.resolve()), "episode": 2, "updates": 0,
                      "changes": [["train.episodes", 2, 3]]}
    again = branch_debug(parent, branch, "train.episodes=3")  # Resumes the finished branch.
    assert again.returncode == 0, again.stderr[-2000:]
    assert metrics_rows(branch) == metrics_rows(reference)

    changed = tmp_path / "changed"
    result = branch_debug(parent, changed, "train.episodes=3", "train.updates_per_episode=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert config_lib.read(changed / "config.yaml").train.updates_per_episode == 1
    rows = metrics_rows(changed)  # Its own rate from the branch point: 1 update, not 3.
    assert rows[:2] == metrics_rows(parent) and rows[2]["updates"] == rows[1]["updates"] + 1 == 1
    assert snapshot(parent) == before


def test_a_branch_refuses_other_data_or_model_presets_and_a_used_logdir(reference, tmp_path,
                                                                         capsys):
    """One-line errors that write nothing: a fixed key (the model), --preset beside
    --branch-from, a logdir holding other files, the parent itself or a folder inside it, a
    parent without a run."""
    deter = config_lib.read(reference / "config.yaml").model.deter
    cases = [
        ((f"model.deter={deter + 8}",), (), "a branch keeps its parent's data and model, but the "
                                            f"config changes model.deter: {deter} -> {deter + 8}"),
        (("loss.value_scale=1.0",), (), "the config changes loss.value_scale: 0.0 -> 1.0"),
        ((), ("--preset", "debug"), "--branch-from takes the parent run's config; change it "
                                    "with --set. Received: --preset debug"),
    ]
    for sets, extra, message in cases:
        logdir = tmp_path / "new"
        result = branch_debug(reference, logdir, *sets, extra=extra)
        assert result.returncode == 2
        lines = _error_lines(result.stderr)
        assert len(lines) == 1 and message in lines[0], lines
        assert not logdir.exists()
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    result = branch_debug(reference, used)
    assert _error_lines(result.stderr) == [
        f"bayes-planet train: error: Expected an empty or new logdir to branch into. "
        f"Received: logdir={str(used)!r} holds files but no run"]
    assert sorted(p.name for p in used.iterdir()) == ["notes.txt"]
    result = branch_debug(reference, reference)
    assert _error_lines(result.stderr) == [
        f"bayes-planet train: error: Expected a folder outside the run {str(reference)!r} "
        f"to branch into. Received: logdir={str(reference)!r}"]
    result = branch_debug(reference, reference / "branch")
    assert _error_lines(result.stderr) == [
        "bayes-planet train: error: Expected a folder outside any run (only a run's trainer "
        f"writes into it). Received: logdir={str(reference / 'branch')!r} lies inside the run "
        f"{str(reference)!r}"]
    assert not (reference / "branch").exists()
    missing = branch_debug(tmp_path / "nothing", tmp_path / "new")
    assert _error_lines(missing.stderr) == [
        f"bayes-planet train: error: no run in {tmp_path / 'nothing'} (not a directory)"]


def _old_layout(path):
    """Rewrites a run's config.yaml in the layout before ``planner.name``: the CEM settings
    (candidates, top_k, iterations) directly in ``planner``."""
    data = yaml.safe_load(path.read_text())
    planner = data["planner"]
    del planner["name"]
    planner.update(planner.pop("cem"))
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.slow  # ~1 min: a debug training, resumed and evaluated
def test_a_run_with_an_old_layout_config_resumes_and_evaluates(reference, tmp_path):
    """Run directories keep the config.yaml they started with: one of the layout before the
    planner was chosen by name is migrated when read, resumes to the uninterrupted run's
    rows, is never rewritten, and evaluates."""
    logdir = tmp_path / "run"
    killed = train_debug(logdir, fault="train:2")
    assert killed.returncode == -9, killed.stderr[-2000:]
    _old_layout(logdir / "config.yaml")
    old_text = (logdir / "config.yaml").read_text()
    assert {"candidates", "top_k", "iterations"} <= set(yaml.safe_load(old_text)["planner"])
    assert config_lib.read(logdir / "config.yaml") == config_lib.read(reference / "config.yaml")
    rerun = train_debug(logdir)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert metrics_rows(logdir) == metrics_rows(reference)
    assert (logdir / "config.yaml").read_text() == old_text
    result = run_cli("eval", "--logdir", str(logdir), "--episodes", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "checkpoint 3" in result.stdout
    # A different value in the old layout is still a different config.
    text = old_text.replace("top_k: 4", "top_k: 3")
    assert text != old_text
    (logdir / "config.yaml").write_text(text)
    refused = train_debug(logdir)
    assert refused.returncode == 2 and "planner.cem.top_k: 3 -> 4" in refused.stderr, (
        refused.stderr[-2000:])


def test_a_damaged_latest_checkpoint_falls_back_to_an_older_one(reference, tmp_path):
    logdir = tmp_path / "run"
    shutil.copytree(reference, logdir)
    latest = sorted((logdir / "checkpoints").glob("ckpt-*"))[-1]
    for data in latest.glob("ckpt.data-*"):
        data.write_bytes(b"garbage")
    result = run_cli("eval", "--logdir", str(logdir), "--episodes", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "falling back to an older one" in result.stderr
    assert "checkpoint 2" in result.stdout


def test_a_second_trainer_on_a_locked_logdir_is_refused_and_writes_nothing(reference, tmp_path):
    logdir = tmp_path / "run"
    shutil.copytree(reference, logdir)
    before = snapshot(logdir)
    # Hold the writer lock exactly as a running trainer does (fcntl.flock on the logdir).
    fd = os.open(logdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = train_debug(logdir, "train.episodes=4")
        assert result.returncode == 2
        assert "in use by another trainer" in result.stderr
        assert "Traceback" not in result.stderr
        assert snapshot(logdir) == before
        # Deleting the pid file does not release the lock (a lock *file* could be deleted).
        (logdir / ".lock").unlink()
        before = snapshot(logdir)
        result = train_debug(logdir, "train.episodes=4")
        assert result.returncode == 2 and "in use by another trainer (pid ?)" in result.stderr
        assert snapshot(logdir) == before
    finally:
        os.close(fd)


def test_divergence_stops_with_a_message_finite_checkpoint_and_valid_json(tmp_path):
    logdir = tmp_path / "run"
    result = train_debug(logdir, "train.learning_rate=1.0e+12", "train.max_nonfinite_steps=2",
                         "train.episodes=5")
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "training diverged" in result.stderr and "Traceback" not in result.stderr
    metrics_rows(logdir)  # Strict JSON: raises on NaN.
    checkpoints = sorted((logdir / "checkpoints").glob("ckpt-*"))
    assert checkpoints
    for checkpoint in checkpoints:
        for key, value in checkpoint_tensors(str(checkpoint / "ckpt")).items():
            if np.asarray(value).dtype.kind == "f":
                assert np.all(np.isfinite(value)), (checkpoint.name, key)


def test_nonfinite_steps_are_skipped_counted_and_logged(tmp_path):
    """One diverging update, then finite ones: the run finishes and counts the skipped steps."""
    logdir = tmp_path / "run"
    result = train_debug(logdir, "train.learning_rate=1.0e+12", "train.max_nonfinite_steps=100")
    assert result.returncode == 0, result.stderr[-2000:]
    last = metrics_rows(logdir)[-1]
    assert last["nonfinite_steps"] >= 1  # NaN losses are null in the row, not bare NaN.


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("sets, message", [
    (["train.batch_size=0"], "train.batch_size=0"),
    (["planner.horizon=0"], "planner.horizon=0"),
    (["model.estimator=flipot"], "model.estimator='flipot'"),
    (["train.learning_rate=-1"], "train.learning_rate=-1"),
    (["train.updates_per_episode=-1"], "train.updates_per_episode=-1"),
    (["train.episodes=0"], "train.episodes=0"),
    (["eval.every=0"], "eval.every=0"),
    (["train.episodes=null"], "train.episodes"),
    (["train.learning_rate=abc"], "train.learning_rate"),
    (["model.bayesian_gru=true", "model.estimator=local_reparameterization"],
     "local_reparameterization"),
    (["model.ensemble_size=0"], "model.ensemble_size=0"),
    (["model.ensemble_size=two"], "model.ensemble_size"),
    (["model.bayesian_gru=true", "model.estimator=batch_ensemble"], "batch_ensemble"),
])
def test_bad_config_values_are_one_line_errors_and_write_nothing(tmp_path, capsys, sets,
                                                                  message):
    from bayes_planet.agent import cli

    logdir = tmp_path / "run"
    argv = ["train", "--preset", "debug", "--logdir", str(logdir)]
    for s in sets:
        argv += ["--set", s]
    assert cli.main(argv) == 2
    err = _error_lines(capsys.readouterr().err)
    assert len(err) == 1 and message in err[0], err
    assert not logdir.exists()


def test_yaml_exponent_without_a_dot_is_a_float():
    config = config_lib.load(["debug"], ["train.learning_rate=1e-4"])
    assert config.train.learning_rate == 1e-4
    config_lib.validate(config)


def test_bad_logdirs_and_bad_runs_are_one_line_errors(tmp_path, capsys):
    from bayes_planet.agent import cli

    a_file = tmp_path / "file"
    a_file.write_text("x")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "config.yaml").write_text("{{{ not: yaml")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text("")
    cases = [
        (["train", "--preset", "debug", "--logdir", str(a_file)], "is a file"),
        (["train", "--preset", "debug", "--logdir", str(a_file / "sub")], "lies inside"),
        (["train", "--preset", "debug", "--logdir", str(garbage)], "not valid YAML"),
        (["train", "--preset", "debug", "--logdir", str(empty)], "config mapping"),
        (["eval", "--logdir", str(garbage)], "not valid YAML"),
        (["eval", "--logdir", str(tmp_path / "none")], "no run in"),
        (["probe", "--logdir", str(empty)], "config mapping"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        err = _error_lines(capsys.readouterr().err)
        assert len(err) == 1 and message in err[0], (argv, err)
    assert (garbage / "config.yaml").read_text() == "{{{ not: yaml"


def test_eval_plans_differently_with_set_and_refuses_other_keys(reference, tmp_path, capsys):
    """``eval --set`` changes how the trained agent plans (planner.*, value.policy_proposals),
    never the run; any other key, or a bad value, is a one-line error naming it."""
    from bayes_planet.agent import cli

    logdir = tmp_path / "run"
    shutil.copytree(reference, logdir)
    before = snapshot(logdir)
    base = ["eval", "--logdir", str(logdir), "--episodes", "1"]
    outputs = {}
    for sets in ((), ("planner.cem.iterations=1", "planner.warm_start=true")):
        args = base + [a for s in sets for a in ("--set", s)]
        assert cli.main(args) == 0
        outputs[sets] = capsys.readouterr().out.strip().splitlines()[-1]
    assert "planner.cem.iterations=1, planner.warm_start=true" in outputs[sets]
    returns = {k: v.split("return ")[1] for k, v in outputs.items()}
    assert returns[()] != returns[sets]  # Another planner, another episode.
    for value, message in (("model.deter=8", "Expected a planning key"),
                           ("train.seed_episodes=1", "Received: train.seed_episodes=1"),
                           ("planner.beta=.nan", "planner.beta=nan"),
                           ("planner.cem.top_k=0", "planner.cem.top_k=0"),
                           ("planner.horizon=x", "planner.horizon")):
        assert cli.main(base + ["--set", value]) == 2, value
        err = _error_lines(capsys.readouterr().err)
        assert len(err) == 1 and message in err[0], (value, err)
    assert snapshot(logdir) == before


def test_eval_with_the_collection_policy_adds_only_its_noise_on_the_same_episodes(
        reference, tmp_path, capsys):
    """``eval --policy collect`` plays the same seeded episodes as training collects: with its
    exploration noise another return than the greedy plan, the same one when repeated; with
    the noise set to 0 (and no optimism) exactly the greedy plan's episode. eval.json records
    the policy; the run is not touched."""
    from bayes_planet.agent import cli

    logdir = tmp_path / "run"
    shutil.copytree(reference, logdir)
    before = snapshot(logdir)

    def evaluate(name, *extra):
        out = tmp_path / name
        assert cli.main(["eval", "--logdir", str(logdir), "--episodes", "1", "--out", str(out),
                         *extra]) == 0
        capsys.readouterr()
        return json.loads((out / "eval.json").read_text())

    greedy = evaluate("greedy")
    noisy, again = evaluate("noisy", "--policy", "collect"), evaluate("again", "--policy",
                                                                      "collect")
    quiet = evaluate("quiet", "--policy", "collect", "--set", "planner.exploration_noise=0")
    assert (greedy["policy"], noisy["policy"]) == ("eval", "collect")
    assert noisy["returns"] == again["returns"] != greedy["returns"]
    assert quiet["returns"] == greedy["returns"]
    # Its noise follows the schedule to the checkpoint's env steps (3 episodes of 120): a
    # decay to 0 over exactly those steps leaves none, one step longer some.
    decay = ("--policy", "collect", "--set", "planner.exploration_final=0", "--set")
    decayed = evaluate("decayed", *decay, "planner.exploration_decay_steps=360")
    not_yet = evaluate("not_yet", *decay, "planner.exploration_decay_steps=361")
    assert decayed["checkpoint"] == 3 and decayed["returns"] == greedy["returns"]
    assert not_yet["returns"] != greedy["returns"]
    with pytest.raises(SystemExit) as refused:  # argparse: usage and a one-line error.
        cli.main(["eval", "--logdir", str(logdir), "--policy", "random"])
    assert refused.value.code == 2 and "--policy: invalid choice" in capsys.readouterr().err
    assert snapshot(logdir) == before


def test_eval_without_a_checkpoint_is_refused(tmp_path):
    logdir = tmp_path / "run"
    assert train_debug(logdir, fault="seed_episode:1").returncode == -9  # Config, no checkpoint.
    result = run_cli("eval", "--logdir", str(logdir), "--episodes", "1")
    assert result.returncode == 2
    assert "no checkpoint" in result.stderr and "Traceback" not in result.stderr


def test_eval_and_probe_on_a_read_only_run_write_nothing_there(reference, tmp_path):
    logdir = tmp_path / "run"
    shutil.copytree(reference, logdir)
    before = snapshot(logdir)
    for path in [logdir, *logdir.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        result = run_cli("eval", "--logdir", str(logdir), "--episodes", "1", "--video",
                         "--out", str(tmp_path / "videos"))
        assert result.returncode == 0, result.stderr[-2000:]
        assert (tmp_path / "videos" / "eval_cli_0.mp4").stat().st_size > 0
        result = run_cli("probe", "--logdir", str(logdir), "--episodes", "1", "--horizons", "1",
                         "--out", str(tmp_path / "probe"))
        assert result.returncode == 0, result.stderr[-2000:]
        assert (tmp_path / "probe" / "probe.json").exists()
        assert snapshot(logdir) == before
    finally:
        for path in [logdir, *logdir.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)


# -- the pieces -------------------------------------------------------------------------------
def test_named_streams_are_stable_and_independent():
    assert seeds.pair(0, "replay", 3) == seeds.pair(0, "replay", 3)
    assert seeds.pair(0, "replay", 3) != seeds.pair(0, "replay", 4)
    assert seeds.pair(0, "replay", 3) != seeds.pair(1, "replay", 3)
    assert seeds.pair(0, "replay", 3) != seeds.pair(0, "env_reset", 3)
    assert seeds.pair(0, "a", 12) != seeds.pair(0, "a", 1, 2)
    np.testing.assert_array_equal(seeds.numpy_rng(5, "x", 1).integers(1000, size=8),
                                  seeds.numpy_rng(5, "x", 1).integers(1000, size=8))
    # Independence: draws of two streams are uncorrelated (|r| < 4 / sqrt(n), ~4 sigma).
    n = 20_000
    a = seeds.numpy_rng(0, "a").standard_normal(n)
    b = seeds.numpy_rng(0, "b").standard_normal(n)
    assert abs(np.corrcoef(a, b)[0, 1]) < 4 / np.sqrt(n)
    assert 0 <= seeds.int_seed(0, "weights") < 2**31
    with pytest.raises(ValueError, match="seed=-1"):
        seeds.pair(-1, "x")


def test_every_preset_validates_alone_and_after_cpu():
    """Each preset of configs.yaml merges and passes the config checks on its own and on top
    of `planet,cpu` (how the agent presets were combined); the defaults are the tasks table's
    agent, which `cpu,value,proprio` on top of `planet` spells out; `paper` is `planet`."""
    names = config_lib.presets()
    assert {"planet", "paper", "cpu", "debug", "value", "proprio", "pixels", "state"} <= set(names)
    for name in names:
        for presets in ([name], ["planet", "cpu", name]):
            assert config_lib.validate(config_lib.load(presets)), presets
    c = config_lib.validate(config_lib.load([]))
    assert (c.obs_type, c.model.obs_stddev, c.model.normalize_obs, c.train.updates_per_episode,
            c.train.episodes, c.value.enabled, c.planner.horizon, c.planner.cem.candidates,
            c.planner.cem.iterations, c.model.estimator) == (
        "state", 0.1, True, 100, 100, True, 5, 200, 2, "reparameterization")
    assert config_lib.load(["planet", "cpu", "value", "proprio"]) == config_lib.load([])
    assert config_lib.load(["cpu", "value", "proprio"]) == config_lib.load([])
    planet = config_lib.validate(config_lib.load(["planet"]))
    assert (planet.train.episodes, planet.planner.horizon, planet.planner.cem.candidates,
            planet.value.enabled, planet.model.obs_stddev, planet.model.normalize_obs) == (
        1000, 12, 1000, False, 1.0, False)
    assert config_lib.load(["paper"]) == config_lib.load(["planet"])


def test_one_preset_grammar():
    import argparse

    parser = yaml_config.add_preset_argument(argparse.ArgumentParser(), default=["d"])
    for argv in (["--preset", "a,b"], ["--preset", "a", "b"], ["--preset", "a", "--preset", "b"]):
        assert yaml_config.presets_from(parser.parse_args(argv)) == ["a", "b"], argv
    assert yaml_config.presets_from(parser.parse_args([])) == ["d"]
    from bayes_planet.agent import cli

    args = cli.build_parser().parse_args(["train", "--logdir", "x", "--preset", "debug", "cpu"])
    assert yaml_config.parse_presets(args.preset) == ["debug", "cpu"]


def test_envs_dmc_and_gym_adapter_do_not_import_each_other():
    import ast
    import pathlib

    import bayes_planet.envs as envs_pkg

    folder = pathlib.Path(envs_pkg.__file__).parent
    for name, other in (("dmc", "gym_adapter"), ("gym_adapter", "dmc")):
        tree = ast.parse((folder / f"{name}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert f"bayes_planet.envs.{other}" not in imported, name


def test_learning_curve_draws_a_single_kl_point_with_markers():
    from bayes_planet.agent.training import learning_curve_figure

    fig = learning_curve_figure([{"env_steps": 10, "return": 1.0, "state_kl": 3.0,
                                  "weight_kl": 20.0}])
    lines = fig.axes[1].lines
    assert [line.get_label() for line in lines] == ["state_kl", "weight_kl"]
    assert all(line.get_marker() == "." and len(line.get_xdata()) == 1 for line in lines)
