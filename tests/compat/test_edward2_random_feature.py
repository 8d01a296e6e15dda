"""compat.edward2's random-feature GP and Laplace covariance: edward2's arguments, defaults,
predictive covariance and attribute names over the library's layers."""

import numpy as np
import pytest

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl
from bayes_planet.layers.testing import normal_array


def test_rfgp_takes_edward2_defaults_and_returns_its_predictive_covariance():
    """edward2's defaults (covariance returned, input normalization, momentum 0.999, ridge
    1e-6, a fixed kernel); its predictive covariance is the library's times the ridge."""
    layer = ed.layers.RandomFeatureGaussianProcess(2, num_inducing=32, seed=0)
    assert isinstance(layer, bl.RandomFeatureGaussianProcess)
    assert layer.return_gp_cov and layer.normalize_input
    assert (layer.gp_cov_momentum, layer.gp_cov_ridge_penalty) == (0.999, 1e-6)
    assert not layer.covariance_fn.trainable
    x = normal_array(16, 3, seed=1)
    logits, null = layer(x, training=True)
    np.testing.assert_array_equal(null.numpy(), np.eye(16))
    assert logits.shape == (16, 2)
    assert bool(layer._gp_cov_layer.if_update_covariance.numpy())  # edward2's names.
    _, covariance = layer(x)
    assert not bool(layer._gp_cov_layer.if_update_covariance.numpy())
    phi = layer.features(x).numpy().astype(np.float64)
    sigma = np.linalg.inv(1e-6 * np.eye(32) + layer.precision_matrix.numpy().astype(np.float64))
    np.testing.assert_allclose(covariance.numpy(), 1e-6 * phi @ sigma @ phi.T, rtol=2e-2,
                               atol=1e-5)


def test_rfgp_exact_sum_linear_kernel_and_length_scale():
    exact = ed.layers.RandomFeatureGaussianProcess(1, num_inducing=8, gp_cov_momentum=-1)
    assert exact.gp_cov_momentum is None  # edward2's -1: sum the batches.
    linear = ed.layers.RandomFeatureGaussianProcess(
        1, gp_kernel_type="linear", normalize_input=False, scale_random_features=False,
        return_random_features=True)
    x = normal_array(5, 3, seed=2)
    _, _, features = linear(x, training=True)
    np.testing.assert_array_equal(features.numpy(), x)
    scaled = ed.layers.RandomFeatureGaussianProcess(1, gp_kernel_scale=4.0, normalize_input=False)
    assert float(scaled.covariance_fn.length_scale) == pytest.approx(2.0)  # inputs / sqrt(4)
    config = scaled.get_config()
    again = ed.layers.RandomFeatureGaussianProcess.from_config(config)
    assert again.get_config() == config


@pytest.mark.parametrize("kwargs, message", [
    ({"gp_kernel_type": "laplacian"}, r"Received: gp_kernel_type='laplacian'$"),
    ({"custom_random_features_activation": "relu"},
     r"implements custom_random_features_activation=None only\. "
     r"Received: custom_random_features_activation='relu'$"),
    ({"gp_output_bias": 1.0}, r"Received: gp_output_bias=1\.0$"),
])
def test_rfgp_unmapped_arguments_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        ed.layers.RandomFeatureGaussianProcess(1, **kwargs)
    assert "\n" not in str(info.value)


def test_laplace_covariance_takes_edward2_arguments():
    """momentum −1 sums the batches; inference returns ridge · Φ Σ Φᵀ."""
    layer = ed.layers.LaplaceRandomFeatureCovariance(momentum=-1, ridge_penalty=0.5,
                                                     dtype="float64")
    assert isinstance(layer, bl.LaplaceRandomFeatureCovariance) and layer.momentum is None
    x = normal_array(9, 4, seed=3, dtype="float64")
    layer(x, training=True)
    np.testing.assert_allclose(layer.precision_matrix.numpy(), x.T @ x, rtol=1e-12)
    assert bool(layer.if_update_covariance.numpy())
    want = 0.5 * x @ np.linalg.inv(0.5 * np.eye(4) + x.T @ x) @ x.T
    np.testing.assert_allclose(layer(x).numpy(), want, rtol=1e-10, atol=1e-12)
    default = ed.layers.LaplaceRandomFeatureCovariance()
    assert (default.momentum, default.ridge_penalty, default.name) == (
        0.999, 1e-6, "laplace_covariance")
