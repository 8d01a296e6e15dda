"""edward2's ``ed.layers.utils``: the helpers the library implements."""

import tensorflow as tf

from bayes_planet.layers import discrete_flows as _discrete_flows
from bayes_planet.layers import sngp as _sngp
from bayes_planet.layers.base import BayesianLayer
from bayes_planet.layers.discrete import (
    multiplicative_inverse,
    one_hot_add,
    one_hot_minus,
    one_hot_multiply,
    sinkhorn,
)
from bayes_planet.layers.discrete_flows import one_hot_argmax

__all__ = ["add_weight", "mean_field_logits", "multiplicative_inverse", "one_hot_add", "one_hot_argmax",
           "one_hot_minus", "one_hot_multiply", "sinkhorn", "soft_to_hard_permutation"]


def mean_field_logits(logits, covmat=None, mean_field_factor=1.0, likelihood="logistic"):
    """edward2's ``mean_field_logits(logits, covmat, mean_field_factor, likelihood)``: the
    library's `bayes_planet.layers.mean_field_logits` on the diagonal of ``covmat`` (1 when
    None, i.e. temperature scaling); a negative ``mean_field_factor`` returns the logits."""
    if mean_field_factor < 0:
        return logits
    variance = 1.0 if covmat is None else tf.linalg.diag_part(covmat)
    return _sngp.mean_field_logits(logits, variance, mean_field_factor, likelihood=likelihood)


def soft_to_hard_permutation(inputs):
    """edward2's ``soft_to_hard_permutation``: the library's on ``[batch, N, N]``; a single
    ``[N, N]`` matrix gets a batch axis of 1, as edward2's."""
    inputs = tf.convert_to_tensor(inputs)
    if inputs.shape.rank == 2:
        inputs = inputs[None]
    return _discrete_flows.soft_to_hard_permutation(inputs)


def add_weight(cls):
    """edward2's class decorator: the Keras layer class ``cls`` whose ``add_weight`` takes
    edward2's trainable initializers (the compat posteriors: the weight is the posterior,
    whose value is a fresh draw wherever the layer converts it to a tensor) and trainable
    regularizers (their variables made with the weight and tracked by the layer): ``cls``
    with the library's `bayes_planet.layers.BayesianLayer` mixin, whose ``add_weight`` does
    both for the library's own layers. ``seed`` (keyword) seeds the layer's noise."""

    def __init__(self, *args, seed=None, **kwargs):
        cls.__init__(self, *args, **kwargs)
        self._init_seed(seed)  # noqa: SLF001 - the mixin's protocol for its subclasses

    return type(cls.__name__, (BayesianLayer, cls),
                {"__init__": __init__, "__module__": __name__,
                 "__doc__": f"``{cls.__name__}`` with distribution weights (`add_weight`)."})
