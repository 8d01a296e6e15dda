"""edward2's ``DenseMultihead``, ``CondDense`` and ``DepthwiseConv2DBatchEnsemble`` through
`bayes_planet.compat.edward2`: edward2's defaults, names and the shared op its loops call."""

import numpy as np

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl
from bayes_planet.layers.testing import normal_array


def test_dense_multihead_defaults_to_one_head():
    layer = ed.layers.DenseMultihead(3)
    assert isinstance(layer, bl.DenseMultihead) and layer.ensemble_size == 1
    assert layer(normal_array(2, 4)).shape == (2, 1, 3)
    assert ed.layers.DenseMultihead(3, 2)(normal_array(2, 4)).shape == (2, 2, 3)


def test_cond_dense_names():
    layer = ed.layers.CondDense(4, 2)
    assert isinstance(layer, bl.CondDense) and layer.num_experts == 2
    out = layer(normal_array(3, 5), np.full((3, 2), 0.5, np.float32))
    assert out.shape == (3, 4)
    assert layer.cond_dense_kernel is layer.kernel and layer.cond_dense_bias is layer.bias


def test_depthwise_batch_ensemble_edward2_view():
    layer = ed.layers.DepthwiseConv2DBatchEnsemble(2, 2)  # kernel_size, ensemble_size
    assert isinstance(layer, bl.DepthwiseConv2DBatchEnsemble) and layer.ensemble_size == 2
    x = normal_array(4, 5, 5, 3, seed=1)
    out = layer(x).numpy()
    np.testing.assert_array_equal(np.asarray(layer.alpha), 1.0)  # edward2's 'ones'
    # edward2's super(...).call is the shared op: member e = op(x ∘ α_e) ∘ γ_e + b_e.
    shared = super(ed.layers.DepthwiseConv2DBatchEnsemble, layer).call(x[:2]).numpy()
    np.testing.assert_allclose(out[:2], shared * np.asarray(layer.gamma[0])
                               + np.asarray(layer.ensemble_bias[0]), rtol=1e-5, atol=1e-6)
