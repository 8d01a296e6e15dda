"""YAML configs with named presets and ``--set`` overrides: the loader of every script.

A config file holds ``defaults`` and named presets (under a ``presets`` key or at the top
level). ``load(presets, overrides, path=...)`` merges ``defaults`` ← each preset in order ←
each ``key=value`` override (dotted keys), checks that every key exists in ``defaults`` and that
each value has the default's type (YAML's ``1e-4`` is a float), and returns a read-only
`Config` with attribute access (``config.train.batch_size``).

This module needs only PyYAML (part of the ``agent`` extra): the layers-only scripts
(``experiments/gp.py``, ``generative.py``, ``resnet.py``, ``calibration.py``, ``sequence.py``,
``benchmarks/uncertainty.py``) use it without TF-Agents or MuJoCo. The agent's own config
(``bayes_planet/agent/configs.yaml``, its ranges and older layouts) is `bayes_planet.agent.config`.
"""

import bayes_planet._extras.yaml_loader  # noqa: F401  isort: skip  (needs PyYAML)

import copy
import pathlib
import re
import sys

import yaml

__all__ = [
    "Config",
    "ConfigError",
    "add_arguments",
    "add_preset_argument",
    "changes",
    "describe_changes",
    "dump",
    "load",
    "load_dict",
    "parse",
    "parse_presets",
    "presets",
    "presets_from",
    "read",
    "run_script",
    "save_dict",
    "write",
]


class ConfigError(ValueError):
    """An unknown key, preset or a value of the wrong type or out of range."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1's safe loader that also reads ``1e-4`` (no dot) as a float, as YAML 1.2 does."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _load_yaml(text_or_file):
    return yaml.load(text_or_file, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


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


def _raw(path):
    with open(path) as f:
        raw = _load_yaml(f)
    if "presets" not in raw:
        raw = {"defaults": raw["defaults"],
               "presets": {k: v for k, v in raw.items() if k != "defaults"}}
    return raw


def presets(path):
    """Names of the presets of the config file ``path``."""
    return sorted(_raw(path)["presets"])


def _keys(tree, prefix=""):
    for key, value in tree.items():
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, dict):
            yield from _keys(value, path + ".")


def _check_type(path, default, value):
    if default is None:
        return value
    if value is None:
        raise ConfigError(f"{path}: expected {type(default).__name__}, received None")
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
    try:
        current[parts[-1]] = _load_yaml(value) if value.strip() else None
    except yaml.YAMLError as e:
        line = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"override {text!r} is not valid YAML ({line})") from None
    return tree


def load(presets=(), overrides=(), *, path):
    """Merges the defaults of ``path``, presets (in order) and ``key=value`` overrides into a
    `Config` (see the module docstring)."""
    raw = _raw(path)
    defaults = raw["defaults"]
    config = copy.deepcopy(defaults)
    for name in presets:
        if name not in raw["presets"]:
            raise ConfigError(
                f"unknown preset {name!r}; known presets: {', '.join(sorted(raw['presets']))}")
        _merge(config, raw["presets"][name] or {}, defaults)
    _merge_overrides(config, overrides, defaults)
    return Config(config)


def _merge_overrides(data, overrides, defaults):
    """Merges ``key=value`` overrides into the mapping ``data``, type-checked by ``defaults``."""
    for text in overrides:
        _merge(data, _parse_override(text), defaults)


def override(config, overrides, *, path):
    """``config`` (a `Config`) with ``key=value`` overrides merged and type-checked against the
    defaults of ``path``, as `load` merges them."""
    data = config.to_dict()
    _merge_overrides(data, overrides, _raw(path)["defaults"])
    return Config(data)


def changes(a, b):
    """``[(dotted key, value in a, value in b)]`` where the nested mappings ``a`` and ``b``
    (or `Config` objects) differ, sorted by key."""
    a = a.to_dict() if isinstance(a, Config) else a
    b = b.to_dict() if isinstance(b, Config) else b
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += [(f"{key}.{k}", x, y) for k, x, y in changes(va, vb)]
        elif va != vb:
            out.append((key, va, vb))
    return out


def describe_changes(changes):
    """`changes` as one line: ``key: old -> new; ...``."""
    return "; ".join(f"{key}: {va!r} -> {vb!r}" for key, va, vb in changes)


def dump(config):
    """The config as YAML text (what `write` writes)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


def write(config, path):
    """Writes the merged config as YAML (not atomic; run directories use `bayes_planet.agent.run`)."""
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(path).write_text(dump(config))


def parse(text, source="config", *, defaults_path, upgrade=None, complete=False):
    """A config from YAML text written by `dump`, type-checked against the defaults of
    ``defaults_path`` like `load`.

    ``upgrade`` (optional) maps the loaded mapping of an older layout to today's before the
    check. With ``complete``, every key of the defaults must be given (a file `dump` wrote
    has them all: one that lacks some is damaged, and today's defaults must not silently
    stand in for the values it was run with). Raises `ConfigError` naming ``source`` for text
    that is not a YAML mapping, or that lacks keys.
    """
    try:
        data = _load_yaml(text)
    except yaml.YAMLError as e:
        line = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{source} is not valid YAML ({line})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source} does not hold a config mapping; received {data!r:.80}")
    if upgrade is not None:
        data = upgrade(data)
    defaults = _raw(defaults_path)["defaults"]
    config = copy.deepcopy(defaults)
    try:
        _merge(config, data, defaults)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    if complete:
        missing = sorted(set(_keys(defaults)) - set(_keys(data)))
        if missing:
            shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8
                                              else "")
            raise ConfigError(f"{source} lacks the keys {shown} (a damaged or hand-cut file: "
                              "restore it rather than let defaults stand in)")
    return Config(config)


def read(path, *, defaults_path, upgrade=None):
    """Reads a config written by `write` (see `parse`): every key must be there."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    return parse(text, str(path), defaults_path=defaults_path, upgrade=upgrade, complete=True)


# -- experiment scripts: the same format and validation, as plain dicts ------------------------
def load_dict(path, presets=(), overrides=()):
    """`load` for an experiment's own YAML, returned as a plain (mutable) dict."""
    return load(presets, overrides, path=path).to_dict()


def save_dict(config, out):
    """Writes a merged config dict to ``out/config.yaml``; returns the path. ``out`` is
    checked first (`bayes_planet.run_dirs.make_output_dir`): never a run's directory."""
    from bayes_planet.run_dirs import make_output_dir

    path = make_output_dir("out", out) / "config.yaml"
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(yaml.safe_dump(config, sort_keys=False))
    temp.replace(path)
    return path


def parse_presets(values):
    """``['a,b', 'c']`` → ``['a', 'b', 'c']`` (commas and repeated words both work).

    The one preset grammar of every command: ``--preset a,b``, ``--preset a b`` and
    ``--preset a --preset b`` all mean presets ``a`` then ``b``.
    """
    if isinstance(values, str):
        values = [values]
    names = []
    for value in values or ():
        if isinstance(value, (list, tuple)):
            names.extend(parse_presets(value))
        else:
            names.extend(p.strip() for p in value.split(",") if p.strip())
    return names


def add_preset_argument(parser, default=(), help=None):
    """Adds ``--preset`` with the one preset grammar (see `parse_presets`) to a parser."""
    parser.add_argument("--preset", nargs="*", action="append", default=None,
                        help=help or "presets merged left to right: --preset a,b or --preset a b")
    parser.set_defaults(preset_default=list(default))
    return parser


def presets_from(args):
    """The preset names given to a parser built with `add_preset_argument`."""
    names = parse_presets(args.preset or [])
    return names if names else list(getattr(args, "preset_default", []))


def add_arguments(parser):
    """Adds the shared ``--preset``, ``--set`` and ``--out`` flags to an argparse parser."""
    add_preset_argument(parser)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set seeds=[0]")
    parser.add_argument("--out", default=None, help="output folder (default: config 'out')")
    return parser


def run_script(main, argv=None, deterministic=False, resumes=False):
    """Runs a config-driven script's ``main(argv)`` from its ``__main__`` block and returns its
    value. TensorFlow is imported first with its benign start-up lines filtered (as the
    ``bayes-planet`` command does, `bayes_planet._startup`); ``deterministic`` turns on its op
    determinism (bit-reproducible command-line runs; tests call ``main`` in-process without).
    A `ConfigError` (an unknown preset or key, a value of the wrong type or range) or a
    refused output folder (`bayes_planet.run_dirs.OutputDirError`) ends the script as argparse
    ends a bad flag: one line ``<script>: error: <message>`` on stderr and exit status 2, not
    a traceback. Ctrl-C ends it with one line and status 130 (``resumes``: saying that the
    same command resumes)."""
    from bayes_planet import _startup
    from bayes_planet.run_dirs import OutputDirError

    _startup.quiet_import("tensorflow")
    if deterministic:
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    name = pathlib.Path(sys.argv[0]).name
    try:
        return main(argv)
    except (ConfigError, OutputDirError) as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print(f"{name}: interrupted" + ("; run the same command again to resume (what "
                                        "finished is kept)" if resumes else ""),
              file=sys.stderr)
        raise SystemExit(130) from None
