"""Argument checks shared by the layers, initializers and regularizers (one-line errors)."""

import numbers

__all__ = ["check_positive_int"]


def check_positive_int(name, value):
    """Returns ``int(value)``; raises ValueError unless it is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"Expected a positive integer. Received: {name}={value!r}")
    return int(value)
