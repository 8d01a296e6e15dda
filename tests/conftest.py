"""Shared pytest configuration: quiet TensorFlow, deterministic seeds per test, and
clean skips of the agent's tests on a layers-only install.

These skips are here, not in tests/agent/, because tests elsewhere (of the scripts, the envs,
the planners) import the agent too; tests/agent/conftest.py holds the agent tests' fixtures and
helpers, and skips those of its tests that import no agent code."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# First: bayes_planet._keras finds the process's Keras (Keras 3 on TF >= 2.16 unless
# TF_USE_LEGACY_KERAS is set; Keras 2 on TF 2.15).
from bayes_planet._keras import KERAS3, keras  # noqa: E402  isort: skip
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from bayes_planet._extras import AGENT_MODULES, MissingExtraError, agent_extra_installed  # noqa: E402

AGENT_EXTRA_INSTALLED = agent_extra_installed()

# An agent run (`bayes_planet.agent.run.Run`) turns op determinism on for the whole process, and TF
# has no public way to turn it off: set it once for every test, so that no test sees a state
# that depends on which tests ran before it in the same worker.
import tensorflow as tf  # noqa: E402  isort: skip

tf.config.experimental.enable_op_determinism()
AGENT_SKIP_REASON = ("the 'agent' extra is not installed (pip install -e '.[agent]', "
                     "Python 3.10-3.11)")


def _needs_agent_extra(exc):
    """Whether `exc` (or its cause) is an import failure of the agent extra's modules."""
    while exc is not None:
        if isinstance(exc, MissingExtraError):
            return True
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in AGENT_MODULES:
            return True
        exc = exc.__cause__
    return False


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """On a layers-only install, a test module that imports the agent is skipped, not an error.

    With the agent extra installed this changes nothing: import errors stay errors.
    """
    report = yield
    if AGENT_EXTRA_INSTALLED or not report.failed or not isinstance(collector, pytest.Module):
        return report
    try:
        _ = collector.obj  # re-imports the module to get the exception itself
    except collector.CollectError as e:
        if not AGENT_EXTRA_INSTALLED and _needs_agent_extra(e.__cause__):
            return pytest.CollectReport(collector.nodeid, "skipped",
                                        (str(collector.path), 0, f"Skipped: {AGENT_SKIP_REASON}"),
                                        [])
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The same for a test that imports the agent inside its body, or in a subprocess whose
    traceback (reported by the test) ends in `MissingExtraError`."""
    report = yield
    if (not AGENT_EXTRA_INSTALLED and call.excinfo is not None and report.failed
            and (_needs_agent_extra(call.excinfo.value)
                 or f"{MissingExtraError.__module__}.MissingExtraError:" in str(report.longrepr))):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {AGENT_SKIP_REASON}")
    return report


@pytest.fixture(autouse=True)
def _seed_everything():
    if KERAS3:
        # The layers' one-line errors as they raise them: Keras 3 otherwise rewrites an error
        # raised in a layer's call ("Exception encountered when calling ...", ANSI bold). Per
        # test: `clear_session` resets it.
        keras.config.disable_traceback_filtering()
    keras.utils.set_random_seed(0)
    np.random.seed(0)
    yield
    keras.backend.clear_session()

