"""A run directory: its writer lock, config, checkpoints and metrics (the storage of a run).

``Run(logdir, config)`` opens a run for writing (`bayes-planet train`);
``Run(logdir, read_config(logdir), read_only=True)`` for reading (`eval`, `probe`, experiment
scripts). `bayes_planet.agent.Agent` opens the `Run` and assembles what lives in it. The layout::

    <logdir>/config.yaml        the merged config, written atomically (tmp file + os.replace)
    <logdir>/.lock              the pid of the one writer, which holds an fcntl.flock on <logdir>
                                itself (deleting this file does not release it)
    <logdir>/episodes/*.npz     every collected episode (`EpisodeReplay`): the truth of progress
    <logdir>/checkpoints/ckpt-NNNNNN/   model, optimizer and counters after NNNNNN episodes
    <logdir>/metrics.jsonl      one JSON row per collected episode (valid JSON, no NaN)
    <logdir>/events.*, videos/, learning_curve.png
    <logdir>/branch.json        a branch's parent, episode, update count and changes (`branch`)

Guarantees (what a writer does when it opens, in this order; `Agent` validates the whole
config, types, ranges, the task and the model's fit to the environment, before it opens the
`Run`, so a refused config writes nothing):

* an exclusive lock: a second writer on the same logdir gets `RunLockedError` and writes nothing;
* the config is written atomically, or compared with the one on disk (a different one is refused;
  a ``config.yaml`` of an older layout is migrated when read, `bayes_planet.agent.config.read`), except
  that `bayes_planet.agent.config.EXTENDABLE_KEYS` (``train.episodes``, ``train.keep_checkpoint_every``) may
  change: the run is extended (or ends sooner, never before the episodes collected) and its
  config rewritten;
* left-over temporary files of killed writers are deleted;
* work that was not committed is discarded (`discard_uncommitted`): an episode is committed when
  its file is in ``episodes/``; before that the run writes its checkpoint (if due) and its
  metrics row, so a checkpoint numbered beyond the episodes on disk, and metrics rows beyond
  them, are removed and the episode is redone (identically: every random stream is named,
  `bayes_planet.seeds`);
* a run that lost data is refused with one line naming it, before anything is written: a
  ``config.yaml`` that lacks keys, a metrics row or an episode file missing in the middle;
* the latest *readable and finite* checkpoint is restored (`restore`); an unreadable one is
  reported and an older one used (a writer removes it: the rerun redoes and saves it). Checkpoints are written once (to a temporary folder renamed
  into place), never rewritten, numbered by the episodes collected, and never hold non-finite
  values.

Every user error is a one-line `RunError` naming the key or path and the received value.
Readers never write into the run directory (no lock file, no TensorBoard writer, no cleanup).
Crash points for the tests: `bayes_planet.agent.faults`.
"""

import fcntl
import itertools
import json
import math
import os
import pathlib
import re
import shutil
import sys

import numpy as np

from bayes_planet import run_dirs, yaml_config
from bayes_planet.agent import config as config_lib
from bayes_planet.agent.faults import fault_armed, fault_point
from bayes_planet.agent.replay import episode_files, fsync_path

__all__ = [
    "NonFiniteError",
    "Run",
    "RunError",
    "RunLockedError",
    "branch",
    "branch_checkpoint",
    "check_logdir",
    "json_row",
    "read_config",
    "read_metrics",
]

_CHECKPOINT = re.compile(r"^ckpt-(\d{6,})$")
_KEEP_CHECKPOINTS = 2


def branch(parent, logdir, config):
    """Starts the run ``logdir`` as a branch of the run ``parent``: a copy of the parent at its
    branch checkpoint (`branch_checkpoint`: its newest committed, readable one; the episodes
    and metrics rows up to it; the parent may still be training) whose training goes on with
    ``config``, which may differ from the parent's except in
    `bayes_planet.agent.config.BRANCH_FIXED_KEYS` (its data and its model's variables). The A/B of a
    change from one trained state: branch twice, train both on.

    The copy is assembled in a temporary folder beside ``logdir`` and renamed into place, so
    a killed branch leaves no half-copied run (its temporary folder is removed by the next
    try). ``<logdir>/branch.json`` records the parent, the episode, the parent's update count
    there (the branch adds its own ``train.updates_per_episode`` from it) and the changes. A
    ``logdir`` that already holds a branch of ``parent`` is left alone (the trainer resumes
    it). Returns the episode the branch starts from, or None if ``logdir`` already held it.
    One-line `RunError`s, all before anything is written: no run or checkpoint in
    ``parent``, a fixed key changed, fewer ``train.episodes`` than the copy holds, ``logdir``
    the parent, inside a run, a run that is not a branch of ``parent``, or neither empty nor
    a run.
    """
    parent = check_logdir(parent, "--branch-from")
    previous = read_config(parent)
    logdir = run_dirs.check_output_dir("logdir", logdir, own=True)
    if logdir.resolve() == parent.resolve():
        raise RunError(f"Expected a folder outside the run {str(parent.resolve())!r} to branch "
                       f"into. Received: logdir={str(logdir)!r}")
    if (logdir / "config.yaml").exists():
        record = logdir / "branch.json"
        made = json.loads(record.read_text())["parent"] if record.is_file() else None
        if made is None or pathlib.Path(made).resolve() != parent.resolve():
            of = f"a branch of {made!r}" if made else "not a branch"
            raise RunError(f"Expected an empty or new logdir, or a branch of {str(parent)!r}. "
                           f"Received: logdir={str(logdir)!r} holds a run that is {of}")
        return None
    if logdir.exists() and any(logdir.iterdir()):
        raise RunError(f"Expected an empty or new logdir to branch into. Received: "
                       f"logdir={str(logdir)!r} holds files but no run")
    fixed = config_lib.branch_fixed_changes(previous, config)
    if fixed:
        raise RunError(f"a branch keeps its parent's data and model, but the config changes "
                       f"{yaml_config.describe_changes(fixed)}; it may change any key but "
                       f"{', '.join(config_lib.BRANCH_FIXED_KEYS)}")
    source = Run(parent, previous, read_only=True)
    for attempt in itertools.count(1):
        number, folder = branch_checkpoint(parent, source)
        _check_episodes(config, number, f"of {str(parent)!r} up to its checkpoint {number}, "
                                        "where the branch starts")
        try:
            return _copy_branch(source, logdir, config, number, folder)
        except FileNotFoundError:  # The parent, training on, removed that checkpoint meanwhile.
            if attempt == _BRANCH_TRIES:
                raise


_BRANCH_TRIES = 5


def branch_checkpoint(parent, source=None):
    """``(number, folder)``: the checkpoint of the run ``parent`` that a branch starts from —
    its newest one that is committed (the episodes up to it are on disk: a training run writes
    its checkpoint just before that episode's file) and readable with finite values. One-line
    `RunError`s: no such checkpoint, or episodes missing in the middle (a damaged run).
    ``source``: the parent's read-only `Run`, if open."""
    parent = pathlib.Path(parent)
    source = source or Run(parent, read_config(parent), read_only=True)
    indices = [index for index, _, _ in episode_files(parent / "episodes")]
    if indices != list(range(len(indices))):
        missing = sorted(set(range(max(indices) + 1)) - set(indices))
        raise RunError(f"{parent}/episodes lacks the episodes {missing[:10]}: the run is "
                       "damaged")
    checkpoints = source.checkpoints()
    if not checkpoints:
        raise RunError(f"no checkpoint in {parent} to branch from")
    for number, folder in reversed(checkpoints):
        if number > len(indices):
            continue  # Written before its episode's file: not committed yet.
        problem = _unreadable(folder)
        if problem is None:
            return number, folder
        if not folder.exists():
            continue  # Removed by the parent training on since it was listed.
        source.say(f"warning: checkpoint {folder} is unreadable ({problem}); branching from an "
                   "older one")
    raise RunError(f"no committed, readable checkpoint in {parent} to branch from")


def _unreadable(folder):
    """Why the checkpoint ``folder`` cannot be restored (unreadable, non-finite), or None."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(str(folder / "ckpt"))
        for name in reader.get_variable_to_shape_map():
            value = np.asarray(reader.get_tensor(name))
            if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
                return f"non-finite values in {name}"
    except Exception as e:  # noqa: BLE001 (any unreadable file: DataLossError, OpError, ...)
        return _one_line(e)
    return None


def _copy_branch(source, logdir, config, number, checkpoint):
    """Assembles the branch in a temporary folder and renames it to ``logdir``: the checkpoint
    first (a parent training on may remove it: `FileNotFoundError`, nothing left behind),
    then the episodes and rows up to it, ``branch.json`` and the config. Returns ``number``."""
    parent, previous = source.logdir, source.config
    episodes = episode_files(parent / "episodes")[:number]
    rows = [r for r in source.read_metrics() if r["episode"] <= number]
    logdir.parent.mkdir(parents=True, exist_ok=True)
    for old in logdir.parent.glob(f".{logdir.name}.branch-tmp-*"):
        shutil.rmtree(old, ignore_errors=True)
    temp = logdir.parent / f".{logdir.name}.branch-tmp-{os.getpid()}"
    try:
        # The branch checkpoint only: a parent still training deletes older ones as it goes.
        shutil.copytree(checkpoint, temp / "checkpoints" / checkpoint.name)
        (temp / "episodes").mkdir(parents=True)
        for _, _, path in episodes:
            shutil.copy2(path, temp / "episodes")
        _atomic_write(temp / "metrics.jsonl", "".join(json_row(r) + "\n" for r in rows))
        _atomic_write(temp / "branch.json", json.dumps({
            "parent": str(parent.resolve()), "episode": number,
            "updates": _updates_at(rows, number, previous.train),
            "changes": [list(c) for c in yaml_config.changes(previous, config)]}, indent=1))
        _atomic_write(temp / "config.yaml", yaml_config.dump(config))
        fault_point("branch_copy")
        if logdir.exists():
            logdir.rmdir()  # Empty, checked by `branch`.
        os.rename(temp, logdir)
        fsync_path(logdir.parent)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return number


def _check_episodes(config, collected, where):
    """A one-line `RunError` if ``config`` trains fewer episodes than the ``collected`` ones
    (``where``: what holds them)."""
    if config.train.episodes < collected:
        raise RunError(f"Expected train.episodes >= the {collected} episodes collected {where}. "
                       f"Received: train.episodes={config.train.episodes}")


def _updates_at(rows, number, train):
    """The parent's gradient updates at its checkpoint ``number``: its metrics row there (what
    the checkpoint holds), else what its schedule (``train``, its config's section) had done by
    then, before its episode ``number`` (`bayes_planet.agent.config.target_updates`)."""
    for row in rows:
        if row["episode"] == number and "updates" in row:
            return int(row["updates"])
    return config_lib.target_updates(number - 1, train)


class RunError(ValueError):
    """A user error about a run directory or its config (one line; the CLI exits with 2)."""


class RunLockedError(RunError):
    """Another process holds the run directory's writer lock."""


class NonFiniteError(RuntimeError):
    """Training diverged: too many updates in a row with a non-finite loss or gradient."""


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


def _non_finite(variables):
    """Names of the floating variables holding a NaN or an inf."""
    return [v.name for v in variables
            if v.dtype.is_floating and not np.all(np.isfinite(v.numpy()))]


def _one_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def check_logdir(logdir, name="logdir"):
    """``logdir`` as a path: not empty, a directory if it exists (one-line error naming
    ``name``)."""
    return run_dirs.check_directory(name, logdir, "a run directory")


def read_config(logdir):
    """The config of the run in ``logdir`` (``config.yaml``, migrated and validated by
    `bayes_planet.agent.config.read`); one-line `RunError` if there is no readable run."""
    logdir = pathlib.Path(logdir)
    path = logdir / "config.yaml"
    if not logdir.is_dir():
        raise RunError(f"no run in {logdir} (not a directory)")
    if not path.is_file():
        raise RunError(f"no run in {logdir} (missing {path})")
    try:
        return config_lib.read(path)
    except (OSError, config_lib.ConfigError) as e:
        raise RunError(f"cannot read the run's config: {_one_line(e)}") from None


class Run:
    """A run directory opened for writing (the trainer) or reading (``read_only=True``).

    The storage of a run, and nothing else: the writer lock, ``config.yaml``, checkpoints and
    ``metrics.jsonl``. What lives in it (environments, replay, world model, policies) is
    assembled by `bayes_planet.agent.Agent`, which opens its `Run` first.

    Args:
      logdir: the run directory.
      config: the validated `Config`: a writer writes it (or compares it with the one on
        disk); a reader passes the one `read_config` read.
      read_only: open for reading: no lock, nothing written into ``logdir``.
      say: where warnings go (default: stderr).
    Raises:
      RunError: one-line user errors (logdir not a writable directory, a different config);
        `RunLockedError` if another writer holds the lock.
    """

    def __init__(self, logdir, config, read_only=False, say=None):
        self.read_only = bool(read_only)
        # A writer's logdir may hold its own run, but not lie inside another.
        self.logdir = (check_logdir(logdir) if self.read_only
                       else run_dirs.check_output_dir("logdir", logdir, own=True))
        self.config = config
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self._lock = None
        self._writer = None
        if not self.read_only:
            self._prepare_writer()

    def branch_point(self):
        """``(episode, updates)``: where this run branched from its parent (`branch`) and the
        parent's update count there; None if it is not a branch. A branch made before
        ``branch.json`` kept the count gets its parent's schedule (the parent's
        ``train.seed_episodes`` and ``train.updates_per_episode``, from its changes)."""
        path = self.logdir / "branch.json"
        if not path.exists():
            return None
        record = json.loads(path.read_text())
        if "updates" not in record:
            parent = {key: old for key, old, _ in record["changes"]}
            t = self.config.train
            train = yaml_config.Config({
                "seed_episodes": parent.get("train.seed_episodes", t.seed_episodes),
                "updates_per_episode": parent.get("train.updates_per_episode",
                                                  t.updates_per_episode),
                "pretrain_updates": parent.get("train.pretrain_updates", t.pretrain_updates)})
            record["updates"] = _updates_at([], record["episode"], train)
        return int(record["episode"]), int(record["updates"])

    # -- opening ------------------------------------------------------------------------------
    def _prepare_writer(self):
        """Creates and locks the logdir, writes or checks config.yaml, cleans temp files."""
        logdir = self.logdir  # Checked by `check_logdir` when the Run was opened.
        try:
            logdir.mkdir(parents=True, exist_ok=True)
            # The lock is on the directory itself, which cannot be deleted from under a running
            # trainer (a lock file could: a second trainer would then lock a new one).
            fd = os.open(logdir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise RunError(f"cannot write to logdir {str(logdir)!r}: {e.strerror}") from None
        pid_file = logdir / ".lock"  # Who holds it, for the message.
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            try:
                holder = pid_file.read_text(errors="replace").strip()
            except OSError:
                holder = ""
            raise RunLockedError(
                f"logdir {str(logdir)!r} is in use by another trainer (pid {holder or '?'}); "
                "wait for it to finish or use another --logdir") from None
        try:
            pid_file.write_text(f"{os.getpid()}\n")
        except OSError as e:
            os.close(fd)
            raise RunError(f"cannot write to logdir {str(logdir)!r}: {e.strerror}") from None
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
                self._extend(path, previous)
        else:
            _atomic_write(path, yaml_config.dump(self.config), fault="config_write")
        checkpoints = logdir / "checkpoints"
        checkpoints.mkdir(exist_ok=True)
        for temp in checkpoints.glob(".tmp-*"):
            shutil.rmtree(temp, ignore_errors=True)

    def _extend(self, path, previous):
        """Rewrites ``config.yaml`` when ``previous`` differs from the config only in
        `config.EXTENDABLE_KEYS` (no fewer episodes than are collected); a `RunError` naming
        the differences otherwise."""
        changes = yaml_config.changes(previous, self.config)
        fixed = config_lib.fixed_changes(previous, self.config)
        if fixed:
            raise RunError(
                f"logdir {self.logdir} holds a run with a different config ({yaml_config.describe_changes(fixed)}); "
                "use a new --logdir or the same presets and --set values")
        collected = len(episode_files(self.logdir / "episodes"))
        _check_episodes(self.config, collected, f"in {self.logdir}")
        _atomic_write(path, yaml_config.dump(self.config), fault="config_write")
        self.say(f"run {self.logdir}: {yaml_config.describe_changes(changes)} ({collected} episodes collected)")

    def episodes_dir(self):
        """``<logdir>/episodes`` (a reader's must exist: `RunError` otherwise)."""
        episodes = self.logdir / "episodes"
        if self.read_only and not episodes.is_dir():
            raise RunError(f"no episodes in {self.logdir} (missing {episodes})")
        return episodes

    def discard_uncommitted(self, committed):
        """Removes checkpoints and metrics rows beyond ``committed`` episodes (see the module
        docstring)."""
        if self.read_only:
            raise RunError(f"run {self.logdir} is open read-only")
        path = self.logdir / "metrics.jsonl"
        text = path.read_text() if path.exists() else ""
        rows, seen = [], set()
        for row in _parse_rows(text):
            if row["episode"] <= committed and row["episode"] not in seen:
                rows.append(row)
                seen.add(row["episode"])
        missing = sorted(set(range(1, committed + 1)) - seen)
        if missing:  # A row is written before its episode is committed: a lost row is damage.
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise RunError(f"{path} lacks the rows of episodes {shown} that {self.logdir}/episodes "
                           "holds: the run is damaged; restore the file or use a new --logdir")
        for number, folder in self.checkpoints():
            if number > committed:
                shutil.rmtree(folder, ignore_errors=True)
        clean = "".join(json_row(r) + "\n" for r in rows)
        if clean != text:
            _atomic_write(path, clean)

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

    def restore(self, checkpoint, variables, at_most=None):
        """Restores the newest readable, finite checkpoint numbered ``<= at_most``.

        Args:
          checkpoint: the `tf.train.Checkpoint` of the run's state.
          variables: the state's variables (checked for non-finite values).
          at_most: the newest checkpoint number to consider (None: any).
        An unreadable or non-finite checkpoint is reported and an older one tried; with none,
        the variables keep the values they had. Returns the restored number or None.
        """
        initial = [(v, v.numpy()) for v in variables]
        for number, path in reversed(self.checkpoints()):
            if at_most is not None and number > at_most:
                continue
            try:
                checkpoint.read(str(path / "ckpt")).assert_existing_objects_matched()
                bad = _non_finite(variables)
                if bad:
                    raise ValueError(f"non-finite values in {bad[0]}")
            except Exception as e:  # noqa: BLE001 (any unreadable file: OpError, IndexError, ...)
                if self.read_only:
                    self.say(f"warning: checkpoint {path} is unreadable ({_one_line(e)}); "
                             "falling back to an older one")
                else:  # A writer redoes it from an older one; the damaged folder would block it.
                    self.say(f"warning: checkpoint {path} is unreadable ({_one_line(e)}); "
                             "removed, it is redone from an older one")
                    shutil.rmtree(path, ignore_errors=True)
                continue
            return number
        for variable, value in initial:  # A failed read may have assigned some.
            variable.assign(value)
        return None

    def save_checkpoint(self, number, checkpoint, variables):
        """Writes checkpoint ``number`` once (temp folder renamed into place); keeps the 2 newest
        and, with ``train.keep_checkpoint_every`` n > 0, those numbered a multiple of n.

        Raises `NonFiniteError` (writing nothing) if any of ``variables`` is NaN or inf.
        """
        if self.read_only:
            raise RunError(f"run {self.logdir} is open read-only")
        bad = _non_finite(variables)
        if bad:
            raise NonFiniteError(f"refusing to checkpoint non-finite values (in {bad[0]})")
        folder = self.logdir / "checkpoints"
        final = folder / f"ckpt-{int(number):06d}"
        if final.exists():
            raise RuntimeError(f"checkpoint {final} exists; checkpoints are never rewritten")
        temp = folder / f".tmp-ckpt-{int(number):06d}-{os.getpid()}"
        shutil.rmtree(temp, ignore_errors=True)
        try:
            checkpoint.write(str(temp / "ckpt"))
            for file in temp.iterdir():
                fsync_path(file)
        except BaseException:  # A full disk, Ctrl-C: leave no half-written folder behind.
            shutil.rmtree(temp, ignore_errors=True)
            raise
        fault_point("checkpoint_write")
        os.rename(temp, final)
        fsync_path(folder)
        every = self.config.train.keep_checkpoint_every
        for kept, old in self.checkpoints()[:-_KEEP_CHECKPOINTS]:
            if not (every and kept % every == 0):
                shutil.rmtree(old, ignore_errors=True)

    # -- metrics ------------------------------------------------------------------------------
    def append_metrics(self, record):
        """Appends one row to metrics.jsonl (fsynced; non-finite numbers as null)."""
        if self.read_only:
            raise RunError(f"run {self.logdir} is open read-only")
        line = json_row(record) + "\n"
        with open(self.logdir / "metrics.jsonl", "a") as f:
            if fault_armed("metrics_write"):
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
