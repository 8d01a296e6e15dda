"""Configuration: one YAML of defaults plus named presets, overridable from the CLI.

``load(presets=('cpu',), overrides=('train.batch_size=8',))`` merges
``defaults`` ← each preset in order ← each override, validates that every key
exists in ``defaults`` and that each value has the default's type, and returns a
read-only `Config` with attribute access (``config.train.batch_size``).

The agent's YAML is ``bayes_planet/configs.yaml``; experiment scripts pass their
own ``path=`` (a YAML with ``defaults`` and the presets, either under a
``presets`` key or at the top level).
"""

import bayes_planet._extras.agent  # noqa: F401  isort: skip  (needs the 'agent' extra)

import copy
import pathlib

import yaml

__all__ = [
    "Config",
    "ConfigError",
    "add_arguments",
    "load",
    "load_dict",
    "parse_presets",
    "presets",
    "read",
    "save_dict",
    "write",
]

_PATH = pathlib.Path(__file__).with_name("configs.yaml")


class ConfigError(ValueError):
    """An unknown key, preset or a value of the wrong type."""


class Config:
    """A read-only nested mapping with attribute access."""

    def __init__(self, data):
        object.__setattr__(self, "_data", data)

    def __getattr__(self, name):
        try:
            value = self._data[name]
        except KeyError:
            raise AttributeError(f"config has no key {name!r}") from None
        return Config(value) if isinstance(value, dict) else value

    def __getitem__(self, name):
        return self.__getattr__(name)

    def __setattr__(self, name, value):
        raise AttributeError("Config is read-only; use --set key=value or a preset")

    def __eq__(self, other):
        return isinstance(other, Config) and self._data == other._data

    def __repr__(self):
        return f"Config({self._data!r})"

    def to_dict(self):
        return copy.deepcopy(self._data)


def _raw(path=None):
    with open(path or _PATH) as f:
        raw = yaml.safe_load(f)
    if "presets" not in raw:
        raw = {"defaults": raw["defaults"],
               "presets": {k: v for k, v in raw.items() if k != "defaults"}}
    return raw


def presets(path=None):
    """Names of the available presets."""
    return sorted(_raw(path)["presets"])


def _keys(tree, prefix=""):
    for key, value in tree.items():
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, dict):
            yield from _keys(value, path + ".")


def _check_type(path, default, value):
    if default is None or value is None:
        return value
    if isinstance(default, bool) or isinstance(value, bool):
        if not isinstance(value, bool) or not isinstance(default, bool):
            raise ConfigError(f"{path}: expected {type(default).__name__}, received {value!r}")
        return value
    if isinstance(default, float) and isinstance(value, int):
        return float(value)
    if not isinstance(value, type(default)):
        raise ConfigError(f"{path}: expected {type(default).__name__}, received {value!r}")
    return value


def _merge(base, update, defaults, prefix=""):
    for key, value in update.items():
        path = f"{prefix}{key}"
        if key not in defaults:
            known = ", ".join(sorted(_keys(defaults, prefix)))
            raise ConfigError(f"unknown config key {path!r}; known keys: {known}")
        if isinstance(defaults[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: expected a mapping, received {value!r}")
            _merge(base[key], value, defaults[key], path + ".")
        else:
            base[key] = _check_type(path, defaults[key], value)


def _parse_override(text):
    if "=" not in text:
        raise ConfigError(f"override must look like key=value, received {text!r}")
    path, value = text.split("=", 1)
    tree = current = {}
    parts = path.strip().split(".")
    for part in parts[:-1]:
        current = current.setdefault(part, {})
    current[parts[-1]] = yaml.safe_load(value)
    return tree


def load(presets=(), overrides=(), path=None):
    """Merges defaults, presets (in order) and ``key=value`` overrides into a Config."""
    raw = _raw(path)
    defaults = raw["defaults"]
    config = copy.deepcopy(defaults)
    for name in presets:
        if name not in raw["presets"]:
            raise ConfigError(
                f"unknown preset {name!r}; known presets: {', '.join(sorted(raw['presets']))}")
        _merge(config, raw["presets"][name] or {}, defaults)
    for text in overrides:
        _merge(config, _parse_override(text), defaults)
    return Config(config)


def write(config, path):
    """Writes the merged config as YAML."""
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(config.to_dict(), f, sort_keys=False)


def read(path, defaults_path=None):
    """Reads a config written by `write` (validated against the defaults)."""
    with open(path) as f:
        data = yaml.safe_load(f)
    defaults = _raw(defaults_path)["defaults"]
    config = copy.deepcopy(defaults)
    _merge(config, data, defaults)
    return Config(config)


# -- experiment scripts: the same format and validation, as plain dicts ------------------------
def load_dict(path, presets=(), overrides=()):
    """`load` for an experiment's own YAML, returned as a plain (mutable) dict."""
    return load(presets, overrides, path=path).to_dict()


def save_dict(config, out):
    """Writes a merged config dict to ``out/config.yaml``; returns the path."""
    path = pathlib.Path(out) / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def parse_presets(values):
    """``['a,b', 'c']`` → ``['a', 'b', 'c']`` (commas and repeated words both work)."""
    names = []
    for value in values or ():
        names.extend(p.strip() for p in value.split(",") if p.strip())
    return names


def add_arguments(parser):
    """Adds the shared ``--preset``, ``--set`` and ``--out`` flags to an argparse parser."""
    parser.add_argument("--preset", nargs="*", default=[],
                        help="presets merged left to right, e.g. --preset debug or a,b")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set seeds=[0]")
    parser.add_argument("--out", default=None, help="output folder (default: config 'out')")
    return parser
