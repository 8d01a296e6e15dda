"""Hierarchical (horseshoe) layers (`bayes_planet.layers.hierarchical`): the contract harness,
the non-centered kernel ``W · λ · τ`` against a direct computation, the half-Cauchy scale draws
(fixed seeds, stated tolerances), same seed same result, and one-line errors."""

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet.layers import posterior_mean, regularizers
from bayes_planet.layers.testing import run_layer_test


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


@pytest.mark.parametrize("cls, kwargs, input_shape, output_shape", [
    (bl.DenseHierarchical, {"units": 3, "activation": "relu"}, (4, 5), (4, 3)),
    (bl.Conv2DHierarchical, {"filters": 4, "kernel_size": 2}, (2, 5, 5, 3), (2, 4, 4, 4)),
])
def test_contract(cls, kwargs, input_shape, output_shape):
    # Trainable: the bias, the kernel's mean and stddev, each scale's location and scale.
    layer = run_layer_test(cls, kwargs, input_shape, expected_output_shape=output_shape,
                           expected_num_trainable_weights=7, expected_num_losses=3)
    assert isinstance(layer.local_scale_regularizer, regularizers.HalfCauchyKLDivergence)
    assert layer.global_scale_regularizer.scale == pytest.approx(1e-5)
    assert layer.local_scale_regularizer.scale == 1.0


def _set_scales(layer, local_loc, global_loc, raw_scale=-20.0):
    """Scales at ``loc + exp(raw_scale) |C|``: point masses for a very negative raw scale."""
    layer.local_scale.mean.assign(tf.cast(local_loc, tf.float32))
    layer.local_scale.raw_stddev.assign(tf.fill(layer.local_scale.mean.shape, raw_scale))
    layer.global_scale.mean.assign(global_loc)
    layer.global_scale.raw_stddev.assign(raw_scale)


def test_dense_kernel_is_scaled_per_input_unit():
    x = _data(6, 4)
    layer = bl.DenseHierarchical(3, seed=0)
    layer.build(x.shape)
    local = np.array([0.5, 2.0, 0.0, 1.5], np.float32)
    _set_scales(layer, local, 3.0)
    layer.bias.assign([0.1, -0.2, 0.3])
    with posterior_mean(layer):  # kernel at its mean, scales at their medians l + s ≈ l
        out = layer(x).numpy()
    kernel = layer.kernel.mean.numpy()
    expected = x @ (kernel * local[:, None] * 3.0) + layer.bias.numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_conv_kernel_is_scaled_per_output_filter():
    x = _data(2, 5, 5, 3)
    layer = bl.Conv2DHierarchical(4, 3, padding="same", seed=0)
    layer.build(x.shape)
    local = np.array([1.0, 0.0, 2.0, 0.5], np.float32)
    _set_scales(layer, local, 0.5)
    with posterior_mean(layer):
        out = layer(x).numpy()
    kernel = layer.kernel.mean.numpy() * local * 0.5
    expected = tf.nn.conv2d(x, kernel, 1, "SAME").numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert np.abs(out[..., 1]).max() < 1e-6  # a zero local scale switches its filter off


def test_the_scales_are_half_cauchy_draws():
    """λ ~ HalfCauchy(0, 1), τ ≈ 1: with a ones kernel and one input, each call's output is a
    draw of λ, whose CDF at 1 is 1/2 (800 calls: standard error 0.018; tolerance 0.07)."""
    layer = bl.DenseHierarchical(1, use_bias=False, kernel_initializer="ones",
                                 kernel_regularizer=None, seed=5)
    layer.build((1, 1))
    _set_scales(layer, [0.0], 1.0)
    layer.local_scale.raw_stddev.assign([0.0])  # scale exp(0) = 1
    draws = np.array([float(layer(np.ones((1, 1), np.float32))[0, 0]) for _ in range(800)])
    assert (draws >= 0).all()
    assert np.mean(draws <= 1.0) == pytest.approx(0.5, abs=0.07)
    assert np.mean(draws <= np.tan(0.45 * np.pi)) == pytest.approx(0.9, abs=0.05)  # the tail


def test_same_seed_same_draws():
    x = _data(3, 4)
    a, b, c = (bl.DenseHierarchical(2, seed=s) for s in (7, 7, 8))
    for layer in (a, b, c):
        layer.build(x.shape)
    b.set_weights(a.get_weights())
    c.set_weights(a.get_weights())
    for layer in (a, b, c):  # visible scales and kernel noise
        layer.local_scale.raw_stddev.assign(tf.fill([4], -1.0))
        layer.kernel.raw_stddev.assign(tf.fill([4, 2], -1.0))
    np.testing.assert_array_equal(a(x), b(x))
    assert not np.array_equal(a(x), c(x))


def test_losses_are_the_three_kls():
    layer = bl.DenseHierarchical(2, seed=0)
    layer(_data(3, 4))
    kernel_kl, local_kl, global_kl = (float(loss) for loss in layer.losses)
    assert np.isfinite([kernel_kl, local_kl, global_kl]).all()
    none = bl.DenseHierarchical(2, kernel_regularizer=None, local_scale_regularizer=None,
                                global_scale_regularizer=None, seed=0)
    none(_data(3, 4))
    assert none.losses == []


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^Expected a positive integer\. Received: units=0$"):
        bl.DenseHierarchical(0)
    with pytest.raises(ValueError, match=r"Unknown regularizer\. .* Received: "
                                         r"regularizer='nope'$"):
        bl.DenseHierarchical(2, local_scale_regularizer="nope")
    with pytest.raises(ValueError, match=r"Unknown initializer\. .* Received: "
                                         r"initializer='nope'$"):
        bl.Conv2DHierarchical(2, 3, global_scale_initializer="nope")
    with pytest.raises(TypeError):
        bl.DenseHierarchical(2, None, True, "trainable_normal", "zeros", None, None, None, None,
                             None, None, None, None, "trainable_half_cauchy")  # keyword-only
