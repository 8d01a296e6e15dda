"""Poisson point process output layer (Bayesian Layers, footnote 3 and Fig. 8).

An inhomogeneous Poisson process with intensity λ on a region V has the
point-process log-likelihood (log density w.r.t. Lebesgue measure on point sets)::

    log p({x_1..x_n}) = Σ_i log λ(x_i) - ∫_V λ(x) dx

`PoissonProcess` takes λ piecewise constant on the cells of a regular grid over a
box ``[low, high]`` (one rate per cell: a Tensor, or a layer's output such as
``softplus(gp(layer.grid_points()))``). Then the likelihood depends on the points
only through the cell counts ``N_c``: ``Σ_c N_c log λ_c - Σ_c λ_c ΔV``, which is
what `GridPoissonProcess.log_prob` returns for the counts. A Cox process (Møller
et al., 1998) is this layer on top of a random (e.g. GP) log rate.
"""

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, tracing
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, check_positive_int

tfd = tfp.distributions

__all__ = ["GridPoissonProcess", "PoissonProcess"]


class GridPoissonProcess(tfd.Distribution):
    """Poisson process with rate ``λ_c`` on cells of volume ``ΔV``, over cell counts.

    Event: ``[num_cells, units]`` counts (``units`` independent processes).
    ``log_prob(counts)`` is the point-process log-likelihood ``Σ N_c log λ_c - Σ λ_c ΔV``
    of any point pattern with those counts; `counts_log_prob` is the pmf of the counts
    themselves (they differ by ``Σ_c N_c log ΔV - log N_c!``, a constant in λ).
    Samples are counts ``N_c ~ Poisson(λ_c ΔV)``; mean and variance ``λ_c ΔV``. A
    16-bit (mixed-precision) process samples in float32 and casts the counts to its dtype.

    Args:
      rate: ``[..., num_cells, units]`` non-negative intensities.
      cell_volume: positive scalar ΔV.
    """

    def __init__(self, rate, cell_volume, validate_args=False, allow_nan_stats=True,
                 name="GridPoissonProcess"):
        parameters = dict(locals())
        with tf.name_scope(name) as name:
            rate = tf.convert_to_tensor(rate)
            dtype = rate.dtype if rate.dtype.is_floating else tf.float32
            self._rate = tf.cast(rate, dtype, name="rate")
            self._cell_volume = tf.convert_to_tensor(cell_volume, dtype, name="cell_volume")
            super().__init__(
                dtype=dtype, reparameterization_type=tfd.NOT_REPARAMETERIZED,
                validate_args=validate_args, allow_nan_stats=allow_nan_stats,
                parameters=parameters, name=name)

    @classmethod
    def _parameter_properties(cls, dtype, num_classes=None):
        return dict(rate=tfp.util.ParameterProperties(event_ndims=2),
                    cell_volume=tfp.util.ParameterProperties(event_ndims=0))

    @property
    def rate(self):
        return self._rate

    @property
    def cell_volume(self):
        return self._cell_volume

    def _event_shape(self):
        return self._rate.shape[-2:]

    def _event_shape_tensor(self):
        return tf.shape(self._rate)[-2:]

    def _expected_counts(self):
        return self._rate * self._cell_volume

    def _log_prob(self, counts):
        counts = tf.cast(counts, self.dtype)
        terms = tf.math.xlogy(counts, self._rate) - self._expected_counts()
        return tf.reduce_sum(terms, [-2, -1])

    def counts_log_prob(self, counts):
        """Log pmf of the counts, ``Σ_c log Poisson(N_c | λ_c ΔV)``."""
        counts = tf.cast(counts, self.dtype)
        return self.log_prob(counts) + tf.reduce_sum(
            counts * tf.math.log(self._cell_volume) - tf.math.lgamma(counts + 1.0), [-2, -1])

    def _sample_n(self, n, seed=None):
        # tf.random.poisson has no bfloat16 kernel: draw 16-bit counts in float32.
        wide = tf.float64 if self.dtype == tf.float64 else tf.float32
        counts = tfd.Poisson(rate=tf.cast(self._expected_counts(), wide)).sample(n, seed=seed)
        return tf.cast(counts, self.dtype)

    def _mean(self):
        return self._expected_counts()

    def _variance(self):
        return self._expected_counts()


@_register
class PoissonProcess(BayesianLayer, _compat.RandomVariableOutputs, keras.layers.Layer):
    """Poisson point-process output layer on a box, rate piecewise constant on a grid.

    ``layer(rate)`` returns a `RandomVariable` over the ``[num_cells, units]`` cell
    counts whose distribution is a `GridPoissonProcess`, so ``rv.log_prob(counts)``
    is the point-process log-likelihood. Bin observed points with `bin`; evaluate a
    rate function at the cell centres from `grid_points` (row-major order, the last
    axis fastest). Named after the layer for `tracing.condition`.

    Args:
      low, high: the region's corners (sequences of length d, ``low < high``).
      grid_shape: cells per axis (sequence of d positive ints).
      seed: int seed of the sampled counts.

    Input: ``[num_cells, units]`` (or ``[num_cells]``) non-negative rates, a Tensor or
    `RandomVariable`. Output: `RandomVariable` of shape ``[num_cells, units]``. Under a
    mixed precision policy the distribution and its sampled counts are in the compute
    dtype (the counts are drawn in float32 and cast; bfloat16 holds integers exactly only
    up to 256).
    """

    def __init__(self, low, high, grid_shape, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.low = [float(v) for v in np.atleast_1d(low)]
        self.high = [float(v) for v in np.atleast_1d(high)]
        grid_shape = [grid_shape] if isinstance(grid_shape, int) else list(grid_shape)
        self.grid_shape = [check_positive_int("grid_shape", g) for g in grid_shape]
        if not (len(self.low) == len(self.high) == len(self.grid_shape)):
            raise ValueError(
                "Expected low, high and grid_shape of one length (the dimension). Received: "
                f"low={low!r}, high={high!r}, grid_shape={grid_shape!r}")
        if not all(a < b for a, b in zip(self.low, self.high, strict=True)):
            raise ValueError(f"Expected low < high. Received: low={low!r}, high={high!r}")
        self._init_seed(seed)

    @property
    def num_cells(self):
        return int(np.prod(self.grid_shape))

    @property
    def volume(self):
        """Volume of the region."""
        return float(np.prod(np.subtract(self.high, self.low)))

    @property
    def cell_volume(self):
        return self.volume / self.num_cells

    def grid_points(self):
        """``[num_cells, d]`` cell centres (float64 numpy), row-major."""
        axes = [lo + (np.arange(g) + 0.5) * (hi - lo) / g
                for lo, hi, g in zip(self.low, self.high, self.grid_shape, strict=True)]
        mesh = np.meshgrid(*axes, indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=-1)

    def bin(self, points):
        """``[num_cells, 1]`` counts of ``[n, d]`` points (numpy); all must lie in the region."""
        points = np.asarray(points, dtype=np.float64).reshape(-1, len(self.low))
        low, high = np.asarray(self.low), np.asarray(self.high)
        outside = np.any((points < low) | (points > high), axis=1)
        if np.any(outside):
            raise ValueError(f"{int(outside.sum())} points lie outside the region "
                             f"[{self.low}, {self.high}].")
        idx = np.floor((points - low) / (high - low) * self.grid_shape).astype(int)
        idx = np.minimum(idx, np.asarray(self.grid_shape) - 1)  # Points on the upper edge.
        flat = np.ravel_multi_index(tuple(idx.T), self.grid_shape)
        return np.bincount(flat, minlength=self.num_cells).astype(np.float64)[:, None]

    def points(self, counts, seed=None):
        """A point pattern (``[n, d]`` numpy) with the given cell counts, uniform in cells."""
        counts = np.asarray(counts).reshape(self.num_cells, -1)[:, 0].astype(int)
        rng = np.random.default_rng(seed)
        cells = np.repeat(np.arange(self.num_cells), counts)
        idx = np.stack(np.unravel_index(cells, self.grid_shape), axis=-1)
        size = (np.asarray(self.high) - np.asarray(self.low)) / self.grid_shape
        return np.asarray(self.low) + (idx + rng.uniform(size=idx.shape)) * size

    def call(self, rate):
        rate = tf.cast(tf.convert_to_tensor(rate), self.compute_dtype)
        if rate.shape.rank == 1:
            rate = rate[:, None]
        if rate.shape.rank != 2 or rate.shape[0] not in (None, self.num_cells):
            raise ValueError(
                f"Expected rates of shape [num_cells={self.num_cells}, units]. Received: "
                f"rate with shape {rate.shape}")
        dist = GridPoissonProcess(rate, self.cell_volume)
        return tracing.random_variable(dist, name=self.name, seed=self._next_seed())

    def compute_output_shape(self, input_shape):
        return tf.TensorShape(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(low=self.low, high=self.high, grid_shape=self.grid_shape)
        return config
