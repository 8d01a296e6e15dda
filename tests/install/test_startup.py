"""A quiet start (issue #29): the CLI prints none of TensorFlow's CUDA-registration lines or
gym's banner on a machine without a GPU, while genuine errors and warnings still show."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

from bayes_planet import _startup

ROOT = pathlib.Path(__file__).resolve().parents[2]

NOISE = ("Unable to register cuDNN factory", "Unable to register cuFFT factory",
         "Unable to register cuBLAS factory", "Could not find TensorRT",
         "Gym has been unmaintained", "Please upgrade to Gymnasium",
         "All log messages before absl::InitializeLog()")


def _env():
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # As a user runs it (the tests set 2).
    return env


def _run_python(script):
    """``script`` run by this Python as a user runs it; its completed process."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=_env())


def test_train_prints_no_start_up_noise(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bayes_planet.agent.cli", "train", "--preset", "debug", "--quiet",
         "--logdir", str(tmp_path / "run"), "--set", "eval.video=false",
         "--set", "train.episodes=2"],
        capture_output=True, text=True, timeout=600, env=_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("done: 2 episodes"), result.stdout
    assert result.stderr == "", result.stderr  # Nothing but the CLI's own output.


@pytest.mark.parametrize("benchmark,needs", [("layer_overhead", None),
                                              ("planning", "tf_agents")])
def test_benchmarks_print_no_start_up_noise(benchmark, needs):
    """``python -m benchmarks.<name>`` imports TensorFlow at its modules' top: the package
    imports it first through the public hook (`bayes_planet.quiet_import`)."""
    if needs and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{benchmark} needs {needs} (the agent stack)")
    result = subprocess.run([sys.executable, "-m", f"benchmarks.{benchmark}", "--help"],
                            capture_output=True, text=True, timeout=300, env=_env(), cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:"), result.stdout[:500]
    assert result.stderr == "", result.stderr


def test_genuine_tensorflow_warnings_and_errors_still_reach_the_user():
    script = ("import bayes_planet\n"
              "from bayes_planet import _startup\n"
              "_startup.quiet_import('tensorflow')\n"
              "import tensorflow as tf\n"
              "try:\n"
              "    tf.io.read_file('/nonexistent/file')\n"
              "except tf.errors.NotFoundError:\n"
              "    pass\n")
    result = _run_python(script)
    assert result.returncode == 0, result.stderr
    # TensorFlow's C++ warning for the failed op (level W) is shown; the import noise is not.
    assert "OP_REQUIRES failed" in result.stderr and "/nonexistent/file" in result.stderr
    assert not [n for n in NOISE if n in result.stderr], result.stderr


def test_the_filter_drops_only_the_known_lines_and_keeps_their_neighbours(capfd):
    with _startup.filtered_stderr():
        os.write(2, b"2026-01-01 E cuda_dnn.cc:9261] Unable to register cuDNN factory: "
                    b"Attempting to register factory for plugin cuDNN when one has already "
                    b"been registered\n")
        os.write(2, b"E something.cc:1] a genuine error\n")
        print("a Python warning on sys.stderr", file=sys.stderr)
        os.write(2, b"Gym has been unmaintained since 2022 and does not support NumPy 2.0 "
                    b"amongst other critical functionality.\n")
        os.write(2, b"no newline at the end")
    err = capfd.readouterr().err  # (pytest captures sys.stderr apart from fd 2: any order)
    assert sorted(err.splitlines()) == ["E something.cc:1] a genuine error",
                                        "a Python warning on sys.stderr", "no newline at the end"]


def test_an_import_error_inside_the_filter_is_reported_and_stderr_restored(capfd):
    import pytest

    with pytest.raises(ModuleNotFoundError):
        with _startup.filtered_stderr():
            __import__("bayes_planet_no_such_module")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_a_bad_config_key_fails_before_tensorflow_loads():
    """`config.validate` checks every key that needs no TensorFlow first (the CLI's fast
    failure); only the rank-1 factor names, checked last, load the layer library."""
    script = ("import sys\n"
              "from bayes_planet.agent import config\n"
              "try:\n"
              "    config.validate(config.load(['debug'], ['model.deter=0']))\n"
              "except config.ConfigError as e:\n"
              "    print(e)\n"
              "print('tensorflow' in sys.modules)\n")
    result = _run_python(script)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        "Expected a positive integer. Received: model.deter=0", "False"]
