"""Every layer family passes float64 through: ``dtype='float64'`` layers take float64
inputs, compute in float64 (including default sub-networks such as RealNVP's coupling
MLP from a list of sizes and RevNet's residual MLPs) and return float64, with finite
float64 gradients for every trainable variable."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet._keras import keras

tfd = tfp.distributions
F64 = {"dtype": "float64"}


def _base_rv(shape):
    return bl.RandomVariable(tfd.Normal(tf.zeros(shape, tf.float64),
                                        tf.constant(1.0, tf.float64)))


# name -> (make layer, input shape, call). ``call(layer, x)`` returns the output.
def _plain(layer, x):
    return layer(x)


def _flow(layer, x):
    rv = layer(_base_rv(x.shape))
    return rv.distribution.log_prob(x)  # through the flow's reverse + log-det


def _rnn(cell, x):
    return keras.layers.RNN(cell, dtype="float64")(x)


def _attend(layer, x):
    return layer(x, x)


CASES = {
    "DenseReparameterization": (lambda: bl.DenseReparameterization(3, **F64), (4, 5), _plain),
    "DenseFlipout": (lambda: bl.DenseFlipout(3, **F64), (4, 5), _plain),
    "DenseLocalReparameterization": (lambda: bl.DenseLocalReparameterization(3, **F64),
                                     (4, 5), _plain),
    "DenseVariationalDropout": (lambda: bl.DenseVariationalDropout(3, **F64), (4, 5),
                                lambda layer, x: layer(x, training=True)),
    "DenseDVI": (lambda: bl.DenseDVI(3, "relu", **F64), (4, 5), _plain),
    "Conv1DFlipout": (lambda: bl.Conv1DFlipout(3, 2, **F64), (2, 6, 2), _plain),
    "Conv2DReparameterization": (lambda: bl.Conv2DReparameterization(3, 2, **F64),
                                 (2, 5, 5, 2), _plain),
    "Conv2DLocalReparameterization": (lambda: bl.Conv2DLocalReparameterization(3, 2, **F64),
                                      (2, 5, 5, 2), _plain),
    "Conv2DVariationalDropout": (lambda: bl.Conv2DVariationalDropout(3, 2, **F64),
                                 (2, 5, 5, 2), lambda layer, x: layer(x, training=True)),
    "Conv1DRank1": (lambda: bl.Conv1DRank1(3, 2, ensemble_size=2, **F64), (2, 6, 2), _plain),
    "Conv2DRank1": (lambda: bl.Conv2DRank1(3, 2, ensemble_size=2, **F64), (2, 5, 5, 2),
                    _plain),
    "Conv2DBatchEnsemble": (lambda: bl.Conv2DBatchEnsemble(3, 2, ensemble_size=2, **F64),
                            (2, 5, 5, 2), _plain),
    "Conv1DBatchEnsemble": (lambda: bl.Conv1DBatchEnsemble(3, 2, ensemble_size=2, **F64),
                            (2, 6, 2), _plain),
    "LSTMCellFlipout": (lambda: bl.LSTMCellFlipout(3, **F64), (2, 4, 3), _rnn),
    "GRUCellReparameterization": (lambda: bl.GRUCellReparameterization(3, **F64), (2, 4, 3),
                                  _rnn),
    "LSTMCellRank1": (lambda: bl.LSTMCellRank1(3, ensemble_size=2, **F64), (2, 4, 3), _rnn),
    "GRUCellRank1": (lambda: bl.GRUCellRank1(3, ensemble_size=2, **F64), (2, 4, 3), _rnn),
    "GaussianProcess": (lambda: bl.GaussianProcess(2, **F64), (5, 2), _plain),
    "SparseGaussianProcess": (lambda: bl.SparseGaussianProcess(2, 3, **F64), (5, 2), _plain),
    "RandomFourierFeatures": (lambda: bl.RandomFourierFeatures(2, 8, **F64), (5, 2), _plain),
    "RandomFeatureGaussianProcess": (
        lambda: bl.RandomFeatureGaussianProcess(2, 8, mean_field_factor=1.0, **F64), (5, 2),
        _plain),
    "SpectralNormalization(Dense)": (
        lambda: bl.SpectralNormalization(keras.layers.Dense(3, **F64)), (4, 5),
        lambda layer, x: layer(x, training=True)),
    "SpectralNormalizationConv2D": (
        lambda: bl.SpectralNormalizationConv2D(keras.layers.Conv2D(3, 2, **F64)),
        (2, 5, 5, 2), lambda layer, x: layer(x, training=True)),
    "Normal": (lambda: bl.Normal(2, **F64), (4, 3), _plain),
    "Bernoulli": (lambda: bl.Bernoulli(2, **F64), (4, 3), _plain),
    "Categorical": (lambda: bl.Categorical(3, **F64), (4, 3), _plain),
    "MixtureNormal": (lambda: bl.MixtureNormal(2, num_components=2, **F64), (4, 3), _plain),
    "MixtureLogistic+Discretize": (
        lambda: keras.Sequential([bl.MixtureLogistic(2, num_components=2, **F64),
                                  bl.Discretize(8, **F64)]), (4, 3),
        lambda layer, x: layer(x).distribution.log_prob(tf.ones([4, 2], tf.float64))),
    "RealNVP(list)": (lambda: bl.RealNVP([8], **F64), (4, 6), _flow),
    "RealNVP(list)+Reverse": (lambda: bl.Reverse(bl.RealNVP([8], **F64)), (4, 6), _flow),
    "Reverse(ActNorm) on a tensor": (lambda: bl.Reverse(bl.ActNorm(**F64)), (4, 6), _plain),
    "Permutation": (lambda: bl.Permutation(**F64), (4, 6), _flow),
    "ActNorm": (lambda: bl.ActNorm(**F64), (4, 6), _flow),
    "MADE": (lambda: bl.MADE([8], units=2, **F64), (4, 6), _plain),
    "RevNetBlock(default f, g)": (lambda: bl.RevNetBlock(hidden_units=8, **F64), (4, 6),
                                  _plain),
    "RevNetSequence(default blocks)": (
        lambda: bl.RevNetSequence(num_blocks=2, hidden_units=8, **F64), (4, 6), _plain),
    "VectorQuantizer": (lambda: bl.VectorQuantizer(4, **F64), (4, 3), _plain),
    "EinsumDenseFlipout": (lambda: bl.EinsumDenseFlipout("ab,bc->ac", 3, **F64), (4, 5),
                           _plain),
    "MultiHeadAttentionReparameterization": (
        lambda: bl.MultiHeadAttentionReparameterization(2, 3, **F64), (2, 4, 6), _attend),
    "TransformerBlock": (lambda: bl.TransformerBlock(2, 3, 8, **F64), (2, 4, 6), _plain),
    "MCDropout+Dense": (lambda: keras.Sequential([bl.MCDropout(0.3, seed=0, **F64),
                                                  keras.layers.Dense(3, **F64)]), (4, 5), _plain),
    "EinsumDenseRank1": (lambda: bl.EinsumDenseRank1("abc,cd->abd", (None, 3), bias_axes="d",
                                                     ensemble_size=2, **F64), (2, 4, 5), _plain),
    "MultiHeadAttentionRank1": (
        lambda: bl.MultiHeadAttentionRank1(2, 3, ensemble_size=2, **F64), (2, 4, 6), _attend),
}


@pytest.mark.parametrize("name", list(CASES))
def test_layer_family_in_float64(name):
    make, shape, call = CASES[name]
    layer = make()
    x = tf.constant(np.random.default_rng(0).standard_normal(shape), tf.float64)
    with tf.GradientTape() as tape:
        out = tf.convert_to_tensor(call(layer, x))
        loss = tf.reduce_sum(tf.square(out)) + sum(
            tf.reduce_sum(tf.cast(term, tf.float64)) for term in layer.losses)
    assert out.dtype == tf.float64, out.dtype
    assert np.all(np.isfinite(out.numpy()))
    variables = layer.trainable_variables
    assert variables or name == "Permutation"  # a fixed permutation has no parameters
    assert all(v.dtype == tf.float64 for v in variables), [
        (v.name, v.dtype.name) for v in variables if v.dtype != tf.float64]
    grads = tape.gradient(loss, variables)
    assert not variables or any(g is not None for g in grads)
    for g in grads:
        if g is not None:
            g = tf.convert_to_tensor(g)
            assert g.dtype == tf.float64 and np.all(np.isfinite(g.numpy()))
