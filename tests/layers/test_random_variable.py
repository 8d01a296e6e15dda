"""`RandomVariable` (`bayes_planet.layers.random_variable`): a tensor that is a draw of its
distribution, lazily."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl

tfd = tfp.distributions


def test_random_variable_behaves_like_its_value():
    dist = tfd.Normal(tf.zeros([3]), tf.ones([3]))
    rv = bl.RandomVariable(dist, seed=[1, 2])
    value = tf.convert_to_tensor(rv)
    np.testing.assert_array_equal(value, rv.value)
    np.testing.assert_array_equal(rv + 1.0, value + 1.0)
    np.testing.assert_array_equal(2.0 * rv, 2.0 * value)
    np.testing.assert_array_equal(rv[1:], value[1:])
    np.testing.assert_array_equal(tf.reduce_sum(rv), tf.reduce_sum(value))
    np.testing.assert_allclose(rv.log_prob(), dist.log_prob(value))
    np.testing.assert_allclose(rv.entropy(), dist.entropy())
    assert rv.shape == (3,) and rv.dtype == tf.float32
    assert rv.sample_shape == ()
    with pytest.raises(TypeError, match="ambiguous"):
        bool(rv)


def test_random_variable_is_lazy_and_takes_a_given_value():
    rv = bl.RandomVariable(tfd.Normal(0.0, 1.0), sample_shape=[4, 2])
    assert rv._value is None and rv.shape == (4, 2)
    fixed = bl.RandomVariable(tfd.Normal(0.0, 1.0), value=3.0)
    assert float(fixed.value) == 3.0
    with pytest.raises(TypeError, match="distribution"):
        bl.RandomVariable(np.zeros(3))
