"""Tracing: record and intercept named random variables (model–posterior separation).

A probabilistic program is a Python function that creates `RandomVariable`s. When
they are created through `random_variable` (or the distribution constructors
below, e.g. ``tracing.Normal(0., 1., name='z')``), or returned by the layers that
use it (`GaussianProcess`, `SparseGaussianProcess`, `PoissonProcess`, named after
the layer), two context managers can act on them without changing the program
(Tran et al., 2018, "Simple, Distributed, and Accelerated Probabilistic
Programming"; Bayesian Layers, Fig. 8 and Fig. 13):

- ``with tape() as t: program()`` records every random variable the program creates:
  ``t`` is an ordered dict ``name -> RandomVariable`` in creation order.
- ``with condition(z=value): program()`` makes the random variable named ``z`` take
  ``value`` (a Tensor, array or another `RandomVariable`) instead of a sample; all
  others are untouched. Of nested conditions on one name the innermost wins.

Together they separate a *model* program from a *posterior* program::

    with tape() as q:
        posterior(x)                                 # creates 'qz'
    with tape() as p, condition(z=q["qz"], x=data):
        model()                                      # creates 'z', 'x'
    elbo = p["x"].log_prob() + p["z"].log_prob() - q["qz"].log_prob()

Both are built on one mechanism, `intercept(interceptor)`: an interceptor is a
function ``interceptor(next_fn, distribution, name, **kwargs)`` that may change the
arguments and must return ``next_fn(distribution, name, **kwargs)`` (or its own
`RandomVariable`). Interceptors nest; the innermost runs first. The stack is
thread-local. Inside a ``tf.function`` the recorded variables are symbolic and only
valid inside that function (use the tape inside the traced step).
"""

import collections
import contextlib
import threading
import warnings

import tensorflow_probability as tfp

from bayes_planet.layers.random_variable import RandomVariable

tfd = tfp.distributions

__all__ = [
    "Bernoulli",
    "Categorical",
    "Deterministic",
    "Gamma",
    "Independent",
    "LogNormal",
    "MultivariateNormalTriL",
    "Normal",
    "Poisson",
    "Uniform",
    "condition",
    "intercept",
    "random_variable",
    "tape",
]

_STATE = threading.local()


def _stack():
    if not hasattr(_STATE, "stack"):
        _STATE.stack = []
    return _STATE.stack


_CONDITIONED = "_conditioned"  # Marks a value set by `condition` (inner contexts win).


def _make(distribution, name, sample_shape=(), value=None, seed=None, sampler=None, **kwargs):
    del name  # The name only matters to interceptors.
    kwargs.pop(_CONDITIONED, None)
    if kwargs:
        raise TypeError(f"Unexpected random variable arguments: {sorted(kwargs)}")
    return RandomVariable(distribution, sample_shape=sample_shape, value=value, seed=seed,
                          sampler=sampler)


def random_variable(distribution, name=None, sample_shape=(), value=None, seed=None,
                    sampler=None):
    """Creates a `RandomVariable` through the active interceptors.

    Args:
      distribution: a `tfp.distributions.Distribution`.
      name: the name `tape` records it under and `condition` matches
        (default: ``distribution.name``).
      sample_shape, value, seed, sampler: as `RandomVariable`.
    Returns:
      The `RandomVariable` (possibly with an intercepted value).
    """
    if not isinstance(distribution, tfd.Distribution):
        raise TypeError(
            "Expected a tfp.distributions.Distribution. "
            f"Received: distribution={distribution!r}"
        )
    name = distribution.name if name is None else str(name)
    stack = list(_stack())  # Snapshot: interceptors may open new contexts.

    def next_fn(index):
        def call(dist, name, **kwargs):
            if index < 0:
                return _make(dist, name, **kwargs)
            return stack[index](next_fn(index - 1), dist, name, **kwargs)
        return call

    return next_fn(len(stack) - 1)(
        distribution, name, sample_shape=sample_shape, value=value, seed=seed, sampler=sampler
    )


@contextlib.contextmanager
def intercept(interceptor):
    """Context manager pushing ``interceptor(next_fn, distribution, name, **kwargs)``."""
    if not callable(interceptor):
        raise TypeError(f"Expected a callable interceptor. Received: {interceptor!r}")
    stack = _stack()
    stack.append(interceptor)
    try:
        yield interceptor
    finally:
        # Remove this entry (the last one that is this object), not an equal earlier one.
        del stack[max(i for i, f in enumerate(stack) if f is interceptor)]


@contextlib.contextmanager
def tape():
    """Records the random variables created in the block, in creation order.

    Yields an ``OrderedDict`` name -> `RandomVariable`. Raises ValueError if two
    random variables in the block share a name (e.g. a layer called twice).
    """
    recorded = collections.OrderedDict()

    def record(next_fn, distribution, name, **kwargs):
        rv = next_fn(distribution, name, **kwargs)
        if name in recorded:
            raise ValueError(
                f"tape() recorded two random variables named {name!r}; give each a distinct "
                "name (layers use the layer name, so call a named layer once per tape)."
            )
        recorded[name] = rv
        return rv

    with intercept(record):
        yield recorded


@contextlib.contextmanager
def condition(**values):
    """Sets the value of each named random variable created in the block.

    ``condition(z=value)`` replaces the value of the random variable named ``z``
    (its distribution is unchanged, so ``rv.log_prob()`` scores ``value``). Names
    that no random variable in the block used trigger a warning on exit.
    """
    used = set()

    def set_value(next_fn, distribution, name, **kwargs):
        if name in values:
            used.add(name)
            if not kwargs.get(_CONDITIONED):  # An inner condition on the name wins.
                kwargs["value"] = values[name]
                kwargs[_CONDITIONED] = True
        return next_fn(distribution, name, **kwargs)

    with intercept(set_value):
        yield
    unused = sorted(set(values) - used)
    if unused:
        warnings.warn(f"condition(): no random variable named {unused} was created.",
                      stacklevel=3)


def _constructor(dist_cls):
    def make(*args, name=None, sample_shape=(), value=None, seed=None, **kwargs):
        return random_variable(dist_cls(*args, **kwargs), name=name,
                               sample_shape=sample_shape, value=value, seed=seed)

    make.__name__ = make.__qualname__ = dist_cls.__name__
    make.__doc__ = (
        f"`RandomVariable` over `tfp.distributions.{dist_cls.__name__}`, created through the "
        "interceptors. Takes the distribution's arguments plus ``name``, ``sample_shape``, "
        "``value`` and ``seed``."
    )
    return make


Bernoulli = _constructor(tfd.Bernoulli)
Categorical = _constructor(tfd.Categorical)
Deterministic = _constructor(tfd.Deterministic)
Gamma = _constructor(tfd.Gamma)
Independent = _constructor(tfd.Independent)
LogNormal = _constructor(tfd.LogNormal)
MultivariateNormalTriL = _constructor(tfd.MultivariateNormalTriL)
Normal = _constructor(tfd.Normal)
Poisson = _constructor(tfd.Poisson)
Uniform = _constructor(tfd.Uniform)
