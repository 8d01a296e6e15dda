"""The agent of a run directory: strategy, environments, replay, world model and policies.

``Agent(logdir, config)`` validates the config, opens the run directory for writing
(`bayes_planet.agent.run.Run`: lock, config.yaml, checkpoints, metrics) and assembles what lives in
it; ``Agent(logdir, read_only=True)`` opens a trained run for reading (`eval`, `probe`,
experiment scripts). The order matters and is fixed here:

1. the distribution strategy (a multi-worker strategy must exist before other ops; a
   non-chief worker keeps its own run directory ``<logdir>/<task_type>_<task_id>``,
   see docs/distributed.md);
2. the `Run` (a writer takes the lock, writes or compares config.yaml);
3. the environments, the replay (`EpisodeReplay` of ``<logdir>/episodes``), the world model
   (initial weights from the ``weights`` stream, `bayes_planet.seeds`), the value model if
   ``value.enabled`` (`bayes_planet.agent.value`, from the ``value_weights`` stream) and the counters;
4. uncommitted work is discarded and the newest valid checkpoint restored;
5. the `Collector` (planner policies, seeded episode collection).
"""

import pathlib

import numpy as np

from bayes_planet import seeds
from bayes_planet.agent import config as config_lib
from bayes_planet.agent.run import Run, RunError, read_config

__all__ = ["Agent", "check_config"]


def check_config(config):
    """Validates an agent config completely (ranges and the task); raises a one-line `RunError`."""
    try:
        config_lib.validate(config)
    except config_lib.ConfigError as e:
        raise RunError(str(e)) from None
    if not config.task.startswith("gym:"):
        from bayes_planet import envs

        try:
            envs.resolve_task(config.task)
        except ValueError as e:
            raise RunError(str(e).strip().splitlines()[0]) from None
    return config


def _check_episode_fits(config, env):
    """Training chunks must fit in an episode: ``train.chunk_length`` <= the env's decisions
    per episode (``env.episode_length`` // action repeat). One-line `RunError` otherwise."""
    steps = getattr(env, "max_steps", None)
    if steps is not None and config.train.chunk_length > steps:
        raise RunError(
            f"Expected train.chunk_length <= {steps}, the decisions per episode "
            f"(env.episode_length={env.episode_length} // action repeat {env.action_repeat}). "
            f"Received: train.chunk_length={config.train.chunk_length}")


def _kept(run):
    numbers = [number for number, _ in run.checkpoints()]
    return f"it keeps checkpoints {numbers}" if numbers else "it keeps no checkpoint"


def _check_kept(run, checkpoint):
    """A one-line `RunError` unless the run keeps checkpoint ``checkpoint`` (a positive int)."""
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, int) or checkpoint < 1:
        raise RunError(f"Expected a positive integer. Received: checkpoint={checkpoint!r}")
    if checkpoint not in [number for number, _ in run.checkpoints()]:
        raise RunError(f"Expected a checkpoint the run {run.logdir} keeps ({_kept(run)}; "
                       f"train.keep_checkpoint_every keeps more). Received: "
                       f"checkpoint={checkpoint}")


class Agent:
    """A (Bayesian) PlaNet agent over a run directory opened for writing or reading.

    Args:
      logdir: the run directory.
      config: the merged `Config` (writers); readers read ``<logdir>/config.yaml``.
      read_only: open for reading: no lock, nothing written into ``logdir``; requires a
        checkpoint unless ``require_checkpoint=False``.
      require_checkpoint: readers only.
      planning: readers only: ``key=value`` overrides of how the agent plans
        (`bayes_planet.agent.config.PLANNING_KEYS`, e.g. ``planner.beta=1``); the model is the run's.
      say: where warnings go (default: stderr).
      checkpoint: readers only: open the run at its checkpoint of this number (kept by
        ``train.keep_checkpoint_every``, or one of the 2 newest) with the episodes collected
        up to it in ``replay``; None: the newest. A one-line `RunError` names the
        checkpoints there are if it is missing or unreadable.
    Attributes:
      config, run (the `Run`), logdir (the run's; a worker's own one under multi-worker),
      strategy, worker (0 for the chief), replay (`EpisodeReplay`), model (`WorldModel`),
      value (the `bayes_planet.agent.value.ValueModel`, or None for PlaNet),
      updates, nonfinite, nonfinite_in_a_row (checkpointed counters), checkpoint,
      restored (the restored checkpoint's number, or None), collector (`Collector`: the
      environments and the policies).
    Raises:
      RunError: one-line user errors (bad config, logdir not a writable directory, no run,
        a different config, no checkpoint); `RunLockedError` if another writer holds the lock.
    """

    def __init__(self, logdir, config=None, read_only=False, require_checkpoint=True, say=None,
                 planning=(), checkpoint=None):
        import tensorflow as tf

        from bayes_planet import distribute, envs
        from bayes_planet.agent.collection import Collector
        from bayes_planet.agent.replay import EpisodeReplay
        from bayes_planet.agent.world_model import WorldModel

        if read_only:
            config = read_config(logdir)
            if planning:
                try:
                    config = config_lib.with_planning(config, planning)
                except config_lib.ConfigError as e:
                    raise RunError(f"--set: {e}") from None
        elif planning or checkpoint is not None:
            given = f"planning={list(planning)}" if planning else f"checkpoint={checkpoint}"
            raise RunError(f"Expected planning overrides and a checkpoint for a reader only. "
                           f"Received: {given}")
        elif config is None:
            raise RunError(f"Expected a config to open {logdir} for writing. Received: None")
        self.config = c = check_config(config)
        self.strategy = distribute.make_strategy(c.strategy)  # First; see the module docstring.
        self.worker = 0
        if not distribute.is_chief(self.strategy):  # Own episodes, logs and checkpoints.
            task = self.strategy.cluster_resolver
            logdir = pathlib.Path(logdir) / f"{task.task_type}_{task.task_id}"
            self.worker = 1 + task.task_id
        tf.config.experimental.enable_op_determinism()
        size = (c.env.image_size, c.env.image_size)
        make = lambda: envs.make(c.task, obs_type=c.obs_type, seed=0,  # noqa: E731
                                 action_repeat=c.env.action_repeat, size=size,
                                 episode_length=c.env.episode_length)
        try:
            env, eval_env = make(), make()  # Reseeded before every episode.
        except (ValueError, TypeError) as e:  # The environment refuses the config: one line.
            raise RunError(f"task={c.task!r}: {str(e).strip().splitlines()[0]}") from None
        _check_episode_fits(c, env)
        obs_shape = env.observation_spec()[next(iter(env.observation_spec()))].shape
        action_size = env.action_spec().shape[0]
        tf.keras.utils.set_random_seed(seeds.int_seed(c.seed, "weights"))
        self.model = WorldModel(c, obs_shape, action_size, strategy=self.strategy)
        self.value = None
        if c.value.enabled:
            from bayes_planet.agent.value import ValueModel

            tf.keras.utils.set_random_seed(seeds.int_seed(c.seed, "value_weights"))
            spec = env.action_spec()
            self.value = ValueModel(c, self.model, spec.minimum, spec.maximum)
        with self.strategy.scope():
            counter = lambda name: tf.Variable(0, dtype=tf.int64, trainable=False,  # noqa: E731
                                               name=name)
            self.updates = counter("updates")
            self.nonfinite = counter("nonfinite")
            self.nonfinite_in_a_row = counter("nonfinite_in_a_row")
        value = {} if self.value is None else {
            "value": self.value, "critic_optimizer": self.value.critic_optimizer,
            "actor_optimizer": self.value.actor_optimizer}
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.model.optimizer, updates=self.updates,
            nonfinite=self.nonfinite, nonfinite_in_a_row=self.nonfinite_in_a_row, **value)
        # Everything above only checks and builds; the run directory is touched from here on.
        self.run = Run(logdir, c, read_only=read_only, say=say)
        self.logdir = self.run.logdir
        if checkpoint is not None:
            _check_kept(self.run, checkpoint)
        self.replay = EpisodeReplay(self.run.episodes_dir(), read_only=read_only,
                                    until=checkpoint)
        if not read_only:
            self.run.discard_uncommitted(self.replay.num_episodes)
        self.restored = self.run.restore(self.checkpoint, self.state_variables(),
                                         at_most=self.replay.num_episodes)
        if checkpoint is not None and self.restored != checkpoint:
            raise RunError(f"checkpoint {checkpoint} of {self.logdir} is unreadable; "
                           f"{_kept(self.run)}. Received: checkpoint={checkpoint}")
        if read_only and require_checkpoint and self.restored is None:
            raise RunError(f"no checkpoint in {self.logdir / 'checkpoints'}: train the run first")
        self.collector = Collector(c.seed, self.worker, env, eval_env, self.model, c.planner,
                                   self.value, c.value.policy_proposals,
                                   eval_optimism=c.eval.optimism,
                                   seed_actions=c.train.seed_actions)

    def state_variables(self):
        """Every variable a checkpoint holds (model, value model, optimizers, counters), once."""
        value = [] if self.value is None else (
            list(self.value.variables) + list(self.value.critic_optimizer.variables)
            + list(self.value.actor_optimizer.variables))
        variables = {id(v): v for v in (list(self.model.variables)
                                        + list(self.model.optimizer.variables) + value
                                        + [self.updates, self.nonfinite,
                                           self.nonfinite_in_a_row])}
        return list(variables.values())

    def env_steps(self, num_episodes=None, pending=None):
        """Environment steps (action repeat counted) of the oldest ``num_episodes`` episodes of
        the replay (default: all of them), plus those of ``pending``, an episode collected but
        not yet added: what the metrics rows count and the collection noise decays over
        (`bayes_planet.agent.policy.exploration_noise`)."""
        transitions = self.replay.transitions(num_episodes)
        if pending is not None:
            transitions += len(pending["action"]) - 1
        return transitions * self.collector.env.action_repeat

    def save_checkpoint(self, number):
        """Writes checkpoint ``number`` of the agent's state (`Run.save_checkpoint`)."""
        self.run.save_checkpoint(number, self.checkpoint, self.state_variables())

    def begin_episode(self, index):
        """Sets the layers' per-call noise counters from the stream ``layer_counter(index)``.

        Bayesian and output layers count their calls (noise drawn outside `fixed_noise`); the
        counters are checkpointed. Starting every episode's work (training phase, collection,
        evaluation) from counters that depend only on the episode index makes the state after
        episode ``index`` the same whether or not earlier episodes were collected in this
        process (a resume redoes their updates without collecting).
        """
        value = seeds.int_seed(self.config.seed, "layer_counter", index) % 2**30
        for variable in self.model.variables:
            if "seed_counter" in variable.name:
                variable.assign(np.asarray(value, variable.dtype.as_numpy_dtype))

    def close(self):
        """Releases the run directory (`Run.close`)."""
        self.run.close()
