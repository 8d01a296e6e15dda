"""compat.edward2's BayesianLinearModel and TrainableNormalKLDivergenceStdDev: edward2's names
and arguments over the library's."""

import numpy as np
import pytest

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl
from bayes_planet.layers import regularizers


def test_bayesian_linear_model_is_the_librarys():
    assert ed.layers.BayesianLinearModel is bl.BayesianLinearModel
    model = ed.layers.BayesianLinearModel(noise_variance=0.01)
    x = np.random.default_rng(0).normal(size=(6, 2)).astype(np.float32)
    model.fit(x, x @ np.array([1.0, -2.0], np.float32))
    out = model(np.eye(2, dtype=np.float32))
    np.testing.assert_allclose(out.distribution.mean().numpy(), [1.0, -2.0], atol=0.05)


def test_trainable_prior_stddev_takes_edward2_arguments():
    reg = ed.regularizers.TrainableNormalKLDivergenceStdDev(seed=3)
    assert isinstance(reg, regularizers.TrainableNormalKLDivergenceStdDev)
    posterior = ed.Independent(ed.Normal(loc=np.zeros(3, np.float32), scale=1.0).distribution,
                               reinterpreted_batch_ndims=1)
    assert float(reg(posterior)) >= 0.0
    # edward2's `stddev` is the unconstrained variable; its constraint gives the prior's.
    np.testing.assert_allclose(reg.stddev_constraint(reg.stddev).numpy(),
                               regularizers.TrainableNormalKLDivergenceStdDev.stddev.fget(reg))
    assert isinstance(ed.regularizers.get("trainable_normal_kl_divergence_stddev"),
                      ed.regularizers.TrainableNormalKLDivergenceStdDev)
    for kwargs, message in [({"stddev_regularizer": "l2"}, "stddev_regularizer='l2'"),
                            ({"stddev_constraint": "exp"}, "stddev_constraint='exp'")]:
        with pytest.raises(ValueError, match=rf"implements .* only\. Received: {message}$"):
            ed.regularizers.TrainableNormalKLDivergenceStdDev(**kwargs)


def test_add_weight_gives_a_keras_layer_posteriors_and_trainable_priors():
    """edward2's ``utils.add_weight(tf.keras.layers.Dense)``: a trainable initializer becomes
    the layer's posterior (its variables the layer's, a fresh draw at each call), a trainable
    regularizer's variables are made with the weight; on a plain weight that prior's loss is
    the negative log density (MAP)."""
    import tensorflow as tf

    dense = ed.layers.utils.add_weight(tf.keras.layers.Dense)
    initializer = ed.initializers.get("trainable_normal")
    layer = dense(2, kernel_initializer=initializer, seed=1)
    x = tf.ones([1, 3])
    first, second = layer(x), layer(x)
    assert initializer.built and all(any(w is v for v in layer.weights)
                                     for w in initializer.weights)
    assert np.abs(first.numpy() - second.numpy()).max() > 0  # Two draws of the kernel.
    prior = ed.regularizers.get("trainable_normal_kl_divergence_stddev")
    plain = dense(2, kernel_regularizer=prior)
    plain(x)
    assert prior.built and any(w is prior.raw_stddev for w in plain.weights)
    kernel = plain.kernel.numpy()
    sigma = tf.nn.softplus(prior.raw_stddev).numpy()
    want = np.sum(0.5 * (kernel / sigma) ** 2 + np.log(sigma) + 0.5 * np.log(2 * np.pi))
    np.testing.assert_allclose(float(tf.add_n(plain.losses)), want, rtol=1e-5)
