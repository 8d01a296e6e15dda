"""Fault injection for the crash-safety tests: SIGKILL at a named point of the agent loop.

``BAYES_PLANET_FAULT=name[:n]`` makes `fault_point` SIGKILL the process the ``n``-th time
(default 1st) it reaches the point ``name``; `FAULT_POINTS` lists the points. Without the
variable `fault_point` does nothing.
"""

import os
import signal
import sys

__all__ = ["FAULT_ENV", "FAULT_POINTS", "fault_armed", "fault_point"]

FAULT_ENV = "BAYES_PLANET_FAULT"
#: The named points where `fault_point` can kill the process.
FAULT_POINTS = ("config_write", "seed_episode", "train", "plan", "eval", "checkpoint_write",
                "metrics_write", "branch_copy")
_hits = {}


def fault_point(name):
    """SIGKILLs this process at the ``n``-th call with ``name`` if ``BAYES_PLANET_FAULT=name:n``."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    target, _, count = spec.partition(":")
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= int(count or 1):
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def fault_armed(name):
    """Whether ``BAYES_PLANET_FAULT`` names the point ``name`` (to tear a write on purpose)."""
    return os.environ.get(FAULT_ENV, "").partition(":")[0] == name
