"""`regularizers.TrainableNormalKLDivergenceStdDev`: the KL against tensorflow-probability's,
its stddevs trained with the layer it regularizes, the dataset size and KL scale of the
library's KL regularizers, and its config."""

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet.layers import regularizers

tfd = tfp.distributions


def test_kl_is_tfps_against_the_trainable_prior():
    reg = regularizers.TrainableNormalKLDivergenceStdDev(mean=0.3, scale_factor=2.0)
    loc = np.array([0.1, -0.4, 1.2], np.float32)
    scale = np.array([0.5, 1.5, 0.2], np.float32)
    posterior = tfd.Normal(loc, scale)
    value = reg(posterior)
    prior_stddev = tf.nn.softplus(reg.raw_stddev).numpy()
    assert reg.raw_stddev.shape == (3,) and np.allclose(prior_stddev, 1.0, atol=0.35)
    want = 2.0 * tf.reduce_sum(tfd.kl_divergence(posterior, tfd.Normal(0.3, prior_stddev)))
    np.testing.assert_allclose(value.numpy(), want.numpy(), rtol=1e-5)
    np.testing.assert_allclose(reg.stddev.numpy(), prior_stddev)


def test_the_prior_stddevs_train_with_the_layer_toward_the_posteriors():
    """Minimizing the KL alone over the prior's stddev σ gives σ² = s² + (m − mean)² per
    weight: 300 Adam steps on the KL of a dense layer's kernel bring σ within 2 % of it."""
    reg = regularizers.TrainableNormalKLDivergenceStdDev()
    layer = bl.DenseReparameterization(2, kernel_regularizer=reg, seed=0)
    x = tf.ones([1, 3])
    layer(x)
    assert any(v is reg.raw_stddev for v in layer.trainable_variables)
    assert bl.set_dataset_size(layer, 10) == 1 and reg.dataset_size == 10
    optimizer = tf.keras.optimizers.Adam(0.05)
    for _ in range(300):
        with tf.GradientTape() as tape:
            layer(x)
            loss = tf.add_n(layer.losses)
        grad = tape.gradient(loss, [reg.raw_stddev])
        optimizer.apply_gradients(zip(grad, [reg.raw_stddev], strict=True))
    loc, scale = layer.kernel.moments()
    want = np.sqrt(scale.numpy() ** 2 + loc.numpy() ** 2)
    np.testing.assert_allclose(reg.stddev.numpy(), want, rtol=0.02)


def test_config_round_trip():
    reg = regularizers.TrainableNormalKLDivergenceStdDev(mean=1.0, scale_factor=0.5,
                                                         dataset_size=7)
    again = regularizers.TrainableNormalKLDivergenceStdDev.from_config(reg.get_config())
    assert (again.mean, again.scale_factor, again.dataset_size) == (1.0, 0.5, 7)
    assert isinstance(regularizers.get("trainable_normal_kl_divergence_stddev"),
                      regularizers.TrainableNormalKLDivergenceStdDev)
