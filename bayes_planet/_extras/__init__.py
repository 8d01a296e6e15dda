"""Optional parts of the install: which modules need the ``agent`` extra.

The base install (``pip install bayes-planet``) is the layer library: TensorFlow,
TensorFlow Probability, tf-keras where TF >= 2.16, numpy. The Bayesian PlaNet agent
(``training``, ``agent``, ``envs``, ``config``, ``probes``, the CLI) also needs the
``agent`` extra; their first import is ``import bayes_planet._extras.agent``, which
calls :func:`require_agent_extra`, so that a layers-only install fails with one line
naming the extra instead of a deep ``ModuleNotFoundError`` from TF-Agents or MuJoCo.
"""

import functools
import importlib.util

__all__ = ["AGENT_MODULES", "MissingExtraError", "agent_extra_installed", "require_agent_extra"]

# Import names of the agent extra's distributions (pyproject.toml [project.optional-dependencies]).
AGENT_MODULES = (
    "tf_agents", "dm_control", "mujoco", "gymnasium", "imageio", "sklearn", "yaml", "tqdm",
    "matplotlib",
)


class MissingExtraError(ImportError):
    """An optional extra of bayes-planet is not installed."""


@functools.lru_cache(maxsize=None)
def _missing(modules):
    return tuple(m for m in modules if importlib.util.find_spec(m) is None)


def agent_extra_installed():
    """Whether every distribution of the ``agent`` extra is importable (imports none of them)."""
    return not _missing(AGENT_MODULES)


def require_agent_extra(what, modules=AGENT_MODULES):
    """Raises `MissingExtraError` (one line) if the ``agent`` extra is missing.

    Args:
      what: what needs the extra, for the message.
      modules: the import names of the extra that ``what`` needs (default: all of
        `AGENT_MODULES`; e.g. ``("yaml",)`` for the YAML config loader of the scripts).
    """
    missing = _missing(tuple(modules))
    if missing:
        raise MissingExtraError(
            f"{what} needs the 'agent' extra (Python 3.10-3.11), which is not installed "
            f"(missing: {', '.join(missing)}). Install it with: pip install 'bayes-planet[agent]'")
