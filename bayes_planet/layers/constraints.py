"""Parameter transforms: map an unconstrained variable to a valid parameter.

Unlike Keras constraints (projections applied after an optimizer step), these are
applied every time the parameter is read, e.g. ``stddev = softplus(raw)``, so the
optimizer works in unconstrained space (Blundell et al., 2015).
"""

import math

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers._registry import register, resolve

__all__ = ["Exp", "Positive", "Softplus", "get", "serialize"]


class ParameterTransform(keras.constraints.Constraint):
    """Base class: ``__call__(raw)`` returns the constrained parameter; ``inverse(value)``
    the raw float that maps to a given float ``value`` (to initialize a raw parameter)."""

    def inverse(self, value):
        raise NotImplementedError(f"{type(self).__name__} has no inverse.")

    def get_config(self):
        return {}


@register
class Softplus(ParameterTransform):
    """``softplus(x) + minimum``: smooth, positive (the default for scales)."""

    def __init__(self, minimum=0.0):
        self.minimum = float(minimum)

    def __call__(self, w):
        out = tf.nn.softplus(w)
        return out + self.minimum if self.minimum else out

    def inverse(self, value):
        value = float(value) - self.minimum
        return value if value > 30.0 else math.log(math.expm1(value))

    def get_config(self):
        return {"minimum": self.minimum}


@register
class Exp(ParameterTransform):
    """``exp(x)``: positive, log-space parameterization."""

    def __call__(self, w):
        return tf.exp(w)

    def inverse(self, value):
        return math.log(value)


@register
class Positive(ParameterTransform):
    """``max(x, epsilon)``: clips to a positive lower bound."""

    def __init__(self, epsilon=1e-7):
        self.epsilon = float(epsilon)

    def __call__(self, w):
        return tf.maximum(w, tf.cast(self.epsilon, w.dtype))

    def get_config(self):
        return {"epsilon": self.epsilon}


_ALIASES = {"softplus": Softplus, "exp": Exp, "positive": Positive}


def get(identifier):
    """Resolves a transform from an alias, a config dict, a callable, a Keras name or None."""
    return resolve(identifier, _ALIASES, keras.constraints.get, "constraint")


def serialize(constraint):
    return None if constraint is None else keras.saving.serialize_keras_object(constraint)
