"""Statistical tests of the layers' noise sources (fixed seeds, stated tolerances)."""

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from bayes_planet.layers.noise import MAX_ABS, rademacher, random_signs, standard_normal

N = 2**20  # tolerances below are 5 standard errors at this sample size


def test_standard_normal_matches_n01():
    z = standard_normal([1024, 1024], tf.constant([3, 7])).numpy().ravel()
    se = 1 / np.sqrt(N)
    assert abs(z.mean()) < 5 * se
    assert abs(z.var() - 1) < 5 * np.sqrt(2) * se
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 5 * se


def test_standard_normal_is_bounded_by_max_abs():
    """The largest Box–Muller radius (at the smallest uniform, in float32) is MAX_ABS, and no
    draw exceeds it (layers skip a clip that no draw can reach on this bound)."""
    radius = float(tf.sqrt(-2.0 * tf.math.log(tf.constant(1e-7, tf.float32))))
    np.testing.assert_allclose(radius, MAX_ABS, rtol=1e-6)
    z = standard_normal([N], tf.constant([2, 9])).numpy()
    assert np.abs(z).max() <= MAX_ABS * (1 + 1e-6)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_random_signs_are_exactly_plus_minus_one_in_every_dtype(dtype):
    s = random_signs([33, 7], tf.constant([1, 2]), dtype)
    assert s.dtype == dtype and s.shape == (33, 7)
    assert set(np.unique(tf.cast(s, tf.float32).numpy())) == {-1.0, 1.0}


def test_random_signs_are_fair_and_independent():
    """Each sign is a fair coin (mean 0) and signs within and across the 32 bits of a
    random word, at every lag up to 64, are uncorrelated."""
    s = random_signs([N], tf.constant([5, 9]), tf.float32).numpy()
    se = 1 / np.sqrt(N)
    assert abs(s.mean()) < 5 * se
    for lag in range(1, 65):
        assert abs(np.mean(s[:-lag] * s[lag:])) < 5 * se * 1.1, lag
    # the bit position inside a word: every one of the 32 positions is fair
    positions = s.reshape(-1, 32).mean(axis=0)
    assert np.all(np.abs(positions) < 5 * np.sqrt(32) * se)


def test_random_signs_are_seeded_and_take_any_size():
    seed = tf.constant([4, 2])
    a = random_signs([1000, 3], seed, tf.float32)
    np.testing.assert_array_equal(a.numpy(), random_signs([1000, 3], seed, tf.float32).numpy())
    other = random_signs([1000, 3], tf.constant([4, 3]), tf.float32).numpy()
    assert np.mean(a.numpy() == other) < 0.6
    for n in (1, 31, 32, 33, 95):
        assert random_signs([n], seed, tf.float32).shape == (n,)
    dynamic = tf.function(lambda shape: random_signs(shape, seed, tf.float32))
    assert dynamic(tf.constant([3, 11])).shape == (3, 11)


def test_rademacher_is_random_signs_per_example():
    seed = tf.constant([8, 1])
    np.testing.assert_array_equal(rademacher([16, 5], seed, tf.float32).numpy(),
                                  random_signs([16, 5], seed, tf.float32).numpy())
