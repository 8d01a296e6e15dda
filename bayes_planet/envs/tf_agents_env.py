"""TF-Agents face of the plain environments.

``TFAgentsEnv(make('cartpole-swingup'))`` is a ``tf_agents`` ``PyEnvironment``; wrap it in
``tf_py_environment.TFPyEnvironment`` to use TF-Agents policies, drivers and replay buffers::

    from tf_agents.environments import tf_py_environment
    tf_env = tf_py_environment.TFPyEnvironment(TFAgentsEnv(make('cartpole-swingup')))

Episodes that reach ``max_steps`` end with a ``truncation`` time step (discount 1); episodes the
task terminates end with a ``termination`` (discount 0). After a last time step, the next
``step`` resets automatically, as TF-Agents drivers expect.
"""

import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

__all__ = ["TFAgentsEnv", "to_array_spec"]


def to_array_spec(spec):
    """Converts a ``dm_env`` spec to a ``tf_agents`` ``ArraySpec``/``BoundedArraySpec``.

    Args:
        spec: ``dm_env.specs.Array`` or ``BoundedArray`` (anything with ``minimum``/``maximum``
            becomes a ``BoundedArraySpec``).

    Returns:
        The matching ``tf_agents.specs.array_spec`` object with the same shape, dtype and name.
    """
    if hasattr(spec, "minimum") and hasattr(spec, "maximum"):
        return array_spec.BoundedArraySpec(
            shape=spec.shape,
            dtype=spec.dtype,
            minimum=spec.minimum,
            maximum=spec.maximum,
            name=spec.name,
        )
    if hasattr(spec, "shape") and hasattr(spec, "dtype"):
        return array_spec.ArraySpec(shape=spec.shape, dtype=spec.dtype, name=spec.name)
    raise TypeError(f"Expected a dm_env spec with shape and dtype. Received: spec={spec!r}")


class TFAgentsEnv(py_environment.PyEnvironment):
    """A plain environment as a TF-Agents ``PyEnvironment`` (unbatched, auto-resetting).

    Observation spec: the plain environment's dict (``{'image': uint8 [H, W, 3]}`` or
    ``{'state': float32 [D]}``); action spec: float32 ``BoundedArraySpec``; reward and
    discount are float32 scalars. `get_info` returns the last step's ``info`` (true state).

    Args:
        env: A plain environment (`bayes_planet.envs.DMCEnv` or
            `bayes_planet.envs.FromGymnasium`).
    """

    def __init__(self, env):
        for method in ("reset", "step", "observation_spec", "action_spec"):
            if not callable(getattr(env, method, None)):
                raise TypeError(
                    f"Expected a plain environment with a {method}() method. Received: env={env!r}"
                )
        super().__init__(handle_auto_reset=True)
        self.env = env
        self._observation_spec = {
            key: to_array_spec(spec) for key, spec in env.observation_spec().items()
        }
        self._action_spec = to_array_spec(env.action_spec())
        self._info = None

    def observation_spec(self):
        """Returns the dict of observation ``ArraySpec``s."""
        return self._observation_spec

    def action_spec(self):
        """Returns the float32 ``BoundedArraySpec`` of actions."""
        return self._action_spec

    def get_info(self):
        """Returns the ``info`` dict of the last step (the true state after a reset)."""
        if self._info is None:
            raise RuntimeError("No info yet: call reset() first.")
        return self._info

    def _reset(self):
        observation = self.env.reset()
        self._info = self.env.true_state()
        return ts.restart(observation)

    def _step(self, action):
        observation, reward, _, info = self.env.step(action)
        self._info = info
        # TimeSteps are built directly (as ts.transition/termination/truncation would), which
        # keeps the per-step overhead of this face small.
        if info["terminated"]:
            step_type, discount = ts.StepType.LAST, 0.0
        elif info["truncated"]:
            step_type, discount = ts.StepType.LAST, 1.0
        else:
            step_type, discount = ts.StepType.MID, 1.0
        return ts.TimeStep(
            step_type=step_type,
            reward=np.asarray(reward, dtype=np.float32),
            discount=np.asarray(discount, dtype=np.float32),
            observation=observation,
        )

    def should_reset(self, current_time_step):
        """Whether the next ``step`` starts a new episode (the last time step was ``LAST``)."""
        return bool(current_time_step.step_type == ts.StepType.LAST)

    def render(self, mode="rgb_array"):
        """Returns the current frame, uint8 ``[H, W, 3]``; only ``mode='rgb_array'`` exists."""
        if mode != "rgb_array":
            raise ValueError(f"Expected mode='rgb_array'. Received: mode={mode!r}")
        return self.env.render()

    def seed(self, seed):
        """Seeds the next reset of the wrapped environment."""
        self.env.seed(seed)

    def close(self):
        """Closes the wrapped environment."""
        self.env.close()
