"""Test helpers for the scripts in ``experiments/`` (not collected by pytest)."""

import json
import pathlib

from bayes_planet.experiment import load_script

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[2] / "experiments"


def load(name):
    """``experiments/<name>.py`` as a module (the scripts are not a package)."""
    return load_script(EXPERIMENTS / f"{name}.py", f"{name}_experiment")


def run_example(module, tmp_path, preset):
    """``module.main`` on ``preset`` + ``debug``; checks and returns ``results.json``."""
    results = module.main(["--preset", preset, "debug", "--out", str(tmp_path)])
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results))
    assert on_disk["example"] == preset and (tmp_path / "config.yaml").exists()
    return on_disk
