"""Discrete flows (`bayes_planet.layers.discrete_flows`) and `MADE(with_channels=True)`: exact
bijections on one-hot sequences, a flowed categorical's probabilities summing to 1 over every
state of a tiny vocabulary, autoregressive dependence, straight-through gradients, the
assignment against brute force, the contract harness and one-line errors."""

import itertools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet.layers import discrete_flows
from bayes_planet.layers.flows import serialize_layer
from bayes_planet.layers.testing import run_layer_test

tfd = tfp.distributions


def _one_hot(vocab, shape, seed=0):
    return tf.one_hot(np.random.default_rng(seed).integers(0, vocab, shape), vocab)


def _made(units, hidden=(), seed=1, activation=None):
    return bl.MADE(list(hidden), units=units, with_channels=True, activation=activation,
                   seed=seed)


def _flows(vocab, length):
    """One flow of each kind (and head) on [..., length, vocab] inputs."""
    return {
        "autoregressive_shift": bl.DiscreteAutoregressiveFlow(_made(vocab, [16], 2)),
        "autoregressive_affine": bl.DiscreteAutoregressiveFlow(_made(2 * vocab, [16], 3)),
        "bipartite_affine": bl.DiscreteBipartiteFlow(_made(2 * vocab, [], 4),
                                                     mask=[i % 2 for i in range(length)]),
        "bipartite_shift": bl.DiscreteBipartiteFlow(
            bl.MADE([8], units=vocab, with_channels=True, seed=5),
            mask=[1] + [0] * (length - 1)),
        "sinkhorn": bl.SinkhornAutoregressiveFlow(_made(vocab * vocab, [], 6)),
    }


@pytest.mark.parametrize("kind", list(_flows(5, 4)))
def test_reverse_inverts_forward_exactly(kind):
    flow = _flows(7, 4)[kind]
    x = _one_hot(7, (6, 4))
    y = flow(x)
    assert y.shape == (6, 4, 7) and y.dtype == tf.float32
    np.testing.assert_array_equal(tf.reduce_sum(y, -1), np.ones((6, 4)))  # exact one-hots
    np.testing.assert_array_equal(flow.reverse(y), x)
    np.testing.assert_array_equal(flow(flow.reverse(x)), x)
    assert not np.array_equal(y, x)  # the flow moved some tokens (seeded networks)
    np.testing.assert_array_equal(flow.log_det_jacobian(x), np.zeros((6, 4)))


@pytest.mark.parametrize("kind", list(_flows(3, 3)))
def test_flowed_categorical_sums_to_one_over_all_states(kind):
    vocab, length = 3, 3
    flow = _flows(vocab, length)[kind]
    logits = tf.constant(np.random.default_rng(1).normal(size=(length, vocab)), tf.float32)
    base = tfd.OneHotCategorical(logits=logits, dtype=tf.float32)
    rv = flow(bl.RandomVariable(base))
    assert isinstance(rv, bl.RandomVariable) and rv.shape == (length, vocab)
    states = tf.one_hot(list(itertools.product(range(vocab), repeat=length)), vocab)  # [27, 3, 3]
    log_prob = tf.reduce_sum(rv.distribution.log_prob(states), -1)
    # A bijection of the 27 states: the same probabilities, permuted (float32: 1e-5).
    np.testing.assert_allclose(tf.reduce_sum(tf.exp(log_prob)), 1.0, atol=1e-5)
    base_prob = np.exp(tf.reduce_sum(base.log_prob(states), -1).numpy())
    np.testing.assert_allclose(np.sort(np.exp(log_prob.numpy())), np.sort(base_prob), rtol=1e-5)
    # The random variable's value is the forward transform of a base draw: one of the states.
    assert np.isin(np.argmax(rv.value, -1).ravel(), range(vocab)).all()


def test_integer_one_hot_base_keeps_its_dtype():
    flow = bl.DiscreteAutoregressiveFlow(_made(2 * 5, [], 1))
    base = bl.RandomVariable(tfd.OneHotCategorical(logits=tf.zeros([2, 3, 5])), seed=3)
    rv = flow(base)
    assert rv.dtype == tf.int32 and rv.value.dtype == tf.int32
    np.testing.assert_array_equal(flow.reverse(rv.value), base.value)


@pytest.mark.parametrize("cls, units", [(bl.DiscreteAutoregressiveFlow, 2),
                                        (bl.SinkhornAutoregressiveFlow, 5)])
def test_autoregressive_outputs_depend_on_earlier_inputs_only(cls, units):
    vocab, length = 5, 5
    flow = cls(_made(units * vocab, [16], 7))
    x = _one_hot(vocab, (8, length), seed=2)
    for t in range(length - 1):
        changed = tf.concat([x[:, :t + 1], _one_hot(vocab, (8, length - t - 1), 9)], 1)
        np.testing.assert_array_equal(flow(changed)[:, :t + 1], flow(x)[:, :t + 1])


def test_straight_through_gradients_reach_the_network():
    network = _made(2 * 3, [16, 16], 2, activation="relu")
    flow = bl.DiscreteAutoregressiveFlow(network, temperature=0.5)
    features = _one_hot(3, (4, 4), seed=3)
    logits = tf.Variable(tf.zeros([4, 4, 3]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(
            labels=flow.reverse(features), logits=logits))
    grads = tape.gradient(loss, network.trainable_weights)
    assert all(g is not None for g in grads)
    assert any(np.abs(g.numpy()).max() > 0 for g in grads)


def test_scales_are_units_modulo_the_vocabulary():
    """V = 4: the network prefers scale 2 (no inverse mod 4); the flow takes the best unit
    (1 or 3) and stays a bijection of all 4² states."""
    vocab = 4
    preferred = tf.constant([0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 9.0, 2.0])  # shift 0; scale 2 > 3 > 1

    def network(x):
        return tf.broadcast_to(preferred, tf.concat([tf.shape(x)[:-1], [2 * vocab]], 0))

    flow = bl.DiscreteBipartiteFlow(network, mask=[1, 0])
    states = tf.one_hot(list(itertools.product(range(vocab), repeat=2)), vocab)
    y = flow(states)
    np.testing.assert_array_equal(flow.reverse(y), states)
    np.testing.assert_array_equal(np.argmax(y[:, 1], -1), (np.arange(16) % 4) * 3 % 4)  # ·3⁻¹ = ·3


def test_one_hot_argmax_is_exact_with_the_softmax_gradient():
    logits = tf.constant([[0.3, 2.0, -1.0], [1.0, 0.0, 0.5]])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        hard = discrete_flows.one_hot_argmax(logits, temperature=0.5)
        soft = tf.nn.softmax(logits / 0.5)
        weights = tf.constant([[1.0, -2.0, 3.0], [0.5, 1.0, -1.0]])
        a, b = tf.reduce_sum(hard * weights), tf.reduce_sum(soft * weights)
    np.testing.assert_array_equal(hard, [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(tape.gradient(a, logits), tape.gradient(b, logits), atol=1e-7)


def test_soft_to_hard_permutation_is_the_best_assignment():
    scores = np.random.default_rng(4).uniform(size=(6, 4, 4)).astype(np.float32)
    hard = discrete_flows.soft_to_hard_permutation(scores).numpy()
    for matrix, chosen in zip(scores, hard, strict=True):
        best = max(itertools.permutations(range(4)),
                   key=lambda p, m=matrix: sum(m[i, p[i]] for i in range(4)))
        np.testing.assert_array_equal(chosen, np.eye(4)[list(best)])
    assert hard.shape == (6, 4, 4)


def test_made_with_channels_shapes_and_masks():
    made = bl.MADE([4], units=5, with_channels=True, activation="relu", seed=0)
    out = made(tf.zeros([2, 3, 2]))
    assert out.shape == (2, 3, 5)
    assert [tuple(w.shape) for w in made.weights] == [(6, 4), (4,), (4, 15), (15,)]
    # Position t's outputs depend on positions < t only (left to right): gradients.
    x = tf.constant(np.random.default_rng(0).normal(size=(1, 3, 2)), tf.float32)
    for t in range(3):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(made(x)[:, t])
        grad = tape.gradient(y, x).numpy()[0]
        assert not np.any(grad[t:]), f"position {t} depends on positions >= {t}"
    clone = bl.MADE.from_config(made.get_config())
    assert clone.with_channels


def test_same_weights_same_flow_and_config_round_trip():
    flow = bl.DiscreteAutoregressiveFlow(_made(2 * 5, [8], 3), temperature=0.7)
    x = _one_hot(5, (3, 4))
    y = flow(x)
    clone = bl.DiscreteAutoregressiveFlow.from_config(flow.get_config())
    clone(x)
    clone.set_weights(flow.get_weights())
    np.testing.assert_array_equal(clone(x), y)
    np.testing.assert_array_equal(flow(x), y)  # no noise: every call the same
    assert clone.temperature == 0.7
    bipartite = bl.DiscreteBipartiteFlow(_made(5, [], 1), mask=tf.constant([0, 1, 1, 0]))
    assert bl.DiscreteBipartiteFlow.from_config(bipartite.get_config()).mask == [0, 1, 1, 0]


@pytest.mark.parametrize("cls, kwargs, units", [
    (bl.DiscreteAutoregressiveFlow, {}, 2 * 3),
    (bl.DiscreteBipartiteFlow, {"mask": [1, 0, 1, 0]}, 3),
    (bl.SinkhornAutoregressiveFlow, {"sinkhorn_iterations": 5}, 9),
])
def test_contract(cls, kwargs, units):
    network = serialize_layer(bl.MADE([8], units=units, with_channels=True, seed=2))
    run_layer_test(cls, {"network": network, "temperature": 0.5, **kwargs},
                   input_data=_one_hot(3, (4, 4)).numpy(), expected_output_shape=(4, 4, 3),
                   expected_num_trainable_weights=4, run_jit=cls is not bl.SinkhornAutoregressiveFlow,
                   loss="categorical_crossentropy")


def test_bad_arguments_and_inputs_are_one_line_errors():
    made = _made(6, [], 1)
    with pytest.raises(ValueError, match=r"^Expected a positive number\. Received: temperature=0$"):
        bl.DiscreteAutoregressiveFlow(made, temperature=0)
    with pytest.raises(TypeError, match="Expected a Keras layer or a callable network"):
        bl.DiscreteAutoregressiveFlow("made")
    with pytest.raises(ValueError, match=r"Expected a mask of length values in \{0, 1\}\. "
                                         r"Received: mask=\[0, 2\]"):
        bl.DiscreteBipartiteFlow(made, mask=[0, 2])
    with pytest.raises(ValueError, match="mask has 2 values for inputs of length 4"):
        bl.DiscreteBipartiteFlow(_made(3, [], 1), mask=[0, 1])(_one_hot(3, (2, 4)))
    with pytest.raises(ValueError, match=r"network must output vocab_size=3 \(shift\) or 2 \* "
                                         r"vocab_size .* Received: shape \(2, 4, 5\)"):
        bl.DiscreteBipartiteFlow(_made(5, [], 1), mask=[1, 0, 0, 0])(_one_hot(3, (2, 4)))
    with pytest.raises(ValueError, match=r"must output vocab_size\*\*2=9 features"):
        bl.SinkhornAutoregressiveFlow(_made(6, [], 1))(_one_hot(3, (2, 4)))
    with pytest.raises(ValueError, match=r"needs one-hot inputs \[\.\.\., length, vocab_size\]"):
        bl.DiscreteAutoregressiveFlow(made)(tf.zeros([3]))
    with pytest.raises(ValueError, match=r"^Expected a positive integer\. Received: "
                                         r"sinkhorn_iterations=0$"):
        bl.SinkhornAutoregressiveFlow(made, sinkhorn_iterations=0)
    with pytest.raises(TypeError, match="cannot be serialized"):
        bl.DiscreteBipartiteFlow(tf.identity, mask=[1, 0]).get_config()
    with pytest.raises(ValueError, match=r"Expected square matrices \[\.\.\., N, N\]"):
        discrete_flows.soft_to_hard_permutation(tf.zeros([2, 3, 4]))
    with pytest.raises(ValueError, match=r"MADE\(with_channels=True\) needs inputs"):
        bl.MADE([], units=2, with_channels=True)(tf.zeros([4]))
