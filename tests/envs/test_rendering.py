"""The headless rendering backend (`bayes_planet.envs.rendering`): selected automatically,
falling back with the packages to install, and a clean exit of a fresh process."""

import os
import subprocess
import sys
import textwrap

import pytest

from bayes_planet.envs import rendering


def test_backend_selected_automatically():
    backend = rendering.selected_backend()
    assert backend in ("egl", "osmesa", "glfw")
    assert os.environ["MUJOCO_GL"] == backend


def test_choose_backend_falls_back_and_reports_packages():
    results = {"egl": (False, "no EGL display"), "osmesa": (True, "")}
    chosen, failures = rendering.choose_backend(probe=lambda name: results[name])
    assert chosen == "osmesa" and failures == {"egl": "no EGL display"}

    chosen, failures = rendering.choose_backend(probe=lambda name: (False, f"{name} broken"))
    assert chosen is None
    message = rendering._unavailable_message(failures)
    for package in ("libegl1", "libgl1-mesa-dri", "libosmesa6"):
        assert package in message
    assert "egl broken" in message and "osmesa broken" in message


def _run_script(code, **env_overrides):
    env = dict(os.environ)
    for key, value in env_overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


_EXIT_SCRIPT = """
    import os
    import numpy as np
    from bayes_planet.envs import make, rendering
    env = make("cartpole-swingup", episode_length=16)
    env.reset()
    env.step(np.zeros(1))
    print(rendering.selected_backend(), os.environ["MUJOCO_GL"], env.render().shape)
    # No close(): the interpreter's exit must free the renderer without a traceback.
"""


def test_fresh_process_selects_backend_and_exits_cleanly():
    result = _run_script(_EXIT_SCRIPT, MUJOCO_GL=None, PYOPENGL_PLATFORM=None)
    assert result.returncode == 0, result.stderr
    backend, variable, shape = result.stdout.split(maxsplit=2)
    assert backend == variable and backend in ("egl", "osmesa")
    assert shape.strip() == "(64, 64, 3)"
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr


def test_cleanup_hook_runs_while_worker_threads_live():
    # The mechanism behind the clean exit, independent of the GL backend: a registered object
    # whose close() needs a thread-pool worker (as dm_control's offloading render executor does)
    # is closed before Python shuts the pools down.
    code = """
        from concurrent import futures
        from bayes_planet.envs import rendering

        class Holder:
            def __init__(self):
                self.executor = futures.ThreadPoolExecutor(max_workers=1)
                self.executor.submit(int).result()

            def close(self):
                print(self.executor.submit(str, "closed with a live worker").result())
                self.executor.shutdown()

        holder = rendering.register_for_cleanup(Holder())
    """
    result = _run_script(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "closed with a live worker"
    assert "Traceback" not in result.stderr


def test_osmesa_exits_cleanly():
    # OSMesa renders on an offloading thread: the case that printed "cannot schedule new
    # futures after shutdown" at exit.
    ok, message = rendering.probe_backend("osmesa")
    if not ok:
        pytest.skip(f"OSMesa is not available here: {message}")
    result = _run_script(_EXIT_SCRIPT, MUJOCO_GL="osmesa", PYOPENGL_PLATFORM=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("osmesa osmesa")
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
