"""The Laplace covariance of random-feature output weights (`bayes_planet.layers.laplace_covariance`)
and the linear kernel of `RandomFeatureGaussianProcess`: precisions and covariances against
numpy's closed forms, the covariance recomputed only after a change, the contract harness,
save/load and bad input."""

import numpy as np
import pytest
from scipy.special import expit

import bayes_planet.layers as bl
from bayes_planet.layers.testing import normal_array, run_layer_test


def test_summed_precision_and_predictive_covariance_are_the_closed_form():
    """Two training batches: P = Φ₁ᵀΦ₁ + Φ₂ᵀΦ₂, Σ = (ridge·I + P)⁻¹, and an inference call
    returns Φ Σ Φᵀ; a training call returns the identity."""
    layer = bl.LaplaceRandomFeatureCovariance(ridge_penalty=0.5, dtype="float64")
    a, b = normal_array(7, 4, seed=1, dtype="float64"), normal_array(5, 4, seed=2, dtype="float64")
    np.testing.assert_array_equal(layer(a, training=True).numpy(), np.eye(7))
    layer(b, training=True)
    precision = a.T @ a + b.T @ b
    np.testing.assert_allclose(layer.precision_matrix.numpy(), precision, rtol=1e-12)
    sigma = np.linalg.inv(0.5 * np.eye(4) + precision)
    x = normal_array(3, 4, seed=3, dtype="float64")
    np.testing.assert_allclose(layer(x).numpy(), x @ sigma @ x.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(layer.covariance_matrix.numpy(), sigma, rtol=1e-10, atol=1e-12)


def test_covariance_is_recomputed_only_after_the_precision_changed():
    """edward2's ``if_update_covariance``: stale after a training call, fresh after an
    inference call; the stored covariance is what a second inference call reads."""
    layer = bl.LaplaceRandomFeatureCovariance()
    x = normal_array(6, 3, seed=4)
    layer(x, training=True)
    assert bool(layer.covariance_is_stale.numpy())
    first = layer(x).numpy()
    assert not bool(layer.covariance_is_stale.numpy())
    layer.covariance_matrix.assign(np.zeros((3, 3), np.float32))  # Read, not recomputed:
    np.testing.assert_array_equal(layer(x).numpy(), np.zeros((6, 6)))
    layer(x, training=True)  # P = 2 XᵀX now: recomputed at the next inference call.
    sigma = np.linalg.inv(np.eye(3) + 2 * x.T.astype(np.float64) @ x)
    np.testing.assert_allclose(layer(x).numpy(), x @ sigma @ x.T, rtol=1e-4, atol=1e-6)
    assert np.abs(layer(x).numpy() - first).max() > 1e-3
    layer.reset_precision_matrix()
    np.testing.assert_array_equal(layer.precision_matrix.numpy(), np.zeros((3, 3)))
    np.testing.assert_allclose(layer.covariance().numpy(), np.eye(3), rtol=1e-6)  # ridge 1


def test_momentum_keeps_the_moving_average_of_the_batch_precisions():
    """P ← m P + (1 − m) ΦᵀΦ / batch, from P = 0; over many passes of the same batches it
    approaches the data's mean ΦᵀΦ / batch (edward2's population-level estimate)."""
    m = 0.9
    layer = bl.LaplaceRandomFeatureCovariance(momentum=m, ridge_penalty=0.0, dtype="float64")
    a, b = normal_array(8, 3, seed=5, dtype="float64"), normal_array(8, 3, seed=6, dtype="float64")
    layer(a, training=True)
    np.testing.assert_allclose(layer.precision_matrix.numpy(), (1 - m) * a.T @ a / 8, rtol=1e-12)
    layer(b, training=True)
    want = m * (1 - m) * a.T @ a / 8 + (1 - m) * b.T @ b / 8
    np.testing.assert_allclose(layer.precision_matrix.numpy(), want, rtol=1e-12)
    for _ in range(300):
        layer(a, training=True)
        layer(b, training=True)
    mean = (a.T @ a + b.T @ b) / 16
    np.testing.assert_allclose(layer.precision_matrix.numpy(), mean, rtol=0.06, atol=0.02)


@pytest.mark.parametrize("likelihood", ["binary_logistic", "poisson"])
def test_non_gaussian_likelihoods_weigh_the_features_by_the_curvature(likelihood):
    layer = bl.LaplaceRandomFeatureCovariance(likelihood=likelihood, dtype="float64")
    phi = normal_array(6, 3, seed=7, dtype="float64")
    logits = normal_array(6, 1, seed=8, dtype="float64")
    layer(phi, logits=logits, training=True)
    p = expit(logits[:, 0])
    w = p * (1 - p) if likelihood == "binary_logistic" else np.exp(logits[:, 0])
    np.testing.assert_allclose(layer.precision_matrix.numpy(), (phi.T * w) @ phi, rtol=1e-10)
    with pytest.raises(ValueError, match=rf"Expected the logits for likelihood='{likelihood}'\. "
                                         r"Received: logits=None"):
        layer(phi, training=True)


def test_laplace_covariance_contract():
    run_layer_test(bl.LaplaceRandomFeatureCovariance, {"momentum": 0.99}, (6, 4),
                   expected_output_shape=(6, 6), expected_num_trainable_weights=0,
                   expected_num_non_trainable_weights=3, run_fit=False)


def test_laplace_covariance_bad_input_is_one_line():
    cases = [
        (lambda: bl.LaplaceRandomFeatureCovariance(momentum=1.0),
         r"^Expected None or a number in \(0, 1\)\. Received: momentum=1\.0$"),
        (lambda: bl.LaplaceRandomFeatureCovariance(ridge_penalty=-1),
         r"^Expected a non-negative number\. Received: ridge_penalty=-1$"),
        (lambda: bl.LaplaceRandomFeatureCovariance(likelihood="softmax"),
         r"Received: likelihood='softmax'$"),
        (lambda: bl.LaplaceRandomFeatureCovariance()(normal_array(2, 3, 4)),
         r"^Expected inputs of shape \[batch, D\]"),
    ]
    for make, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as info:
            make()
        assert "\n" not in str(info.value)


# -- the linear kernel: a Bayesian linear output layer ---------------------------------------
def test_linear_kernel_features_are_the_inputs_and_its_posterior_is_bayesian_linear_regression():
    """φ(x) = x; after one pass over X the predictive covariance of x* is
    x* (ridge·I + XᵀX)⁻¹ x*ᵀ, Bayesian linear regression's with prior N(0, I / ridge)."""
    layer = bl.RandomFeatureGaussianProcess(1, covariance_fn="linear", gp_cov_ridge_penalty=2.0,
                                            return_gp_cov=True, return_random_features=True,
                                            dtype="float64", seed=0)
    x = normal_array(20, 3, seed=9, dtype="float64")
    logits, null, features = layer(x, training=True)
    np.testing.assert_array_equal(features.numpy(), x)
    np.testing.assert_array_equal(null.numpy(), np.eye(20))
    assert logits.shape == (20, 1)
    test = normal_array(4, 3, seed=10, dtype="float64")
    _, covariance, test_features = layer(test)
    want = test @ np.linalg.inv(2.0 * np.eye(3) + x.T @ x) @ test.T
    np.testing.assert_allclose(covariance.numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(test_features.numpy(), test)
    assert not hasattr(layer, "frequencies")


def test_linear_kernel_and_random_features_contract():
    run_layer_test(bl.RandomFeatureGaussianProcess, {"units": 2, "covariance_fn": "linear"},
                   (8, 5), expected_output_shape=(8, 2),
                   expected_num_trainable_weights=2, expected_num_non_trainable_weights=3)
    for kwargs, shapes in [({"covariance_fn": "linear"}, ((8, 2), (8, 5))),
                           ({"num_inducing": 16, "return_gp_cov": True},
                            ((8, 2), (8, 8), (8, 16)))]:
        run_layer_test(bl.RandomFeatureGaussianProcess,  # Several outputs: no fit with "mse".
                       {"units": 2, "return_random_features": True, **kwargs}, (8, 5),
                       expected_output_shape=shapes, run_fit=False)
