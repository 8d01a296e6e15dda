"""`DenseMultihead`, `DepthwiseConv2DBatchEnsemble` and `CondDense`.

The contract harness; each head, member and example against the plain computation it
stands for (numpy or ``tf.nn``); bad input.
"""

import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet.layers.testing import normal_array, run_layer_test


def test_multihead_contract():
    run_layer_test(bl.DenseMultihead, {"units": 3, "ensemble_size": 2, "activation": "relu"},
                   input_shape=(4, 5), expected_output_shape=(4, 2, 3),
                   expected_num_trainable_weights=2, expected_num_losses=0)


def test_multihead_heads_are_column_blocks():
    layer = bl.DenseMultihead(3, ensemble_size=4)
    x = normal_array(2, 6, 5, seed=1)  # middle axes are kept
    out = layer(x).numpy()
    assert out.shape == (2, 6, 4, 3)
    kernel, bias = np.asarray(layer.kernel), np.asarray(layer.bias)
    for head in range(4):
        cols = slice(3 * head, 3 * (head + 1))
        np.testing.assert_allclose(out[..., head, :], x @ kernel[:, cols] + bias[cols],
                                   rtol=1e-5, atol=1e-6)
    assert layer.get_config()["units"] == 3


def test_depthwise_contract():
    # depthwise kernel, α, γ, bias.
    run_layer_test(bl.DepthwiseConv2DBatchEnsemble,
                   {"kernel_size": 2, "depth_multiplier": 2, "ensemble_size": 2},
                   input_shape=(4, 5, 5, 3), expected_output_shape=(4, 4, 4, 6),
                   expected_num_trainable_weights=4, expected_num_losses=0)


def test_depthwise_members_against_tf_nn():
    E, rows = 3, 2
    layer = bl.DepthwiseConv2DBatchEnsemble(3, padding="same", depth_multiplier=2,
                                            ensemble_size=E,
                                            bias_initializer="glorot_uniform")
    x = normal_array(E * rows, 6, 5, 4, seed=2)
    out = layer(x).numpy()
    kernel = np.asarray(layer.shared_kernel)
    alpha, gamma, bias = (np.asarray(w) for w in (layer.alpha, layer.gamma, layer.bias))
    for e in range(E):
        block = x[e * rows:(e + 1) * rows] * alpha[e]
        expected = tf.nn.depthwise_conv2d(block, kernel, (1, 1, 1, 1), "SAME").numpy()
        expected = expected * gamma[e] + bias[e]
        np.testing.assert_allclose(out[e * rows:(e + 1) * rows], expected, rtol=1e-5,
                                   atol=1e-5)


def test_depthwise_bad_input():
    with pytest.raises(ValueError, match="Expected data_format='channels_last'"):
        bl.DepthwiseConv2DBatchEnsemble(2, data_format="channels_first")
    with pytest.raises(ValueError, match="Received: ensemble_size=0"):
        bl.DepthwiseConv2DBatchEnsemble(2, ensemble_size=0)
    with pytest.raises(ValueError, match="divisible by ensemble_size"):
        bl.DepthwiseConv2DBatchEnsemble(2, ensemble_size=2)(normal_array(3, 4, 4, 2))


def test_cond_dense_contract():
    run_layer_test(bl.CondDense, {"units": 4, "num_experts": 3},
                   input_shape=(5, 6),
                   call_kwargs={"routing_weights": normal_array(5, 3, seed=4)},
                   expected_output_shape=(5, 4), expected_num_trainable_weights=2,
                   run_save=False)  # (a keyword tensor: test_cond_dense_save_and_load)


def test_cond_dense_is_the_routed_mixture_of_experts():
    layer = bl.CondDense(4, num_experts=3, bias_initializer="glorot_uniform")
    x, routing = normal_array(5, 6, seed=1), np.abs(normal_array(5, 3, seed=2))
    out = layer(x, routing).numpy()
    kernel, bias = np.asarray(layer.kernel), np.asarray(layer.bias)
    for i in range(5):
        expected = x[i] @ np.tensordot(routing[i], kernel, 1) + routing[i] @ bias
        np.testing.assert_allclose(out[i], expected, rtol=1e-5, atol=1e-5)
    # One-hot routing picks one expert's Dense.
    onehot = np.eye(3, dtype=np.float32)[[0, 2, 1, 1, 0]]
    picked = layer(x, onehot).numpy()
    for i, k in enumerate([0, 2, 1, 1, 0]):
        np.testing.assert_allclose(picked[i], x[i] @ kernel[k] + bias[k], rtol=1e-5,
                                   atol=1e-5)


def test_cond_dense_experts_start_at_their_own_scale():
    # Each expert is drawn at its own shape [in, units]: Glorot's limit sqrt(6 / (in + out)).
    init = bl.keras.initializers.GlorotUniform(seed=1)
    layer = bl.CondDense(40, num_experts=8, kernel_initializer=init)
    layer(normal_array(2, 60), normal_array(2, 8))
    kernel = np.asarray(layer.kernel)
    limit = np.sqrt(6.0 / 100.0)
    assert kernel.max() <= limit and kernel.max() > 0.95 * limit
    assert not np.array_equal(kernel[0], kernel[1])


def test_cond_dense_save_and_load():
    inputs = [bl.keras.Input(shape=(6,), batch_size=5), bl.keras.Input(shape=(3,), batch_size=5)]
    model = bl.keras.Model(inputs, bl.CondDense(4, num_experts=3, name="cond")(*inputs))
    data = [normal_array(5, 6, seed=1), normal_array(5, 3, seed=2)]
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("m.keras", "m.h5"):
            model.save(os.path.join(tmp, name))
            loaded = bl.keras.models.load_model(os.path.join(tmp, name))
            assert isinstance(loaded.get_layer("cond"), bl.CondDense)
            np.testing.assert_allclose(loaded(data).numpy(), model(data).numpy(), rtol=1e-6)


def test_cond_dense_bad_input():
    with pytest.raises(ValueError, match="Expected a positive integer. Received: num_experts=0"):
        bl.CondDense(3, num_experts=0)
    with pytest.raises(ValueError, match="routing weights of width num_experts=2"):
        bl.CondDense(3, num_experts=2)(normal_array(4, 5), normal_array(4, 3))
