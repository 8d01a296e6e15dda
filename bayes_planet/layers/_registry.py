"""The library's Keras registration, and one resolver behind the ``get()`` of initializers,
regularizers and constraints."""

from bayes_planet._keras import keras

__all__ = ["FORMER_PACKAGE", "PACKAGE", "register", "resolve"]

#: The package of every class and function the library registers with Keras: a saved file
#: names them ``"bayes_planet.layers>DenseFlipout"``. It is the module to import before
#: loading such a file, and Keras prints these names when it cannot find a class (a
#: process that has not imported the library), so its error says what to import.
PACKAGE = "bayes_planet.layers"

#: The package of the names of files saved before (``"bayes_planet>DenseFlipout"``): every
#: class is registered under it too, so those files still load.
FORMER_PACKAGE = "bayes_planet"


def register(obj):
    """Registers ``obj`` (a class with ``get_config``, or a function) with Keras under
    `PACKAGE`, the name files are saved with, and under `FORMER_PACKAGE`, for older files."""
    keras.saving.register_keras_serializable(package=FORMER_PACKAGE)(obj)
    return keras.saving.register_keras_serializable(package=PACKAGE)(obj)


def resolve(identifier, aliases, keras_get, kind, base=None):
    """Resolves ``identifier`` to an object.

    Args:
      identifier: None, an instance, a callable, a string alias, a Keras name or a
        serialized config dict.
      aliases: ``{alias: class}`` of our own classes (fresh instance per lookup).
      keras_get: the Keras ``get`` to fall back on for names and configs not ours.
      kind: the argument name used in error messages (e.g. ``'initializer'``).
      base: optional class whose instances are returned as they are.
    """
    if identifier is None or (base is not None and isinstance(identifier, base)):
        return identifier
    ours = {cls.__name__: cls for cls in aliases.values()}
    if isinstance(identifier, str):
        if identifier in aliases:
            return aliases[identifier]()
        return _keras_get(identifier, keras_get, kind, f"one of {sorted(aliases)} or a Keras "
                          f"{kind} name", identifier)
    if isinstance(identifier, dict):
        name = str(identifier.get("class_name", "")).split(">")[-1]
        if name in ours:  # Also covers legacy (HDF5) configs that lack registered names.
            return ours[name].from_config(identifier.get("config", {}))
        # Keras returns an unknown class name as a plain string: refuse it here, at load.
        return _keras_get(identifier, keras_get, kind, f"one of {sorted(ours)} or a registered "
                          f"Keras {kind} class", identifier.get("class_name"))
    if callable(identifier):
        return identifier
    raise TypeError(
        f"Could not interpret {kind}. Expected one of {sorted(aliases)}, a callable, a config "
        f"dict or None. Received: {kind}={identifier!r}"
    )


def _keras_get(identifier, keras_get, kind, expected, received):
    """``keras_get(identifier)`` if it gives a callable, else a one-line ValueError."""
    try:
        resolved = keras_get(identifier)
    except (ValueError, TypeError) as e:
        resolved, cause = None, e
    else:
        cause = None
    if not callable(resolved):
        raise ValueError(f"Unknown {kind}. Expected {expected}. Received: {kind}={received!r}"
                         ) from cause
    return resolved
