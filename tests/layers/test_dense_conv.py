"""Contract and statistics of the core Bayesian dense and convolutional layers."""

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet import layer_registry
from bayes_planet._keras import keras
from bayes_planet.layers.testing import run_layer_test, save_saved_model


def _registered(family, sampling_only=False):
    """The family's Bayesian classes in `layer_registry` (every one gets the contract)."""
    return [layer_registry.get(family, e)
            for e in layer_registry.estimators(family, sampling_only)[1:]]


DENSE = _registered("dense")
CONV2D = _registered("conv2d", sampling_only=True)
CONV1D = _registered("conv1d", sampling_only=True)


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


@pytest.mark.parametrize("cls", CONV2D, ids=lambda c: c.__name__)
def test_conv2d_contract(cls):
    run_layer_test(cls, {"filters": 3, "kernel_size": 3, "strides": 2, "padding": "same"},
                   (2, 8, 8, 2), expected_output_shape=(2, 4, 4, 3),
                   expected_num_trainable_weights=3, expected_num_non_trainable_weights=1,
                   expected_num_losses=1)


@pytest.mark.parametrize("cls", CONV1D, ids=lambda c: c.__name__)
def test_conv1d_contract(cls):
    run_layer_test(cls, {"filters": 4, "kernel_size": 3, "padding": "causal"}, (2, 9, 2),
                   expected_output_shape=(2, 9, 4), expected_num_trainable_weights=3,
                   expected_num_losses=1, run_save=False, run_fit=False)


def test_bayesian_bias_adds_a_second_kl_term():
    run_layer_test(bl.DenseFlipout, {"units": 2, "bias_initializer": "trainable_normal",
                                     "bias_regularizer": "normal_kl_divergence"}, (3, 4),
                   expected_output_shape=(3, 2), expected_num_trainable_weights=4,
                   expected_num_losses=2, run_save=False)


def _zero_variance_kernel():
    # softplus(-1e4) == 0 exactly in float32: a posterior with zero variance.
    return bl.TrainableNormal(stddev_initializer=keras.initializers.Constant(-1e4))


@pytest.mark.parametrize("cls", DENSE + [bl.DenseDVI], ids=lambda c: c.__name__)
def test_zero_variance_dense_equals_keras_dense(cls):
    x = np.random.default_rng(1).standard_normal((6, 5)).astype("float32")
    ref = keras.layers.Dense(4, activation="relu")
    expected = ref(x).numpy()
    layer = cls(4, activation="relu", kernel_initializer=_zero_variance_kernel(), seed=3)
    layer(x)
    layer.kernel.mean.assign(ref.kernel)
    layer.bias.assign(ref.bias)
    kwargs = {"training": True} if cls is bl.DenseVariationalDropout else {}
    out = tf.convert_to_tensor(layer(x, **kwargs)).numpy()
    if cls is bl.DenseDVI:
        out = layer(x).distribution.mean().numpy()  # relu of a point mass: exact.
    np.testing.assert_allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("cls", CONV2D, ids=lambda c: c.__name__)
def test_zero_variance_conv_equals_keras_conv(cls):
    x = np.random.default_rng(2).standard_normal((2, 6, 6, 3)).astype("float32")
    ref = keras.layers.Conv2D(4, 3, padding="same")
    expected = ref(x).numpy()
    layer = cls(4, 3, padding="same", kernel_initializer=_zero_variance_kernel(), seed=3)
    layer(x)
    layer.kernel.mean.assign(ref.kernel)
    layer.bias.assign(ref.bias)
    np.testing.assert_allclose(layer(x).numpy(), expected, atol=1e-5)


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


@pytest.mark.parametrize("cls", DENSE + CONV2D, ids=lambda c: c.__name__)
def test_seed_makes_outputs_reproducible(cls):
    is_conv = cls in CONV2D
    x = tf.ones([2, 5, 5, 2]) if is_conv else tf.ones([2, 5])
    args = (3, 3) if is_conv else (3,)
    kw = {"training": True} if cls is bl.DenseVariationalDropout else {}
    keras.utils.set_random_seed(1)
    a = cls(*args, seed=11)
    out_a = [a(x, **kw).numpy() for _ in range(2)]
    keras.utils.set_random_seed(1)
    b = cls(*args, seed=11)
    out_b = [b(x, **kw).numpy() for _ in range(2)]
    np.testing.assert_array_equal(out_a[0], out_b[0])
    np.testing.assert_array_equal(out_a[1], out_b[1])
    assert not np.array_equal(out_a[0], out_a[1]), "consecutive calls must draw new noise"


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


def test_wrong_rank_input_raises():
    with pytest.raises(ValueError, match="min_ndim=2"):
        bl.DenseReparameterization(2)(tf.ones([3]))
    with pytest.raises(ValueError, match="ndim=4"):
        bl.Conv2DFlipout(2, 3)(tf.ones([3, 4, 4]))


def test_shared_initializer_instance_is_rejected():
    init = bl.TrainableNormal()
    bl.DenseFlipout(2, kernel_initializer=init)(tf.ones([1, 3]))
    with pytest.raises(ValueError, match="already built"):
        bl.DenseFlipout(2, kernel_initializer=init)(tf.ones([1, 3]))


def test_drop_in_cnn_trains_on_digits_with_model_fit():
    """Paper Fig. 4: the same Sequential CNN with Conv2D or Conv2DFlipout trains via fit."""
    from bayes_planet.layers.demo import build_cnn, load_digits_split

    (x_train, y_train), (x_test, y_test) = load_digits_split(seed=0)
    accuracies = {}
    for conv in (keras.layers.Conv2D, bl.Conv2DFlipout):
        keras.utils.set_random_seed(0)
        model = build_cnn(conv, dataset_size=len(x_train))
        model.fit(x_train, y_train, epochs=15, batch_size=64, verbose=0)
        accuracies[conv.__name__] = model.evaluate(x_test, y_test, verbose=0)[1]
    # Measured 0.97-0.98 (Conv2D) and 0.95-0.97 (Conv2DFlipout) on this split.
    assert accuracies["Conv2D"] >= 0.93, accuracies
    assert accuracies["Conv2DFlipout"] >= 0.90, accuracies


@pytest.mark.parametrize("cls", DENSE + CONV2D, ids=lambda c: c.__name__)
def test_posterior_mean_is_the_keras_twin_with_the_mean_weights(cls):
    from bayes_planet.layers.base import moments

    conv = cls in CONV2D
    layer = cls(3, 2, padding="same", seed=0) if conv else cls(5, activation="relu", seed=0)
    twin = (keras.layers.Conv2D(3, 2, padding="same") if conv
            else keras.layers.Dense(5, activation="relu"))
    x = tf.random.stateless_normal([4, 6, 6, 2] if conv else [4, 7], [1, 2])
    layer(x)
    twin(x)
    # Move the means away from their initialization so the check is not trivial.
    layer.kernel.mean.assign(tf.random.stateless_normal(layer.kernel.mean.shape, [3, 4]))
    twin.set_weights([layer.kernel.loc().numpy(), moments(layer.bias, tf.float32)[0].numpy()])
    with bl.posterior_mean(layer) as weights:
        assert layer.kernel in weights
        outs = [layer(x, training=True).numpy() for _ in range(2)]
        inference = layer(x, training=False).numpy()
    for out in outs + [inference]:
        np.testing.assert_allclose(out, twin(x).numpy(), atol=1e-5)
    assert not np.allclose(layer(x, training=True).numpy(), outs[0])  # noisy again after
    assert len(layer.losses) == 1 and layer.losses[0].numpy() > 0  # the KL is unchanged


def test_posterior_mean_reaches_nested_layers_and_restores_the_outer_block():
    model = keras.Sequential([keras.Input((4,)), bl.DenseReparameterization(8, seed=0),
                              bl.DenseFlipout(3, seed=1)])
    x = tf.ones([2, 4])
    with bl.posterior_mean(model) as weights:
        assert len(weights) == 2  # the two kernels (the biases are deterministic)
        with bl.posterior_mean(model.layers[1]):
            pass
        np.testing.assert_array_equal(model(x).numpy(), model(x).numpy())  # still the mean
    assert not np.array_equal(model(x).numpy(), model(x).numpy())


def test_fixed_noise_holds_one_weight_sample_per_block():
    model = keras.Sequential([keras.Input((4,)), bl.DenseReparameterization(8, seed=0),
                              bl.DenseFlipout(3, seed=1)])
    x = tf.ones([2, 4])
    with bl.fixed_noise(model, [3, 4]) as layers:
        assert len(layers) == 2
        first, second = model(x).numpy(), model(x).numpy()
    np.testing.assert_array_equal(first, second)  # same weights every call in the block
    with bl.fixed_noise(model, [3, 4]):
        np.testing.assert_array_equal(model(x).numpy(), first)  # the seed determines it
    with bl.fixed_noise(model, [5, 6]):
        assert not np.array_equal(model(x).numpy(), first)
    assert not np.array_equal(model(x).numpy(), model(x).numpy())  # fresh noise outside


CONV_VD = [(bl.Conv2DVariationalDropout, (2, 8, 8, 2)), (bl.Conv1DVariationalDropout, (2, 9, 2))]


@pytest.mark.parametrize("cls, shape", CONV_VD, ids=lambda c: getattr(c, "__name__", ""))
def test_conv_variational_dropout_contract(cls, shape):
    out_shape = shape[:1] + tuple((d + 1) // 2 for d in shape[1:-1]) + (3,)
    run_layer_test(cls, {"filters": 3, "kernel_size": 3, "strides": 2, "padding": "same"},
                   shape, expected_output_shape=out_shape, expected_num_trainable_weights=3,
                   expected_num_non_trainable_weights=1, expected_num_losses=1)


@pytest.mark.parametrize("cls, shape", CONV_VD, ids=lambda c: getattr(c, "__name__", ""))
def test_conv_variational_dropout_kl_is_the_log_uniform_kl(cls, shape):
    """The loss is Molchanov et al.'s log-uniform KL approximation of the kernel, and
    equals the dense layer's for the same posterior (the KL is per weight)."""
    layer = cls(3, 3, padding="same", seed=0)
    layer(tf.ones(shape))
    assert isinstance(layer.kernel_regularizer, bl.LogUniformKLDivergence)
    (loss,) = layer.losses
    expected = bl.LogUniformKLDivergence()(layer.kernel)
    np.testing.assert_allclose(loss.numpy(), expected.numpy(), rtol=1e-6)
    # Closed form check of the sum: per-weight -KL from the same log α.
    from bayes_planet.layers.regularizers import log_alpha_from_moments
    log_alpha = log_alpha_from_moments(layer.kernel.loc(), layer.kernel.scale()).numpy()
    k1, k2, k3 = 0.63576, 1.87320, 1.48695  # Molchanov et al. (2017), eq. 14
    neg_kl = (k1 / (1 + np.exp(-(k2 + k3 * log_alpha))) - 0.5 * np.log1p(np.exp(-log_alpha))
              - k1)
    np.testing.assert_allclose(loss.numpy(), -neg_kl.sum(), rtol=1e-4)


def test_conv_variational_dropout_training_noise_and_pruned_inference():
    """Training: local reparameterization (MC moments of one output pixel match
    N(conv(x, θ), conv(x², σ²)) within 4 standard errors / 10 %); inference: the mean
    kernel with log α > 3 entries pruned, deterministic."""
    layer = bl.Conv2DVariationalDropout(2, 3, seed=1)
    x = tf.random.stateless_normal([1, 3, 3, 2], [4, 5])
    layer(x)
    n = 3000
    draws = layer(tf.repeat(x, n, 0), training=True).numpy()[:, 0, 0, :]  # one per row
    loc, scale = layer.kernel.loc(), layer.kernel.scale()
    mean = (tf.nn.conv2d(x, loc, 1, "VALID") + layer.bias).numpy()[0, 0, 0]
    var = tf.nn.conv2d(tf.square(x), tf.square(scale), 1, "VALID").numpy()[0, 0, 0]
    assert np.all(np.abs(draws.mean(0) - mean) < 4 * np.sqrt(var / n)), (draws.mean(0), mean)
    np.testing.assert_allclose(draws.var(0), var, rtol=0.10)
    first, second = layer(x, training=False).numpy(), layer(x, training=False).numpy()
    np.testing.assert_array_equal(first, second)
    kernel = layer.kernel.mean.numpy()
    kernel[0, 0, 0, 0] = 1e-4  # log α > 3: pruned at inference
    layer.kernel.mean.assign(kernel)
    from bayes_planet.layers.regularizers import log_alpha_from_moments
    keep = log_alpha_from_moments(kernel, layer.kernel.scale()).numpy() < 3.0
    assert not keep[0, 0, 0, 0] and keep.mean() > 0.5
    expected = tf.nn.conv2d(x, np.where(keep, kernel, 0.0), 1, "VALID") + layer.bias
    np.testing.assert_allclose(layer(x, training=False).numpy(), expected.numpy(), rtol=1e-5,
                               atol=1e-6)


def test_fixed_noise_nested_blocks_restore_the_enclosing_block():
    """Issue #19: leaving an inner block reset the seeds to None (fresh noise) instead
    of the outer block's seeds."""
    model = keras.Sequential([keras.Input((4,)), bl.DenseReparameterization(8, seed=0),
                              bl.DenseFlipout(3, seed=1)])
    x = tf.ones([2, 4])
    with bl.fixed_noise(model, [3, 4]):
        outer = model(x).numpy()
        with bl.fixed_noise(model, [5, 6]):
            inner = model(x).numpy()
        with bl.fixed_noise(model.layers[1], [7, 8]):  # nesting on a sub-layer
            partial = model(x).numpy()
        after = model(x).numpy()
    assert not np.array_equal(inner, outer) and not np.array_equal(partial, outer)
    np.testing.assert_array_equal(after, outer)  # the outer block's noise again
    assert not np.array_equal(model(x).numpy(), model(x).numpy())  # fresh outside


def test_posterior_mean_warns_on_a_model_without_bayesian_weights(tmp_path):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.warns(UserWarning, match="no Bayesian"):
        with bl.posterior_mean(model) as weights:
            assert weights == []
    # A Bayesian model saved and reloaded without its custom objects: plain layers.
    bayes = keras.Sequential([keras.Input((4,)), bl.DenseFlipout(3, seed=0)])
    save_saved_model(bayes, tmp_path / "model")
    reloaded = tf.saved_model.load(str(tmp_path / "model"))
    with pytest.warns(UserWarning, match="no Bayesian"):
        with bl.posterior_mean(reloaded):
            pass
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with bl.posterior_mean(bayes) as weights:
            assert len(weights) == 1
