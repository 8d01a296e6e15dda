"""Episode replay for a PlaNet agent: whole episodes on disk, fixed-length chunks for training.

PlaNet (Hafner et al., 2018, "Learning Latent Dynamics for Planning from Pixels", Sec. 2 and
App. A) stores every collected episode and trains on batches of ``B`` chunks of ``L`` consecutive
steps (``B = L = 50``), each chunk taken from a single episode. :class:`EpisodeReplay` does that:

* An **episode** is a dict of arrays of equal length ``T + 1 >= 2`` along axis 0. Step ``t = 0``
  is the reset observation; ``action[t]`` is the action that led to observation ``t`` (zero at
  ``t = 0``) and ``reward[t]`` the reward received on arriving at ``t`` (zero at ``t = 0``). Keys
  are free, e.g. ``image`` uint8 ``[T+1, 64, 64, 3]`` or ``state`` float32 ``[T+1, D]``,
  ``action`` float32 ``[T+1, A]``, ``reward`` float32 ``[T+1]``, ``physics`` float64
  ``[T+1, P]``. The replay checks the shapes, not these conventions.
* **Storage**: one compressed ``.npz`` per episode, named ``{index:06d}-{steps}.npz`` (``steps =
  T + 1``; the index orders episodes by arrival), written to a temporary file in the same
  directory, fsynced and renamed with :func:`os.replace` (atomic on POSIX). A run killed at any
  moment (even by SIGKILL) therefore leaves only complete episode files plus, at worst, one
  temporary file, which the next :class:`EpisodeReplay` on that directory deletes.
* **Sampling**: uniform over all valid chunks in memory, i.e. an episode of ``n`` steps is picked
  with probability proportional to ``max(n - L + 1, 0)`` and the start uniformly in
  ``[0, n - L]``; a chunk never crosses an episode boundary.

Example::

    replay = EpisodeReplay(os.path.join(logdir, 'episodes'))    # resumes what is on disk
    replay.add({'image': images, 'action': actions, 'reward': rewards})
    batch = replay.sample(50, 50, rng)      # {'image': uint8 [50, 50, 64, 64, 3], ...}

One process writes a directory at a time (readers in other processes are fine); the class is not
thread-safe. :class:`EpisodeRecorder` turns the steps of a TF-Agents driver into episodes of this
layout. Numpy only: it imports no TensorFlow (nor TF-Agents).
"""

import numbers
import os
import re
import zipfile

import numpy as np

__all__ = ["EpisodeRecorder", "EpisodeReplay", "episode_files"]

_EPISODE_FILE = re.compile(r"^(\d{6,})-(\d+)\.npz$")
_TEMP_FILE = re.compile(r"^\.(\d{6,})-(\d+)\.npz\.tmp\.(\d+)$")
# Boolean, integer, unsigned and floating arrays; no objects, strings or complex numbers.
_NUMERIC_KINDS = "biuf"


def episode_files(directory):
    """``[(index, steps, path)]`` of the committed episode files in ``directory``, sorted by
    index (``[]`` if it does not exist), without reading them."""
    if not os.path.isdir(directory):
        return []
    files = []
    for name in os.listdir(directory):
        match = _EPISODE_FILE.match(name)
        if match:
            files.append((int(match.group(1)), int(match.group(2)),
                          os.path.join(directory, name)))
    return sorted(files)


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"Expected a positive integer. Received: {name}={value!r}")
    return int(value)


def _process_alive(pid):
    """Whether a process with this id exists (POSIX); the current process counts as dead here."""
    if pid == os.getpid():
        return False  # Our own earlier life (pid reuse in a container) cannot be writing now.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # Exists but belongs to someone else, or unknown: leave its file alone.
    return True


def fsync_path(path):
    """fsyncs a file, or a directory to make a rename in it durable (best effort; not every
    platform supports directories)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _validate_episode(episode, schema=None, copy=True):
    """Checks an episode and returns ``(arrays, steps)``: C-contiguous read-only arrays.

    Args:
        episode: The candidate episode.
        schema: ``{key: (dtype, trailing_shape)}`` every episode must match, or None.
        copy: Copy the arrays (always for caller-owned data) or only convert when needed.

    Raises:
        ValueError: naming the offending key and the received value, shape or dtype.
    """
    if not isinstance(episode, dict):
        raise ValueError(
            "Expected an episode as a dict of arrays. "
            f"Received: episode of type {type(episode).__name__}"
        )
    if not episode:
        raise ValueError("Expected an episode with at least one key. Received: an empty dict")
    arrays = {}
    for key, value in episode.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise ValueError(
                f"Expected episode keys to be non-empty strings without '/'. Received: key={key!r}"
            )
        try:
            array = np.array(value, order="C") if copy else np.asarray(value, order="C")
        except (TypeError, ValueError) as error:
            raise ValueError(f"Could not convert episode[{key!r}] to an array: {error}") from None
        if array.dtype.kind not in _NUMERIC_KINDS:
            raise ValueError(
                f"Expected a boolean, integer or float array for episode[{key!r}]. "
                f"Received: dtype={array.dtype}"
            )
        if array.ndim == 0:
            raise ValueError(
                f"Expected episode[{key!r}] to have a time axis (ndim >= 1). "
                f"Received: a scalar {array!r}"
            )
        arrays[key] = array
    lengths = {key: array.shape[0] for key, array in arrays.items()}
    steps = next(iter(lengths.values()))
    if any(length != steps for length in lengths.values()):
        raise ValueError(
            "Expected all arrays of an episode to have the same length along axis 0. "
            f"Received lengths {lengths}"
        )
    if steps < 2:
        raise ValueError(
            "Expected an episode of at least 2 steps (the reset observation and one transition). "
            f"Received: length {steps} for keys {list(arrays)}"
        )
    for key, array in arrays.items():
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"Expected finite values. Received: NaN or inf in episode[{key!r}]")
    if schema is not None:
        if set(arrays) != set(schema):
            missing, extra = sorted(set(schema) - set(arrays)), sorted(set(arrays) - set(schema))
            raise ValueError(
                f"Expected the keys of the first episode {sorted(schema)}. "
                f"Received: missing keys {missing}, unexpected keys {extra}"
            )
        for key, array in arrays.items():
            dtype, trailing = schema[key]
            if array.dtype != dtype or array.shape[1:] != trailing:
                raise ValueError(
                    f"Expected episode[{key!r}] with dtype {dtype} and shape "
                    f"{(steps,) + trailing} ([T+1, ...] like the first episode, which had "
                    f"trailing shape {trailing}). Received: dtype {array.dtype}, "
                    f"shape {array.shape}"
                )
        arrays = {key: arrays[key] for key in schema}  # The first episode's key order.
    for array in arrays.values():
        array.flags.writeable = False
    return arrays, steps


class EpisodeReplay:
    """Episodes on disk (one compressed .npz per episode) with an in-memory cache.

    Stores whole episodes (dicts of arrays ``[T+1, ...]``, see the module docstring for the
    conventions) and samples training chunks ``[batch_size, length, ...]`` uniformly over all
    chunk positions that lie inside one episode, as PlaNet (Hafner et al., 2018) trains on
    ``50 x 50`` chunks. All episodes must have the first episode's keys, dtypes and trailing
    shapes.

    Every :meth:`add` writes the episode atomically to ``directory`` before it becomes sampleable,
    so a new ``EpisodeReplay(directory)`` after a crash or SIGKILL resumes with every episode
    that ``add`` had returned from (and possibly the one being written, if its rename happened).

    Args:
        directory: Where the episode files live; created if missing. Complete episode files
            already there are loaded in order (resume); leftover temporary files of dead writers
            are deleted.
        max_episodes: Keep at most this many of the newest episodes in memory (and sample only
            from them); older ones are dropped from memory, **their files stay on disk** so the
            run keeps all collected data. On resume only the newest ``max_episodes`` files are
            read. ``None`` (default): keep everything.
        read_only: Open an existing directory for reading only: nothing is created or deleted
            (no temp-file cleanup) and :meth:`add` raises.
        until: Readers only: read just the episodes numbered below this, the data a run had
            collected when it wrote its checkpoint ``until`` (``None``: all of them).

    Raises:
        ValueError: for a bad ``max_episodes`` or ``until``, or an episode file that cannot be read or does
            not match the others (the message names the file).
    """

    def __init__(self, directory, max_episodes=None, read_only=False, until=None):
        if max_episodes is not None:
            max_episodes = _check_positive_int("max_episodes", max_episodes)
        if until is not None:
            until = _check_positive_int("until", until)
            if not read_only:
                raise ValueError(f"Expected until=None for a writer (it appends after the last "
                                 f"episode). Received: until={until}")
        self._directory = os.fspath(directory)
        self._read_only = bool(read_only)
        self._max_episodes = max_episodes
        self._episodes = []  # Dicts of read-only arrays, oldest first.
        self._steps = []  # Their lengths T + 1.
        self._steps_array = None  # Cached np.int64 copy of self._steps for sample().
        self._schema = None  # {key: (dtype, trailing_shape)} of the first episode.
        if self._read_only:
            if not os.path.isdir(self._directory):
                raise ValueError(f"Expected an episode directory. Received: directory="
                                 f"{self._directory!r} does not exist")
        else:
            os.makedirs(self._directory, exist_ok=True)
            self._remove_stale_temp_files()
        files = episode_files(self._directory)
        missing = sorted(set(range(len(files) and files[-1][0] + 1)) - {f[0] for f in files})
        if missing:  # Episodes are numbered 0, 1, ... without gaps: a lost file is damage.
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise ValueError(f"{self._directory} lacks the files of episodes {shown} (of "
                             f"0..{files[-1][0]}): the episode store is damaged")
        self._next_index = files[-1][0] + 1 if files else 0
        if until is not None:
            if until > len(files):
                raise ValueError(f"Expected until <= {len(files)}, the episodes in "
                                 f"{self._directory}. Received: until={until}")
            files = files[:until]
        if max_episodes is not None:
            files = files[-max_episodes:]
        for _, steps, path in files:
            self._append(self._load(path, steps))

    # ------------------------------------------------------------------ properties

    @property
    def directory(self):
        """The directory holding the episode files."""
        return self._directory

    @property
    def max_episodes(self):
        """Maximum number of episodes kept in memory (None: unlimited)."""
        return self._max_episodes

    @property
    def num_episodes(self):
        """Number of episodes in memory (the ones :meth:`sample` draws from)."""
        return len(self._episodes)

    @property
    def num_steps(self):
        """Number of transitions in memory: ``sum(T)`` over episodes of ``T + 1`` steps."""
        return self.transitions()

    def transitions(self, num_episodes=None):
        """Number of transitions of the oldest ``num_episodes`` episodes in memory (default:
        all of them, `num_steps`)."""
        steps = self._steps if num_episodes is None else self._steps[:num_episodes]
        return sum(steps) - len(steps)

    def __len__(self):
        return len(self._episodes)

    def episodes(self):
        """The episodes in memory, oldest first, as new dicts of read-only arrays (no copies)."""
        return [dict(episode) for episode in self._episodes]

    # ------------------------------------------------------------------ adding

    def add(self, episode):
        """Validates an episode, writes it atomically to disk and adds it to memory.

        Args:
            episode: dict of arrays (or array-likes) of equal length ``T + 1 >= 2`` along axis 0,
                numeric dtypes, finite float values; after the first episode, the same keys,
                dtypes and trailing shapes. The arrays are copied.

        Returns:
            The path of the written ``.npz`` file.

        Raises:
            ValueError: naming the problem (not a dict, empty, too short, unequal lengths,
                non-finite values, or a key/dtype/shape differing from the first episode).
                Nothing is written then.
        """
        if self._read_only:
            raise ValueError(f"Cannot add to a replay opened read-only ({self._directory})")
        arrays, steps = _validate_episode(episode, self._schema)
        index = self._next_index
        path = self._path(index, steps)
        temp = os.path.join(self._directory, f".{index:06d}-{steps}.npz.tmp.{os.getpid()}")
        try:
            with open(temp, "wb") as file:
                _write_npz(file, arrays)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, path)
        except BaseException:
            try:
                os.remove(temp)
            except OSError:
                pass
            raise
        fsync_path(self._directory)
        self._next_index = index + 1
        self._append(arrays)
        return path

    # ------------------------------------------------------------------ sampling

    def sample(self, batch_size, length, rng, num_episodes=None):
        """Samples chunks of consecutive steps, uniformly over all chunks inside one episode.

        Each of the ``batch_size`` chunks is drawn independently (with replacement) from the
        ``sum_i max(n_i - length + 1, 0)`` chunk positions of the episodes in memory (``n_i``
        steps each): episodes shorter than ``length`` are never used.

        Args:
            batch_size: Positive int ``B``.
            length: Positive int ``L``, steps per chunk (PlaNet: ``B = L = 50``).
            rng: A ``np.random.Generator``; the result is a deterministic function of its state.
            num_episodes: Sample only from the oldest ``num_episodes`` episodes in memory (e.g.
                to redo an update exactly as it was done before later episodes arrived).
                ``None``: all of them.

        Returns:
            dict with the episodes' keys of C-contiguous arrays ``[B, L, ...]`` with the stored
            dtypes (new arrays, writable).

        Raises:
            ValueError: for a non-positive or non-integer ``batch_size``/``length``, an empty
                replay, or no episode with at least ``length`` steps.
            TypeError: if ``rng`` is not a ``np.random.Generator``.
        """
        batch_size = _check_positive_int("batch_size", batch_size)
        length = _check_positive_int("length", length)
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"Expected rng to be a np.random.Generator. Received: rng={rng!r}")
        if not self._episodes:
            raise ValueError(
                "Cannot sample from an empty replay: add episodes first. "
                f"Received: batch_size={batch_size}, length={length}"
            )
        if self._steps_array is None:
            self._steps_array = np.asarray(self._steps, dtype=np.int64)
        steps = self._steps_array
        if num_episodes is not None:
            num_episodes = _check_positive_int("num_episodes", num_episodes)
            if num_episodes > len(self._episodes):
                raise ValueError(f"Expected num_episodes <= {len(self._episodes)} (episodes in "
                                 f"memory). Received: num_episodes={num_episodes}")
            steps = steps[:num_episodes]
        counts = np.maximum(steps - length + 1, 0)
        ends = np.cumsum(counts)
        total = int(ends[-1])
        if total == 0:
            raise ValueError(
                f"No episode is long enough for chunks of length={length}: the longest of the "
                f"{len(self._episodes)} episodes in memory has {max(self._steps)} steps."
            )
        chunks = rng.integers(total, size=batch_size)
        which = np.searchsorted(ends, chunks, side="right")
        starts = chunks - (ends[which] - counts[which])
        batch = {
            key: np.empty((batch_size, length) + trailing, dtype)
            for key, (dtype, trailing) in self._schema.items()
        }
        for row, (index, start) in enumerate(zip(which.tolist(), starts.tolist(), strict=True)):
            episode = self._episodes[index]
            for key, out in batch.items():
                out[row] = episode[key][start : start + length]
        return batch

    # ------------------------------------------------------------------ internals

    def _path(self, index, steps):
        return os.path.join(self._directory, f"{index:06d}-{steps}.npz")

    def _append(self, arrays):
        if self._schema is None:
            self._schema = {key: (array.dtype, array.shape[1:]) for key, array in arrays.items()}
        self._episodes.append(arrays)
        self._steps.append(next(iter(arrays.values())).shape[0])
        if self._max_episodes is not None and len(self._episodes) > self._max_episodes:
            excess = len(self._episodes) - self._max_episodes
            del self._episodes[:excess]
            del self._steps[:excess]
        self._steps_array = None

    def _remove_stale_temp_files(self):
        for name in os.listdir(self._directory):
            match = _TEMP_FILE.match(name)
            if match and not _process_alive(int(match.group(3))):
                try:
                    os.remove(os.path.join(self._directory, name))
                except FileNotFoundError:
                    pass

    def _load(self, path, steps):
        try:
            with np.load(path, allow_pickle=False) as npz:
                episode = {key: npz[key] for key in npz.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
            raise ValueError(
                f"Could not read the episode file {path}: {error}. Episode files are written "
                "atomically, so this one was damaged or not written by EpisodeReplay; move it "
                "out of the directory to resume without it."
            ) from None
        try:
            arrays, actual = _validate_episode(episode, self._schema, copy=False)
        except ValueError as error:
            raise ValueError(f"Invalid episode file {path}: {error}") from None
        if actual != steps:
            raise ValueError(
                f"Invalid episode file {path}: its name says {steps} steps but its arrays have "
                f"{actual}."
            )
        return arrays


def _write_npz(file, arrays):
    """Writes ``arrays`` as a compressed ``.npz`` (like ``np.savez_compressed``, any key names)."""
    with zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for key, array in arrays.items():
            with zf.open(key + ".npy", mode="w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)


class EpisodeRecorder:
    """TF-Agents transition observer turning an episode's transitions into a replay episode.

    Called with each ``(time_step, policy_step, next_time_step)`` (a driver's
    ``transition_observers``), it stores ``o_0`` and, per transition, ``a_t``, ``r_{t+1}`` and
    ``o_{t+1}``, in the replay layout where ``action[t]``/``reward[t]`` are the action that led
    to ``o_t`` and the reward received on arriving there (both 0 at ``t = 0``); the episode
    is complete, final observation and reward included, when ``next_time_step`` is the last.
    With ``info_fn`` it also stores the true physics state of every observation as
    ``physics`` (for latent probes); with ``render_fn`` a frame of every observation.
    Call `start` after the environment reset (the first observation's physics and frame).
    """

    def __init__(self, obs_key, action_size, render_fn=None, info_fn=None):
        self.obs_key, self.action_size, self.render_fn = obs_key, action_size, render_fn
        self.info_fn = info_fn
        self.episodes = []
        self._first = None
        self._reset()

    def _reset(self):
        self.obs, self.action, self.reward, self.frames, self.physics = [], [], [], [], []

    def start(self):
        """Call after the environment reset: records the first observation's state/frame."""
        self._first = (_physics(self.info_fn()) if self.info_fn is not None else None,
                       self.render_fn() if self.render_fn is not None else None)

    def __call__(self, transition):
        time_step, policy_step, next_time_step = transition
        if time_step.is_first():
            self._reset()
            physics, frame = self._first if self._first is not None else (None, None)
            self.obs.append(np.asarray(time_step.observation[self.obs_key]))
            self.action.append(np.zeros(self.action_size, np.float32))
            self.reward.append(np.float32(0.0))
            if self.info_fn is not None:
                self.physics.append(physics)
            if self.render_fn is not None:
                self.frames.append(frame)
        # The env already stepped: its state is o_{t+1}'s.
        self.obs.append(np.asarray(next_time_step.observation[self.obs_key]))
        self.action.append(np.asarray(policy_step.action, np.float32))
        self.reward.append(np.float32(next_time_step.reward))
        if self.info_fn is not None:
            self.physics.append(_physics(self.info_fn()))
        if self.render_fn is not None:
            self.frames.append(self.render_fn())
        if next_time_step.is_last():
            episode = {"obs": np.stack(self.obs), "action": np.stack(self.action),
                       "reward": np.asarray(self.reward, np.float32)}
            if self.info_fn is not None:
                episode["physics"] = np.stack(self.physics)
            self.episodes.append((episode, self.frames))
            self._reset()


def _physics(info):
    """The flat true physics state (qpos, qvel, act) from an env info dict."""
    return np.asarray(info["physics_state"], np.float64)
