"""Planners by name: ``planners.get(name)`` is what the agent's ``planner.name`` selects.

A planner module registers its agent-facing entry point with ``@register("name")``; the
agent's config then holds the planner's own settings in the sub-section of that name
(``planner: {name: cem, cem: {candidates: ..., top_k: ..., iterations: ...}}``). A registered
planner is called as::

    plan = planner(objective_fn, settings, horizon=H, action_dim=A, action_low=low,
                   action_high=high, seed=seed, batch_shape=(B,),
                   proposals=None, initial_mean=None)  # -> [B, H, A]
    plan, spread = planner(..., return_spread=True)      # -> [B, H, A] each

where ``settings`` is its config sub-section (a `Config` or mapping), ``B`` an int or, where the
batch size is known only when the graph runs (a policy saved at an unknown batch size), a
scalar int32 tensor (the plan must then be the one at that static size), ``objective_fn`` maps
candidate action sequences ``[B, N, H, A]`` to scores ``[B, N]`` (higher is better) and
``proposals`` is None or ``[B, M, H, A]`` sequences to consider besides the planner's own
(rollouts of the learned policy, `bayes_planet.agent.value`); ``initial_mean`` is None or ``[B, H,
A]``, where the search starts (``planner.warm_start``: the last plan shifted by one step) —
a planner without a search distribution may ignore it. With ``return_spread=True`` it also
returns its spread, ``[B, H, A]``: the std of its final search distribution, how unsure it
ended about each action (``planner.exploration: spread`` explores with it).
"""

__all__ = ["get", "names", "register"]

_PLANNERS = {}


def register(name):
    """A decorator registering an agent-facing planner under ``name`` (see the module docstring)."""
    def decorate(fn):
        if name in _PLANNERS and _PLANNERS[name] is not fn:
            raise ValueError(f"Expected a new planner name. Received: name={name!r} (registered "
                             f"by {_PLANNERS[name].__module__})")
        _PLANNERS[name] = fn
        return fn
    return decorate


def names():
    """The registered planner names, sorted."""
    return sorted(_PLANNERS)


def get(name):
    """The planner registered as ``name``; a one-line `ValueError` naming it otherwise."""
    if not isinstance(name, str) or name not in _PLANNERS:
        raise ValueError(f"Unknown planner. Expected one of {names()}. Received: name={name!r}")
    return _PLANNERS[name]
