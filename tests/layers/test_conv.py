"""The Bayesian convolutions (`bayes_planet.layers.conv`): contract, equivalence with Keras'
Conv2D at zero variance, variational dropout, and the paper's drop-in CNN trained with fit."""

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers.testing import run_layer_test
from tests.layers._families import CONV1D, CONV2D, zero_variance_kernel


@pytest.mark.parametrize("cls", CONV2D, ids=lambda c: c.__name__)
def test_conv2d_contract(cls):
    run_layer_test(cls, {"filters": 3, "kernel_size": 3, "strides": 2, "padding": "same"},
                   (2, 8, 8, 2), expected_output_shape=(2, 4, 4, 3),
                   expected_num_trainable_weights=3, expected_num_non_trainable_weights=1,
                   expected_num_losses=1)


@pytest.mark.parametrize("cls", CONV1D, ids=lambda c: c.__name__)
def test_conv1d_contract(cls):
    run_layer_test(cls, {"filters": 4, "kernel_size": 3, "padding": "causal"}, (2, 9, 2),
                   expected_output_shape=(2, 9, 4), expected_num_trainable_weights=3,
                   expected_num_losses=1, run_save=False, run_fit=False)


@pytest.mark.parametrize("cls", CONV2D, ids=lambda c: c.__name__)
def test_zero_variance_conv_equals_keras_conv(cls):
    x = np.random.default_rng(2).standard_normal((2, 6, 6, 3)).astype("float32")
    ref = keras.layers.Conv2D(4, 3, padding="same")
    expected = ref(x).numpy()
    layer = cls(4, 3, padding="same", kernel_initializer=zero_variance_kernel(), seed=3)
    layer(x)
    layer.kernel.mean.assign(ref.kernel)
    layer.bias.assign(ref.bias)
    np.testing.assert_allclose(layer(x).numpy(), expected, atol=1e-5)


def test_drop_in_cnn_trains_on_digits_with_model_fit():
    """Paper Fig. 4: the same Sequential CNN with Conv2D or Conv2DFlipout trains via fit."""
    from bayes_planet.layers.demo import build_cnn, load_digits_split

    (x_train, y_train), (x_test, y_test) = load_digits_split(seed=0)
    accuracies = {}
    for conv in (keras.layers.Conv2D, bl.Conv2DFlipout):
        keras.utils.set_random_seed(0)
        model = build_cnn(conv, dataset_size=len(x_train))
        model.fit(x_train, y_train, epochs=15, batch_size=64, verbose=0)
        accuracies[conv.__name__] = model.evaluate(x_test, y_test, verbose=0)[1]
    # Measured 0.97-0.98 (Conv2D) and 0.95-0.97 (Conv2DFlipout) on this split.
    assert accuracies["Conv2D"] >= 0.93, accuracies
    assert accuracies["Conv2DFlipout"] >= 0.90, accuracies


CONV_VD = [(bl.Conv2DVariationalDropout, (2, 8, 8, 2)), (bl.Conv1DVariationalDropout, (2, 9, 2))]


@pytest.mark.parametrize("cls, shape", CONV_VD, ids=lambda c: getattr(c, "__name__", ""))
def test_conv_variational_dropout_contract(cls, shape):
    out_shape = shape[:1] + tuple((d + 1) // 2 for d in shape[1:-1]) + (3,)
    run_layer_test(cls, {"filters": 3, "kernel_size": 3, "strides": 2, "padding": "same"},
                   shape, expected_output_shape=out_shape, expected_num_trainable_weights=3,
                   expected_num_non_trainable_weights=1, expected_num_losses=1)


@pytest.mark.parametrize("cls, shape", CONV_VD, ids=lambda c: getattr(c, "__name__", ""))
def test_conv_variational_dropout_kl_is_the_log_uniform_kl(cls, shape):
    """The loss is Molchanov et al.'s log-uniform KL approximation of the kernel, and
    equals the dense layer's for the same posterior (the KL is per weight)."""
    layer = cls(3, 3, padding="same", seed=0)
    layer(tf.ones(shape))
    assert isinstance(layer.kernel_regularizer, bl.LogUniformKLDivergence)
    (loss,) = layer.losses
    expected = bl.LogUniformKLDivergence()(layer.kernel)
    np.testing.assert_allclose(loss.numpy(), expected.numpy(), rtol=1e-6)
    # Closed form check of the sum: per-weight -KL from the same log α.
    from bayes_planet.layers.regularizers import log_alpha_from_moments
    log_alpha = log_alpha_from_moments(layer.kernel.loc(), layer.kernel.scale()).numpy()
    k1, k2, k3 = 0.63576, 1.87320, 1.48695  # Molchanov et al. (2017), eq. 14
    neg_kl = (k1 / (1 + np.exp(-(k2 + k3 * log_alpha))) - 0.5 * np.log1p(np.exp(-log_alpha))
              - k1)
    np.testing.assert_allclose(loss.numpy(), -neg_kl.sum(), rtol=1e-4)


def test_conv_variational_dropout_training_noise_and_pruned_inference():
    """Training: local reparameterization (MC moments of one output pixel match
    N(conv(x, θ), conv(x², σ²)) within 4 standard errors / 10 %); inference: the mean
    kernel with log α > 3 entries pruned, deterministic."""
    layer = bl.Conv2DVariationalDropout(2, 3, seed=1)
    x = tf.random.stateless_normal([1, 3, 3, 2], [4, 5])
    layer(x)
    n = 3000
    draws = layer(tf.repeat(x, n, 0), training=True).numpy()[:, 0, 0, :]  # one per row
    loc, scale = layer.kernel.loc(), layer.kernel.scale()
    mean = (tf.nn.conv2d(x, loc, 1, "VALID") + layer.bias).numpy()[0, 0, 0]
    var = tf.nn.conv2d(tf.square(x), tf.square(scale), 1, "VALID").numpy()[0, 0, 0]
    assert np.all(np.abs(draws.mean(0) - mean) < 4 * np.sqrt(var / n)), (draws.mean(0), mean)
    np.testing.assert_allclose(draws.var(0), var, rtol=0.10)
    first, second = layer(x, training=False).numpy(), layer(x, training=False).numpy()
    np.testing.assert_array_equal(first, second)
    kernel = layer.kernel.mean.numpy()
    kernel[0, 0, 0, 0] = 1e-4  # log α > 3: pruned at inference
    layer.kernel.mean.assign(kernel)
    from bayes_planet.layers.regularizers import log_alpha_from_moments
    keep = log_alpha_from_moments(kernel, layer.kernel.scale()).numpy() < 3.0
    assert not keep[0, 0, 0, 0] and keep.mean() > 0.5
    expected = tf.nn.conv2d(x, np.where(keep, kernel, 0.0), 1, "VALID") + layer.bias
    np.testing.assert_allclose(layer(x, training=False).numpy(), expected.numpy(), rtol=1e-5,
                               atol=1e-6)
