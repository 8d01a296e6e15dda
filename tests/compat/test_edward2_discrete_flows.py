"""compat.edward2's discrete flows, MADE and permutation helper: edward2's argument order and
defaults over the library's classes, its ``distribution.base``, its 1-based explicit orders."""

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl


def _one_hot(vocab, shape, seed=0):
    return tf.one_hot(np.random.default_rng(seed).integers(0, vocab, shape), vocab)


def test_made_takes_units_first_and_channels():
    made = ed.layers.MADE(5, [4], activation="relu")  # units, hidden_dims
    assert isinstance(made, bl.MADE) and made.units == 5 and made.hidden_dims == [4]
    assert made.with_channels and made.activation is not None
    assert ed.layers.MADE(2, []).activation is bl.keras.activations.linear  # edward2's default
    out = made(tf.zeros([2, 3, 2]))
    assert out.shape == (2, 3, 5)
    assert sum(int(np.prod(w.shape)) for w in made.weights) == 3 * 2 * 4 + 4 + 4 * 15 + 15


def test_made_explicit_order_is_one_based_and_round_trips():
    made = ed.layers.MADE(1, [], input_order=[3, 1, 2])
    assert made.order == [2, 0, 1]
    x = tf.constant(np.random.default_rng(0).normal(size=(1, 3, 1)), tf.float32)
    made(x)
    clone = ed.layers.MADE.from_config(made.get_config())
    assert clone.get_config()["input_order"] == [3, 1, 2] and clone.order == [2, 0, 1]
    clone(x)
    clone.set_weights(made.get_weights())
    np.testing.assert_array_equal(clone(x), made(x))
    # Degree 1 (position 1) sees nothing; degree 3 (position 0) sees positions 1 and 2.
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = made(x)[0, 1, 0]
    grad = tape.gradient(y, x)
    assert grad is None or not np.any(grad)


@pytest.mark.parametrize("loc_only", [True, False])
def test_autoregressive_flow_on_a_random_variable(loc_only):
    vocab = 5
    network = ed.layers.MADE(vocab if loc_only else 2 * vocab, [])
    flow = ed.layers.DiscreteAutoregressiveFlow(network, 1.0)  # layer, temperature
    assert isinstance(flow, bl.DiscreteAutoregressiveFlow) and flow.network is network
    base = ed.OneHotCategorical(logits=tf.random.stateless_normal([2, 4, vocab], [1, 2]),
                                dtype=tf.float32)
    rv = flow(base)
    assert rv.distribution.base is base.distribution  # edward2's name of the base
    x = _one_hot(vocab, (2, 4))
    np.testing.assert_allclose(rv.distribution.log_prob(flow(x)),
                               base.distribution.log_prob(x), rtol=1e-6)


def test_bipartite_and_sinkhorn_positional_arguments():
    bipartite = ed.layers.DiscreteBipartiteFlow(ed.layers.MADE(3, []), [1, 0, 1], 0.5)
    assert bipartite.mask == [1, 0, 1] and bipartite.temperature == 0.5
    sinkhorn = ed.layers.SinkhornAutoregressiveFlow(ed.layers.MADE(9, []), 2.0)
    assert sinkhorn.sinkhorn_iterations == 20 and sinkhorn.temperature == 2.0
    x = _one_hot(3, (2, 3))
    for flow in (bipartite, sinkhorn):
        np.testing.assert_array_equal(flow.reverse(flow(x)), x)
    config = bipartite.get_config()
    assert "layer" in config and "network" not in config
    clone = ed.layers.DiscreteBipartiteFlow.from_config(config)
    assert isinstance(clone.network, ed.layers.MADE) and clone.mask == [1, 0, 1]


def test_utils_permutation_and_argmax():
    hard = ed.layers.utils.soft_to_hard_permutation(tf.eye(4)[::-1])  # one matrix: batch of 1
    np.testing.assert_array_equal(hard, tf.eye(4)[::-1][None])
    onehot = ed.layers.utils.one_hot_argmax(tf.constant([[0.1, 0.7, 0.2]]), 1.0)
    np.testing.assert_array_equal(onehot, [[0.0, 1.0, 0.0]])
