"""The install split: the layer library never imports the agent stack; the agent's modules
fail with one line naming the ``agent`` extra when it is missing (simulated here by hiding
one of its modules, so the tests run on both the agent and the layers-only install)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from bayes_planet._extras import AGENT_MODULES

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Modules of the agent stack, and heavy modules pulled in only through it.
AGENT_STACK = AGENT_MODULES + ("dm_env", "pygame", "gym", "imageio_ffmpeg")
# The layer library and the modules beside it (all but bayes_planet.agent, bayes_planet.envs and
# the YAML loaders of the scripts).
LIBRARY_MODULES = ("bayes_planet", "bayes_planet.layers", "bayes_planet.layers.testing",
                   "bayes_planet.layers.demo", "bayes_planet.uncertainty",
                   "bayes_planet.uncertainty.metrics", "bayes_planet.uncertainty.recalibration",
                   "bayes_planet.export", "bayes_planet.planners", "bayes_planet.distribute",
                   "bayes_planet.layer_registry", "bayes_planet.seeds", "bayes_planet.run_dirs")


def _python(code, hide=()):
    """Runs `code` in a fresh interpreter with the modules `hide` made unimportable."""
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in hide)
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_layer_library_does_not_import_the_agent_stack():
    # What Keras itself imports is not ours (Keras 3 imports scikit-learn where installed).
    code = ("import json, sys\nimport bayes_planet._keras\nkeras_modules = set(sys.modules)\n"
            + "".join(f"import {m}\n" for m in LIBRARY_MODULES)
            + f"print(json.dumps(sorted(m for m in {AGENT_STACK!r} "
            "if m in sys.modules and m not in keras_modules)))\n")
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("module", ["bayes_planet.agent.training", "bayes_planet.envs",
                                    "bayes_planet.agent", "bayes_planet.agent.policy",
                                    "bayes_planet.agent.collection", "bayes_planet.agent.cli",
                                    "bayes_planet.agent.config", "bayes_planet.agent.probes",
                                    "bayes_planet.agent.networks", "bayes_planet.agent.replay"])
def test_agent_modules_name_the_missing_extra(module):
    result = _python(
        f"try:\n    import {module}\nexcept ImportError as e:\n"
        "    print(type(e).__name__); print(e)\nelse:\n    print('imported')\n",
        hide=("tf_agents",))
    assert result.returncode == 0, result.stderr
    kind, *message = result.stdout.strip().splitlines()
    assert kind == "MissingExtraError"
    assert len(message) == 1, message  # one line
    assert "'agent' extra" in message[0] and "missing: tf_agents" in message[0]
    assert "pip install 'bayes-planet[agent]'" in message[0]


# The scripts built on the layer library alone; they load their YAML with bayes_planet.yaml_config.
LAYERS_ONLY_SCRIPTS = ("experiments/gp.py", "experiments/generative.py", "experiments/resnet.py",
                       "experiments/calibration.py", "experiments/sequence.py",
                       "benchmarks/uncertainty.py")
# TF-Agents, MuJoCo and what comes only with them.
AGENT_ONLY = ("tf_agents", "dm_control", "mujoco", "gymnasium", "gym", "dm_env", "pygame")


@pytest.mark.parametrize("script", LAYERS_ONLY_SCRIPTS)
def test_layers_only_scripts_run_without_tf_agents_and_mujoco(script):
    """With TF-Agents, dm-control, MuJoCo and gymnasium unimportable, a layers-only script
    imports, merges every preset of its YAML (the generic loader) and prints its --help."""
    code = (
        "import runpy\n"
        "from bayes_planet import yaml_config\n"
        f"scope = runpy.run_path({script!r})\n"
        "path = scope['CONFIG_PATH']\n"
        "for name in yaml_config.presets(path):\n"
        "    assert isinstance(yaml_config.load_dict(path, [name]), dict), name\n"
        f"sys.argv = [{script!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_path({script!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        f"print('LOADED', sorted(m for m in {AGENT_ONLY!r} if sys.modules.get(m) is not None))\n")
    result = _python(code, hide=AGENT_ONLY)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "usage:" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "LOADED []"


def test_the_yaml_loader_names_the_missing_extra_without_pyyaml():
    result = _python(
        "try:\n    import bayes_planet.yaml_config\nexcept ImportError as e:\n"
        "    print(type(e).__name__); print(e)\n", hide=("yaml",))
    assert result.returncode == 0, result.stderr
    kind, *message = result.stdout.strip().splitlines()
    assert kind == "MissingExtraError" and len(message) == 1, message
    assert "YAML config loader" in message[0] and "missing: yaml" in message[0]


def test_agent_test_modules_skip_with_the_reason_without_the_extra():
    """conftest turns "the agent extra is missing" into a skip that says so (and only that):
    of a module that imports the agent, as it is collected; of the agent's tests that run it
    only in a fresh process (tests/agent/test_cli.py), before they start."""
    result = _python(
        "import pytest\n"
        "sys.exit(pytest.main(['-q', '-rs', '--co', '-p', 'no:cacheprovider', "
        "'tests/agent/test_policy.py']))\n", hide=("tf_agents",))
    assert result.returncode == 5, result.stdout + result.stderr  # nothing collected, no error
    assert "SKIPPED [1] tests/agent/test_policy.py" in result.stdout
    assert "the 'agent' extra is not installed" in result.stdout
    result = _python(
        "import pytest\n"
        "sys.exit(pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', "
        "'tests/agent/test_cli.py']))\n", hide=("tf_agents",))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 skipped" in result.stdout and "passed" not in result.stdout, result.stdout
    skips = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all("tests/agent/test_cli.py" in line
                         and "the 'agent' extra is not installed" in line for line in skips), skips


def test_base_dependencies_exclude_the_agent_extra():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = pytest.importorskip("packaging.requirements")  # a dependency of pytest
    base, agent = ({requirements.Requirement(r).name for r in reqs}
                   for reqs in (project["dependencies"], project["optional-dependencies"]["agent"]))
    assert base == {"tensorflow", "tensorflow-probability", "tf-keras", "numpy", "grpcio"}
    assert {"tf-agents", "dm-control", "mujoco", "gymnasium", "imageio"} <= agent
    assert not base & agent


OTHER_STACK_PYTHON = os.environ.get("BAYES_PLANET_OTHER_STACK_PYTHON")


def _tf_version(python):
    result = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('tensorflow'))"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    return tuple(int(v) for v in result.stdout.strip().split(".")[:2])


def _cross_stack(python, command, directory, legacy_keras=False):
    # TF_USE_LEGACY_KERAS only where asked (the newer stack's tf-keras mode): inherited, it would
    # make TF 2.15 look for tf-keras, and choose Keras 2 on TF >= 2.16.
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    result = subprocess.run([python, "-m", "tests.install._cross_stack", command, str(directory)],
                            capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]) if command == "load" else None


def _same_outputs_and_kl(load):
    assert "error" not in load, load
    assert load["max_abs_output_diff"] < 1e-5
    assert load["kl"] == pytest.approx(load["saved_kl"], rel=1e-6)


@pytest.mark.skipif(not OTHER_STACK_PYTHON, reason=(
    "needs BAYES_PLANET_OTHER_STACK_PYTHON: an interpreter with the other TF/Keras stack "
    "(CI's layers job sets it)"))
@pytest.mark.parametrize("newer_keras", ["keras3", "tf_keras"])
def test_save_load_across_stacks(tmp_path, newer_keras):
    """Between TF 2.15 (Keras 2) and TF >= 2.16 with Keras 3 (its default) or with tf-keras
    (TF_USE_LEGACY_KERAS=1), a model of mean-field conv/dense/LSTM and rank-1/BatchEnsemble layers
    moves by `.weights.h5` both ways with the same posterior-mean outputs and KL. Whole `.keras`
    files: TF 2.15 -> tf-keras loads; nothing else does (docs/saving.md)."""
    versions = {python: _tf_version(python) for python in (sys.executable, OTHER_STACK_PYTHON)}
    older, newer = sorted(versions, key=versions.get)
    assert versions[older] < (2, 16) <= versions[newer], versions
    legacy = {older: False, newer: newer_keras == "tf_keras"}
    loads = {}
    for way, saver, loader in (("old_to_new", older, newer), ("new_to_old", newer, older)):
        (tmp_path / way).mkdir()
        _cross_stack(saver, "save", tmp_path / way, legacy[saver])
        loads[way] = _cross_stack(loader, "load", tmp_path / way, legacy[loader])
    assert loads["old_to_new"]["keras"] == ("tf_keras" if legacy[newer] else "keras")
    assert loads["new_to_old"]["keras"].startswith("keras.api._v2")  # TF 2.15's tf.keras
    for way in ("old_to_new", "new_to_old"):
        _same_outputs_and_kl(loads[way]["weights"])
    # Each Keras reads only its own generation's module paths in a `.keras` file.
    if newer_keras == "tf_keras":
        _same_outputs_and_kl(loads["old_to_new"]["model"])
        assert "tf_keras" in loads["new_to_old"]["model"].get("error", ""), loads["new_to_old"]
    else:
        assert "keras.src.engine.functional" in loads["old_to_new"]["model"].get("error", "")
        assert "keras.src.models.functional" in loads["new_to_old"]["model"].get("error", "")
