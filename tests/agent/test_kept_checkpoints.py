"""``train.keep_checkpoint_every`` keeps the state behind earlier evaluations, and the readers
(`Agent(..., checkpoint=N)`, ``eval``/``probe``/``export --checkpoint N``, ``plateau.py``) open
a run at one of them with the episodes collected up to it."""

import numpy as np
import pytest

from bayes_planet.agent import config as config_lib
from tests.agent.conftest import (
    checkpoint_tensors,
    debug_config,
    one_error_line,
    train_debug_in_process,
)


@pytest.fixture(scope="module")
def keeping(tmp_path_factory):
    """A finished debug run of 4 episodes (2 seed episodes) that keeps every 2nd checkpoint."""
    logdir = tmp_path_factory.mktemp("keeping") / "run"
    assert train_debug_in_process(logdir, "train.episodes=4",
                                  "train.keep_checkpoint_every=2") == 0
    return logdir


def _numbers(logdir):
    return sorted(int(p.name.split("-")[1]) for p in (logdir / "checkpoints").glob("ckpt-*"))


def test_the_key_is_checked_and_older_configs_keep_two_checkpoints():
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected a non-negative integer\. "
                             r"Received: train\.keep_checkpoint_every=-1$"):
        config_lib.validate(debug_config("train.keep_checkpoint_every=-1"))
    old = debug_config().to_dict()
    del old["train"]["keep_checkpoint_every"]
    assert config_lib.upgrade(old)["train"]["keep_checkpoint_every"] == 0
    assert "train.keep_checkpoint_every" in config_lib.EXTENDABLE_KEYS


def test_multiples_of_n_are_kept_beside_the_two_newest(keeping, finished):
    assert _numbers(keeping) == [2, 3, 4]
    assert _numbers(finished) == [2, 3]  # The default: the 2 newest only.


def test_a_reader_opens_a_kept_checkpoint_with_the_episodes_up_to_it(keeping):
    from bayes_planet.agent.agent import Agent

    newest = Agent(keeping, read_only=True)
    assert newest.restored == 4 and newest.replay.num_episodes == 4
    agent = Agent(keeping, read_only=True, checkpoint=2)
    assert agent.restored == 2 and agent.replay.num_episodes == 2
    assert int(agent.updates.numpy()) == 0  # After the 2 seed episodes: no update yet.
    np.testing.assert_array_equal(agent.replay.episodes()[-1]["action"],
                                  newest.replay.episodes()[1]["action"])
    saved = checkpoint_tensors(str(keeping / "checkpoints" / "ckpt-000002" / "ckpt"))
    kernel = next(v for v in agent.model.variables if "kernel" in v.name)
    key = next(k for k, value in saved.items() if "model/" in k and "OPTIMIZER" not in k
               and np.shape(value) == tuple(kernel.shape)
               and np.array_equal(value, kernel.numpy()))
    assert key  # The restored kernel is checkpoint 2's ...
    later = checkpoint_tensors(str(keeping / "checkpoints" / "ckpt-000004" / "ckpt"))
    assert not np.array_equal(later[key], saved[key])  # ... and differs from the newest's.


def test_eval_at_a_kept_checkpoint_and_one_line_errors(keeping, tmp_path, capsys):
    from bayes_planet.agent import cli

    assert cli.main(["eval", "--logdir", str(keeping), "--episodes", "1",
                     "--checkpoint", "3"]) == 0
    assert "(checkpoint 3)" in capsys.readouterr().out
    assert cli.main(["eval", "--logdir", str(keeping), "--episodes", "1",
                     "--checkpoint", "1"]) == 2
    one_error_line(capsys, "keeps checkpoints [2, 3, 4]", "Received: checkpoint=1")
    with pytest.raises(SystemExit):
        cli.main(["eval", "--logdir", str(keeping), "--checkpoint", "0"])
    assert "Expected a positive integer. Received: '0'" in capsys.readouterr().err
    from bayes_planet.agent.agent import Agent
    from bayes_planet.agent.run import RunError

    with pytest.raises(RunError, match=r"for a reader only\. Received: checkpoint=2$"):
        Agent(tmp_path / "new", debug_config(), checkpoint=2)


def test_the_key_may_change_when_a_run_is_resumed(keeping, tmp_path):
    """Which checkpoints a run keeps is not what it learned: a resumed run may change it (and
    keeps what it kept; pruning happens when a checkpoint is written)."""
    import shutil

    logdir = tmp_path / "run"
    shutil.copytree(keeping, logdir)
    assert train_debug_in_process(logdir, "train.episodes=5") == 0
    assert config_lib.read(logdir / "config.yaml").train.keep_checkpoint_every == 0
    assert _numbers(logdir) == [4, 5]
