"""edward2's TensorFlow namespace over `bayes_planet.layers`: ``import bayes_planet.compat.edward2
as ed`` in place of ``import edward2 as ed``.

``ed.layers``, ``ed.initializers``, ``ed.regularizers`` and ``ed.constraints`` take edward2's
names, arguments and defaults (docs/edward2.md lists every difference);
``ed.RandomVariable`` is the library's; ``ed.Normal``, ``ed.Independent``, ... (one constructor
per `tfp.distributions` class) make random variables through `bayes_planet.layers.tracing`,
so ``ed.tape``, ``ed.condition`` and ``ed.trace`` see them; ``ed.trace(tracer)`` also sees the
compat layers' distribution weights (``_bridge.trace``).
"""

import sys

import tensorflow_probability as tfp

from bayes_planet.compat.edward2 import constraints, initializers, layers, regularizers
from bayes_planet.compat.edward2._bridge import trace
from bayes_planet.layers.random_variable import RandomVariable
from bayes_planet.layers.tracing import condition, random_variable, tape

__all__ = ["RandomVariable", "condition", "constraints", "initializers", "layers",
           "make_random_variable", "regularizers", "tape", "trace", "traceable"]


def make_random_variable(distribution_cls):
    """edward2's ``make_random_variable``: a constructor ``(*args, name=None, sample_shape=(),
    value=None, **kwargs)`` of random variables over ``distribution_cls(*args, **kwargs)``."""
    def make(*args, name=None, sample_shape=(), value=None, **kwargs):
        return random_variable(distribution_cls(*args, **kwargs), name=name,
                               sample_shape=sample_shape, value=value)
    make.__name__ = make.__qualname__ = distribution_cls.__name__
    make.__doc__ = (f"A `RandomVariable` over `tfp.distributions.{distribution_cls.__name__}` "
                    "(edward2's generated random variable).")
    return make


def traceable(fn):
    """edward2's ``traceable``: returned as it is (the library's random variables are traced
    where they are made)."""
    return fn


for _name in sorted(dir(tfp.distributions)):
    _cls = getattr(tfp.distributions, _name)
    if isinstance(_cls, type) and issubclass(_cls, tfp.distributions.Distribution) \
            and _cls is not tfp.distributions.Distribution:
        globals()[_name] = make_random_variable(_cls)
        __all__.append(_name)
del _name, _cls

#: ``ed.tensorflow``: edward2's TensorFlow backend, which ``import edward2 as ed`` is.
tensorflow = sys.modules[__name__]
