"""edward2's ``ed.constraints``: the library's parameter transforms (`Exp`, `Positive`,
`Softplus`, under edward2's names ``exp``, ``positive``, ``softplus``), Keras' for the rest."""

from bayes_planet.layers import constraints as _lib
from bayes_planet.layers.constraints import Exp, Positive, Softplus

__all__ = ["Exp", "Positive", "Softplus", "get", "serialize"]


def get(identifier, value=None):
    """edward2's ``constraints.get``: None, an alias, a config, a callable or a Keras name."""
    if value is None:
        value = identifier
    if identifier is None:
        return None
    return _lib.get(value)


def serialize(constraint):
    return _lib.serialize(constraint)
