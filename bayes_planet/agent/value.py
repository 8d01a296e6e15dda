"""A latent value function and policy for value-aware planning (the ``value`` config section).

PlaNet scores a candidate plan by the rewards it predicts over the planning horizon and
nothing after it; the agent then cannot prefer a state whose payoff lies beyond the horizon,
and a long horizon compounds the model's error (open-loop velocity R² 0.97 at h = 1, 0.29 at
h = 20: ``experiments/results/5-priors.md``). TD-MPC (Hansen et al., 2022, 2024) plans over a short horizon and
bootstraps with a learned value at its end, and seeds the planner with samples of a learned
policy. `ValueModel` learns both in the RSSM's latent space, Dreamer-style (Hafner et al.,
2020, "Dream to Control", Sec. 3–4):

* from the posterior states ``s_0`` of a replay batch, as the world model's training step
  computed them (every ``value.start_every``-th step of each chunk, no gradient into the
  world model), roll the transition forward
  ``value.imagine_horizon`` steps with actions of the policy ``a_t ~ π(·|s_t)``, one weight
  sample of the Bayesian transition per rollout (an ensemble transition, ``rank1`` or
  ``batch_ensemble``: the training step's posterior holds the batch once per member, and
  each rollout is imagined by the member that filtered its start state; with
  ``value.ensemble_starts: split`` member ``e`` starts only from every ``E·start_every``-th
  state at offset ``e·start_every``, so the E members together imagine as many rollouts as
  one model would, from distinct states, instead of E times as many);
* the imagined latents are samples of the prior (``value.latent: sample``, Dreamer) or its
  means (``mean``: a deterministic imagined world, as TD-MPC's latent dynamics; the policy's
  proposals for the planner are rolled out the same way);
* λ-returns with the reward head's means ``r_t`` (the reward of arriving at ``s_t``, as the
  world model is trained) and the slow (target) critic ``V'``::

      R_H = V'(s_H),   R_t = r_{t+1} + γ ((1 − λ) V'(s_{t+1}) + λ R_{t+1});

* with ``value.weight_samples`` K > 1 every start is imagined K times, under K weight samples
  of the transition, and the critic's targets and the policy's objective are
  ``mean_k R_t^k − κ std_k R_t^k`` (``value.pessimism`` κ; `sample_objective`), each
  sample's states regressed onto their start's common target: an average over the Bayesian
  transition's samples (REDQ's and EfficientTDMPC's averaged targets) and, with κ > 0, a
  penalty on returns they disagree on (MOPO's, on the return);
* the critic regresses ``V(s_t)`` onto ``R_t`` (squared error, ``t < H``) and, with
  ``value.replay_weight > 0``, also every posterior state ``s_t`` of the replay chunk onto the
  λ-return of the chunk's **real** rewards, bootstrapped with ``V'`` of its later posterior
  states (``replay_weight`` times that squared error, or with ``value.replay_loss:
  self_imitation`` only its part where the return exceeds ``V``: ``½ max(R − V(s), 0)²``,
  Oh et al., 2018, "Self-Imitation Learning"; TD-MPC learns its value from replayed
  rewards only — the imagined targets inherit the learned reward's and transition's errors,
  the replayed ones are the returns of the behaviour, i.e. planner, policy); the policy
  maximizes ``R_t`` by backpropagating through the learned transition and reward (Dreamer's
  analytic gradient) plus ``value.actor_entropy`` times the entropy of its Gaussian before
  the tanh; the target critic follows the critic by an exponential moving average
  (``value.target_rate`` per update).
* with ``value.novelty`` η > 0 the imagined rewards the critic and policy learn from are
  ``r_t + η d_t``, ``d_t`` the transition's one-step disagreement (`disagreement`: the std of
  the prior's mean over two weight samples, Plan2Explore's intrinsic reward with the Bayesian
  transition's weight samples as its ensemble; no gradient flows through it): the critic
  values what the model does not know yet, so the planner's terminal value and the policy's
  proposals carry the optimism beyond the planning horizon (``planner.novelty`` adds it to
  the candidates' horizon only).

The planner's objective then becomes (`bayes_planet.agent.policy.imagined_returns`)::

    score = Σ_{t=1..H} γ^{t-1} r_t + γ^H V(s_H)

under each weight sample (``mean + β·std`` across samples, as before), and
``value.policy_proposals`` rollouts of the policy join the planner's candidates in every CEM
iteration. With ``value.enabled: false`` the agent is PlaNet (undiscounted rewards, no value).
"""

import math

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.agent.networks import MLP
from bayes_planet.layers import fixed_noise

__all__ = ["ValueModel", "lambda_returns", "sample_objective"]

#: The policy's smallest standard deviation before the tanh (Dreamer's 1e-4 would let it
#: collapse; 0.1 keeps proposals spread).
_MIN_STD = 0.1


def lambda_returns(rewards, values, discount, td_lambda):
    """λ-returns along the time axis 0.

    Args:
      rewards: ``[H, ...]``, ``rewards[t]`` received on the step from ``s_t`` to ``s_{t+1}``.
      values: ``[H, ...]``, ``values[t] = V(s_{t+1})``.
      discount: γ (a float).
      td_lambda: λ in [0, 1] (0: one-step TD targets; 1: Monte Carlo returns bootstrapped
        with ``V(s_H)``).
    Returns:
      ``[H, ...]``: ``R_t = rewards[t] + γ ((1 − λ) values[t] + λ R_{t+1})`` with
      ``R_{H-1} = rewards[H-1] + γ values[H-1]``.
    """
    targets = rewards + discount * (1 - td_lambda) * values
    return tf.scan(lambda acc, target: target + discount * td_lambda * acc, targets,
                   initializer=values[-1], reverse=True)


def sample_objective(returns, pessimism):
    """The mean over weight samples of their returns minus ``pessimism`` times their
    (population) std: ``returns`` ``[K, ...]`` → ``[...]``."""
    mean = tf.reduce_mean(returns, 0)
    if not pessimism:
        return mean
    return mean - pessimism * tf.math.reduce_std(returns, 0)


class ValueModel(tf.Module):
    """The latent critic V(s), its slow target and the policy π(a|s); see the module docstring.

    Args:
      config: the merged agent config (reads ``value``).
      world_model: the `bayes_planet.agent.world_model.WorldModel` whose latent space it lives in.
      action_low, action_high: the action bounds (``[A]`` arrays).
    """

    # The world model is read, not owned: its variables are not in the value model's
    # `variables` (the agent's checkpoint holds them under the world model).
    _TF_MODULE_IGNORED_PROPERTIES = tf.Module._TF_MODULE_IGNORED_PROPERTIES | {"world_model"}

    def __init__(self, config, world_model, action_low, action_high, name="value_model"):
        super().__init__(name=name)
        v = self.settings = config.value
        self.world_model = world_model
        self.action_size = world_model.action_size
        self._low = tf.constant(action_low, tf.float32)
        self._high = tf.constant(action_high, tf.float32)
        with self.name_scope:
            self.critic = MLP(v.units, v.layers, out=1, name="critic")
            self.target_critic = MLP(v.units, v.layers, out=1, name="target_critic")
            self.actor = MLP(v.units, v.layers, out=2 * self.action_size, name="actor")
            self.critic_optimizer = keras.optimizers.Adam(v.critic_learning_rate, epsilon=1e-5)
            self.actor_optimizer = keras.optimizers.Adam(v.actor_learning_rate, epsilon=1e-5)
        feat = tf.zeros([1, world_model.rssm.stoch_size + world_model.rssm.deter_size])
        for net in (self.critic, self.target_critic, self.actor):
            net(feat)
        for target, source in zip(self.target_critic.variables, self.critic.variables,
                                  strict=True):
            target.assign(source)
        self.critic_optimizer.build(self.critic.trainable_variables)
        self.actor_optimizer.build(self.actor.trainable_variables)
        # Its control flow is explicit (tf.cond, tf.scan): no autograph, whose source
        # conversion was a fifth of a debug run's CPU time (the same numbers either way).
        self.train_step = tf.function(self._train_step, autograph=False)

    @property
    def discount(self):
        return float(self.settings.discount)

    # -- the two networks ---------------------------------------------------------------------
    def value(self, state, target=False):
        """``V(s)`` (or the target critic's) of latent states, ``[*batch]``."""
        net = self.target_critic if target else self.critic
        return net(self.world_model.rssm.features(state))[..., 0]

    def _policy_dist(self, feat):
        mean, raw = tf.split(self.actor(feat), 2, -1)
        init = float(self.settings.actor_init_std) - _MIN_STD  # softplus(raw + c) = init at 0
        std = tf.nn.softplus(raw + math.log(math.expm1(init))) + _MIN_STD
        return mean, std

    def act(self, state, seed):
        """A sample of π(·|s) in the action box, ``[*batch, A]`` (stateless ``seed``)."""
        mean, std = self._policy_dist(self.world_model.rssm.features(state))
        return self._squash(mean + std * tf.random.stateless_normal(tf.shape(mean), seed))

    def _squash(self, pre_tanh):
        return self._low + (self._high - self._low) * (tf.tanh(pre_tanh) + 1) / 2

    # -- rollouts -----------------------------------------------------------------------------
    def rollout(self, state, horizon, seed):
        """Imagines ``horizon`` steps from ``state`` (flat ``[B]``) acting with π.

        One weight sample of the transition for the whole rollout (from ``seed``); the latent
        samples are drawn (``value.latent: sample``, Dreamer) or the prior's means (``mean``).
        Returns ``(states, actions, entropy)``: states ``s_1..s_H`` as dicts of ``[H, B, size]``,
        actions ``a_0..a_{H-1}`` ``[H, B, A]`` and the pre-tanh Gaussian entropy ``[H, B]``.
        """
        rssm, v = self.world_model.rssm, self.settings
        weight_seed, step_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        step_seeds = tf.random.experimental.stateless_split(step_seed, horizon)

        def step(carry, s):
            prev, _, _ = carry
            action_seed, state_seed = tf.unstack(tf.random.experimental.stateless_split(s, 2))
            mean, std = self._policy_dist(rssm.features(prev))
            action = self._squash(
                mean + std * tf.random.stateless_normal(tf.shape(mean), action_seed))
            entropy = tf.reduce_sum(tf.math.log(std), -1)  # + const: the Gaussian's entropy
            noise = tf.zeros_like(prev["stoch"]) if v.latent == "mean" else None
            return rssm.img_step(prev, action, state_seed, noise=noise), action, entropy

        batch = tf.shape(state["deter"])[0]
        init = (state, tf.zeros([batch, self.action_size]), tf.zeros([batch]))
        with fixed_noise(rssm, weight_seed):
            states, actions, entropy = tf.scan(step, step_seeds, initializer=init)
        return states, actions, entropy

    def proposals(self, state, num, horizon, seed):
        """``num`` action sequences of π rolled out in the model from each state of ``state``
        (flat ``[B]``): ``[B, num, horizon, A]`` candidates for the planner."""
        tiled = {k: tf.repeat(v, num, axis=0) for k, v in state.items()}  # [B * num]
        _, actions, _ = self.rollout(tiled, horizon, seed)  # [H, B * num, A]
        actions = tf.transpose(actions, [1, 0, 2])
        return tf.reshape(actions, [-1, num, horizon, self.action_size])

    # -- learning -----------------------------------------------------------------------------
    def replay_returns(self, posterior, reward):
        """λ-returns of the replayed chunks for their posterior states ``s_0..s_{T-2}``:
        ``[B, T-1]`` targets from the real rewards ``reward`` ``[B, T]`` (``reward[:, t]``:
        arriving at ``s_t``, as the world model is trained; an ensemble's posterior holds the
        batch once per member, so the rewards are tiled alike) and the target critic's
        ``V'(s_1..s_{T-1})``."""
        v = self.settings
        reward = self.world_model.rssm.tile_members(reward)
        later = {k: x[:, 1:] for k, x in posterior.items()}
        values = self.value(later, target=True)  # [B, T-1]: V'(s_1..s_{T-1})
        returns = lambda_returns(tf.transpose(reward[:, 1:]), tf.transpose(values),
                                 v.discount, v.td_lambda)
        return tf.transpose(returns)

    @staticmethod
    def _novelty_seed(seed):
        """The second weight sample's seed of `disagreement`: a stream of its own within the
        update's ``value_step`` seed (`bayes_planet.seeds`), so that ``value.novelty: 0``
        draws exactly what it drew before the key existed."""
        return tf.random.experimental.stateless_fold_in(seed, 1)

    def disagreement(self, start, states, actions, seed):
        """The transition's one-step disagreement along imagined rollouts, ``[H, N]``.

        ``d_t`` is the population std, over two weight samples of the transition, of the
        prior's mean of ``s_{t+1}`` given ``(s_t, a_t)``, averaged over its dimensions: the
        rollout's own weight sample (``states["mean"]``) and a second one drawn from
        ``seed`` (for two values the std is half their distance). Plan2Explore's intrinsic
        reward (Sekar et al., 2020), with the Bayesian transition's weight samples as its
        ensemble; zero for a transition without weight noise (rejected by the config).

        Args:
          start: the rollouts' start states ``s_0``, flat ``[N, size]``.
          states, actions: `rollout`'s ``s_1..s_H`` ``[H, N, size]`` and ``a_0..a_{H-1}``
            ``[H, N, A]``.
          seed: the second weight sample's stateless seed.
        """
        rssm = self.world_model.rssm
        # [N, H, ...] flattened keeps an ensemble's member blocks contiguous (`tile_members`).
        prev = {k: tf.concat([start[k][:, None], tf.transpose(s[:-1], [1, 0, 2])], 1)
                for k, s in states.items()}
        flat = {k: tf.reshape(x, [-1, x.shape[-1]]) for k, x in prev.items()}
        flat_actions = tf.reshape(tf.transpose(actions, [1, 0, 2]), [-1, self.action_size])
        with fixed_noise(rssm, seed):
            other = rssm.img_step(flat, flat_actions, seed,
                                  noise=tf.zeros_like(flat["stoch"]))["mean"]
        other = tf.transpose(tf.reshape(other, tf.shape(prev["mean"])), [1, 0, 2])
        return tf.reduce_mean(tf.abs(states["mean"] - other), -1) / 2

    def start_states(self, posterior):
        """The imagined rollouts' start states, flat ``[N, size]``, from a batch's posterior
        ``[R, T, size]``: every ``value.start_every``-th step of each chunk; an ensemble
        transition's posterior holds E member blocks, and with ``value.ensemble_starts:
        split`` block ``e`` keeps steps ``e·s, e·s + E·s, ...`` (s = ``start_every``, as many
        per member, the fewest any member has), member blocks kept in order."""
        v, rssm = self.settings, self.world_model.rssm
        members, every = rssm.ensemble_size, v.start_every
        if members == 1 or v.ensemble_starts == "all":
            return {k: tf.reshape(x[:, ::every], [-1, x.shape[-1]]) for k, x in posterior.items()}
        length = next(iter(posterior.values())).shape[1]
        count = len(range((members - 1) * every, length, members * every))

        def split(x):
            blocks = rssm.split_members(x)  # [E, B, T, size]
            picked = tf.stack([blocks[e, :, e * every::members * every][:, :count]
                               for e in range(members)])
            return tf.reshape(picked, [-1, x.shape[-1]])
        return {k: split(x) for k, x in posterior.items()}

    @staticmethod
    def weight_seeds(seed, num):
        """The ``value.weight_samples`` = ``num`` rollout seeds of an update's ``value_step``
        seed: the first is ``seed`` itself (one sample draws what it drew before the key
        existed), the others streams of their own (2, 3, ...; 1 is `_novelty_seed`'s)."""
        return [seed] + [tf.random.experimental.stateless_fold_in(seed, 1 + k)
                         for k in range(1, num)]

    def _imagine(self, start, seed, tape):
        """One weight sample's rollouts from ``start`` and their λ-returns ``R_0..R_{H-1}``
        ``[H, N]``; returns ``(states, returns, entropy, bonus)`` (``bonus``: the novelty
        reward d_t, None without ``value.novelty``), recorded on ``tape`` for the policy."""
        v, wm = self.settings, self.world_model
        states, actions, entropy = self.rollout(start, v.imagine_horizon, seed)
        rewards = wm.predict_reward(states)  # [H, N]: r_1..r_H
        bonus = None
        if v.novelty:
            with tape.stop_recording():  # A reward, not a path for the policy's gradient.
                bonus = self.disagreement(start, states, actions, self._novelty_seed(seed))
            rewards += v.novelty * bonus
        values = self.value(states, target=True)  # V'(s_1..s_H)
        return states, lambda_returns(rewards, values, v.discount, v.td_lambda), entropy, bonus

    def _train_step(self, posterior, seed, reward=None):
        """One critic and one actor update from a batch's posterior states ``[B, T, size]``
        (`WorldModel.train_step` with ``return_posterior=True``) and, for the replay term
        (``value.replay_weight``), the batch's rewards ``[B, T]``."""
        v = self.settings
        start = {k: tf.stop_gradient(x) for k, x in self.start_states(posterior).items()}
        actor_vars = self.actor.trainable_variables
        critic_vars = self.critic.trainable_variables
        num = v.weight_samples
        with tf.GradientTape() as tape:
            samples = [self._imagine(start, s, tape) for s in self.weight_seeds(seed, num)]
            returns = [r for _, r, _, _ in samples]  # K x [H, N]
            objective = sample_objective(tf.stack(returns), v.pessimism) if num > 1 else returns[0]
            entropy = tf.concat([e for _, _, e, _ in samples], 1)
            actor_loss = -tf.reduce_mean(objective) - v.actor_entropy * tf.reduce_mean(entropy)
        actor_grads = tape.gradient(actor_loss, actor_vars)
        actor_grads, actor_norm = tf.clip_by_global_norm(actor_grads, v.grad_clip)
        # The critic's inputs: s_0..s_{H-1} of every sample's rollouts, each with the
        # targets R_0..R_{H-1} of its start (one sample: its own λ-returns).
        inputs = {k: tf.stop_gradient(tf.concat(
            [tf.concat([start[k][None], states[k][:-1]], 0) for states, _, _, _ in samples], 1))
            for k in samples[0][0]}
        targets = tf.stop_gradient(tf.tile(objective, [1, num]))
        replay = v.replay_weight > 0
        if replay:
            if reward is None:
                raise ValueError("Expected the batch's rewards with value.replay_weight > 0. "
                                 "Received: reward=None")
            posterior = {k: tf.stop_gradient(x) for k, x in posterior.items()}
            replay_targets = tf.stop_gradient(self.replay_returns(posterior, reward))
            replay_inputs = {k: x[:, :-1] for k, x in posterior.items()}
        with tf.GradientTape() as tape:
            critic_loss = 0.5 * tf.reduce_mean(tf.square(self.value(inputs) - targets))
            if replay:
                replay_error = replay_targets - self.value(replay_inputs)
                if v.replay_loss == "self_imitation":  # Only where the real return is higher.
                    replay_error = tf.nn.relu(replay_error)
                replay_loss = 0.5 * tf.reduce_mean(tf.square(replay_error))
                critic_loss += v.replay_weight * replay_loss
        critic_grads = tape.gradient(critic_loss, critic_vars)
        critic_grads, critic_norm = tf.clip_by_global_norm(critic_grads, v.grad_clip)
        finite = tf.reduce_all(tf.math.is_finite(tf.stack(
            [actor_loss, critic_loss, actor_norm, critic_norm])))

        def apply():
            self.actor_optimizer.apply_gradients(zip(actor_grads, actor_vars, strict=True))
            self.critic_optimizer.apply_gradients(zip(critic_grads, critic_vars, strict=True))
            rate = v.target_rate
            for target, source in zip(self.target_critic.variables, self.critic.variables,
                                      strict=True):
                target.assign((1 - rate) * target + rate * source)
            return tf.constant(True)

        finite = tf.cond(finite, apply, lambda: tf.constant(False))
        metrics = {"critic_loss": critic_loss, "actor_loss": actor_loss,
                   "value": tf.reduce_mean(targets), "value_finite": tf.cast(finite, tf.float32)}
        if v.novelty:
            metrics["novelty"] = tf.reduce_mean(tf.stack([b for _, _, _, b in samples]))
        if num > 1:  # How much the weight samples' returns disagree.
            metrics["return_std"] = tf.reduce_mean(tf.math.reduce_std(tf.stack(returns), 0))
        if replay:
            metrics["replay_value"] = tf.reduce_mean(replay_targets)
        return metrics
