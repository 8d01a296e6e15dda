"""The Poisson-process likelihood layer (`bayes_planet.layers.point_process`): its
log-likelihood against the analytic value, binning, Poisson counts of its samples, the
contract."""

import numpy as np
import pytest
import scipy.stats

from bayes_planet.layers.point_process import PoissonProcess
from bayes_planet.layers.testing import run_layer_test


def test_poisson_process_constant_rate_log_likelihood():
    rng = np.random.default_rng(0)
    points = rng.uniform([0.0, -1.0], [2.0, 1.0], size=(23, 2))  # Volume 4.
    rate = 3.5
    for grid in ([1, 1], [4, 3], [10, 7]):  # Any grid: the likelihood is exact.
        layer = PoissonProcess([0.0, -1.0], [2.0, 1.0], grid, dtype="float64", seed=0)
        counts = layer.bin(points)
        rv = layer(np.full((layer.num_cells, 1), rate))
        np.testing.assert_allclose(rv.log_prob(counts).numpy(),
                                   23 * np.log(rate) - rate * 4.0, rtol=1e-12)
        pmf = scipy.stats.poisson.logpmf(counts, rate * layer.cell_volume).sum()
        np.testing.assert_allclose(rv.distribution.counts_log_prob(counts).numpy(), pmf,
                                   rtol=1e-10)


def test_poisson_process_piecewise_rate_and_binning():
    layer = PoissonProcess([0.0], [3.0], [3], dtype="float64", seed=0)
    points = np.array([[0.2], [0.5], [1.5], [2.9], [3.0], [2.0]])
    counts = layer.bin(points)
    np.testing.assert_array_equal(counts[:, 0], [2, 1, 3])  # 2.0 and 3.0 fall in cell 3.
    rate = np.array([1.0, 2.0, 0.5])
    expected = np.sum(np.log(rate[[0, 0, 1, 2, 2, 2]])) - rate.sum() * 1.0
    np.testing.assert_allclose(layer(rate).log_prob(counts).numpy(), expected, rtol=1e-12)
    np.testing.assert_array_equal(layer.bin(layer.points(counts, seed=0)), counts)
    with pytest.raises(ValueError, match="outside"):
        layer.bin([[3.5]])
    with pytest.raises(ValueError, match="num_cells=3"):
        layer(np.ones((4, 1)))
    with pytest.raises(ValueError, match="low < high"):
        PoissonProcess([1.0], [0.0], [2])


def test_poisson_process_samples_have_poisson_counts():
    layer = PoissonProcess([0.0, 0.0], [1.0, 2.0], [2, 2], dtype="float64", seed=0)
    rate = np.array([[10.0], [40.0], [0.0], [4.0]])
    rv = layer(rate)
    samples = rv.distribution.sample(20000, seed=[3, 4]).numpy()[..., 0]
    expected = rate[:, 0] * layer.cell_volume  # 0.5 per cell.
    assert np.all(np.abs(samples.mean(0) - expected) <= 4 * np.sqrt(expected / 2e4))
    np.testing.assert_allclose(samples.var(0), expected, rtol=0.05, atol=1e-9)
    np.testing.assert_allclose(rv.mean().numpy()[:, 0], expected)


def test_poisson_process_contract():
    rate = np.abs(np.random.default_rng(0).normal(size=(6, 1))).astype("float32")
    run_layer_test(PoissonProcess, {"low": [0.0, 0.0], "high": [1.0, 1.0], "grid_shape": [2, 3]},
                   input_data=rate, expected_output_shape=(6, 1), expected_num_losses=0,
                   expected_num_trainable_weights=0)
