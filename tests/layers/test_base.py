"""What every Bayesian layer shares (`bayes_planet.layers.base`): seeded noise (also under
XLA), input checks, gradients to the variational parameters, `posterior_mean` and
`fixed_noise`."""

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers.testing import save_saved_model
from tests.layers._families import CONV2D, DENSE


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


def test_wrong_rank_input_raises():
    with pytest.raises(ValueError, match="min_ndim=2"):
        bl.DenseReparameterization(2)(tf.ones([3]))
    with pytest.raises(ValueError, match="ndim=4"):
        bl.Conv2DFlipout(2, 3)(tf.ones([3, 4, 4]))


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


def test_gradients_reach_variational_parameters_across_two_tapes():
    layer = bl.DenseReparameterization(2, seed=0)
    x = tf.ones([4, 3])
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x)) + tf.add_n(layer.losses)
        grads = tape.gradient(loss, [layer.kernel.mean, layer.kernel.raw_stddev])
        assert all(g is not None and np.all(np.isfinite(g)) for g in grads)
        assert float(tf.reduce_sum(tf.abs(grads[1]))) > 0


def test_jit_compiled_calls_are_reproducible():
    """Under XLA the noise comes from XLA's own Philox stream (it differs from the
    TF kernels' stream), but the same seed state still gives the same outputs."""
    layer = bl.DenseFlipout(3, seed=5)
    x = tf.ones([2, 4])
    layer(x)
    counter = layer._seed_counter.numpy()
    jitted = tf.function(lambda t: layer(t), jit_compile=True)
    first = jitted(x).numpy()
    layer._seed_counter.assign(counter)
    np.testing.assert_array_equal(first, jitted(x).numpy())
    assert not np.array_equal(first, jitted(x).numpy())
