"""Episode collection: seeded policies and environment resets from named streams.

A `Collector` holds the two environments of a run (training and evaluation), their TF-Agents
faces and the planner policies (`bayes_planet.agent.policy.PlannerPolicy`: ``collect`` with
exploration noise, ``eval`` without). Every episode is reproducible from the run's seed: the
policy is reseeded from the stream ``<kind>_policy(w, *indices)`` (the random policy of seed
episodes from ``random_policy(w, *indices)``; its actions uniform in the action box or at its
corners, ``train.seed_actions``) and the environment from the stream named by the
caller (``env_reset``, ``eval_env_reset``, ...; see `bayes_planet.seeds`), ``w`` being the worker.
Episodes come out in the replay layout (`bayes_planet.agent.replay.EpisodeRecorder`).
"""

from bayes_planet import seeds
from bayes_planet.agent.config import SEED_ACTIONS
from bayes_planet.agent.faults import fault_point
from bayes_planet.agent.replay import EpisodeRecorder

__all__ = ["Collector", "corners_py_policy"]

KINDS = ("random", "collect", "eval")


def corners_py_policy(time_step_spec, action_spec, seed):
    """A TF-Agents py policy of random corners of ``action_spec``'s box: each dimension at its
    lower or upper bound with probability ½, independently per decision and dimension (random
    signs in DMC's [-1, 1]); its draws from ``numpy.random.default_rng(seed)``."""
    import numpy as np
    from tf_agents.policies import py_policy
    from tf_agents.trajectories import policy_step

    class _Corners(py_policy.PyPolicy):
        def __init__(self):
            super().__init__(time_step_spec, action_spec)
            self._rng = np.random.default_rng(seed)
            self._low = np.broadcast_to(action_spec.minimum, action_spec.shape)
            self._high = np.broadcast_to(action_spec.maximum, action_spec.shape)

        def _action(self, time_step, policy_state):
            upper = self._rng.random(action_spec.shape) < 0.5
            action = np.where(upper, self._high, self._low).astype(action_spec.dtype)
            return policy_step.PolicyStep(action, policy_state, ())

    return _Corners()


class Collector:
    """Collects episodes of a world model's planner (or a random policy) in two environments.

    Args:
      seed: the run's seed (``config.seed``).
      worker: the worker index of the stream keys (0 without multi-worker training).
      env, eval_env: the training and evaluation environments (`bayes_planet.envs.make`).
      world_model: the `WorldModel` the planner policies plan with.
      planner: the ``planner`` config section.
      value_model, proposals: the value model of value-aware planning (None: PlaNet) and the
        number of its policy's rollouts among the planner's candidates (`PlannerPolicy`).
      eval_optimism: whether the evaluation policy plans with the planner's optimism
        (``eval.optimism``; `PlannerPolicy`'s ``optimism``).
      seed_actions: the random policy's actions (``train.seed_actions``): ``uniform`` in the
        action box (TF-Agents' `RandomPyPolicy`) or at its ``corners`` (`corners_py_policy`).
    Attributes:
      env, eval_env: the environments; ``obs_key``: their observation's key;
      ``action_size``; ``collect_policy``/``eval_policy``: the planner policies.
    """

    def __init__(self, seed, worker, env, eval_env, world_model, planner, value_model=None,
                 proposals=0, *, eval_optimism, seed_actions):
        from tf_agents.environments import tf_py_environment

        from bayes_planet.agent.policy import PlannerPolicy
        from bayes_planet.envs.tf_agents_env import TFAgentsEnv

        if seed_actions not in SEED_ACTIONS:
            raise ValueError(f"Expected seed_actions in {list(SEED_ACTIONS)}. Received: "
                             f"seed_actions={seed_actions!r}")
        self.seed, self.worker, self.seed_actions = seed, worker, seed_actions
        self.env, self.eval_env = env, eval_env
        self._py_envs = {False: TFAgentsEnv(env), True: TFAgentsEnv(eval_env)}
        self.obs_key = next(iter(env.observation_spec()))
        self.action_size = env.action_spec().shape[0]
        tf_env = tf_py_environment.TFPyEnvironment(self._py_envs[False])
        specs = (tf_env.time_step_spec(), tf_env.action_spec())
        value = {"value_model": value_model, "proposals": proposals}
        self.collect_policy = PlannerPolicy(*specs, world_model, planner, explore=True, **value)
        self.eval_policy = PlannerPolicy(*specs, world_model, planner, explore=False,
                                         optimism=eval_optimism, **value)
        self._py_policies = {}

    def policy(self, kind, *indices, stream=None):
        """A seeded TF-Agents py policy: ``kind`` in ``random``, ``collect``, ``eval``.

        The planner policies are reseeded from the stream ``<stream>(w, *indices)``; the random
        policy is a new `RandomPyPolicy` (or `corners_py_policy`'s, ``seed_actions``) seeded from it. ``stream`` defaults to
        ``<kind>_policy`` (``random_policy``, ``collect_policy``, ``eval_policy``); commands
        other than training name their own (``cli_eval_policy``, ``probe_test_policy``, ...).
        """
        from tf_agents.policies import py_tf_eager_policy, random_py_policy

        if kind not in KINDS:
            raise ValueError(f"Expected kind in {list(KINDS)}. Received: kind={kind!r}")
        stream = stream or f"{kind}_policy"
        if kind == "random":
            py_env = self._py_envs[False]
            make = (corners_py_policy if self.seed_actions == "corners"
                    else random_py_policy.RandomPyPolicy)
            return make(py_env.time_step_spec(), py_env.action_spec(),
                        seed=seeds.int_seed(self.seed, stream, self.worker, *indices))
        policies = {"collect": self.collect_policy, "eval": self.eval_policy}
        policies[kind].reseed(*seeds.pair(self.seed, stream, self.worker, *indices))
        if kind not in self._py_policies:
            self._py_policies[kind] = py_tf_eager_policy.PyTFEagerPolicy(
                policies[kind], use_tf_function=True)
        return self._py_policies[kind]

    def collect(self, policy, stream, *indices, evaluation=False, render=False, fault=None):
        """Runs one episode from the initial state of the stream ``stream(w, *indices)``.

        Args:
          policy: a py policy (`policy`).
          stream: name of the environment-reset stream, e.g. ``"env_reset"``.
          indices: the stream's indices (e.g. the episode number).
          evaluation: use the evaluation environment.
          render: also return rendered frames.
          fault: a `bayes_planet.agent.faults.fault_point` name reached after every step.
        Returns:
          ``(episode, frames)``: the replay episode dict and a list of frames.
        """
        from tf_agents.drivers import py_driver

        env = self.eval_env if evaluation else self.env
        py_env = self._py_envs[bool(evaluation)]
        env.seed(seeds.int_seed(self.seed, stream, self.worker, *indices))
        recorder = EpisodeRecorder(self.obs_key, self.action_size,
                                   py_env.render if render else None, py_env.get_info)
        observers = [lambda _: fault_point(fault)] if fault else []
        # Ends on the last transition (not on the boundary after it, which would plan once
        # more and reset the environment for nothing); the recorder sees every transition.
        driver = py_driver.PyDriver(py_env, policy, observers=observers,
                                    transition_observers=[recorder], max_episodes=1,
                                    end_episode_on_boundary=False)
        time_step = py_env.reset()
        recorder.start()
        driver.run(time_step, policy.get_initial_state(1))
        return recorder.episodes[-1]
