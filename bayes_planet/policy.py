"""The planning agent as a TF-Agents policy: filter the belief, plan in latent space.

`PlannerPolicy` keeps ``(h, z, previous action)`` as TF-Agents policy state. Each
``action(time_step, state, seed)`` updates the posterior with the new observation
(``obs_step``), then plans in latent space with the planner named by ``planner.name``
(`bayes_planet.planners.get`; PlaNet's cross-entropy method, ``cem``, by default): every
candidate action sequence is rolled out with the RSSM prior under K weight
samples of the Bayesian transition (K independent `imagine` calls, each holding
one weight sample fixed), its predicted rewards summed over the horizon, and
scored by ``mean + beta * std`` over the K samples (β > 0 optimism, β < 0
caution, β = 0 with K = 1 is PlaNet). With a `bayes_planet.value.ValueModel` (``value.enabled``)
the rewards are discounted and the critic's value of the last state is added (value-aware
planning), and rollouts of its policy join the planner's candidates
(``value.policy_proposals``). The first action of the plan is returned;
exploration noise (PlaNet: 0.3) is added during collection and the action clipped
to the spec.
"""

import bayes_planet._extras.agent  # noqa: F401  isort: skip  (needs the 'agent' extra)

import tensorflow as tf
from tf_agents.policies import tf_policy
from tf_agents.trajectories import policy_step

from bayes_planet import planners
from bayes_planet.layers import fixed_noise
from bayes_planet.planners.objectives import uncertainty_aware_score

__all__ = ["PlannerPolicy", "imagined_returns"]


def imagined_returns(world_model, state, actions, seeds, value_model=None):
    """Predicted return of each candidate under each weight sample.

    Args:
      world_model: a `WorldModel`.
      state: latent state dict, leading dims ``[B]``.
      actions: ``[B, N, H, A]`` candidate action sequences.
      seeds: ``[K, 2]`` stateless seeds, one weight sample each.
      value_model: optional `bayes_planet.value.ValueModel`: then the return is
        ``Σ_t γ^(t-1) r_t + γ^H V(s_H)`` (its discount γ and critic V); PlaNet's plain sum of
        rewards without.
    Returns:
      ``[K, B, N]`` predicted returns.
    """
    n, horizon = tf.shape(actions)[1], actions.shape[2]
    tiled = {k: tf.repeat(v[:, None], n, axis=1) for k, v in state.items()}  # [B, N, D]
    returns = []
    for k in range(seeds.shape[0]):
        prior = world_model.rssm.imagine(actions, tiled, seeds[k])
        rewards = world_model.predict_reward(prior)  # [B, N, H]
        if value_model is None:
            returns.append(tf.reduce_sum(rewards, -1))
            continue
        gamma = value_model.discount
        weights = tf.constant([gamma ** t for t in range(horizon)], rewards.dtype)
        last = {key: v[:, :, -1] for key, v in prior.items()}
        returns.append(tf.reduce_sum(rewards * weights, -1)
                       + gamma ** horizon * value_model.value(last))
    return tf.stack(returns)


class PlannerPolicy(tf_policy.TFPolicy):
    """Planning in the world model's latent space (see the module docstring).

    Args:
      time_step_spec, action_spec: TF-Agents specs of the (batched) environment.
      world_model: a trained `bayes_planet.world_model.WorldModel`.
      planner: the ``planner`` config section (name, horizon, weight_samples, beta,
        exploration_noise, and the named planner's own sub-section, e.g. ``cem``).
      explore: add Gaussian exploration noise (collection) or not (evaluation).
      value_model: optional `bayes_planet.value.ValueModel` (value-aware planning).
      proposals: rollouts of the value model's policy added to the planner's candidates
        (0: none).
    """

    def __init__(self, time_step_spec, action_spec, world_model, planner, explore=False,
                 value_model=None, proposals=0, name="planner_policy"):
        rssm = world_model.rssm
        spec = lambda n: tf.TensorSpec([n], tf.float32)  # noqa: E731
        state_spec = {"mean": spec(rssm.stoch_size), "std": spec(rssm.stoch_size),
                      "stoch": spec(rssm.stoch_size), "deter": spec(rssm.deter_size),
                      "action": spec(world_model.action_size)}
        # clip=False: `_action` clips (the belief's next filtering step must see the action the
        # environment receives), so TF-Agents' own clip in `action()` would be a second one.
        super().__init__(time_step_spec, action_spec, policy_state_spec=state_spec,
                         clip=False, name=name)
        self._world_model, self._planner = world_model, planner
        self._value_model = value_model
        self._proposals = int(proposals) if value_model is not None else 0
        self._plan = planners.get(planner.name)
        self._noise = float(planner.exploration_noise) if explore else 0.0
        self._low = tf.constant(action_spec.minimum, tf.float32)
        self._high = tf.constant(action_spec.maximum, tf.float32)
        self._obs_key = next(iter(time_step_spec.observation))
        # Seeds for calls without one (TF-Agents drivers): [seed, step], step counted here;
        # `reseed` sets it from a named stream before every episode.
        self._seed_base = tf.Variable([0, 0], dtype=tf.int32, trainable=False,
                                      name="seed_stream")

    def reseed(self, seed, stream=0):
        """Restarts the policy's own seed stream (e.g. once per episode)."""
        self._seed_base.assign([int(seed) % (2**31 - 1), int(stream) % (2**31 - 1)])

    def _variables(self):
        value = self._value_model.trainable_variables if self._value_model is not None else ()
        return list(self._world_model.trainable_variables) + list(value)

    def _distribution(self, time_step, policy_state):
        raise NotImplementedError("PlannerPolicy is deterministic given a seed; use action().")

    def _action(self, time_step, policy_state, seed):
        wm, cfg = self._world_model, self._planner
        if seed is None:
            seed = tf.identity(self._seed_base)
            self._seed_base.assign_add([0, 1])
        seed = tf.random.experimental.stateless_split(_as_seed(seed), 3)
        obs = wm.observation(time_step.observation[self._obs_key][:, None])
        embed = wm.encoder(obs)[:, 0]
        prev = {k: v for k, v in policy_state.items() if k != "action"}
        filter_seed, weight_seed = tf.unstack(tf.random.experimental.stateless_split(seed[0], 2))
        with fixed_noise(wm.rssm, weight_seed):  # The filtering step's weight draw is seeded too.
            post, _ = wm.rssm.obs_step(prev, policy_state["action"], embed, filter_seed)
        batch = time_step.observation[self._obs_key].shape[0]
        sample_seeds = tf.random.experimental.stateless_split(seed[1], cfg.weight_samples)

        def objective(actions):
            returns = imagined_returns(wm, post, actions, sample_seeds, self._value_model)
            return uncertainty_aware_score(returns, cfg.beta)

        proposals = None
        if self._proposals:
            proposals = self._value_model.proposals(post, self._proposals, cfg.horizon,
                tf.random.experimental.stateless_fold_in(seed[2], 2))
        plan = self._plan(objective, cfg[cfg.name], horizon=cfg.horizon,
                          action_dim=wm.action_size, action_low=self._low,
                          action_high=self._high, seed=seed[2], batch_shape=(batch,),
                          proposals=proposals)
        action = plan[:, 0]
        if self._noise:
            action += self._noise * tf.random.stateless_normal(
                tf.shape(action), tf.random.experimental.stateless_fold_in(seed[2], 1))
        action = tf.clip_by_value(action, self._low, self._high)
        new_state = dict(post, action=action)
        return policy_step.PolicyStep(action, new_state, ())


def _as_seed(seed):
    """An int or a ``[2]`` tensor → a stateless ``[2]`` int32 seed."""
    if isinstance(seed, int):
        return tf.constant([seed, 0], tf.int32)
    return tf.cast(seed, tf.int32)

