"""Gymnasium faces of the plain environments, in both directions.

* `GymnasiumEnv` wraps a plain environment (e.g. `bayes_planet.envs.DMCEnv`) as a
  ``gymnasium.Env``, so any gymnasium tooling can drive it.
* `FromGymnasium` makes a gymnasium environment (e.g. ``Pendulum-v1`` rendered to 64x64
  pixels) look like a plain environment, so the agent can train on it.
"""

import os

import gymnasium
import numpy as np
from dm_env import specs
from gymnasium import spaces

from bayes_planet.envs.checks import (
    OBS_TYPES,
    check_positive_int,
    check_seed,
    check_size,
    validate_action,
)

__all__ = ["FromGymnasium", "GymnasiumEnv", "spec_to_space"]


def spec_to_space(spec):
    """Converts a ``dm_env`` spec (or a dict of them) to a ``gymnasium`` space.

    Args:
        spec: ``specs.BoundedArray`` (→ ``Box`` with its bounds), ``specs.Array`` (→ unbounded
            ``Box``) or a dict of those (→ ``Dict``).

    Returns:
        The matching ``gymnasium.spaces.Space``.
    """
    if isinstance(spec, dict):
        return spaces.Dict({key: spec_to_space(value) for key, value in spec.items()})
    if isinstance(spec, specs.BoundedArray):
        low = np.broadcast_to(spec.minimum, spec.shape).astype(spec.dtype)
        high = np.broadcast_to(spec.maximum, spec.shape).astype(spec.dtype)
        return spaces.Box(low=low, high=high, shape=spec.shape, dtype=spec.dtype)
    if isinstance(spec, specs.Array):
        return spaces.Box(low=-np.inf, high=np.inf, shape=spec.shape, dtype=spec.dtype)
    raise TypeError(f"Expected a dm_env spec or a dict of them. Received: spec={spec!r}")


class GymnasiumEnv(gymnasium.Env):
    """A plain environment as a ``gymnasium.Env``.

    Observations are a ``Dict`` space with the plain environment's keys (``'image'`` uint8
    ``[H, W, 3]`` or ``'state'`` float32 ``[D]``); actions a float32 ``Box``. ``step`` returns the
    gymnasium 5-tuple; DMC episodes end by time limit, which is reported as ``truncated``. The
    ``info`` dicts carry the true state (see ``DMCEnv.true_state``).

    Args:
        env: A plain environment (`bayes_planet.envs.DMCEnv` or `FromGymnasium`).
        render_mode: ``'rgb_array'`` (default) or ``None``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, env, render_mode="rgb_array"):
        for method in ("reset", "step", "observation_spec", "action_spec", "render", "close"):
            if not callable(getattr(env, method, None)):
                raise TypeError(
                    f"Expected a plain environment with a {method}() method. Received: env={env!r}"
                )
        if render_mode not in (None, "rgb_array"):
            raise ValueError(
                f"Expected render_mode None or 'rgb_array'. Received: render_mode={render_mode!r}"
            )
        self.env = env
        self.render_mode = render_mode
        self.metadata = dict(self.metadata, render_fps=float(getattr(env, "fps", 30)))
        self.observation_space = spec_to_space(env.observation_spec())
        self.action_space = spec_to_space(env.action_spec())

    def reset(self, *, seed=None, options=None):
        """Starts an episode.

        Args:
            seed: If given, re-seeds the environment (same seed → same initial state).
            options: Unused; accepted for gymnasium compatibility.

        Returns:
            ``(obs, info)``; ``info`` holds the true state.
        """
        super().reset(seed=seed)
        if seed is not None:
            self.env.seed(seed)
        obs = self.env.reset()
        return obs, self.env.true_state()

    def step(self, action):
        """Steps the plain environment.

        Returns:
            ``(obs, reward, terminated, truncated, info)``.
        """
        obs, reward, _, info = self.env.step(action)
        return obs, reward, info["terminated"], info["truncated"], info

    def render(self):
        """Returns the current frame, uint8 ``[H, W, 3]`` (``None`` if ``render_mode`` is None)."""
        if self.render_mode is None:
            return None
        return self.env.render()

    def close(self):
        """Closes the wrapped environment."""
        self.env.close()


def render_modes(env_id):
    """The render modes a registered gymnasium environment declares (without making it).

    Raises:
      ValueError: ``env_id`` is not a registered environment (one line, naming it).
    """
    try:
        entry_point = gymnasium.spec(env_id).entry_point
    except gymnasium.error.Error as e:
        raise ValueError(f"Unknown gymnasium environment ({e}). Received: gym_env={env_id!r}"
                         ) from None
    creator = gymnasium.envs.registration.load_env_creator(entry_point)
    return tuple(getattr(creator, "metadata", {}).get("render_modes", ()))


class FromGymnasium:
    """A gymnasium environment with the plain environment API (see ``bayes_planet.envs.dmc``).

    Pixel observations are the environment's ``rgb_array`` render resized to ``size`` (uint8);
    state observations are the gymnasium observation flattened to float32. Actions must lie in
    a ``Box`` action space; they are validated and clipped like DMC actions.

    Args:
        gym_env: A gymnasium environment id (e.g. ``'Pendulum-v1'``, made with
            ``render_mode='rgb_array'`` when ``pixels``) or a ``gymnasium.Env`` instance.
        pixels: If ``True``, observations are ``{'image': uint8 [H, W, 3]}``; otherwise
            ``{'state': float32 [D]}``.
        size: Image ``(height, width)``.
        action_repeat: Environment steps per agent step; rewards are summed.
        seed: Seed for the first reset (``None``: nondeterministic); later resets continue the
            environment's random stream unless `seed` is called.
        episode_length: Episode length in environment steps (before action repeat); ``None``
            uses the gymnasium time limit (``env.spec.max_episode_steps``), if any.
    """

    def __init__(
        self, gym_env, pixels=True, size=(64, 64), action_repeat=1, seed=0, episode_length=None
    ):
        # Classic-control envs render with pygame: keep it from probing sound cards (ALSA
        # errors on headless machines) and from printing its banner. User settings win.
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        if isinstance(gym_env, str):
            # Frames for pixels, and for videos of state-based runs (rendered only on request).
            renders = "rgb_array" in render_modes(gym_env)
            gym_env = gymnasium.make(gym_env, render_mode="rgb_array" if pixels or renders
                                     else None)
        if not isinstance(gym_env, gymnasium.Env):
            raise TypeError(
                f"Expected a gymnasium.Env or an environment id. Received: gym_env={gym_env!r}"
            )
        if pixels and gym_env.render_mode != "rgb_array":
            raise ValueError(
                "Expected a gymnasium env made with render_mode='rgb_array' for pixel "
                f"observations. Received: render_mode={gym_env.render_mode!r}"
            )
        if not isinstance(gym_env.action_space, spaces.Box):
            raise TypeError(
                "Expected a gymnasium env with a Box action space. "
                f"Received: action_space={gym_env.action_space!r}"
            )
        self.gym_env = gym_env
        self.obs_type = OBS_TYPES[0] if pixels else OBS_TYPES[1]
        self._size = check_size(size)
        self._action_repeat = check_positive_int("action_repeat", action_repeat)
        self._next_seed = check_seed(seed)
        if episode_length is None:
            spec = getattr(gym_env, "spec", None)
            episode_length = getattr(spec, "max_episode_steps", None)
        if episode_length is not None:
            episode_length = check_positive_int("episode_length", episode_length)
            if episode_length < self._action_repeat:
                raise ValueError(
                    f"Expected episode_length >= action_repeat ({self._action_repeat}). "
                    f"Received: episode_length={episode_length}"
                )
        self._episode_length = episode_length

        box = gym_env.action_space
        self._action_spec = specs.BoundedArray(
            box.shape,
            np.float32,
            minimum=np.asarray(box.low, np.float32),
            maximum=np.asarray(box.high, np.float32),
            name="action",
        )
        if pixels:
            self._observation_spec = {
                "image": specs.BoundedArray(
                    self._size + (3,), np.uint8, minimum=0, maximum=255, name="image"
                )
            }
        else:
            dim = spaces.flatdim(gym_env.observation_space)
            self._observation_spec = {"state": specs.Array((dim,), np.float32, name="state")}
        gym_env.action_space.seed(self._next_seed)
        self._last_obs = None
        self._steps = 0
        self._done = True

    # Specs and properties ---------------------------------------------------------------------

    def observation_spec(self):
        """Returns ``{'image': BoundedArray([H, W, 3], uint8)}`` or ``{'state': Array([D])}``.

        Images are uint8 in [0, 255]; states are float32.
        """
        return dict(self._observation_spec)

    def action_spec(self):
        """Returns the float32 ``BoundedArray`` of actions, from the ``Box`` action space."""
        return self._action_spec

    @property
    def action_repeat(self):
        """Environment steps per agent step."""
        return self._action_repeat

    @property
    def episode_length(self):
        """Episode length in environment steps, or ``None`` if unlimited."""
        return self._episode_length

    @property
    def max_steps(self):
        """Agent steps per episode (``episode_length // action_repeat``), or ``None``."""
        if self._episode_length is None:
            return None
        return self._episode_length // self._action_repeat

    @property
    def size(self):
        """Image ``(height, width)``."""
        return self._size

    @property
    def fps(self):
        """Agent steps per second of the environment's own clock (for videos)."""
        fps = self.gym_env.metadata.get("render_fps") or 30
        return float(fps) / self._action_repeat

    # Episode API ------------------------------------------------------------------------------

    def seed(self, seed):
        """Seeds the next `reset` (``None``: nondeterministic)."""
        self._next_seed = check_seed(seed)
        self.gym_env.action_space.seed(self._next_seed)

    def reset(self):
        """Starts an episode and returns the first observation dict."""
        seed, self._next_seed = self._next_seed, None
        obs, _ = self.gym_env.reset(seed=seed)
        self._last_obs = obs
        self._steps = 0
        self._done = False
        return self._observation()

    def step(self, action):
        """Applies ``action`` for ``action_repeat`` environment steps.

        Returns:
            ``(obs, reward, done, info)`` as for ``DMCEnv.step``: ``info`` has the true state,
            ``'discount'``, ``'terminated'``, ``'truncated'`` and the gymnasium ``info`` entries.

        Raises:
            ValueError: for an action of the wrong shape or with NaN/inf entries.
            RuntimeError: if the episode is over (or never started): call `reset`.
        """
        if self._done:
            raise RuntimeError(
                "Cannot step: the episode has ended or reset() was never called. "
                "Call reset() first."
            )
        action = validate_action(action, self._action_spec)
        action = action.astype(self.gym_env.action_space.dtype)
        reward = 0.0
        terminated = truncated = False
        gym_info = {}
        for _ in range(self._action_repeat):
            obs, step_reward, terminated, truncated, gym_info = self.gym_env.step(action)
            reward += float(step_reward)
            if terminated or truncated:
                break
        self._last_obs = obs
        self._steps += 1
        terminated = bool(terminated)
        max_steps = self.max_steps
        truncated = not terminated and (
            bool(truncated) or (max_steps is not None and self._steps >= max_steps)
        )
        self._done = terminated or truncated
        info = dict(gym_info)
        info.update(self.true_state())
        info.update(discount=0.0 if terminated else 1.0, terminated=terminated, truncated=truncated)
        return self._observation(), reward, self._done, info

    def true_state(self):
        """Returns the true state: ``'state'`` (flat float32 observation) and ``'physics_state'``.

        ``'physics_state'`` is the unwrapped environment's ``state`` attribute as float64 when it
        has one (e.g. Pendulum's ``[theta, theta_dot]``), else the flat observation.
        """
        if self._last_obs is None:
            raise RuntimeError("No state yet: call reset() first.")
        flat = self._flat_state()
        physics = getattr(self.gym_env.unwrapped, "state", None)
        try:
            physics = np.array(physics, dtype=np.float64).ravel() if physics is not None else None
        except (TypeError, ValueError):
            physics = None
        return {
            "physics_state": flat.astype(np.float64) if physics is None else physics,
            "state": flat,
        }

    def render(self):
        """Returns the current frame resized to :attr:`size`, uint8 ``[H, W, 3]``."""
        frame = self.gym_env.render()
        if frame is None:
            raise RuntimeError(
                "The gymnasium env returned no frame; make it with render_mode='rgb_array'."
            )
        return _resize(np.asarray(frame), self._size)

    def close(self):
        """Closes the gymnasium environment."""
        self.gym_env.close()

    def __repr__(self):
        """Returns e.g. ``FromGymnasium('Pendulum-v1', obs_type='pixels', action_repeat=1)``."""
        name = getattr(getattr(self.gym_env, "spec", None), "id", type(self.gym_env).__name__)
        return (
            f"FromGymnasium({name!r}, obs_type={self.obs_type!r}, "
            f"action_repeat={self._action_repeat})"
        )

    # Helpers ----------------------------------------------------------------------------------

    def _flat_state(self):
        flat = spaces.flatten(self.gym_env.observation_space, self._last_obs)
        return np.asarray(flat, np.float32).ravel()

    def _observation(self):
        if self.obs_type == "pixels":
            return {"image": self.render()}
        return {"state": self._flat_state()}


def _resize(frame, size):
    """Resizes an ``[H, W, 3]`` frame (any numeric dtype) to ``size`` as uint8, antialiased."""
    from PIL import Image

    if frame.ndim != 3 or frame.shape[-1] not in (3, 4):
        raise ValueError(f"Expected an [H, W, 3] frame. Received: frame.shape={frame.shape}")
    frame = frame[..., :3]
    if frame.dtype != np.uint8:
        scale = 255.0 if np.issubdtype(frame.dtype, np.floating) and frame.max() <= 1.0 else 1.0
        frame = np.clip(frame * scale, 0, 255).round().astype(np.uint8)
    height, width = size
    if frame.shape[:2] == (height, width):
        return frame.copy()
    image = Image.fromarray(frame).resize((width, height), Image.BILINEAR)
    return np.asarray(image)
