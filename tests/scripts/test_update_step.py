"""`benchmarks.update_step`: the world model's and the value model's steps timed apart."""

import pytest

from benchmarks import update_step


def test_one_round_times_both_parts_of_each_variant_and_its_xla_twin():
    result = update_step.main(["--variants", "debug", "debug:train.batch_size=2", "--xla",
                               "--rounds", "1", "--steps", "2"])
    rows = result["variants"]
    assert list(rows) == ["debug", "debug (XLA)", "debug:train.batch_size=2",
                          "debug:train.batch_size=2 (XLA)"]
    for row in rows.values():
        assert row["world_s"] > 0 and row["value_s"] > 0
        assert row["update_s"] == pytest.approx(row["world_s"] + row["value_s"], abs=2e-6)
        assert row["value_share"] == pytest.approx(row["value_s"] / row["update_s"], abs=2e-3)
    assert rows["debug"]["relative_to_first"] == 1.0


def test_a_variant_without_a_value_model_is_refused():
    with pytest.raises(ValueError, match=r"Expected a variant with value.enabled. "
                                         r"Received: value.enabled=False"):
        update_step.main(["--variants", "debug:value.enabled=false", "--rounds", "1"])
