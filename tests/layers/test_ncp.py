"""Noise contrastive priors (`bayes_planet.layers.ncp`) and the Bayesian embedding
(`bayes_planet.layers.embeddings`): the contract harness, the perturbations' statistics (fixed
seeds, stated tolerances), the output prior's KL against tfp's, same seed same result, and
one-line errors."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet.layers import keras, posterior_mean
from bayes_planet.layers.testing import run_layer_test

tfd = tfp.distributions


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def test_normal_perturb_contract_and_statistics():
    run_layer_test(bl.NCPNormalPerturb, {"mean": 0.5, "stddev": 2.0}, (4, 3),
                   expected_output_shape=(8, 3), expected_num_trainable_weights=0,
                   run_fit=False)
    x = _data(500, 40)
    out = bl.NCPNormalPerturb(mean=0.5, stddev=2.0, seed=1)(x).numpy()
    np.testing.assert_array_equal(out[:500], x)
    noise = out[500:] - x
    # 20k draws of N(0.5, 2²): standard errors 0.014 (mean) and 0.01 (stddev).
    assert noise.mean() == pytest.approx(0.5, abs=0.06)
    assert noise.std() == pytest.approx(2.0, abs=0.05)


def test_categorical_perturb_redraws_a_share_of_the_entries():
    run_layer_test(bl.NCPCategoricalPerturb, {"input_dim": 5}, input_data=np.zeros((4, 3)),
                   expected_output_shape=(8, 3), run_fit=False)
    x = np.random.default_rng(0).integers(0, 5, (1000, 20))
    out = bl.NCPCategoricalPerturb(5, probs=0.3, seed=2)(x).numpy()
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out[:1000], x)
    flipped = out[1000:]
    assert set(np.unique(flipped)) <= set(range(5))
    # An entry changes with probability 0.3 · 4/5 = 0.24 (20k entries: standard error 0.003).
    assert np.mean(flipped != x) == pytest.approx(0.24, abs=0.015)
    redrawn = flipped[flipped != x]
    # The new categories are uniform (about 4.8k of them: standard error 0.006 a share).
    assert np.bincount(redrawn, minlength=5) / redrawn.size == pytest.approx(np.full(5, 0.2),
                                                                            abs=0.03)
    floats = bl.NCPCategoricalPerturb(5, probs=1.0, seed=2)(x.astype("float32")).numpy()
    assert floats.dtype == np.float32 and np.all(floats == np.round(floats))


def test_same_seed_same_perturbation():
    x = _data(3, 4)
    a, b, c = (bl.NCPNormalPerturb(seed=s) for s in (3, 3, 4))
    first = a(x).numpy()
    np.testing.assert_array_equal(first, b(x))
    assert not np.array_equal(first, c(x))
    second = a(x).numpy()
    np.testing.assert_array_equal(second, b(x))  # second calls: the same new draws
    assert not np.array_equal(first, second)


def test_normal_output_returns_the_first_half_and_the_kl():
    loc, scale = _data(6, 2), np.exp(_data(6, 2, seed=1))
    rv = bl.RandomVariable(tfd.Normal(loc, scale), seed=4)
    layer = bl.NCPNormalOutput(mean=0.3, stddev=2.0)
    out = layer(rv)
    assert isinstance(out, bl.RandomVariable) and out.shape == (3, 2)
    np.testing.assert_array_equal(out.value, rv.value[:3])
    np.testing.assert_allclose(out.distribution.mean(), loc[:3])
    expected = tf.reduce_sum(tfd.kl_divergence(tfd.Normal(0.3, 2.0),
                                               tfd.Normal(loc[3:], scale[3:]))) / 3
    assert len(layer.losses) == 1
    np.testing.assert_allclose(layer.losses[0], expected, rtol=1e-6)
    # A tensor is read as N(m, 1): the KL of the second half's means.
    tensor_layer = bl.NCPNormalOutput(mean=np.zeros(2, np.float32))
    out = tensor_layer(loc)
    np.testing.assert_array_equal(tf.convert_to_tensor(out), loc[:3])
    np.testing.assert_allclose(tensor_layer.losses[0], 0.5 * np.sum(loc[3:] ** 2) / 3,
                               rtol=1e-6)
    config = tensor_layer.get_config()
    assert config["mean"] == [0.0, 0.0]
    assert bl.NCPNormalOutput.from_config(config).stddev == 1.0


def test_ncp_regression_model_trains():
    """Hafner et al.'s model: perturb, a Bayesian mean, the output prior; one gradient step
    reaches every weight."""
    inputs = keras.Input((3,))
    x = bl.NCPNormalPerturb(stddev=0.5, seed=0)(inputs)
    x = keras.layers.Dense(8, activation="relu")(x)
    means = bl.DenseReparameterization(1, seed=1)(x)
    model = keras.Model(inputs, means)
    output_prior = bl.NCPNormalOutput(stddev=1.0)
    features, labels = _data(16, 3), _data(16, 1, seed=2)
    with tf.GradientTape() as tape:
        rv = output_prior(model(features))
        nll = -tf.reduce_mean(tfd.Normal(tf.convert_to_tensor(rv), 1.0).log_prob(labels))
        loss = nll + sum(model.losses) / 16 + sum(output_prior.losses)
    grads = tape.gradient(loss, model.trainable_weights)
    assert rv.shape == (16, 1)
    assert all(g is not None and np.all(np.isfinite(g)) for g in grads)


def test_embedding_contract_and_draws():
    run_layer_test(bl.EmbeddingReparameterization, {"input_dim": 7, "output_dim": 3},
                   input_data=np.arange(8).reshape(4, 2) % 7, expected_output_shape=(4, 2, 3),
                   expected_num_trainable_weights=2, expected_num_losses=1, run_jit=True)
    layer = bl.EmbeddingReparameterization(7, 3, seed=0)
    ids = np.array([[0, 3, 3]])
    layer(ids)
    layer.embeddings.raw_stddev.assign(tf.fill([7, 3], -1.0))
    first, second = layer(ids).numpy(), layer(ids).numpy()
    np.testing.assert_array_equal(first[0, 1], first[0, 2])  # one matrix per call
    assert not np.array_equal(first, second)
    with posterior_mean(layer):
        np.testing.assert_array_equal(layer(ids)[0], tf.gather(layer.embeddings.mean, [0, 3, 3]))
    plain = bl.EmbeddingReparameterization(7, 3, "uniform", None, mask_zero=True)
    np.testing.assert_array_equal(plain(ids), plain(ids))
    assert plain.losses == []
    np.testing.assert_array_equal(plain.compute_mask(ids), [[False, True, True]])


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^Expected a positive standard deviation\. Received: "
                                         r"stddev=0$"):
        bl.NCPNormalPerturb(stddev=0)
    with pytest.raises(ValueError, match=r"^Expected a positive integer\. Received: "
                                         r"input_dim=0$"):
        bl.NCPCategoricalPerturb(0)
    with pytest.raises(ValueError, match=r"^Expected a probability in \[0, 1\]\. Received: "
                                         r"probs=1\.5$"):
        bl.NCPCategoricalPerturb(3, probs=1.5)
    with pytest.raises(TypeError, match="NCPNormalPerturb expects float inputs"):
        bl.NCPNormalPerturb()(np.zeros((2, 2), np.int32))
    with pytest.raises(ValueError, match="NCPNormalOutput needs a batch of predictions"):
        bl.NCPNormalOutput()(bl.RandomVariable(tfd.Normal(0.0, 1.0)))
    with pytest.raises(ValueError, match=r"^Expected a positive integer\. Received: "
                                         r"output_dim=0$"):
        bl.EmbeddingReparameterization(3, 0)
