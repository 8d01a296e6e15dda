"""The mixture output layers take the number of components first (`MixtureLogistic(5)` is five
components, as in edward2's ``MixtureLogistic(num_components)``); the former calls keep their
meaning where it is unambiguous, and bad input gets a one-line error."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet.layers import keras
from bayes_planet.layers.testing import normal_array, run_layer_test

tfd = tfp.distributions
MIXTURES = [bl.MixtureLogistic, bl.MixtureNormal]


@pytest.mark.parametrize("cls", MIXTURES)
def test_the_first_argument_is_the_number_of_components(cls):
    layer = cls(3)
    assert (layer.num_components, layer.units) == (3, None)
    rv = layer(normal_array(4, 9))  # [logits, locs, scales], 3 each
    assert rv.shape == (4,)
    mixture = rv.distribution.distribution  # Independent(MixtureSameFamily)
    assert mixture.mixture_distribution.logits.shape == (4, 3)


@pytest.mark.parametrize("cls", MIXTURES)
def test_components_first_with_a_projection_by_keyword(cls):
    layer = cls(4, units=2, seed=0)
    rv = layer(normal_array(5, 7))
    assert (layer.num_components, layer.units) == (4, 2)
    assert rv.shape == (5, 2) and layer.kernel.shape == (7, 2 * 3 * 4)


@pytest.mark.parametrize("call, expected", [
    (lambda cls: cls(), (5, None, 1e-3, 1)),
    (lambda cls: cls(units=2, num_components=3), (3, 2, 1e-3, 1)),
    (lambda cls: cls(2, num_components=3), (3, 2, 1e-3, 1)),           # (units, num_components=)
    (lambda cls: cls(None, num_components=2), (2, None, 1e-3, 1)),
    (lambda cls: cls(None, 2, 0.1, 0), (2, None, 0.1, 0)),              # the former order
    (lambda cls: cls(num_components=4, min_scale=0.5, event_ndims=0), (4, None, 0.5, 0)),
])
@pytest.mark.parametrize("cls", MIXTURES)
def test_former_calls_keep_their_meaning(cls, call, expected):
    layer = call(cls)
    assert (layer.num_components, layer.units, layer.min_scale, layer.event_ndims) == expected


@pytest.mark.parametrize("cls", MIXTURES)
def test_the_config_round_trips(cls):
    layer = cls(3, units=2, min_scale=0.01, event_ndims=0, seed=4)
    clone = cls.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert (clone.num_components, clone.units, clone.min_scale) == (3, 2, 0.01)


@pytest.mark.parametrize("cls", MIXTURES)
def test_contract_components_first(cls):
    run_layer_test(cls, {"num_components": 3, "units": 2}, (4, 6), expected_output_shape=(4, 2),
                   expected_num_trainable_weights=2, expected_num_non_trainable_weights=1)


def test_a_model_with_five_components_trains_on_scalar_targets():
    """The porting case: ``MixtureLogistic(5)`` after ``Dense(15)`` is one five-component
    mixture per example (before, it meant five outputs of five components each)."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 2)).astype("float32")
    y = (x[:, 0] + 0.1 * rng.standard_normal(256)).astype("float32")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(15),
                              bl.MixtureLogistic(5, event_ndims=0, seed=1)])
    assert model.output_shape == (None,)
    model.compile(keras.optimizers.Adam(1e-2), loss=bl.negative_log_likelihood)
    history = model.fit(x, y, batch_size=64, epochs=5, verbose=0).history["loss"]
    assert history[-1] < history[0] - 0.1, history
    dist = model(x[:4]).distribution
    assert dist.mixture_distribution.logits.shape == (4, 5)


@pytest.mark.parametrize("cls", MIXTURES)
@pytest.mark.parametrize("args, kwargs, message", [
    ((0,), {}, "Expected a positive integer. Received: num_components=0"),
    ((-2,), {}, "Expected a positive integer. Received: num_components=-2"),
    (("5",), {}, "Expected a positive integer. Received: num_components='5'"),
    ((2.5,), {}, "Expected a positive integer. Received: num_components=2.5"),
    ((), {"num_components": True}, "Expected a positive integer. Received: num_components=True"),
    ((3,), {"units": 0}, "Expected a positive integer. Received: units=0"),
    ((3,), {"min_scale": -1.0}, "Expected a non-negative number. Received: min_scale=-1.0"),
])
def test_bad_values_get_a_keras_style_one_line_error(cls, args, kwargs, message):
    with pytest.raises(ValueError) as info:
        cls(*args, **kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize("cls", MIXTURES)
def test_two_positional_numbers_are_refused_not_guessed(cls):
    with pytest.raises(TypeError, match=r"takes the number of components as its only "
                                        r"positional argument.*Received: positional arguments "
                                        r"\(4, 3\)$"):
        cls(4, 3)
    with pytest.raises(TypeError, match=r"got units twice"):
        cls(None, units=2)


@pytest.mark.parametrize("cls", MIXTURES)
def test_a_wrong_input_width_names_the_number_of_components(cls):
    with pytest.raises(ValueError, match=r"3 \* num_components = 15 entries \(pass units= "
                                         r"to project the input to them\)"):
        cls(5)(tf.zeros([2, 8]))
