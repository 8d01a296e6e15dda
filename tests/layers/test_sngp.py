"""SNGP: spectral normalization (Dense and Conv2D) and the random-feature GP output layer.

Spectral norms against ``np.linalg.svd`` (of the kernel, and of the convolution's
explicit matrix built from basis images), the normalization's gradient against its
closed form, the Laplace covariance against ``(ridge·I + ΦᵀWΦ)⁻¹`` in numpy, the
mean-field logits against their formula and a Monte Carlo estimate, the reset callback
in a fit, the contract harness, dtypes and bad input.
"""

import inspect
import math

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import expit

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers.testing import run_layer_test


def _data(*shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


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


# --- Spectral normalization ---------------------------------------------------------


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
    x = _data(6, 5)
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
    x = _data(4, 6)
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
    x = _data(5, 4, seed=3)
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
    x = _data(4, 5)
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
    x = _data(2, 6, 6, 2)
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
    x64 = _data(4, 5, dtype="float64")
    layer = bl.SpectralNormalization(keras.layers.Dense(3, dtype="float64"), seed=0)
    assert layer(x64, training=True).dtype == tf.float64 and layer.u.dtype == tf.float64
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        mixed = bl.SpectralNormalization(keras.layers.Dense(3), seed=0)
        with tf.GradientTape() as tape:
            y = mixed(_data(4, 5), training=True)
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
        (lambda: bl.SpectralNormalization(keras.layers.Activation("relu"))(_data(2, 3)),
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


# --- Random-feature GP ---------------------------------------------------------------


def _gp(**kwargs):
    kwargs.setdefault("seed", 0)
    return bl.RandomFeatureGaussianProcess(kwargs.pop("units", 2), kwargs.pop("num_inducing", 16),
                                           **kwargs)


def _features(layer, x):
    return layer.features(x).numpy().astype(np.float64)


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-10), ("float32", 1e-4)])
def test_laplace_covariance_is_the_closed_form(dtype, rtol):
    """Two training batches: Σ = (ridge·I + Φ₁ᵀΦ₁ + Φ₂ᵀΦ₂)⁻¹ (Gaussian likelihood)."""
    layer = _gp(gp_cov_ridge_penalty=0.5, dtype=dtype)
    x1, x2 = _data(8, 3, seed=1, dtype=dtype), _data(5, 3, seed=2, dtype=dtype)
    layer(x1)  # builds; an inference call leaves the prior's covariance I / ridge
    np.testing.assert_allclose(layer.covariance().numpy(), 2.0 * np.eye(16), rtol=1e-12)
    layer(x1, training=True)
    layer(x2, training=True)
    phi = _features(layer, np.concatenate([x1, x2]))
    expected = np.linalg.inv(0.5 * np.eye(16) + phi.T @ phi)
    np.testing.assert_allclose(layer.covariance().numpy(), expected, rtol=rtol, atol=rtol)
    assert not layer.covariance_is_stale.numpy()  # cached until the next training call


def test_laplace_covariance_with_logistic_weights():
    """``binary_logistic``: P = ridge·I + Σ p(1-p) φφᵀ with p the sigmoid of the logits of
    the training call (edward2's Laplace approximation)."""
    layer = _gp(units=1, gp_cov_likelihood="binary_logistic", dtype="float64")
    x = _data(10, 3, seed=4, dtype="float64")
    layer(x[:1])
    layer.output_layer.kernel.assign(_data(16, 1, seed=5, dtype="float64"))
    logits = layer(x, training=True).numpy()
    p = expit(logits)
    phi = _features(layer, x)
    assert np.ptp(p * (1 - p)) > 1e-2  # the weights differ
    expected = np.linalg.inv(np.eye(16) + (phi * (p * (1 - p))).T @ phi)
    np.testing.assert_allclose(layer.covariance().numpy(), expected, rtol=1e-10, atol=1e-12)


def test_momentum_is_a_moving_average_of_batch_means():
    layer = _gp(gp_cov_momentum=0.9, dtype="float64")
    x1, x2 = _data(4, 3, seed=6, dtype="float64"), _data(6, 3, seed=7, dtype="float64")
    layer(x1, training=True)
    layer(x2, training=True)
    p1, p2 = (_features(layer, x) for x in (x1, x2))
    precision = 0.9 * (0.1 * p1.T @ p1 / 4) + 0.1 * p2.T @ p2 / 6
    np.testing.assert_allclose(layer.precision_matrix.numpy(), precision, rtol=1e-12)
    np.testing.assert_allclose(layer.covariance().numpy(),
                               np.linalg.inv(np.eye(16) + precision), rtol=1e-10)


def test_reset_and_inference_leave_or_restore_the_prior():
    layer = _gp(dtype="float64")
    x = _data(6, 3, dtype="float64")
    layer(x)  # inference: no update
    np.testing.assert_array_equal(layer.precision_matrix.numpy(), np.zeros((16, 16)))
    layer(x, training=True)
    assert np.abs(layer.precision_matrix.numpy()).max() > 0
    layer.reset_covariance_matrix()
    np.testing.assert_allclose(layer.covariance().numpy(), np.eye(16), rtol=1e-12)


def test_inference_outputs_mean_field_logits_and_predictive_covariance():
    """Mean-field output = MAP / sqrt(1 + λ φᵀΣφ); the covariance output is ΦΣΦᵀ."""
    kwargs = {"dtype": "float64", "seed": 3}
    plain, mean_field = _gp(**kwargs), _gp(mean_field_factor=math.pi / 8, **kwargs)
    with_cov = _gp(return_gp_cov=True, **kwargs)
    x_train, x = _data(20, 3, seed=8, dtype="float64"), _data(5, 3, seed=9, dtype="float64")
    layers = (plain, mean_field, with_cov)
    for layer in layers:
        layer(x)
        layer.set_weights(plain.get_weights())
    for layer in layers:
        layer(x_train, training=True)
    phi = _features(plain, x)
    sigma = np.linalg.inv(np.eye(16) + _features(plain, x_train).T @ _features(plain, x_train))
    logits = plain(x).numpy()
    variance = np.einsum("bi,ij,bj->b", phi, sigma, phi)
    np.testing.assert_allclose(mean_field(x).numpy(),
                               logits / np.sqrt(1 + math.pi / 8 * variance)[:, None], rtol=1e-9)
    out, cov = with_cov(x)
    np.testing.assert_allclose(out.numpy(), logits, rtol=1e-12)
    np.testing.assert_allclose(cov.numpy(), phi @ sigma @ phi.T, rtol=1e-9, atol=1e-12)
    _, train_cov = with_cov(x, training=True)
    np.testing.assert_array_equal(train_cov.numpy(), np.eye(5))


def test_mean_field_logits_closed_form_and_probit_approximation():
    logits = _data(4, 3, seed=10)
    variance = np.abs(_data(4, seed=11)) * 3
    got = bl.mean_field_logits(logits, variance).numpy()
    np.testing.assert_allclose(got, logits / np.sqrt(1 + np.pi / 8 * variance)[:, None],
                               rtol=1e-6)
    np.testing.assert_array_equal(bl.mean_field_logits(logits, variance, 0.0).numpy(), logits)
    # Per-class variances broadcast as given.
    per_class = np.abs(_data(4, 3, seed=12))
    np.testing.assert_allclose(bl.mean_field_logits(logits, per_class, 2.0).numpy(),
                               logits / np.sqrt(1 + 2.0 * per_class), rtol=1e-6)
    # E[sigmoid(f)], f ~ N(μ, s²), by Monte Carlo (400k draws, standard error < 1e-3):
    # the probit approximation's error is below 0.02 over this grid.
    rng = np.random.default_rng(0)
    for mu in (-3.0, -1.0, 0.5, 2.0):
        for s in (0.5, 2.0, 4.0):
            mc = expit(mu + s * rng.standard_normal(400_000)).mean()
            approx = expit(bl.mean_field_logits([[mu]], [s * s]).numpy()[0, 0])
            assert abs(mc - approx) < 0.02, (mu, s, mc, approx)


@pytest.mark.parametrize("kwargs, trainable, losses", [
    ({}, 4, 0),  # output kernel, bias, kernel amplitude, length scale
    ({"normalize_input": True, "mean_field_factor": 1.0, "l2_regularization": 1e-3,
      "gp_cov_momentum": 0.99, "scale_random_features": False}, 6, 1),
    ({"units": 1, "gp_cov_likelihood": "binary_logistic", "mean_field_factor": 0.4}, 4, 0),
], ids=["default", "options", "binary_logistic"])
def test_gp_contract(kwargs, trainable, losses):
    units = kwargs.pop("units", 3)
    run_layer_test(bl.RandomFeatureGaussianProcess, {"units": units, "num_inducing": 16,
                                                     **kwargs}, (8, 5),
                   expected_output_shape=(8, units), expected_num_trainable_weights=trainable,
                   expected_num_non_trainable_weights=5, expected_num_losses=losses)


def test_reset_callback_makes_the_precision_one_epoch_of_data():
    """Fixed features (a fixed kernel), two epochs: with `GPCovarianceReset` the precision
    is ΦᵀΦ of the data once; without it, twice."""
    x, y = _data(12, 3, seed=13), _data(12, 2, seed=14)
    phis = []
    for callbacks, times in (([bl.GPCovarianceReset()], 1.0), ([], 2.0)):
        layer = _gp(covariance_fn=bl.ExponentiatedQuadratic(trainable=False, dtype="float32"))
        model = keras.Sequential([keras.Input((3,)), layer])
        model.compile(keras.optimizers.Adam(1e-2), "mse")
        model.fit(x, y, batch_size=4, epochs=2, shuffle=False, callbacks=callbacks, verbose=0)
        phi = _features(layer, x)
        phis.append(phi)
        np.testing.assert_allclose(layer.precision_matrix.numpy(), times * phi.T @ phi,
                                   rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"^Expected a model with a RandomFeatureGaussian"):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile("sgd", "mse")
        model.fit(x, y, callbacks=[bl.GPCovarianceReset()], verbose=0)


def test_gp_under_mixed_precision_computes_in_float32():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4),
                                  _gp(mean_field_factor=1.0)])
        model.compile(keras.optimizers.Adam(1e-3), "mse")
        history = model.fit(_data(8, 3), _data(8, 2), batch_size=4, epochs=1, verbose=0)
        out = model(_data(8, 3))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    gp = model.layers[-1]
    assert out.dtype == tf.float32 and gp.compute_dtype == "float32"
    assert np.isfinite(history.history["loss"][0]) and np.all(np.isfinite(out.numpy()))
    assert gp.precision_matrix.dtype == tf.float32


def test_gp_bad_input_is_one_line():
    cases = [
        (lambda: _gp(units=0), r"^Expected a positive integer\. Received: units=0$"),
        (lambda: _gp(num_inducing=-2), r"Received: num_inducing=-2$"),
        (lambda: _gp(gp_cov_likelihood="softmax"), r"Received: gp_cov_likelihood='softmax'$"),
        (lambda: _gp(units=3, gp_cov_likelihood="poisson"),
         r"^Expected units=1 for gp_cov_likelihood='poisson'\. Received: units=3$"),
        (lambda: _gp(gp_cov_momentum=-1), r"^Expected None or a number in \(0, 1\)\. "
                                          r"Received: gp_cov_momentum=-1$"),
        (lambda: _gp(gp_cov_momentum=1.0), r"Received: gp_cov_momentum=1\.0$"),
        (lambda: _gp(gp_cov_ridge_penalty=0), r"^Expected a positive number\. "
                                              r"Received: gp_cov_ridge_penalty=0$"),
        (lambda: _gp(l2_regularization=-1e-3), r"Received: l2_regularization=-0\.001$"),
        (lambda: _gp(mean_field_factor=float("nan")), r"Received: mean_field_factor=nan$"),
        (lambda: _gp(covariance_fn="linear"), r"Received: covariance_fn=Linear$"),
        (lambda: _gp(seed=-3), r"Received: seed=-3$"),
        (lambda: _gp()(_data(2, 3, 4)), r"^Expected inputs of shape \[batch, d\]"),
        (lambda: bl.mean_field_logits([1.0], [1.0], -1.0),
         r"^Expected a non-negative number\. Received: mean_field_factor=-1\.0$"),
    ]
    for make, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as info:
            make()
        assert "\n" not in str(info.value)
