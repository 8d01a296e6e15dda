"""The planning agent as a TF-Agents policy: filter the belief, plan in latent space.

`PlannerPolicy` keeps ``(h, z, previous action)`` as TF-Agents policy state. Each
``action(time_step, state, seed)`` updates the posterior with the new observation
(``obs_step``), then plans in latent space with the planner named by ``planner.name``
(`bayes_planet.planners.get`; PlaNet's cross-entropy method, ``cem``, by default): every
candidate action sequence is rolled out with the RSSM prior under K weight
samples of the Bayesian transition (K independent `imagine` calls, each holding
one weight sample fixed), its predicted rewards summed over the horizon, and
scored by ``mean + beta * std`` over the K samples (β > 0 optimism, β < 0
caution, β = 0 with K = 1 is PlaNet). With a `bayes_planet.agent.value.ValueModel` (``value.enabled``)
the rewards are discounted and the critic's value of the last state is added (value-aware
planning), and rollouts of its policy join the planner's candidates
(``value.policy_proposals``). The first action of the plan is returned;
exploration noise (PlaNet: 0.3) is added during collection — with ``planner.exploration:
spread``, of std max(the planner's final spread, that noise) per action dimension (TD-MPC) —
and the action clipped to the spec. With ``planner.warm_start`` the plan is kept in the
policy state (``plan``: its offset from the action box's middle, so the zero initial state is
PlaNet's start) and the next step's search starts at it shifted by one step, the new last
step at the middle (TD-MPC).

An ensemble transition (``model.estimator`` ``rank1`` or ``batch_ensemble``, E members): the
belief is filtered by every member (policy state ``[E, size]`` per environment, member
``e``'s own ``(h, z)``) and each candidate is rolled out by every member from its own
belief, K weight samples (draws of the rank-1 factors) each: the score is ``mean + beta *
std`` over the E·K returns (with K = 1, across the members). Value-policy proposals come from
every member's belief in turn (``ceil(P / E)`` each, ``P`` kept).

``planner.novelty`` adds optimism about states rather than returns: the score gains
``novelty · Σ_t w_t d_t``, ``d_t`` the std across the K·E rollouts of a candidate of the
predicted latent mean at step t (Plan2Explore's disagreement, Sekar et al., 2020, used in
planning; ``w_t = γ^(t-1)`` with a value, else 1). Where no reward has been seen, every rollout
predicts none and ``beta`` has nothing to act on; the disagreement is still there.

``planner.latent`` sets the latent noise of the candidates' rollouts: ``sample`` (PlaNet) draws
each candidate's latent samples independently, so two candidates' scores differ by noise as
well as by their actions; ``shared`` draws them once per weight sample (and member) and
shares them by every candidate of a state (common random numbers: the same noise, so the
ranking compares actions); ``mean`` rolls out the prior's means (no latent noise, TD-MPC's
deterministic latent). The weight samples are the same in all three.

In TF-Agents' terms (docs/tf_agents.md): ``distribution`` is a point, a
`tfp.distributions.Deterministic` at the plan's first action without exploration noise, so
`tf_agents.policies.greedy_policy.GreedyPolicy` acts with the noiseless plan; the batch size
may be known only when the policy runs (``tf.function`` over ``[None, ...]`` specs,
`PolicySaver`'s default), and the policy then acts as at that batch size known in advance.
"""

import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.policies import tf_policy
from tf_agents.trajectories import policy_step

from bayes_planet import planners
from bayes_planet.agent.config import PLANNER_LATENT
from bayes_planet.layers import fixed_noise
from bayes_planet.planners.objectives import uncertainty_aware_score
from bayes_planet.seeds import stateless_seed

__all__ = ["PlannerPolicy", "candidate_scores", "exploration_noise", "imagined_returns"]


def imagined_returns(world_model, state, actions, seeds, value_model=None, latent="sample"):
    """Predicted return of each candidate under each weight sample (and member).

    Args:
      world_model: a `WorldModel`.
      state: latent state dict, leading dims ``[B]`` (an ensemble transition of E members:
        ``[E·B]``, member ``e``'s beliefs in block ``e``, as `RSSM.tile_members` lays them
        out).
      actions: ``[B, N, H, A]`` candidate action sequences.
      seeds: ``[K, 2]`` stateless seeds, one weight sample each.
      value_model: optional `bayes_planet.agent.value.ValueModel`: then the return is
        ``Σ_t γ^(t-1) r_t + γ^H V(s_H)`` (its discount γ and critic V); PlaNet's plain sum of
        rewards without.
    Returns:
      ``[K·E, B, N]`` predicted returns (``k·E + e``: weight sample k of member e; E = 1
      for a transition that is not an ensemble).
    """
    return _rollouts(world_model, state, actions, seeds, value_model, latent=latent)[0]


def _latent_noise(rssm, actions, seed, latent):
    """The standard-normal draws of a rollout's latent samples for `RSSM.imagine` (``noise``):
    None (``sample``: drawn per row from the rollout's seed), one draw ``[(E·)B, 1, H, S]``
    shared by the N candidates of a state (``shared``), or zeros (``mean``)."""
    if latent == "sample":
        return None
    shape = [tf.shape(actions)[0], 1, actions.shape[2], rssm.stoch_size]
    if latent == "mean":
        return tf.zeros(shape, actions.dtype)
    if latent == "shared":
        noise_seed = tf.random.experimental.stateless_fold_in(seed, 1)  # the shared-noise stream
        return tf.random.stateless_normal(shape, noise_seed, dtype=actions.dtype)
    raise ValueError(f"Expected planner.latent in {PLANNER_LATENT}. Received: {latent!r}")


def _rollouts(world_model, state, actions, seeds, value_model=None, disagreement=False,
              latent="sample"):
    """`imagined_returns` and, with ``disagreement``, the rollouts' discounted latent
    disagreement ``[B, N]`` (else None): ``Σ_t w_t d_t``, ``d_t`` the population std across
    the K·E rollouts of the prior's mean at step t, averaged over its dimensions
    (``w_t = γ^(t-1)`` with ``value_model``, else 1). ``latent``: ``planner.latent``."""
    rssm = world_model.rssm
    n, horizon = tf.shape(actions)[1], actions.shape[2]
    tiled = {k: tf.repeat(v[:, None], n, axis=1) for k, v in state.items()}  # [(E·)B, N, D]
    actions = rssm.tile_members(actions)  # Every member rolls out every candidate.
    weights = tf.ones([horizon])
    if value_model is not None:
        gamma = value_model.discount
        weights = tf.constant([gamma ** t for t in range(horizon)], tf.float32)
    returns, means = [], []
    for k in range(seeds.shape[0]):
        prior = rssm.imagine(actions, tiled, seeds[k],
                             noise=_latent_noise(rssm, actions, seeds[k], latent))
        rewards = world_model.predict_reward(prior)  # [(E·)B, N, H]
        total = tf.reduce_sum(rewards * tf.cast(weights, rewards.dtype), -1)
        if value_model is not None:
            last = {key: v[:, :, -1] for key, v in prior.items()}
            total += gamma ** horizon * value_model.value(last)
        returns.append(rssm.split_members(total))  # [E, B, N]
        if disagreement:
            means.append(rssm.split_members(prior["mean"]))  # [E, B, N, H, S]
    if not disagreement:
        return tf.concat(returns, 0), None
    spread = tf.reduce_mean(tf.math.reduce_std(tf.concat(means, 0), 0), -1)  # [B, N, H]
    return tf.concat(returns, 0), tf.reduce_sum(spread * tf.cast(weights, spread.dtype), -1)


def candidate_scores(world_model, state, actions, seeds, beta, value_model=None, novelty=0.0,
                     latent="sample"):
    """The planner's objective: `uncertainty_aware_score` (``mean + beta * std``) of the
    `imagined_returns` over the weight samples and members, ``[B, N]``, plus ``novelty`` times
    the rollouts' discounted latent disagreement (``planner.novelty``; see `_rollouts`);
    ``latent``: the rollouts' latent noise (``planner.latent``, module docstring)."""
    returns, disagreement = _rollouts(world_model, state, actions, seeds, value_model,
                                      disagreement=bool(novelty), latent=latent)
    score = uncertainty_aware_score(returns, beta)
    if novelty:
        score += novelty * disagreement
    return score


def exploration_noise(planner, env_steps):
    """The std of the collection noise after ``env_steps`` environment steps (action repeat
    counted): ``planner.exploration_noise``, falling linearly to ``planner.exploration_final``
    over the first ``planner.exploration_decay_steps`` and constant after; constant throughout
    when ``exploration_final`` is None."""
    start, final = float(planner.exploration_noise), planner.exploration_final
    if final is None:
        return start
    fraction = min(1.0, max(0, env_steps) / planner.exploration_decay_steps)
    return start + fraction * (float(final) - start)


class PlannerPolicy(tf_policy.TFPolicy):
    """Planning in the world model's latent space (see the module docstring).

    Args:
      time_step_spec, action_spec: TF-Agents specs of the (batched) environment.
      world_model: a trained `bayes_planet.agent.world_model.WorldModel`.
      planner: the ``planner`` config section (name, horizon, weight_samples, beta,
        exploration_noise, and the named planner's own sub-section, e.g. ``cem``).
      explore: add Gaussian exploration noise (collection) or not (evaluation); its std
        starts at ``planner.exploration_noise`` and follows `set_exploration_noise`.
      value_model: optional `bayes_planet.agent.value.ValueModel` (value-aware planning).
      proposals: rollouts of the value model's policy added to the planner's candidates
        (0: none).
      optimism: score candidates with ``planner.beta`` and ``planner.novelty`` (False:
        without their optimism, as ``eval.optimism: false``: a β > 0 counts as 0, a
        risk-averse β < 0 stays, no novelty bonus).
    """

    def __init__(self, time_step_spec, action_spec, world_model, planner, explore=False,
                 value_model=None, proposals=0, optimism=True, name="planner_policy"):
        rssm = world_model.rssm
        # One belief per member of an ensemble transition ([E, size]), else [size].
        members = [rssm.ensemble_size] if rssm.ensemble_size > 1 else []
        spec = lambda n: tf.TensorSpec(members + [n], tf.float32)  # noqa: E731
        state_spec = {"mean": spec(rssm.stoch_size), "std": spec(rssm.stoch_size),
                      "stoch": spec(rssm.stoch_size), "deter": spec(rssm.deter_size),
                      "action": tf.TensorSpec([world_model.action_size], tf.float32)}
        self._warm_start = bool(planner.warm_start)
        if self._warm_start:
            state_spec["plan"] = tf.TensorSpec([planner.horizon, world_model.action_size],
                                               tf.float32)
        # clip=False: `_action` clips (the belief's next filtering step must see the action the
        # environment receives), so TF-Agents' own clip in `action()` would be a second one.
        super().__init__(time_step_spec, action_spec, policy_state_spec=state_spec,
                         clip=False, name=name)
        self._world_model, self._planner = world_model, planner
        self._value_model = value_model
        self._proposals = int(proposals) if value_model is not None else 0
        self._plan = planners.get(planner.name)
        self._beta = planner.beta if optimism else min(planner.beta, 0.0)
        self._novelty = planner.novelty if optimism else 0.0
        self._explore = bool(explore)
        self._noise = tf.Variable(float(planner.exploration_noise) if explore else 0.0,
                                  dtype=tf.float32, trainable=False, name="exploration_noise")
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

    def set_exploration_noise(self, std):
        """Sets the std of the collection noise (e.g. `exploration_noise` once per episode)."""
        if not self._explore:
            raise ValueError("set_exploration_noise: this policy does not explore (explore=False)")
        self._noise.assign(float(std))

    def _variables(self):
        value = self._value_model.trainable_variables if self._value_model is not None else ()
        return list(self._world_model.trainable_variables) + list(value)

    def _distribution(self, time_step, policy_state):
        """The plan as a point: a `tfp.distributions.Deterministic` at the first planned action
        (clipped, without exploration noise, seeded from the policy's own stream as `action`
        without a seed is); its state continues from that action. Its mode is what
        `tf_agents.policies.greedy_policy.GreedyPolicy` acts with: the noiseless plan, also of
        an exploring policy, whose noise only `action` adds."""
        step = self._plan_step(time_step, policy_state, None, explore=False)
        return step._replace(action=tfp.distributions.Deterministic(loc=step.action))

    def _action(self, time_step, policy_state, seed):
        return self._plan_step(time_step, policy_state, seed, explore=self._explore)

    def _plan_step(self, time_step, policy_state, seed, explore):
        """Filters the belief, plans and acts: the `PolicyStep` of `_action`, with the
        exploration noise if ``explore``."""
        wm, cfg = self._world_model, self._planner
        if seed is None:
            seed = tf.identity(self._seed_base)
            self._seed_base.assign_add([0, 1])
        seed = tf.random.experimental.stateless_split(stateless_seed(seed, int_first=True, dtype=tf.int32), 3)
        obs = wm.observation(time_step.observation[self._obs_key][:, None])
        embed = wm.encoder(obs)[:, 0]
        rssm = wm.rssm
        prev = {k: self._flat_beliefs(v) for k, v in policy_state.items()
                if k not in ("action", "plan")}
        filter_seed, weight_seed = tf.unstack(tf.random.experimental.stateless_split(seed[0], 2))
        with fixed_noise(rssm, weight_seed):  # The filtering step's weight draw is seeded too.
            post, _ = rssm.obs_step(prev, rssm.tile_members(policy_state["action"]),
                                    rssm.tile_members(embed), filter_seed)
        # The batch size, static where known; else (PolicySaver's default) the running one.
        batch = time_step.observation[self._obs_key].shape[0]
        if batch is None:
            batch = tf.shape(time_step.observation[self._obs_key])[0]
        sample_seeds = tf.random.experimental.stateless_split(seed[1], cfg.weight_samples)

        def objective(actions):
            return candidate_scores(wm, post, actions, sample_seeds, self._beta,
                                    self._value_model, self._novelty, cfg.latent)

        proposals = None
        if self._proposals:
            proposals = self._value_proposals(post, seed[2])
        middle = (self._low + self._high) / 2
        initial_mean = None
        if self._warm_start:  # The last plan one step on; its new last step at the middle.
            shifted = tf.concat([policy_state["plan"][:, 1:],
                                 tf.zeros_like(policy_state["plan"][:, :1])], 1)
            initial_mean = middle + shifted
        by_spread = explore and cfg.exploration == "spread"
        plan = self._plan(objective, cfg[cfg.name], horizon=cfg.horizon,
                          action_dim=wm.action_size, action_low=self._low,
                          action_high=self._high, seed=seed[2], batch_shape=(batch,),
                          proposals=proposals, initial_mean=initial_mean,
                          return_spread=by_spread)
        std = self._noise
        if by_spread:  # TD-MPC: as unsure as the search ended, at least the noise.
            plan, spread = plan
            std = tf.maximum(spread[:, 0], self._noise)
        action = plan[:, 0]
        if explore:
            action += std * tf.random.stateless_normal(
                tf.shape(action), tf.random.experimental.stateless_fold_in(seed[2], 1))
        action = tf.clip_by_value(action, self._low, self._high)
        new_state = dict({k: self._batched_beliefs(v) for k, v in post.items()}, action=action)
        if self._warm_start:
            new_state["plan"] = plan - middle
        return policy_step.PolicyStep(action, new_state, ())

    def _flat_beliefs(self, x):
        """Policy state ``[B, E, size]`` -> member-major rows ``[E·B, size]`` (E > 1)."""
        if self._world_model.rssm.ensemble_size == 1:
            return x
        return tf.reshape(tf.transpose(x, [1, 0, 2]), [-1, x.shape[-1]])

    def _batched_beliefs(self, x):
        """The inverse of `_flat_beliefs`."""
        if self._world_model.rssm.ensemble_size == 1:
            return x
        return tf.transpose(self._world_model.rssm.split_members(x), [1, 0, 2])

    def _value_proposals(self, post, seed):
        """``P`` policy rollouts per environment, ``[B, P, H, A]``: ``ceil(P / E)`` from each
        member's belief (member-major), the first ``P`` kept."""
        rssm, horizon = self._world_model.rssm, self._planner.horizon
        per_member = -(-self._proposals // rssm.ensemble_size)
        rollouts = self._value_model.proposals(
            post, per_member, horizon, tf.random.experimental.stateless_fold_in(seed, 2))
        rollouts = tf.transpose(rssm.split_members(rollouts), [1, 0, 2, 3, 4])  # [B, E, P', ...]
        rollouts = tf.reshape(rollouts, [-1, rssm.ensemble_size * per_member, horizon,
                                         self._world_model.action_size])
        return rollouts[:, :self._proposals]

