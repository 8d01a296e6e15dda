"""SNGP's random-feature GP output layer (`bayes_planet.layers.sngp`): the Laplace covariance
against ``(ridge·I + ΦᵀWΦ)⁻¹`` in numpy, the mean-field logits against their formula and a
Monte Carlo estimate, the reset callback in a fit, the contract harness, dtypes and bad input.

Its spectral normalization: test_spectral_norm.py."""

import math

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import expit

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers.testing import normal_array, run_layer_test


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
    x1, x2 = normal_array(8, 3, seed=1, dtype=dtype), normal_array(5, 3, seed=2, dtype=dtype)
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
    x = normal_array(10, 3, seed=4, dtype="float64")
    layer(x[:1])
    layer.output_layer.kernel.assign(normal_array(16, 1, seed=5, dtype="float64"))
    logits = layer(x, training=True).numpy()
    p = expit(logits)
    phi = _features(layer, x)
    assert np.ptp(p * (1 - p)) > 1e-2  # the weights differ
    expected = np.linalg.inv(np.eye(16) + (phi * (p * (1 - p))).T @ phi)
    np.testing.assert_allclose(layer.covariance().numpy(), expected, rtol=1e-10, atol=1e-12)


def test_momentum_is_a_moving_average_of_batch_means():
    layer = _gp(gp_cov_momentum=0.9, dtype="float64")
    x1, x2 = normal_array(4, 3, seed=6, dtype="float64"), normal_array(6, 3, seed=7, dtype="float64")
    layer(x1, training=True)
    layer(x2, training=True)
    p1, p2 = (_features(layer, x) for x in (x1, x2))
    precision = 0.9 * (0.1 * p1.T @ p1 / 4) + 0.1 * p2.T @ p2 / 6
    np.testing.assert_allclose(layer.precision_matrix.numpy(), precision, rtol=1e-12)
    np.testing.assert_allclose(layer.covariance().numpy(),
                               np.linalg.inv(np.eye(16) + precision), rtol=1e-10)


def test_reset_and_inference_leave_or_restore_the_prior():
    layer = _gp(dtype="float64")
    x = normal_array(6, 3, dtype="float64")
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
    x_train, x = normal_array(20, 3, seed=8, dtype="float64"), normal_array(5, 3, seed=9, dtype="float64")
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
    logits = normal_array(4, 3, seed=10)
    variance = np.abs(normal_array(4, seed=11)) * 3
    got = bl.mean_field_logits(logits, variance).numpy()
    np.testing.assert_allclose(got, logits / np.sqrt(1 + np.pi / 8 * variance)[:, None],
                               rtol=1e-6)
    np.testing.assert_array_equal(bl.mean_field_logits(logits, variance, 0.0).numpy(), logits)
    # Per-class variances broadcast as given.
    per_class = np.abs(normal_array(4, 3, seed=12))
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
    x, y = normal_array(12, 3, seed=13), normal_array(12, 2, seed=14)
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
        history = model.fit(normal_array(8, 3), normal_array(8, 2), batch_size=4, epochs=1, verbose=0)
        out = model(normal_array(8, 3))
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
        (lambda: _gp(covariance_fn=bl.Linear()), r"Received: covariance_fn=Linear$"),
        (lambda: _gp(seed=-3), r"Received: seed=-3$"),
        (lambda: _gp()(normal_array(2, 3, 4)), r"^Expected inputs of shape \[batch, d\]"),
        (lambda: bl.mean_field_logits([1.0], [1.0], -1.0),
         r"^Expected a non-negative number\. Received: mean_field_factor=-1\.0$"),
    ]
    for make, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as info:
            make()
        assert "\n" not in str(info.value)
