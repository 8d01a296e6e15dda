"""compat.edward2's horseshoe layers: edward2's argument order and defaults over the library's
`DenseHierarchical` and `Conv2DHierarchical`."""

import numpy as np
import pytest

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl


def test_dense_defaults_and_order():
    layer = ed.layers.DenseHierarchical(3, "relu")
    assert isinstance(layer, bl.DenseHierarchical)
    assert isinstance(layer.local_scale_initializer, ed.initializers.TrainableHalfCauchy)
    assert isinstance(layer.kernel_initializer, ed.initializers.TrainableNormal)
    assert layer.global_scale_regularizer.scale == pytest.approx(1e-5)
    out = layer(np.ones((2, 4), np.float32))
    assert out.shape == (2, 3) and len(layer.losses) == 3
    layer.call_weights()  # edward2's, a no-op here
    # edward2's positional order: local and global scale initializers come before the
    # regularizers (kernel_regularizer is the 8th argument).
    positional = ed.layers.DenseHierarchical(2, None, True, "trainable_normal", "zero",
                                             "trainable_half_cauchy", "trainable_half_cauchy",
                                             None)
    positional(np.ones((2, 4), np.float32))
    assert positional.kernel_regularizer is None and len(positional.losses) == 2


def test_conv_and_the_scale_constraints():
    layer = ed.layers.Conv2DHierarchical(4, 2, padding="same")
    assert isinstance(layer, bl.Conv2DHierarchical)
    assert layer(np.ones((1, 3, 3, 2), np.float32)).shape == (1, 3, 3, 4)
    config = layer.get_config()
    clone = ed.layers.Conv2DHierarchical.from_config(config)
    assert isinstance(clone.local_scale_initializer, ed.initializers.TrainableHalfCauchy)
    ed.layers.Conv2DHierarchical(4, 2, local_scale_constraint=None)
    with pytest.raises(ValueError, match=r"Expected local_scale_constraint in \('softplus',\)"):
        ed.layers.DenseHierarchical(3, local_scale_constraint="non_neg")
