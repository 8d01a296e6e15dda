"""Spectral normalization (`bayes_planet.layers.spectral_norm`, Dense and Conv2D): spectral
norms against ``np.linalg.svd`` (of the kernel, and of the convolution's explicit matrix
built from basis images), the normalization's gradient against its closed form, its
iteration state, the contract harness, dtypes and bad input."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers.testing import normal_array, run_layer_test


def _matrix_with_singular_values(rows, cols, values, seed=0):
    """A ``[rows, cols]`` matrix with the given singular values (random orthogonal factors)."""
    rng = np.random.default_rng(seed)
    left, _ = np.linalg.qr(rng.standard_normal((rows, rows)))
    right, _ = np.linalg.qr(rng.standard_normal((cols, cols)))
    s = np.zeros((rows, cols))
    s[np.arange(len(values)), np.arange(len(values))] = values
    return (left @ s @ right.T).astype("float32")


def _top_singular_value(m):
    return np.linalg.svd(np.asarray(m, np.float64), compute_uv=False)[0]


def test_signature_extends_keras_spectral_normalization():
    theirs = list(inspect.signature(keras.layers.SpectralNormalization.__init__).parameters)
    ours = inspect.signature(bl.SpectralNormalization.__init__).parameters
    assert list(ours)[:len(theirs) - 1] == theirs[:-1]  # (self, layer, power_iterations)
    extra = [p for p in list(ours.values())[len(theirs) - 1:]]
    assert [p.kind for p in extra[:-1]] == [inspect.Parameter.KEYWORD_ONLY] * (len(extra) - 1)
    assert {"norm_multiplier", "seed"} <= {p.name for p in extra}


@pytest.mark.parametrize("bound", [0.5, 10.0], ids=["sigma>c", "sigma<c"])
def test_dense_kernel_spectral_norm_is_min_of_sigma_and_bound(bound):
    """σ(W) = 3 (next 1.5): after 40 iterations σ_max(W_sn) = min(3, c) to 1e-4
    (power-iteration error ~ (1.5/3)^80)."""
    kernel = _matrix_with_singular_values(5, 4, [3.0, 1.5, 1.0, 0.5])
    dense = keras.layers.Dense(4, activation="tanh", bias_initializer="random_normal")
    layer = bl.SpectralNormalization(dense, power_iterations=40, norm_multiplier=bound, seed=0)
    x = normal_array(6, 5)
    layer(x)
    dense.kernel.assign(kernel)
    layer(x, training=True)
    normalized = layer.normalized_kernel().numpy()
    np.testing.assert_allclose(_top_singular_value(normalized), min(3.0, bound), rtol=1e-4)
    if bound > 3.0:  # below the bound the kernel is unchanged
        np.testing.assert_array_equal(normalized, kernel)
    else:
        np.testing.assert_allclose(normalized, kernel * bound / 3.0, rtol=1e-4, atol=1e-6)
    # The output is the wrapped layer's with the normalized kernel; its variable is intact.
    expected = np.tanh(x @ normalized + dense.bias.numpy())
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(dense.kernel.numpy(), kernel)


def test_single_iterations_converge_over_training_calls():
    """SNGP's one iteration per training step: the estimate tightens call after call."""
    kernel = _matrix_with_singular_values(6, 3, [2.0, 1.0, 0.5], seed=1)
    layer = bl.SpectralNormalization(keras.layers.Dense(3), norm_multiplier=1.0, seed=3)
    x = normal_array(4, 6)
    layer(x)
    layer.layer.kernel.assign(kernel)
    for _ in range(30):
        layer(x, training=True)
    np.testing.assert_allclose(_top_singular_value(layer.normalized_kernel()), 1.0, rtol=1e-4)


def test_gradient_flows_through_the_normalization():
    """With u converged, d/dW sum(x (c W / σ(W))) = (c/σ) G - c <G, W> / σ² a bᵀ, where
    G = xᵀ 1 and (a, b) are W's top singular vectors."""
    kernel = _matrix_with_singular_values(4, 3, [2.0, 0.8, 0.3], seed=2)
    dense = keras.layers.Dense(3, use_bias=False)
    layer = bl.SpectralNormalization(dense, power_iterations=50, norm_multiplier=0.5, seed=1)
    x = normal_array(5, 4, seed=3)
    layer(x)
    dense.kernel.assign(kernel)
    layer(x, training=True)
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(layer(x))
    grad = tape.gradient(total, dense.kernel).numpy()
    w = kernel.astype(np.float64)
    g = x.astype(np.float64).T @ np.ones((5, 3))
    left, s, right = np.linalg.svd(w)
    c, sigma = 0.5, s[0]
    expected = c / sigma * g - c * np.sum(g * w) / sigma**2 * np.outer(left[:, 0], right[0])
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-5)


def test_iteration_state_changes_only_in_training_and_is_seeded():
    x = normal_array(4, 5)
    a, b, c = (bl.SpectralNormalization(keras.layers.Dense(3), seed=s) for s in (7, 7, 8))
    for layer in (a, b, c):
        layer(x)
    np.testing.assert_array_equal(a.u.numpy(), b.u.numpy())
    assert not np.allclose(a.u.numpy(), c.u.numpy())
    assert not a.u.trainable and a.non_trainable_weights == [a.u]
    before = a.u.numpy()
    a(x)
    a(x, training=False)
    keras.Sequential([a]).predict(x, verbose=0)
    np.testing.assert_array_equal(a.u.numpy(), before)
    a(x, training=True)
    assert not np.allclose(a.u.numpy(), before)


def _conv_operator(kernel, input_hw, strides, padding):
    """The explicit ``[out, in]`` matrix of ``tf.nn.conv2d`` on ``[H, W, C_in]`` images."""
    shape = (*input_hw, kernel.shape[2])
    n = int(np.prod(shape))
    basis = np.eye(n, dtype=np.float64).reshape((n, *shape))
    out = tf.nn.conv2d(basis, tf.cast(kernel, tf.float64), strides, padding.upper())
    return out.numpy().reshape(n, -1).T


@pytest.mark.parametrize("strides, padding", [(1, "same"), (2, "valid"), (2, "same")])
def test_conv2d_operator_norm_against_its_explicit_matrix(strides, padding):
    """The estimate is the top singular value of the convolution's matrix (built from basis
    images, SVD) to 1e-3, and the normalized convolution's operator norm is min(σ, c)."""
    conv = keras.layers.Conv2D(3, 3, strides=strides, padding=padding, use_bias=False)
    layer = bl.SpectralNormalizationConv2D(conv, power_iterations=300, norm_multiplier=0.5,
                                           seed=0)
    x = normal_array(2, 6, 6, 2)
    layer(x)
    sigma = _top_singular_value(_conv_operator(conv.kernel.numpy(), (6, 6), strides, padding))
    assert sigma > 0.5
    layer(x, training=True)
    normalized = layer.normalized_kernel().numpy()
    np.testing.assert_allclose(conv.kernel.numpy() / normalized, sigma / 0.5, rtol=1e-3)
    op_norm = _top_singular_value(_conv_operator(normalized, (6, 6), strides, padding))
    np.testing.assert_allclose(op_norm, 0.5, rtol=1e-3)
    # The kernel-matrix norm (the Dense wrapper's) is a different quantity.
    flat = _top_singular_value(conv.kernel.numpy().reshape(-1, 3))
    assert abs(flat - sigma) > 1e-2 * sigma


@pytest.mark.parametrize("wrapper, inner, shape, out", [
    (bl.SpectralNormalization, lambda: keras.layers.Dense(3, activation="relu"), (8, 5),
     (8, 3)),
    (bl.SpectralNormalizationConv2D, lambda: keras.layers.Conv2D(3, 3, padding="same"),
     (2, 6, 6, 2), (2, 6, 6, 3)),
], ids=["Dense", "Conv2D"])
def test_spectral_normalization_contract(wrapper, inner, shape, out):
    run_layer_test(wrapper, {"layer": inner(), "norm_multiplier": 0.5}, shape,
                   expected_output_shape=out, expected_num_trainable_weights=2,
                   expected_num_non_trainable_weights=1, expected_num_losses=0)


def test_spectral_normalization_float64_and_mixed_precision():
    x64 = normal_array(4, 5, dtype="float64")
    layer = bl.SpectralNormalization(keras.layers.Dense(3, dtype="float64"), seed=0)
    assert layer(x64, training=True).dtype == tf.float64 and layer.u.dtype == tf.float64
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        mixed = bl.SpectralNormalization(keras.layers.Dense(3), seed=0)
        with tf.GradientTape() as tape:
            y = mixed(normal_array(4, 5), training=True)
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        grads = tape.gradient(loss, mixed.trainable_variables)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert y.dtype == tf.float16 and mixed.u.dtype == tf.float32
    assert all(v.dtype == tf.float32 for v in mixed.trainable_variables)
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)


def test_spectral_normalization_bad_input_is_one_line():
    dense = keras.layers.Dense(2)
    cases = [
        (lambda: bl.SpectralNormalization("dense"), r"^Expected a Keras layer with a kernel\. "
                                                    r"Received: layer='dense'$"),
        (lambda: bl.SpectralNormalization(dense, 0),
         r"^Expected a positive integer\. Received: power_iterations=0$"),
        (lambda: bl.SpectralNormalization(dense, norm_multiplier=0.0),
         r"^Expected a positive number\. Received: norm_multiplier=0\.0$"),
        (lambda: bl.SpectralNormalization(dense, seed=-1), r"Received: seed=-1$"),
        (lambda: bl.SpectralNormalizationConv2D(dense), r"^Expected a keras\.layers\.Conv2D\."),
        (lambda: bl.SpectralNormalization(keras.layers.Activation("relu"))(normal_array(2, 3)),
         r"^Expected a layer whose kernel is a variable\. .*kernel=NoneType$"),
        (lambda: bl.SpectralNormalizationConv2D(keras.layers.Conv2D(2, 3))(
            keras.Input((None, None, 2))), r"needs the input's spatial size"),
    ]
    for make, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as info:
            make()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("wrapper, make, name", [
    (bl.SpectralNormalization, lambda: bl.DenseRank1(3, ensemble_size=2, name="rank1"),
     "'rank1' (DenseRank1)"),
    (bl.SpectralNormalization, lambda: bl.DenseFlipout(3, name="flipout"),
     "'flipout' (DenseFlipout)"),
    (bl.SpectralNormalizationConv2D, lambda: bl.Conv2DFlipout(2, 3, name="conv"),
     "'conv' (Conv2DFlipout)"),
], ids=["DenseRank1", "DenseFlipout", "Conv2DFlipout"])
def test_spectral_normalization_refuses_bayesian_layers(wrapper, make, name):
    """A Bayesian layer's weights are sampled (DenseRank1's point-estimate kernel included:
    its members' factors are), so a bound on its kernel variable is not a bound on the map
    it computes: refused when wrapped, before DenseRank1 was normalized without a word."""
    with pytest.raises(ValueError) as info:
        wrapper(make())
    assert str(info.value) == ("Expected a layer with a point-estimate kernel, not a Bayesian "
                               f"layer (its weights are sampled). Received: layer={name}")
