"""The world model's optional loss terms: KL balancing (``loss.kl_balance``) splits the state
KL's gradient between prior and posterior without changing its value, latent and reward
overshooting (``loss.overshooting``) scores the prior's open-loop rollouts against the
posterior and the real rewards, and ``loss.obs_grad_scale`` scales the observation term's
gradient into the latent without changing its value or the decoder's gradient."""

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.agent import config as config_lib
from bayes_planet.agent.world_model import WorldModel
from tests.agent.conftest import debug_config

_OVERRIDES = ("loss.free_nats=0.0", "model.estimator=deterministic")


def _model(*overrides):
    return WorldModel(debug_config(*_OVERRIDES, *overrides), (5,), 2)


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": tf.constant(rng.normal(size=(3, 8, 5)), tf.float32),
            "action": tf.constant(rng.uniform(-1, 1, size=(3, 8, 2)), tf.float32),
            "reward": tf.constant(rng.normal(size=(3, 8)), tf.float32)}


def _twin(model, *overrides):
    """A model of another loss config with ``model``'s weights."""
    other = _model(*overrides)
    for a, b in zip(model.trainable_variables, other.trainable_variables, strict=True):
        b.assign(a)
    return other


def _kl_gradients(model, batch, seed):
    """Gradients of the loss's KL part w.r.t. the prior's head and every variable."""
    with tf.GradientTape(persistent=True) as tape:
        loss, m = model.loss(batch, seed, 100)
        kl_part = loss - m["obs_nll"] - 10.0 * m["reward_nll"] - m["weight_kl"] / 100.0
    prior_head = tape.gradient(kl_part, model.rssm.prior_stats.trainable_variables)
    every = tape.gradient(kl_part, model.trainable_variables)
    return [g.numpy() for g in prior_head], [0.0 if g is None else g.numpy() for g in every]


def test_kl_balance_splits_the_gradient_not_the_value():
    batch, seed = _batch(), tf.constant([0, 3])
    plain = _model()
    models = {a: _twin(plain, f"loss.kl_balance={a}") for a in (0.0, 0.8, 1.0)}
    plain_loss, plain_m = plain.loss(batch, seed, 100)
    for model in models.values():
        loss, m = model.loss(batch, seed, 100)
        np.testing.assert_allclose(float(loss), float(plain_loss), rtol=1e-6)
        np.testing.assert_allclose(float(m["state_kl"]), float(plain_m["state_kl"]), rtol=1e-6)
    head0, every0 = _kl_gradients(plain, batch, seed)
    grads = {a: _kl_gradients(model, batch, seed) for a, model in models.items()}
    # The prior's head reaches the KL only through p: its gradient is a times the plain one.
    for a, (head, _) in grads.items():
        for g, g0 in zip(head, head0, strict=True):
            np.testing.assert_allclose(g, a * g0, rtol=1e-4, atol=1e-7)
    # KL(sg(q) || p) + KL(q || sg(p)) has the plain KL's gradient, everywhere (the posterior
    # also reaches p through its samples); a weighs the two linearly.
    for g1, g0, g, ref in zip(grads[1.0][1], grads[0.0][1], grads[0.8][1], every0, strict=True):
        np.testing.assert_allclose(np.add(g1, g0), ref, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(g, np.add(0.8 * np.asarray(g1), 0.2 * np.asarray(g0)),
                                   rtol=1e-4, atol=1e-7)


def test_overshooting_one_step_is_the_one_step_prior():
    """With a deterministic transition the prior's statistics do not depend on latent noise:
    one step of overshooting from the posterior at t is the filter's prior at t + 1, so its KL
    is the one-step KL averaged over t >= 1 and its reward term the one-step prior's."""
    batch, seed = _batch(1), tf.constant([2, 5])
    model = _model("loss.overshooting=1")
    _, m = model.loss(batch, seed, 100)
    embed = model.encoder(model.observation(batch["obs"]))
    post, prior = model.rssm.observe(embed, batch["action"], tf.unstack(
        tf.random.experimental.stateless_split(seed, 2))[1])
    kl = model.rssm.kl(post, prior)[:, 1:]
    np.testing.assert_allclose(float(m["overshooting_kl"]), float(tf.reduce_mean(kl)),
                               rtol=1e-5)
    assert float(m["overshooting_reward_nll"]) > 0.0


def test_overshooting_adds_its_terms_to_the_loss():
    batch, seed = _batch(2), tf.constant([1, 1])
    plain = _model()
    over = _twin(plain, "loss.overshooting=3")
    loss0, m0 = plain.loss(batch, seed, 100)
    loss, m = over.loss(batch, seed, 100)
    for key in ("obs_nll", "reward_nll", "state_kl"):
        np.testing.assert_allclose(float(m[key]), float(m0[key]), rtol=1e-6)
    expected = float(loss0) + float(m["overshooting_kl"]) + 10.0 * float(
        m["overshooting_reward_nll"])
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    # Its gradient reaches the transition's prior head (the targets are stopped; the starts,
    # posterior states, are not: PlaNet's overshooting).
    with tf.GradientTape() as tape:
        _, m = over.loss(batch, seed, 100)
        part = m["overshooting_kl"]
    grads = tape.gradient(part, over.rssm.prior_stats.trainable_variables)
    assert all(float(tf.reduce_max(tf.abs(g))) > 0 for g in grads)


@pytest.mark.parametrize("estimator", ["reparameterization", "rank1"])
def test_overshooting_trains_every_transition(estimator):
    model = _model(f"model.estimator={estimator}", "loss.overshooting=2",
                   "loss.kl_balance=0.8")
    metrics = model.train_step(_batch(3), tf.constant([0, 7]), 100)
    assert float(metrics["finite"]) == 1.0
    assert np.isfinite(float(metrics["overshooting_kl"]))


def _obs_gradients(model, batch, seed):
    """Gradients of the observation term: the decoder's, and the encoder's and RSSM's."""
    with tf.GradientTape(persistent=True) as tape:
        loss, m = model.loss(batch, seed, 100)
        obs_nll = m["obs_nll"]
    grads = [tape.gradient(obs_nll, net.trainable_variables)
             for net in (model.decoder, model.encoder, model.rssm)]
    return loss, m, [[np.zeros(v.shape) if g is None else g.numpy() for g, v in zip(
        gs, net.trainable_variables, strict=True)] for gs, net in zip(
            grads, (model.decoder, model.encoder, model.rssm), strict=True)]


def test_obs_grad_scale_scales_the_latents_gradient_not_the_value():
    batch, seed = _batch(4), tf.constant([3, 1])
    plain = _model()
    loss0, m0, (dec0, enc0, rssm0) = _obs_gradients(plain, batch, seed)
    assert max(float(np.abs(g).max()) for g in enc0 + rssm0) > 0  # The plain loss reaches both.
    for scale in (0.0, 0.25):
        loss, m, (dec, enc, rssm) = _obs_gradients(
            _twin(plain, f"loss.obs_grad_scale={scale}"), batch, seed)
        np.testing.assert_allclose(float(loss), float(loss0), rtol=1e-6)
        for key in ("obs_nll", "reward_nll", "state_kl"):
            np.testing.assert_allclose(float(m[key]), float(m0[key]), rtol=1e-6)
        for g, g0 in zip(dec, dec0, strict=True):  # The decoder learns at full weight.
            np.testing.assert_allclose(g, g0, rtol=1e-5, atol=1e-7)
        for g, g0 in zip(enc + rssm, enc0 + rssm0, strict=True):
            np.testing.assert_allclose(g, scale * g0, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("key, value, expected", [
    ("loss.kl_balance", "1.5", "Expected null or a number in [0, 1]. Received: loss.kl_balance=1.5"),
    ("loss.kl_balance", "-0.1", "Received: loss.kl_balance=-0.1"),
    ("loss.overshooting", "-1", "Expected a non-negative integer. Received: loss.overshooting=-1"),
    ("loss.overshooting", "8", "Expected less than train.chunk_length=8"),
    ("loss.obs_grad_scale", "1.5", "Expected a number in [0.0, 1.0]. Received: loss.obs_grad_scale=1.5"),
    ("loss.obs_grad_scale", "-0.5", "Received: loss.obs_grad_scale=-0.5"),
])
def test_loss_keys_are_range_checked(key, value, expected):
    with pytest.raises(config_lib.ConfigError) as info:
        config_lib.validate(config_lib.load(["debug"], [f"{key}={value}"]))
    assert expected in str(info.value)


def test_runs_recorded_without_the_keys_keep_the_plain_loss():
    data = config_lib.load().to_dict()
    del data["loss"]["kl_balance"], data["loss"]["overshooting"], data["loss"]["obs_grad_scale"]
    loss = config_lib.upgrade(data)["loss"]
    assert loss["kl_balance"] is None and loss["overshooting"] == 0
    assert loss["obs_grad_scale"] == 1.0


def _value_batch(reward, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": tf.constant(rng.normal(size=(3, 8, 5)), tf.float32),
            "action": tf.constant(rng.uniform(-1, 1, size=(3, 8, 2)), tf.float32),
            "reward": tf.constant(reward, tf.float32)}


def test_value_scale_adds_the_td_lambda_error_of_a_value_head_on_the_latent():
    """``loss.value_scale = c``: the loss is the plain terms plus c times ``latent_value_loss``,
    which is the squared error of ``u(s_t)`` against the λ-return of the real rewards in their
    units, bootstrapped with ``u`` (the recursion recomputed here in NumPy)."""
    c, gamma, lam = 0.5, 0.9, 0.8
    model = _model(f"loss.value_scale={c}", f"value.discount={gamma}", f"value.td_lambda={lam}")
    reward = np.random.default_rng(1).uniform(0, 1, size=(3, 8))
    batch, seed = _value_batch(reward), tf.constant([2, 5])
    loss, m = model.loss(batch, seed, 100)
    np.testing.assert_allclose(float(loss), float(
        m["obs_nll"] + 10.0 * m["reward_nll"] + m["state_kl"] + m["weight_kl"] / 100.0
        + c * m["latent_value_loss"]), rtol=1e-5)
    # The step's posterior (before its update), then the head at the same weights.
    before = [v.numpy() for v in model.trainable_variables]
    metrics, post = model.train_step(batch, seed, 100, return_posterior=True)
    for v, value in zip(model.trainable_variables, before, strict=True):
        v.assign(value)
    u = model.latent_value(model.rssm.features(post)).numpy()  # [B, T]
    targets = np.zeros((3, 7))
    acc = u[:, 7]
    for t in reversed(range(7)):  # R_t = (1-γ) r_{t+1} + γ ((1-λ) u_{t+1} + λ R_{t+1})
        acc = (1 - gamma) * reward[:, t + 1] + gamma * ((1 - lam) * u[:, t + 1] + lam * acc)
        targets[:, t] = acc
    np.testing.assert_allclose(float(metrics["latent_value_loss"]),
                               np.mean((u[:, :7] - targets) ** 2), rtol=1e-4)
    np.testing.assert_allclose(float(metrics["latent_value_loss"]),
                               float(m["latent_value_loss"]), rtol=1e-5)


def test_value_scale_shapes_the_latent_and_zero_adds_no_head():
    """With only the value term (no observation gradient, reward or KL weight) the encoder
    learns from it; without it nothing reaches the encoder, and the model has no value head."""
    quiet = ("loss.obs_grad_scale=0.0", "loss.reward_scale=0.0", "loss.kl_scale=0.0")
    batch, seed = _value_batch(np.ones((3, 8))), tf.constant([0, 1])
    for scale in (0.0, 1.0):
        model = _model(*quiet, f"loss.value_scale={scale}")
        assert (model.value_net is None) == (scale == 0.0)
        with tf.GradientTape() as tape:
            loss, m = model.loss(batch, seed, 100)
        grads = tape.gradient(loss, model.encoder.trainable_variables)
        largest = max(0.0 if g is None else float(np.abs(g.numpy()).max()) for g in grads)
        assert (largest > 0) == (scale > 0), (scale, largest)
        assert ("latent_value_loss" in m) == (scale > 0)


def test_the_latent_value_head_learns_the_value_of_a_constant_reward():
    """A constant reward r: the fixed point of the TD(λ) targets in the rewards' units is r
    (``(1 − γ) Σ γ^k r``), whatever γ. After 400 updates the head's mean over the batch's
    24 states lies within 0.07 of it (measured over three data seeds at 400–800 updates:
    0.67–0.73 around 0.7, the world model's latent still moving under it)."""
    model = _model("loss.value_scale=1.0", "value.discount=0.5")
    batch = _value_batch(np.full((3, 8), 0.7))
    for u in range(400):
        model.train_step(batch, tf.constant([4, u]), 100)
    _, post = model.train_step(batch, tf.constant([4, 400]), 100, return_posterior=True)
    value = model.latent_value(model.rssm.features(post)).numpy()
    assert abs(float(value.mean()) - 0.7) < 0.07, value.mean()


def test_value_scale_is_range_checked_and_recorded_runs_keep_none():
    with pytest.raises(config_lib.ConfigError,
                       match=r"Expected a non-negative number. Received: loss.value_scale=-1"):
        config_lib.validate(config_lib.load(["debug"], ["loss.value_scale=-1.0"]))
    data = config_lib.load().to_dict()
    del data["loss"]["value_scale"]
    assert config_lib.upgrade(data)["loss"]["value_scale"] == 0.0


@pytest.mark.parametrize("overrides, names", [
    ((), ["obs", "reward", "state_kl", "weight_kl"]),
    (("loss.value_scale=3.0", "loss.overshooting=2", "model.estimator=reparameterization"),
     ["obs", "reward", "state_kl", "weight_kl", "latent_value", "overshooting"]),
])
def test_the_loss_terms_sum_to_the_loss_and_are_the_metrics_weighted(overrides, names):
    model, batch, seed = _model(*overrides), _batch(5), tf.constant([2, 7])
    loss, m = model.loss(batch, seed, 100)
    terms = model.loss_terms(batch, seed, 100)
    assert list(terms) == names
    np.testing.assert_allclose(float(tf.add_n(list(terms.values()))), float(loss), rtol=1e-6)
    np.testing.assert_allclose(float(terms["obs"]), float(m["obs_nll"]), rtol=1e-6)
    np.testing.assert_allclose(float(terms["reward"]), 10.0 * float(m["reward_nll"]), rtol=1e-6)
    np.testing.assert_allclose(float(terms["weight_kl"]), float(m["weight_kl"]) / 100, rtol=1e-6)
    if "latent_value" in terms:
        np.testing.assert_allclose(float(terms["latent_value"]),
                                   3.0 * float(m["latent_value_loss"]), rtol=1e-6)


def test_the_observation_terms_gradient_into_the_latent_follows_obs_grad_scale():
    batch, seed = _batch(6), tf.constant([4, 4])
    plain = _model()
    stopped = _twin(plain, "loss.obs_grad_scale=0.0")
    norms = []
    for model in (plain, stopped):
        with tf.GradientTape() as tape:
            obs = model.loss_terms(batch, seed, 100)["obs"]
        grads = tape.gradient(obs, model.encoder.trainable_variables,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        norms.append(float(tf.linalg.global_norm(grads)))
    assert norms[0] > 0 and norms[1] == 0.0
