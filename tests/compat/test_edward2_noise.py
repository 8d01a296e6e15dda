"""compat.edward2's noise contrastive priors and Bayesian embedding: edward2's names,
arguments and defaults over the library's."""

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl


def test_ncp_layers_take_edward2_arguments():
    perturb = ed.layers.NCPNormalPerturb(0.0, 2.0, 3)  # mean, stddev, seed
    assert isinstance(perturb, bl.NCPNormalPerturb) and perturb.seed == 3
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(perturb(x), bl.NCPNormalPerturb(0.0, 2.0, seed=3)(x))
    categorical = ed.layers.NCPCategoricalPerturb(4)
    assert categorical.probs == 0.1 and categorical.input_dim == 4
    output = ed.layers.NCPNormalOutput(mean=1.0)
    features = ed.Normal(loc=tf.zeros([4, 1]), scale=1.0)
    out = output(features)
    assert out.shape == (2, 1) and len(output.losses) == 1
    np.testing.assert_allclose(output.losses[0], 0.5 * 2 / 2, rtol=1e-6)  # KL(N(1,1)||N(0,1))


def test_embedding_takes_edward2_arguments():
    layer = ed.layers.EmbeddingReparameterization(6, 3)
    assert isinstance(layer, bl.EmbeddingReparameterization)
    assert isinstance(layer.embeddings_initializer, ed.initializers.TrainableNormal)
    assert layer(np.array([[1, 2]])).shape == (1, 2, 3) and len(layer.losses) == 1
    plain = ed.layers.EmbeddingReparameterization(6, 3, "uniform", None, None, None, True)
    assert plain.mask_zero and plain.losses == []
    with pytest.raises(ValueError, match=r"Expected input_length in \(None,\)\. Received: "
                                         r"input_length=5"):
        ed.layers.EmbeddingReparameterization(6, 3, input_length=5)
    layer.call_weights()
