"""The distribution initializers (`bayes_planet.layers.initializers`): aliases and
serialization, the fixed prior, and one weight per instance."""

import json

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers import initializers


def test_initializer_aliases_and_serialization():
    for alias, cls in [("trainable_normal", bl.TrainableNormal),
                       ("trainable_he_normal", bl.TrainableHeNormal),
                       ("trainable_glorot_normal", bl.TrainableGlorotNormal),
                       ("trainable_deterministic", bl.TrainableDeterministic),
                       ("fixed_normal", bl.FixedNormal)]:
        init = initializers.get(alias)
        assert type(init) is cls
        again = initializers.get(json.loads(json.dumps(initializers.serialize(init))))
        assert type(again) is cls and again.get_config() == init.get_config()
    assert isinstance(initializers.get("zeros"), keras.initializers.Zeros)
    assert initializers.get("trainable_normal") is not initializers.get("trainable_normal")
    with pytest.raises(ValueError, match="initializer='nope'"):
        initializers.get("nope")


def test_fixed_normal_has_no_trainable_weights_and_samples_the_prior():
    layer = bl.DenseReparameterization(3, kernel_initializer="fixed_normal",
                                       kernel_regularizer=None, seed=0)
    layer(tf.ones([1, 2]))
    assert [w.name for w in layer.trainable_weights] == [layer.bias.name]
    draws = np.stack([layer.kernel.sample(tf.constant([0, i])).numpy() for i in range(500)])
    assert abs(draws.mean()) < 0.1 and abs(draws.std() - 1.0) < 0.05


def test_shared_initializer_instance_is_rejected():
    init = bl.TrainableNormal()
    bl.DenseFlipout(2, kernel_initializer=init)(tf.ones([1, 3]))
    with pytest.raises(ValueError, match="already built"):
        bl.DenseFlipout(2, kernel_initializer=init)(tf.ones([1, 3]))
