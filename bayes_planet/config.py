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
import math
import pathlib
import re

import yaml

from bayes_planet import layer_registry

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
    "validate",
    "write",
]

_PATH = pathlib.Path(__file__).with_name("configs.yaml")


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


def _raw(path=None):
    with open(path or _PATH) as f:
        raw = _load_yaml(f)
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
    current[parts[-1]] = _load_yaml(value) if value.strip() else None
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


def dump(config):
    """The config as YAML text (what `write` writes)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


def write(config, path):
    """Writes the merged config as YAML (not atomic; runs use `bayes_planet.run`)."""
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(path).write_text(dump(config))


def parse(text, source="config", defaults_path=None):
    """A config from YAML text written by `dump`, validated like `load` (types and ranges).

    Raises `ConfigError` naming ``source`` for text that is not a YAML mapping.
    """
    try:
        data = _load_yaml(text)
    except yaml.YAMLError as e:
        line = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{source} is not valid YAML ({line})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source} does not hold a config mapping; received {data!r:.80}")
    defaults = _raw(defaults_path)["defaults"]
    config = copy.deepcopy(defaults)
    try:
        _merge(config, data, defaults)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    return Config(config)


def read(path, defaults_path=None):
    """Reads a config written by `write` (validated against the defaults)."""
    with open(path) as f:
        text = f.read()
    return parse(text, str(path), defaults_path)


# -- ranges of the agent's config (bayes_planet/configs.yaml) ----------------------------------
_POSITIVE_INT = ("model.deter", "model.stoch", "model.hidden", "model.cnn_depth",
                 "model.mlp_units", "model.mlp_layers", "model.reward_layers",
                 "train.batch_size", "train.chunk_length", "train.seed_episodes",
                 "train.episodes", "train.checkpoint_every", "train.max_nonfinite_steps",
                 "planner.horizon", "planner.candidates", "planner.top_k", "planner.iterations",
                 "planner.weight_samples", "eval.every", "eval.episodes", "env.image_size",
                 "env.episode_length", "env.action_repeat")
_NON_NEGATIVE_INT = ("train.updates_per_episode",)
_POSITIVE_FLOAT = ("model.min_stddev", "model.weight_prior_stddev", "train.learning_rate",
                   "train.adam_epsilon", "train.grad_clip")
_NON_NEGATIVE_FLOAT = ("loss.free_nats", "loss.kl_scale", "loss.reward_scale",
                       "loss.weight_kl_scale", "planner.exploration_noise")
_FINITE_FLOAT = ("planner.beta",)
_CHOICES = {
    "obs_type": ("state", "pixels"),
    "model.estimator": layer_registry.estimators("dense", sampling_only=True),
    "model.weight_prior": ("normal", "scale_mixture"),
    "strategy": ("none", "mirrored", "multi_worker", "tpu"),
}


def _get(data, path):
    for part in path.split("."):
        data = data[part]
    return data


def validate(config):
    """Checks the range of every key of an agent config; returns it or raises `ConfigError`.

    Types are checked by `load`/`read` (against the defaults); this adds ranges, choices and
    the combinations that cannot work. Messages name the key and the received value.
    """
    data = config.to_dict() if isinstance(config, Config) else config

    def fail(path, expected, value):
        raise ConfigError(f"Expected {expected}. Received: {path}={value!r}")

    for path in _POSITIVE_INT + _NON_NEGATIVE_INT:
        value = _get(data, path)
        if value is None and path == "env.action_repeat":
            continue
        low = 0 if path in _NON_NEGATIVE_INT else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            fail(path, "a positive integer" if low else "a non-negative integer", value)
    for path in _POSITIVE_FLOAT + _NON_NEGATIVE_FLOAT + _FINITE_FLOAT:
        value = _get(data, path)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            fail(path, "a finite number", value)
        if path in _POSITIVE_FLOAT and value <= 0:
            fail(path, "a positive number", value)
        if path in _NON_NEGATIVE_FLOAT and value < 0:
            fail(path, "a non-negative number", value)
    for path, choices in _CHOICES.items():
        if _get(data, path) not in choices:
            fail(path, f"one of {list(choices)}", _get(data, path))
    seed = data["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        fail("seed", "an integer in [0, 2**31)", seed)
    if not isinstance(data["task"], str) or not data["task"]:
        fail("task", "a task name such as 'cartpole-swingup'", data["task"])
    bits = data["train"]["pixel_bits"]
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 8:
        fail("train.pixel_bits", "an integer in [1, 8]", bits)
    if data["planner"]["top_k"] > data["planner"]["candidates"]:
        fail("planner.top_k", f"at most planner.candidates={data['planner']['candidates']}",
             data["planner"]["top_k"])
    if data["train"]["chunk_length"] > data["env"]["episode_length"]:
        fail("train.chunk_length", f"at most env.episode_length={data['env']['episode_length']}",
             data["train"]["chunk_length"])
    if data["train"]["seed_episodes"] > data["train"]["episodes"]:
        fail("train.seed_episodes", f"at most train.episodes={data['train']['episodes']}",
             data["train"]["seed_episodes"])
    if data["model"]["bayesian_gru"] and data["model"]["estimator"] == "local_reparameterization":
        raise ConfigError("model.bayesian_gru=True has no local_reparameterization cell; use "
                          "model.estimator=reparameterization or flipout. Received: "
                          "model.estimator='local_reparameterization'")
    return config


def model_defaults():
    """The ``model`` section of the agent's defaults (the one place they are written)."""
    return copy.deepcopy(_raw()["defaults"]["model"])


# -- experiment scripts: the same format and validation, as plain dicts ------------------------
def load_dict(path, presets=(), overrides=()):
    """`load` for an experiment's own YAML, returned as a plain (mutable) dict."""
    return load(presets, overrides, path=path).to_dict()


def save_dict(config, out):
    """Writes a merged config dict to ``out/config.yaml``; returns the path."""
    path = pathlib.Path(out) / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
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
