"""The planning problem of the planner tests (not collected by pytest): a quadratic objective
over PlaNet's horizon and a 2-D action, with seeded targets."""

import numpy as np
import tensorflow as tf

H, A = 12, 2  # PlaNet's horizon; a 2-D action.


def quadratic(target):
    """Objective with maximum 0 at ``target`` ``[..., H, A]`` (broadcast over candidates)."""
    target = tf.constant(target, tf.float32)

    def objective(actions):  # [..., N, H, A] -> [..., N]
        return -tf.reduce_sum((actions - target[..., None, :, :]) ** 2, axis=[-2, -1])

    return objective


def targets(seed, shape=(H, A), bound=0.8):
    """A seeded uniform target in ``[-bound, bound]``."""
    return np.random.default_rng(seed).uniform(-bound, bound, shape).astype(np.float32)
