"""The Bayesian dense layers (`bayes_planet.layers.dense`): contract, equivalence with Keras'
Dense at zero variance, Monte Carlo moments, Flipout's gradient variance, DVI's closed-form
moments, variational dropout's pruning, bad arguments."""

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers.testing import run_layer_test
from tests.layers._families import DENSE, zero_variance_kernel


@pytest.mark.parametrize("cls", DENSE + [bl.DenseDVI], ids=lambda c: c.__name__)
def test_dense_contract(cls):
    # Weights: kernel mean + stddev, bias; non-trainable: the noise counter.
    run_layer_test(cls, {"units": 3, "activation": "relu"}, (4, 5),
                   expected_output_shape=(4, 3), expected_num_trainable_weights=3,
                   expected_num_non_trainable_weights=1, expected_num_losses=1)


@pytest.mark.parametrize("cls", DENSE, ids=lambda c: c.__name__)
def test_dense_rank3_input(cls):
    layer = cls(3, seed=0)
    assert tuple(layer(tf.ones([2, 7, 5])).shape) == (2, 7, 3)


def test_bayesian_bias_adds_a_second_kl_term():
    run_layer_test(bl.DenseFlipout, {"units": 2, "bias_initializer": "trainable_normal",
                                     "bias_regularizer": "normal_kl_divergence"}, (3, 4),
                   expected_output_shape=(3, 2), expected_num_trainable_weights=4,
                   expected_num_losses=2, run_save=False)


@pytest.mark.parametrize("cls", DENSE + [bl.DenseDVI], ids=lambda c: c.__name__)
def test_zero_variance_dense_equals_keras_dense(cls):
    x = np.random.default_rng(1).standard_normal((6, 5)).astype("float32")
    ref = keras.layers.Dense(4, activation="relu")
    expected = ref(x).numpy()
    layer = cls(4, activation="relu", kernel_initializer=zero_variance_kernel(), seed=3)
    layer(x)
    layer.kernel.mean.assign(ref.kernel)
    layer.bias.assign(ref.bias)
    kwargs = {"training": True} if cls is bl.DenseVariationalDropout else {}
    out = tf.convert_to_tensor(layer(x, **kwargs)).numpy()
    if cls is bl.DenseDVI:
        out = layer(x).distribution.mean().numpy()  # relu of a point mass: exact.
    np.testing.assert_allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("cls", DENSE, ids=lambda c: c.__name__)
def test_point_mass_posterior_is_exactly_deterministic(cls):
    layer = cls(3, kernel_initializer="trainable_deterministic", seed=0)
    x = tf.ones([2, 4])
    out = layer(x)
    expected = tf.matmul(x, layer.kernel.loc()) + layer.bias
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def _noisy_layer(cls, units=3, stddev_raw=-1.0):
    init = bl.TrainableNormal(stddev_initializer=keras.initializers.Constant(stddev_raw))
    return cls(units, kernel_initializer=init, seed=7)


@pytest.mark.parametrize("cls", [bl.DenseReparameterization, bl.DenseFlipout,
                                 bl.DenseLocalReparameterization],
                         ids=lambda c: c.__name__)
def test_monte_carlo_moments_match_the_posterior(cls):
    """MC mean -> x @ M + b and MC variance -> x² @ σ² (exact for one linear layer).

    Tolerances: mean within 4 standard errors; variance within 10 % (relative
    standard error of a variance from 4000 normal draws is sqrt(2/4000) = 2.2 %).
    """
    x = tf.constant([[1.0, -2.0, 0.5, 0.0]])
    layer = _noisy_layer(cls)
    layer(x)
    n = 4000

    @tf.function
    def draw():  # n separate calls: fresh weight noise (and signs) each time.
        out = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            out = out.write(i, layer(x)[0])
        return out.stack()

    draws = draw().numpy()
    mean = (x @ layer.kernel.loc() + layer.bias).numpy()[0]
    var = (tf.square(x) @ tf.square(layer.kernel.scale())).numpy()[0]
    stderr = np.sqrt(var / n)
    assert np.all(np.abs(draws.mean(0) - mean) < 4 * stderr), (draws.mean(0), mean, stderr)
    np.testing.assert_allclose(draws.var(0), var, rtol=0.10)


def test_flipout_has_lower_gradient_variance_than_reparameterization():
    """Wen et al. (2018): per-example perturbations decorrelate a batch's gradients.

    Same posterior, same batch of 128 distinct inputs; the variance (over 300
    noise draws) of the gradient w.r.t. the kernel mean, averaged over entries.
    """
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((128, 8)), tf.float32)
    y = tf.constant(rng.standard_normal((128, 4)), tf.float32)
    variances = {}
    for cls in (bl.DenseReparameterization, bl.DenseFlipout):
        layer = _noisy_layer(cls, units=4, stddev_raw=0.0)  # σ = softplus(0) ≈ 0.69
        layer(x)
        layer.kernel.mean.assign(tf.constant(rng.standard_normal((8, 4)) * 0.0, tf.float32))

        @tf.function
        def grad(layer=layer):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(layer(x) - y))
            return tape.gradient(loss, layer.kernel.mean)

        grads = np.stack([grad().numpy() for _ in range(300)])
        variances[cls.__name__] = grads.var(0).mean()
    ratio = variances["DenseFlipout"] / variances["DenseReparameterization"]
    assert ratio < 0.5, variances


def test_dvi_moments_match_monte_carlo():
    """Mean/variance of relu(x W + b) for Gaussian W: closed form vs 200k MC draws.

    Exact for one layer with a deterministic input; tolerance 2 % relative
    (MC relative standard error ≈ 0.3 % for the mean, ≈ 0.6 % for the variance).
    """
    x = tf.constant([[0.3, -1.0, 2.0], [1.0, 0.5, -0.2]])
    layer = _noisy_layer(bl.DenseDVI, units=4, stddev_raw=-0.5)
    layer.activation = keras.activations.relu
    rv = layer(x)
    loc, scale = layer.kernel.loc().numpy(), layer.kernel.scale().numpy()
    rng = np.random.default_rng(0)
    w = loc + scale * rng.standard_normal((200_000,) + loc.shape).astype(np.float32)
    pre = np.einsum("bi,sio->sbo", x.numpy(), w) + layer.bias.numpy()
    post = np.maximum(pre, 0.0)
    np.testing.assert_allclose(rv.distribution.mean().numpy(), post.mean(0), rtol=0.02,
                               atol=1e-3)
    np.testing.assert_allclose(rv.distribution.variance().numpy(), post.var(0), rtol=0.02,
                               atol=1e-3)


def test_stacked_dvi_propagates_a_random_variable():
    x = tf.ones([2, 3])
    model = keras.Sequential([bl.DenseDVI(8, activation="relu", seed=0), bl.DenseDVI(2, seed=1)])
    rv = model(x)
    assert isinstance(rv, bl.RandomVariable)
    assert rv.distribution.mean().shape == (2, 2)
    # The second layer reads the first's distribution (not just its value): the closed form
    # Var = μ² @ σ² + Var_x @ (M² + σ²) (deterministic zero bias).
    hidden = model.layers[0](x).distribution
    loc, scale = (t.numpy() for t in model.layers[1].kernel.moments())
    mean, var = hidden.mean().numpy(), hidden.variance().numpy()
    np.testing.assert_allclose(rv.distribution.variance().numpy(),
                               mean**2 @ scale**2 + var @ (loc**2 + scale**2), rtol=1e-5)


@pytest.mark.parametrize("activation", ["relu", tf.nn.relu, keras.activations.relu,
                                        keras.layers.ReLU()],
                         ids=["name", "tf.nn.relu", "keras.activations.relu", "ReLU()"])
def test_dvi_takes_relu_in_every_spelling_and_propagates_its_moments(activation):
    """The rectified-Gaussian moments for every spelling of max(x, 0), as for 'relu'; a ReLU
    layer with a slope or a cap is not max(x, 0) and is refused in one line."""
    x = np.random.default_rng(0).standard_normal((4, 3)).astype("float32")
    reference = bl.DenseDVI(5, activation="relu", seed=0)
    reference(x)
    layer = bl.DenseDVI(5, activation=activation, seed=0)
    layer(x)
    layer.set_weights(reference.get_weights())
    for moment in ("mean", "variance"):
        np.testing.assert_allclose(getattr(layer(x).distribution, moment)().numpy(),
                                   getattr(reference(x).distribution, moment)().numpy(),
                                   rtol=1e-6)
    with pytest.raises(ValueError, match=r"only for activation=None, 'linear' or 'relu'\. "
                                         r"Received: activation="):
        bl.DenseDVI(5, activation=keras.layers.ReLU(negative_slope=0.1))


def test_variational_dropout_inference_uses_pruned_mean_weights():
    layer = bl.DenseVariationalDropout(3, seed=0)
    x = tf.ones([2, 4])
    layer(x)
    deterministic = [layer(x, training=False).numpy() for _ in range(2)]
    np.testing.assert_array_equal(deterministic[0], deterministic[1])
    # Drive one weight's dropout rate up (log α > 3): it is pruned at inference.
    mean = layer.kernel.mean.numpy()
    mean[0, 0] = 1e-4
    layer.kernel.mean.assign(mean)
    out = layer(x, training=False).numpy()
    pruned = mean.copy()
    pruned[0, 0] = 0.0
    np.testing.assert_allclose(out, x.numpy() @ pruned + layer.bias.numpy(), rtol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({"units": 0}, "units=0"),
    ({"units": -2}, "units=-2"),
    ({"units": 2.5}, "units=2.5"),
    ({"units": 2, "kernel_initializer": "trainable_nromal"}, "trainable_nromal"),
    ({"units": 2, "kernel_regularizer": "normal_kl"}, "normal_kl"),
    ({"units": 2, "seed": -1}, "seed=-1"),
    ({"units": 2, "activation": "tanh"}, "activation"),
])
def test_bad_arguments_raise_clear_errors(kwargs, match):
    cls = bl.DenseDVI if kwargs.get("activation") == "tanh" else bl.DenseFlipout
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)
