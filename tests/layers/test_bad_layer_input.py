"""Bad input to the layer library's helpers ends in one line naming the argument (issue #29)."""


import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers import constraints, initializers, regularizers
from tests.layers._keras_files import edited_keras_file


def _dense():
    layer = bl.DenseFlipout(2)
    layer.build((None, 3))
    return layer


@pytest.mark.parametrize("value", ["a", float("inf"), float("nan"), True, 0, 2.5, [3]])
def test_set_dataset_size_refuses_what_is_not_a_positive_integer(value):
    with pytest.raises(ValueError, match=r"Expected a positive integer\. Received: dataset_size="):
        regularizers.set_dataset_size(_dense(), value)
    with pytest.raises(ValueError, match="dataset_size="):
        regularizers.NormalKLDivergence(dataset_size=value)


def test_set_dataset_size_takes_whole_numbers_of_any_numeric_type():
    layer = _dense()
    assert regularizers.set_dataset_size(layer, np.int64(600)) == 1  # The kernel's KL.
    assert layer.kernel_regularizer.dataset_size == 600
    regularizers.set_dataset_size(layer, 6e4)
    assert layer.kernel_regularizer.dataset_size == 60000


@pytest.mark.parametrize("model", [None, "model", 3, [bl.DenseFlipout(2)]],
                         ids=["None", "str", "int", "list"])
def test_set_dataset_size_and_set_kl_scale_refuse_what_is_not_a_model(model):
    """Not a layer, model or tf.Module: one line naming ``model``, not ``vars()``'s error."""
    message = f"Expected a Keras layer or model, or a tf.Module. Received: model={model!r}"
    for call in (lambda: regularizers.set_dataset_size(model, 10),
                 lambda: regularizers.set_kl_scale(model, None)):
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == message and "\n" not in message


@pytest.mark.parametrize("value", ["a", -1.0, float("inf"), None, True])
def test_a_kl_scale_factor_must_be_a_finite_non_negative_number(value):
    with pytest.raises(ValueError, match="scale_factor="):
        regularizers.NormalKLDivergence(scale_factor=value)


@pytest.mark.parametrize("seed", [[0], "x", [1.0, 2.0], [[1, 2]], [1, 2, 3], None])
def test_fixed_noise_refuses_a_seed_that_is_not_two_integers(seed):
    with pytest.raises(ValueError, match=r"Expected a stateless seed: two integers, shape \[2\]\. "
                                         r"Received: seed="):
        with bl.fixed_noise(_dense(), seed):
            pass


def test_fixed_noise_takes_lists_arrays_and_tensors():
    layer, x = _dense(), tf.ones([4, 3])
    outs = []
    for seed in ([1, 2], np.array([1, 2], np.int64), tf.constant([1, 2])):
        with bl.fixed_noise(layer, seed):
            outs.append(layer(x).numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


UNKNOWN = [{"module": "keras.regularizers", "class_name": "NoSuchThing", "config": {},
            "registered_name": "NoSuchThing"},
           {"class_name": "bayes_planet>NoSuchThing", "config": {}}]


@pytest.mark.parametrize("identifier", UNKNOWN)
@pytest.mark.parametrize("get, kind", [(regularizers.get, "regularizer"),
                                       (initializers.get, "initializer"),
                                       (constraints.get, "constraint")])
def test_an_unknown_class_in_a_config_is_refused_not_returned_as_a_string(get, kind, identifier):
    with pytest.raises(ValueError, match=f"Unknown {kind}.*Received: {kind}='.*NoSuchThing'"):
        get(identifier)


def test_a_keras_file_naming_an_unknown_regularizer_fails_at_load(tmp_path):
    model = keras.Sequential([keras.Input((3,)), bl.DenseFlipout(2)])
    path = tmp_path / "m.keras"
    model.save(path)

    def unknown_regularizer(config):
        regularizer = config["config"]["layers"][-1]["config"]["kernel_regularizer"]
        regularizer["class_name"] = regularizer["registered_name"] = "NoSuchThing"

    damaged = edited_keras_file(path, tmp_path / "damaged.keras", unknown_regularizer)
    with pytest.raises((ValueError, TypeError), match="NoSuchThing"):
        keras.models.load_model(damaged)
