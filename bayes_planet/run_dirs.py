"""Where a script may write: never into a directory that holds a run, unless it is its trainer.

A run directory (`bayes_planet.agent.run`) is written by one process only, its trainer. Every other
writer of the project — ``bayes-planet eval --out`` and ``probe --out``, the grid launchers
``experiments/agents.py`` and ``experiments/branches.py``, the example scripts and benchmarks —
checks its output folder here before it writes anything: a folder that is a run, or lies
inside one, is refused in one line naming the argument, the value and the run. The trainer
checks its own ``--logdir`` the same way, with ``own=True``: it may be a run (its own, which it
resumes), but not lie inside another.

A directory holds a run if it holds a ``config.yaml`` beside a writer's ``.lock`` file or an
``episodes/`` or ``checkpoints/`` folder (a branch before its first training). Standard library
only: the layers-only scripts use it without the agent extra.
"""

import pathlib

__all__ = ["OutputDirError", "check_directory", "check_output_dir", "enclosing_run",
           "holds_run", "make_output_dir"]


class OutputDirError(ValueError):
    """An output folder that is empty, a file, or a run's directory (one line)."""


def holds_run(path):
    """Whether the directory ``path`` holds a run (see the module docstring)."""
    path = pathlib.Path(path)
    return (path / "config.yaml").is_file() and (
        (path / ".lock").is_file()
        or any((path / folder).is_dir() for folder in ("episodes", "checkpoints")))


def enclosing_run(path):
    """The run directory that ``path`` is or lies inside (resolved), or None."""
    path = pathlib.Path(path).resolve()
    for folder in (path, *path.parents):
        if holds_run(folder):
            return folder
    return None


def check_directory(name, path, expected="a directory"):
    """``path`` as a path: not empty (it would mean the current directory), and neither a
    file nor inside one; `OutputDirError` naming ``name`` and the value otherwise."""
    if path is None or not str(path).strip():
        raise OutputDirError(f"Expected {expected}. Received: {name}={path!r}")
    path = pathlib.Path(path)
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                where = "is" if folder == path else f"lies inside {str(folder)!r},"
                raise OutputDirError(f"Expected a directory. Received: {name}={str(path)!r} "
                                     f"{where} a file")
            break
    return path


def check_output_dir(name, path, own=False):
    """``path`` as a path, checked before anything is written: a directory or none yet
    (`check_directory`), and neither a run nor inside one. ``own``: ``path`` is the caller's
    own run (the trainer's ``--logdir``), which may hold a run but not lie inside another.
    `OutputDirError` naming ``name`` and the value otherwise."""
    path = check_directory(name, path)
    run = enclosing_run(path)
    if run is not None and not (own and run == path.resolve()):
        where = "is" if run == path.resolve() else "lies inside"
        raise OutputDirError(f"Expected a folder outside any run (only a run's trainer writes "
                             f"into it). Received: {name}={str(path)!r} {where} the run "
                             f"{str(run)!r}")
    return path


def make_output_dir(name, path):
    """`check_output_dir`, then creates the folder (and its parents); returns it."""
    path = check_output_dir(name, path)
    path.mkdir(parents=True, exist_ok=True)
    return path
