"""`make`: one entry point for DMC tasks and gymnasium environments.

It imports both `bayes_planet.envs.dmc` and `bayes_planet.envs.gym_adapter`; neither of
them imports the other (their shared argument checks live in `bayes_planet.envs.checks`).
"""

from bayes_planet.envs import rendering  # noqa: F401  # isort: skip  (MUJOCO_GL first)

from bayes_planet.envs.checks import OBS_TYPES
from bayes_planet.envs.dmc import DMCEnv
from bayes_planet.envs.gym_adapter import FromGymnasium

__all__ = ["make"]


def make(
    task,
    obs_type="pixels",
    seed=0,
    action_repeat=None,
    size=(64, 64),
    camera=None,
    episode_length=None,
    **kwargs,
):
    """Creates a plain environment for ``task``.

    Args:
        task: A DMC ``'domain-task'`` name (see `known_tasks`), or ``'gym:ENV_ID'`` for a
            gymnasium environment (e.g. ``'gym:Pendulum-v1'``) wrapped by
            `bayes_planet.envs.FromGymnasium`.
        obs_type: ``'pixels'`` or ``'state'``.
        seed: Seed of the initial-state randomness (``None``: nondeterministic).
        action_repeat: Agent-step repeat; ``None`` uses PlaNet's per-domain default for DMC and 1
            for gymnasium.
        size: Image ``(height, width)``.
        camera: DMC camera index or name (``None``: domain default). Not used for gymnasium.
        episode_length: Episode length before action repeat (``None``: 1000 for DMC, the
            gymnasium env's time limit otherwise).
        **kwargs: Passed to `DMCEnv` (e.g. ``fast_render``) or `FromGymnasium`.

    Returns:
        A `DMCEnv` or `bayes_planet.envs.FromGymnasium`.
    """
    if isinstance(task, str) and task.startswith("gym:"):
        if camera is not None:
            raise ValueError(f"camera is only supported for DMC tasks. Received: camera={camera!r}")
        if obs_type not in OBS_TYPES:
            raise ValueError(f"Expected obs_type in {OBS_TYPES}. Received: obs_type={obs_type!r}")
        return FromGymnasium(
            task[len("gym:") :],
            pixels=obs_type == "pixels",
            size=size,
            action_repeat=1 if action_repeat is None else action_repeat,
            seed=seed,
            episode_length=episode_length,
            **kwargs,
        )
    return DMCEnv(
        task,
        obs_type=obs_type,
        seed=seed,
        action_repeat=action_repeat,
        size=size,
        camera=camera,
        episode_length=episode_length,
        **kwargs,
    )
