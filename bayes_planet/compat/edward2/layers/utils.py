"""edward2's ``ed.layers.utils``: the helpers the library implements."""

import tensorflow as tf

from bayes_planet.layers import discrete_flows as _discrete_flows
from bayes_planet.layers import sngp as _sngp
from bayes_planet.layers.discrete import (
    multiplicative_inverse,
    one_hot_add,
    one_hot_minus,
    one_hot_multiply,
    sinkhorn,
)
from bayes_planet.layers.discrete_flows import one_hot_argmax

__all__ = ["mean_field_logits", "multiplicative_inverse", "one_hot_add", "one_hot_argmax",
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


def _not_implemented(name):
    def fn(*args, **kwargs):
        del args, kwargs
        raise NotImplementedError(f"edward2's layers.utils.{name} is not implemented in "
                                  "bayes_planet (docs/edward2.md).")
    fn.__name__ = fn.__qualname__ = name
    return fn


# edward2 helpers the library does not implement: `add_weight` (a class decorator giving a
# Keras layer distribution weights; the library's layers are Bayesian classes of their own).
add_weight = _not_implemented("add_weight")
