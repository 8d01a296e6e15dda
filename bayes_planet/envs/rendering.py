"""Headless OpenGL backend selection and clean shutdown of MuJoCo renderers.

``dm_control`` and ``mujoco`` read the ``MUJOCO_GL`` environment variable once, when they are
first imported, and by default pick GLFW, which needs a display. This module therefore has to be
imported before either of them; ``bayes_planet.envs`` imports it first, and importing this module
selects a backend (see `select_gl_backend`):

1. If the user set ``MUJOCO_GL`` (to a non-empty value), it is respected and nothing is probed.
2. Otherwise ``egl`` and then ``osmesa`` are tried, each in a short-lived subprocess that renders
   one 8x8 frame, so a failing backend cannot poison this process. The first that works is
   written to ``os.environ['MUJOCO_GL']`` (child processes inherit it and skip the probe).
3. If none works, nothing is set and `require_rendering` raises
   `RenderingUnavailableError` naming the missing Debian packages. State-only use of the
   environments keeps working.

The module also fixes the ``RuntimeError: cannot schedule new futures after shutdown`` traceback
that ``dm_control`` prints at interpreter exit when it renders through an offloading render
thread (the OSMesa backend): ``dm_control`` frees its contexts in an ``atexit`` hook, which runs
after Python has already shut down the thread pools. Objects passed to
`register_for_cleanup` are closed in a hook that runs *before* that shutdown.
"""

import atexit
import concurrent.futures.thread  # noqa: F401  (registers its exit hook before ours, see below)
import ctypes.util
import glob
import logging
import os
import subprocess
import sys
import threading
import weakref

__all__ = [
    "RenderingUnavailableError",
    "choose_backend",
    "close_all",
    "probe_backend",
    "register_for_cleanup",
    "require_rendering",
    "select_gl_backend",
    "selected_backend",
]

_LOG = logging.getLogger(__name__)

#: Backends tried, in order, when the user did not set ``MUJOCO_GL``.
DEFAULT_CANDIDATES = ("egl", "osmesa")

#: Debian packages each backend needs.
DEBIAN_PACKAGES = {
    "egl": ("libegl1", "libgl1-mesa-dri"),
    "osmesa": ("libosmesa6",),
}

_PROBE_TIMEOUT_S = 60.0
_PROBE_CODE = """
from dm_control import mujoco
physics = mujoco.Physics.from_xml_string(
    '<mujoco><worldbody><light pos="0 0 2"/><geom type="sphere" size=".1"/></worldbody></mujoco>')
frame = physics.render(8, 8)
assert frame.shape == (8, 8, 3), frame.shape
physics.free()
"""


class RenderingUnavailableError(RuntimeError):
    """Raised when no headless OpenGL backend can render MuJoCo scenes."""


# State of the (once per process) selection.
_selection_done = False
_selected = None
_failures = {}
_lock = threading.Lock()


def probe_backend(backend, timeout=_PROBE_TIMEOUT_S):
    """Checks whether MuJoCo can render offscreen with ``MUJOCO_GL=backend``.

    The check runs in a subprocess, so a backend that crashes or hangs cannot harm this process.

    Args:
        backend: A ``MUJOCO_GL`` value, e.g. ``'egl'`` or ``'osmesa'``.
        timeout: Seconds to wait for the subprocess.

    Returns:
        ``(ok, message)``: ``ok`` is ``True`` if an 8x8 frame was rendered; ``message`` is the
        last line of the subprocess's error output when it was not.
    """
    if not isinstance(backend, str) or not backend:
        raise ValueError(f"Expected a non-empty backend name. Received: backend={backend!r}")
    env = dict(os.environ)
    env["MUJOCO_GL"] = backend
    # dm_control sets PYOPENGL_PLATFORM to match MUJOCO_GL when it is unset.
    if env.get("PYOPENGL_PLATFORM") and env["PYOPENGL_PLATFORM"] != backend:
        env.pop("PYOPENGL_PLATFORM")
    try:
        result = subprocess.run(
            [sys.executable, "-c", _PROBE_CODE],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:g} s"
    except OSError as error:
        return False, f"could not start {sys.executable}: {error}"
    if result.returncode == 0:
        return True, ""
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return False, lines[-1] if lines else f"exit code {result.returncode}"


def _missing_packages(backend):
    """Guesses which Debian packages of ``backend`` are missing from this machine."""
    missing = []
    if backend == "egl":
        if ctypes.util.find_library("EGL") is None:
            missing.append("libegl1")
        dri = glob.glob("/usr/lib/*/dri/swrast_dri.so") + glob.glob("/usr/lib/dri/swrast_dri.so")
        if not dri:
            missing.append("libgl1-mesa-dri")
    elif backend == "osmesa":
        if ctypes.util.find_library("OSMesa") is None:
            missing.append("libosmesa6")
    return missing


def _unavailable_message(failures):
    """Builds the error message for when every backend failed."""
    lines = ["No headless OpenGL backend can render MuJoCo scenes on this machine."]
    for backend, reason in failures.items():
        missing = _missing_packages(backend)
        hint = f" (missing Debian package: {' '.join(missing)})" if missing else ""
        lines.append(f"  MUJOCO_GL={backend} failed{hint}: {reason}")
    lines.append(
        "Install EGL with `apt-get install libegl1 libgl1-mesa-dri` (preferred) or OSMesa with "
        "`apt-get install libosmesa6`, or set MUJOCO_GL yourself. "
        "State observations (obs_type='state') work without rendering."
    )
    return "\n".join(lines)


def choose_backend(candidates=DEFAULT_CANDIDATES, probe=probe_backend):
    """Returns the first backend in ``candidates`` for which ``probe`` succeeds.

    Args:
        candidates: Sequence of ``MUJOCO_GL`` values to try in order.
        probe: Callable ``probe(backend) -> (ok, message)``; defaults to `probe_backend`.

    Returns:
        ``(backend, failures)``: the working backend (``None`` if none works) and a dict mapping
        each failed backend to its error message.
    """
    failures = {}
    for backend in candidates:
        ok, message = probe(backend)
        if ok:
            return backend, failures
        _LOG.info("MUJOCO_GL=%s does not work here: %s", backend, message)
        failures[backend] = message
    return None, failures


def select_gl_backend():
    """Chooses ``MUJOCO_GL`` for this process (once; later calls return the cached choice).

    Respects a ``MUJOCO_GL`` the user set. Otherwise probes :data:`DEFAULT_CANDIDATES` and sets
    ``os.environ['MUJOCO_GL']`` to the first that works. Must run before ``dm_control`` or
    ``mujoco`` is imported to have an effect; if ``dm_control`` was imported first, the backend it
    already picked is reported instead (with a warning when that was not a deliberate choice).

    Returns:
        The backend name, or ``None`` if no backend works (see `require_rendering`).
    """
    global _selection_done, _selected, _failures
    with _lock:
        if _selection_done:
            return _selected
        user_choice = os.environ.get("MUJOCO_GL", "").strip().lower()  # Empty counts as unset.
        dm_render = sys.modules.get("dm_control._render")
        if user_choice:
            _selected = user_choice
        elif dm_render is not None:
            _selected = dm_render.BACKEND
            _LOG.warning(
                "dm_control was imported before bayes_planet.envs, so MUJOCO_GL could not be "
                "chosen automatically (dm_control picked %r). Import bayes_planet.envs first or "
                "set MUJOCO_GL=egl.",
                _selected,
            )
        else:
            _selected, _failures = choose_backend()
            if _selected is not None:
                os.environ["MUJOCO_GL"] = _selected
                _LOG.info("Selected MUJOCO_GL=%s for headless rendering.", _selected)
        _selection_done = True
        return _selected


def selected_backend():
    """Returns the backend chosen by `select_gl_backend` (running it if needed)."""
    return select_gl_backend()


def require_rendering():
    """Raises `RenderingUnavailableError` unless a rendering backend is available.

    Returns:
        The selected backend name.
    """
    backend = select_gl_backend()
    if backend is None or backend in ("off", "disable", "disabled", "false", "0"):
        failures = _failures or {"(none)": f"MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}"}
        raise RenderingUnavailableError(_unavailable_message(failures))
    return backend


# ------------------------------------------------------------------------------------------------
# Clean shutdown.

_LIVE = weakref.WeakSet()


def register_for_cleanup(obj):
    """Registers ``obj`` so that ``obj.close()`` runs before the interpreter's thread shutdown.

    Args:
        obj: Any object with an idempotent ``close()`` method; held by weak reference.

    Returns:
        ``obj``, for chaining.
    """
    if not callable(getattr(obj, "close", None)):
        raise TypeError(f"Expected an object with a close() method. Received: obj={obj!r}")
    _LIVE.add(obj)
    return obj


def close_all():
    """Closes every object registered with `register_for_cleanup` that is still alive."""
    for obj in list(_LIVE):
        try:
            obj.close()
        except Exception as error:  # Never fail at interpreter exit.
            _LOG.debug("Ignoring error while closing %r at exit: %s", obj, error)
    _LIVE.clear()


# ``threading._register_atexit`` hooks run in reverse order of registration when the main thread
# finishes, before non-daemon threads are joined and before ``atexit`` hooks. ``concurrent.futures``
# shuts its worker threads down in such a hook, registered when ``concurrent.futures.thread`` is
# first imported (done at the top of this module), so ours, registered later, runs first -- while
# dm_control's render threads can still free their OpenGL contexts. ``atexit`` is the fallback for
# Python versions without the private hook.
_register_thread_exit = getattr(threading, "_register_atexit", None)
if _register_thread_exit is not None:
    _register_thread_exit(close_all)
else:  # pragma: no cover
    atexit.register(close_all)

select_gl_backend()
