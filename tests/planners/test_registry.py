"""Planners by name (`bayes_planet.planners.registry`): ``cem`` is the cross-entropy method
with the config's settings, every planner has a config section, unknown names are one-line
errors."""

import numpy as np
import pytest

from bayes_planet.planners import cross_entropy_method
from tests.planners._problems import A, H, quadratic, targets


def test_planners_get_returns_the_registered_cem_planner():
    """``planner.name: cem`` is `cross_entropy_method` with the ``planner.cem`` settings."""
    from bayes_planet import planners
    from bayes_planet.agent import config as config_lib

    assert planners.names() == ["cem"]
    cem = config_lib.load(["debug"]).planner.cem
    objective = quadratic(targets(3))
    plan = planners.get("cem")(objective, cem, horizon=H, action_dim=A, action_low=-1.0,
                               action_high=1.0, seed=5, batch_shape=())
    direct = cross_entropy_method(objective, H, A, -1.0, 1.0, num_candidates=cem.candidates,
                                  top_k=cem.top_k, iterations=cem.iterations, seed=5)
    np.testing.assert_array_equal(plan.numpy(), direct.numpy())
    # ``initial_mean`` (the policy's warm start) reaches the method: one iteration from the
    # optimum equals the direct call and ends nearer the optimum than from the middle.
    target = targets(4)
    one = {"candidates": 100, "top_k": 10, "iterations": 1}
    warm = planners.get("cem")(quadratic(target), one, horizon=H, action_dim=A, action_low=-1.0,
                               action_high=1.0, seed=5, initial_mean=target)
    cold = planners.get("cem")(quadratic(target), one, horizon=H, action_dim=A, action_low=-1.0,
                               action_high=1.0, seed=5)
    direct = cross_entropy_method(quadratic(target), H, A, -1.0, 1.0, num_candidates=100,
                                  top_k=10, iterations=1, seed=5, initial_mean=target)
    np.testing.assert_array_equal(warm.numpy(), direct.numpy())
    assert np.abs(warm.numpy() - target).mean() < np.abs(cold.numpy() - target).mean()


def test_every_registered_planner_has_a_config_section_and_vice_versa():
    from bayes_planet import planners
    from bayes_planet.agent import config as config_lib

    planner = config_lib.load().planner.to_dict()
    assert sorted(k for k, v in planner.items() if isinstance(v, dict)) == planners.names()
    assert planner["name"] in planners.names()


@pytest.mark.parametrize("name", ["mppi", "", None, "CEM"])
def test_planners_get_with_an_unknown_name_is_a_one_line_error_naming_it(name):
    from bayes_planet import planners

    with pytest.raises(ValueError) as info:
        planners.get(name)
    message = str(info.value)
    assert "\n" not in message and f"name={name!r}" in message and "'cem'" in message


def test_an_unknown_planner_name_in_the_config_is_a_one_line_error():
    from bayes_planet.agent import config as config_lib

    with pytest.raises(config_lib.ConfigError, match=r"Received: planner.name='mppi'$"):
        config_lib.validate(config_lib.load(overrides=["planner.name=mppi"]))
    with pytest.raises(config_lib.ConfigError, match=r"planner.cem.top_k=21$"):
        config_lib.validate(config_lib.load(["debug"], ["planner.cem.top_k=21"]))
