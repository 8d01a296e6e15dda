"""edward2's ``DenseHyperBatchEnsemble`` and ``Conv2DHyperBatchEnsemble`` through
`bayes_planet.compat.edward2`: ``lambda_key_to_index`` (and its layer-group names), edward2's
argument order and defaults, its sublayer views and ``bias``, the refused arguments, the
config round trip."""

import numpy as np
import pytest

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl
from bayes_planet.compat.edward2.layers.hyper_batch_ensemble import layer_name_identifier


def _inputs(rows=6, width=5, columns=3, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((rows, 4)).astype(np.float32),
            rng.uniform(size=(rows, columns)).astype(np.float32),
            rng.standard_normal((rows, 2 * width)).astype(np.float32)]


def test_layer_name_identifier():
    assert layer_name_identifier("conv_2") == "conv_2"
    assert layer_name_identifier("group_1/conv_3/") == "group_1"
    assert layer_name_identifier("a/b/c") == "ac"


def test_lambda_key_to_index_names_the_columns():
    keys = {"head_l2_kernel": 2, "head_l2_bias": 0}
    layer = ed.layers.DenseHyperBatchEnsemble(5, keys, ensemble_size=2, name="head")
    assert isinstance(layer, bl.DenseHyperBatchEnsemble)
    assert (layer.l2_kernel_index, layer.l2_bias_index) == (2, 0)
    data = _inputs()
    layer(data)
    # The library layer with the same columns and weights: the same outputs and penalty.
    twin = bl.DenseHyperBatchEnsemble(5, ensemble_size=2, l2_kernel_index=2, l2_bias_index=0)
    twin(data)
    twin.set_weights(layer.get_weights())
    np.testing.assert_allclose(twin(data).numpy(), layer(data).numpy(), rtol=1e-6)
    np.testing.assert_allclose(float(twin.losses[0]), float(layer.losses[0]), rtol=1e-6)
    with pytest.raises(KeyError, match="head_l2_bias"):
        ed.layers.DenseHyperBatchEnsemble(5, {"head_l2_kernel": 0}, name="head")
    # Without a bias only the kernel's column is needed.
    ed.layers.DenseHyperBatchEnsemble(5, {"head_l2_kernel": 0}, use_bias=False, name="head")


def test_edward2_defaults_and_views():
    layer = ed.layers.DenseHyperBatchEnsemble(5, {"d_l2_kernel": 0, "d_l2_bias": 1},
                                              ensemble_size=2, name="d")
    layer(_inputs(columns=2))
    np.testing.assert_array_equal(np.asarray(layer.dense.alpha), 1.0)  # edward2's 'ones'
    assert layer.dense.kernel is layer.kernel
    assert layer.dense.ensemble_bias is bl.DenseHyperBatchEnsemble.bias.fget(layer)
    assert layer.bias is layer.hyper_bias  # edward2's bias: the modulated one
    assert layer.delta_dense.kernel is layer.hyper_kernel
    tied = ed.layers.DenseHyperBatchEnsemble(5, {"t_l2_kernel": 0, "t_l2_bias": 1},
                                             ensemble_size=2, name="t",
                                             fast_weights_eq_contraint=True)
    tied(_inputs(columns=2))
    assert tied.delta_dense.alpha is tied.dense.alpha and tied.fast_weights_eq_contraint


@pytest.mark.parametrize("kwargs, message", [
    ({"rank": 2}, "rank=1 only"),
    ({"kernel_regularizer": "l2"}, "kernel_regularizer=None only"),
    ({"bias_regularizer": "l2"}, "bias_regularizer=None only"),
])
def test_refused_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ed.layers.DenseHyperBatchEnsemble(5, {"x_l2_kernel": 0, "x_l2_bias": 1}, name="x",
                                          **kwargs)


def test_conv_argument_order_and_config_round_trip():
    keys = {"c_l2_kernel": 0, "c_l2_bias": 1}
    layer = ed.layers.Conv2DHyperBatchEnsemble(keys, 3, 2, ensemble_size=2, padding="same",
                                               name="c", fast_weights_eq_contraint=True)
    assert (layer.filters, layer.kernel_size, layer.padding) == (3, (2, 2), "same")
    x = np.random.default_rng(0).standard_normal((4, 5, 5, 2)).astype(np.float32)
    lam = np.full((4, 2), 0.5, np.float32)
    e = np.ones((4, 6), np.float32)
    out = layer([x, lam, e])
    assert out.shape == (4, 5, 5, 3)
    assert layer.conv2d.kernel is layer.kernel and layer.delta_conv2d.alpha is layer.alpha
    config = layer.get_config()
    assert config["lambda_key_to_index"] == keys and config["fast_weights_eq_contraint"]
    assert "l2_kernel_index" not in config
    clone = ed.layers.Conv2DHyperBatchEnsemble.from_config(config)
    assert clone.get_config() == config and clone.shared_fast_weights
