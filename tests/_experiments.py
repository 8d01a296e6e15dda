"""Test helpers for the scripts in ``experiments/`` (not collected by pytest)."""

import importlib.util
import json
import pathlib

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1] / "experiments"


def load(name):
    """``experiments/<name>.py`` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_experiment", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(module, tmp_path, preset):
    """``module.main`` on ``preset`` + ``debug``; checks and returns ``results.json``."""
    results = module.main(["--preset", preset, "debug", "--out", str(tmp_path)])
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results))
    assert on_disk["example"] == preset and (tmp_path / "config.yaml").exists()
    return on_disk
