"""Named random streams: every random number of a run derives from (config seed, name, indices).

A stream is identified by a name (``"env_reset"``, ``"replay"``, ...) and integer indices (an
episode number, an update number, ...). The same ``(seed, name, indices)`` always gives the same
numbers, in any process, so a resumed run draws exactly what an uninterrupted run draws: episode
``k`` starts from the same initial state and update ``u`` samples the same chunks whichever
process performs them. Different names or indices give independent streams (a SHA-256 of the
whole key).

The streams a run uses (`bayes_planet.agent.Agent`, `bayes_planet.agent.collection.Collector`,
`bayes_planet.agent.training.Trainer`; ``w`` is the worker, 0 without multi-worker training)::

    weights                         initial weights (Keras' global seed, set before building)
    value_weights                   the value model's initial weights (``value.enabled``)
    layer_noise(layer)              each Bayesian transition layer's noise seed
                                    (`bayes_planet.agent.rssm`; ``layer`` from `name_index`)
    layer_counter(k)                the layers' call counters at the start of episode k
    env_reset(w, k)                 initial state of training episode k
    random_policy(w, k)             actions of seed episode k
    collect_policy(w, k)            planner and exploration noise of training episode k
    replay(u), train_step(u)        chunks, and latent/weight/dequantization noise, of update u
    value_step(u)                   the value model's imagined rollouts of update u (and,
                                    folded in, the second weight sample of value.novelty)
    eval_env_reset(w, k, i)         evaluation i after k episodes (eval_policy(w, k, i))
    open_loop(k)                    open-loop video after k episodes
    cli_eval_env(w, i)              `bayes-planet eval` episode i (cli_eval_policy(w, i))
    cli_export_policy(w)            where the seed stream of `bayes-planet export`'s policy starts

`bayes-planet probe --seed s` draws from streams of its own seed ``s`` (not the run's)::

    probe_train_env(w, i), probe_train_policy(w, i)   fresh probe training episode i
    probe_test_env(w, i), probe_test_policy(w, i)     held-out probe test episode i
    probe_latent(part, i, loop)     latent/weight noise encoding episode i of part 0 (train),
                                    1 (test) or 2 (plot), closed (loop 0) or open loop (1)
    probe_shared_weights            the one weight sample of ``--weights shared``
    probe_mlp                       the MLP probe's ``random_state``

Example::

    rng = seeds.numpy_rng(config.seed, "replay", update)      # np.random.Generator
    seed = seeds.tf_seed(config.seed, "train_step", update)   # stateless [2] int32 tensor
    env.seed(seeds.int_seed(config.seed, "env_reset", 0, episode))

The two other conversions of the package live here too: `stateless_seed`, an int (or a ``[2]``
tensor) as a stateless seed tensor, in the layout its caller names, and `crc32_seed`, the
sublayer seeds of the attention layers and the Transformer.
"""

import hashlib
import numbers
import zlib

import numpy as np

__all__ = ["crc32_seed", "int_seed", "name_index", "numpy_rng", "pair", "stateless_seed", "tf_seed"]

_MAX = 2**31 - 1


def _key(seed, name, indices):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"Expected a non-negative integer. Received: seed={seed!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"Expected a stream name (non-empty string). Received: name={name!r}")
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise ValueError(f"Expected integer stream indices. Received: {name}{indices!r}")
    text = f"{int(seed)}/{name}/" + "/".join(str(int(i)) for i in indices)
    return hashlib.sha256(text.encode()).digest()


def pair(seed, name, *indices):
    """Two 31-bit non-negative ints identifying the stream (a stateless TF seed)."""
    digest = _key(seed, name, indices)
    return (int.from_bytes(digest[:4], "little") & _MAX,
            int.from_bytes(digest[4:8], "little") & _MAX)


def int_seed(seed, name, *indices):
    """One 31-bit non-negative int for APIs that take an int seed (environments, Keras)."""
    return pair(seed, name, *indices)[0]


def name_index(name):
    """A stable 31-bit non-negative int for a string (a stream index for a name, e.g. a
    layer's): the first bytes of its SHA-256, so different names (anagrams too) differ."""
    if not isinstance(name, str):
        raise ValueError(f"Expected a string. Received: name={name!r}")
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:4], "little") & _MAX


def numpy_rng(seed, name, *indices):
    """A fresh ``np.random.Generator`` (PCG64) for the stream."""
    digest = _key(seed, name, indices)
    return np.random.default_rng([int.from_bytes(digest[i:i + 4], "little")
                                  for i in range(0, 16, 4)])


def tf_seed(seed, name, *indices):
    """A stateless ``[2]`` int32 seed tensor for ``tf.random.stateless_*`` ops."""
    import tensorflow as tf

    return tf.constant(pair(seed, name, *indices), tf.int32)


def stateless_seed(seed, int_first=False, dtype=None):
    """A stateless ``[2]`` seed tensor for ``tf.random.stateless_*`` ops from an int, a ``[2]``
    integer tensor or None (a fresh random seed); a one-line `ValueError` for anything else.

    An int ``s`` fills the pair in one of two layouts, and a seed's numbers depend on its layout
    and dtype, so each caller names its own:

    * by default ``[s >> 31, s & (2**31 - 1)]`` as int64, for any ``0 <= s < 2**63``
      (``5`` -> ``[0, 5]``): the planners (`bayes_planet.planners`);
    * ``int_first=True``: ``[s, 0]``, for ``0 <= s < 2**31`` (``5`` -> ``[5, 0]``): the agent's
      planner policy (`bayes_planet.agent.policy`, with ``dtype=tf.int32``).

    A tensor keeps int32 or int64 (other integer dtypes become int64); ``dtype`` casts the
    result.
    """
    import tensorflow as tf

    if seed is None:
        tensor = tf.random.uniform([2], maxval=tf.int32.max, dtype=tf.int32)
    elif isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        if not 0 <= seed < (2**31 if int_first else 2**63):
            raise ValueError(f"Expected a non-negative integer seed. Received: seed={seed!r}")
        pair = [int(seed), 0] if int_first else [int(seed) >> 31, int(seed) & _MAX]
        tensor = tf.constant(pair, tf.int64)
    elif isinstance(seed, (bool, float)):
        raise ValueError(f"Expected an int or a shape-[2] integer tensor. Received: seed={seed!r}")
    else:
        tensor = tf.convert_to_tensor(seed)
        if not tensor.dtype.is_integer or not tensor.shape.is_compatible_with([2]):
            raise ValueError("Expected an int or a shape-[2] integer tensor. Received: seed "
                             f"with dtype {tensor.dtype.name} and shape {tensor.shape}")
        if tensor.dtype not in (tf.int32, tf.int64):
            tensor = tf.cast(tensor, tf.int64)
        tensor = tf.ensure_shape(tensor, [2])
    return tensor if dtype is None else tf.cast(tensor, dtype)


def crc32_seed(seed, name):
    """The int seed of ``name`` under an int ``seed`` by CRC-32 of ``"<seed>/<name>"`` (None for
    None): the sublayer seeds of the attention layers and of the Transformer, kept in this
    convention so that their seeded weights stay what they are (`int_seed` is the SHA-256
    stream seed of everything else)."""
    return None if seed is None else zlib.crc32(f"{seed}/{name}".encode()) % (2**31 - 1)
