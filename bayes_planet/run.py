"""One owner of a run directory: validation, lock, config, checkpoints, metrics, environments.

``Run(logdir, config)`` opens a run for writing (`bayes-planet train`);
``Run(logdir, read_only=True)`` opens it for reading (`eval`, `probe`, experiment scripts). The
layout::

    <logdir>/config.yaml        the merged config, written atomically (tmp file + os.replace)
    <logdir>/.lock              held (fcntl.flock) by the one writer; holds its pid
    <logdir>/episodes/*.npz     every collected episode (`EpisodeReplay`): the truth of progress
    <logdir>/checkpoints/ckpt-NNNNNN/   model, optimizer and counters after NNNNNN episodes
    <logdir>/metrics.jsonl      one JSON row per collected episode (valid JSON, no NaN)
    <logdir>/events.*, videos/, learning_curve.png

Guarantees (what a writer does when it opens, in this order):

* the whole config is validated (types, ranges, the task) before anything is written; every user
  error is a one-line `RunError` naming the key or path and the received value;
* an exclusive lock: a second writer on the same logdir gets `RunLockedError` and writes nothing;
* the config is written atomically, or compared with the one on disk (a different one is refused);
* left-over temporary files of killed writers are deleted;
* work that was not committed is discarded: an episode is committed when its file is in
  ``episodes/``; before that the run writes its checkpoint (if due) and its metrics row, so a
  checkpoint numbered beyond the episodes on disk, and metrics rows beyond them, are removed
  and the episode is redone (identically: every random stream is named, `bayes_planet.seeds`);
* the latest *readable and finite* checkpoint is restored; an unreadable one is reported and an
  older one used. Checkpoints are written once (to a temporary folder renamed into place), never
  rewritten, numbered by the episodes collected, and never hold non-finite values.

Readers never write into the run directory (no lock file, no TensorBoard writer, no cleanup).

Fault injection for tests: ``BAYES_PLANET_FAULT=name[:n]`` SIGKILLs the process the ``n``-th time
(default 1st) it reaches the point ``name`` (see `fault_point`).
"""

import fcntl
import json
import math
import os
import pathlib
import re
import shutil
import signal
import sys

import numpy as np

from bayes_planet import config as config_lib
from bayes_planet import seeds
from bayes_planet.replay import fsync_path

__all__ = [
    "FAULT_POINTS",
    "NonFiniteError",
    "Run",
    "RunError",
    "RunLockedError",
    "fault_point",
    "json_row",
    "read_metrics",
]

FAULT_ENV = "BAYES_PLANET_FAULT"
#: The named points where `fault_point` can kill the process.
FAULT_POINTS = ("config_write", "seed_episode", "train", "plan", "eval", "checkpoint_write",
                "metrics_write")
_CHECKPOINT = re.compile(r"^ckpt-(\d{6,})$")
_KEEP_CHECKPOINTS = 2
_fault_hits = {}


class RunError(ValueError):
    """A user error about a run directory or its config (one line; the CLI exits with 2)."""


class RunLockedError(RunError):
    """Another process holds the run directory's writer lock."""


class NonFiniteError(RuntimeError):
    """Training diverged: too many updates in a row with a non-finite loss or gradient."""


def fault_point(name):
    """SIGKILLs this process at the ``n``-th call with ``name`` if ``BAYES_PLANET_FAULT=name:n``."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    target, _, count = spec.partition(":")
    if target != name:
        return
    _fault_hits[name] = _fault_hits.get(name, 0) + 1
    if _fault_hits[name] >= int(count or 1):
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def json_row(record):
    """One JSON line; non-finite floats become ``null`` (so the file is always valid JSON)."""
    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value
    return json.dumps({k: clean(v) for k, v in record.items()}, allow_nan=False)


def read_metrics(logdir):
    """The metrics rows of a run (a torn last line, from a killed writer, is left out)."""
    path = pathlib.Path(logdir) / "metrics.jsonl"
    if not path.exists():
        return []
    return _parse_rows(path.read_text())


def _parse_rows(text):
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # A torn row of a killed writer: redone by the next writer.
        if isinstance(row, dict) and isinstance(row.get("episode"), int):
            rows.append(row)
    return rows


def _atomic_write(path, text, fault=None):
    path = pathlib.Path(path)
    temp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(temp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if fault:
        fault_point(fault)
    os.replace(temp, path)
    fsync_path(path.parent)


def _as_dtype(value, dtype):
    """``value`` as a numpy scalar of a TF dtype (for ``Variable.assign``)."""
    return np.asarray(value, dtype.as_numpy_dtype)


def _one_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _diff(a, b, prefix=""):
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            inner = _diff(va, vb, f"{prefix}{key}.")
            if inner:
                out.append(inner)
        elif va != vb:
            out.append(f"{prefix}{key}: {va!r} -> {vb!r}")
    return "; ".join(out)


def check_config(config):
    """Validates an agent config completely (ranges and the task); raises a one-line `RunError`."""
    try:
        config_lib.validate(config)
    except config_lib.ConfigError as e:
        raise RunError(str(e)) from None
    if not config.task.startswith("gym:"):
        from bayes_planet import envs

        try:
            envs.resolve_task(config.task)
        except ValueError as e:
            raise RunError(_one_line(e)) from None
    return config


class Run:
    """A run directory opened for writing (with a config) or reading (``read_only=True``).

    Builds everything the agent needs: ``strategy``, ``env``/``eval_env`` (plain environments)
    and their TF-Agents faces ``py_env``/``py_eval_env``, ``replay`` (`EpisodeReplay`),
    ``model`` (`WorldModel`, initial weights from the ``weights`` stream), the ``updates`` and
    non-finite counters, ``collect_policy``/``eval_policy`` (`PlannerPolicy`), and restores the
    latest valid checkpoint (``restored``: its episode number, or None).

    Args:
      logdir: the run directory.
      config: the merged `Config` (writers); readers read ``<logdir>/config.yaml``.
      read_only: open for reading: no lock, nothing written into ``logdir``; requires a
        checkpoint unless ``require_checkpoint=False``.
      require_checkpoint: readers only.
      say: where warnings go (default: stderr).
    Raises:
      RunError: one-line user errors (bad config, logdir not a writable directory, no run,
        a different config, no checkpoint); `RunLockedError` if another writer holds the lock.
    """

    def __init__(self, logdir, config=None, read_only=False, require_checkpoint=True, say=None):
        self.logdir, self.read_only = pathlib.Path(logdir), bool(read_only)
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self._lock = None
        if self.read_only:
            config = self._read_config()
        elif config is None:
            raise RunError(f"Expected a config to open {self.logdir} for writing. Received: None")
        self.config = check_config(config)
        self._build(require_checkpoint)

    # -- opening ------------------------------------------------------------------------------
    def _read_config(self):
        path = self.logdir / "config.yaml"
        if not self.logdir.is_dir():
            raise RunError(f"no run in {self.logdir} (not a directory)")
        if not path.is_file():
            raise RunError(f"no run in {self.logdir} (missing {path})")
        try:
            return config_lib.read(path)
        except (OSError, config_lib.ConfigError) as e:
            raise RunError(f"cannot read the run's config: {_one_line(e)}") from None

    def _prepare_writer(self):
        """Creates and locks the logdir, writes or checks config.yaml, cleans temp files."""
        logdir = self.logdir
        if logdir.exists() and not logdir.is_dir():
            raise RunError(f"Expected a directory. Received: logdir={str(logdir)!r} is a file")
        try:
            logdir.mkdir(parents=True, exist_ok=True)
            fd = os.open(logdir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise RunError(f"cannot write to logdir {str(logdir)!r}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise RunLockedError(
                f"logdir {str(logdir)!r} is in use by another trainer (pid {holder or '?'}); "
                "wait for it to finish or use another --logdir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock = fd
        for temp in logdir.glob(".*.tmp.*"):  # Config/metrics temp files of killed writers.
            temp.unlink(missing_ok=True)
        path = logdir / "config.yaml"
        if path.exists():
            try:
                previous = config_lib.read(path)
            except (OSError, config_lib.ConfigError) as e:
                raise RunError(f"cannot read the run's config: {_one_line(e)}") from None
            if previous != self.config:
                diff = _diff(previous.to_dict(), self.config.to_dict())
                raise RunError(
                    f"logdir {logdir} holds a run with a different config ({diff}); "
                    "use a new --logdir or the same presets and --set values")
        else:
            _atomic_write(path, config_lib.dump(self.config), fault="config_write")
        checkpoints = logdir / "checkpoints"
        checkpoints.mkdir(exist_ok=True)
        for temp in checkpoints.glob(".tmp-*"):
            shutil.rmtree(temp, ignore_errors=True)

    def _build(self, require_checkpoint):
        import tensorflow as tf
        from tf_agents.environments import tf_py_environment

        from bayes_planet import distribute, envs
        from bayes_planet.agent import PlannerPolicy
        from bayes_planet.envs.tf_agents_env import TFAgentsEnv
        from bayes_planet.replay import EpisodeReplay
        from bayes_planet.world_model import WorldModel

        c = self.config
        # First (a multi-worker strategy must exist before other ops); see docs/distributed.md.
        self.strategy = distribute.make_strategy(c.strategy)
        self.worker = 0
        if not distribute.is_chief(self.strategy):  # Own episodes, logs and checkpoints.
            task = self.strategy.cluster_resolver
            self.logdir = self.logdir / f"{task.task_type}_{task.task_id}"
            self.worker = 1 + task.task_id
        if not self.read_only:
            self._prepare_writer()
        tf.config.experimental.enable_op_determinism()
        size = (c.env.image_size, c.env.image_size)
        make = lambda: envs.make(c.task, obs_type=c.obs_type, seed=0,  # noqa: E731
                                 action_repeat=c.env.action_repeat, size=size,
                                 episode_length=c.env.episode_length)
        self.env, self.eval_env = make(), make()  # Reseeded before every episode.
        self.py_env, self.py_eval_env = TFAgentsEnv(self.env), TFAgentsEnv(self.eval_env)
        self.obs_key = next(iter(self.env.observation_spec()))
        obs_shape = self.env.observation_spec()[self.obs_key].shape
        self.action_size = self.env.action_spec().shape[0]
        episodes = self.logdir / "episodes"
        if self.read_only and not episodes.is_dir():
            raise RunError(f"no episodes in {self.logdir} (missing {episodes})")
        self.replay = EpisodeReplay(episodes, read_only=self.read_only)
        tf.keras.utils.set_random_seed(seeds.int_seed(c.seed, "weights"))
        self.model = WorldModel(c, obs_shape, self.action_size, strategy=self.strategy)
        with self.strategy.scope():
            self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
            self.nonfinite = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite")
            self.nonfinite_in_a_row = tf.Variable(0, dtype=tf.int64, trainable=False,
                                                  name="nonfinite_in_a_row")
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.model.optimizer, updates=self.updates,
            nonfinite=self.nonfinite, nonfinite_in_a_row=self.nonfinite_in_a_row)
        self._initial = [(v, v.numpy()) for v in self._state_variables()]
        if not self.read_only:
            self._discard_uncommitted()
        self.restored = self.restore(at_most=self.replay.num_episodes)
        if self.read_only and require_checkpoint and self.restored is None:
            raise RunError(f"no checkpoint in {self.logdir / 'checkpoints'}: train the run first")
        tf_env = tf_py_environment.TFPyEnvironment(self.py_env)
        specs = (tf_env.time_step_spec(), tf_env.action_spec())
        self.collect_policy = PlannerPolicy(*specs, self.model, c.planner, explore=True)
        self.eval_policy = PlannerPolicy(*specs, self.model, c.planner, explore=False)
        self._py_policies = {}
        self._writer = None

    def _state_variables(self):
        variables = {id(v): v for v in (list(self.model.variables)
                                        + list(self.model.optimizer.variables)
                                        + [self.updates, self.nonfinite,
                                           self.nonfinite_in_a_row])}
        return list(variables.values())

    def _discard_uncommitted(self):
        """Removes checkpoints and metrics rows beyond the episodes on disk (see the docstring)."""
        committed = self.replay.num_episodes
        for number, path in self.checkpoints():
            if number > committed:
                shutil.rmtree(path, ignore_errors=True)
        path = self.logdir / "metrics.jsonl"
        if path.exists():
            text = path.read_text()
            rows, seen = [], set()
            for row in _parse_rows(text):
                if row["episode"] <= committed and row["episode"] not in seen:
                    rows.append(row)
                    seen.add(row["episode"])
            clean = "".join(json_row(r) + "\n" for r in rows)
            if clean != text:
                _atomic_write(path, clean)
            missing = sorted(set(range(1, committed + 1)) - seen)
            if missing:
                self.say(f"warning: episodes {missing} of {self.logdir} have no metrics row "
                         "(written by an older version?)")

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoints(self):
        """``[(number, folder)]`` of the committed checkpoints, oldest first."""
        folder = self.logdir / "checkpoints"
        if not folder.is_dir():
            return []
        found = []
        for path in folder.iterdir():
            match = _CHECKPOINT.match(path.name)
            if match and path.is_dir():
                found.append((int(match.group(1)), path))
        return sorted(found)

    def restore(self, at_most=None):
        """Restores the newest readable, finite checkpoint numbered ``<= at_most``.

        An unreadable or non-finite checkpoint is reported and an older one tried; with none,
        the initial weights are kept. Returns the restored number or None.
        """

        for number, path in reversed(self.checkpoints()):
            if at_most is not None and number > at_most:
                continue
            try:
                self.checkpoint.read(str(path / "ckpt")).assert_existing_objects_matched()
                bad = [v.name for v in self._state_variables()
                       if v.dtype.is_floating and not np.all(np.isfinite(v.numpy()))]
                if bad:
                    raise ValueError(f"non-finite values in {bad[0]}")
            except Exception as e:  # noqa: BLE001 (any unreadable file: OpError, IndexError, ...)
                self.say(f"warning: checkpoint {path} is unreadable ({_one_line(e)}); "
                         "falling back to an older one")
                continue
            return number
        for variable, value in self._initial:  # A failed read may have assigned some.
            variable.assign(value)
        return None

    def begin_episode(self, index):
        """Sets the layers' per-call noise counters from the stream ``layer_counter(index)``.

        Bayesian and output layers count their calls (noise drawn outside `fixed_noise`); the
        counters are checkpointed. Starting every episode's work (training phase, collection,
        evaluation) from counters that depend only on the episode index makes the state after
        episode ``index`` the same whether or not earlier episodes were collected in this
        process (a resume redoes their updates without collecting).
        """
        value = seeds.int_seed(self.config.seed, "layer_counter", index) % 2**30
        for variable in self.model.variables:
            if "seed_counter" in variable.name:
                variable.assign(_as_dtype(value, variable.dtype))

    def save_checkpoint(self, number):
        """Writes checkpoint ``number`` once (temp folder renamed into place); keeps the 2 newest.

        Raises `NonFiniteError` (writing nothing) if any weight is NaN or inf.
        """
        if self.read_only:
            raise RunError(f"run {self.logdir} is open read-only")
        bad = [v.name for v in self._state_variables()
               if v.dtype.is_floating and not np.all(np.isfinite(v.numpy()))]
        if bad:
            raise NonFiniteError(f"refusing to checkpoint non-finite values (in {bad[0]})")
        folder = self.logdir / "checkpoints"
        final = folder / f"ckpt-{int(number):06d}"
        if final.exists():
            raise RuntimeError(f"checkpoint {final} exists; checkpoints are never rewritten")
        temp = folder / f".tmp-ckpt-{int(number):06d}-{os.getpid()}"
        shutil.rmtree(temp, ignore_errors=True)
        self.checkpoint.write(str(temp / "ckpt"))
        for file in temp.iterdir():
            fsync_path(file)
        fault_point("checkpoint_write")
        os.rename(temp, final)
        fsync_path(folder)
        for _, old in self.checkpoints()[:-_KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)

    # -- episodes -----------------------------------------------------------------------------
    def policy(self, kind, *indices):
        """A seeded TF-Agents py policy: ``kind`` in ``random``, ``collect``, ``eval``.

        The planner policies are reseeded from the stream ``<kind>_policy(*indices)``; the
        random policy is a new `RandomPyPolicy` seeded from ``random_policy(*indices)``.
        """
        from tf_agents.policies import py_tf_eager_policy, random_py_policy

        seed = self.config.seed
        if kind == "random":
            return random_py_policy.RandomPyPolicy(
                self.py_env.time_step_spec(), self.py_env.action_spec(),
                seed=seeds.int_seed(seed, "random_policy", self.worker, *indices))
        policies = {"collect": self.collect_policy, "eval": self.eval_policy}
        if kind not in policies:
            raise ValueError(f"Expected kind in ['random', 'collect', 'eval']. Received: {kind!r}")
        policies[kind].reseed(*seeds.pair(seed, f"{kind}_policy", self.worker, *indices))
        if kind not in self._py_policies:
            self._py_policies[kind] = py_tf_eager_policy.PyTFEagerPolicy(
                policies[kind], use_tf_function=True)
        return self._py_policies[kind]

    def collect(self, policy, stream, *indices, evaluation=False, render=False, fault=None):
        """Runs one episode from the initial state of the stream ``stream(*indices)``.

        Args:
          policy: a py policy (`policy`).
          stream: name of the environment-reset stream, e.g. ``"env_reset"``.
          indices: the stream's indices (e.g. the episode number).
          evaluation: use the evaluation environment.
          render: also return rendered frames.
          fault: a `fault_point` name reached after every step.
        Returns:
          ``(episode, frames)``: the replay episode dict and a list of frames.
        """
        from tf_agents.drivers import py_driver

        from bayes_planet.training import EpisodeRecorder

        env, py_env = (self.eval_env, self.py_eval_env) if evaluation else (self.env, self.py_env)
        env.seed(seeds.int_seed(self.config.seed, stream, self.worker, *indices))
        recorder = EpisodeRecorder(self.obs_key, self.action_size,
                                   py_env.render if render else None, py_env.get_info)
        observers = [recorder] + ([lambda _: fault_point(fault)] if fault else [])
        driver = py_driver.PyDriver(py_env, policy, observers=observers, max_episodes=1)
        time_step = py_env.reset()
        recorder.start()
        driver.run(time_step, policy.get_initial_state(1))
        return recorder.episodes[-1]

    # -- metrics ------------------------------------------------------------------------------
    def append_metrics(self, record):
        """Appends one row to metrics.jsonl (fsynced; non-finite numbers as null)."""
        if self.read_only:
            raise RunError(f"run {self.logdir} is open read-only")
        line = json_row(record) + "\n"
        with open(self.logdir / "metrics.jsonl", "a") as f:
            if os.environ.get(FAULT_ENV, "").startswith("metrics_write"):
                f.write(line[: len(line) // 2])  # A torn row, as a kill mid-write leaves.
                f.flush()
                fault_point("metrics_write")
                f.write(line[len(line) // 2:])
            else:
                f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def read_metrics(self):
        """The run's metrics rows."""
        return read_metrics(self.logdir)

    def summary_writer(self):
        """The TensorBoard writer of a writable run (created on first use)."""
        import tensorflow as tf

        if self.read_only:
            raise RunError(f"run {self.logdir} is open read-only")
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(self.logdir))
        return self._writer

    @property
    def closed(self):
        """Whether the lock is released and the TensorBoard writer closed."""
        return self._lock is None and self._writer is None

    def close(self):
        """Releases the writer lock (also released when the process ends) and closes the writer.

        Idempotent, and safe from a finalizer: the writer is closed eagerly (``init_scope``)
        even when garbage collection runs this while some ``tf.function`` is being traced,
        so no summary op lands in that graph.
        """
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            os.close(self._lock)
            self._lock = None
        writer, self._writer = getattr(self, "_writer", None), None
        if writer is not None:
            import tensorflow as tf

            with tf.init_scope():
                writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass
