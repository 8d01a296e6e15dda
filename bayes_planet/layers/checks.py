"""Argument checks shared by the layers, initializers and regularizers (one-line errors)."""

import math
import numbers

import tensorflow as tf

__all__ = ["check_matrix_inputs", "check_non_negative_int", "check_positive_int",
           "check_positive_int_pair", "check_positive_number"]


def check_positive_int(name, value):
    """Returns ``int(value)``; raises ValueError unless it is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"Expected a positive integer. Received: {name}={value!r}")
    return int(value)


def check_positive_int_pair(name, value):
    """Returns ``(a, b)`` from an int or a pair of ints; raises ValueError unless both are > 0."""
    values = (value, value) if isinstance(value, numbers.Integral) else tuple(value)
    if len(values) != 2 or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0
            for v in values):
        raise ValueError(f"Expected a positive integer or a pair of them. Received: "
                         f"{name}={value!r}")
    return tuple(int(v) for v in values)


def check_non_negative_int(name, value):
    """Returns ``int(value)``; raises ValueError unless it is an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"Expected a non-negative integer. Received: {name}={value!r}")
    return int(value)


def check_positive_number(name, value):
    """Returns ``float(value)``; raises ValueError unless it is a finite number > 0."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"Expected a positive number. Received: {name}={value!r}")
    return float(value)


def check_matrix_inputs(input_shape, width="d"):
    """The defined last dimension of ``[batch, width]`` inputs; raises ValueError for another
    rank or an undefined width (``width`` names it in the message)."""
    shape = tf.TensorShape(input_shape)
    if shape.rank != 2 or shape[-1] is None:
        raise ValueError(f"Expected inputs of shape [batch, {width}] with a defined {width}. "
                         f"Received: input_shape={shape}")
    return int(shape[-1])
