"""Initial values of multi-weight layers (issue #29): every weight gets its own draw, seeded.

Keras initializers return the same values on every call (seeded ones by design, unseeded
ones after their first call), so a layer that hands one initializer to several weights of
equal shape started them identical (MADE's hidden kernels; the attention projections under
a seeded initializer). `initializers.for_weight` gives each weight its own instance: a
seeded initializer gets a named stream per weight, an unseeded one a fresh draw from
Keras' global seed. The contract harness (`run_layer_test`) checks every layer test for
equal initial weights; the tests below cover each multi-weight family under seeded and
unseeded initializers, and that the draws are reproducible.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers import initializers
from bayes_planet.layers.testing import check_distinct_initial_weights, submodules
from tests.layers import _layer_cases as cases_lib

SEEDED = {
    "keras": lambda: keras.initializers.GlorotUniform(seed=7),
    "trainable_normal": lambda: bl.TrainableNormal(seed=7),
}


def _attention(cls):
    def make(init):
        kwargs = {} if init is None else {"kernel_initializer": init}
        return cls(num_heads=2, key_dim=4, seed=3, **kwargs), lambda layer: layer(
            tf.ones([2, 5, 8]), tf.ones([2, 5, 8]))
    return make


def _made(init):
    kwargs = {} if init is None else {"kernel_initializer": init}
    return bl.MADE([8, 8, 8], **kwargs), lambda layer: layer(tf.ones([2, 4]))


# family: (layer factory, the seeded initializers it takes: posteriors only for Bayesian layers)
FAMILIES = {
    "MADE": (_made, ["keras"]),
    "MultiHeadAttentionFlipout": (_attention(bl.MultiHeadAttentionFlipout), sorted(SEEDED)),
    "MultiHeadAttentionReparameterization": (_attention(bl.MultiHeadAttentionReparameterization),
                                             sorted(SEEDED)),
}
CASES = [(family, init) for family, (_, inits) in sorted(FAMILIES.items())
         for init in [None, *inits]]


def _weights(make, init, global_seed=0):
    keras.utils.set_random_seed(global_seed)
    layer, call = make(init)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*unseeded and being called multiple times")
        call(layer)
    return layer, [np.asarray(w) for w in layer.weights]


@pytest.mark.parametrize(("family", "init"), CASES)
def test_each_weight_of_a_multi_weight_layer_gets_its_own_draw(family, init):
    make = FAMILIES[family][0]
    layer, first = _weights(make, None if init is None else SEEDED[init]())
    check_distinct_initial_weights(layer)
    # Reproducible: a seeded initializer ignores the global seed; an unseeded one follows it.
    _, again = _weights(make, None if init is None else SEEDED[init](), global_seed=0)
    _, other = _weights(make, None if init is None else SEEDED[init](), global_seed=1)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    varying = [(a, b) for a, b in zip(first, other, strict=True) if np.ptp(a) > 0]
    assert varying
    same = all(np.array_equal(a, b) for a, b in varying)
    assert same == (init is not None), "seeded draws must not depend on the global seed"


@pytest.mark.parametrize("name", cases_lib.case_names())
def test_every_layer_family_starts_with_distinct_weights(name):
    """Each family's small model (the strategy tests' cases): no two weights start equal."""
    case = cases_lib.case(name)
    x, _ = cases_lib.data(case.x_shape, case.y_shape, case.y_kind)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*unseeded and being called multiple times")
        model = cases_lib.model(case)
        model(x)
    for layer in submodules(model):
        if isinstance(layer, keras.layers.Layer) and layer.weights:
            allowed = [("codebook", "ema_sum")] if isinstance(layer, bl.VectorQuantizer) else ()
            check_distinct_initial_weights(layer, allowed)


def test_a_seeded_trainable_normal_seeds_its_means_and_stddevs_with_separate_streams():
    def params(seed, global_seed):
        keras.utils.set_random_seed(global_seed)
        init = bl.TrainableNormal(seed=seed)
        init.build([6, 6])
        return np.asarray(init.mean), np.asarray(init.raw_stddev)

    mean, stddev = params(4, 0)
    for a, b in zip((mean, stddev), params(4, 1), strict=True):
        np.testing.assert_array_equal(a, b)  # The seed, not the global seed, decides.
    assert not np.array_equal(mean, params(5, 0)[0])
    # Means (Glorot uniform) and log-stddevs (truncated normal) come from different streams:
    # the same stream would make them deterministic functions of the same uniforms.
    ranks = lambda v: np.argsort(np.argsort(v.ravel()))  # noqa: E731
    assert abs(np.corrcoef(ranks(mean), ranks(stddev))[0, 1]) < 0.5


def test_for_weight_clones_and_derives_seeds_by_weight_name():
    seeded = keras.initializers.RandomNormal(seed=3)
    a, b = initializers.for_weight(seeded, "a"), initializers.for_weight(seeded, "b")
    assert a is not seeded and a.seed != b.seed and a.seed == initializers.for_weight(seeded, "a").seed
    assert initializers.for_weight("zeros", "a").get_config() == {}
    assert initializers.for_weight("glorot_uniform", "a").get_config()["seed"] is None
    with pytest.raises(TypeError, match="weight 'k'"):
        initializers.for_weight(lambda shape, dtype=None: tf.zeros(shape), "k")
