"""The agent's configuration: ``bayes_planet/agent/configs.yaml``, its ranges and older layouts.

``load(presets=('cpu',), overrides=('train.batch_size=8',))`` merges the agent's defaults ←
each preset in order ← each override (`bayes_planet.yaml_config`, which checks keys and
types) and returns a read-only `Config` (``config.train.batch_size``); `validate` checks the
ranges, choices and combinations; `read` reads a run's ``config.yaml``, migrating an older
layout (`upgrade`). Experiment scripts load their own YAML with `bayes_planet.yaml_config`
directly (no agent extra needed).
"""

import copy
import math
import pathlib
import weakref

from bayes_planet import _startup, layer_registry, yaml_config
from bayes_planet.yaml_config import Config, ConfigError

__all__ = [
    "BRANCH_FIXED_KEYS",
    "EXTENDABLE_KEYS",
    "NO_WEIGHT_NOISE",
    "PLANNER_LATENT",
    "SEED_ACTIONS",
    "PLANNING_KEYS",
    "Config",
    "ConfigError",
    "branch_fixed_changes",
    "fixed_changes",
    "load",
    "parse",
    "presets",
    "read",
    "target_updates",
    "upgrade",
    "validate",
    "with_overrides",
    "with_planning",
]

_PATH = pathlib.Path(__file__).with_name("configs.yaml")


def load(presets=(), overrides=()):
    """The agent's config: defaults, presets (in order) and ``key=value`` overrides."""
    return yaml_config.load(presets, overrides, path=_PATH)


def presets():
    """Names of the agent's presets."""
    return yaml_config.presets(_PATH)


def parse(text, source="config"):
    """An agent config from YAML text (`yaml_config.parse`; an older layout is upgraded)."""
    return yaml_config.parse(text, source, defaults_path=_PATH, upgrade=upgrade)


def read(path):
    """Reads an agent config written by `write`, e.g. a run's ``config.yaml`` (an older
    layout is upgraded, `upgrade`; the file is not rewritten)."""
    return yaml_config.read(path, defaults_path=_PATH, upgrade=upgrade)


# -- older layouts of the agent's config ---------------------------------------------------------
_OLD_CEM_KEYS = ("candidates", "top_k", "iterations")
#: Keys added to the config since runs were first recorded, with the value that reproduces what
#: a run without the key did (a section without the key gets it; `upgrade`).
_ADDED_KEYS = {
    "model.normalize_obs": False,
    "model.obs_stddev": 1.0,
    "model.cnn_precision": "float32",
    "value.replay_weight": 0.0,
    "value.replay_loss": "squared",
    "value.ensemble_starts": "all",
    "value.latent": "sample",
    "value.novelty": 0.0,
    "value.weight_samples": 1,
    "value.pessimism": 0.0,
    "loss.kl_balance": None,
    "loss.overshooting": 0,
    "loss.obs_grad_scale": 1.0,
    "loss.value_scale": 0.0,
    "train.random_shift": 0,
    "train.pretrain_updates": 0,
    "train.keep_checkpoint_every": 0,
    "train.seed_actions": "uniform",
    "planner.warm_start": False,
    "planner.novelty": 0.0,
    "planner.latent": "sample",
    "planner.exploration": "noise",
}
#: The rank-1 layers' factor posterior and prior before ``model.factor_posterior`` existed.
_OLD_RANK1_FACTORS = ("trainable_rank1_normal", "rank1_normal_kl_divergence")


#: The keys a trained run may be evaluated with other values of (``bayes-planet eval --set``):
#: how the agent plans, not what it learned.
PLANNING_KEYS = ("planner", "value.policy_proposals", "eval.optimism")

#: The keys a trainer may reopen a run with other values of (`bayes_planet.agent.run.Run`): how long
#: it trains, which nothing before its end depends on, so a run of 50 episodes extended to 100
#: equals a run of 100 (the run tests check it), and which of its checkpoints it keeps.
EXTENDABLE_KEYS = ("train.episodes", "train.keep_checkpoint_every")

#: The keys a branch of a trained run (``bayes-planet train --branch-from RUN``) keeps: its
#: data (the task, what the agent observes, how its seed episodes acted) and its model's variables (``loss.value_scale``
#: decides whether it has a latent value head); and the learning
#: rates, which the optimizers' checkpointed state would silently restore. Everything else
#: (how it plans, explores, trains its value, how long) may change from the parent's.
BRANCH_FIXED_KEYS = ("task", "obs_type", "env", "model", "loss.value_scale", "strategy",
                     "train.seed_actions",
                     "train.learning_rate",
                     "value.enabled", "value.units", "value.layers",
                     "value.critic_learning_rate", "value.actor_learning_rate")


def fixed_changes(previous, config):
    """``[(dotted key, old, new)]`` where ``config`` differs from a run's ``previous`` config
    in keys other than `EXTENDABLE_KEYS`: what a run cannot be reopened with."""
    return [c for c in yaml_config.changes(previous, config) if c[0] not in EXTENDABLE_KEYS]


def _under(key, sections):
    """Whether the dotted ``key`` is one of ``sections`` or a key inside one of them."""
    return any(key == k or key.startswith(k + ".") for k in sections)


def branch_fixed_changes(parent, config):
    """``[(dotted key, old, new)]`` where ``config`` differs from a ``parent`` run's config in
    `BRANCH_FIXED_KEYS` (or keys under them): what a branch of that run cannot change."""
    return [c for c in yaml_config.changes(parent, config) if _under(c[0], BRANCH_FIXED_KEYS)]


def with_overrides(config, overrides):
    """``config`` with ``key=value`` overrides of any key, type- and range-checked (`validate`),
    as `load` merges them; a one-line `ConfigError` otherwise."""
    return validate(yaml_config.override(config, overrides, path=_PATH))


def with_planning(config, overrides):
    """A run's ``config`` with ``key=value`` overrides of `PLANNING_KEYS` only, type- and
    range-checked (`validate`); a one-line `ConfigError` naming any other key."""
    for text in overrides:
        key = text.split("=", 1)[0].strip()
        if not _under(key, PLANNING_KEYS):
            raise ConfigError(f"Expected a planning key ({', '.join(PLANNING_KEYS)}): a trained "
                              f"run's model is fixed. Received: {text}")
        if _under(key, ("value",)) and not config.value.enabled:
            raise ConfigError(f"Expected a run with a value model (value.enabled: true) for "
                              f"{key}: this one plans without a policy. Received: {text}")
    return with_overrides(config, overrides)


def target_updates(episode_index, train, branch_point=None):
    """Gradient updates done once the training phase before episode ``episode_index`` (from 0)
    has run: ``train.updates_per_episode`` before each episode from ``train.seed_episodes`` on,
    and ``train.pretrain_updates`` more once, before the first of them (the burst on the seed
    episodes).

    A branch (``branch_point``: the episode ``b`` it branched at and its parent's update count
    ``u`` there, `bayes_planet.agent.run.Run.branch_point`) starts from ``u`` and adds its own
    ``updates_per_episode`` from episode ``b`` on, so a branch that changes the rate does not
    redo the parent's episodes at its own. Episodes before ``b`` are trained again only if its
    copied checkpoint was lost: then the parent's ``u`` is spread evenly over them (exactly
    its schedule for a parent that kept one rate and had no burst). A branch made during the
    seed episodes has its own burst; a later one had its parent's, counted in ``u``.
    """
    s, per_episode, burst = train.seed_episodes, train.updates_per_episode, train.pretrain_updates
    if branch_point is None:
        return max(0, episode_index - s + 1) * per_episode + (burst if episode_index >= s else 0)
    b, u = branch_point
    if episode_index >= b:
        own_burst = burst if b <= s <= episode_index else 0
        return u + max(0, episode_index - max(b, s) + 1) * per_episode + own_burst
    return u * max(0, episode_index - s + 1) // (b - s) if b > s else 0


def upgrade(data):
    """An agent config mapping of an older layout in today's (a new dict; ``data`` unchanged).

    Run directories keep the ``config.yaml`` they were started with, so every change of layout
    is undone here when one is read (`read`, `parse`):

    * before the planner was chosen by name (``planner.name``), the CEM settings lay directly
      in ``planner``: ``planner: {candidates, top_k, iterations, ...}`` becomes
      ``planner: {name: cem, cem: {candidates, top_k, iterations}, ...}``.
    * before ``model.weight_prior`` existed, the transition's prior was N(0, s²): a model
      section without the key gets ``weight_prior: normal`` (not today's default).
    * before the ``value`` section existed, the agent was PlaNet: a config without it gets
      the default section with ``value.enabled: false``.
    * before ``model.normalize_obs`` existed, observations were not normalized: a model
      section without the key gets ``normalize_obs: false``.
    * before ``model.obs_stddev`` existed, the observation likelihood had unit std: a model
      section without the key gets ``obs_stddev: 1.0``.
    * before ``model.ensemble_size`` existed, no transition was an ensemble: a model section
      without the key gets the default (read by ensemble estimators only).
    * before ``value.replay_weight`` existed, the critic learned from imagined rollouts only:
      a value section without the key gets ``replay_weight: 0.0``.
    * before ``value.replay_loss`` existed, the replay target was regressed onto: a value
      section without the key gets ``replay_loss: squared``.
    * before ``value.ensemble_starts`` existed, every member of an ensemble transition
      imagined from every start state: a value section without the key gets ``all``.
    * before ``value.latent`` existed, the imagined rollouts drew their latents: a value
      section without the key gets ``latent: sample``.
    * before ``value.novelty`` existed, the critic learned from predicted rewards alone: a
      value section without the key gets ``novelty: 0.0``.
    * before ``value.weight_samples``/``value.pessimism`` existed, each update imagined
      under one weight sample: a value section without them gets ``1`` / ``0.0``.
    * before ``planner.warm_start`` existed, every step's search started afresh: a planner
      section without the key gets ``warm_start: false``.
    * before ``planner.novelty`` existed, the planner had no disagreement bonus: a planner
      section without the key gets ``novelty: 0.0``.
    * before ``planner.exploration_final`` existed, the collection noise was constant: a
      planner section without it gets ``exploration_final: null`` (and the default
      ``exploration_decay_steps``, read only when the final noise is set).
    * before ``planner.latent`` existed, every candidate drew its own latent samples: a
      planner section without the key gets ``latent: sample``.
    * before ``planner.exploration`` existed, the collection noise had a fixed std: a planner
      section without the key gets ``exploration: noise``.
    * before ``eval.optimism`` existed, evaluation planned with the collection's
      ``planner.beta`` and ``planner.novelty``: an eval section without the key gets
      ``optimism: true`` where that mattered (a β > 0 or a novelty > 0), else ``false``
      (the same plans; such runs resume under today's default).
    * before ``model.factor_posterior``/``factor_prior`` existed, a rank-1 transition took
      the layers' default of that time: a model section without them gets
      ``trainable_rank1_normal`` / ``rank1_normal_kl_divergence`` (that default, not today's).
    * before ``model.cnn_precision`` existed, the pixel networks computed in float32: a model
      section without the key gets ``cnn_precision: float32``.
    * before ``train.keep_checkpoint_every`` existed, a run kept its 2 newest checkpoints: a
      train section without the key gets ``keep_checkpoint_every: 0``.
    * before ``train.seed_actions`` existed, seed episodes drew their actions uniformly: a
      train section without the key gets ``seed_actions: uniform``.

    Any other missing key is damage, refused by `read`.
    """
    data = copy.deepcopy(data)
    model = data.get("model")
    if isinstance(model, dict) and "weight_prior_stddev" in model and "weight_prior" not in model:
        model["weight_prior"] = "normal"
    if isinstance(model, dict) and "ensemble_size" not in model:
        model["ensemble_size"] = yaml_config.load_dict(_PATH)["model"]["ensemble_size"]
    if isinstance(model, dict) and "value" not in data:  # An agent config of any layout.
        data["value"] = {**yaml_config.load_dict(_PATH)["value"], "enabled": False}
    if isinstance(model, dict) and not {"factor_posterior", "factor_prior"} & model.keys():
        model["factor_posterior"], model["factor_prior"] = _OLD_RANK1_FACTORS
    for dotted, value in _ADDED_KEYS.items():
        section, key = dotted.split(".")
        if isinstance(data.get(section), dict) and key not in data[section]:
            data[section][key] = value
    planner = data.get("planner")
    if isinstance(planner, dict) and "exploration_final" not in planner:
        planner["exploration_final"] = None
        planner["exploration_decay_steps"] = (
            yaml_config.load_dict(_PATH)["planner"]["exploration_decay_steps"])
    if isinstance(planner, dict) and "name" not in planner and "cem" not in planner:
        old = {key: planner.pop(key) for key in _OLD_CEM_KEYS if key in planner}
        if old:
            planner["name"] = "cem"
            planner["cem"] = old
    if isinstance(data.get("eval"), dict) and "optimism" not in data["eval"]:
        data["eval"]["optimism"] = isinstance(planner, dict) and (
            planner.get("beta", 0) > 0 or planner.get("novelty", 0) > 0)
    return data


# -- ranges of the agent's config (bayes_planet/agent/configs.yaml) ----------------------------------
_POSITIVE_INT = ("model.deter", "model.stoch", "model.hidden", "model.ensemble_size",
                 "model.cnn_depth",
                 "model.mlp_units", "model.mlp_layers", "model.reward_layers",
                 "train.batch_size", "train.chunk_length", "train.seed_episodes",
                 "train.episodes", "train.checkpoint_every", "train.max_nonfinite_steps",
                 "planner.horizon", "planner.cem.candidates", "planner.cem.top_k",
                 "planner.cem.iterations", "planner.weight_samples", "eval.every",
                 "eval.episodes", "env.image_size", "env.episode_length", "env.action_repeat",
                 "value.imagine_horizon", "value.start_every", "value.units", "value.layers",
                 "planner.exploration_decay_steps", "value.weight_samples")
_NON_NEGATIVE_INT = ("train.updates_per_episode", "value.policy_proposals", "loss.overshooting",
                     "train.random_shift", "train.pretrain_updates", "train.keep_checkpoint_every")
_POSITIVE_FLOAT = ("model.min_stddev", "model.weight_prior_stddev", "model.obs_stddev",
                   "train.learning_rate", "train.adam_epsilon", "train.grad_clip", "value.critic_learning_rate",
                   "value.actor_learning_rate", "value.grad_clip")
_NON_NEGATIVE_FLOAT = ("loss.free_nats", "loss.kl_scale", "loss.reward_scale",
                       "loss.weight_kl_scale", "planner.exploration_noise", "value.actor_entropy",
                       "value.replay_weight", "value.novelty", "planner.novelty",
                       "value.pessimism", "loss.value_scale",
                       "planner.exploration_final")
#: Keys of the lists above that may also be null (their default then applies: PlaNet's
#: per-task action repeat; constant exploration noise).
_NULLABLE = ("env.action_repeat", "planner.exploration_final")
#: (low, high, whether low is allowed) of floats in an interval; high is allowed.
_INTERVALS = {"value.discount": (0.0, 1.0, False), "value.td_lambda": (0.0, 1.0, True),
              "value.target_rate": (0.0, 1.0, False), "loss.obs_grad_scale": (0.0, 1.0, True)}
_FINITE_FLOAT = ("planner.beta",)
#: Transition estimators without weight noise: two weight samples are the same weights.
NO_WEIGHT_NOISE = (layer_registry.DETERMINISTIC, "batch_ensemble")
#: ``planner.latent``: how the planner's candidate rollouts draw their latent samples
#: (`bayes_planet.agent.policy`).
PLANNER_LATENT = ("sample", "shared", "mean")
#: ``train.seed_actions``: the seed episodes' random actions, uniform in the action box or at
#: its corners (`bayes_planet.agent.collection`).
SEED_ACTIONS = ("uniform", "corners")
_CHOICES = {
    "obs_type": ("state", "pixels"),
    "model.estimator": layer_registry.estimators("dense", sampling_only=True, ensembles=True),
    "model.weight_prior": ("normal", "scale_mixture"),
    "strategy": ("none", "mirrored", "multi_worker", "tpu"),
    "value.ensemble_starts": ("all", "split"),
    "planner.latent": PLANNER_LATENT,
    "train.seed_actions": SEED_ACTIONS,
    "value.latent": ("sample", "mean"),
    "value.replay_loss": ("squared", "self_imitation"),
    "planner.exploration": ("noise", "spread"),
    "model.cnn_precision": ("float32", "mixed_bfloat16"),
}


def _check_factors(model):
    """A `ConfigError` naming the key unless ``model.factor_posterior`` is a rank-1 factor
    posterior and ``model.factor_prior`` a KL prior it can take (`ensemble.factor_prior_mismatch`)."""
    posterior, prior = model["factor_posterior"], model["factor_prior"]
    # The layer library needs TensorFlow: checked last, so every other key fails fast.
    _startup.quiet_import("tensorflow")
    from bayes_planet.layers import ensemble, initializers, regularizers

    try:
        resolved = ensemble.factor_initializer("model.factor_posterior", posterior)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not isinstance(resolved, initializers.DistributionInitializer):
        raise ConfigError("Expected a trainable distribution initializer, e.g. "
                          f"'{_OLD_RANK1_FACTORS[0]}'. Received: model.factor_posterior="
                          f"{posterior!r}")
    try:
        kl = ensemble.factor_regularizer("model.factor_prior", prior)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not isinstance(kl, regularizers.KLRegularizer):
        raise ConfigError(f"Expected a KL regularizer, e.g. '{_OLD_RANK1_FACTORS[1]}'. "
                          f"Received: model.factor_prior={prior!r}")
    reason = ensemble.factor_prior_mismatch(resolved, kl)
    if reason is not None:
        raise ConfigError(f"model.factor_posterior: {reason}. Received: "
                          f"model.factor_posterior={posterior!r}, model.factor_prior={prior!r}")


def _get(data, path):
    for part in path.split("."):
        data = data[part]
    return data


#: The `Config` objects `validate` has passed (a `Config` is read-only), by id.
_VALIDATED = weakref.WeakValueDictionary()


def validate(config):
    """Checks the range of every key of an agent config; returns it or raises `ConfigError`.

    Types are checked by `load`/`read` (against the defaults); this adds ranges, choices and
    the combinations that cannot work. Messages name the key and the received value. A
    `Config` is checked once: validating it again (the CLI checks before TensorFlow loads, the
    `bayes_planet.agent.agent.Agent` it builds checks what it is given) returns it at once.
    """
    if isinstance(config, Config) and _VALIDATED.get(id(config)) is config:
        return config
    _check(config.to_dict() if isinstance(config, Config) else config)
    if isinstance(config, Config):
        _VALIDATED[id(config)] = config
    return config


def _check(data):
    """`validate`'s checks of a config mapping."""

    def fail(path, expected, value):
        expected = f"null or {expected}" if path in _NULLABLE else expected
        raise ConfigError(f"Expected {expected}. Received: {path}={value!r}")

    for path in _POSITIVE_INT + _NON_NEGATIVE_INT:
        value = _get(data, path)
        if value is None and path in _NULLABLE:
            continue
        low = 0 if path in _NON_NEGATIVE_INT else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            fail(path, "a positive integer" if low else "a non-negative integer", value)
    for path in _POSITIVE_FLOAT + _NON_NEGATIVE_FLOAT + _FINITE_FLOAT:
        value = _get(data, path)
        if value is None and path in _NULLABLE:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            fail(path, "a finite number", value)
        if path in _POSITIVE_FLOAT and value <= 0:
            fail(path, "a positive number", value)
        if path in _NON_NEGATIVE_FLOAT and value < 0:
            fail(path, "a non-negative number", value)
    for path, (low, high, closed) in _INTERVALS.items():
        value = _get(data, path)
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not (low <= value <= high) or (value == low and not closed)):
            fail(path, f"a number in {'[' if closed else '('}{low}, {high}]", value)
    for path, choices in _CHOICES.items():
        if _get(data, path) not in choices:
            fail(path, f"one of {list(choices)}", _get(data, path))
    balance = data["loss"]["kl_balance"]
    if balance is not None and (isinstance(balance, bool) or not isinstance(balance, (int, float))
                                or not 0 <= balance <= 1):
        fail("loss.kl_balance", "null or a number in [0, 1]", balance)
    if data["loss"]["overshooting"] >= data["train"]["chunk_length"]:
        fail("loss.overshooting", "less than train.chunk_length="
             f"{data['train']['chunk_length']} (each rollout starts inside a chunk)",
             data["loss"]["overshooting"])
    seed = data["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        fail("seed", "an integer in [0, 2**31)", seed)
    if not isinstance(data["task"], str) or not data["task"]:
        fail("task", "a task name such as 'cartpole-swingup'", data["task"])
    bits = data["train"]["pixel_bits"]
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 8:
        fail("train.pixel_bits", "an integer in [1, 8]", bits)
    planner = data["planner"]
    sections = sorted(k for k, v in planner.items() if isinstance(v, dict))
    if planner["name"] not in sections:
        fail("planner.name", f"one of {sections}", planner["name"])
    cem = planner["cem"]
    if cem["top_k"] > cem["candidates"]:
        fail("planner.cem.top_k", f"at most planner.cem.candidates={cem['candidates']}",
             cem["top_k"])
    if data["train"]["chunk_length"] > data["env"]["episode_length"]:
        fail("train.chunk_length", f"at most env.episode_length={data['env']['episode_length']}",
             data["train"]["chunk_length"])
    if data["train"]["random_shift"] and data["obs_type"] != "pixels":
        fail("train.random_shift", "0 unless obs_type='pixels' (it shifts images; here "
             f"obs_type={data['obs_type']!r})", data["train"]["random_shift"])
    if data["train"]["random_shift"] >= data["env"]["image_size"] // 2:
        fail("train.random_shift", "less than half of env.image_size="
             f"{data['env']['image_size']}", data["train"]["random_shift"])
    if data["obs_type"] == "pixels" and data["env"]["image_size"] != 64:
        fail("env.image_size", "64 for pixel observations (the world model's convolutional "
             "encoder and decoder are PlaNet's, for 64x64 images)", data["env"]["image_size"])
    if data["train"]["seed_episodes"] > data["train"]["episodes"]:
        fail("train.seed_episodes", f"at most train.episodes={data['train']['episodes']}",
             data["train"]["seed_episodes"])
    value = data["value"]
    if not value["actor_init_std"] > 0.1:
        fail("value.actor_init_std", "a number > 0.1 (the policy's smallest stddev)",
             value["actor_init_std"])
    if value["enabled"] and data["strategy"] != "none":
        raise ConfigError("value.enabled=True trains on one device (the value model has no "
                          "distributed step yet); use strategy=none. Received: "
                          f"strategy={data['strategy']!r}")
    model, chunk = data["model"], data["train"]["chunk_length"]
    members = layer_registry.ensemble_members("dense", model["estimator"], model["ensemble_size"])
    if value["ensemble_starts"] == "split" and chunk <= (members - 1) * value["start_every"]:
        fail("train.chunk_length", "more than (model.ensemble_size - 1) * value.start_every = "
             f"{(members - 1) * value['start_every']} with value.ensemble_starts='split' (every "
             "member needs a start)", chunk)
    rollouts = planner["weight_samples"] * members
    if planner["novelty"] > 0 and (model["estimator"] == "deterministic" or rollouts < 2):
        fail("planner.novelty", "0 unless the planner rolls each candidate out more than once "
             "(planner.weight_samples >= 2 of a Bayesian transition, or an ensemble's members; "
             f"here model.estimator={model['estimator']!r}, planner.weight_samples="
             f"{planner['weight_samples']})", planner["novelty"])
    if value["novelty"] > 0 and not value["enabled"]:
        fail("value.novelty", "0 unless value.enabled (it is the critic's intrinsic reward; "
             "without a critic it would do nothing)", value["novelty"])
    if value["novelty"] > 0 and model["estimator"] in NO_WEIGHT_NOISE:
        fail("value.novelty", "0 unless the transition has weight noise (its disagreement "
             f"between two weight samples is 0 for model.estimator in {list(NO_WEIGHT_NOISE)}; "
             f"here model.estimator={model['estimator']!r})", value["novelty"])
    if value["weight_samples"] > 1 and not value["enabled"]:
        fail("value.weight_samples", "1 unless value.enabled (the samples are the critic's "
             "imagined rollouts)", value["weight_samples"])
    if value["weight_samples"] > 1 and model["estimator"] in NO_WEIGHT_NOISE:
        fail("value.weight_samples", "1 unless the transition has weight noise (its weight "
             f"samples are the same weights for model.estimator in {list(NO_WEIGHT_NOISE)}; "
             f"here model.estimator={model['estimator']!r})", value["weight_samples"])
    if value["pessimism"] > 0 and value["weight_samples"] < 2:
        fail("value.pessimism", "0 unless value.weight_samples >= 2 (the std of one sample's "
             f"returns is 0; here value.weight_samples={value['weight_samples']})",
             value["pessimism"])
    cells = layer_registry.estimators("gru_cell", ensembles=True)
    if data["model"]["bayesian_gru"] and data["model"]["estimator"] not in cells:
        raise ConfigError(f"model.bayesian_gru=True has no {data['model']['estimator']} cell; "
                          f"use model.estimator in {list(cells[1:])}. Received: "
                          f"model.estimator={data['model']['estimator']!r}")
    _check_factors(data["model"])
