"""Argument checks shared by the environments (`dmc`, `gym_adapter`, `factory`).

One-line ``ValueError``/``TypeError`` messages naming the argument and the received value.
"""

import numbers

import numpy as np

__all__ = ["OBS_TYPES", "check_positive_int", "check_seed", "check_size", "validate_action"]

OBS_TYPES = ("pixels", "state")


def check_positive_int(name, value):
    """Returns ``value`` as int if it is a positive integer, else raises."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"Expected a positive integer. Received: {name}={value!r}")
    return int(value)


def check_size(size):
    """Returns ``(height, width)`` from an int or a pair of positive ints."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (size, size)
    if (
        not isinstance(size, (tuple, list))
        or len(size) != 2
        or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s <= 0 for s in size)
    ):
        raise ValueError(
            "Expected size as a positive integer or a (height, width) pair. "
            f"Received: size={size!r}"
        )
    return int(size[0]), int(size[1])


def check_seed(seed):
    """Returns ``seed`` as int (or ``None``) if valid, else raises."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**32:
        raise ValueError(f"Expected an integer in [0, 2**32) or None. Received: seed={seed!r}")
    return int(seed)


def validate_action(action, spec):
    """Checks an action against a bounded spec and clips it to the bounds.

    Args:
        action: array-like of shape ``spec.shape``.
        spec: a ``dm_env.specs.BoundedArray``-like object with ``shape``, ``dtype``, ``minimum``
            and ``maximum``.

    Returns:
        The action as a ``spec.dtype`` array of shape ``spec.shape``, clipped to the bounds.

    Raises:
        TypeError: if the action is not numeric.
        ValueError: if the action has the wrong shape or contains NaN or infinity.
    """
    try:
        array = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"Expected a numeric action array. Received: action={action!r}") from error
    if array.shape != tuple(spec.shape):
        raise ValueError(
            f"Expected an action of shape {tuple(spec.shape)}. "
            f"Received: action with shape {array.shape}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"Expected a finite action (no NaN or inf). Received: action={array}")
    return np.clip(array, spec.minimum, spec.maximum).astype(spec.dtype)
