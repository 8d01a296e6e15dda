"""Latent probes: how much of the true physical state does a world model's latent carry?

Paper Fig. 11 (Tran et al., 2019): fit simple regressors from the latent state to the
true physical quantities and report their R² on held-out episodes. The claim to test is
that a Bayesian world model's latent codes carry more information about velocities.

``bayes-planet probe --logdir runs/x`` (`probe_run`):

* **Data.** Probe *training* episodes are the run's replay episodes (every episode stores
  ``physics`` = ``physics.get_state()`` = ``[qpos, qvel, act]`` of each observation), the
  most recent ``train_episodes`` of them; if the replay has no ``physics`` (runs recorded
  before it was stored) or ``train_source='fresh'``, ``train_episodes`` fresh episodes are
  collected with the trained evaluation policy on the *training* environment instead.
  Probe *test* episodes are always held out from both the model and the probe: ``episodes``
  fresh episodes collected with the trained evaluation policy (no exploration noise) on the
  *evaluation* environment, saved to ``<out>/test_episodes/`` so other models can be probed
  on exactly the same episodes (``test_episodes=DIR`` loads them; a missing ``DIR`` is
  filled on first use).
* **Features.** Closed loop: the posterior ``concat(z, h)`` after filtering the episode from
  its start (``z`` = the posterior mean by default, ``latent='sample'`` uses the sample the
  decoder sees). Open loop, as `WorldModel.open_loop`: windows starting at every ``stride``-th
  step observe ``context`` frames from the zero state, then roll the prior forward with the
  episode's actions; the feature at horizon ``h`` is the prior state predicting observation
  ``start + context + h - 1``.
* **Weights** of a Bayesian model: ``weights='per_episode'`` (default) encodes each episode
  with its own weight sample (and, open loop, filters and imagines with two samples, as
  `WorldModel.open_loop`), so the probe must generalize across model samples;
  ``weights='shared'`` encodes every episode, train and test, closed and open loop, with
  one weight sample: the probe reads the latent of one fixed model; ``weights='mean'``
  uses the posterior-mean weights (`bayes_planet.layers.posterior_mean`): no weight noise.
* **Ensembles.** With an ensemble transition (``rank1``, ``batch_ensemble``) every member
  filters (and imagines) each episode and the features are the **member average** of the
  latents, the ensemble's mean belief (the members share the posterior network, decoder and
  latent space); the ``weights`` modes above then pick the rank-1 factors' draws.
* **Targets.** ``qpos`` (positions: joint angles are raw, unwrapped) and ``qvel``
  (velocities) from ``physics``, named by joint; for state observations also the task's
  observation components (e.g. cartpole's ``position`` = cart x, cos θ, sin θ and
  ``velocity``), which are exactly the observation vector.
* **Probes.** ``sklearn.linear_model.Ridge`` (standardized features) and a small
  ``MLPRegressor`` (standardized features and targets, fixed ``random_state``), each fit once
  for all targets; R² per quantity on the test set plus the averages over position,
  velocity and task dims.

Writes ``probe.json`` and ``probe_velocity.png`` (true vs predicted velocities over one held-out
episode) into ``<logdir>/probe/`` (or ``out``).
"""

import contextlib
import json
import pathlib
import warnings

import numpy as np

from bayes_planet import seeds

__all__ = [
    "encode_closed_loop",
    "encode_open_loop",
    "fit_probes",
    "load_episodes",
    "physics_names",
    "probe_run",
    "reward_errors",
]

GROUPS = ("position", "velocity", "task")
WEIGHTS = ("per_episode", "shared", "mean")
# The parts of a probe whose latents are encoded: the index of the ``probe_latent`` stream.
_PARTS = {"train": 0, "test": 1, "plot": 2}


# ---------------------------------------------------------------- probes (numpy / sklearn)
def _make_probes(mlp_hidden, alpha, seed):
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.linear_model import Ridge
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    mlp = MLPRegressor(hidden_layer_sizes=tuple(mlp_hidden), alpha=1e-4, learning_rate_init=1e-3,
                       max_iter=300, early_stopping=True, validation_fraction=0.1,
                       n_iter_no_change=20, random_state=seed)
    return {"ridge": make_pipeline(StandardScaler(), Ridge(alpha=alpha)),
            "mlp": TransformedTargetRegressor(make_pipeline(StandardScaler(), mlp),
                                              transformer=StandardScaler())}


def fit_probes(train_x, train_y, test_x, test_y, names, groups=None, mlp_hidden=(64,),
               alpha=1.0, seed=0):
    """Fits a ridge and an MLP probe ``features → targets``; R² on the test set.

    Args:
      train_x, test_x: ``[N, F]`` features.
      train_y, test_y: ``[N, Q]`` targets.
      names: ``Q`` quantity names.
      groups: optional ``{name: group}``; R² is also averaged per group.
      mlp_hidden: hidden layer sizes of the MLP probe.
      alpha: ridge regularization (on standardized features).
      seed: the MLP's ``random_state``.
    Returns:
      ``(report, probes)``: ``report[probe] = {"r2": {name: R²}, "mean": {group: mean R²},
      "all": mean R²}`` for ``probe`` in ``('ridge', 'mlp')``; ``probes`` the fitted estimators.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics import r2_score

    train_x, test_x = np.asarray(train_x, np.float64), np.asarray(test_x, np.float64)
    train_y, test_y = np.asarray(train_y, np.float64), np.asarray(test_y, np.float64)
    if train_y.ndim != 2 or test_y.ndim != 2 or train_y.shape[1] != len(names):
        raise ValueError(f"Expected targets [N, {len(names)}] for names {list(names)}. "
                         f"Received: train_y {train_y.shape}, test_y {test_y.shape}")
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError(f"Expected as many features as targets. Received: train "
                         f"{len(train_x)} vs {len(train_y)}, test {len(test_x)} vs {len(test_y)}")
    report, probes = {}, _make_probes(mlp_hidden, alpha, seed)
    for key, probe in probes.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            probe.fit(train_x, train_y)
        pred = probe.predict(test_x).reshape(test_y.shape)
        r2 = r2_score(test_y, pred, multioutput="raw_values")
        entry = {"r2": {n: float(v) for n, v in zip(names, r2, strict=True)},
                 "all": float(np.mean(r2)), "mean": {}}
        for group in sorted(set((groups or {}).values())):
            values = [r for n, r in zip(names, r2, strict=True) if groups.get(n) == group]
            entry["mean"][group] = float(np.mean(values))
        report[key] = entry
    return report, probes


# ---------------------------------------------------------------- encoding (TensorFlow)
def _features(state, latent):
    import tensorflow as tf

    if latent not in ("mean", "sample"):
        raise ValueError(f"Expected latent='mean' or 'sample'. Received: latent={latent!r}")
    stoch = state["mean"] if latent == "mean" else state["stoch"]
    return tf.concat([stoch, state["deter"]], -1)


def _seed(seed):
    import tensorflow as tf

    return tf.constant(np.asarray(seed, np.int64) % (2**31 - 1), tf.int32)


def _optional_seed(seed):
    return None if seed is None else _seed(seed)


def encode_closed_loop(model, episode, seed=(0, 0), latent="mean", weight_seed=None):
    """Posterior features ``[T+1, stoch + deter]`` of an episode filtered from its start.

    ``weight_seed`` (``[2]``) fixes the weight sample (default: drawn from ``seed``).
    """
    import tensorflow as tf

    obs = model.observation(tf.convert_to_tensor(episode["obs"][None]))
    action = tf.convert_to_tensor(episode["action"][None], tf.float32)
    embed, action = model.rssm.tile_members((model.encoder(obs), action))
    post, _ = model.rssm.observe(embed, action, _seed(seed),
                                 weight_seed=_optional_seed(weight_seed))
    return _member_average(model, _features(post, latent))[0].numpy()


def _member_average(model, features):
    """Features of an ensemble transition's tiled rows ``[E·B, ...]`` averaged over the
    members, ``[B, ...]`` (as they are without an ensemble)."""
    import tensorflow as tf

    return tf.reduce_mean(model.rssm.split_members(features), 0)


def encode_open_loop(model, episode, context, horizons, seed=(0, 0), latent="mean", stride=1,
                     weight_seed=None):
    """Prior features after ``context`` observed steps, at each horizon.

    Mirrors `WorldModel.open_loop`: the seed is split into the observation and imagination
    seeds and each window starts from the zero state. Windows start at every ``stride``-th
    step; a horizon keeps the windows whose target lies inside the episode (the prior is
    causal: zero actions padded after the episode end only affect discarded steps).
    ``weight_seed`` (``[2]``) fixes one weight sample for filtering and imagination
    (default: one sample each, drawn from ``seed``).

    Returns:
      ``(features, index)``: dicts ``{h: [W_h, F]}`` (None if no window fits) and
      ``{h: [W_h]}`` where ``index[h]`` is the episode step the horizon-``h`` feature
      predicts, ``start + context + h - 1``.
    """
    import tensorflow as tf

    horizons = sorted(int(h) for h in horizons)
    if context < 1 or not horizons or horizons[0] < 1:
        raise ValueError(f"Expected context >= 1 and horizons >= 1. Received: context={context}, "
                         f"horizons={horizons}")
    length, longest = len(episode["action"]), horizons[-1]
    starts = np.arange(0, max(length - context - horizons[0] + 1, 0), stride)
    if not len(starts):
        return {h: None for h in horizons}, {h: starts for h in horizons}
    steps = starts[:, None] + np.arange(context + longest)[None]
    actions = np.asarray(episode["action"], np.float32)
    actions = np.concatenate([actions, np.zeros((max(steps.max() + 1 - length, 0),) + actions.shape[1:],
                                                np.float32)])
    obs = model.observation(tf.convert_to_tensor(episode["obs"][steps[:, :context]]))
    action = tf.convert_to_tensor(actions[steps])
    seed_a, seed_b = tf.unstack(tf.random.experimental.stateless_split(_seed(seed), 2))
    weight_seed = _optional_seed(weight_seed)
    embed, action = model.rssm.tile_members((model.encoder(obs), action))
    post, _ = model.rssm.observe(embed, action[:, :context], seed_a, weight_seed=weight_seed)
    last = {k: v[:, -1] for k, v in post.items()}
    prior = model.rssm.imagine(action[:, context:], last, seed_b, weight_seed=weight_seed)
    feats = _member_average(model, _features(prior, latent)).numpy()
    features, index = {}, {}
    for h in horizons:
        keep = starts + context + h - 1 < length
        features[h] = feats[keep, h - 1] if keep.any() else None
        index[h] = starts[keep] + context + h - 1
    return features, index


# ---------------------------------------------------------------- targets
def physics_names(physics):
    """``(qpos_names, qvel_names)`` from the MuJoCo model's joints (``slider``, ``hinge_1``...)."""
    model = physics.model
    qpos = [f"qpos[{i}]" for i in range(model.nq)]
    qvel = [f"qvel[{i}]" for i in range(model.nv)]
    sizes = {0: (7, 6), 1: (4, 3), 2: (1, 1), 3: (1, 1)}  # free, ball, slide, hinge
    for j in range(model.njnt):
        name = model.id2name(j, "joint") or f"joint{j}"
        nq, nv = sizes[int(model.jnt_type[j])]
        for k in range(nq):
            qpos[model.jnt_qposadr[j] + k] = name if nq == 1 else f"{name}[{k}]"
        for k in range(nv):
            qvel[model.jnt_dofadr[j] + k] = name if nv == 1 else f"{name}[{k}]"
    return qpos, qvel


def _targets(episode, nq, nv, with_obs):
    physics = np.asarray(episode["physics"], np.float64)
    parts = [physics[:, :nq], physics[:, nq:nq + nv]]
    if with_obs:
        parts.append(np.asarray(episode["obs"], np.float64).reshape(len(physics), -1))
    return np.concatenate(parts, 1)


def _quantities(env, obs_type):
    """Target names and their groups: qpos → position, qvel → velocity, obs → task."""
    qpos, qvel = physics_names(env.physics)
    names = [f"qpos/{n}" for n in qpos] + [f"qvel/{n}" for n in qvel]
    groups = {n: "position" for n in names[:len(qpos)]}
    groups.update({n: "velocity" for n in names[len(qpos):]})
    if obs_type == "state":
        env.reset()
        components = env.true_state()["task_state"]
        task = [f"obs/{key}" if np.size(value) == 1 else f"obs/{key}[{k}]"
                for key, value in components.items() for k in range(np.size(value))]
        if len(task) == int(np.prod(env.observation_spec()["state"].shape)):
            groups.update({n: "task" for n in task})
            names += task
        else:  # Not the flat observation's layout: name the entries by index.
            dim = int(np.prod(env.observation_spec()["state"].shape))
            groups.update({f"obs[{k}]": "task" for k in range(dim)})
            names += [f"obs[{k}]" for k in range(dim)]
    return names, groups


# ---------------------------------------------------------------- episodes
def load_episodes(directory):
    """Episodes saved as ``*.npz`` in ``directory`` (sorted by name)."""
    paths = sorted(pathlib.Path(directory).glob("*.npz"))
    episodes = []
    for path in paths:
        with np.load(path, allow_pickle=False) as npz:
            episodes.append({key: npz[key] for key in npz.files})
    return episodes


def _save_episodes(episodes, directory):
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for i, episode in enumerate(episodes):
        np.savez_compressed(directory / f"{i:06d}-{len(episode['action'])}.npz", **episode)


def _collect(collector, count, part, evaluation):
    """``count`` episodes of the eval policy: the policy from the stream
    ``probe_<part>_policy(w, i)``, the environment from ``probe_<part>_env(w, i)``."""
    episodes = []
    for i in range(count):
        policy = collector.policy("eval", i, stream=f"probe_{part}_policy")
        episode, _ = collector.collect(policy, f"probe_{part}_env", i, evaluation=evaluation)
        episodes.append(episode)
    return episodes


def _latent_seed(seed, part, episode, loop):
    """The stream ``probe_latent(part, episode, loop)``: latent (and, per episode, weight)
    noise of encoding an episode; ``loop`` 0 is closed loop, 1 open loop."""
    return seeds.pair(seed, "probe_latent", _PARTS[part], episode, loop)


def _stack(model, episodes, nq, nv, with_obs, context, horizons, stride, latent, seed, part,
           weight_seed=None):
    """Closed- and open-loop features with their targets over the episodes of ``part``, and
    the rewards received at the steps the features predict (closed loop, then per horizon)."""
    closed_x, closed_y, closed_r = [], [], []
    open_x = {h: [] for h in horizons}
    open_y = {h: [] for h in horizons}
    open_r = {h: [] for h in horizons}
    for i, episode in enumerate(episodes):
        if "physics" not in episode:
            raise ValueError("Expected episodes with the true 'physics' state. Received keys "
                             f"{sorted(episode)}")
        targets = _targets(episode, nq, nv, with_obs)
        closed_x.append(encode_closed_loop(model, episode, _latent_seed(seed, part, i, 0),
                                           latent, weight_seed))
        closed_y.append(targets)
        rewards = np.asarray(episode["reward"], np.float32)
        closed_r.append(rewards)
        feats, index = encode_open_loop(model, episode, context, horizons,
                                        _latent_seed(seed, part, i, 1), latent, stride,
                                        weight_seed)
        for h in horizons:
            if feats[h] is not None:
                open_x[h].append(feats[h])
                open_y[h].append(targets[index[h]])
                open_r[h].append(rewards[index[h]])
    cat = lambda xs: np.concatenate(xs) if xs else None  # noqa: E731
    return ((cat(closed_x), cat(closed_y)),
            {h: (cat(open_x[h]), cat(open_y[h])) for h in horizons},
            (cat(closed_r), {h: cat(open_r[h]) for h in horizons}))


def reward_errors(model, features, rewards):
    """The reward head's error on latent ``features`` ``[N, F]`` against the ``rewards``
    ``[N]`` received there: ``{rmse, mae, bias, r2}`` (bias = mean(predicted − true);
    r2 = 1 − SSE / SST, negative when worse than predicting the mean)."""
    import tensorflow as tf

    predicted = model.reward_head(model.reward_net(tf.constant(features, tf.float32)))
    error = predicted.distribution.mean().numpy()[:, 0] - rewards
    total = float(np.sum(np.square(rewards - rewards.mean())))
    return {"rmse": float(np.sqrt(np.mean(error ** 2))), "mae": float(np.mean(np.abs(error))),
            "bias": float(np.mean(error)),
            "r2": float(1 - np.sum(error ** 2) / total) if total > 0 else float("nan")}


# ---------------------------------------------------------------- the command
def probe_run(logdir, episodes=5, out=None, train_episodes=None, train_source="replay",
              test_episodes=None, context=5, horizons=(1, 5, 10, 20), stride=1, latent="mean",
              weights="per_episode", mlp_hidden=(64,), alpha=1.0, seed=0, verbose=True,
              checkpoint=None):
    """Probes a trained run; writes ``probe.json`` and ``probe_velocity.png``; returns the report.

    Args:
      logdir: a ``bayes-planet train`` run directory (config.yaml, checkpoints/, episodes/).
      episodes: fresh held-out test episodes to collect (ignored if ``test_episodes`` has some).
      out: output folder, outside the run (default: its sibling ``<logdir>.probe``).
      train_episodes: probe training episodes: the most recent ones of the replay (default
        all, at most 100) or how many fresh ones to collect (default 20).
      train_source: ``'replay'`` (falls back to ``'fresh'`` if the replay has no physics)
        or ``'fresh'``.
      test_episodes: a folder of ``.npz`` test episodes shared between models; created and
        filled with the collected ones if it does not exist or is empty.
      context, horizons, stride: open-loop windows (see `encode_open_loop`).
      latent: ``'mean'`` or ``'sample'`` for ``z``.
      weights: ``'per_episode'``/``'shared'`` weight samples or the posterior ``'mean'``
        (see the module docstring).
      mlp_hidden, alpha: probe settings (see `fit_probes`).
      seed: the probe's own seed (not the run's): its episodes, latent noise, shared weight
        sample and MLP come from named streams of it (`bayes_planet.seeds`).
      checkpoint: the run's checkpoint to probe, with the replay up to it (`Agent`'s
        ``checkpoint``); None: the newest.
    """
    from bayes_planet.agent.agent import Agent
    from bayes_planet.agent.run import check_logdir
    from bayes_planet.layers import posterior_mean
    from bayes_planet.run_dirs import check_output_dir

    logdir = check_logdir(logdir)
    # Readers never write into the run: the default output is its sibling ``<logdir>.probe``.
    out = check_output_dir("out", out or logdir.with_name(logdir.name + ".probe"))
    if test_episodes is not None:
        test_episodes = check_output_dir("test_episodes", test_episodes)
    if train_source not in ("replay", "fresh"):
        raise ValueError(f"Expected train_source 'replay' or 'fresh'. Received: {train_source!r}")
    if weights not in WEIGHTS:
        raise ValueError(f"Expected weights in {WEIGHTS}. Received: weights={weights!r}")
    if int(episodes) < 1:
        raise ValueError(f"Expected a positive integer. Received: episodes={episodes}")
    horizons = sorted({int(h) for h in horizons})
    agent = Agent(logdir, read_only=True, checkpoint=checkpoint)  # Writes only to `out`.
    config, collector, model = agent.config, agent.collector, agent.model
    say = print if verbose else (lambda *a, **k: None)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot write the probe's output to {str(out)!r} ({e.strerror}); "
                         "pass --out DIR") from None
    physics = collector.env.physics
    nq, nv = int(physics.model.nq), int(physics.model.nv)
    names, groups = _quantities(collector.env, config.obs_type)
    with_obs = config.obs_type == "state"

    replay = [e for e in agent.replay.episodes() if "physics" in e]
    if train_source == "replay" and not replay:
        say("probe: the replay has no 'physics' (recorded before it was stored); "
            "collecting fresh training episodes")
        train_source = "fresh"
    if train_source == "replay":
        train = replay[-(train_episodes or 100):]
    else:
        train = _collect(collector, train_episodes or 20, "train", evaluation=False)
    test = load_episodes(test_episodes) if test_episodes else []
    test_from = str(test_episodes) if test else "fresh"
    if not test:
        test = _collect(collector, int(episodes), "test", evaluation=True)
        _save_episodes(test, out / "test_episodes")
        if test_episodes:
            _save_episodes(test, test_episodes)
    for episode in train + test:
        shape = np.shape(episode.get("physics", ()))[1:]
        if episode["obs"].shape[1:] != model.obs_shape or shape[:1] < (nq + nv,):
            raise ValueError(
                f"Expected episodes of {config.task} ({config.obs_type}: obs "
                f"{model.obs_shape}, physics [T+1, >= {nq + nv}]). Received: obs "
                f"{episode['obs'].shape[1:]}, physics {shape} (from {test_from})")
    say(f"probe: {len(train)} train episodes ({train_source}), {len(test)} test episodes "
        f"({test_from}); encoding")

    args = (nq, nv, with_obs, context, horizons, stride, latent)
    weight_seed = seeds.pair(seed, "probe_shared_weights") if weights == "shared" else None
    mode = posterior_mean(model) if weights == "mean" else contextlib.nullcontext()
    with mode:
        (cx, cy), open_train, _ = _stack(model, train, *args, seed=seed, part="train",
                                         weight_seed=weight_seed)
        (tx, ty), open_test, (closed_r, open_r) = _stack(
            model, test, *args, seed=seed, part="test", weight_seed=weight_seed)
        rewards = {"closed_loop": reward_errors(model, tx, closed_r), "open_loop": {
            str(h): reward_errors(model, open_test[h][0], open_r[h])
            for h in horizons if open_test[h][0] is not None}}
    fit = dict(names=names, groups=groups, mlp_hidden=mlp_hidden, alpha=alpha,
               seed=seeds.int_seed(seed, "probe_mlp"))
    closed, closed_probes = fit_probes(cx, cy, tx, ty, **fit)
    report = {
        "logdir": str(logdir), "task": config.task, "obs_type": config.obs_type,
        "estimator": config.model.estimator, "seed": config.seed,
        "updates": int(agent.updates.numpy()),
        "train_source": train_source, "train_episodes": len(train), "train_samples": len(cx),
        "test_source": test_from, "test_episodes": len(test), "test_samples": len(tx),
        "latent": latent, "weights": weights, "context": context, "horizons": horizons, "stride": stride,
        "quantities": groups, "closed_loop": closed, "open_loop": {},
        "reward": rewards,
    }
    open_probes = {}
    for h in horizons:
        (ax, ay), (bx, by) = open_train[h], open_test[h]
        if ax is None or bx is None:
            say(f"probe: horizon {h}: episodes shorter than context + horizon; skipped")
            continue
        report["open_loop"][str(h)], open_probes[h] = fit_probes(ax, ay, bx, by, **fit)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.json").write_text(json.dumps(report, indent=1))
    with posterior_mean(model) if weights == "mean" else contextlib.nullcontext():
        _plot_velocity(model, test[0], names, groups, closed_probes, open_probes,
                       (nq, nv, with_obs, context, latent, seed, weight_seed),
                       out / "probe_velocity.png")
    say(summary(report))
    return report


def summary(report):
    """A short text table of the group-averaged R²."""
    lines = [f"probe {report['logdir']} ({report['estimator']}, {report['updates']} updates): "
             f"R² on {report['test_episodes']} held-out episodes"]
    groups = [g for g in GROUPS if g in report["closed_loop"]["ridge"]["mean"]]
    lines.append(f"{'':<16}" + "".join(f"{p + ' ' + g:>18}" for p in ("ridge", "mlp")
                                       for g in groups))
    rows = [("closed loop", report["closed_loop"])]
    rows += [(f"open loop h={h}", r) for h, r in report["open_loop"].items()]
    for label, entry in rows:
        lines.append(f"{label:<16}" + "".join(f"{entry[p]['mean'][g]:>18.3f}"
                                              for p in ("ridge", "mlp") for g in groups))
    if "reward" in report:  # Reports written before the reward head's errors were added lack it.
        reward = report["reward"]
        lines.append("reward head on the same held-out steps: RMSE / R²")
        rows = [("closed loop", reward["closed_loop"])]
        rows += [(f"open loop h={h}", r) for h, r in reward["open_loop"].items()]
        lines += [f"{label:<16}{r['rmse']:>10.4f}{r['r2']:>10.3f}" for label, r in rows]
    return "\n".join(lines)


def _plot_velocity(model, episode, names, groups, closed_probes, open_probes, settings, path):
    """True vs probed velocities over one held-out episode (closed loop and one horizon)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nq, nv, with_obs, context, latent, seed, weight_seed = settings
    truth = _targets(episode, nq, nv, with_obs)
    feats = encode_closed_loop(model, episode, _latent_seed(seed, "plot", 0, 0), latent,
                               weight_seed)
    columns = [i for i, n in enumerate(names) if groups[n] == "velocity"]
    horizon = sorted(open_probes)[len(open_probes) // 2] if open_probes else None
    fig, axes = plt.subplots(len(columns), 1, figsize=(9, 2.4 * len(columns)), squeeze=False,
                             sharex=True)
    steps = np.arange(len(truth))
    for ax, col in zip(axes[:, 0], columns, strict=True):
        ax.plot(steps, truth[:, col], "k-", lw=2, label="true")
        for key, style in (("ridge", "C0--"), ("mlp", "C1-")):
            pred = closed_probes[key].predict(feats).reshape(len(truth), -1)[:, col]
            ax.plot(steps, pred, style, lw=1, label=f"{key} (closed loop)")
        if horizon is not None:
            open_feats, index = encode_open_loop(model, episode, context, [horizon],
                                                 _latent_seed(seed, "plot", 0, 1), latent,
                                                 weight_seed=weight_seed)
            if open_feats[horizon] is not None:
                pred = open_probes[horizon]["ridge"].predict(open_feats[horizon])
                ax.plot(index[horizon], pred.reshape(len(index[horizon]), -1)[:, col], "C2:",
                        lw=1.2, label=f"ridge (open loop, h={horizon})")
        ax.set_ylabel(names[col])
    axes[0, 0].legend(fontsize=7, ncol=4, loc="upper left")
    axes[-1, 0].set_xlabel("step of a held-out episode")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
