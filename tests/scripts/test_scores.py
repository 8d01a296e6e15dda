"""experiments/scores.py: the score files and the README's table are what the archive gives;
runs are filed under the method their recorded config is, each run once."""

import io
import json

import pytest

from bayes_planet import yaml_config
from bayes_planet.agent import config as config_lib
from tests.scripts._experiments import load


@pytest.fixture(scope="module")
def scores():
    return load("scores")


@pytest.fixture(scope="module")
def methods(scores):
    return scores.read_methods()


def test_the_committed_score_files_and_readme_table_are_the_archives(scores):
    """scores/ and the README's table between its markers equal what the script computes
    from experiments/ (a changed archive, method or anchor fails here until rewritten)."""
    assert scores.main(["--check"]) == 0


def _config(*overrides, **top):
    data = config_lib.load([], list(overrides)).to_dict()
    data.update(top)
    return data


def test_a_run_is_the_method_its_config_is(scores, methods):
    assert scores.method_of(_config(), methods) == "bayes-planet"
    assert scores.method_of(_config("model.estimator=deterministic"), methods) == (
        "bayes-planet-deterministic")
    # Neutral keys (task, seed, length, checkpoints, videos) are no part of a method.
    neutral = _config("model.estimator=deterministic", "train.episodes=50", "eval.video=false",
                      task="walker-walk", seed=3)
    assert scores.method_of(neutral, methods) == "bayes-planet-deterministic"
    assert scores.method_of(_config("model.estimator=deterministic", "train.batch_size=16"),
                            methods) is None
    # An older layout is read as it ran (a missing key means its old behaviour).
    old = _config()
    del old["loss"]["overshooting"]
    assert scores.method_of(old, methods) == "bayes-planet"


def test_each_run_is_filed_once_from_the_copy_that_reached_furthest(scores, methods, tmp_path):
    config = _config(task="walker-walk", seed=0)
    short, full = [(10000, 1.0), (15000, 2.0)], [(10000, 1.0), (15000, 2.0), (20000, 3.0)]
    other = [(10000, 5.0), (15000, 6.0)]
    log = io.StringIO()
    files = scores.collect([("a", config, short), ("b", config, full),
                            ("c", dict(config, seed=1), other)], methods, log)
    assert files == {("dmc_proprio", "walker-walk"): {("bayes-planet", 0): full,
                                                       ("bayes-planet", 1): other}}
    assert log.getvalue() == ""
    # Two copies that disagree both ran: the further one is filed, the other named.
    files = scores.collect([("b", config, full), ("lost", config, other)], methods, log)
    assert files[("dmc_proprio", "walker-walk")][("bayes-planet", 0)] == full
    assert "b and lost disagree; filed b (to 20000 env steps)" in log.getvalue()
    # Runs of no method are left out; pixels go to their own suite.
    files = scores.collect([("x", _config("train.batch_size=16"), full),
                            ("p", _config("obs_type=pixels", task="walker-walk"), full)],
                           _methods(scores, tmp_path, px=["obs_type=pixels"]), log)
    assert files == {("dmc_pixels", "walker-walk"): {("px", 0): full}}


def test_a_branch_is_no_run_of_the_method_its_recorded_config_is(scores, tmp_path):
    """A run directory with a ``branch.json`` records the config after its branch point and
    its parent's curve before it: it is left out, the run beside it without one is read."""
    config = config_lib.load([], ["task=finger-spin"])
    for name in ("run", "branch"):
        run = tmp_path / name / "seed0"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(yaml_config.dump(config))
        (run / "metrics.jsonl").write_text(
            json.dumps({"episode": 10, "env_steps": 10000, "eval_return": 7.0}) + "\n")
    (tmp_path / "branch" / "seed0" / "branch.json").write_text(json.dumps(
        {"parent": "runs/x", "episode": 5, "changes": [["value.replay_weight", 0.0, 1.0]]}))
    runs = scores.archived_runs(tmp_path)
    assert [(source, curve) for source, _, curve in runs] == [("run/seed0", [(10000, 7.0)])]


def _methods(scores, tmp_path, **overrides):
    path = tmp_path / "methods.yaml"
    path.write_text(json.dumps({"methods": {name: {"overrides": o, "about": name}
                                            for name, o in overrides.items()}}))
    return scores.read_methods(path)


def test_a_score_file_round_trips(scores):
    text = scores.score_text({("m", 1): [(10000, 12.345)], ("m", 0): [(5000, 1.0),
                                                                      (10000, 2.0)]})
    assert text == ("method,seed,env_step,return\nm,0,5000,1.0\nm,0,10000,2.0\n"
                    "m,1,10000,12.3\n")
    runs = scores.parse_scores(text)["m"]
    assert [r["env_steps"] for r in runs] == [10000, 10000]
    assert runs[0]["curves"]["eval_return"] == [(5000, 1.0), (10000, 2.0)]


def test_the_table_cells_are_over_seeds(scores, methods):
    text = scores.score_text({("bayes-planet", s): [(50000, 100.0 * (s + 1)),
                                                    (100000, 200.0 * (s + 1))]
                              for s in range(3)})
    anchors = {"columns": [("TD-MPC2", 100000), ("DreamerV3", 50000)],
               "returns": {"walker-walk": {("TD-MPC2", 100000): 962}}}
    lines = scores.table({"dmc_proprio/walker-walk.csv": text}, methods, anchors).splitlines()
    assert lines[0].startswith("| task | bayes-planet 50k | bayes-planet 100k | "
                               "bayes-planet-deterministic 50k")
    assert lines[0].endswith("| other configs 100k | TD-MPC2 100k |")
    assert lines[2] == ("| walker-walk | 200 ± 82 (n=3) | 400 ± 163 (n=3) | — | — | — | 962 |")


def test_each_suite_has_its_table_with_a_row_per_task_of_its_files_or_anchors(scores, methods):
    pixels = scores.score_text({("bayes-planet-pixels", 0): [(100000, 300.0)]})
    files = {"dmc_pixels/cartpole-swingup.csv": pixels}
    anchors = {"columns": [("DrQ", 100000)],
               "returns": {"cartpole-swingup": {("DrQ", 100000): 759},
                           "walker-walk": {("DrQ", 100000): 612}}}
    lines = scores.table(files, methods, anchors, "dmc_pixels").splitlines()
    assert lines[0] == ("| task | bayes-planet-pixels 50k | bayes-planet-pixels 100k | "
                        "other configs 100k | DrQ 100k |")
    assert lines[2:] == ["| cartpole-swingup | — | 300 ± 0 (n=1) | — | 759 |",
                         "| walker-walk | — | — | — | 612 |"]
    # The states table has none of the pixel methods' columns or rows.
    states = scores.table(files, methods, anchors, "dmc_proprio").splitlines()
    assert "pixels" not in states[0] and states[2] == "| cartpole-swingup | — | — | — | — | — | 759 |"


def test_the_pixel_networks_precision_is_no_part_of_a_method(scores, methods):
    config = _config("obs_type=pixels", "model.cnn_precision=mixed_bfloat16")
    assert scores.method_of(config, methods) == "bayes-planet-pixels"
    assert scores.suite_of(config) == "dmc_pixels"


def test_a_collapse_is_an_evaluation_below_half_of_the_best_before_it(scores):
    curve = [(40000, 300.0), (50000, 149.0), (55000, 151.0), (60000, 500.0), (70000, 240.0),
             (80000, 260.0)]
    assert scores.collapses(curve) == [(50000, 149.0, 40000, 300.0), (70000, 240.0, 60000, 500.0)]
    # Before 50k nothing counts; a best under 100 has not learned the task.
    assert scores.collapses([(10000, 400.0), (20000, 10.0), (50000, 300.0)]) == []
    assert scores.collapses([(40000, 90.0), (50000, 1.0)]) == []
    text = scores.score_text({("m", 0): curve, ("m", 1): [(50000, 10.0)]})
    lines = scores.collapse_lines({"dmc_proprio/walker-walk.csv": text})
    assert lines[0].endswith("a best of at least 100): 1 run.")
    assert lines[1] == ("- walker-walk, m seed 0: 2 of 5 evaluations from 50k; lowest 240 at 70k "
                        "after 500 at 60k")
    assert scores.collapse_lines({"dmc_proprio/walker-walk.csv": text}, "dmc_pixels") == []
    only = scores.collapse_lines({"dmc_proprio/walker-walk.csv": text}, only=["other"])
    assert only == ["The main methods' evaluation collapses (from 50k on, an evaluation below 0.5 "
                    "of the run's best before it, a best of at least 100): none."]


def test_the_readme_needs_its_markers(scores):
    assert scores.readme_with("a\n<!-- scores:begin -->\nold\n<!-- scores:end -->\nb",
                              "new\n") == "a\n<!-- scores:begin -->\nnew\n<!-- scores:end -->\nb"
    with pytest.raises(ValueError, match="Expected one '<!-- scores:begin -->'"):
        scores.readme_with("no markers", "x")


def test_a_method_is_a_valid_config(scores, methods, tmp_path):
    assert list(methods)[:2] == ["bayes-planet", "bayes-planet-deterministic"]
    main = {m: scores.suite_of(methods[m]["config"]) for m in methods if methods[m]["main"]}
    assert main == {"bayes-planet": "dmc_proprio", "bayes-planet-deterministic": "dmc_proprio",
                    "bayes-planet-pixels": "dmc_pixels"}
    with pytest.raises(config_lib.ConfigError, match="Received: model.estimator='nope'"):
        _methods(scores, tmp_path, bad=["model.estimator=nope"])
