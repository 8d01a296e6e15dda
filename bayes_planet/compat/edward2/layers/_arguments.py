"""`Edward2Arguments`: a compat layer's constructor with edward2's arguments, their order and
defaults, resolved through the compat module's initializers, regularizers and constraints."""

from bayes_planet.compat.edward2 import constraints, initializers, regularizers

__all__ = ["Edward2Arguments"]


class Edward2Arguments:
    """Mixin (before the library's layer): edward2's constructor arguments.

    Class attributes: ``edward2_signature`` (`signature`: edward2's parameters, order and
    defaults), ``edward2_renamed`` (``{edward2 name: library name}``) and ``edward2_fixed``
    (``{edward2 name: the one value the library implements}``: another value raises a
    one-line ValueError; the argument is not passed on) and ``edward2_dropped`` (``{edward2
    name: the values accepted}`` for an argument that changes nothing here; not passed on).
    Arguments not in the signature
    (the library's own, e.g. ``seed``, and a config's) are passed on as they are.
    """

    edward2_signature = None
    edward2_renamed = {}
    edward2_fixed = {}
    edward2_dropped = {}

    def __init__(self, *args, **kwargs):
        bound = self.edward2_signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        arguments.update(arguments.pop("kwargs", {}))
        for name, allowed in self.edward2_dropped.items():
            given = arguments.pop(name, None)
            if given is not None and given not in allowed:
                raise ValueError(f"Expected {name} in {allowed}. Received: {name}={given!r}")
        for name, value in self.edward2_fixed.items():
            given = arguments.pop(name, value)
            if given != value:
                raise ValueError(f"{type(self).__name__}: bayes_planet implements "
                                 f"{name}={value!r} only. Received: {name}={given!r}")
        for name, value in list(arguments.items()):
            if name.endswith("_initializer"):
                arguments[name] = self.edward2_initializer(name, initializers.get(value))
            elif name.endswith("_regularizer") and name != "activity_regularizer":
                arguments[name] = regularizers.get(value)
            elif name.endswith("_constraint"):
                arguments[name] = constraints.get(value)
        for old, new in self.edward2_renamed.items():
            if old in arguments:
                arguments[new] = arguments.pop(old)
        super().__init__(**arguments)

    def edward2_initializer(self, name, initializer):
        """Hook: the initializer passed on for argument ``name`` (default: as resolved)."""
        del name
        return initializer
