"""What the env tests share (not collected by pytest): a short episode length and seeded
random actions."""

import numpy as np

# A short episode keeps pixel tests fast (rendering is the slow part on CPU).
SHORT = 32


def random_actions(env, count, seed=0):
    """``count`` actions drawn uniformly from ``env``'s action spec (seeded)."""
    spec = env.action_spec()
    rng = np.random.default_rng(seed)
    return rng.uniform(spec.minimum, spec.maximum, size=(count,) + spec.shape).astype(np.float32)
