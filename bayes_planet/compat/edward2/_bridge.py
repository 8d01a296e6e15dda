"""The mechanisms behind `bayes_planet.compat.edward2`: edward2's tracers, its view of a layer
weight, and layer constructors with edward2's signatures.

* `trace`: edward2's ``with ed.trace(tracer):``. A tracer is ``tracer(f, *args, **kwargs)``
  that must call ``f`` (the next tracer, innermost first) and return its random variable. It
  sees every random variable made through `bayes_planet.layers.tracing` (the compat module's
  constructors ``ed.Normal`` etc., the GP layers' outputs), with ``name``, ``value`` and
  ``sample_shape`` as keyword arguments it may change, and every distribution weight of a
  compat layer (`Edward2Weight`): a tracer that gives the weight's random variable a value
  (``rv._value = rv.distribution.mean()``, or reads ``rv.value``, a draw) makes the weight a
  point mass at that value for the calls inside the block (`bayes_planet.layers.
  posterior_mean` is the case of the mean).
* `Edward2Weight`: edward2's layer weight is a random variable (``layer.kernel.distribution``
  an attribute, ``layer.alpha[i]`` a tensor); ours is the posterior itself (a Keras layer whose
  ``distribution()`` is a method). The mixin gives the compat posteriors both views.

The constructor mixin that takes edward2's arguments is `layers._arguments.Edward2Arguments`.
"""

import contextlib
import functools
import inspect
import threading

import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers import tracing
from bayes_planet.layers.random_variable import RandomVariable

__all__ = ["Edward2Weight", "compat_class", "compat_get", "register", "signature", "trace"]

#: Keras registration package of the compat classes (distinct from the library's, whose
#: classes of the same name have other defaults).
PACKAGE = "bayes_planet.compat.edward2"
register = keras.saving.register_keras_serializable(package=PACKAGE)

_STATE = threading.local()


def _tracers():
    if not hasattr(_STATE, "tracers"):
        _STATE.tracers = []
    return _STATE.tracers


#: The random variable arguments a tracer sees and may change.
_TRACED_ARGUMENTS = ("name", "value", "sample_shape")


@contextlib.contextmanager
def trace(tracer):
    """edward2's ``trace``: runs ``tracer(f, *args, **kwargs)`` on every random variable made in
    the block (see the module docstring). Tracers nest; the innermost runs first."""
    if not callable(tracer):
        raise TypeError(f"Expected a callable tracer. Received: tracer={tracer!r}")

    def interceptor(next_fn, distribution, name, **kwargs):
        def make(*args, **given):
            del args  # The distribution is made already.
            for key in ("value", "sample_shape"):
                if key in given:
                    kwargs[key] = given[key]
            return next_fn(distribution, given.get("name", name), **kwargs)
        return tracer(make, name=name, value=kwargs.get("value"),
                      sample_shape=kwargs.get("sample_shape", ()))

    stack = _tracers()
    stack.append(tracer)
    try:
        with tracing.intercept(interceptor):
            yield
    finally:
        del stack[max(i for i, t in enumerate(stack) if t is tracer)]


def traced_value(weight):
    """The value the active tracers give ``weight``'s random variable, or None (no tracer, or
    none of them set a value)."""
    stack = _tracers()
    if not stack or getattr(_STATE, "tracing_weight", False):
        return None  # (Inside a tracer, the weight's own parameters are read untraced.)

    def make(*args, **kwargs):
        del args
        return RandomVariable(weight.base_distribution(), value=kwargs.get("value"),
                              sample_shape=kwargs.get("sample_shape", ()))

    f = make
    for tracer in stack:  # The innermost (last) tracer runs first.
        f = functools.partial(tracer, f)
    _STATE.tracing_weight = True
    try:
        rv = f(name=weight.name)
        value = getattr(rv, "_value", None)
    finally:
        _STATE.tracing_weight = False
    return None if value is None else tf.convert_to_tensor(value)


class DistributionView:
    """A weight's ``distribution``: callable (the library's ``distribution()``) and an
    attribute (edward2's ``layer.kernel.distribution.stddev()``)."""

    def __init__(self, method):
        self._method = method

    def __call__(self):
        return self._method()

    def __getattr__(self, name):
        return getattr(self._method(), name)

    def __repr__(self):
        return f"DistributionView({self._method()!r})"


class Edward2Weight:
    """Mixin (before the library's posterior): edward2's view of a distribution weight.

    ``distribution`` is a `DistributionView`; ``weight[key]`` and ``tf.convert_to_tensor(weight)``
    give its value (the point mass's location; a draw of any other posterior, made when it is
    read); a tracer's value (`trace`) makes it a point mass for the calls in the block.
    """

    @property
    def distribution(self):
        return DistributionView(self.base_distribution)

    def base_distribution(self):
        return super().distribution()

    @property
    def _use_posterior_mean(self):
        return self.__dict__.get("_edward2_posterior_mean", False) or (
            self.built and traced_value(self) is not None)

    @_use_posterior_mean.setter
    def _use_posterior_mean(self, value):
        self.__dict__["_edward2_posterior_mean"] = value

    def loc(self):
        value = traced_value(self) if self.built else None
        return super().loc() if value is None else tf.cast(value, self.param_dtype)

    def edward2_value(self):
        """The weight's value as edward2 reads it (see the class docstring)."""
        try:
            _, scale = self.moments()
        except NotImplementedError:
            scale = True
        if scale is None:
            return self.loc()
        return self.base_distribution().sample()

    def __getitem__(self, key):
        return tf.convert_to_tensor(self.edward2_value())[key]


def _to_tensor(value, dtype=None, name=None, as_ref=False):
    del name, as_ref
    return tf.convert_to_tensor(value.edward2_value(), dtype=dtype)


tf.register_tensor_conversion_function(Edward2Weight, _to_tensor)


def compat_class(identifier, classes):
    """The compat class of ``classes`` a config dict names by its registered name (the library's
    ``get`` resolves bare class names to its own classes), or None."""
    if not isinstance(identifier, dict):
        return None
    registered = str(identifier.get("registered_name") or "")
    package, _, name = registered.rpartition(">")
    if package != PACKAGE:
        return None
    return next((cls for cls in classes if cls.__name__ == name), None)


def compat_get(identifier, value, aliases, library_get):
    """A compat module's ``get``: an edward2 name of ``aliases`` (snake case or its class name)
    gives a fresh instance, a config naming a compat class is rebuilt from it, and anything else
    is ``library_get(value)`` (``value``: ``identifier`` where None)."""
    if value is None:
        value = identifier
    if identifier is None:
        return None
    if isinstance(identifier, str):
        by_class = {cls.__name__: cls for cls in aliases.values()}
        cls = aliases.get(identifier) or by_class.get(identifier)
        if cls is not None:
            return cls()
    cls = compat_class(identifier, aliases.values())
    if cls is not None:
        return cls.from_config(identifier.get("config", {}))
    return library_get(value)


def signature(*names, **defaults):
    """An `inspect.Signature` ``(*names, **defaults, **kwargs)`` (positional-or-keyword
    parameters in this order; ``names`` without a default)."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(n, kind) for n in names]
    params += [inspect.Parameter(n, kind, default=d) for n, d in defaults.items()]
    params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)
