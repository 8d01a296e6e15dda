"""The posteriors and priors added for edward2 parity: log-normal, half-Cauchy, Cauchy, mixture
of deltas, orthogonal random features; the log-normal, Cauchy, half-Cauchy and uniform KL
regularizers and the inverse-gamma hyperprior of the empirical-Bayes KL (statistical checks
against tfp's closed forms and Monte Carlo, fixed seeds, stated tolerances)."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet.layers import initializers, regularizers
from bayes_planet.layers.testing import run_layer_test

tfd = tfp.distributions


def _built(init, shape=(4000,)):
    init(shape)
    return init


@pytest.mark.parametrize("alias, cls", [
    ("orthogonal_random_features", initializers.OrthogonalRandomFeatures),
    ("trainable_half_cauchy", initializers.TrainableHalfCauchy),
    ("trainable_log_normal", initializers.TrainableLogNormal),
    ("trainable_mixture_of_deltas", initializers.TrainableMixtureOfDeltas)])
def test_aliases_resolve_through_the_one_get(alias, cls):
    assert type(initializers.get(alias)) is cls


def test_log_normal_samples_match_its_distribution():
    init = _built(initializers.get("trainable_log_normal"))
    init.raw_stddev.assign(tf.fill([4000], np.log(0.5).astype(np.float32)))
    init.mean.assign(tf.fill([4000], 0.3))
    draws = init.sample(tf.constant([1, 2]), num_samples=50).numpy()
    assert draws.shape == (50, 4000) and (draws > 0).all()
    # E[w] = exp(μ + σ²/2) = exp(0.425); 200k draws: relative standard error ≈ 0.12 %.
    assert draws.mean() == pytest.approx(np.exp(0.425), rel=0.01)
    np.testing.assert_allclose(init.loc().numpy(), np.exp(0.425), rtol=1e-6)
    assert isinstance(init.distribution().distribution, tfd.LogNormal)
    with pytest.raises(initializers.MomentsUnavailableError):
        init.moments()


def test_half_cauchy_median_and_support():
    init = _built(initializers.get("trainable_half_cauchy"))
    init.raw_stddev.assign(tf.zeros([4000]))  # scale exp(0) = 1
    draws = init.sample(tf.constant([3, 4]), num_samples=50).numpy()
    loc = init.mean.numpy()
    assert (draws >= loc).all()
    # The median of loc + |C| is loc + 1; 200k draws put the sample median within 1 %.
    assert np.median(draws - loc) == pytest.approx(1.0, rel=0.02)
    np.testing.assert_allclose(init.loc().numpy(), loc + 1.0, rtol=1e-6)


def test_mixture_of_deltas_draws_its_locations_uniformly():
    init = initializers.get("trainable_mixture_of_deltas")
    init((3,))
    draws = init.sample(tf.constant([5, 6]), num_samples=3000).numpy()
    locations = init.locations.numpy()
    for entry in range(3):
        picked = np.argmin(np.abs(draws[:, entry, None] - locations[entry]), axis=1)
        counts = np.bincount(picked, minlength=5) / 3000
        np.testing.assert_allclose(counts, 0.2, atol=0.03)  # binomial sd ≈ 0.0073
    np.testing.assert_allclose(init.loc().numpy(), locations.mean(-1), rtol=1e-6)
    with pytest.raises(ValueError, match="Expected a positive integer. Received: num_comp"):
        initializers.TrainableMixtureOfDeltas(0)


def test_orthogonal_random_features():
    w = initializers.OrthogonalRandomFeatures(stddev=0.5, random_norm=False, seed=3)(
        (64, 160)).numpy()
    np.testing.assert_allclose((w ** 2).sum(0), 64 * 0.25, rtol=1e-4)
    for start in (0, 64):
        block = w[:, start:start + 64]
        np.testing.assert_allclose(block @ block.T, 16 * np.eye(64), atol=1e-3)
    again = initializers.OrthogonalRandomFeatures(0.5, False, 3)((64, 160)).numpy()
    np.testing.assert_array_equal(w, again)
    with pytest.raises(ValueError, match="Received: stddev=0"):
        initializers.OrthogonalRandomFeatures(stddev=0)


def test_log_normal_kl_is_closed_form():
    q = tfd.Independent(tfd.LogNormal(tf.constant([0.2, -0.1]), tf.constant([0.5, 1.5])), 1)
    kl = regularizers.LogNormalKLDivergence(loc=0.1, scale=2.0)(q)
    expected = tf.reduce_sum(tfd.kl_divergence(tfd.LogNormal([0.2, -0.1], [0.5, 1.5]),
                                               tfd.LogNormal(0.1, 2.0)))
    np.testing.assert_allclose(kl.numpy(), expected.numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match="log-normal posterior"):
        regularizers.LogNormalKLDivergence()(tfd.Normal(0.0, 1.0))


def test_cauchy_kl_closed_form_and_one_draw_estimate():
    q = tfd.Cauchy(tf.constant([0.5, -1.0]), tf.constant([0.3, 2.0]))
    kl = regularizers.CauchyKLDivergence(loc=0.0, scale=1.0)(q)
    expected = tf.reduce_sum(tfd.kl_divergence(q, tfd.Cauchy(0.0, 1.0)))
    np.testing.assert_allclose(kl.numpy(), expected.numpy(), rtol=1e-5)
    # A normal posterior: the one-draw estimate log q(w) - log p(w) averages to the KL.
    tf.random.set_seed(11)
    normal = tfd.Normal(tf.constant([0.3]), tf.constant([0.4]))
    # 4000 independent one-draw estimates at once: a weight of 4000 copies of the posterior,
    # whose summed estimate / 4000 is their mean.
    copies = tfd.Normal(tf.fill([4000], 0.3), tf.fill([4000], 0.4))
    estimate = regularizers.CauchyKLDivergence()(copies).numpy() / 4000
    w = normal.sample(400000, seed=12)
    reference = tf.reduce_mean(normal.log_prob(w) - tfd.Cauchy(0.0, 1.0).log_prob(w)).numpy()
    # Per-draw sd ≈ 0.59 (measured, seeds 0-2): the mean of 4000 is within 0.04 (≈ 4 standard
    # errors).
    assert estimate == pytest.approx(reference, abs=0.04)


def test_half_cauchy_kl_estimate_averages_to_the_kl():
    tf.random.set_seed(13)
    q = tfd.LogNormal(tf.constant([0.0]), tf.constant([0.5]))
    copies = tfd.LogNormal(tf.zeros([4000]), tf.fill([4000], 0.5))  # 4000 one-draw estimates
    estimate = regularizers.HalfCauchyKLDivergence(scale=2.0)(copies).numpy() / 4000
    w = q.sample(400000, seed=14)
    reference = tf.reduce_mean(q.log_prob(w) - tfd.HalfCauchy(0.0, 2.0).log_prob(w)).numpy()
    # Per-draw sd ≈ 0.66 (measured, seeds 0-2): the mean of 4000 is within 0.04 (≈ 4 standard
    # errors).
    assert estimate == pytest.approx(reference, abs=0.04)


def test_uniform_kl_is_the_negative_entropy():
    q = tfd.Normal(tf.constant([0.0, 1.0]), tf.constant([0.5, 2.0]))
    np.testing.assert_allclose(regularizers.UniformKLDivergence(scale_factor=0.5)(q).numpy(),
                               -0.5 * tf.reduce_sum(q.entropy()).numpy(), rtol=1e-6)


def test_empirical_bayes_hyperprior_is_the_map_variance():
    """The plug-in variance maximizes -KL + log IG over a grid; the divergence is KL - log IG."""
    loc = tf.constant(np.linspace(-1, 1, 30), tf.float32)
    scale = tf.constant(np.linspace(0.1, 0.5, 30), tf.float32)
    q = tfd.Normal(loc, scale)
    reg = regularizers.NormalEmpiricalBayesKLDivergence(variance_concentration=2.0,
                                                        variance_scale=0.5)
    value = reg(q).numpy()
    hyper = tfd.InverseGamma(2.0, 0.5)

    def objective(v):
        return (tf.reduce_sum(tfd.kl_divergence(q, tfd.Normal(0.0, np.float32(np.sqrt(v)))))
                - hyper.log_prob(np.float32(v))).numpy()

    grid = np.linspace(0.05, 2.0, 400)
    assert value == pytest.approx(min(objective(v) for v in grid), abs=1e-3)
    assert value <= min(objective(v) for v in grid) + 1e-5
    with pytest.raises(ValueError, match="both variance_concentration and variance_scale"):
        regularizers.NormalEmpiricalBayesKLDivergence(variance_concentration=2.0)
    config = reg.get_config()
    assert regularizers.NormalEmpiricalBayesKLDivergence(**config).get_config() == config


@pytest.mark.parametrize("posterior, prior", [("trainable_log_normal", "log_normal_kl_divergence"),
                                              ("trainable_half_cauchy",
                                               "half_cauchy_kl_divergence")])
def test_layer_contract_with_a_positive_posterior(posterior, prior):
    run_layer_test(bl.DenseReparameterization,
                   {"units": 3, "kernel_initializer": posterior, "kernel_regularizer": prior},
                   (4, 5), expected_output_shape=(4, 3), expected_num_trainable_weights=3,
                   expected_num_losses=1, run_jit=False)
