"""`NeuralProcess` and `NeuralProcessAttention`: attention against numpy, the ELBO's KL term
against tensorflow-probability's, training lowers the predictive NLL of held-out targets,
config round trips and bad input."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from scipy.special import softmax

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl

tfd = tfp.distributions


def _xkr(seed=0, b=2, n=5, m=3, d=4):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(b, n, 2)).astype(np.float32),
            rng.normal(size=(b, m, 2)).astype(np.float32),
            rng.normal(size=(b, n, d)).astype(np.float32))


@pytest.mark.parametrize("att_type, normalise", [
    ("uniform", True), ("laplace", True), ("laplace", False), ("dot_product", True),
    ("dot_product", False)])
def test_attention_is_the_closed_form(att_type, normalise):
    k, q, r = _xkr()
    out = bl.NeuralProcessAttention(att_type=att_type, scale=0.7, normalise=normalise)(k, q, r)
    if att_type == "uniform":
        want = np.repeat(r.mean(1, keepdims=True), 3, axis=1)
    else:
        if att_type == "laplace":
            scores = -np.abs(k[:, None] - q[:, :, None]).sum(-1) / 0.7
            weights = softmax(scores, -1) if normalise else 1 + np.tanh(scores)
        else:
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(2)
            weights = softmax(scores, -1) if normalise else 1 / (1 + np.exp(-scores))
        want = weights @ r
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)


def test_multihead_attention_is_the_sum_of_its_heads():
    k, q, r = _xkr(1)
    layer = bl.NeuralProcessAttention("mlp", [6, 6], "multihead", num_heads=2)
    out = layer(k, q, r).numpy()
    keys, queries = k, q
    for dense in layer.key_net:
        keys = dense(keys)
    for dense in layer.query_net:
        queries = dense(queries)
    w = {name: p.kernel.numpy() for name, p in layer.projections.items()}
    qh, kh, vh = queries.numpy() @ w["wq"], keys.numpy() @ w["wk"], r @ w["wv"]
    heads = []
    for h in range(2):
        s = slice(2 * h, 2 * h + 2)
        weights = softmax(qh[..., s] @ kh[..., s].transpose(0, 2, 1) / np.sqrt(2), -1)
        heads.append(weights @ vh[..., s])
    np.testing.assert_allclose(out, np.concatenate(heads, -1) @ w["wo"], rtol=1e-4, atol=1e-5)


def _task(seed, batch=16, n=20):
    """Functions y = a sin(x + b) with a per-function amplitude and phase."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, size=(batch, n, 1)).astype(np.float32)
    a, b = rng.uniform(0.5, 2, size=(batch, 1, 1)), rng.uniform(0, 3, size=(batch, 1, 1))
    y = (a * np.sin(x + b)).astype(np.float32)
    return (x[:, :8], y[:, :8]), x, y


def test_the_kl_term_and_shapes():
    model = bl.NeuralProcess([16, 16], 3, [16, 2], deterministic_encoder_sizes=[16, 16],
                             seed=0)
    (cx, cy), tx, ty = _task(0, batch=4)
    out = model(((cx, cy), tx), ty)
    assert isinstance(out, bl.RandomVariable)
    assert out.distribution.batch_shape == (4, 20) and out.distribution.event_shape == (1,)
    prior = model.latent_encoder(cx, cy).distribution
    posterior = model.latent_encoder(tx, ty).distribution
    np.testing.assert_allclose(model.losses[-1].numpy(),
                               tfd.kl_divergence(posterior, prior).numpy()[:, None], rtol=1e-5)
    assert model(((cx, cy), tx)).distribution.batch_shape == (4, 20)


def test_training_lowers_the_held_out_nll():
    """300 Adam steps on random sinusoids: the NLL of held-out functions' targets given their
    contexts falls by more than 0.5 nats per point (from ≈ 1.3)."""
    tf.keras.utils.set_random_seed(0)
    model = bl.NeuralProcess([32, 32], 4, [32, 32, 2], deterministic_encoder_sizes=[32, 32],
                             attention_wrapper=bl.NeuralProcessAttention(att_type="laplace"),
                             seed=1)
    optimizer = tf.keras.optimizers.Adam(3e-3)
    held_out = _task(999, batch=32)

    def nll():
        (cx, cy), tx, ty = held_out
        return -float(tf.reduce_mean(model(((cx, cy), tx)).distribution.log_prob(ty)))

    before = nll()

    @tf.function
    def train_step(cx, cy, tx, ty):
        with tf.GradientTape() as tape:
            dist = model(((cx, cy), tx), ty).distribution
            loss = -tf.reduce_mean(dist.log_prob(ty)) + tf.reduce_mean(model.losses[-1]) / 20
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    for step in range(300):
        (cx, cy), tx, ty = _task(step)
        train_step(cx, cy, tx, ty)
    assert nll() < before - 0.5, (before, nll())


def test_configs_round_trip_and_compat_returns_the_distribution():
    attention = bl.NeuralProcessAttention("mlp", [8], "multihead", num_heads=4)
    model = bl.NeuralProcess([8], 2, [8, 4], deterministic_encoder_sizes=[8],
                             attention_wrapper=attention, seed=3)
    again = bl.NeuralProcess.from_config(model.get_config())
    assert again.get_config() == model.get_config()
    assert again.attention.get_config()["att_type"] == "multihead"
    compat = ed.layers.NeuralProcess([8], 2, [8, 2], deterministic_encoder_sizes=[8],
                                     attention_wrapper=ed.layers.Attention("identity", None,
                                                                           "uniform"))
    (cx, cy), tx, _ = _task(5, batch=2)
    dist = compat(((cx, cy), tx))
    assert isinstance(dist, tfd.MultivariateNormalDiag) and dist.loc.shape == (2, 20, 1)


@pytest.mark.parametrize("make, message", [
    (lambda: bl.NeuralProcessAttention(rep="conv"), r"Received: rep='conv'$"),
    (lambda: bl.NeuralProcessAttention(att_type="cosine"), r"Received: att_type='cosine'$"),
    (lambda: bl.NeuralProcessAttention("mlp", None), r"Received: output_sizes=None$"),
    (lambda: bl.NeuralProcessAttention(scale=0), r"Received: scale=0$"),
    (lambda: bl.NeuralProcess([8], 0, [8, 2], deterministic_encoder_sizes=[8]),
     r"^Expected a positive integer\. Received: num_latents=0$"),
    (lambda: bl.NeuralProcess([8], 2, [8, 3], deterministic_encoder_sizes=[8]),
     r"Received: decoder_sizes=\[8, 3\]$"),
    (lambda: bl.NeuralProcess([8], 2, [8, 2]), r"Received: deterministic_encoder_sizes=None$"),
])
def test_bad_input_is_one_line(make, message):
    with pytest.raises(ValueError, match=message) as info:
        make()
    assert "\n" not in str(info.value)
