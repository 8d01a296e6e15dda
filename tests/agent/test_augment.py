"""``train.random_shift``: DrQ's random shift of the pixel chunks, one offset per chunk.

Checked against an explicit pad-with-edge-and-crop in NumPy, its offsets' distribution
(chi-squared against the uniform on {0, ..., 2 pad}², fixed seed), its reproducibility from
the seed, and the world model's loss, which it changes only when it is on."""

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.agent import config as config_lib
from bayes_planet.agent.augment import random_shift
from bayes_planet.agent.world_model import WorldModel
from tests.agent.conftest import debug_config


def _images(b=6, t=3, size=12, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (b, t, size, size, 3), dtype=np.uint8)


def _offset(shifted, images, pad):
    """The ``(dy, dx)`` in {0..2 pad}² at which padding ``images`` [T, H, W, C] by its edge
    and cropping gives ``shifted``, or None."""
    size = images.shape[1]
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    found = [(dy, dx) for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)
             if np.array_equal(padded[:, dy:dy + size, dx:dx + size], shifted)]
    return found[0] if found else None


def test_equals_padding_with_the_edge_and_cropping_one_offset_per_chunk():
    images, pad = _images(b=16), 3
    shifted = random_shift(tf.constant(images), pad, tf.constant([1, 2])).numpy()
    assert shifted.dtype == np.uint8 and shifted.shape == images.shape
    offsets = [_offset(shifted[i], images[i], pad) for i in range(len(images))]
    # Every chunk is one crop of its padded frames (all frames at the same offset).
    assert None not in offsets
    assert len(set(offsets)) > 1  # ... and the chunks do not all share it.


def test_offsets_are_uniform_over_the_padded_window():
    pad, n = 2, 5000
    # One-frame chunks of a 12x12 image whose pixels are their own coordinates: the
    # shifted image's centre pixel reads off the offset.
    coords = np.stack(np.meshgrid(np.arange(12), np.arange(12), indexing="ij"), -1)
    images = np.broadcast_to(coords, (n, 1, 12, 12, 2)).astype(np.int32)
    centre = random_shift(tf.constant(images), pad, tf.constant([7, 0])).numpy()[:, 0, 6, 6]
    cells = (centre[:, 0] - 6 + pad) * (2 * pad + 1) + (centre[:, 1] - 6 + pad)
    counts = np.bincount(cells, minlength=(2 * pad + 1) ** 2)
    assert counts.shape == (25,)
    expected = n / 25
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 24 degrees of freedom: P(chi2 > 51.2) = 0.001.
    assert chi2 < 51.2, counts


def test_same_seed_same_shift_and_zero_is_the_identity():
    images = tf.constant(_images())
    a = random_shift(images, 2, tf.constant([3, 4])).numpy()
    np.testing.assert_array_equal(a, random_shift(images, 2, tf.constant([3, 4])).numpy())
    assert not np.array_equal(a, random_shift(images, 2, tf.constant([3, 5])).numpy())
    assert random_shift(images, 0, tf.constant([3, 4])) is images


@pytest.mark.parametrize("pad", [-1, 1.5, True])
def test_pad_must_be_a_non_negative_integer(pad):
    with pytest.raises(ValueError, match=f"Expected a non-negative integer. Received: pad={pad!r}"):
        random_shift(tf.constant(_images()), pad, tf.constant([0, 0]))


def test_the_world_model_trains_on_shifted_chunks_only_when_asked():
    batch = {"obs": tf.constant(_images(b=2, t=8, size=64)),
             "action": tf.constant(np.zeros((2, 8, 1)), tf.float32),
             "reward": tf.constant(np.zeros((2, 8)), tf.float32)}
    seed = tf.constant([0, 9])
    plain = WorldModel(debug_config("obs_type=pixels"), (64, 64, 3), 1)
    shifted = WorldModel(debug_config("obs_type=pixels", "train.random_shift=4"), (64, 64, 3), 1)
    for a, b in zip(plain.trainable_variables, shifted.trainable_variables, strict=True):
        b.assign(a)
    loss0, m0 = plain.loss(batch, seed, 100)
    loss1, m1 = shifted.loss(batch, seed, 100)
    # Random images: a shifted chunk is another input and another reconstruction target.
    assert float(m0["obs_nll"]) != pytest.approx(float(m1["obs_nll"]), rel=1e-6)
    # It is the unshifted model's loss of the chunk shifted beforehand (the shift's seed is
    # folded from the loss's: the dequantization and transition noise stay the same).
    noise_seed = tf.random.experimental.stateless_split(seed, 2)[0]
    moved = dict(batch, obs=random_shift(batch["obs"], 4,
                                         tf.random.experimental.stateless_fold_in(noise_seed, 1)))
    np.testing.assert_allclose(float(plain.loss(moved, seed, 100)[0]), float(loss1), rtol=1e-6)


@pytest.mark.parametrize("sets, expected", [
    (["train.random_shift=-1"], "Expected a non-negative integer. Received: train.random_shift=-1"),
    (["train.random_shift=4"], "Expected 0 unless obs_type='pixels'"),
    (["obs_type=pixels", "train.random_shift=32"],
     "Expected less than half of env.image_size=64. Received: train.random_shift=32"),
])
def test_random_shift_is_range_checked(sets, expected):
    with pytest.raises(config_lib.ConfigError) as info:
        config_lib.validate(config_lib.load(["debug"], sets))
    assert expected in str(info.value)


def test_runs_recorded_without_the_key_train_unshifted():
    data = config_lib.load().to_dict()
    del data["train"]["random_shift"]
    assert config_lib.upgrade(data)["train"]["random_shift"] == 0
