"""One resolver behind the ``get()`` of initializers, regularizers and constraints."""

__all__ = ["resolve"]


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
