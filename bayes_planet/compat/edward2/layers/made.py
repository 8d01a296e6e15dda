"""edward2's ``MADE(units, hidden_dims, input_order, hidden_order, activation, use_bias)``
over `bayes_planet.layers.MADE` on ``[batch, ..., length, channels]`` inputs."""

import numpy as np

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments

__all__ = ["MADE"]


class _Edward2Order:
    """edward2's ``input_order``: an explicit order lists the degrees 1..length (the library's
    ``order``, 0-based); the inputs always have channels."""

    def __init__(self, input_order="left-to-right", **kwargs):
        if not isinstance(input_order, str):
            input_order = [int(d) - 1 for d in np.asarray(input_order).ravel()]
        kwargs.pop("order", None)
        kwargs.pop("with_channels", None)
        super().__init__(order=input_order, with_channels=True, **kwargs)


@register
class MADE(Edward2Arguments, _Edward2Order, _bl.MADE):
    """edward2's ``MADE``: ``units`` outputs per position of ``[batch, ..., length,
    channels]`` inputs, autoregressive over ``length``; linear by default (``activation=None``)."""

    edward2_signature = signature("units", "hidden_dims", input_order="left-to-right",
                                  hidden_order="left-to-right", activation=None, use_bias=True)

    def get_config(self):
        config = super().get_config()
        order = config.pop("order")
        config["input_order"] = order if isinstance(order, str) else [d + 1 for d in order]
        config.pop("with_channels")
        return config
