"""A ``.keras`` file with its saved config edited, as a hand-edited or older file would be
(not collected by pytest)."""

import json
import zipfile


def edited_keras_file(path, target, edit):
    """Copies the ``.keras`` zip ``path`` to ``target`` with ``edit(config)`` applied to its
    ``config.json`` (a dict, changed in place); returns ``target``."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(target, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            dst.writestr(item, data)
    return target
