"""The old import paths of moved modules, kept for one release.

A module that moved keeps a file at its old path whose whole body is
``alias(__name__, "<new path>")``: importing the old path warns (`DeprecationWarning`, naming
the new path) and gives the moved module itself (``import bayes_planet.config`` is
``bayes_planet.agent.config``); ``python -m <old path>`` runs the new module as the main one.
"""

import importlib
import runpy
import sys
import warnings

__all__ = ["alias"]


def alias(name, new):
    """Makes the module being imported as ``name`` the module ``new``, with a warning.

    Args:
      name: the old module's ``__name__`` (``"__main__"`` under ``python -m``).
      new: the dotted path the module moved to.
    """
    main = name == "__main__"
    old = sys.modules["__main__"].__spec__.name if main else name
    warnings.warn(f"{old} moved to {new}; the old path is deprecated and goes in the next "
                  f"release", DeprecationWarning, stacklevel=3)
    if main:
        runpy.run_module(new, run_name="__main__", alter_sys=True)
    else:
        sys.modules[name] = importlib.import_module(new)
