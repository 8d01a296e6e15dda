"""The RSSM world model: shapes, Bayesian = deterministic at zero variance, loss terms,
learning, and resuming a killed run."""

import signal

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet import yaml_config
from bayes_planet.agent import config as config_lib
from bayes_planet.agent.rssm import RSSM
from bayes_planet.agent.world_model import WorldModel, preprocess_image
from tests.agent.conftest import debug_config, run_cli


def _rssm(**model):
    """An RSSM built from the default ``model`` section with the keys ``model`` replaced."""
    return RSSM(dict(config_lib.load().model.to_dict(), **model))


@pytest.mark.parametrize("batch_shape", [(3,), (2, 4), (1, 2, 3)])
def test_observe_and_imagine_shapes_on_any_batch_dims(batch_shape):
    rssm = _rssm(deter=8, stoch=3, hidden=8, estimator="flipout")
    embed = tf.random.normal(batch_shape + (5, 6))
    action = tf.random.normal(batch_shape + (5, 2))
    post, prior = rssm.observe(embed, action, tf.constant([1, 2]))
    for states in (post, prior):
        assert states["stoch"].shape == batch_shape + (5, 3)
        assert states["deter"].shape == batch_shape + (5, 8)
    last = {k: v[..., -1, :] for k, v in post.items()}
    imagined = rssm.imagine(tf.random.normal(batch_shape + (7, 2)), last, tf.constant([3, 4]))
    assert imagined["mean"].shape == batch_shape + (7, 3)
    assert rssm.kl(post, prior).shape == batch_shape + (5,)
    assert len(rssm.losses) == 3  # transition_in, prior_hidden, prior_stats


def _copy_into_bayesian(det, bayes):
    """Deterministic RSSM weights → Bayesian RSSM means, with zero posterior variance."""
    for name in ("transition_in", "prior_hidden", "prior_stats"):
        src, dst = getattr(det, name), getattr(bayes, name)
        dst.kernel.mean.assign(src.kernel)
        dst.kernel.raw_stddev.assign(tf.fill(src.kernel.shape, -1e4))  # exp(-1e4) == 0
        dst.bias.assign(src.bias)
    for name in ("cell", "post_hidden", "post_stats"):
        for a, b in zip(getattr(det, name).weights, getattr(bayes, name).weights, strict=True):
            b.assign(a)


@pytest.mark.parametrize("estimator", ["reparameterization", "flipout"])
def test_zero_variance_bayesian_rssm_equals_deterministic(estimator):
    det = _rssm(deter=8, stoch=3, hidden=8, estimator="deterministic")
    bayes = _rssm(deter=8, stoch=3, hidden=8, estimator=estimator)
    embed, action = tf.random.normal([2, 6, 5]), tf.random.normal([2, 6, 2])
    det.build_for(2, 5)
    bayes.build_for(2, 5)
    _copy_into_bayesian(det, bayes)
    seed = tf.constant([7, 8])
    (p1, q1), (p2, q2) = det.observe(embed, action, seed), bayes.observe(embed, action, seed)
    for key in p1:
        np.testing.assert_array_equal(p1[key].numpy(), p2[key].numpy())
        np.testing.assert_array_equal(q1[key].numpy(), q2[key].numpy())
    last = {k: v[:, -1] for k, v in p1.items()}
    i1 = det.imagine(action, last, seed)
    i2 = bayes.imagine(action, last, seed)
    np.testing.assert_array_equal(i1["stoch"].numpy(), i2["stoch"].numpy())


def test_weight_sample_is_fixed_within_a_rollout_and_differs_across_seeds():
    rssm = _rssm(deter=8, stoch=3, hidden=8, estimator="reparameterization")
    rssm.build_for(2, 5)
    state = rssm.initial(1)
    action = tf.zeros([1, 4, 2])
    # Same state/action at every step and no latent noise dependence on the weights'
    # draw order: two rollouts with the same seed match, other seeds differ.
    a = rssm.imagine(action, state, tf.constant([1, 1]))["deter"].numpy()
    b = rssm.imagine(action, state, tf.constant([1, 1]))["deter"].numpy()
    c = rssm.imagine(action, state, tf.constant([2, 2]))["deter"].numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_imagine_takes_the_latent_draws():
    """``noise=``: the samples are ``mean + std * noise``; zeros give the prior's means (the
    seed then matters only for the weights); draws broadcast over a batch axis are shared by
    its rows (common random numbers); None draws per row from the seed."""
    rssm = _rssm(deter=8, stoch=3, hidden=8, estimator="deterministic")
    rssm.build_for(2, 5)
    rng = np.random.default_rng(0)
    state = {k: tf.constant(np.repeat(rng.normal(size=(1, 1, v.shape[-1])), 4, 1), tf.float32)
             for k, v in rssm.initial(1).items()}  # [2 states, 4 rows] (states alike)
    state = {k: tf.repeat(v, 2, 0) for k, v in state.items()}
    action = tf.constant(np.repeat(rng.uniform(-1, 1, (2, 1, 5, 2)), 4, 1), tf.float32)
    zero = rssm.imagine(action, state, tf.constant([1, 1]), noise=tf.zeros([1, 1, 1, 3]))
    np.testing.assert_array_equal(zero["stoch"].numpy(), zero["mean"].numpy())
    again = rssm.imagine(action, state, tf.constant([7, 7]), noise=tf.zeros([3]))
    np.testing.assert_array_equal(zero["stoch"].numpy(), again["stoch"].numpy())
    draws = tf.constant(rng.normal(size=(2, 1, 5, 3)), tf.float32)  # one per state, per step
    shared = rssm.imagine(action, state, tf.constant([1, 1]), noise=draws)
    stoch = shared["stoch"].numpy()
    np.testing.assert_allclose(stoch, (shared["mean"] + shared["std"] * draws).numpy(),
                               rtol=1e-6)
    np.testing.assert_array_equal(stoch[:, 1:], np.broadcast_to(stoch[:, :1], stoch[:, 1:].shape))
    assert not np.allclose(stoch, zero["stoch"].numpy())
    drawn = rssm.imagine(action, state, tf.constant([1, 1]))["stoch"].numpy()
    assert not np.allclose(drawn[:, 0], drawn[:, 1])  # own draws per row


def test_open_loop_on_the_priors_means():
    """``WorldModel.open_loop(latent='mean')``: the observed context is the same, the imagined
    part differs from the sampled one; another latent is a one-line error."""
    model = WorldModel(debug_config(), (5,), 1)
    batch, seed = _synthetic_batch((5,)), tf.constant([3, 4])
    truth, sampled = model.open_loop(batch, 3, seed)
    _, mean = model.open_loop(batch, 3, seed, latent="mean")
    np.testing.assert_array_equal(sampled[:, :3].numpy(), mean[:, :3].numpy())
    assert truth.shape == mean.shape and not np.allclose(sampled[:, 3:], mean[:, 3:])
    with pytest.raises(ValueError, match=r"^Expected latent 'sample' or 'mean'\. Received: "
                                         r"latent='shared'$"):
        model.open_loop(batch, 3, seed, latent="shared")


def test_explicit_weight_seed_picks_the_weight_sample_independently_of_the_step_seed():
    rssm = _rssm(deter=8, stoch=3, hidden=8, estimator="reparameterization")
    embed, action = tf.random.normal([2, 4, 5]), tf.random.normal([2, 4, 2])
    rssm.observe(embed, action, tf.constant([0, 0]))
    state = rssm.initial(2)
    # The first prior step from the zero state depends on the weights, not the latent noise.
    first = lambda seed, w=None: rssm.imagine(action, state, tf.constant(seed),  # noqa: E731
                                             weight_seed=w)["mean"][:, 0].numpy()
    w = tf.constant([5, 6])
    np.testing.assert_array_equal(first([1, 1], w), first([2, 2], w))  # Same model sample.
    assert not np.allclose(first([1, 1], w), first([1, 1], tf.constant([5, 7])))
    default_weight_seed = tf.random.experimental.stateless_split(tf.constant([1, 1]), 2)[0]
    np.testing.assert_array_equal(first([1, 1]), first([1, 1], default_weight_seed))
    # The latent noise still follows the step seed.
    a = rssm.imagine(action, state, tf.constant([1, 1]), weight_seed=w)["stoch"].numpy()
    b = rssm.imagine(action, state, tf.constant([2, 2]), weight_seed=w)["stoch"].numpy()
    assert not np.allclose(a, b)
    # observe() takes the same argument.
    p1, _ = rssm.observe(embed, action, tf.constant([1, 1]), weight_seed=w)
    p2, _ = rssm.observe(embed, action, tf.constant([2, 2]), weight_seed=w)
    p3, _ = rssm.observe(embed, action, tf.constant([1, 1]), weight_seed=[5, 7])
    np.testing.assert_array_equal(p1["deter"][:, 0], p2["deter"][:, 0])
    assert not np.allclose(p1["deter"][:, 0], p3["deter"][:, 0])


def _synthetic_batch(obs_shape, batch=4, length=8, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(batch, length) + obs_shape).astype(np.float32)
    action = rng.uniform(-1, 1, size=(batch, length, 1)).astype(np.float32)
    reward = obs[..., 0] * 0.5 + action[..., 0]
    return {"obs": tf.constant(obs), "action": tf.constant(action), "reward": tf.constant(reward)}


def test_obs_stddev_is_the_observation_likelihoods_scale():
    """``model.obs_stddev`` = σ: the reconstruction term is the Gaussian NLL under σ, i.e.
    from the unit-σ NLL ``n1`` of the same model and batch: ``D/2 log 2π + D log σ +
    (n1 - D/2 log 2π) / σ²``; it is range-checked and older configs get PlaNet's 1."""
    batch, seed, d = _synthetic_batch((5,)), tf.constant([0, 1]), 5
    nll = {}
    for sigma in (1.0, 0.1):
        tf.keras.utils.set_random_seed(0)
        model = WorldModel(debug_config(f"model.obs_stddev={sigma}"), (5,), 1)
        nll[sigma] = float(model.loss(batch, seed, 100)[1]["obs_nll"])
    half_log = d / 2 * np.log(2 * np.pi)
    np.testing.assert_allclose(nll[0.1], half_log + d * np.log(0.1) + (nll[1.0] - half_log) / 0.01,
                               rtol=1e-4)
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected a positive number\. Received: model.obs_stddev=0.0$"):
        config_lib.validate(debug_config("model.obs_stddev=0"))
    data = debug_config().to_dict()
    del data["model"]["obs_stddev"]
    assert config_lib.upgrade(data)["model"]["obs_stddev"] == 1.0
    assert config_lib.load(["planet"]).model.obs_stddev == 1.0


def test_free_nats_clip_the_state_kl():
    model = WorldModel(debug_config("loss.free_nats=1000.0"), (5,), 1)
    batch = _synthetic_batch((5,))
    seed = tf.constant([0, 1])
    loss, m = model.loss(batch, seed, 100)
    assert float(m["state_kl"]) < 1000.0
    expected = m["obs_nll"] + 10.0 * m["reward_nll"] + 1000.0 + m["weight_kl"] / 100.0
    np.testing.assert_allclose(float(loss), float(expected), rtol=1e-5)
    # Below the free nats the KL has no gradient: the posterior network only learns
    # from reconstruction, so a KL-only loss has zero gradient everywhere.
    with tf.GradientTape() as tape:
        _, m = model.loss(batch, seed, 100)
        clipped = tf.maximum(m["state_kl"], 1000.0)
    grads = tape.gradient(clipped, model.rssm.post_stats.trainable_variables)
    assert all(g is None or float(tf.reduce_max(tf.abs(g))) == 0.0 for g in grads)
    # Without free nats the KL enters the loss as is.
    model0 = WorldModel(debug_config("loss.free_nats=0.0"), (5,), 1)
    loss0, m0 = model0.loss(batch, seed, 100)
    expected0 = m0["obs_nll"] + 10.0 * m0["reward_nll"] + m0["state_kl"] + m0["weight_kl"] / 100
    np.testing.assert_allclose(float(loss0), float(expected0), rtol=1e-5)


def test_a_few_training_steps_lower_the_loss():
    """Learnable synthetic sequences (sines); 60 Adam steps at lr 3e-3."""
    model = WorldModel(debug_config("train.learning_rate=0.003"), (5,), 1)
    t = np.arange(8)[None, :, None] + np.arange(4)[:, None, None]
    obs = np.sin(0.5 * t * np.arange(1, 6)).astype(np.float32)
    batch = {"obs": tf.constant(obs), "action": tf.zeros([4, 8, 1]),
             "reward": tf.constant(obs[..., 0])}
    losses = [float(model.train_step(batch, tf.constant([0, i]), 1000)["loss"])
              for i in range(60)]
    # Floor: free nats 3 + unit-variance NLLs (0.92 per dim): measured 23.1 -> 20.6.
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 1.5, losses


def test_preprocess_image_reduces_bits_and_dequantizes():
    image = tf.constant(np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1))
    clean = preprocess_image(image, 5).numpy()
    assert len(np.unique(clean)) == 32 and clean.min() == -0.5 and clean.max() < 0.5
    noisy = preprocess_image(image, 5, tf.constant([1, 2])).numpy()
    assert np.all(noisy >= clean) and np.all(noisy < clean + 1 / 32)


def test_reward_prediction_beats_the_mean_on_held_out_random_episodes():
    """Short training on random-policy cartpole episodes (state obs) predicts rewards
    better than the training mean on held-out episodes (measured MSE ratio 0.55; < 0.7)."""
    from bayes_planet import envs

    env = envs.make("cartpole-swingup", obs_type="state", seed=3, episode_length=400)
    rng = np.random.default_rng(0)

    def episode():
        obs, actions, rewards = [env.reset()["state"]], [np.zeros(1, np.float32)], [0.0]
        done = False
        while not done:
            a = rng.uniform(-1, 1, 1).astype(np.float32)
            o, r, done, _ = env.step(a)
            obs.append(o["state"])
            actions.append(a)
            rewards.append(r)
        return (np.stack(obs), np.stack(actions), np.asarray(rewards, np.float32))

    train, test = [episode() for _ in range(16)], [episode() for _ in range(4)]
    env.close()
    config = debug_config("model.deter=32", "model.stoch=8", "model.hidden=32",
                          "model.mlp_units=64", "loss.free_nats=1.0")
    model = WorldModel(config, (train[0][0].shape[-1],), 1)
    stack = lambda eps: {  # noqa: E731
        "obs": tf.constant(np.stack([e[0] for e in eps])),
        "action": tf.constant(np.stack([e[1] for e in eps])),
        "reward": tf.constant(np.stack([e[2] for e in eps]))}
    data = stack(train)
    for i in range(250):
        rows = rng.choice(len(train), 8, replace=False)
        start = rng.integers(0, 51 - 20)
        batch = {k: tf.gather(v, rows)[:, start:start + 20] for k, v in data.items()}
        model.train_step(batch, tf.constant([0, i]), 800)
    held = stack(test)
    post, _ = model.rssm.observe(model.encoder(model.observation(held["obs"])), held["action"],
                                 tf.constant([5, 5]))
    pred = model.predict_reward(post).numpy()[:, 1:]
    truth = held["reward"].numpy()[:, 1:]
    mse_model = np.mean((pred - truth) ** 2)
    mse_mean = np.mean((data["reward"].numpy()[:, 1:].mean() - truth) ** 2)
    assert mse_model < 0.7 * mse_mean, (mse_model, mse_mean)


def _run(logdir, episodes, fault=None):
    """A debug run of ``episodes`` episodes (with its eval videos) in a fresh process."""
    return run_cli("train", "--preset", "debug", "--logdir", str(logdir), "--quiet",
                   "--set", f"train.episodes={episodes}", fault=fault)


@pytest.mark.slow  # ~1 min; tests/agent/test_run.py SIGKILLs a run in the default suite
def test_killed_run_resumes_with_step_weights_and_replay(tmp_path):
    """SIGKILL a debug run during its second planning episode, rerun the same command."""
    from bayes_planet.agent.agent import Agent

    logdir = tmp_path / "run"
    killed = _run(logdir, episodes=5, fault="plan:20")  # 15 steps per episode: in episode 4.
    assert killed.returncode == -signal.SIGKILL
    episodes = logdir / "episodes"
    saved = {p.name: p.read_bytes() for p in episodes.glob("*.npz")}
    assert len(saved) == 3
    latest = sorted((logdir / "checkpoints").glob("ckpt-*"))[-1]
    assert latest.name == "ckpt-000003"  # ckpt-4 is written only with episode 4.
    prefix = str(latest / "ckpt")

    agent = Agent(logdir, read_only=True)
    assert agent.restored == 3 and agent.replay.num_episodes == len(saved)
    assert int(agent.updates.numpy()) == tf.train.load_variable(
        prefix, "updates/.ATTRIBUTES/VARIABLE_VALUE") == 3
    variable = agent.model.rssm.post_stats.kernel
    key = next(k for k, _ in tf.train.list_variables(prefix)
               if "post_stats" in k and "kernel" in k and "optimizer" not in k)
    np.testing.assert_array_equal(variable.numpy(), tf.train.load_variable(prefix, key))

    result = _run(logdir, episodes=5)
    assert result.returncode == 0, result.stderr[-2000:]
    files = sorted(p.name for p in episodes.glob("*.npz"))
    assert len(files) == 5
    for name, content in saved.items():  # collected data survived untouched
        assert (episodes / name).read_bytes() == content
    latest = sorted((logdir / "checkpoints").glob("ckpt-*"))[-1]
    assert tf.train.load_variable(str(latest / "ckpt"),
                                  "updates/.ATTRIBUTES/VARIABLE_VALUE") == (5 - 2) * 3


def test_a_logdir_from_a_different_config_is_refused(tmp_path):
    logdir = tmp_path / "run"
    yaml_config.write(config_lib.load(["debug"]), logdir / "config.yaml")
    result = run_cli("train", "--preset", "debug", "--logdir", str(logdir),
                     "--set", "train.batch_size=2", timeout=300)
    assert result.returncode == 2
    assert "different config" in result.stderr and "batch_size" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("estimator", ["reparameterization", "flipout"])
def test_rssm_with_a_bayesian_gru_cell(estimator):
    """The optional Bayesian GRU: KL terms for its kernels, one weight sample per rollout."""
    rssm = _rssm(deter=8, stoch=3, hidden=8, estimator=estimator, bayesian_gru=True)
    embed, action = tf.random.normal([2, 5, 6]), tf.random.normal([2, 5, 2])
    post, _ = rssm.observe(embed, action, tf.constant([1, 2]))
    assert post["deter"].shape == (2, 5, 8)
    assert len(rssm.losses) == 5  # three dense layers + the cell's kernel and recurrent kernel
    again, _ = rssm.observe(embed, action, tf.constant([1, 2]))
    np.testing.assert_array_equal(post["deter"].numpy(), again["deter"].numpy())


def test_rssm_reads_its_config_section():
    """The RSSM is built from the ``model`` section (a `Config` or a plain mapping), as the
    world model builds it."""
    model = config_lib.load(["debug"], ["model.estimator=flipout"]).model
    for section in (model, model.to_dict()):
        rssm = RSSM(section)
        assert (rssm.deter_size, rssm.stoch_size, rssm.min_stddev, rssm.estimator) == (
            model.deter, model.stoch, model.min_stddev, "flipout")
        assert rssm.transition_in.units == model.hidden
    world = WorldModel(debug_config(), (5,), 1)
    assert (world.rssm.deter_size, world.rssm.stoch_size) == (model.deter, model.stoch)


def test_layer_noise_seeds_differ_for_anagram_names():
    """Each Bayesian layer's noise seed comes from the stream ``layer_noise(index of its
    name)``: names made of the same letters (whose character codes once summed to the same
    index) get different seeds, the same name the same seed."""
    from bayes_planet.agent.rssm import dense_factory
    from bayes_planet.layers import NormalKLDivergence

    make = dense_factory("reparameterization", lambda: NormalKLDivergence(stddev=1.0), seed=3)
    names = ["dense_ab", "dense_ba", "abc", "cab", "bca"]
    layer_seeds = [make(4, name=n).seed for n in names]
    assert len(set(layer_seeds)) == len(names), dict(zip(names, layer_seeds, strict=True))
    assert layer_seeds == [make(4, name=n).seed for n in names]  # Stable.
    rssm_layers = {make(4, name=n).seed for n in ("transition_in", "prior_hidden",
                                                   "prior_stats")}
    assert not rssm_layers & set(layer_seeds)


def test_bayesian_gru_with_local_reparameterization_is_an_error():
    with pytest.raises(ValueError, match="local_reparameterization"):
        _rssm(deter=8, stoch=3, hidden=8, estimator="local_reparameterization", bayesian_gru=True)


@pytest.mark.parametrize("bayesian_gru", [False, True])
def test_weight_prior_reaches_every_bayesian_transition_layer(bayesian_gru):
    """`model.weight_prior`: every Bayesian kernel (and the GRU cell's) gets the chosen prior
    with the configured scale, and the KL terms are those priors' closed forms."""
    from bayes_planet.layers import NormalKLDivergence, ScaleMixtureKLDivergence

    for kind, cls in [("normal", NormalKLDivergence), ("scale_mixture", ScaleMixtureKLDivergence)]:
        rssm = _rssm(deter=8, stoch=3, hidden=8, estimator="flipout", bayesian_gru=bayesian_gru,
                    weight_prior=kind, weight_prior_stddev=0.5)
        rssm.observe(tf.random.normal([2, 4, 6]), tf.random.normal([2, 4, 2]), tf.constant([1, 2]))
        layers = [rssm.transition_in, rssm.prior_hidden, rssm.prior_stats]
        regs = [layer.kernel_regularizer for layer in layers]
        if bayesian_gru:
            regs += [rssm.cell.kernel_regularizer, rssm.cell.recurrent_regularizer]
        assert all(type(r) is cls for r in regs), (kind, regs)
        stddevs = [r.stddev if kind == "normal" else r.slab_stddev for r in regs]
        assert stddevs == [0.5] * len(regs)
        assert len(rssm.losses) == len(regs)
        assert all(np.isfinite(float(loss)) and float(loss) > 0 for loss in rssm.losses)


def test_unknown_weight_prior_is_a_one_line_error():
    with pytest.raises(ValueError, match="weight_prior='laplace'"):
        _rssm(deter=8, stoch=3, hidden=8, weight_prior="laplace")
    with pytest.raises(ValueError, match="model.weight_prior"):
        config_lib.validate(config_lib.load(overrides=["model.weight_prior=laplace"]))


# -- model.normalize_obs ------------------------------------------------------------------------
def test_normalized_observations_use_the_seed_statistics_once():
    import numpy as np
    import tensorflow as tf

    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.world_model import WorldModel

    config = config_lib.load(["debug"], ["model.normalize_obs=true"])
    model = WorldModel(config, (3,), 1)
    rng = np.random.default_rng(0)
    seed_obs = rng.normal([1.0, -2.0, 5.0], [0.5, 3.0, 0.0], size=(400, 3))  # dim 2 constant
    assert model.needs_observation_stats()
    assert model.set_observation_stats(seed_obs)
    assert not model.needs_observation_stats()
    x = rng.normal(size=(2, 4, 3)).astype(np.float32)
    expected = (x - seed_obs.mean(0)) / np.maximum(seed_obs.std(0), 0.01)
    np.testing.assert_allclose(model.observation(tf.constant(x)).numpy(), expected, rtol=1e-5)
    assert not model.set_observation_stats(seed_obs * 10)  # Fixed once set.
    np.testing.assert_allclose(model.observation(tf.constant(x)).numpy(), expected, rtol=1e-5)
    plain = WorldModel(config_lib.load(["debug"], ["model.normalize_obs=false"]), (3,), 1)
    assert plain.obs_stats is None and not plain.needs_observation_stats()
    np.testing.assert_array_equal(plain.observation(tf.constant(x)).numpy(), x)


def test_a_run_fixes_the_statistics_from_its_seed_episodes(tmp_path):
    import numpy as np

    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.training import Trainer

    config = config_lib.load(["debug"], ["model.normalize_obs=true", "eval.video=false"])
    trainer = Trainer(config, tmp_path / "run")
    trainer.loop(progress=False)
    agent = trainer.agent
    seed_obs = np.concatenate([e["obs"] for e in agent.replay.episodes()[:2]])
    np.testing.assert_allclose(agent.model.obs_stats["mean"].numpy(), seed_obs.mean(0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(agent.model.obs_stats["std"].numpy(),
                               np.maximum(seed_obs.std(0), 0.01), rtol=1e-5)
    again = Trainer(config, tmp_path / "run")  # Restored from the checkpoint, not recomputed.
    assert not again.agent.model.needs_observation_stats()
    np.testing.assert_array_equal(again.agent.model.obs_stats["mean"].numpy(),
                                  agent.model.obs_stats["mean"].numpy())
    again.agent.close()


def _pixel_models(**sets):
    """Two debug pixel world models, float32 and ``mixed_bfloat16`` networks, same weights."""
    overrides = ["obs_type=pixels", "env.image_size=64", *(f"{k}={v}" for k, v in sets.items())]
    full = WorldModel(debug_config(*overrides), (64, 64, 3), 1)
    mixed = WorldModel(debug_config(*overrides, "model.cnn_precision=mixed_bfloat16"),
                       (64, 64, 3), 1)
    for a, b in zip(full.variables, mixed.variables, strict=True):
        b.assign(a)
    return full, mixed


def test_bfloat16_pixel_networks_keep_float32_weights_and_outputs():
    """`model.cnn_precision=mixed_bfloat16`: the same variables (float32), bfloat16 compute
    inside the encoder and decoder, float32 out, within bfloat16's precision of float32."""
    full, mixed = _pixel_models()
    assert [v.dtype for v in mixed.variables] == [v.dtype for v in full.variables]
    assert {v.dtype for v in mixed.encoder.variables} == {tf.float32}
    assert {conv.compute_dtype for conv in mixed.encoder.convs} == {"bfloat16"}
    assert {d.compute_dtype for d in mixed.decoder.deconvs} == {"bfloat16"}
    image = tf.random.uniform([2, 3, 64, 64, 3], -0.5, 0.5, seed=1)
    for net, x in ((lambda m: m.encoder, image), (lambda m: m.decoder, tf.random.normal([2, 3, 20]))):
        a, b = net(full)(x), net(mixed)(x)
        assert b.dtype == tf.float32 and a.shape == b.shape
        # bfloat16 keeps 8 bits of mantissa: relative error ≈ 2^-8 per op, a few ops deep.
        scale = float(tf.reduce_max(tf.abs(a))) + 1e-6
        assert float(tf.reduce_max(tf.abs(a - b))) < 0.05 * scale


def test_bfloat16_pixel_networks_train_and_their_loss_stays_close():
    full, mixed = _pixel_models()
    rng = np.random.default_rng(0)
    batch = {"obs": tf.constant(rng.integers(0, 256, (4, 8, 64, 64, 3), dtype=np.uint8)),
             "action": tf.constant(rng.uniform(-1, 1, (4, 8, 1)).astype(np.float32)),
             "reward": tf.constant(rng.uniform(0, 1, (4, 8)).astype(np.float32))}
    seed = tf.constant([3, 4])
    a, b = float(full.loss(batch, seed, 100)[0]), float(mixed.loss(batch, seed, 100)[0])
    assert abs(a - b) < 0.02 * abs(a), (a, b)
    step = mixed.train_step(batch, seed, 100)
    assert float(step["finite"]) == 1.0 and np.isfinite(float(step["loss"]))


def test_cnn_precision_is_checked_and_older_configs_upgrade_to_float32():
    with pytest.raises(yaml_config.ConfigError,
                       match=r"Expected one of \['float32', 'mixed_bfloat16'\]\. "
                             r"Received: model\.cnn_precision='float16'"):
        config_lib.validate(debug_config("model.cnn_precision=float16"))
    old = debug_config().to_dict()
    del old["model"]["cnn_precision"]
    assert config_lib.upgrade(old)["model"]["cnn_precision"] == "float32"
