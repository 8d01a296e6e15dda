"""The Bayesian PlaNet world model: encoder, RSSM, observation and reward heads.

Training objective per sequence chunk (Hafner et al., 2018, eq. 3; Tran et al.,
2019, Sec. 3.2), averaged over batch and time::

    loss = - E_q[log p(o_t | s_t)] - reward_scale * E_q[log p(r_t | s_t)]
           + kl_scale * max(free_nats, mean_t KL(q(z_t | ...) || p(z_t | h_t)))
           + weight_kl_scale * KL(q(W) || p(W)) / N
           [+ kl_scale * max(free_nats, mean_{t,d} KL(sg q(z_{t+d}) || p(z_{t+d} | s_t, a)))
            - reward_scale * mean_{t,d} log p(r_{t+d} | s_{t+d} ~ p(. | s_t, a))]

With ``loss.value_scale = c > 0`` the loss adds ``c · mean_t (u(s_t) − sg R_t)²``: a value
head ``u`` of the latent regressed by TD(λ) onto the replayed chunk's real rewards, in the
rewards' units (`_latent_value_loss`), its gradient shaping the latent as TD-MPC's value loss
does (the planner's critic is the value model's, `bayes_planet.agent.value`).

The bracketed terms are ``loss.overshooting = D > 0``: the prior rolled d = 1..D steps
open-loop from each posterior state with the replayed actions (PlaNet's latent overshooting,
its targets stopped, and TD-MPC's multi-step reward loss). ``loss.obs_grad_scale = c``
scales the observation term's gradient into the latent (``s_t``, hence the RSSM and the
encoder) by c without changing its value or the decoder's gradient (c = 0: the decoder
learns on stopped latents). ``loss.kl_balance = a`` splits
the state KL's gradient: a of it reaches the prior (KL(sg q || p)), 1 - a the posterior
(KL(q || sg p); DreamerV2), its value unchanged.

where ``KL(q(W) || p(W))`` is the sum of the Bayesian transition layers' KL terms
and ``N`` the number of transitions in the replay buffer: the loss is an average
per transition, so the weight KL — a cost for the whole data set — is spread
over every transition the model is trained on (the ELBO divided by N). An ensemble
transition (``rank1``, ``batch_ensemble``) is trained on the batch tiled once per member
(`RSSM.tile_members`, as uncertainty-baselines trains rank-1 and BatchEnsemble models), so
the means above are also over members: each member's ELBO is averaged, the rank-1 factors'
KL (every member's, the only weight KL) divided by N as for mean-field. Free nats
are applied to the KL averaged over batch and time (as in Dreamer): below
``free_nats`` the state KL has no gradient.

Observation and reward heads are `bayes_planet.layers.Normal` output layers with a fixed
scale, so ``head(x).log_prob(target)`` is the likelihood: the reward's is 1, the
observation's ``model.obs_stddev`` (PlaNet: 1, per pixel or state dimension; a smaller std
weighs the reconstruction more — a state observation of 5 dimensions under unit std pays
almost nothing for errors of 0.1: ``experiments/results/7k-sharper-observation-likelihood.md``).
Pixels are reduced to ``pixel_bits`` bits with uniform dequantization noise and centred (PlaNet);
with ``train.random_shift = n > 0`` each training chunk is first shifted by up to n pixels
(`bayes_planet.agent.augment.random_shift`, one offset per chunk). State
observations are used as they are, or with ``model.normalize_obs`` standardized per
dimension by statistics fixed once from the seed episodes (`set_observation_stats`; the
encoder reads and the decoder reconstructs the standardized vector, so every dimension
weighs alike in the reconstruction loss).
"""

import numpy as np
import tensorflow as tf

from bayes_planet import distribute
from bayes_planet._keras import keras
from bayes_planet.agent.augment import random_shift
from bayes_planet.agent.networks import MLP, ConvDecoder, ConvEncoder
from bayes_planet.agent.rssm import RSSM
from bayes_planet.agent.value import lambda_returns
from bayes_planet.layers import Normal
from bayes_planet.layers.noise import per_example

__all__ = ["WorldModel", "as_batch", "preprocess_image"]


def preprocess_image(image, bits, seed=None):
    """uint8 ``[0, 255]`` → ``bits``-bit, dequantized with uniform noise, in [-0.5, 0.5)."""
    bins = 2.0 ** bits
    x = tf.floor(tf.cast(image, tf.float32) / 2 ** (8 - bits)) / bins
    if seed is not None:
        x += per_example(lambda shape, s: tf.random.stateless_uniform(shape, s, 0.0, 1.0 / bins),
                         tf.shape(x), seed)
    return x - 0.5


class WorldModel(tf.Module):
    """PlaNet world model with a Bayesian transition; see the module docstring.

    Data parallelism: pass a `tf.distribute.Strategy` (see `bayes_planet.distribute`;
    default: the strategy in scope, i.e. none). Variables and optimizer are created under
    its scope; `train_step` takes the *global* batch, each replica trains on its rows,
    batch means are all-reduced (`distribute.global_mean`, so free nats apply to the
    global mean), the weight KL is counted once and the summed gradients are clipped
    and applied identically on every replica. The returned metrics are global.

    Args:
      config: the merged `bayes_planet.agent.config.Config` (uses ``model``, ``loss``, ``train``).
      obs_shape: observation shape (``(64, 64, 3)`` pixels or ``(D,)`` state).
      action_size: action dimension.
      strategy: optional `tf.distribute.Strategy`.
    """

    def __init__(self, config, obs_shape, action_size, name="world_model", strategy=None):
        super().__init__(name=name)
        m, self.loss_config, self.train_config = config.model, config.loss, config.train
        self.value_settings = config.value  # discount and λ of loss.value_scale's returns
        self.pixels = len(obs_shape) == 3
        self.obs_shape, self.action_size = tuple(obs_shape), int(action_size)
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        with self.strategy.scope(), self.name_scope:
            if self.pixels:
                self.encoder = ConvEncoder(m.cnn_depth, precision=m.cnn_precision)
                self.decoder = ConvDecoder(m.cnn_depth, obs_shape[-1], precision=m.cnn_precision)
            else:
                self.encoder = MLP(m.mlp_units, m.mlp_layers)
                self.decoder = MLP(m.mlp_units, m.mlp_layers, out=obs_shape[0])
            self.reward_net = MLP(m.mlp_units, m.reward_layers, out=1)
            # loss.value_scale: a value head on the latent, trained on the replayed rewards.
            self.value_net = (MLP(m.mlp_units, m.reward_layers, out=1)
                              if self.loss_config.value_scale else None)
            self.obs_head = Normal(scale=float(m.obs_stddev), event_ndims=len(obs_shape))
            self.reward_head = Normal(scale=1.0, event_ndims=1)
            self.rssm = RSSM(m, seed=config.seed)
            self.obs_stats = None
            if m.normalize_obs and not self.pixels:  # Checkpointed; set once from the replay.
                self.obs_stats = {
                    "mean": tf.Variable(tf.zeros(obs_shape), trainable=False, name="obs_mean"),
                    "std": tf.Variable(tf.ones(obs_shape), trainable=False, name="obs_std"),
                    "set": tf.Variable(False, trainable=False, name="obs_stats_set")}
            self.optimizer = keras.optimizers.Adam(self.train_config.learning_rate,
                                                   epsilon=self.train_config.adam_epsilon)
        with self.strategy.scope():
            self._build()
        # Its control flow is explicit (tf.cond, tf.scan): no autograph, whose source
        # conversion was a fifth of a debug run's CPU time (the same numbers either way).
        self.train_step = tf.function(self._train_step, autograph=False)

    def _build(self):
        obs = tf.zeros((1, 1) + self.obs_shape, tf.uint8 if self.pixels else tf.float32)
        embed = self.encoder(self.observation(obs))
        self.rssm.build_for(self.action_size, embed.shape[-1])
        feat = self.rssm.features(self.rssm.initial(1))
        self.obs_head(self.decoder(feat))
        self.reward_head(self.reward_net(feat))
        if self.value_net is not None:
            self.value_net(feat)
        self.optimizer.build(self.trainable_variables)

    def observation(self, obs, seed=None):
        """Network input from raw observations (5-bit pixels or float states, standardized
        with ``model.normalize_obs``)."""
        if self.pixels:
            return preprocess_image(obs, self.train_config.pixel_bits, seed)
        obs = tf.cast(obs, tf.float32)
        if self.obs_stats is not None:
            obs = (obs - self.obs_stats["mean"]) / self.obs_stats["std"]
        return obs

    def needs_observation_stats(self):
        """True while ``model.normalize_obs``'s statistics are not yet set."""
        return self.obs_stats is not None and not bool(self.obs_stats["set"].numpy())

    def set_observation_stats(self, observations, min_std=0.01):
        """Fixes the standardization of ``model.normalize_obs`` from ``observations``
        ``[N, D]`` (the seed episodes): their per-dimension mean and std (at least
        ``min_std``). Once set (a checkpointed flag) later calls change nothing; returns
        whether this call set them. A no-op without ``normalize_obs``."""
        if not self.needs_observation_stats():
            return False
        observations = np.asarray(observations, np.float64).reshape((-1,) + self.obs_shape)
        self.obs_stats["mean"].assign(observations.mean(0).astype(np.float32))
        self.obs_stats["std"].assign(np.maximum(observations.std(0), min_std).astype(np.float32))
        self.obs_stats["set"].assign(True)
        return True

    def weight_kl(self):
        """Sum of the Bayesian transition layers' KL terms (0 for PlaNet)."""
        return tf.add_n(self.rssm.losses) if self.rssm.losses else tf.constant(0.0)

    def loss(self, batch, seed, num_transitions):
        """Loss and metrics for a batch ``{obs, action, reward}`` of ``[B, T, ...]``."""
        loss, metrics, _, _ = self._loss(batch, seed, num_transitions)
        return loss, metrics

    def loss_terms(self, batch, seed, num_transitions):
        """The loss's terms as they enter it (weights applied; their sum is `loss`):
        ``{'obs', 'reward', 'state_kl', 'weight_kl'}``, plus ``'latent_value'``
        (``loss.value_scale``) and ``'overshooting'`` (``loss.overshooting``) when on. The
        ``'obs'`` term's gradient reaches the latent scaled by ``loss.obs_grad_scale``, as in
        training: the terms' gradients are what shapes the latent (``plateau.py gradients``)."""
        return self._loss(batch, seed, num_transitions)[3]

    def _loss(self, batch, seed, num_transitions):
        """`loss` and the batch's posterior states."""
        noise_seed, rssm_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        obs = batch["obs"]
        if self.train_config.random_shift:  # One shift per chunk (`augment.random_shift`).
            obs = random_shift(obs, self.train_config.random_shift,
                               tf.random.experimental.stateless_fold_in(noise_seed, 1))
        obs = self.observation(obs, noise_seed)
        cfg = self.loss_config
        # An ensemble transition sees the batch once per member (E blocks; E = 1 otherwise).
        embed, action, obs, reward = self.rssm.tile_members(
            (self.encoder(obs), batch["action"], obs, batch["reward"]))
        post, prior = self.rssm.observe(embed, action, rssm_seed)
        feat = self.rssm.features(post)
        obs_feat = feat
        if cfg.obs_grad_scale != 1.0:  # loss.obs_grad_scale of the gradient reaches the latent.
            stopped = tf.stop_gradient(feat)
            obs_feat = stopped + cfg.obs_grad_scale * (feat - stopped)
        # Means over (members,) batch and time (over the global batch under a strategy).
        recon, reward_lp, kl_loss, kl = self._global_terms(
            [self.obs_head(self.decoder(obs_feat)).log_prob(obs), self._reward_lp(post, reward)],
            post, prior, cfg.kl_balance)
        weight_kl = self.weight_kl()
        n = tf.cast(num_transitions, tf.float32)
        terms = {"obs": -recon, "reward": -cfg.reward_scale * reward_lp,
                 "state_kl": cfg.kl_scale * kl_loss, "weight_kl": cfg.weight_kl_scale * weight_kl / n}
        loss = terms["obs"] + terms["reward"] + terms["state_kl"] + terms["weight_kl"]
        metrics = {"loss": loss, "obs_nll": -recon, "reward_nll": -reward_lp, "state_kl": kl,
                   "weight_kl": weight_kl}
        if cfg.value_scale:
            value_loss = self._latent_value_loss(feat, reward)
            terms["latent_value"] = cfg.value_scale * value_loss
            loss += terms["latent_value"]
            metrics.update(loss=loss, latent_value_loss=value_loss)
        if cfg.overshooting:
            over_reward_lp, over_kl_loss, over_kl = self._overshooting(
                post, action, reward, tf.random.experimental.stateless_fold_in(rssm_seed, 1))
            terms["overshooting"] = cfg.kl_scale * over_kl_loss - cfg.reward_scale * over_reward_lp
            loss += terms["overshooting"]
            metrics.update(loss=loss, overshooting_kl=over_kl,
                           overshooting_reward_nll=-over_reward_lp)
        return loss, metrics, post, terms

    def latent_value(self, feat):
        """``loss.value_scale``'s head: ``(1 − γ) V(s)`` of latent features ``[*batch, F]``
        (values in the rewards' units), ``[*batch]``."""
        return self.value_net(feat)[..., 0]

    def _latent_value_loss(self, feat, reward):
        """``loss.value_scale``'s term: the mean over the chunk's states ``s_0..s_{T-2}`` of
        ``(u(s_t) − sg R_t)²``, ``u`` = `latent_value` and ``R_t`` the λ-return of the real
        rewards ``(1 − γ) r_{t+1..}`` bootstrapped with ``u(s_{t+1..})`` (``value.discount``,
        ``value.td_lambda``; its target stopped: TD(λ) on the replayed chunk). Its gradient
        reaches the latent (RSSM and encoder), as TD-MPC's value loss shapes its encoder."""
        v = self.value_settings
        value = self.latent_value(feat)  # [B, T]
        targets = lambda_returns((1.0 - v.discount) * tf.transpose(reward[:, 1:]),
                                 tf.transpose(tf.stop_gradient(value[:, 1:])),
                                 v.discount, v.td_lambda)
        error = tf.square(value[:, :-1] - tf.stop_gradient(tf.transpose(targets)))
        return distribute.global_mean([error])[0]

    def _reward_lp(self, state, reward):
        return self.reward_head(self.reward_net(self.rssm.features(state))).log_prob(
            reward[..., None])

    def _global_terms(self, terms, post, prior, balance=None):
        """The global means of ``terms`` and of the state KL, then the KL's loss (free nats;
        ``balance``: ``loss.kl_balance``) and the KL: ``[*means of terms, kl loss, kl]``."""
        if balance is None:
            *means, kl = distribute.global_mean([*terms, self.rssm.kl(post, prior)])
            return [*means, tf.maximum(kl, self.loss_config.free_nats), kl]
        stop = lambda state: {k: tf.stop_gradient(v) for k, v in state.items()}  # noqa: E731
        *means, to_prior, to_post = distribute.global_mean(
            [*terms, self.rssm.kl(stop(post), prior), self.rssm.kl(post, stop(prior))])
        free = self.loss_config.free_nats
        loss = (balance * tf.maximum(to_prior, free)
                + (1.0 - balance) * tf.maximum(to_post, free))
        return [*means, loss, to_prior]

    def _overshooting(self, post, action, reward, seed):
        """``loss.overshooting``'s terms: the prior rolled ``D`` steps open-loop from every
        posterior state ``t < T - D`` with the replayed actions ``t+1..t+D``, its latents
        against the posterior's (stopped: the targets) and its rewards against ``r_{t+1..t+D}``.
        Returns ``(reward log-prob, KL loss, KL)``, means over starts and distances."""
        steps = int(self.loss_config.overshooting)
        length = tf.shape(action)[1]
        # [T - D, D]: the time index of every (start, distance).
        index = (tf.range(length - steps)[:, None] + 1 + tf.range(steps)[None, :])
        starts = {k: v[:, :length - steps] for k, v in post.items()}
        imagined = self.rssm.imagine(tf.gather(action, index, axis=1), starts, seed)
        target = {k: tf.stop_gradient(tf.gather(v, index, axis=1)) for k, v in post.items()}
        reward_lp, kl_loss, kl = self._global_terms(
            [self._reward_lp(imagined, tf.gather(reward, index, axis=1))], target, imagined)
        return reward_lp, kl_loss, kl

    def _train_step(self, batch, seed, num_transitions, return_posterior=False):
        """One update; metrics include ``finite`` (1.0, or 0.0 when the update was skipped).

        With ``return_posterior`` (one device only) returns ``(metrics, posterior)``: the
        batch's posterior states ``[B, T, size]`` (``[E·B, ...]``, member blocks, with an
        ensemble transition, `RSSM.tile_members`) as the step computed them (before its
        update, no gradient), for a learner that starts from them (`bayes_planet.agent.value`).
        """
        if return_posterior:
            if self.strategy.num_replicas_in_sync > 1:
                raise ValueError("Expected one replica with return_posterior=True. Received: "
                                 f"{self.strategy.num_replicas_in_sync} replicas")
            metrics, post = self._replica_step(batch, seed, num_transitions, True)
            return metrics, {k: tf.stop_gradient(v) for k, v in post.items()}
        metrics = self.strategy.run(self._replica_step, (batch, seed, num_transitions))
        # Every replica holds the same global values: report the first local one.
        return {k: self.strategy.experimental_local_results(v)[0] for k, v in metrics.items()}

    def _replica_step(self, batch, seed, num_transitions, return_posterior=False):
        ctx = tf.distribute.get_replica_context()
        replicas = ctx.num_replicas_in_sync
        batch = distribute.replica_rows(batch, ctx)  # the global batch with one replica
        variables = self.trainable_variables
        with tf.GradientTape() as tape:
            loss, metrics, post, _ = self._loss(batch, seed, num_transitions)
            # `loss` is the global loss on every replica: the sum of the replicas'
            # gradients of loss / R is its gradient (weight KL once).
            scaled = loss / replicas if replicas > 1 else loss
        grads = tape.gradient(scaled, variables)
        if replicas > 1:  # Sum before clipping, so the clip sees the global gradient.
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        grads, norm = tf.clip_by_global_norm(grads, self.train_config.grad_clip)
        # A non-finite loss or gradient skips the update: weights and optimizer unchanged.
        finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(norm))
        if replicas == 1:
            def apply():
                self.optimizer.apply_gradients(zip(grads, variables, strict=True))
                return tf.constant(True)

            finite = tf.cond(finite, apply, lambda: tf.constant(False))  # Applied or not.
        else:
            # apply_gradients synchronizes replicas (merge_call), which TensorFlow does not
            # allow inside a tf.cond: with several replicas a non-finite step applies zero
            # gradients instead (no NaN reaches the weights; Adam's moments still decay).
            grads = [tf.where(finite, g, tf.zeros_like(g)) for g in grads]
            self.optimizer.apply_gradients(zip(grads, variables, strict=True),
                                           skip_gradients_aggregation=True)
        metrics["grad_norm"] = norm
        metrics["finite"] = tf.cast(finite, tf.float32)
        return (metrics, post) if return_posterior else metrics

    def predict_reward(self, state):
        return self.reward_head(self.reward_net(self.rssm.features(state))).distribution.mean()[
            ..., 0]

    def open_loop(self, batch, context, seed, latent="sample"):
        """Observes ``context`` steps, then imagines the rest with the prior.

        Returns (truth, prediction) observations ``[B, T, ...]`` (model means; with an
        ensemble transition the mean over its members, each observing and imagining the
        batch); pixels in [0, 1]. ``latent='mean'`` imagines from the last posterior's mean
        on the prior's means (no latent noise); ``'sample'`` draws them.
        """
        if latent not in ("sample", "mean"):
            raise ValueError(f"Expected latent 'sample' or 'mean'. Received: latent={latent!r}")
        seed_a, seed_b = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        obs = self.observation(batch["obs"])
        embed, action = self.rssm.tile_members((self.encoder(obs[:, :context]),
                                                batch["action"]))
        post, _ = self.rssm.observe(embed, action[:, :context], seed_a)
        last = {k: v[:, -1] for k, v in post.items()}
        noise = None
        if latent == "mean":
            last["stoch"], noise = last["mean"], tf.zeros([self.rssm.stoch_size])
        prior = self.rssm.imagine(action[:, context:], last, seed_b, noise=noise)
        feats = tf.concat([self.rssm.features(post), self.rssm.features(prior)], 1)
        pred = self.obs_head(self.decoder(feats)).distribution.mean()
        pred = tf.reduce_mean(self.rssm.split_members(pred), 0)
        if self.pixels:
            obs, pred = obs + 0.5, tf.clip_by_value(pred + 0.5, 0.0, 1.0)
        return obs, pred


def as_batch(chunk, obs_key):
    """Replay chunk (numpy dict) → the model's batch dict of tensors."""
    return {"obs": tf.convert_to_tensor(chunk[obs_key]),
            "action": tf.convert_to_tensor(chunk["action"], tf.float32),
            "reward": tf.convert_to_tensor(chunk["reward"], tf.float32)}


