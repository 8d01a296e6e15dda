"""Image augmentation of the world model's training chunks (``train.random_shift``).

`random_shift` is DrQ's random shift (Kostrikov et al., 2020: pad by ``pad`` pixels with the
edge replicated, crop back to the original size at a random offset), drawn once per chunk:
every frame of a sequence moves by the same offset, as a camera displaced for a whole
episode would, so the transition never has to predict a shift. The encoder, the decoder's
target and every learner that starts from the chunk's posterior states (the critic and the
policy) see the shifted chunk; acting and evaluation see the images as they are.
"""

import tensorflow as tf

from bayes_planet.layers.noise import per_example

__all__ = ["random_shift"]


def random_shift(images, pad, seed):
    """``images`` ``[B, ..., H, W, C]`` shifted by up to ``pad`` pixels each way, one offset
    per row of axis 0 (the chunk); the pixels that enter at the border repeat the edge.

    Equals padding every image by ``pad`` with its edge values and cropping ``H x W`` at
    the offset ``(dy, dx)``, each uniform on ``{0, ..., 2 pad}`` (``pad, pad`` is the image
    itself), drawn from ``seed`` (stateless; replica-aware, `per_example`). Implemented as two
    gathers of clipped indices, without building the padded image. ``pad = 0`` returns
    ``images``. Any dtype (raw ``uint8`` frames).
    """
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise ValueError(f"Expected a non-negative integer. Received: pad={pad!r}")
    images = tf.convert_to_tensor(images)
    if pad == 0:
        return images
    rank = images.shape.rank
    if rank is None or rank < 4:
        raise ValueError("Expected images of shape [B, ..., H, W, C]. Received: shape="
                         f"{images.shape}")
    height, width = images.shape[-3], images.shape[-2]
    offsets = per_example(
        lambda shape, s: tf.random.stateless_uniform(shape, s, 0, 2 * pad + 1, tf.int32),
        tf.stack([tf.shape(images)[0], 2]), seed) - pad
    rows = tf.clip_by_value(tf.range(height)[None] + offsets[:, :1], 0, height - 1)
    cols = tf.clip_by_value(tf.range(width)[None] + offsets[:, 1:], 0, width - 1)
    shifted = tf.gather(images, rows, axis=rank - 3, batch_dims=1)
    return tf.gather(shifted, cols, axis=rank - 2, batch_dims=1)
