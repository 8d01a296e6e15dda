"""The agent tests' shared fixtures and helpers: debug runs (in this process or a fresh one),
what a test reads back from a run directory, and the CLI's one-line errors; and their skip
without the agent extra.

The test modules import the helpers (``from tests.agent.conftest import ...``). The agent is
imported only inside them, so this file loads on a layers-only install too. There a test
module that imports the agent is skipped as it is collected (tests/conftest.py); `_agent_extra`
skips the others, which run the agent only in a fresh process.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import AGENT_EXTRA_INSTALLED, AGENT_SKIP_REASON

#: ``train``'s arguments of a debug run: the debug preset, quiet, no videos.
DEBUG_ARGS = ["--preset", "debug", "--quiet", "--set", "eval.video=false"]

#: The fields of metrics.jsonl that are wall-clock times (different in every run).
WALL_CLOCK = ("seconds", "seconds_updates", "seconds_collect", "seconds_eval")


def set_args(sets):
    """``--set S`` for each ``S`` of ``sets``."""
    return [arg for s in sets for arg in ("--set", s)]


def debug_config(*sets):
    """The debug preset's config with the overrides ``sets`` (``key=value``)."""
    from bayes_planet.agent import config as config_lib

    return config_lib.load(["debug"], list(sets))


def run_cli(*args, fault=None, timeout=600):
    """``bayes-planet ARGS`` in a fresh process (TensorFlow's C++ logs off); its completed
    process. ``fault`` (``point:n``) sets ``BAYES_PLANET_FAULT``, which SIGKILLs the trainer the
    n-th time it reaches a named point (`bayes_planet.agent.faults`); otherwise it is unset."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("BAYES_PLANET_FAULT", None)
    if fault:
        env["BAYES_PLANET_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "bayes_planet.agent.cli", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def train_debug(logdir, *sets, fault=None):
    """A debug run (`DEBUG_ARGS`, and ``sets``) into ``logdir`` in a fresh process (`run_cli`)."""
    return run_cli("train", "--logdir", str(logdir), *DEBUG_ARGS, *set_args(sets), fault=fault)


def train_debug_in_process(logdir, *sets):
    """The same debug run in this process (`cli.main`); its exit status."""
    from bayes_planet.agent import cli

    return cli.main(["train", "--logdir", str(logdir), *DEBUG_ARGS, *set_args(sets)])


def _branch_args(parent, logdir, sets, extra=()):
    return ["train", "--branch-from", str(parent), "--logdir", str(logdir), "--quiet", *extra,
            *set_args(sets)]


def branch_debug(parent, logdir, *sets, fault=None, extra=()):
    """``train --branch-from PARENT`` into ``logdir`` with ``sets`` in a fresh process
    (`run_cli`); ``extra``: more arguments of ``train``."""
    return run_cli(*_branch_args(parent, logdir, sets, extra), fault=fault)


def branch_debug_in_process(parent, logdir, *sets):
    """The same branch in this process (`cli.main`); its exit status."""
    from bayes_planet.agent import cli

    return cli.main(_branch_args(parent, logdir, sets))


def snapshot(folder):
    """Every path under ``folder`` and its bytes (None for a directory); None if there is no
    ``folder``: compare two to see that nothing was written."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def metrics_rows(logdir):
    """metrics.jsonl parsed strictly (NaN/Infinity are not JSON) without wall-clock fields."""
    def strict(name):
        raise ValueError(f"not JSON: {name}")
    rows = [json.loads(line, parse_constant=strict)
            for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in rows]


def latest_checkpoint(logdir):
    """The prefix of the run's newest checkpoint, or None if it has none."""
    folders = sorted((logdir / "checkpoints").glob("ckpt-*"))
    return str(folders[-1] / "ckpt") if folders else None


def checkpoint_tensors(prefix):
    """``{name: value}`` of every variable in the checkpoint at ``prefix``."""
    import tensorflow as tf

    return {k: tf.train.load_variable(prefix, k) for k, _ in tf.train.list_variables(prefix)}


def one_error_line(capsys, *needles):
    """The one error line said (warnings aside), checked to hold each of ``needles``."""
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith("warning:")]
    assert len(err) == 1 and err[0].startswith("bayes-planet ") and "error:" in err[0], err
    for needle in needles:
        assert needle in err[0], err
    return err[0]


@pytest.fixture(scope="module", autouse=True)
def _agent_extra():
    """Every test here needs the agent extra (module scope: before any module fixture)."""
    if not AGENT_EXTRA_INSTALLED:
        pytest.skip(AGENT_SKIP_REASON)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished debug run (3 episodes; checkpoints 2 and 3), trained in-process once per
    test module that asks for it; copy it (`run`) before changing anything in it."""
    logdir = tmp_path_factory.mktemp("finished") / "run"
    assert train_debug_in_process(logdir) == 0
    return logdir


@pytest.fixture
def run(finished, tmp_path):
    """A copy of `finished` of the test's own, in ``tmp_path / 'run'``."""
    logdir = tmp_path / "run"
    shutil.copytree(finished, logdir)
    return logdir
