"""The wide posterior start of tfp.layers' keras.io posterior (`TrainableNormalWide`, alias
'trainable_normal_wide'): zero means, stddevs at log 2 + 1e-5, through the one `get()`; and the
keras.io lesson it makes visible in a short training: a small data set leaves the posterior
wide, a large one narrows it."""

import math

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet.layers import initializers, keras
from bayes_planet.layers.testing import run_layer_test

# tfp.layers.MultivariateNormalTriL on VariableLayer's zero parameters: softplus(0) + 1e-5.
TFP_START_STDDEV = math.log(2.0) + 1e-5
# TruncatedNormal(stddev=0.1) cut at 2 stddevs: the stddev of the jitter of log σ.
TRUNCATED_JITTER = 0.1 * 0.8796


def _start(identifier, shape=(200, 100)):
    posterior = initializers.get(identifier)
    posterior.build(shape)
    return posterior.loc().numpy(), posterior.scale().numpy()


@pytest.mark.parametrize("identifier", [
    "trainable_normal_wide",
    {"class_name": "TrainableNormalWide", "config": {"seed": 3}},
])
def test_the_alias_and_the_config_resolve_through_get(identifier):
    posterior = initializers.get(identifier)
    assert type(posterior) is bl.TrainableNormalWide


def test_the_start_is_tfps_zero_means_and_log2_stddevs():
    keras.utils.set_random_seed(0)
    mean, stddev = _start(bl.TrainableNormalWide(seed=7))
    assert np.all(mean == 0.0)
    log_stddev = np.log(stddev)
    # 20,000 entries: the geometric mean within 0.5 % of tfp's, the log-space jitter of
    # TrainableNormal's initial_stddev (TruncatedNormal, stddev 0.1, cut at ±0.2).
    assert abs(np.exp(log_stddev.mean()) / TFP_START_STDDEV - 1) < 5e-3
    assert abs(log_stddev.std() - TRUNCATED_JITTER) < 3e-3
    assert np.all(np.abs(log_stddev - math.log(TFP_START_STDDEV)) <= 0.2 + 1e-6)
    assert bl.initializers.WIDE_INITIAL_STDDEV == pytest.approx(TFP_START_STDDEV, abs=1e-12)


def test_it_is_trainable_normal_with_zero_means_and_initial_stddev():
    """The same numbers as the TrainableNormal arguments the class stands for (same seed)."""
    wide = _start(bl.TrainableNormalWide(seed=11))
    spelled = _start(bl.TrainableNormal(mean_initializer="zeros",
                                        initial_stddev=TFP_START_STDDEV, seed=11))
    for a, b in zip(wide, spelled, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_seed_fixes_the_start_and_another_seed_changes_it():
    a, b, c = (_start(bl.TrainableNormalWide(seed=s))[1] for s in (5, 5, 6))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_layer_contract_with_the_wide_start():
    layer = run_layer_test(bl.DenseFlipout, {"units": 3, "kernel_initializer":
                                             "trainable_normal_wide"}, (4, 5),
                           expected_output_shape=(4, 3), expected_num_trainable_weights=3,
                           expected_num_losses=1)
    assert type(layer.kernel) is bl.TrainableNormalWide


def test_bad_arguments_get_one_line_errors():
    with pytest.raises(ValueError, match=r"^Expected a positive number. Received: "
                                         r"initial_stddev=0$"):
        bl.TrainableNormalWide(initial_stddev=0)
    with pytest.raises(ValueError, match="Expected stddev_initializer or initial_stddev"):
        bl.TrainableNormalWide(stddev_initializer="zeros", initial_stddev=0.5)


def _epistemic_spread(num_train, kernel_initializer, steps=400, seed=0):
    """The mean stddev over 64 weight samples of a 1-16-1 Bayesian MLP's predictions at 32
    test inputs, after ``steps`` full-batch Adam steps (learning rate 0.03) on ``num_train``
    points of a sine."""
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (num_train, 1)).astype("float32")
    y = (np.sin(2 * x) + 0.1 * rng.standard_normal(x.shape)).astype("float32")
    model = keras.Sequential([
        keras.Input((1,)),
        bl.DenseReparameterization(16, activation="tanh", kernel_initializer=kernel_initializer,
                                   seed=seed + 1),
        bl.DenseReparameterization(1, kernel_initializer=kernel_initializer, seed=seed + 2),
    ])
    bl.set_dataset_size(model, num_train)
    model.compile(keras.optimizers.Adam(3e-2), "mse")
    full_batch = tf.data.Dataset.from_tensors((x, y)).repeat()
    model.fit(full_batch, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0)
    test = np.linspace(-2, 2, 32, dtype="float32")[:, None]
    draws = np.stack([np.asarray(model(test)) for _ in range(64)])
    return float(draws.std(axis=0).mean())


def test_small_data_leaves_the_wide_start_wide_and_large_data_narrows_it():
    """keras.io's lesson in 400 steps (seed 0; measured 0.68 against 0.32): 16 points leave
    the epistemic spread of the wide start more than 1.8× that of 1024 points."""
    small = _epistemic_spread(16, "trainable_normal_wide")
    large = _epistemic_spread(1024, "trainable_normal_wide")
    assert small > 1.8 * large and small > 0.5, (small, large)
