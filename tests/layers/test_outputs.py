"""Stochastic output layers (`bayes_planet.layers.outputs`): contract, log-probabilities against
tfp, composition. The vector quantizer: test_vq.py."""

import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from scipy import stats

from bayes_planet._keras import keras
from bayes_planet.layers.outputs import (
    Bernoulli,
    Categorical,
    Discretize,
    DiscretizedDistribution,
    MixtureLogistic,
    MixtureNormal,
    Normal,
    negative_log_likelihood,
)
from bayes_planet.layers.random_variable import RandomVariable
from bayes_planet.layers.testing import normal_array, run_layer_test
from bayes_planet.layers.vq import VectorQuantizer

tfd = tfp.distributions


def _dense(layer, x):
    return x @ layer.kernel.numpy() + layer.bias.numpy()


@pytest.mark.parametrize("cls, kwargs, out_shape, trainable", [
    (Normal, {}, (4, 3), 0),
    (Normal, {"units": 5, "scale": "learned"}, (4, 5), 3),
    (Normal, {"units": 2, "scale": 0.5}, (4, 2), 2),
    (Bernoulli, {"units": 3}, (4, 3), 2),
    (Categorical, {"units": 3}, (4,), 2),
    (MixtureLogistic, {"units": 2, "num_components": 3}, (4, 2), 2),
    (MixtureNormal, {"units": 2, "num_components": 2}, (4, 2), 2),
    (Discretize, {"num_bins": 8}, (4, 6), 0),
])
def test_contract(cls, kwargs, out_shape, trainable):
    run_layer_test(cls, kwargs, (4, 6), expected_output_shape=out_shape,
                   expected_num_trainable_weights=trainable,
                   expected_num_non_trainable_weights=1)  # the seed counter


def test_normal_log_prob_matches_tfp():
    x, y = normal_array(5, 6), normal_array(5, 3, seed=1)
    rv = Normal(seed=1)(x)
    loc, raw = x[:, :3], x[:, 3:]
    ref = tfd.Independent(tfd.Normal(loc, tf.nn.softplus(raw) + 1e-3), 1)
    np.testing.assert_allclose(rv.log_prob(y), ref.log_prob(y), rtol=1e-5)
    # Per-element with event_ndims=0; the event sum is the default's log-prob.
    per_element = Normal(event_ndims=0, seed=1)(x).log_prob(y)
    assert per_element.shape == (5, 3)
    np.testing.assert_allclose(tf.reduce_sum(per_element, -1), ref.log_prob(y), rtol=1e-5)
    # Fixed scale with a projection, and a learned scale.
    layer = Normal(units=3, scale=0.7, seed=2)
    rv = layer(x)
    ref = tfd.Independent(tfd.Normal(_dense(layer, x), 0.7), 1)
    np.testing.assert_allclose(rv.log_prob(y), ref.log_prob(y), rtol=1e-5)
    layer = Normal(units=3, scale="learned", seed=2)
    rv = layer(x)
    scale = tf.nn.softplus(layer.raw_scale) + 1e-3
    np.testing.assert_allclose(scale, np.ones(3), rtol=1e-5)  # starts at one
    ref = tfd.Independent(tfd.Normal(_dense(layer, x), scale), 1)
    np.testing.assert_allclose(rv.log_prob(y), ref.log_prob(y), rtol=1e-5)
    np.testing.assert_allclose(rv.distribution.entropy(), ref.entropy(), rtol=1e-5)


def test_bernoulli_and_categorical_log_prob_match_tfp():
    x = normal_array(6, 4)
    y = (np.random.default_rng(1).random((6, 4)) > 0.5).astype("float32")
    rv = Bernoulli(seed=0)(x)
    ref = tfd.Independent(tfd.Bernoulli(logits=x), 1)
    np.testing.assert_allclose(rv.log_prob(y), ref.log_prob(y), rtol=1e-5)
    assert set(np.unique(rv.numpy())) <= {0.0, 1.0}
    labels = np.array([0, 3, 2, 1, 1, 0])
    layer = Categorical(units=4, seed=0)
    rv = layer(x)
    ref = tfd.Categorical(logits=_dense(layer, x))
    assert rv.shape == (6,)
    np.testing.assert_allclose(rv.log_prob(labels), ref.log_prob(labels), rtol=1e-5)
    np.testing.assert_allclose(rv.distribution.entropy(), ref.entropy(), rtol=1e-5)


@pytest.mark.parametrize("cls, component, ref_logpdf", [
    (MixtureLogistic, tfd.Logistic, stats.logistic.logpdf),
    (MixtureNormal, tfd.Normal, stats.norm.logpdf),
])
def test_mixture_log_prob_matches_tfp_and_closed_form(cls, component, ref_logpdf):
    x, y = normal_array(5, 7), normal_array(5, 2, seed=1)
    layer = cls(units=2, num_components=3, seed=0)
    rv = layer(x)
    params = _dense(layer, x).reshape(5, 2, 9)
    logits, loc, raw = np.split(params, 3, axis=-1)
    scale = np.log1p(np.exp(raw)) + 1e-3
    ref = tfd.Independent(tfd.MixtureSameFamily(tfd.Categorical(logits=logits),
                                                component(loc, scale)), 1)
    np.testing.assert_allclose(rv.log_prob(y), ref.log_prob(y), rtol=1e-5)
    # Closed form in float64: log sum_k softmax(logits)_k pdf_k(y), summed over units.
    log_w = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    comp = ref_logpdf(y[..., None].astype(np.float64), loc, scale)
    closed = np.log(np.exp(log_w + comp).sum(-1)).sum(-1)
    np.testing.assert_allclose(rv.log_prob(y), closed, rtol=1e-4)
    np.testing.assert_allclose(rv.mean(), ref.mean(), rtol=1e-5)


def test_discretize_probabilities_sum_to_one_and_match_cdf():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4, 3, 5)).astype("float32")
    loc = rng.uniform(-1.5, 1.5, (4, 3, 5)).astype("float32")  # some mass beyond the range
    scale = rng.uniform(0.01, 0.5, (4, 3, 5)).astype("float32")
    base = RandomVariable(tfd.Independent(tfd.MixtureSameFamily(
        tfd.Categorical(logits=logits), tfd.Logistic(loc, scale)), 1))
    rv = Discretize(num_bins=256, low=-1.0, high=1.0, seed=0)(base)
    assert rv.distribution.event_shape == (3,)
    disc = rv.distribution.distribution
    assert isinstance(disc, DiscretizedDistribution)
    probs = disc.bin_probs().numpy()
    assert probs.shape == (4, 3, 256)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    # Float64 reference: cdf differences of the logistic mixture over the bins.
    step = 2.0 / 255
    edges = -1.0 + step * (np.arange(255) + 0.5)
    w = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    cdf = (w[..., None] * stats.logistic.cdf(
        edges, loc[..., None].astype(np.float64), scale[..., None])).sum(-2)
    cdf = np.concatenate([np.zeros((4, 3, 1)), cdf, np.ones((4, 3, 1))], -1)
    ref = np.diff(cdf, axis=-1)
    big = ref > 1e-6
    np.testing.assert_allclose(probs[big], ref[big], rtol=2e-3)
    # Event log-prob of integer pixel levels = sum of per-unit bin log-probs.
    levels = rng.integers(0, 256, (4, 3))
    per_unit = np.log(np.take_along_axis(ref, levels[..., None], -1)[..., 0]).sum(-1)
    np.testing.assert_allclose(rv.log_prob(levels), per_unit, rtol=1e-3)
    sample = rv.numpy()
    assert sample.shape == (4, 3) and np.all(sample == np.round(sample))
    assert sample.min() >= 0 and sample.max() <= 255
    # Out-of-range levels have probability zero.
    assert np.all(np.isneginf(disc.log_prob(np.full((4, 3), 256.0))))


def test_discretize_matches_tfp_quantized_distribution():
    loc, scale = normal_array(3, 4) * 3.0 + 5.0, np.exp(normal_array(3, 4, seed=1))
    levels = np.random.default_rng(2).integers(0, 12, (3, 4)).astype("float32")
    rv = Discretize(num_bins=12, seed=0)(RandomVariable(tfd.Normal(loc, scale)))
    # tfp quantizes Y = ceil(X) (bins (k-1, k], tails folded into low/high); a shift
    # by 1/2 centres the bins on the integer levels, as here.
    ref = tfd.QuantizedDistribution(
        tfd.TransformedDistribution(tfd.Normal(loc, scale), tfp.bijectors.Shift(-0.5)),
        low=0.0, high=11.0)
    np.testing.assert_allclose(rv.log_prob(levels), ref.log_prob(levels), rtol=1e-4, atol=1e-5)


def test_discretize_matches_normal_cdf_and_tail_underflow_is_finite():
    dist = DiscretizedDistribution(tfd.Normal(3.2, 0.8), num_bins=10)
    probs = dist.bin_probs().numpy()
    edges = np.arange(9) + 0.5
    ref = np.diff(np.concatenate([[0.0], stats.norm.cdf(edges, 3.2, 0.8), [1.0]]))
    np.testing.assert_allclose(probs, ref, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(dist.mean(), (ref * np.arange(10)).sum(), rtol=1e-5)
    far = DiscretizedDistribution(tfd.Logistic(0.0, 0.01), num_bins=256)
    with tf.GradientTape() as tape:
        loc = tf.Variable(0.0)
        lp = DiscretizedDistribution(tfd.Logistic(loc, 0.01), num_bins=256).log_prob(255.0)
    assert np.isfinite(lp.numpy()) and np.isfinite(tape.gradient(lp, loc).numpy())
    assert np.isfinite(far.log_prob(200.0).numpy())


def test_seeded_samples_are_reproducible():
    x = normal_array(3, 4)
    a, b = Normal(seed=7), Normal(seed=7)
    first_a, first_b = a(x).numpy(), b(x).numpy()
    np.testing.assert_array_equal(first_a, first_b)
    assert not np.allclose(a(x).numpy(), first_a)  # the counter moves on
    mix = MixtureLogistic(None, num_components=2, event_ndims=0, seed=3)
    x6 = normal_array(8, 6)
    np.testing.assert_array_equal(mix(x6).numpy(),
                                  MixtureLogistic(None, 2, event_ndims=0, seed=3)(x6).numpy())


def test_straight_through_gradients():
    logits = tf.constant(normal_array(4, 3))
    with tf.GradientTape() as tape:
        tape.watch(logits)
        value = tf.convert_to_tensor(Bernoulli(seed=0)(logits))
    p = tf.sigmoid(logits)
    np.testing.assert_allclose(tape.gradient(value, logits), p * (1 - p), rtol=1e-5)


def test_sequential_composition_and_fit_with_log_prob_loss():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 6)).astype("float32")
    y = (x[:, :3] * 2.0 + 1.0).astype("float32")
    model = keras.Sequential([keras.layers.Dense(8, activation="tanh"),
                              Normal(units=4, scale="predicted", seed=0),
                              keras.layers.Dense(3), Normal(scale=1.0, seed=1)])
    out = model(x)
    assert isinstance(out, RandomVariable) and out.shape == (64, 3)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=negative_log_likelihood)
    history = model.fit(x, y, epochs=15, batch_size=64, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)) and history[-1] < history[0] - 1.0


def test_functional_discretized_mixture_model_fits_and_saves():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 5)).astype("float32")
    levels = rng.integers(0, 16, (32, 4)).astype("float32")
    inputs = keras.Input((5,))
    h = keras.layers.Dense(8, activation="relu")(inputs)
    out = Discretize(num_bins=16, low=-1.0, high=1.0, seed=0)(
        MixtureLogistic(4, num_components=3, seed=0)(h))
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss=negative_log_likelihood)
    history = model.fit(x, levels, epochs=10, batch_size=32, verbose=0).history["loss"]
    assert history[-1] < history[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.keras")
        model.save(path)
        loaded = keras.models.load_model(path)  # With its compiled (registered) loss.
        assert loaded.loss is negative_log_likelihood
    np.testing.assert_allclose(loaded(x).distribution.log_prob(levels),
                               model(x).distribution.log_prob(levels), rtol=1e-6)


def test_vae_style_kl_from_output_layer():
    rv = Normal(seed=0)(normal_array(5, 4))
    prior = tfd.Normal(0.0, 1.0)
    kl = rv.kl_divergence(tfd.Independent(tfd.Normal(tf.zeros([5, 2]), prior.scale), 1))
    loc, scale = rv.mean().numpy(), rv.stddev().numpy()
    closed = (0.5 * (scale**2 + loc**2 - 1) - np.log(scale)).sum(-1)
    np.testing.assert_allclose(kl, closed, rtol=1e-5)
    # Fig. 6's `encoding.kl_divergence(Normal(0., 1.))`: elementwise, summed over the event.
    np.testing.assert_allclose(rv.kl_divergence(prior), closed, rtol=1e-5)


@pytest.mark.parametrize("cls, kwargs, match", [
    (Normal, {"scale": 0.0}, "scale=0.0"),
    (Normal, {"scale": "fixed"}, "scale='fixed'"),
    (Normal, {"units": 0}, "units=0"),
    (MixtureLogistic, {"units": 2, "num_components": 0}, "num_components=0"),
    (Discretize, {"num_bins": 1}, "num_bins=1"),
    (VectorQuantizer, {"num_codes": -1}, "num_codes=-1"),
])
def test_bad_arguments_are_named(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_normal_predicted_scale_needs_even_inputs():
    with pytest.raises(ValueError, match="even"):
        Normal()(normal_array(2, 3))


@pytest.mark.parametrize("target_shape", [(16,), (16, 1)])
def test_the_log_prob_loss_matches_the_targets_rank_as_keras_losses_do(target_shape):
    """A (B, 1) Normal prediction with (B,) or (B, 1) targets: the compiled loss is the mean of
    -log p(y_b) over the B examples, on both stacks (Keras 3 matched no ranks: log_prob of (B,)
    targets broadcast to [B, B]); the same targets and prediction as Keras' own MSE accepts."""
    x = normal_array(16, 2)
    y = normal_array(16, seed=1).reshape(target_shape)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1),
                              Normal(scale=0.5, seed=0)])
    model.compile(loss=negative_log_likelihood)
    mean = model.layers[0](x).numpy()[:, 0]
    expected = -stats.norm.logpdf(y.reshape(-1), mean, 0.5).mean()
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=16, verbose=0), expected,
                               rtol=1e-5)
