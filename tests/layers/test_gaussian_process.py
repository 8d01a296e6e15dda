"""Kernels, exact and sparse GP layers, random Fourier features.

Numbers, not shapes: kernels and the exact GP against scikit-learn and the closed
form; the sparse GP against the exact posterior and marginal likelihood; the RFF
error rate. The Poisson process: test_point_process.py.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process import kernels as sk

from bayes_planet._keras import keras
from bayes_planet.layers import initializers, kernels, regularizers
from bayes_planet.layers.gaussian_process import (
    GaussianProcess,
    SparseGaussianProcess,
    TrainableMultivariateNormal,
)
from bayes_planet.layers.random_features import RandomFourierFeatures
from bayes_planet.layers.testing import run_layer_test

tfd = tfp.distributions

LENGTH_SCALES = [0.8, 1.5]
AMPLITUDE = 1.3
NOISE = 0.05

STATIONARY = [
    (kernels.ExponentiatedQuadratic, sk.RBF(LENGTH_SCALES)),
    (kernels.Matern12, sk.Matern(LENGTH_SCALES, nu=0.5)),
    (kernels.Matern32, sk.Matern(LENGTH_SCALES, nu=1.5)),
    (kernels.Matern52, sk.Matern(LENGTH_SCALES, nu=2.5)),
]


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(30, 2))
    y = np.stack([np.sin(x[:, 0]), np.cos(x[:, 1])], -1) + 0.2 * rng.normal(size=(30, 2))
    return x, y, rng.uniform(-3, 3, size=(7, 2))


def _eq(dtype="float64"):
    return kernels.ExponentiatedQuadratic(AMPLITUDE, LENGTH_SCALES, dtype=dtype)


# ---------------------------------------------------------------- kernels
@pytest.mark.parametrize("cls,reference", STATIONARY, ids=lambda v: getattr(v, "__name__", ""))
def test_stationary_kernels_match_sklearn(cls, reference, data):
    x, _, x2 = data
    kernel = cls(AMPLITUDE, LENGTH_SCALES, dtype="float64")
    reference = sk.ConstantKernel(AMPLITUDE**2) * reference
    np.testing.assert_allclose(kernel(x, x2).numpy(), reference(x, x2), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kernel(x).numpy(), reference(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kernel((x, x2)).numpy(), reference(x, x2), rtol=1e-10)
    np.testing.assert_allclose(kernel.diag(x).numpy(), reference.diag(x), rtol=1e-12)


def test_linear_kernel_matches_sklearn(data):
    x, _, x2 = data
    kernel = kernels.Linear(AMPLITUDE, LENGTH_SCALES, dtype="float64")
    scale = AMPLITUDE / np.asarray(LENGTH_SCALES)
    reference = sk.DotProduct(sigma_0=0.0)
    np.testing.assert_allclose(kernel(x, x2).numpy(), reference(x * scale, x2 * scale),
                               rtol=1e-12)
    np.testing.assert_allclose(kernel.diag(x).numpy(), reference.diag(x * scale), rtol=1e-12)


@pytest.mark.parametrize("cls", [c for c, _ in STATIONARY] + [kernels.Linear])
def test_kernel_hyperparameters_train_unless_fixed(cls, data):
    x = tf.constant(data[0], tf.float32)
    kernel = cls(length_scale=[1.0, 2.0])
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(kernel(x))
    grads = tape.gradient(total, kernel.trainable_variables)
    assert len(grads) == 2
    assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)
    np.testing.assert_allclose(kernel.length_scale.numpy(), [1.0, 2.0], rtol=1e-6)
    fixed = cls(trainable=False)
    assert not fixed.trainable_weights and len(fixed.non_trainable_weights) == 2
    clone = cls.from_config(kernel.get_config())
    assert clone.get_config() == kernel.get_config()
    np.testing.assert_allclose(clone(x).numpy(), kernel(x).numpy(), rtol=1e-6)


def test_kernel_validation():
    with pytest.raises(ValueError, match="amplitude=0"):
        kernels.Matern32(amplitude=0)
    with pytest.raises(ValueError, match="length_scale"):
        kernels.ExponentiatedQuadratic(length_scale=[1.0, -1.0])
    with pytest.raises(ValueError, match="amplitude"):
        kernels.ExponentiatedQuadratic(amplitude=[1.0, 2.0])
    with pytest.raises(ValueError, match="3 ARD length scales"):
        kernels.ExponentiatedQuadratic(length_scale=[1.0, 1.0, 1.0])(np.ones((2, 2)))
    with pytest.raises(ValueError, match="rank-2"):
        kernels.ExponentiatedQuadratic()(np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="Unknown kernel"):
        kernels.get("rbf")
    assert isinstance(kernels.get("matern52", dtype="float64"), kernels.Matern52)


def test_mean_functions():
    x = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(kernels.ZeroMean()(x).numpy(), np.zeros(3))
    np.testing.assert_allclose(kernels.ConstantMean(2.5)(x).numpy(), np.full(3, 2.5))
    np.testing.assert_allclose(kernels.LinearMean(2)(x).numpy(), x, rtol=1e-6)  # Identity.
    gp = GaussianProcess(2, mean_fn=kernels.ConstantMean(1.5), dtype="float64", seed=0)
    np.testing.assert_allclose(gp(x).distribution.mean().numpy(), np.full((3, 2), 1.5))


def test_kernel_contract():
    run_layer_test(kernels.ExponentiatedQuadratic, {"length_scale": [1.0, 2.0, 3.0]}, (5, 3),
                   expected_output_shape=(5, 5), expected_num_trainable_weights=2,
                   expected_num_losses=0)


@pytest.mark.slow
@pytest.mark.parametrize("cls,kwargs,shape", [
    (kernels.Matern12, {}, (5, 5)), (kernels.Matern32, {}, (5, 5)),
    (kernels.Matern52, {"amplitude": 2.0}, (5, 5)), (kernels.Linear, {}, (5, 5)),
    (kernels.ConstantMean, {"value": 1.0}, (5,)), (kernels.LinearMean, {"units": 2}, (5, 2)),
], ids=lambda v: getattr(v, "__name__", None))
def test_kernel_and_mean_contract_slow(cls, kwargs, shape):
    run_layer_test(cls, kwargs, (5, 3), expected_output_shape=shape)


# ---------------------------------------------------------------- exact GP
def test_exact_gp_matches_closed_form_and_sklearn(data):
    x, y, x_test = data
    gp = GaussianProcess(2, covariance_fn=_eq(), conditional_inputs=x, conditional_outputs=y,
                         observation_noise_variance=NOISE, jitter=1e-12, dtype="float64",
                         seed=0)
    rv = gp(x_test)
    assert rv.shape == (7, 2) and rv.value.shape == (7, 2)
    mean = rv.distribution.mean().numpy()
    scale = rv.distribution.scale_row.to_dense().numpy()
    cov = scale @ scale.T
    # Closed form (Rasmussen & Williams eq. 2.23-2.24).
    k = sk.ConstantKernel(AMPLITUDE**2) * sk.RBF(LENGTH_SCALES)
    ky = k(x) + NOISE * np.eye(len(x))
    np.testing.assert_allclose(mean, k(x_test, x) @ np.linalg.solve(ky, y), rtol=1e-8)
    np.testing.assert_allclose(
        cov, k(x_test) - k(x_test, x) @ np.linalg.solve(ky, k(x, x_test)), rtol=1e-8, atol=1e-12)
    # scikit-learn with the same fixed kernel and noise.
    reference = GaussianProcessRegressor(k, alpha=NOISE, optimizer=None).fit(x, y)
    np.testing.assert_allclose(mean, reference.predict(x_test), rtol=1e-5)
    single = GaussianProcessRegressor(k, alpha=NOISE, optimizer=None).fit(x, y[:, 0])
    _, sk_cov = single.predict(x_test, return_cov=True)
    np.testing.assert_allclose(cov, sk_cov, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(gp.log_marginal_likelihood().numpy(),
                               reference.log_marginal_likelihood_value_, rtol=1e-5)
    # The noise as a WhiteKernel: sklearn's predictive std then includes it.
    white = GaussianProcessRegressor(k + sk.WhiteKernel(NOISE), alpha=0.0, optimizer=None)
    _, sk_std = white.fit(x, y[:, 0]).predict(x_test, return_std=True)
    _, var = gp.predict(x_test)
    np.testing.assert_allclose(var.numpy()[:, 0] + NOISE, sk_std**2, rtol=1e-5)


def test_exact_gp_prior_and_samples(data):
    x = data[0][:10]
    gp = GaussianProcess(3, covariance_fn=_eq(), dtype="float64", jitter=1e-9, seed=3)
    first, second = gp(x), gp(x)
    scale = first.distribution.scale_row.to_dense().numpy()
    np.testing.assert_allclose(scale @ scale.T, _eq()(x).numpy() + 1e-9 * np.eye(10), rtol=1e-8)
    np.testing.assert_array_equal(first.distribution.mean().numpy(), np.zeros((10, 3)))
    assert not np.allclose(first.numpy(), second.numpy())  # Fresh noise per call.
    again = GaussianProcess(3, covariance_fn=_eq(), dtype="float64", jitter=1e-9, seed=3)
    np.testing.assert_allclose(again(x).numpy(), first.numpy(), rtol=1e-10)  # Seeded.
    # Monte Carlo: the sample covariance of the values matches the prior covariance.
    values = first.distribution.sample(4000, seed=[1, 2]).numpy()  # [4000, 10, 3]
    empirical = np.cov(values[:, :, 0].T)
    np.testing.assert_allclose(empirical, scale @ scale.T, atol=0.15)  # ~5 se at 1.69.


def test_exact_gp_float32_samples_are_finite_and_match_float64():
    """Issue #19: a float32 (default) GP prior on 100 points and a posterior at 50 test
    points sampled all-NaN (float32 Cholesky with 1e-6 jitter). The joint covariance
    is now factorized in float64: float32 samples are finite, equal the float64 layer's
    samples (same seed, same noise), and have the right covariance (Monte Carlo)."""
    grid = np.linspace(-3.0, 3.0, 100)[:, None].astype("float32")
    prior32 = GaussianProcess(2000, seed=5)
    prior64 = GaussianProcess(2000, dtype="float64", seed=5)
    s32, s64 = prior32(grid).numpy(), prior64(grid.astype("float64")).numpy()
    assert s32.dtype == np.float32 and np.all(np.isfinite(s32))
    np.testing.assert_allclose(s32, s64, atol=1e-4)
    # 2000 independent units: sample covariance within 0.15 of k(x, x) entrywise
    # (standard error <= sqrt(2 / 2000) = 0.032 at the diagonal; 0.15 is ~4.7 se).
    default_kernel = kernels.ExponentiatedQuadratic(dtype="float64")
    np.testing.assert_allclose(np.cov(s32), default_kernel(grid.astype("float64")).numpy(),
                               atol=0.15)
    rng = np.random.default_rng(0)
    z = rng.uniform(-3, 3, (20, 1)).astype("float32")
    gp = GaussianProcess(1, conditional_inputs=z, conditional_outputs=np.sin(z),
                         observation_noise_variance=0.01, seed=0)
    test_x = np.linspace(-3.0, 3.0, 50)[:, None].astype("float32")
    rv = gp(test_x)
    assert np.all(np.isfinite(rv.numpy())) and np.all(np.isfinite(rv.distribution.mean()))
    assert np.all(np.isfinite(rv.distribution.log_prob(rv.numpy()).numpy()))
    # Inside tf.function too (graph path of the check).
    assert np.all(np.isfinite(tf.function(lambda t: tf.convert_to_tensor(gp(t)))(test_x)))


def test_exact_gp_ill_posed_covariance_raises():
    """Duplicated inputs with jitter=0 (singular covariance), or NaN inputs: no NaN
    samples, an error naming the problem, eagerly and in a tf.function."""
    dup = np.zeros((4, 1), "float32")
    with pytest.raises(ValueError, match="not positive definite.*jitter=0.0"):
        GaussianProcess(1, jitter=0.0, seed=0)(dup)
    with pytest.raises(ValueError, match="not positive definite"):
        GaussianProcess(1, seed=0)(np.array([[0.0], [np.nan]], "float32"))
    layer = GaussianProcess(1, jitter=0.0, seed=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not positive definite"):
        tf.function(lambda t: tf.convert_to_tensor(layer(t)))(dup)


def test_exact_gp_fits_hyperparameters_like_sklearn(data):
    """Maximizing our log marginal likelihood reaches sklearn's optimum (same start)."""
    x, y = data[0][:, :1], data[1][:, 0]
    gp = GaussianProcess(1, covariance_fn=kernels.ExponentiatedQuadratic(1.0, 1.0,
                                                                         dtype="float64"),
                         conditional_inputs=x, conditional_outputs=y,
                         observation_noise_variance=0.1, dtype="float64", seed=0)
    optimizer = keras.optimizers.Adam(0.05)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = -gp.log_marginal_likelihood()
        optimizer.apply_gradients(zip(tape.gradient(loss, gp.trainable_variables),
                                      gp.trainable_variables, strict=True))

    for _ in range(400):
        step()
    k = (sk.ConstantKernel(1.0, (1e-3, 1e3)) * sk.RBF(1.0, (1e-2, 1e2))
         + sk.WhiteKernel(0.1, (1e-5, 1e1)))
    reference = GaussianProcessRegressor(k, alpha=0.0).fit(x, y)
    np.testing.assert_allclose(gp.log_marginal_likelihood().numpy(),
                               reference.log_marginal_likelihood_value_, rtol=1e-6)
    fitted = reference.kernel_.get_params()
    np.testing.assert_allclose(
        [gp.covariance_fn.amplitude.numpy() ** 2, gp.covariance_fn.length_scale.numpy(),
         gp.observation_noise_variance.numpy()],
        [fitted["k1__k1__constant_value"], fitted["k1__k2__length_scale"],
         fitted["k2__noise_level"]], rtol=1e-3)


def test_exact_gp_validation(data):
    x, y, _ = data
    with pytest.raises(ValueError, match="both"):
        GaussianProcess(2, conditional_inputs=x)
    with pytest.raises(ValueError, match="conditional_outputs of shape"):
        GaussianProcess(3, conditional_inputs=x, conditional_outputs=y)
    with pytest.raises(ValueError, match="units=0"):
        GaussianProcess(0)
    with pytest.raises(ValueError, match="observation_noise_variance"):
        GaussianProcess(1, observation_noise_variance=-1.0)
    with pytest.raises(ValueError, match="flatten"):
        GaussianProcess(1)(np.ones((2, 3, 4), "float32"))


def test_exact_gp_contract(data):
    x, y, _ = data
    run_layer_test(GaussianProcess, {"units": 2, "conditional_inputs": x[:8, :1].repeat(3, 1),
                                     "conditional_outputs": y[:8],
                                     "observation_noise_variance": 0.1},
                   (6, 3), expected_output_shape=(6, 2), expected_num_losses=0,
                   expected_num_trainable_weights=3)


@pytest.mark.slow
@pytest.mark.parametrize("kwargs,num_trainable", [
    ({}, 2),
    ({"num_conditional": 5, "conditionals_trainable": True, "observation_noise_variance": 0.1,
      "mean_fn": "constant"}, 6),
])
def test_exact_gp_contract_slow(kwargs, num_trainable):
    run_layer_test(GaussianProcess, {"units": 2, **kwargs}, (6, 3),
                   expected_output_shape=(6, 2), expected_num_losses=0,
                   expected_num_trainable_weights=num_trainable)


# ---------------------------------------------------------------- sparse GP
def _optimal_q(kernel, x, z, y, noise):
    """Titsias (2009) optimal q(u) = N(mu, Sigma), whitened with Lz: (m_v, S_v)."""
    kzz, kzx = kernel(z).numpy(), kernel(z, x).numpy()
    sigma_inv = kzz + kzx @ kzx.T / noise
    mu = kzz @ np.linalg.solve(sigma_inv, kzx @ y) / noise
    cov = kzz @ np.linalg.solve(sigma_inv, kzz)
    chol = np.linalg.cholesky(kzz + 1e-12 * np.eye(len(z)))
    m_v = np.linalg.solve(chol, mu)
    s_v = np.linalg.solve(chol, np.linalg.solve(chol, cov).T).T
    return m_v.T, np.linalg.cholesky((s_v + s_v.T) / 2 + 1e-13 * np.eye(len(z)))


def _sparse(x, z, y, **kwargs):
    layer = SparseGaussianProcess(y.shape[1], len(z), covariance_fn=_eq(), jitter=1e-12,
                                  dtype="float64", seed=0, **kwargs)
    layer(x[:1])
    layer.inducing_inputs.assign(z)
    m_v, s_v = _optimal_q(layer.covariance_fn, x, z, y, NOISE)
    layer.inducing_outputs.assign(m_v, np.broadcast_to(s_v, (y.shape[1],) + s_v.shape))
    return layer


def _elbo(layer, x, y):
    mean, var = (t.numpy() for t in layer.predict(x))
    ell = -0.5 * np.log(2 * np.pi * NOISE) - ((y - mean) ** 2 + var) / (2 * NOISE)
    return ell.sum() - float(tf.add_n(layer.losses))


def test_sparse_gp_at_training_inputs_reproduces_exact_posterior(data):
    x, y, x_test = data
    exact = GaussianProcess(2, covariance_fn=_eq(), conditional_inputs=x, conditional_outputs=y,
                            observation_noise_variance=NOISE, jitter=1e-12, dtype="float64")
    sparse = _sparse(x, x, y)
    for got, want in zip(sparse.predict(x_test), exact.predict(x_test), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-9)
    rv = sparse(x_test)
    np.testing.assert_allclose(rv.distribution.mean().numpy(), exact.predict(x_test)[0].numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(_elbo(sparse, x, y), exact.log_marginal_likelihood().numpy(),
                               rtol=1e-7)


def test_sparse_gp_elbo_bounds_and_approaches_lml(data):
    x, y, _ = data
    y = y[:, :1]
    exact = GaussianProcess(1, covariance_fn=_eq(), conditional_inputs=x, conditional_outputs=y,
                            observation_noise_variance=NOISE, jitter=1e-12, dtype="float64")
    lml = float(exact.log_marginal_likelihood())
    order = np.random.default_rng(1).permutation(len(x))
    elbos = [_elbo(_sparse(x, x[order[:m]], y), x, y) for m in (3, 6, 12, 20, 30)]
    assert all(e <= lml + 1e-6 for e in elbos), (elbos, lml)
    # Nested inducing sets: the optimal bound never loosens, and is tight at Z = X.
    assert all(b >= a - 1e-6 for a, b in zip(elbos[:-1], elbos[1:], strict=True)), elbos
    assert lml - elbos[0] > 1.0 and abs(lml - elbos[-1]) < 1e-5 * abs(lml)


def test_optimal_q_is_a_stationary_point_of_the_elbo(data):
    x, y, _ = data
    layer = _sparse(x, x[::3], y[:, :1])
    q = layer.inducing_outputs
    mean, var = layer.predict(x)  # Warm start.
    with tf.GradientTape() as tape:
        mean, var = layer.predict(x)
        ell = tf.reduce_sum(-((y[:, :1] - mean) ** 2 + var) / (2 * NOISE))
        elbo = ell - tf.add_n(layer.losses)
    grads = tape.gradient(elbo, [q.mean, q.raw_scale_tril])
    assert max(np.abs(g.numpy()).max() for g in grads) < 1e-5


def test_whitened_kl_matches_tfp_and_scales_with_dataset_size(data):
    x = data[0]
    layer = SparseGaussianProcess(2, 5, dtype="float64", seed=0, dataset_size=10)
    layer(x)
    rng = np.random.default_rng(0)
    tril = np.tril(rng.normal(size=(2, 5, 5)), -1) + np.eye(5) * rng.uniform(0.3, 2, (2, 1, 5))
    loc = rng.normal(size=(2, 5))
    layer.inducing_outputs.assign(loc, tril)
    expected = tf.reduce_sum(tfd.kl_divergence(
        tfd.MultivariateNormalTriL(loc, tril),
        tfd.MultivariateNormalDiag(tf.zeros((2, 5), tf.float64)))).numpy()
    np.testing.assert_allclose(layer.losses[0].numpy(), expected / 10, rtol=1e-10)
    model = keras.Sequential([layer])
    assert regularizers.set_dataset_size(model, 40) == 1
    np.testing.assert_allclose(layer.losses[0].numpy(), expected / 40, rtol=1e-10)
    assert layer.get_config()["dataset_size"] == 40
    with pytest.raises(tf.errors.InvalidArgumentError, match="positive diagonal"):
        layer.inducing_outputs.assign(loc, -tril)


def test_sparse_gp_sample_moments_and_full_vs_factorized(data):
    x = data[0][:4]
    layer = SparseGaussianProcess(2, 6, dtype="float64", seed=0,
                                  inducing_outputs_initializer=TrainableMultivariateNormal(0.5))
    layer(x)
    layer.inducing_outputs.mean.assign(np.random.default_rng(0).normal(size=(2, 6)))
    # Each row of a tiled input is an independent draw of the marginal at that point.
    tiled = np.repeat(x[:1], 20000, axis=0)
    rv = layer(tiled)
    values = rv.numpy()
    mean, var = (t.numpy()[0] for t in layer.predict(x[:1]))
    assert np.all(np.abs(values.mean(0) - mean) < 4 * np.sqrt(var / 20000))
    np.testing.assert_allclose(values.var(0), var, rtol=0.05)
    # A diagonal S gives the same predictive and KL as a factorized q with those stddevs.
    layer.inducing_outputs.assign(np.zeros((2, 6)), np.broadcast_to(0.5 * np.eye(6), (2, 6, 6)))
    q = initializers.TrainableNormal("zeros", keras.initializers.Constant(np.log(0.5)),
                                     stddev_constraint="exp")
    factorized = SparseGaussianProcess(2, 6, dtype="float64", seed=0,
                                       inducing_outputs_initializer=q)
    factorized(x)
    factorized.inducing_inputs.assign(layer.inducing_inputs)
    for got, want in zip(factorized.predict(x), layer.predict(x), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
    np.testing.assert_allclose(factorized.losses[0].numpy(), layer.losses[0].numpy(), rtol=1e-5)


def test_deep_gp_stack(data):
    """Paper Fig. 5: a Sequential stack of sparse GPs is a doubly stochastic deep GP."""
    x = tf.constant(data[0], tf.float32)
    model = keras.Sequential([
        SparseGaussianProcess(4, 8, mean_fn=kernels.LinearMean(4), seed=1),
        SparseGaussianProcess(4, 8, mean_fn=kernels.LinearMean(4), seed=2),
        SparseGaussianProcess(1, 8, seed=3,
                              inducing_outputs_initializer=TrainableMultivariateNormal(0.1)),
    ])
    out = model(x)
    assert out.shape == (30, 1) and len(model.losses) == 3
    for _ in range(2):
        with tf.GradientTape() as tape:
            out = model(x)
            loss = tf.reduce_mean(tf.square(out - 1.0)) + tf.add_n(model.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        names = [v.name for v, g in zip(model.trainable_variables, grads, strict=True)
                 if g is None]
        assert not names, names
    # The hidden layers are sampled: two passes give different predictive variances.
    assert not np.allclose(model(x).distribution.variance().numpy(),
                           model(x).distribution.variance().numpy())


def test_sparse_gp_contract():
    run_layer_test(SparseGaussianProcess, {"units": 2, "num_inducing": 4}, (6, 3),
                   expected_output_shape=(6, 2), expected_num_losses=1,
                   expected_num_trainable_weights=5, expected_num_non_trainable_weights=1)


@pytest.mark.slow
def test_sparse_gp_factorized_contract():
    run_layer_test(SparseGaussianProcess, {"units": 2, "num_inducing": 4,
                                           "inducing_outputs_initializer": "trainable_normal",
                                           "mean_fn": "constant"},
                   (6, 3), expected_output_shape=(6, 2), expected_num_losses=1,
                   expected_num_trainable_weights=6)


# ---------------------------------------------------------------- random features
@pytest.mark.parametrize("cls", [kernels.ExponentiatedQuadratic, kernels.Matern32,
                                 kernels.Matern12])
def test_rff_kernel_error_shrinks_like_inverse_sqrt_features(cls, data):
    x = data[0]
    kernel = cls(AMPLITUDE, LENGTH_SCALES, dtype="float64")
    exact = kernel(x).numpy()
    sizes = np.array([64, 256, 1024, 4096])
    errors = []
    for size in sizes:
        rms = [np.sqrt(np.mean((RandomFourierFeatures(1, int(size), kernel, seed=s, dtype="float64")
                                .approximate_kernel(x).numpy() - exact) ** 2))
               for s in range(8)]
        errors.append(np.mean(rms))
    slope = np.polyfit(np.log(sizes), np.log(errors), 1)[0]
    assert -0.6 < slope < -0.4, (slope, errors)
    scaled = np.asarray(errors) * np.sqrt(sizes)  # error * sqrt(D) is about constant.
    assert scaled.max() / scaled.min() < 1.4, scaled


def test_rff_layer_is_a_bayesian_linear_model(data):
    x = tf.constant(data[0], tf.float32)
    layer = RandomFourierFeatures(3, 32, covariance_fn="matern52", dataset_size=30, seed=0)
    out = layer(x)
    assert out.shape == (30, 3) and len(layer.losses) == 1
    w = layer.output_layer.kernel
    kl = regularizers.NormalKLDivergence().divergence(w).numpy()
    np.testing.assert_allclose(layer.losses[0].numpy(), kl / 30, rtol=1e-5)
    # The mean function is features @ posterior mean.
    np.testing.assert_allclose(layer(x, training=False).numpy().mean(), out.numpy().mean(),
                               atol=0.5)
    features = layer.features(x).numpy()
    np.testing.assert_allclose(features.shape, (30, 32))
    with pytest.raises(ValueError, match="spectral density"):
        RandomFourierFeatures(1, 8, covariance_fn="linear")


def test_rff_contract():
    run_layer_test(RandomFourierFeatures, {"units": 2, "num_features": 16}, (6, 3),
                   expected_output_shape=(6, 2), expected_num_losses=1,
                   expected_num_trainable_weights=4)
