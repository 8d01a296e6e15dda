"""DeepMind Control Suite environments with PlaNet's conventions.

``make('cartpole-swingup')`` returns a `DMCEnv`: 64x64x3 uint8 pixel observations (or the
flat proprioceptive state), PlaNet's per-domain action repeat with rewards summed over the
repeats, episodes of ``1000 // action_repeat`` agent steps, seeding, clipped actions, and the true
physical state returned with every step for latent probes.

The plain environment API, shared with `bayes_planet.envs.FromGymnasium`::

    obs = env.reset()                            # dict, e.g. {'image': uint8 [H, W, 3]}
    obs, reward, done, info = env.step(action)   # reward: float, done: bool
    info['terminated'], info['truncated']        # why the episode ended (time limit = truncated)
    info['physics_state'], info['task_state']    # true state for probes (also env.true_state())

Stepping after ``done`` (or before the first ``reset()``) raises ``RuntimeError``: call
``reset()``. There is no automatic reset.
"""

import contextlib
import logging
import numbers
import re
import threading
from concurrent import futures

import numpy as np

from bayes_planet.envs import rendering  # Chooses MUJOCO_GL; must precede dm_control.

# isort: split

from dm_control import suite
from dm_control.mujoco import engine
from dm_env import specs

from bayes_planet.envs.checks import (
    OBS_TYPES,
    check_positive_int,
    check_seed,
    check_size,
    validate_action,
)

__all__ = [
    "DEFAULT_ACTION_REPEAT",
    "DOMAINS",
    "default_action_repeat",
    "DMCEnv",
    "PLANET_TASKS",
    "TASK_ALIASES",
    "known_tasks",
    "resolve_task",
    "validate_action",
]

#: The six tasks of the PlaNet paper.
PLANET_TASKS = (
    "cartpole-swingup",
    "reacher-easy",
    "cheetah-run",
    "finger-spin",
    "cup-catch",
    "walker-walk",
)

#: Short names accepted in addition to ``domain-task`` names from ``dm_control.suite``.
TASK_ALIASES = {"cup-catch": "ball_in_cup-catch"}

#: What each domain needs, one row each (the task table): its action repeat (PlaNet's) and
#: camera (0, as in PlaNet; quadruped's as in Dreamer). A domain not listed uses
#: ``FALLBACK_DOMAIN``.
DOMAINS = {
    "cartpole": {"action_repeat": 8, "camera": 0},
    "reacher": {"action_repeat": 4, "camera": 0},
    "cheetah": {"action_repeat": 4, "camera": 0},
    "finger": {"action_repeat": 2, "camera": 0},
    "ball_in_cup": {"action_repeat": 4, "camera": 0},
    "walker": {"action_repeat": 2, "camera": 0},
    "quadruped": {"action_repeat": 2, "camera": 2},
}
FALLBACK_DOMAIN = {"action_repeat": 2, "camera": 0}

#: PlaNet's action repeat per domain (from `DOMAINS`).
DEFAULT_ACTION_REPEAT = {domain: row["action_repeat"] for domain, row in DOMAINS.items()}


def domain_settings(domain):
    """The task table's row of ``domain`` (`DOMAINS`, else `FALLBACK_DOMAIN`)."""
    return DOMAINS.get(domain, FALLBACK_DOMAIN)

#: Length of a DMC episode in control steps (before action repeat).
DMC_EPISODE_LENGTH = 1000



#: MuJoCo's compile-time notices about the suite's own model files, which the user can do
#: nothing about and which read as failures: dm_control 1.0.50's cheetah.xml sets the
#: compiler attribute ``settotalmass``, which MuJoCo 3.x deprecates and still applies
#: (logged through absl as "WARNING:absl:compiler attribute 'settotalmass' is deprecated ...").
SUITE_MODEL_NOTICES = (re.compile(r"^compiler attribute 'settotalmass' is deprecated"),)


class _DropNotices(logging.Filter):
    def filter(self, record):
        return not any(p.search(record.getMessage()) for p in SUITE_MODEL_NOTICES)


@contextlib.contextmanager
def _without_suite_model_notices():
    """While a suite task loads, absl's log drops `SUITE_MODEL_NOTICES` (nothing else)."""
    logger, notices = logging.getLogger("absl"), _DropNotices()
    logger.addFilter(notices)
    try:
        yield
    finally:
        logger.removeFilter(notices)


def known_tasks():
    """Returns the sorted list of accepted task names (``domain-task`` and aliases)."""
    names = {f"{domain}-{task}" for domain, task in suite.ALL_TASKS}
    return sorted(names | set(TASK_ALIASES))


def resolve_task(task):
    """Maps a task name such as ``'cup-catch'`` to its ``(domain, task)`` in ``dm_control.suite``.

    Args:
        task: ``'domain-task'`` string, e.g. ``'cartpole-swingup'`` or ``'ball_in_cup-catch'``.

    Returns:
        ``(domain, task)`` strings.

    Raises:
        TypeError: if ``task`` is not a string.
        ValueError: if the task is unknown; the message lists the known ones.
    """
    if not isinstance(task, str):
        raise TypeError(
            f"Expected a task name string like 'cartpole-swingup'. Received: task={task!r}"
        )
    name = TASK_ALIASES.get(task, task)
    domain, sep, task_name = name.partition("-")
    if not sep or (domain, task_name) not in suite.ALL_TASKS:
        raise ValueError(
            f"Unknown task. Received: task={task!r}. Known tasks: {', '.join(known_tasks())}"
        )
    return domain, task_name


def default_action_repeat(task):
    """PlaNet's action repeat for ``task`` (its domain's row of :data:`DOMAINS`); the task
    name is checked as by `resolve_task`."""
    domain, _ = resolve_task(task)
    return domain_settings(domain)["action_repeat"]


class DMCEnv:
    """A DeepMind Control Suite task with PlaNet's observation, repeat and episode conventions.

    Args:
        task: ``'domain-task'`` name, e.g. ``'cartpole-swingup'``; see `known_tasks`.
        obs_type: ``'pixels'`` for ``{'image': uint8 [H, W, 3]}`` observations or ``'state'``
            for ``{'state': float32 [D]}`` (the task's observation components, flattened in
            order).
        seed: Seed of the task's random initial states (``None``: nondeterministic).
        action_repeat: Physics control steps per agent step (rewards are summed); ``None`` uses
            PlaNet's default for the domain (:data:`DEFAULT_ACTION_REPEAT`).
        size: Image ``(height, width)`` (or an int for square images).
        camera: Camera index or name; ``None`` uses the domain's (:data:`DOMAINS`).
        episode_length: Episode length in DMC control steps (before action repeat), default 1000;
            an episode has ``max_steps = episode_length // action_repeat`` agent steps.
        fast_render: If ``True`` (default), render without shadows or multisampling into an
            offscreen buffer of exactly ``size`` (10-20x faster on CPU; thin geometry such as
            the cartpole rail may vanish).

    Attributes:
        task: Canonical task name, e.g. ``'ball_in_cup-catch'``.
        domain, task_name: The ``dm_control.suite`` domain and task.
        physics: The ``dm_control`` ``Physics`` (read-only use, e.g. for probes and tests).
    """

    def __init__(
        self,
        task,
        obs_type="pixels",
        seed=0,
        action_repeat=None,
        size=(64, 64),
        camera=None,
        episode_length=None,
        fast_render=True,
    ):
        self.domain, self.task_name = resolve_task(task)
        self.task = f"{self.domain}-{self.task_name}"
        if obs_type not in OBS_TYPES:
            raise ValueError(f"Expected obs_type in {OBS_TYPES}. Received: obs_type={obs_type!r}")
        self.obs_type = obs_type
        if action_repeat is None:
            action_repeat = default_action_repeat(self.task)
        self._action_repeat = check_positive_int("action_repeat", action_repeat)
        if episode_length is None:
            episode_length = DMC_EPISODE_LENGTH
        self._episode_length = check_positive_int("episode_length", episode_length)
        if self._episode_length < self._action_repeat:
            raise ValueError(
                f"Expected episode_length >= action_repeat ({self._action_repeat}). "
                f"Received: episode_length={episode_length}"
            )
        self._size = check_size(size)
        seed = check_seed(seed)
        if obs_type == "pixels":
            rendering.require_rendering()

        # The episode limit is enforced here, so the suite's own time limit is switched off.
        with _without_suite_model_notices():
            self._env = suite.load(
                self.domain,
                self.task_name,
                task_kwargs={"random": seed, "time_limit": float("inf")},
            )
        self.physics = self._env.physics
        self._camera_id = self._check_camera(
            domain_settings(self.domain)["camera"] if camera is None else camera
        )
        self._configure_rendering(fast_render)
        # Created at the first render (state mode never opens a GL context while stepping).
        self._camera = None
        self._render_executor = None
        self._render_thread = None

        self._state_specs = self._env.observation_spec()
        state_dim = sum(int(np.prod(spec.shape)) for spec in self._state_specs.values())
        if obs_type == "pixels":
            self._observation_spec = {
                "image": specs.BoundedArray(
                    self._size + (3,), np.uint8, minimum=0, maximum=255, name="image"
                )
            }
        else:
            self._observation_spec = {"state": specs.Array((state_dim,), np.float32, name="state")}
        dmc_action = self._env.action_spec()
        self._action_spec = specs.BoundedArray(
            dmc_action.shape,
            np.float32,
            minimum=dmc_action.minimum.astype(np.float32),
            maximum=dmc_action.maximum.astype(np.float32),
            name="action",
        )

        self._last_time_step = None
        self._steps = 0
        self._done = True
        self._closed = False
        rendering.register_for_cleanup(self)

    # --------------------------------------------------------------------------------------------
    # Configuration.

    def _check_camera(self, camera):
        """Validates a camera index or name against the model and returns it."""
        model = self.physics.model
        if isinstance(camera, str):
            if model.name2id(camera, "camera") < 0:
                raise ValueError(
                    f"Unknown camera for task {self.task!r}. Received: camera={camera!r}"
                )
            return camera
        if isinstance(camera, bool) or not isinstance(camera, numbers.Integral):
            raise TypeError(f"Expected a camera index or name. Received: camera={camera!r}")
        if not -1 <= camera < model.ncam:
            raise ValueError(
                f"Expected a camera index in [-1, {model.ncam - 1}] for task {self.task!r}. "
                f"Received: camera={camera}"
            )
        return int(camera)

    def _configure_rendering(self, fast_render):
        """Sets the model's visual options; must run before the first render creates contexts."""
        visual = self.physics.model.vis
        height, width = self._size
        if fast_render:
            visual.quality.shadowsize = 0
            visual.quality.offsamples = 0
            visual.global_.offwidth = width
            visual.global_.offheight = height
        else:
            visual.global_.offwidth = max(int(visual.global_.offwidth), width)
            visual.global_.offheight = max(int(visual.global_.offheight), height)

    # --------------------------------------------------------------------------------------------
    # Specs and properties.

    def observation_spec(self):
        """Returns ``{'image': BoundedArray([H, W, 3], uint8)}`` or ``{'state': Array([D])}``.

        Images are uint8 in [0, 255]; states are float32.
        """
        return dict(self._observation_spec)

    def action_spec(self):
        """Returns the float32 ``dm_env.specs.BoundedArray`` of actions (DMC spec bounds)."""
        return self._action_spec

    @property
    def action_repeat(self):
        """Control steps per agent step."""
        return self._action_repeat

    @property
    def episode_length(self):
        """Episode length in control steps (before action repeat)."""
        return self._episode_length

    @property
    def max_steps(self):
        """Agent steps per episode: ``episode_length // action_repeat``."""
        return self._episode_length // self._action_repeat

    @property
    def size(self):
        """Image ``(height, width)``."""
        return self._size

    @property
    def camera(self):
        """Camera index or name used for observations and `render`."""
        return self._camera_id

    @property
    def fps(self):
        """Agent steps per simulated second (use as the video frame rate)."""
        return 1.0 / (self._env.control_timestep() * self._action_repeat)

    @property
    def state_keys(self):
        """Names of the task's observation components, in the order used by ``'state'``."""
        return tuple(self._state_specs)

    @property
    def state_slices(self):
        """``{name: slice}``: where each observation component lies in ``'state'`` (e.g.
        reacher's ``to_target``, the finger-to-target vector, is ``slice(2, 4)``)."""
        slices, start = {}, 0
        for key, spec in self._state_specs.items():
            size = int(np.prod(spec.shape))
            slices[key], start = slice(start, start + size), start + size
        return slices

    # --------------------------------------------------------------------------------------------
    # Episode API.

    def seed(self, seed):
        """Re-seeds the task's random initial states; takes effect at the next `reset`.

        Args:
            seed: Non-negative integer, or ``None`` for a nondeterministic seed.
        """
        self._check_open()
        self._env.task.random.seed(check_seed(seed))

    def reset(self):
        """Starts a new episode.

        Returns:
            The first observation dict (see `observation_spec`).
        """
        self._check_open()
        self._last_time_step = self._env.reset()
        self._steps = 0
        self._done = False
        return self._observation()

    def step(self, action):
        """Applies ``action`` for ``action_repeat`` control steps.

        Args:
            action: array of shape ``action_spec().shape``; clipped to the spec's bounds.

        Returns:
            ``(obs, reward, done, info)``: the observation dict after the last repeat, the reward
            summed over repeats (float), whether the episode ended, and ``info`` =
            `true_state` plus ``'discount'`` (float), ``'terminated'`` (the task ended the
            episode) and ``'truncated'`` (the episode reached ``max_steps``).

        Raises:
            ValueError: for an action of the wrong shape or with NaN/inf entries.
            RuntimeError: if the episode is over (or never started): call `reset`.
        """
        self._check_open()
        if self._done:
            raise RuntimeError(
                "Cannot step: the episode has ended or reset() was never called. "
                "Call reset() first."
            )
        action = validate_action(action, self._action_spec)
        reward = 0.0
        for _ in range(self._action_repeat):
            time_step = self._env.step(action)
            reward += time_step.reward or 0.0
            if time_step.last():
                break
        self._last_time_step = time_step
        self._steps += 1
        terminated = bool(time_step.last())
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        info = self.true_state()
        info["discount"] = float(time_step.discount)
        info["terminated"] = terminated
        info["truncated"] = truncated
        return self._observation(), float(reward), self._done, info

    def true_state(self):
        """Returns the true physical state at the current step, for probes.

        Returns:
            dict with ``'physics_state'`` (float64 ``[nq + nv + na]``, as
            ``physics.get_state()``), ``'qpos'`` (float64 ``[nq]``), ``'qvel'`` (float64
            ``[nv]``), ``'state'`` (float32 ``[D]``, the flat task observation) and
            ``'task_state'`` (dict of the task's named observation components, e.g. cartpole's
            ``'position'`` and ``'velocity'``).
        """
        self._check_open()
        if self._last_time_step is None:
            raise RuntimeError("No state yet: call reset() first.")
        components = {
            key: np.array(value, copy=True)
            for key, value in self._last_time_step.observation.items()
        }
        return {
            "physics_state": self.physics.get_state(),
            "qpos": self.physics.data.qpos.copy(),
            "qvel": self.physics.data.qvel.copy(),
            "state": self._flat_state(),
            "task_state": components,
        }

    def render(self):
        """Renders the current frame from :attr:`camera`, also in state mode.

        Rendering runs on a dedicated thread per environment, so the environment can be used
        from any thread (EGL contexts are bound to the thread that made them current; TF-Agents
        steps environments on its own threads).

        Returns:
            uint8 array ``[H, W, 3]`` at :attr:`size`.
        """
        self._check_open()
        rendering.require_rendering()
        if self._render_executor is None:
            self._render_executor = futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="bayes_planet_render"
            )
        return self._render_executor.submit(self._render_on_thread).result()

    def _render_on_thread(self):
        if self._camera is None:
            self._render_thread = threading.current_thread()
            height, width = self._size
            self._camera = engine.Camera(self.physics, height, width, self._camera_id)
        return self._camera.render().copy()

    def _free_on_thread(self):
        if self._camera is not None:
            self._camera.scene.free()
            self._camera = None
        self.physics.free()

    def close(self, wait=True):
        """Frees the renderer and physics; the environment cannot be used afterwards.

        Safe to call more than once. Called automatically when the environment is garbage
        collected and at interpreter exit (before Python shuts down its worker threads).

        Args:
          wait: after rendering, the render thread frees its context: wait for it (True), or
            only hand it the work (False: the garbage collector's call, which may run inside
            any other code, an import's lock held, where waiting on a thread can deadlock).
        """
        if getattr(self, "_closed", True):
            return
        self._closed = True
        executor, self._render_executor = self._render_executor, None
        if executor is None or threading.current_thread() is self._render_thread:
            self._free_on_thread()
        else:
            freed = executor.submit(self._free_on_thread)
            if wait:
                freed.result()
        if executor is not None:
            executor.shutdown(wait=False)
        self._env = None

    def __del__(self):
        """Closes the environment when it is garbage collected, without waiting on its
        render thread (`close`'s ``wait=False``)."""
        try:
            self.close(wait=False)
        except Exception:  # Never raise from a finalizer.
            pass

    def __enter__(self):
        """Returns ``self``; `close` runs on exit of the ``with`` block."""
        return self

    def __exit__(self, *exc_info):
        """Closes the environment."""
        self.close()

    def __repr__(self):
        """Returns e.g. ``DMCEnv('cartpole-swingup', obs_type='pixels', action_repeat=8)``."""
        return (
            f"DMCEnv({self.task!r}, obs_type={self.obs_type!r}, "
            f"action_repeat={self._action_repeat}, max_steps={self.max_steps})"
        )

    # --------------------------------------------------------------------------------------------
    # Helpers.

    def _check_open(self):
        if self._closed:
            raise RuntimeError(f"{self!r} is closed.")

    def _flat_state(self):
        observation = self._last_time_step.observation
        return np.concatenate(
            [np.asarray(observation[key], np.float32).ravel() for key in self._state_specs]
        )

    def _observation(self):
        if self.obs_type == "pixels":
            return {"image": self.render()}
        return {"state": self._flat_state()}
