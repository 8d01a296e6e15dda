"""experiments/gpu_pixels.py: the GPU check, the precision it keeps, and its whole path (a
debug pixel grid on the CPU: benchmark, grid, archive; a rerun keeps the precision)."""

import json

import pytest

from tests.scripts._experiments import load


@pytest.fixture(scope="module")
def gpu_pixels():
    return load("gpu_pixels")


def _timings(first, second):
    return {"variants": {"a": {"update_s": first}, "a:bf16": {"update_s": second}}}


def test_bfloat16_is_kept_only_where_it_pays(gpu_pixels):
    assert gpu_pixels.choose_precision(_timings(1.0, 0.9), 0.9) == "mixed_bfloat16"
    assert gpu_pixels.choose_precision(_timings(1.0, 0.91), 0.9) == "float32"
    assert gpu_pixels.choose_precision(_timings(2.0, 0.5), 0.9) == "mixed_bfloat16"


def test_the_benchmark_variant_is_the_grids_agent(gpu_pixels):
    assert gpu_pixels.variant_spec(["pixels", "debug"], ["eval.video=false"]) == (
        "pixels,debug:eval.video=false")
    with pytest.raises(gpu_pixels.yaml_config.ConfigError, match=r"Received: base_presets=\[\]"):
        gpu_pixels.variant_spec([], [])


def test_no_gpu_stops_with_one_line(gpu_pixels, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_pixels, "gpu_names", lambda: [])
    with pytest.raises(SystemExit, match="TensorFlow sees no GPU"):
        gpu_pixels.main(["--grid", "pixels_debug", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        gpu_pixels.main(["--grid", "pixels_debug", "--steps", "0"])


def test_the_pixel_grid_is_the_default_agent_from_pixels_on_six_tasks(gpu_pixels, tmp_path):
    from bayes_planet.agent import config as config_lib

    agents = gpu_pixels.agents
    config = agents._config.load_dict(agents.CONFIG_PATH, ["pixels"], [])
    runs = agents.grid(config, tmp_path)
    assert len(runs) == 18 and {r["seed"] for r in runs} == {0, 1, 2}
    tasks = agents._config.load_dict(agents.CONFIG_PATH, ["tasks"], [])["tasks"]
    assert [r["task"] for r in runs[:6]] == tasks
    merged = config_lib.validate(config_lib.load(config["base_presets"], runs[0]["sets"]))
    default = config_lib.validate(config_lib.load([], ["obs_type=pixels"]))
    assert merged.to_dict() == default.to_dict()


@pytest.mark.slow
def test_the_whole_path_on_a_debug_grid(gpu_pixels, tmp_path):
    out, archive = tmp_path / "out", tmp_path / "archive" / "r.json"
    args = ["--grid", "pixels_debug", "--out", str(out), "--archive", str(archive),
            "--no-scores", "--allow-cpu", "--rounds", "1", "--steps", "1"]
    assert gpu_pixels.main(args) == 0
    timings = json.loads((out / "precision.json").read_text())
    precision = timings["precision"]
    assert precision == gpu_pixels.choose_precision(timings, 0.9)
    results = json.loads(archive.read_text())
    (run,) = results["variants"]["reparameterization"]["runs"].values()
    assert run["config"]["obs_type"] == "pixels"
    assert run["config"]["model"]["cnn_precision"] == precision
    assert (archive.parent / "pixels_debug_precision.json").exists()
    # A rerun reads the precision back (no new benchmark) and skips the finished run.
    (out / "precision.json").write_text(json.dumps(dict(timings, marker=1)))
    assert gpu_pixels.main(args) == 0
    assert json.loads((out / "precision.json").read_text())["marker"] == 1
