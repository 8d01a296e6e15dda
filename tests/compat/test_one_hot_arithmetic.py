"""bayes_planet.layers.discrete: one-hot arithmetic modulo V against integer arithmetic, and
Sinkhorn normalization."""

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.layers import discrete

V = 7


def _one_hot(x):
    return tf.one_hot(x, V)


@pytest.mark.parametrize("fn, op", [(discrete.one_hot_add, lambda a, b: a + b),
                                    (discrete.one_hot_minus, lambda a, b: a - b),
                                    (discrete.one_hot_multiply, lambda a, b: a * b)])
def test_hard_encodings_match_integer_arithmetic(fn, op):
    a, b = np.meshgrid(np.arange(V), np.arange(1, V), indexing="ij")
    out = fn(_one_hot(a), _one_hot(b)).numpy()
    np.testing.assert_array_equal(out, tf.one_hot(op(a, b) % V, V).numpy())


def test_soft_shift_is_the_distribution_of_the_sum():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(V), 3).astype(np.float32), rng.dirichlet(np.ones(V), 3)
    out = discrete.one_hot_add(p, q.astype(np.float32)).numpy()
    expected = np.zeros((3, V))
    for i in range(V):
        for j in range(V):
            expected[:, (i + j) % V] += p[:, i] * q[:, j]
    np.testing.assert_allclose(out, expected, atol=1e-6)
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-6)


def test_multiplicative_inverse():
    x = np.arange(1, V)
    inv = tf.argmax(discrete.multiplicative_inverse(_one_hot(x)), -1).numpy()
    np.testing.assert_array_equal((x * inv) % V, 1)
    assert tf.reduce_sum(discrete.multiplicative_inverse(tf.one_hot([0, 2], 4))[0]) == 1.0
    with pytest.raises(ValueError, match="Received: vocab_size=5"):
        discrete.multiplicative_inverse(_one_hot(x), 5)


def test_sinkhorn_is_doubly_stochastic():
    log_alpha = tf.random.stateless_normal([4, 6, 6], [1, 2])
    out = discrete.sinkhorn(log_alpha, n_iters=50).numpy()
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-4)
    np.testing.assert_allclose(out.sum(-2), 1.0, atol=1e-4)
    with pytest.raises(ValueError, match="square"):
        discrete.sinkhorn(tf.zeros([2, 3]))
