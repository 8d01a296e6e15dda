"""`benchmarks.agent_episode`: variants with overrides, and one round on the debug preset."""

import pytest

from benchmarks import agent_episode


def test_variant_is_presets_then_overrides():
    assert agent_episode.parse_variant("cpu") == (["cpu"], [])
    assert agent_episode.parse_variant("cpu,value:train.updates_per_episode=200:"
                                       "model.estimator=rank1") == (
        ["cpu", "value"], ["train.updates_per_episode=200", "model.estimator=rank1"])
    for bad in ("", ":a=1", "cpu::a=1", "cpu:"):
        with pytest.raises(ValueError, match=r"^Expected a variant .* Received: variant="):
            agent_episode.parse_variant(bad)


def test_one_round_times_every_phase_of_each_variant():
    """Two debug variants that differ by an override: every phase is timed, the episode
    total is their sum (eval weighted by its frequency), the first variant is the ratios'
    reference, and an override reaches the trainer (fewer updates: a shorter train phase is
    not asserted, timings are noisy; the config is)."""
    result = agent_episode.main(["--variants", "debug", "debug:train.updates_per_episode=1",
                                 "--rounds", "1"])
    rows = result["variants"]
    assert list(rows) == ["debug", "debug:train.updates_per_episode=1"]
    for row in rows.values():
        assert all(row[f"{phase}_s"] > 0 for phase in ("train", "collect", "eval"))
        assert row["episodes_per_hour"] == pytest.approx(3600 / row["episode_s"], rel=0.01)
    assert rows["debug"]["relative_to_first"] == 1.0
    assert [row["updates_per_episode"] for row in rows.values()] == [3, 1]


def test_an_evaluation_of_several_episodes_is_counted_once_per_eval_every():
    """``eval`` times `Trainer.evaluate`, all ``eval.episodes`` episodes: the episode total
    adds it once per ``eval.every`` episodes (it was multiplied by eval.episodes again)."""
    from bayes_planet.agent import config as config_lib

    config = config_lib.load(["cpu"], ["eval.episodes=5", "eval.every=5"])
    phases = {"train": 40.0, "collect": 2.0, "eval": 10.0}  # 5 episodes of 2 s
    assert agent_episode.episode_seconds(phases, config) == 44.0
