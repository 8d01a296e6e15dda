"""The KL regularizers (`bayes_planet.layers.regularizers`) against tfp and closed forms,
their aliases (and the constraints'), and the KL's scaling by the dataset size in ``fit``.

The layer-scaled priors: test_priors.py; the mean-field recipe's tied-mean KL and annealing:
test_mean_field_recipe.py."""

import numpy as np
import pytest
import scipy.integrate
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers import constraints, regularizers

tfd = tfp.distributions


@pytest.mark.parametrize("prior_mean, prior_std", [(0.0, 1.0), (0.3, 0.1)])
def test_normal_kl_equals_tfp(prior_mean, prior_std):
    init = bl.TrainableNormal(stddev_initializer=keras.initializers.RandomNormal(-1.0, 0.5))
    init.build([5, 4])
    reg = bl.NormalKLDivergence(mean=prior_mean, stddev=prior_std)
    q = tfd.Normal(init.loc(), init.scale())
    p = tfd.Normal(prior_mean, prior_std)
    expected = tf.reduce_sum(tfd.kl_divergence(q, p))
    np.testing.assert_allclose(reg(init), expected, rtol=1e-5)
    # Also through a RandomVariable and a bare distribution.
    np.testing.assert_allclose(reg(init(None)), expected, rtol=1e-5)
    np.testing.assert_allclose(reg(q), expected, rtol=1e-5)


def test_kl_scaling_by_dataset_size_and_scale_factor():
    init = bl.TrainableNormal()
    init.build([3, 3])
    full = bl.NormalKLDivergence()(init)
    np.testing.assert_allclose(bl.NormalKLDivergence(dataset_size=100)(init), full / 100,
                               rtol=1e-6)
    np.testing.assert_allclose(
        bl.NormalKLDivergence(scale_factor=0.5, dataset_size=10)(init), full / 20, rtol=1e-6)
    with pytest.raises(ValueError, match="dataset_size=0"):
        bl.NormalKLDivergence(dataset_size=0)


def test_point_mass_kl_is_negative_log_prior():
    init = bl.TrainableDeterministic()
    init.build([4])
    expected = -tf.reduce_sum(tfd.Normal(0.0, 2.0).log_prob(init.loc()))
    np.testing.assert_allclose(bl.NormalKLDivergence(stddev=2.0)(init), expected, rtol=1e-5)


def test_empirical_bayes_kl_is_kl_at_the_optimal_prior_variance():
    init = bl.TrainableNormal(stddev_initializer=keras.initializers.RandomNormal(-1.0, 0.3))
    init.build([6, 2])
    loc, scale = init.loc(), init.scale()
    best_var = tf.reduce_mean(tf.square(scale) + tf.square(loc))
    expected = tf.reduce_sum(tfd.kl_divergence(tfd.Normal(loc, scale),
                                               tfd.Normal(0.0, tf.sqrt(best_var))))
    got = bl.NormalEmpiricalBayesKLDivergence()(init)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # It is the minimum over prior scales.
    for s in (0.5, 0.9, 1.1, 2.0):
        other = tf.reduce_sum(tfd.kl_divergence(tfd.Normal(loc, scale),
                                                tfd.Normal(0.0, s * tf.sqrt(best_var))))
        assert float(got) <= float(other) + 1e-6


def _true_neg_kl_log_uniform(log_alpha):
    """-KL(N(θ, αθ²) || log-uniform) = ½ log α − E log|1 + √α z| − C, by quadrature.

    C = (γ + log 2)/2 makes −KL → 0 as α → ∞ (Molchanov et al. 2017, eq. 14).
    """
    alpha = np.exp(log_alpha)
    s = np.sqrt(alpha)

    def integrand(z):
        return np.log(np.abs(1.0 + s * z)) * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)

    # The log singularity at z = -1/s as an endpoint of two pieces (QUADPACK's extrapolation
    # handles endpoint singularities; as an interior break point it reported divergence).
    cut = -1.0 / s
    pieces = ((-12.0, cut), (cut, 12.0)) if -12.0 < cut < 12.0 else ((-12.0, 12.0),)
    expectation = sum(scipy.integrate.quad(integrand, a, b, limit=200)[0] for a, b in pieces)
    return 0.5 * log_alpha - expectation - 0.5 * (np.euler_gamma + np.log(2.0))


def test_log_uniform_kl_matches_molchanov_values():
    """The approximation (eq. 14) vs the exact KL by quadrature, over log α ∈ [-6, 6].

    Molchanov et al. report the approximation is tight; we measure max |error| < 0.01.
    """
    log_alphas = np.linspace(-6.0, 6.0, 13)
    theta = np.ones_like(log_alphas, dtype=np.float32)
    sigma = np.exp(0.5 * log_alphas).astype(np.float32)
    reg = bl.LogUniformKLDivergence()
    got = np.array([-float(reg(tfd.Normal(theta[i:i + 1], sigma[i:i + 1])))
                    for i in range(len(log_alphas))])
    true = np.array([_true_neg_kl_log_uniform(a) for a in log_alphas])
    assert np.max(np.abs(got - true)) < 0.01, np.c_[log_alphas, got, true]


def test_regularizer_and_constraint_aliases():
    assert isinstance(regularizers.get("normal_kl_divergence"), bl.NormalKLDivergence)
    assert isinstance(regularizers.get("log_uniform_kl_divergence"), bl.LogUniformKLDivergence)
    assert isinstance(regularizers.get("normal_empirical_bayes_kl_divergence"),
                      bl.NormalEmpiricalBayesKLDivergence)
    reg = regularizers.get(regularizers.serialize(bl.NormalKLDivergence(stddev=0.5,
                                                                        dataset_size=7)))
    assert reg.stddev == 0.5 and reg.dataset_size == 7
    x = tf.constant([-2.0, 0.0, 3.0])
    np.testing.assert_allclose(constraints.get("softplus")(x), tf.nn.softplus(x))
    np.testing.assert_allclose(constraints.get("exp")(x), tf.exp(x))
    assert float(tf.reduce_min(constraints.get("positive")(x))) > 0
    with pytest.raises(TypeError, match="constraint=3"):
        constraints.get(3)


def test_model_fit_adds_kl_scaled_by_dataset_size():
    """evaluate() loss == data loss + KL / N: KL terms reach model.fit, scaled once."""
    x = np.random.default_rng(0).standard_normal((16, 3)).astype("float32")
    y = np.zeros((16, 2), "float32")
    layer = bl.DenseFlipout(2, kernel_initializer="trainable_deterministic", seed=0)
    model = keras.Sequential([keras.Input((3,)), layer])
    assert bl.set_dataset_size(model, 100) == 1
    model.compile(loss="mse")
    got = model.evaluate(x, y, batch_size=16, verbose=0)
    data = float(tf.reduce_mean(tf.square(model(x))))
    kl = float(-tf.reduce_sum(tfd.Normal(0.0, 1.0).log_prob(layer.kernel.loc())))
    np.testing.assert_allclose(got, data + kl / 100, rtol=1e-5)
    assert len(model.losses) == 1
