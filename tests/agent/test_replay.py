"""Tests for bayes_planet.agent.replay.EpisodeReplay: chunk sampling, disk storage, resume, validation."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from scipy import stats

from bayes_planet.agent.replay import EpisodeReplay


def make_episode(episode_id, steps, action_dim=2):
    """An episode whose arrays encode its id and the time index of every step."""
    time_index = np.arange(steps)
    state = np.stack([np.full(steps, episode_id), time_index], axis=1).astype(np.float32)
    image = np.zeros((steps, 4, 4, 3), np.uint8)
    image[:, 0, 0, 0] = episode_id
    image[:, 0, 0, 1] = time_index % 256
    image[:, 0, 0, 2] = time_index // 256
    action = np.full((steps, action_dim), episode_id + 0.5, np.float32)
    action[0] = 0.0
    reward = time_index.astype(np.float32)
    physics = np.stack([time_index, 1000.0 * episode_id + time_index], axis=1)  # float64
    return {"image": image, "state": state, "action": action, "reward": reward, "physics": physics}


def assert_episodes_equal(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert list(got) == list(want)
        for key in want:
            assert got[key].dtype == want[key].dtype
            np.testing.assert_array_equal(got[key], want[key])


def test_add_writes_files_and_counts(tmp_path):
    replay = EpisodeReplay(tmp_path / "episodes")
    assert (tmp_path / "episodes").is_dir()
    assert len(replay) == replay.num_episodes == replay.num_steps == 0
    paths = [replay.add(make_episode(i, steps)) for i, steps in enumerate([5, 12, 3])]
    assert [os.path.basename(path) for path in paths] == [
        "000000-5.npz",
        "000001-12.npz",
        "000002-3.npz",
    ]
    assert all(os.path.isfile(path) for path in paths)
    assert sorted(os.listdir(tmp_path / "episodes")) == sorted(os.path.basename(p) for p in paths)
    assert len(replay) == replay.num_episodes == 3
    assert replay.num_steps == 4 + 11 + 2  # Transitions: T per episode of T + 1 steps.
    with np.load(paths[1]) as npz:
        np.testing.assert_array_equal(npz["state"], make_episode(1, 12)["state"])


def test_chunks_never_cross_episode_boundaries(tmp_path):
    replay = EpisodeReplay(tmp_path)
    lengths = [2, 7, 50, 51, 126, 300]
    for episode_id, steps in enumerate(lengths):
        replay.add(make_episode(episode_id, steps))
    rng = np.random.default_rng(1)
    for length in [1, 2, 7, 8, 50, 51, 126, 127, 300]:
        batch = replay.sample(64, length, rng)
        assert set(batch) == {"image", "state", "action", "reward", "physics"}
        episode_ids = batch["state"][:, :, 0]
        times = batch["state"][:, :, 1].astype(np.int64)
        # Each chunk comes from one episode that is long enough, contiguous in time.
        assert np.all(episode_ids == episode_ids[:, :1])
        starts = times[:, 0]
        np.testing.assert_array_equal(times, starts[:, None] + np.arange(length))
        ends = starts + length
        episode_lengths = np.asarray(lengths)[episode_ids[:, 0].astype(np.int64)]
        assert np.all(starts >= 0) and np.all(ends <= episode_lengths)
        # Every key of a chunk comes from the same episode and steps.
        np.testing.assert_array_equal(batch["image"][..., 0, 0, 0], episode_ids)
        image_times = batch["image"][..., 0, 0, 1].astype(np.int64)
        image_times += 256 * batch["image"][..., 0, 0, 2].astype(np.int64)
        np.testing.assert_array_equal(image_times, times)
        np.testing.assert_array_equal(batch["reward"], times)
        np.testing.assert_array_equal(batch["physics"][..., 0], times)
        np.testing.assert_array_equal(batch["physics"][..., 1], 1000.0 * episode_ids + times)
        expected_action = np.where(times == 0, 0.0, episode_ids + 0.5)
        np.testing.assert_array_equal(batch["action"][..., 0], expected_action)


def test_sample_shapes_dtypes_and_contiguity(tmp_path):
    replay = EpisodeReplay(tmp_path)
    for episode_id in range(3):
        replay.add(make_episode(episode_id, 20, action_dim=3))
    batch = replay.sample(5, 9, np.random.default_rng(0))
    expected = {
        "image": ((5, 9, 4, 4, 3), np.uint8),
        "state": ((5, 9, 2), np.float32),
        "action": ((5, 9, 3), np.float32),
        "reward": ((5, 9), np.float32),
        "physics": ((5, 9, 2), np.float64),
    }
    assert list(batch) == list(expected)  # The first episode's key order.
    for key, (shape, dtype) in expected.items():
        assert batch[key].shape == shape
        assert batch[key].dtype == dtype
        assert batch[key].flags.c_contiguous
        assert batch[key].flags.writeable


def test_sample_is_deterministic_given_the_generator(tmp_path):
    replay = EpisodeReplay(tmp_path)
    for episode_id, steps in enumerate([30, 40, 60]):
        replay.add(make_episode(episode_id, steps))
    first = replay.sample(16, 10, np.random.default_rng(7))
    second = replay.sample(16, 10, np.random.default_rng(7))
    other = replay.sample(16, 10, np.random.default_rng(8))
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
    assert not np.array_equal(first["state"], other["state"])


def test_sampling_is_uniform_over_chunks(tmp_path):
    """Chunk (episode, start) frequencies match the uniform distribution over valid chunks.

    Episodes of 11 and 31 steps and chunks of length 10 give 2 + 22 = 24 valid chunks; an
    episode of 9 steps has none and must never be picked. Chi-square goodness of fit over the
    24 cells with 23 degrees of freedom, rejected below p = 1e-3; the episode frequency gets a
    4-sigma binomial check. Fixed seed, so the test is deterministic.
    """
    replay = EpisodeReplay(tmp_path)
    lengths = {0: 11, 1: 9, 2: 31}
    for episode_id, steps in lengths.items():
        replay.add(make_episode(episode_id, steps))
    length, draws = 10, 24_000
    rng = np.random.default_rng(2024)
    episode_ids, starts = [], []
    for _ in range(draws // 1000):
        state = replay.sample(1000, length, rng)["state"]
        episode_ids.append(state[:, 0, 0].astype(np.int64))
        starts.append(state[:, 0, 1].astype(np.int64))
    episode_ids, starts = np.concatenate(episode_ids), np.concatenate(starts)
    assert not np.any(episode_ids == 1)  # Too short for length 10.
    cells = [(0, s) for s in range(lengths[0] - length + 1)]
    cells += [(2, s) for s in range(lengths[2] - length + 1)]
    assert len(cells) == 24
    observed = np.array([np.sum((episode_ids == e) & (starts == s)) for e, s in cells])
    assert observed.sum() == draws  # No chunk outside the valid cells.
    expected = np.full(len(cells), draws / len(cells))
    chi2 = np.sum((observed - expected) ** 2 / expected)
    assert stats.chi2.sf(chi2, df=len(cells) - 1) > 1e-3, (chi2, observed)
    # Episode selection probability proportional to the number of its chunks: 2/24 vs 22/24.
    p_short = 2 / 24
    count_short = np.sum(episode_ids == 0)
    sigma = np.sqrt(draws * p_short * (1 - p_short))
    assert abs(count_short - draws * p_short) < 4 * sigma, count_short


def test_resume_loads_the_same_content(tmp_path):
    episodes = [make_episode(i, steps) for i, steps in enumerate([4, 60, 2, 33])]
    replay = EpisodeReplay(tmp_path)
    for episode in episodes:
        replay.add(episode)
    resumed = EpisodeReplay(tmp_path)
    assert resumed.num_episodes == replay.num_episodes == 4
    assert resumed.num_steps == replay.num_steps == 3 + 59 + 1 + 32
    assert_episodes_equal(resumed.episodes(), episodes)
    assert_episodes_equal(resumed.episodes(), replay.episodes())
    for key, value in replay.sample(8, 20, np.random.default_rng(3)).items():
        np.testing.assert_array_equal(resumed.sample(8, 20, np.random.default_rng(3))[key], value)
    # New episodes continue the numbering and never overwrite an existing file.
    path = resumed.add(make_episode(4, 9))
    assert os.path.basename(path) == "000004-9.npz"
    assert len(os.listdir(tmp_path)) == 5
    # The resumed replay enforces the schema of the loaded episodes.
    with pytest.raises(ValueError, match="'state'"):
        resumed.add({**make_episode(5, 9), "state": np.zeros((9, 3), np.float32)})


def test_max_episodes_keeps_newest_in_memory_and_all_files(tmp_path):
    replay = EpisodeReplay(tmp_path, max_episodes=2)
    for episode_id in range(5):
        replay.add(make_episode(episode_id, 10 + episode_id))
    assert replay.num_episodes == 2
    assert replay.num_steps == 12 + 13
    assert [ep["state"][0, 0] for ep in replay.episodes()] == [3, 4]
    ids = replay.sample(200, 5, np.random.default_rng(0))["state"][:, 0, 0]
    assert set(ids.tolist()) == {3.0, 4.0}
    assert len(os.listdir(tmp_path)) == 5  # Files stay on disk.
    resumed = EpisodeReplay(tmp_path, max_episodes=3)
    assert [ep["state"][0, 0] for ep in resumed.episodes()] == [2, 3, 4]
    assert os.path.basename(resumed.add(make_episode(5, 10))) == "000005-10.npz"
    assert EpisodeReplay(tmp_path).num_episodes == 6
    for bad in [0, -1, 2.5, True, "3"]:
        with pytest.raises(ValueError, match=f"max_episodes={bad!r}"):
            EpisodeReplay(tmp_path, max_episodes=bad)


def test_episodes_are_read_only_copies_of_the_input(tmp_path):
    replay = EpisodeReplay(tmp_path)
    episode = make_episode(0, 6)
    replay.add(episode)
    episode["state"][:] = -1.0  # The caller reuses its buffers: the replay is unaffected.
    stored = replay.episodes()[0]
    np.testing.assert_array_equal(stored["state"], make_episode(0, 6)["state"])
    with pytest.raises(ValueError, match="read-only"):
        stored["state"][0, 0] = 5.0
    stored["extra"] = np.zeros(6)  # Mutating the returned dict does not change the replay.
    assert "extra" not in replay.episodes()[0]
    batch = replay.sample(2, 3, np.random.default_rng(0))
    batch["state"][:] = 7.0  # Samples are copies.
    np.testing.assert_array_equal(replay.episodes()[0]["state"], make_episode(0, 6)["state"])


def test_any_key_name_and_array_likes(tmp_path):
    replay = EpisodeReplay(tmp_path)
    # 'file' would collide with np.savez_compressed's own argument name.
    replay.add({"file": [[1.0], [2.0], [3.0]], "done": np.array([False, False, True])})
    (episode,) = EpisodeReplay(tmp_path).episodes()
    np.testing.assert_array_equal(episode["file"], [[1.0], [2.0], [3.0]])
    assert episode["done"].dtype == np.bool_


@pytest.mark.parametrize(
    "episode, message",
    [
        ([np.zeros(3)], "dict of arrays. Received: episode of type list"),
        ({}, "at least one key. Received: an empty dict"),
        ({"reward": np.zeros(1)}, "at least 2 steps.*length 1"),
        ({"reward": np.zeros(5), "action": np.zeros((4, 2))}, "same length.*'action': 4"),
        ({"reward": np.array([0.0, np.nan, 1.0])}, "NaN or inf in episode\\['reward'\\]"),
        ({"physics": np.array([[0.0], [np.inf]])}, "NaN or inf in episode\\['physics'\\]"),
        ({"reward": np.float32(1.0)}, "episode\\['reward'\\] to have a time axis"),
        ({"name": np.array(["a", "b"])}, "episode\\['name'\\].*dtype=<U1"),
        ({"reward": [[0.0], [1.0, 2.0]]}, "convert episode\\['reward'\\]"),
        ({3: np.zeros(3)}, "key=3"),
        ({"a/b": np.zeros(3)}, "key='a/b'"),
    ],
)
def test_invalid_episodes_raise_clear_errors(tmp_path, episode, message):
    replay = EpisodeReplay(tmp_path)
    with pytest.raises(ValueError, match=message):
        replay.add(episode)
    assert os.listdir(tmp_path) == []  # Nothing written.
    assert replay.num_episodes == 0


def test_episodes_must_match_the_first(tmp_path):
    replay = EpisodeReplay(tmp_path)
    replay.add(make_episode(0, 5))
    bad_shape = {**make_episode(1, 5), "image": np.zeros((5, 8, 8, 3), np.uint8)}
    with pytest.raises(ValueError, match=r"episode\['image'\].*\(5, 4, 4, 3\).*\(5, 8, 8, 3\)"):
        replay.add(bad_shape)
    bad_dtype = {**make_episode(1, 5), "reward": np.zeros(5, np.float64)}
    with pytest.raises(ValueError, match=r"episode\['reward'\] with dtype float32.*float64"):
        replay.add(bad_dtype)
    missing = make_episode(1, 5)
    del missing["physics"]
    with pytest.raises(ValueError, match=r"missing keys \['physics'\], unexpected keys \[\]"):
        replay.add(missing)
    extra = {**make_episode(1, 5), "done": np.zeros(5, bool)}
    with pytest.raises(ValueError, match=r"missing keys \[\], unexpected keys \['done'\]"):
        replay.add(extra)
    assert replay.num_episodes == 1 and len(os.listdir(tmp_path)) == 1
    replay.add(make_episode(1, 7))  # A different length is fine.
    assert replay.num_episodes == 2


def test_sample_argument_errors(tmp_path):
    replay = EpisodeReplay(tmp_path)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="empty replay"):
        replay.sample(2, 2, rng)
    replay.add(make_episode(0, 30))
    replay.add(make_episode(1, 51))
    with pytest.raises(ValueError, match="length=52: the longest of the 2 episodes .* 51 steps"):
        replay.sample(4, 52, rng)
    for batch_size, length, received in [
        (0, 5, "batch_size=0"),
        (-3, 5, "batch_size=-3"),
        (2.0, 5, "batch_size=2.0"),
        (True, 5, "batch_size=True"),
        (2, 0, "length=0"),
        (2, "5", "length='5'"),
    ]:
        message = re.escape(f"Expected a positive integer. Received: {received}")
        with pytest.raises(ValueError, match=message):
            replay.sample(batch_size, length, rng)
    with pytest.raises(TypeError, match="np.random.Generator"):
        replay.sample(2, 5, np.random.RandomState(0))
    batch = replay.sample(np.int64(3), np.int32(51), rng)  # Numpy integers are fine.
    assert batch["state"].shape == (3, 51, 2)
    np.testing.assert_array_equal(batch["state"][:, :, 0], 1.0)  # Only episode 1 fits.


def test_load_removes_stale_temp_files_and_rejects_damaged_files(tmp_path):
    replay = EpisodeReplay(tmp_path)
    replay.add(make_episode(0, 5))
    # A partial write of a dead process: a truncated copy of a valid file under a temp name.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    data = open(tmp_path / "000000-5.npz", "rb").read()
    stale = tmp_path / f".000001-5.npz.tmp.{dead.pid}"
    stale.write_bytes(data[: len(data) // 2])
    live = tmp_path / f".000001-5.npz.tmp.{os.getppid()}"  # A writer that is still running.
    live.write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("unrelated files are ignored")
    resumed = EpisodeReplay(tmp_path)
    assert resumed.num_episodes == 1
    assert not stale.exists()
    assert live.exists()
    assert (tmp_path / "notes.txt").exists()
    # A damaged episode file (not produced by EpisodeReplay) is reported, not silently skipped.
    (tmp_path / "000001-5.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="Could not read the episode file .*000001-5.npz"):
        EpisodeReplay(tmp_path)
    # So is a lost one: episodes are numbered without gaps (issue #29).
    (tmp_path / "000001-5.npz").unlink()
    (tmp_path / "000003-5.npz").write_bytes(data)
    with pytest.raises(ValueError, match=r"lacks the files of episodes 1, 2 \(of 0\.\.3\): the "
                                         r"episode store is damaged"):
        EpisodeReplay(tmp_path)


_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from bayes_planet.agent.replay import EpisodeReplay

    replay = EpisodeReplay(sys.argv[1])
    index = replay.num_episodes
    while True:
        rng = np.random.default_rng(index)
        steps = 40 + index % 7
        replay.add({
            # Incompressible data so that writes take a while and a kill often lands mid-write.
            "image": rng.integers(0, 256, (steps, 32, 32, 3), dtype=np.uint8),
            "state": np.full((steps, 2), index, np.float32),
            "reward": rng.standard_normal(steps).astype(np.float32),
        })
        index += 1
    """
)


def expected_writer_episode(index):
    rng = np.random.default_rng(index)
    steps = 40 + index % 7
    return {
        "image": rng.integers(0, 256, (steps, 32, 32, 3), dtype=np.uint8),
        "state": np.full((steps, 2), index, np.float32),
        "reward": rng.standard_normal(steps).astype(np.float32),
    }


def run_writer_and_kill(directory, min_episodes):
    """Starts a process adding episodes to ``directory``; SIGKILLs it once enough are written."""
    process = subprocess.Popen([sys.executable, "-c", _WRITER, str(directory)])
    try:
        deadline = time.monotonic() + 60
        while True:
            names = os.listdir(directory) if os.path.isdir(directory) else []
            complete = [name for name in names if name.endswith(".npz")]
            writing = any(".tmp." in name for name in names)
            if len(complete) >= min_episodes and writing:
                break
            assert process.poll() is None, "the writer process died on its own"
            assert time.monotonic() < deadline, "the writer process wrote too slowly"
            time.sleep(0.001)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL


def test_sigkill_during_writes_keeps_complete_episodes(tmp_path):
    directory = tmp_path / "episodes"
    run_writer_and_kill(directory, min_episodes=3)
    complete_files = sorted(name for name in os.listdir(directory) if name.endswith(".npz"))
    replay = EpisodeReplay(directory)  # Must not raise.
    assert replay.num_episodes == len(complete_files) >= 3
    assert complete_files == [f"{i:06d}-{40 + i % 7}.npz" for i in range(len(complete_files))]
    assert_episodes_equal(
        replay.episodes(), [expected_writer_episode(i) for i in range(len(complete_files))]
    )
    assert not [name for name in os.listdir(directory) if ".tmp." in name]  # Cleaned up.
    # The run resumes: a second writer continues the numbering, and is killed as well.
    run_writer_and_kill(directory, min_episodes=len(complete_files) + 2)
    resumed = EpisodeReplay(directory)
    assert resumed.num_episodes >= len(complete_files) + 2
    assert_episodes_equal(
        resumed.episodes(), [expected_writer_episode(i) for i in range(resumed.num_episodes)]
    )
    batch = resumed.sample(8, 40, np.random.default_rng(0))
    assert batch["image"].shape == (8, 40, 32, 32, 3)


def test_sample_from_the_oldest_episodes_only(tmp_path):
    """``num_episodes=k`` redoes an update as it was drawn when only k episodes existed."""
    replay = EpisodeReplay(tmp_path)
    replay.add(make_episode(0, 10))
    replay.add(make_episode(1, 10))
    early = replay.sample(16, 4, np.random.default_rng(3))
    replay.add(make_episode(2, 10))
    again = replay.sample(16, 4, np.random.default_rng(3), num_episodes=2)
    for key in early:
        np.testing.assert_array_equal(early[key], again[key])
    only_first = replay.sample(64, 4, np.random.default_rng(4), num_episodes=1)
    np.testing.assert_array_equal(only_first["state"][..., 0], 0)  # Episode id 0 only.
    with pytest.raises(ValueError, match="num_episodes=4"):
        replay.sample(2, 4, np.random.default_rng(0), num_episodes=4)


def test_a_reader_until_n_reads_the_first_n_episodes(tmp_path):
    """``until``: the data a run had when it wrote checkpoint ``until`` (a reader at it)."""
    replay = EpisodeReplay(tmp_path)
    for episode_id in range(4):
        replay.add(make_episode(episode_id, 6 + episode_id))
    reader = EpisodeReplay(tmp_path, read_only=True, until=2)
    assert [ep["state"][0, 0] for ep in reader.episodes()] == [0, 1]
    assert reader.num_steps == 5 + 6
    both = EpisodeReplay(tmp_path, read_only=True, until=3, max_episodes=1)
    assert [ep["state"][0, 0] for ep in both.episodes()] == [2]
    assert EpisodeReplay(tmp_path, read_only=True, until=4).num_episodes == 4
    with pytest.raises(ValueError, match=r"^Expected until <= 4, the episodes in .*"
                                         r"Received: until=5$"):
        EpisodeReplay(tmp_path, read_only=True, until=5)
    with pytest.raises(ValueError, match=r"for a writer .* Received: until=2$"):
        EpisodeReplay(tmp_path, until=2)
    for bad in [0, -1, 2.5, True]:
        with pytest.raises(ValueError, match=f"until={bad!r}"):
            EpisodeReplay(tmp_path, read_only=True, until=bad)


def test_read_only_replay_writes_and_deletes_nothing(tmp_path):
    replay = EpisodeReplay(tmp_path)
    replay.add(make_episode(0, 5))
    stale = tmp_path / ".000001-5.npz.tmp.999999999"
    stale.write_bytes(b"x")
    reader = EpisodeReplay(tmp_path, read_only=True)
    assert reader.num_episodes == 1 and stale.exists()
    with pytest.raises(ValueError, match="read-only"):
        reader.add(make_episode(1, 5))
    with pytest.raises(ValueError, match="does not exist"):
        EpisodeReplay(tmp_path / "missing", read_only=True)
    assert not (tmp_path / "missing").exists()


def test_a_collected_episode_holds_every_transition_and_the_final_reward(tmp_path):
    """The recorder stores o_0 and, per transition, a_t, r_{t+1}, o_{t+1}: an episode of
    ``episode_length / action_repeat`` decisions has that many transitions, its return is the
    environment's, and the collection ends without planning past the last step."""
    import numpy as np

    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.training import Trainer

    config = config_lib.load(["debug"], ["eval.video=false", "train.episodes=2"])
    trainer = Trainer(config, tmp_path / "run")
    collector = trainer.agent.collector
    calls = []
    env_step = collector.env.step

    def counting_step(action):
        calls.append(1)
        return env_step(action)

    collector.env.step = counting_step
    episode, _ = collector.collect(collector.policy("random", 0), "env_reset", 0)
    decisions = config.env.episode_length // collector.env.action_repeat
    assert len(calls) == decisions  # No extra step (reset) after the last one.
    assert len(episode["obs"]) == len(episode["action"]) == decisions + 1
    assert episode["reward"][0] == 0 and np.all(episode["action"][0] == 0)
    assert len(episode["physics"]) == decisions + 1
    # The final observation's physics state is the environment's state after the last step.
    np.testing.assert_allclose(episode["physics"][-1][:collector.env.physics.model.nq],
                               collector.env.physics.data.qpos)
    trainer.agent.close()
