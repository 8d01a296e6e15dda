"""Where a trained agent falls short: measurements on a run's checkpoint (three for cartpole,
two for any task from states).

    python experiments/plateau.py openloop --logdir RUN [--episodes 20] [--latent sample|mean]
    python experiments/plateau.py scores   --logdir RUN [--episodes 5] [--latent sample|shared|mean]
    python experiments/plateau.py actor    --logdir RUN [--episodes 10]
    python experiments/plateau.py model    --logdir RUN [--episodes 5]     # any state task
    python experiments/plateau.py novelty  --logdir RUN [--episodes 10] [--column C]  # any state task
    python experiments/plateau.py value    --logdir RUN [--episodes 20]    # any state task
    python experiments/plateau.py error    --logdir RUN [--episodes 5]     # any state task
    python experiments/plateau.py gradients --logdir RUN [--episodes 8]    # any state task

Every measure takes ``--checkpoint N``: the run at its checkpoint after N episodes (kept with
``train.keep_checkpoint_every``), its "last replay episodes" those collected before it.

* ``openloop``: the world model's open-loop error against horizon, from windows of the run's
  last replay episodes (``context`` observed steps, then the prior rolled forward with the
  episode's actions, decoded), grouped by the last observed state: ``balance`` (pole near
  upright, cos θ > 0.95, and slow, |θ̇| < 2 rad/s), ``up_fast`` and ``other``; the RMSE of the
  pole angle (wrapped) and of θ̇ beside persistence (the last observed state held). With
  ``--latent mean`` the rollout uses the prior's means and starts at the posterior mean.
* ``scores``: how reliably the planner's objective ranks candidates. At posterior states of
  replay episodes (``balance`` vs ``other``), the same candidates (64 uniform sequences; the
  policy's proposals with a value model) are scored twice with independent draws (K = 1, as
  the planner, ``planner.latent`` = ``--latent``); reported: the correlation of the two
  scores across candidates, the noise std (within a candidate), the std between candidates
  and the overlap of the two top-5 sets.
* ``actor``: a value-aware run's policy alone (tanh of its mean; the belief filtered as the
  planner policy does), no planning, on fresh evaluation-environment episodes.

* ``model``: on the run's last replay episodes, the reward head on the filtered (posterior)
  states against the true rewards (correlation, RMSE, the rewards' std), and the open-loop
  error of every observation dimension 5 decisions after 5 observed ones (prior means), as a
  fraction of that dimension's std over the predicted steps (either in the network's space:
  the ratio does not depend on ``model.normalize_obs``).
* ``novelty``: the scale of ``value.novelty``'s intrinsic reward on a value-aware run with
  weight noise: the disagreement `ValueModel.disagreement` along 15-step imagined rollouts of
  the policy from every 5th posterior state of the last episodes (mean, 90th percentile, max)
  beside the imagined rewards per decision. With ``--column C``: where the transition's
  weight samples disagree in the world, not in imagination: the same d for each replayed
  step (its posterior state and the action the episode took there), grouped by |physics
  column C| of the true state (finger-spin: 5, the spinner's angular velocity; its reward
  needs ≤ −15 rad/s), in bins of its quantiles: is d larger where the behaviour rarely goes?

* ``value``: does a value-aware run's critic guide the planner where its horizon sees no
  reward? On the run's last replay episodes, the critic V of the filtered states against the
  discounted return-to-go G_t = Σ_k γ^k r_(t+1+k) (bootstrapped with V at the episode's last
  state); "blind" states are those whose next ``planner.horizon`` rewards were all 0, where
  the planned return is V alone. Where the observation has reacher's ``to_target`` (the
  finger-to-target vector), also the rank correlation of V with minus the distance to the
  target over each episode's blind states (and of G, for reference): near 1, V points the
  planner at the target.

* ``error``: does the transition's disagreement point at its real prediction error? From
  every 5th posterior state of the run's last replay episodes, 8 weight samples of a
  transition with weight noise each roll the prior's means open-loop with the episode's actions
  and decode the observations (the network's space); per window and horizon h = 1, 3, 5: the
  spread (the std across the samples, mean over dimensions) against the error of their mean
  prediction against the real observation (RMS over dimensions). Reported: the rank correlation
  of spread and error, the AUROC of the spread for the windows of the largest 10 % of errors
  (0.5: blind to them), and the error and spread per quintile of the spread (calibration).

* ``gradients``: what shapes the latent. On ``--episodes`` replay batches of the run's own
  ``train.batch_size x train.chunk_length`` (seeded), each term of the world model's loss as
  it enters it (`WorldModel.loss_terms`: observation, reward, state KL, weight KL, the latent
  value head and overshooting where on) and the global norm of its gradient with respect to the
  encoder's and the RSSM's variables (the observation term's scaled by
  ``loss.obs_grad_scale``, as in training); reported: the terms' median value, median gradient
  norm and that norm as a share of the summed loss's.

openloop, scores, actor: cartpole only (its observation is (x, cos θ, sin θ, ẋ, θ̇)). Reads
the run, writes nothing. results §7k, §7m.
"""

import bayes_planet  # isort: skip  (TensorFlow and gym imported quietly, before anything else)

bayes_planet.quiet_import(*bayes_planet.AGENT_STACK)

import argparse  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bayes_planet import envs, layer_registry, seeds  # noqa: E402
from bayes_planet.agent import config as config_lib  # noqa: E402
from bayes_planet.agent.agent import Agent  # noqa: E402
from bayes_planet.agent.cli import add_checkpoint_argument  # noqa: E402
from bayes_planet.agent.policy import candidate_scores  # noqa: E402
from bayes_planet.agent.run import RunError  # noqa: E402
from bayes_planet.agent.world_model import as_batch  # noqa: E402
from bayes_planet.layers import fixed_noise  # noqa: E402
from bayes_planet.uncertainty.metrics import auroc  # noqa: E402

GROUPS = ("balance", "up_fast", "other")


def _group(obs):
    """Each observation's group: 0 balance, 1 up_fast, 2 other."""
    up, slow = obs[..., 1] > 0.95, np.abs(obs[..., 4]) < 2.0
    return np.where(up & slow, 0, np.where(up, 1, 2))


def _angle(obs):
    return np.arctan2(obs[..., 2], obs[..., 1])


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def open_loop(agent, episodes, latent, context=5, horizon=10, stride=3):
    errors = {g: [] for g in range(3)}
    for i, episode in enumerate(list(agent.replay.episodes())[-episodes:]):
        obs = np.asarray(episode["obs"], np.float32)
        act = np.asarray(episode["action"], np.float32)
        idx = np.arange(0, len(obs) - context - horizon + 1, stride)[:, None] + np.arange(
            context + horizon)[None]
        batch = {"obs": tf.constant(obs[idx]), "action": tf.constant(act[idx])}
        _, pred = agent.model.open_loop(batch, context, seeds.tf_seed(0, "plateau_openloop", i),
                                        latent=latent)
        pred = pred.numpy()[:, context:]  # state observations: the decoded means as they are
        truth, held = obs[idx[:, context:]], obs[idx[:, context - 1:context]]
        stack = np.stack([_wrap(_angle(pred) - _angle(truth)), _wrap(_angle(held) - _angle(truth)),
                          pred[..., 4] - truth[..., 4], held[..., 4] - truth[..., 4]])
        group = _group(obs[idx[:, context - 1]])
        for g in range(3):
            errors[g].append(stack[:, group == g])
    for g, parts in errors.items():
        e = np.concatenate(parts, 1)
        if not e.shape[1]:
            continue
        rmse = np.sqrt((e ** 2).mean(1))
        print(f"{GROUPS[g]}: {e.shape[1]} windows")
        for h in (1, 3, 5, 10):
            print(f"  h={h:2d} angle RMSE {rmse[0, h - 1]:.3f} (persistence {rmse[1, h - 1]:.3f})"
                  f"  θ̇ RMSE {rmse[2, h - 1]:.3f} (persistence {rmse[3, h - 1]:.3f})")


def _filtered(wm, episode, i):
    """A replay episode's observations and actions and its posterior states ``[1, T, size]``
    (the ``plateau_filter`` stream of episode index ``i``)."""
    obs = np.asarray(episode["obs"], np.float32)
    act = np.asarray(episode["action"], np.float32)
    embed = wm.encoder(wm.observation(tf.constant(obs[None])))
    post, _ = wm.rssm.observe(embed, tf.constant(act[None]), seeds.tf_seed(0, "plateau_filter", i))
    return obs, act, post


def scores(agent, episodes, latent, per_group=6, candidates=64):
    wm, vm, horizon = agent.model, agent.value, agent.config.planner.horizon
    rng = seeds.numpy_rng(0, "plateau_candidates")
    rows = {}
    for i, episode in enumerate(list(agent.replay.episodes())[-episodes:]):
        obs, act, post = _filtered(wm, episode, i)
        group = _group(obs)
        for name, where in (("balance", np.flatnonzero(group == 0)),
                            ("other", np.flatnonzero(group == 2))):
            for t in rng.permutation(where)[:per_group]:
                state = {k: v[:, t] for k, v in post.items()}
                sets = {"random": tf.constant(rng.uniform(-1, 1, (1, candidates, horizon,
                                                                   act.shape[-1])), tf.float32)}
                if vm is not None:
                    sets["policy"] = vm.proposals(state, 24, horizon,
                                                  seeds.tf_seed(0, "plateau_proposals", i, int(t)))
                for kind, actions in sets.items():
                    a, b = (candidate_scores(
                        wm, state, actions,
                        seeds.tf_seed(0, "plateau_scores", i, int(t), j)[None], 0.0, vm,
                        latent=latent).numpy()[0] for j in range(2))
                    top = len(set(np.argsort(-a)[:5]) & set(np.argsort(-b)[:5])) / 5
                    rows.setdefault((name, kind), []).append(
                        (np.corrcoef(a, b)[0, 1], np.std(a - b) / np.sqrt(2), np.std((a + b) / 2),
                         top))
    for (name, kind), values in sorted(rows.items()):
        v = np.array(values)
        print(f"{name:8s} {kind:7s} states {len(v):3d}  correlation {np.nanmean(v[:, 0]):.2f}"
              f"  noise std {v[:, 1].mean():.2f}  between-candidate std {v[:, 2].mean():.2f}"
              f"  top-5 overlap {v[:, 3].mean():.2f}")


def actor(agent, episodes):
    wm, vm, config = agent.model, agent.value, agent.config
    if vm is None:
        raise SystemExit("actor: the run has no value model (value.enabled: false)")
    rssm, returns = wm.rssm, []
    for e in range(episodes):
        env = envs.make(config.task, obs_type="state", action_repeat=config.env.action_repeat,
                        seed=seeds.int_seed(config.seed, "plateau_actor_env", e))
        ob, done, total, t = env.reset(), False, 0.0, 0
        state, previous = rssm.initial(1), tf.zeros([1, wm.action_size])
        while not done:
            obs = wm.observation(tf.constant(np.asarray(ob["state"], np.float32)[None, None]))
            state, _ = rssm.obs_step(state, previous, wm.encoder(obs)[:, 0],
                                     seeds.tf_seed(0, "plateau_actor", e, t))
            mean, _ = tf.split(vm.actor(rssm.features(state)), 2, -1)
            previous = tf.tanh(mean)  # the action box of these tasks is [-1, 1]
            ob, reward, done, _ = env.step(previous.numpy()[0])
            total, t = total + reward, t + 1
        env.close()
        returns.append(total)
    print(f"actor alone, {episodes} episodes: {np.mean(returns):.1f} ± {np.std(returns):.1f}",
          np.round(returns, 1).tolist())


def model_errors(agent, episodes, context=5, horizon=5, stride=7):
    wm = agent.model
    rewards, predicted, errors, observed = [], [], [], []
    for i, episode in enumerate(list(agent.replay.episodes())[-episodes:]):
        obs, act, post = _filtered(wm, episode, i)
        predicted.append(wm.predict_reward(post).numpy()[0])
        rewards.append(np.asarray(episode["reward"], np.float32))
        idx = np.arange(0, len(obs) - context - horizon + 1, stride)[:, None] + np.arange(
            context + horizon)[None]
        batch = {"obs": tf.constant(obs[idx]), "action": tf.constant(act[idx])}
        truth, pred = wm.open_loop(batch, context, seeds.tf_seed(0, "plateau_openloop", i),
                                   latent="mean")  # the network's space (model.normalize_obs)
        truth = truth.numpy()[:, -1]
        errors.append((pred.numpy()[:, -1] - truth) ** 2)
        observed.append(truth)
    r, p = np.concatenate(rewards), np.concatenate(predicted)
    print(f"filtered reward: correlation {np.corrcoef(r, p)[0, 1]:.3f}  RMSE "
          f"{np.sqrt(np.mean((r - p) ** 2)):.3f}  (true rewards: mean {r.mean():.3f}, std "
          f"{r.std():.3f})")
    rmse = np.sqrt(np.concatenate(errors).mean(0))
    std = np.concatenate(observed).std(0)
    print(f"open loop, {horizon} decisions after {context}: RMSE / std per observation dimension",
          [round(float(x), 2) for x in rmse / np.maximum(std, 1e-6)])


def novelty_scale(agent, episodes, horizon=15, every=5):
    wm, vm = agent.model, agent.value
    if vm is None:
        raise SystemExit("novelty: the run has no value model (value.enabled: false)")
    if agent.config.model.estimator in config_lib.NO_WEIGHT_NOISE:
        raise SystemExit("novelty: the transition has no weight noise. Received: "
                         f"model.estimator={agent.config.model.estimator}")
    rows = []
    for i, episode in enumerate(list(agent.replay.episodes())[-episodes:]):
        _, _, post = _filtered(wm, episode, i)
        start = {k: tf.reshape(v[:, ::every], [-1, v.shape[-1]]) for k, v in post.items()}
        states, actions, _ = vm.rollout(start, horizon, seeds.tf_seed(0, "plateau_rollout", i))
        d = vm.disagreement(start, states, actions,
                            seeds.tf_seed(0, "plateau_weights", i)).numpy()
        rows.append((d.mean(), np.percentile(d, 90), d.max(),
                     wm.predict_reward(states).numpy().mean()))
    v = np.array(rows)
    print(f"disagreement d over {horizon}-step imagined rollouts, {len(v)} episodes: mean "
          f"{v[:, 0].mean():.4f}  90th percentile {v[:, 1].mean():.4f}  max {v[:, 2].max():.4f}"
          f"  (imagined reward per decision: mean {v[:, 3].mean():.3f})")


def replay_disagreement(agent, episodes, column, quantiles=(0.5, 0.9, 0.99)):
    """d of every replayed step (``novelty --column``), grouped by |physics[:, column]|."""
    wm, vm = agent.model, agent.value
    d, where = [], []
    for i, episode in enumerate(list(agent.replay.episodes())[-episodes:]):
        physics = np.asarray(episode["physics"])
        if not 0 <= column < physics.shape[-1]:
            raise SystemExit(f"novelty: --column expected a physics column in [0, "
                             f"{physics.shape[-1]}). Received: --column={column}")
        _, act, post = _filtered(wm, episode, i)
        # s_t and the action taken there (the replay's action[t + 1] led to obs[t + 1]).
        start = {k: v[0, :-1] for k, v in post.items()}
        actions = tf.constant(act[1:])
        # One step of one weight sample, as a 1-step rollout; `disagreement` draws the other.
        seed = seeds.tf_seed(0, "plateau_weights_a", i)
        with fixed_noise(wm.rssm, seed):
            step = wm.rssm.img_step(start, actions, seed, noise=tf.zeros_like(start["stoch"]))
        d.append(vm.disagreement(start, {k: x[None] for k, x in step.items()}, actions[None],
                                 seeds.tf_seed(0, "plateau_weights_b", i)).numpy()[0])
        where.append(np.abs(physics[:-1, column]))
    d, where = np.concatenate(d), np.concatenate(where)
    edges = [0.0, *np.quantile(where, quantiles), np.inf]
    print(f"d of the replayed steps ({episodes} episodes, {len(d)} steps) by |physics[{column}]|:"
          f" mean {d.mean():.4f}")
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        inside = (where >= low) & (where < high)
        if inside.any():
            print(f"  [{low:8.3g}, {high:8.3g}): {inside.sum():6d} steps  d mean "
                  f"{d[inside].mean():.4f}  90th percentile {np.percentile(d[inside], 90):.4f}")
    print(f"  correlation of d with |physics[{column}]|: {_correlation(d, where)}")


def disagreement_error(agent, episodes, samples=8, horizons=(1, 3, 5), stride=5):
    """``error``: the weight samples' spread of open-loop predictions against their error."""
    wm, config = agent.model, agent.config
    members = layer_registry.ensemble_members("dense", config.model.estimator,
                                              config.model.ensemble_size)
    if config.model.estimator in config_lib.NO_WEIGHT_NOISE or members > 1:
        raise SystemExit("error: a single transition with weight noise (its weight samples "
                         "disagree). Received: model.estimator="
                         f"{config.model.estimator}")
    depth = max(horizons)
    spread, error = {h: [] for h in horizons}, {h: [] for h in horizons}
    for i, episode in enumerate(list(agent.replay.episodes())[-episodes:]):
        obs, act, post = _filtered(wm, episode, i)
        target = wm.observation(tf.constant(obs)).numpy()  # the network's space
        starts = np.arange(0, len(obs) - depth, stride)
        state = {k: tf.gather(v[0], starts) for k, v in post.items()}
        # From s_t the replay's actions a[t+1..t+depth] lead to obs[t+1..t+depth].
        index = starts[:, None] + 1 + np.arange(depth)[None]
        actions = tf.constant(act[index])
        seed = seeds.tf_seed(0, "plateau_error", i)
        predictions = np.stack([wm.obs_head(wm.decoder(wm.rssm.features(wm.rssm.imagine(
            actions, state, seed, weight_seed=seeds.tf_seed(k, "plateau_error_weights", i),
            noise=tf.zeros([wm.rssm.stoch_size]))))).distribution.mean().numpy()
            for k in range(samples)])  # [K, N, depth, D]
        for h in horizons:
            at = predictions[:, :, h - 1]
            spread[h].append(at.std(0).mean(-1))
            error[h].append(np.sqrt(((at.mean(0) - target[index[:, h - 1]]) ** 2).mean(-1)))
    print(f"open-loop predictions of {samples} weight samples from every {stride}th posterior "
          f"state, {episodes} episodes:")
    for h in horizons:
        d, e = np.concatenate(spread[h]), np.concatenate(error[h])
        worst = e >= np.quantile(e, 0.9)
        print(f"  h={h}: {len(d)} windows  spread mean {d.mean():.4f}  error mean {e.mean():.4f}"
              f"  rank correlation {np.corrcoef(_ranks(d), _ranks(e))[0, 1]:.3f}  AUROC for "
              f"the largest 10 % of errors {auroc(d[~worst], d[worst]):.3f}")
        edges = np.quantile(d, [0.2, 0.4, 0.6, 0.8])
        bins = np.digitize(d, edges)
        print("    by quintile of the spread (spread / error): " + ", ".join(
            f"{d[bins == b].mean():.4f} / {e[bins == b].mean():.4f}" for b in range(5)
            if (bins == b).any()))


def _ranks(x):
    return np.argsort(np.argsort(x)).astype(np.float64)


def return_to_go(rewards, values, discount):
    """``G_t = Σ_k γ^k r[t+1+k]`` over the episode's rest, bootstrapped with ``γ^(T-t) V[T]``
    (the episode ends by its time limit, not in a terminal state); ``rewards[t]`` is the
    reward on arriving at step t (the replay's convention)."""
    g = np.empty(len(values), np.float64)
    g[-1] = values[-1]
    for t in range(len(values) - 2, -1, -1):
        g[t] = rewards[t + 1] + discount * g[t + 1]
    return g


def blind_states(rewards, horizon):
    """Whether each step's next ``horizon`` rewards (``rewards[t+1 .. t+horizon]``) are all
    zero; the last ``horizon`` steps, whose window runs past the episode, are not."""
    rewards = np.asarray(rewards)
    blind = np.zeros(len(rewards), bool)
    for t in range(len(rewards) - horizon):
        blind[t] = not np.any(rewards[t + 1:t + 1 + horizon])
    return blind


def _correlation(x, y):
    return f"{np.corrcoef(x, y)[0, 1]:.3f}" if len(x) > 2 else "-"


def value_landscape(agent, episodes):
    wm, vm, config = agent.model, agent.value, agent.config
    if vm is None:
        raise SystemExit("value: the run has no value model (value.enabled: false)")
    horizon, gamma = config.planner.horizon, vm.discount
    env = envs.make(config.task, obs_type="state", action_repeat=config.env.action_repeat)
    to_target = env.state_slices.get("to_target")
    env.close()
    values, returns, blind, ranks, rows = [], [], [], [], []
    for i, episode in enumerate(list(agent.replay.episodes())[-episodes:]):
        obs, _, post = _filtered(wm, episode, i)
        v = vm.value(post).numpy()[0].astype(np.float64)
        r = np.asarray(episode["reward"], np.float64)
        g, b = return_to_go(r, v, gamma), blind_states(r, horizon)
        values.append(v), returns.append(g), blind.append(b)
        if to_target is not None and b.sum() >= 10:
            d = np.linalg.norm(obs[b][:, to_target], axis=-1)
            ranks.append([np.corrcoef(_ranks(x[b]), _ranks(-d))[0, 1] for x in (v, g)])
        rows.append((r.sum(), b.mean()))
    v, g, b = (np.concatenate(x) for x in (values, returns, blind))
    print(f"critic V vs discounted return-to-go G (γ = {gamma}), {len(rows)} replay episodes "
          f"(returns {', '.join(f'{x:.0f}' for x, _ in rows)}):")
    for name, where in (("all states", np.ones_like(b)), ("blind states", b)):
        means = (f"V mean {v[where].mean():.2f} (G mean {g[where].mean():.2f})" if where.any()
                 else "")
        print(f"  {name:12s} {where.sum():6d}  correlation {_correlation(v[where], g[where])}  "
              f"{means}")
    print(f"  blind: the next {horizon} rewards all 0 (the planner's horizon); fraction per "
          f"episode {np.mean([f for _, f in rows]):.2f}")
    if to_target is not None:
        r = np.array(ranks).reshape(-1, 2)
        for name, column in (("V", 0), ("G (the behaviour's return)", 1)):
            print(f"  {name} vs minus the distance to the target over blind states, {len(r)} "
                  f"episodes: rank correlation mean {np.mean(r[:, column]) if len(r) else 0:.3f} "
                  f"[{', '.join(f'{x:.2f}' for x in r[:, column])}]")


def term_gradients(agent, batches):
    """``{term: (median value, median gradient norm into the latent)}`` (and ``'total'``) over
    ``batches`` replay batches; prints them (see the module's ``gradients``)."""
    wm, train = agent.model, agent.config.train
    latent = wm.encoder.trainable_variables + wm.rssm.trainable_variables
    transitions = agent.replay.transitions()
    rows = {}
    for i in range(batches):
        chunk = agent.replay.sample(train.batch_size, train.chunk_length,
                                    seeds.numpy_rng(0, "plateau_gradients", i))
        with tf.GradientTape(persistent=True) as tape:
            terms = wm.loss_terms(as_batch(chunk, "obs"), seeds.tf_seed(0, "plateau_gradients", i),
                                  transitions)
            terms["total"] = tf.add_n(list(terms.values()))
        for name, value in terms.items():
            grads = tape.gradient(value, latent, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            rows.setdefault(name, []).append((float(value), float(tf.linalg.global_norm(grads))))
        del tape
    out = {name: tuple(np.median(np.asarray(r), 0)) for name, r in rows.items()}
    total = out["total"][1]
    print(f"{batches} batches of {train.batch_size} x {train.chunk_length}; gradients into the "
          f"encoder and RSSM ({len(latent)} variables)")
    for name, (value, norm) in out.items():
        print(f"  {name:13s} value {value:12.5g}  gradient norm {norm:10.4g}  "
              f"({norm / total:.3g} of the total's)")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measure", choices=("openloop", "scores", "actor", "model", "novelty",
                                            "value", "error", "gradients"))
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--latent", default="sample", choices=("sample", "shared", "mean"))
    parser.add_argument("--column", type=int, default=None,
                        help="novelty: also d of the replayed steps by |this physics column|")
    add_checkpoint_argument(parser)
    args = parser.parse_args(argv)
    try:
        agent = Agent(args.logdir, read_only=True, checkpoint=args.checkpoint)
    except RunError as e:
        raise SystemExit(f"plateau: {e}") from None
    if agent.config.obs_type != "state":
        raise SystemExit(f"plateau: state observations only. Received: obs_type="
                         f"{agent.config.obs_type}")
    if args.measure == "model":
        return model_errors(agent, args.episodes or 5)
    if args.measure == "novelty":
        novelty_scale(agent, args.episodes or 10)
        if args.column is not None:
            replay_disagreement(agent, args.episodes or 10, args.column)
        return
    if args.measure == "value":
        return value_landscape(agent, args.episodes or 20)
    if args.measure == "error":
        return disagreement_error(agent, args.episodes or 5)
    if args.measure == "gradients":
        return term_gradients(agent, args.episodes or 8)
    if agent.config.task.split("-")[0] != "cartpole":
        raise SystemExit(f"plateau: cartpole from states only. Received: task={agent.config.task}"
                         f", obs_type={agent.config.obs_type}")
    if agent.config.model.normalize_obs:
        raise SystemExit("plateau: the measurements read raw observations; the run has "
                         "model.normalize_obs: true")
    if args.measure == "openloop":
        if args.latent == "shared":
            raise SystemExit("openloop: --latent sample or mean. Received: shared")
        open_loop(agent, args.episodes or 20, args.latent)
    elif args.measure == "scores":
        scores(agent, args.episodes or 5, args.latent)
    else:
        actor(agent, args.episodes or 10)


if __name__ == "__main__":
    main()
