"""`TrainableFullCovarianceNormal` (alias 'trainable_full_covariance_normal'): tfp.layers'
MultivariateNormalTriL posterior over a kernel's flattened entries, as the kernel initializer of
the reparameterization layers; its KL to a normal prior against tfp's closed form; samples,
log-densities, the contract and save/load."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet.layers import KERAS3, initializers, keras, regularizers
from bayes_planet.layers.testing import (
    assert_reloads_in_a_fresh_process,
    mean_prediction,
    run_layer_test,
)

tfd = tfp.distributions
ALIAS = "trainable_full_covariance_normal"


def _posterior(shape=(3, 2), seed=0):
    """A built posterior with random means and a random (valid) scale factor."""
    posterior = initializers.get(ALIAS)
    posterior.build(shape)
    rng = np.random.default_rng(seed)
    posterior.mean.assign(rng.standard_normal(shape).astype("float32"))
    posterior.raw_scale_tril.assign(
        0.5 * rng.standard_normal(posterior.raw_scale_tril.shape).astype("float32"))
    return posterior


def _tfp_posterior(posterior):
    return tfd.MultivariateNormalTriL(tf.reshape(posterior.loc(), [-1]), posterior.scale_tril())


@pytest.mark.parametrize("identifier", [
    ALIAS, {"class_name": "TrainableFullCovarianceNormal", "config": {"initial_stddev": 0.5}}])
def test_it_resolves_through_get(identifier):
    assert type(initializers.get(identifier)) is bl.TrainableFullCovarianceNormal


def test_it_starts_at_tfps_start():
    """Zero means and L = (softplus(0) + 1e-5) I: what tfp.layers.MultivariateNormalTriL gives
    on VariableLayer's zero parameters."""
    posterior = initializers.get(ALIAS)
    posterior.build((4, 3))
    assert posterior.raw_scale_tril.shape == (12 * 13 // 2,)
    np.testing.assert_array_equal(posterior.loc().numpy(), np.zeros((4, 3)))
    np.testing.assert_allclose(posterior.scale_tril().numpy(),
                               (math.log(2.0) + 1e-5) * np.eye(12), rtol=0, atol=1e-6)
    tfp_start = tfp.bijectors.FillScaleTriL(diag_shift=1e-5)(tf.zeros(12 * 13 // 2))
    np.testing.assert_allclose(posterior.scale_tril().numpy(), tfp_start.numpy(), atol=1e-6)
    other = bl.TrainableFullCovarianceNormal(mean_initializer="ones", initial_stddev=0.1)
    other.build((2, 2))
    np.testing.assert_allclose(other.scale_tril().numpy(), 0.1 * np.eye(4), atol=1e-6)
    np.testing.assert_array_equal(other.loc().numpy(), np.ones((2, 2)))


@pytest.mark.parametrize("regularizer, prior", [
    (regularizers.NormalKLDivergence(), (0.0, 1.0)),
    (regularizers.NormalKLDivergence(mean=0.3, stddev=0.7), (0.3, 0.7)),
    (regularizers.FanInNormalKLDivergence(gain=2.0), (0.0, 2.0 / math.sqrt(3))),
])
def test_the_kl_to_a_normal_prior_is_tfps_closed_form(regularizer, prior):
    posterior = _posterior()
    mean, stddev = prior
    expected = tfd.kl_divergence(_tfp_posterior(posterior), tfd.MultivariateNormalDiag(
        tf.fill([6], mean), tf.fill([6], stddev)))
    np.testing.assert_allclose(float(regularizer(posterior)), float(expected), rtol=1e-5)


def test_the_tied_mean_kl_is_tfps_closed_form_at_the_posteriors_mean():
    posterior = _posterior(seed=1)
    flat = tf.reshape(posterior.loc(), [-1])
    expected = tfd.kl_divergence(_tfp_posterior(posterior),
                                 tfd.MultivariateNormalDiag(flat, tf.fill([6], 0.4)))
    got = regularizers.NormalKLDivergenceWithTiedMean(stddev=0.4)(posterior)
    np.testing.assert_allclose(float(got), float(expected), rtol=1e-5)


def test_the_factorized_kl_would_be_wrong():
    """The correlations count: the KL of the same marginals without them is smaller."""
    posterior = _posterior(seed=2)
    full = float(regularizers.NormalKLDivergence()(posterior))
    marginal_stddev = tf.sqrt(tf.reduce_sum(tf.square(posterior.scale_tril()), -1))
    factorized = float(tf.reduce_sum(tfd.kl_divergence(
        tfd.Normal(tf.reshape(posterior.loc(), [-1]), marginal_stddev), tfd.Normal(0.0, 1.0))))
    assert full > factorized + 0.1, (full, factorized)


def test_samples_have_the_posteriors_mean_and_covariance():
    posterior = _posterior(shape=(2, 2), seed=3)
    draws = posterior.sample(tf.constant([4, 5]), num_samples=40_000).numpy()
    assert draws.shape == (40_000, 2, 2)
    flat = draws.reshape(len(draws), -1)
    covariance = (posterior.scale_tril() @ tf.transpose(posterior.scale_tril())).numpy()
    # 40,000 draws: the standard error of each moment is below 0.01 × its scale.
    np.testing.assert_allclose(flat.mean(0), posterior.loc().numpy().ravel(), atol=0.03)
    np.testing.assert_allclose(np.cov(flat.T), covariance, atol=0.05)
    one = posterior.sample(tf.constant([4, 5]))
    assert one.shape == (2, 2)
    np.testing.assert_array_equal(one.numpy(), posterior.sample(tf.constant([4, 5])).numpy())


def test_the_distribution_is_over_the_weight_shape():
    posterior = _posterior(seed=4)
    dist = posterior.distribution()
    assert dist.event_shape == (3, 2)
    value = posterior.sample(tf.constant([1, 2]))
    np.testing.assert_allclose(float(dist.log_prob(value)),
                               float(_tfp_posterior(posterior).log_prob(tf.reshape(value, [-1]))),
                               rtol=1e-6)


@pytest.mark.parametrize("cls, kwargs, input_shape, output_shape", [
    (bl.DenseReparameterization, {"units": 3, "activation": "relu"}, (4, 5), (4, 3)),
    (bl.Conv1DReparameterization, {"filters": 2, "kernel_size": 3}, (2, 6, 2), (2, 4, 2)),
])
def test_layer_contract(cls, kwargs, input_shape, output_shape):
    layer = run_layer_test(cls, {**kwargs, "kernel_initializer": ALIAS}, input_shape,
                           expected_output_shape=output_shape,
                           expected_num_trainable_weights=3,  # mean, scale_tril, bias
                           expected_num_losses=1)
    assert type(layer.kernel) is bl.TrainableFullCovarianceNormal


def test_the_layers_loss_is_the_kl_over_the_dataset_size():
    layer = bl.DenseReparameterization(2, kernel_initializer=ALIAS, seed=0)
    layer.build((None, 3))
    layer.kernel.raw_scale_tril.assign(tf.random.stateless_normal([21], [0, 1]) * 0.3)
    layer.kernel.mean.assign(tf.random.stateless_normal([3, 2], [0, 2]))
    bl.set_dataset_size(layer, 50)
    expected = tfd.kl_divergence(_tfp_posterior(layer.kernel),
                                 tfd.MultivariateNormalDiag(tf.zeros(6), tf.ones(6))) / 50
    np.testing.assert_allclose(float(sum(layer.losses)), float(expected), rtol=1e-5)


def test_gradients_reach_the_scale_factor_through_samples_and_kl():
    layer = bl.DenseReparameterization(2, kernel_initializer=ALIAS, seed=0)
    x = tf.ones([4, 3])
    for with_kl in (False, True):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(layer(x)))
            if with_kl:
                loss = sum(layer.losses)
        grad = tape.gradient(loss, layer.kernel.raw_scale_tril)
        assert grad is not None and np.abs(grad.numpy()).max() > 0


def _trained_model(seed=0):
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 3)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")
    model = keras.Sequential([
        keras.Input((3,)),
        bl.DenseReparameterization(4, activation="tanh", kernel_initializer=ALIAS, seed=1),
        bl.DenseReparameterization(1, kernel_initializer=ALIAS, seed=2),
    ])
    bl.set_dataset_size(model, len(x))
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    model.fit(x, y, batch_size=16, epochs=3, verbose=0)
    return model, x


def test_a_trained_model_reloads_from_keras_with_the_same_posterior(tmp_path):
    model, x = _trained_model()
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert type(loaded.layers[0].kernel) is bl.TrainableFullCovarianceNormal
    np.testing.assert_array_equal(mean_prediction(loaded, x), mean_prediction(model, x))
    np.testing.assert_allclose(float(sum(loaded.losses)), float(sum(model.losses)), rtol=1e-7)
    for a, b in zip(model.layers, loaded.layers, strict=True):
        np.testing.assert_array_equal(a.kernel.scale_tril().numpy(), b.kernel.scale_tril().numpy())
    with bl.fixed_noise(model, seed=[3, 4]), bl.fixed_noise(loaded, seed=[3, 4]):
        np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(loaded(x)))


@pytest.mark.skipif(not KERAS3, reason="the fresh-process reload is a Keras 3 check")
def test_a_fresh_keras3_process_reloads_it(tmp_path):
    model, x = _trained_model(seed=1)
    assert_reloads_in_a_fresh_process(model, x, tmp_path)


def test_estimators_and_priors_without_a_full_covariance_form_refuse_it_in_one_line():
    with pytest.raises(ValueError, match=r"The flipout estimator needs a posterior with "
                                         r"closed-form factorized moments"):
        bl.DenseFlipout(2, kernel_initializer=ALIAS)(tf.ones([2, 3]))
    with pytest.raises(TypeError, match=r"^Expected a posterior with closed-form factorized "
                                        r"moments for this KL regularizer"):
        regularizers.ScaleMixtureKLDivergence()(_posterior())


@pytest.mark.parametrize("value", [0, 1e-6, -1.0, float("nan"), "0.5", True])
def test_a_bad_initial_stddev_gets_a_one_line_error(value):
    with pytest.raises(ValueError, match=r"^Expected a number greater than 1e-05. Received: "
                                         rf"initial_stddev={value!r}$".replace("(", r"\(")):
        bl.TrainableFullCovarianceNormal(initial_stddev=value)
