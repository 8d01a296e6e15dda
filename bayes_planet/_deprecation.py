"""The old import paths of moved modules, kept for one release.

A module that moved keeps a file at its old path whose whole body is
``alias(__name__, "<new path>")``: importing the old path warns (`DeprecationWarning`, naming
the new path) and gives the moved module itself (``import bayes_planet.config`` is
``bayes_planet.agent.config``); ``python -m <old path>`` runs the new module as the main one.
Functions that moved between modules stay reachable at the old module for as long
(`moved_attributes`), with the same warning.
"""

import importlib
import runpy
import sys
import warnings

__all__ = ["alias", "moved_attributes"]


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


def moved_attributes(name, new, attributes):
    """A module ``__getattr__`` for ``attributes`` that moved from module ``name`` to module
    ``new``: each warns (`DeprecationWarning`) and is the moved object."""
    def __getattr__(attribute):
        if attribute not in attributes:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        warnings.warn(f"{name}.{attribute} moved to {new}.{attribute}; the old path is "
                      f"deprecated and goes in the next release", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), attribute)

    return __getattr__
