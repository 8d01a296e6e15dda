"""Environments: DeepMind Control Suite tasks with PlaNet's conventions, and their faces.

* `make` / `DMCEnv`: the plain environment (``reset() -> obs``,
  ``step(action) -> (obs, reward, done, info)``), pixels or state, with the true physical state
  in ``info`` for probes. ``make('gym:Pendulum-v1')`` wraps a gymnasium env the same way.
* `GymnasiumEnv`: a plain environment as a ``gymnasium.Env``;
  `FromGymnasium`: a gymnasium environment as a plain environment.
* `TFAgentsEnv`: a plain environment as a TF-Agents ``PyEnvironment`` (imported lazily,
  so ``import bayes_planet.envs`` does not import TensorFlow).
* `write_video`, `side_by_side`: episodes to mp4/gif.

Importing this package chooses a headless ``MUJOCO_GL`` backend before ``dm_control`` is imported
(see `bayes_planet.envs.rendering`).
"""

import bayes_planet._extras.agent  # noqa: F401  isort: skip  (needs the 'agent' extra)

# The rendering module must be imported before anything imports dm_control or mujoco.
from bayes_planet.envs import rendering  # isort: skip

from bayes_planet.envs.checks import validate_action
from bayes_planet.envs.dmc import (
    DEFAULT_ACTION_REPEAT,
    DOMAINS,
    PLANET_TASKS,
    DMCEnv,
    default_action_repeat,
    known_tasks,
    resolve_task,
)
from bayes_planet.envs.factory import make
from bayes_planet.envs.gym_adapter import FromGymnasium, GymnasiumEnv
from bayes_planet.envs.rendering import RenderingUnavailableError
from bayes_planet.envs.video import side_by_side, write_video

__all__ = [
    "DEFAULT_ACTION_REPEAT",
    "DMCEnv",
    "DOMAINS",
    "FromGymnasium",
    "GymnasiumEnv",
    "PLANET_TASKS",
    "RenderingUnavailableError",
    "TFAgentsEnv",
    "default_action_repeat",
    "known_tasks",
    "make",
    "rendering",
    "resolve_task",
    "side_by_side",
    "validate_action",
    "write_video",
]


def __getattr__(name):
    """Imports `TFAgentsEnv` on first use (it pulls in TensorFlow and TF-Agents)."""
    if name == "TFAgentsEnv":
        from bayes_planet.envs.tf_agents_env import TFAgentsEnv

        return TFAgentsEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
