"""The command line (`bayes_planet.agent.cli`) in a fresh process: a debug run end to end
then evaluated, and bad arguments as one-line messages, not tracebacks."""

import json

import numpy as np
import pytest

from tests.agent.conftest import run_cli


def test_debug_run_end_to_end_then_eval(tmp_path):
    """collect, train, plan, evaluate, checkpoint, video — the run CI exercises."""
    logdir = tmp_path / "run"
    result = run_cli("train", "--preset", "debug", "--logdir", str(logdir), "--quiet")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done: 3 episodes" in result.stdout
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["episode"] for r in records] == [1, 2, 3]
    assert records[-1]["updates"] == 3 and "eval_return" in records[-1]
    assert np.isfinite(records[-1]["loss"]) and records[-1]["weight_kl"] > 0
    # Each episode's phases: its updates (none in seed episodes), its collection, evaluation.
    assert all(r["seconds_collect"] > 0 and r["seconds_updates"] >= 0 for r in records)
    assert records[-1]["seconds_updates"] > 0 and records[-1]["seconds_eval"] > 0
    assert "seconds_eval" not in records[0]
    assert records[-1]["seconds"] - records[-2]["seconds"] >= (
        records[-1]["seconds_updates"] + records[-1]["seconds_collect"])
    for name in ("learning_curve.png", "config.yaml", "checkpoints/ckpt-000003/ckpt.index"):
        assert (logdir / name).exists(), name
    assert list(logdir.glob("events.out.tfevents.*"))
    assert list((logdir / "videos").glob("eval_*.gif"))
    assert len(list((logdir / "episodes").glob("*.npz"))) == 3

    result = run_cli("eval", "--logdir", str(logdir), "--episodes", "1", "--video",
                     "--out", str(tmp_path / "eval"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "eval over 1 episodes" in result.stdout
    assert (tmp_path / "eval" / "eval_cli_0.mp4").stat().st_size > 0
    report = json.loads((tmp_path / "eval" / "eval.json").read_text())  # --out's summary
    assert report["checkpoint"] == 3 and report["episodes"] == 1 and report["planning"] == []
    assert len(report["returns"]) == 1 and report["std"] == 0.0
    assert f"return {report['mean']:.1f} ± 0.0 ({report['returns'][0]:.1f})" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["train", "--task", "cartpole-swingupp", "--preset", "debug"], "cartpole-swingup"),
    (["train", "--preset", "debug", "--set", "train.batchsize=3"], "unknown config key"),
    (["train", "--preset", "debugg"], "unknown preset"),
    (["eval", "--episodes", "1"], "no run in"),
    (["eval", "--episodes", "1", "--video"], "--out"),
])
def test_cli_errors_are_messages_not_tracebacks(tmp_path, args, message):
    result = run_cli(*args, "--logdir", str(tmp_path / "x"))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
