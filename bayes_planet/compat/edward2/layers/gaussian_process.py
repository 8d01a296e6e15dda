"""edward2's ``ed.layers.gaussian_process``: its GP layers and kernels over the library's."""

import math

from bayes_planet import layers as _bl

__all__ = ["ExponentiatedQuadratic", "GaussianProcess", "SparseGaussianProcess"]

GaussianProcess = _bl.GaussianProcess
SparseGaussianProcess = _bl.SparseGaussianProcess


class ExponentiatedQuadratic(_bl.ExponentiatedQuadratic):
    """edward2's ``ExponentiatedQuadratic(variance, lengthscale)``: ``variance · exp(-r²/2)``
    with ``r = |x1 - x2| / lengthscale``; the library's kernel with ``amplitude =
    sqrt(variance)`` and ``length_scale = lengthscale`` (called on ``(x1, x2)``, it returns
    the ``[batch_x1, batch_x2]`` matrix)."""

    def __init__(self, variance=1.0, lengthscale=1.0, **kwargs):
        if "amplitude" in kwargs or "length_scale" in kwargs:  # A config of the library's.
            super().__init__(**kwargs)
            return
        super().__init__(amplitude=math.sqrt(variance), length_scale=lengthscale, **kwargs)

    @property
    def variance(self):
        return self.amplitude ** 2

    @property
    def lengthscale(self):
        return self.length_scale
