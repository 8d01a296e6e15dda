"""Normalizing flows (`bayes_planet.layers.flows`): inverses, log-determinants against autodiff
Jacobians, densities that integrate to one, MADE's autoregressive order; the contract of every
reversible layer, RevNet's too (RevNet's gradients and memory: test_revnet.py)."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import KERAS3, keras
from bayes_planet.layers.flows import MADE, ActNorm, Permutation, RealNVP, Reverse
from bayes_planet.layers.random_variable import RandomVariable
from bayes_planet.layers.revnet import RevNetBlock, RevNetSequence
from bayes_planet.layers.testing import normal_array, run_layer_test

tfd = tfp.distributions


def _randomize(layer, scale=0.5, seed=0):
    """Non-trivial weights (RealNVP's default network starts as the identity)."""
    rng = np.random.default_rng(seed)
    for v in layer.trainable_variables:
        v.assign(scale * rng.standard_normal(v.shape).astype("float32"))
    return layer


@pytest.mark.parametrize("cls, kwargs, out_shape", [
    (Permutation, {"order": "random"}, (4, 6)),
    (ActNorm, {}, (4, 6)),
    (MADE, {"hidden_dims": [8, 8], "order": "random"}, (4, 6, 2)),
    (RealNVP, {"network": [8]}, (4, 6)),
    (RealNVP, {"network": MADE([8], seed=1), "mask": "checkerboard"}, (4, 6)),
    (Reverse, {"layer": RealNVP([8], reverse_mask=True)}, (4, 6)),
    (RevNetBlock, {"hidden_units": 8}, (4, 6)),
    (RevNetSequence, {"num_blocks": 2, "hidden_units": 8}, (4, 6)),
])
def test_contract(cls, kwargs, out_shape):
    run_layer_test(cls, kwargs, (4, 6), expected_output_shape=out_shape)


def _flows(dim):
    return {
        "permutation": Permutation("random", seed=3),
        "actnorm": ActNorm(),
        "realnvp_half": RealNVP([16]),
        "realnvp_made": RealNVP(MADE([16], seed=0), mask="checkerboard", reverse_mask=True),
        "reverse_realnvp": Reverse(RealNVP([16])),
        "revnet_block": RevNetBlock(hidden_units=16),
        "revnet_sequence": RevNetSequence(num_blocks=3, hidden_units=16),
    }


def _built(name, dim=4, seed=0):
    layer = _flows(dim)[name]
    x = normal_array(16, dim, seed=seed) * 2.0 + 1.0
    layer(x)  # builds (and data-initializes ActNorm)
    return _randomize(layer, seed=seed), x


@pytest.mark.parametrize("name", list(_flows(4)))
def test_reverse_inverts_call(name):
    layer, x = _built(name)
    y = layer(x)
    np.testing.assert_allclose(layer.reverse(y), x, atol=1e-5)
    np.testing.assert_allclose(layer(layer.reverse(x)), x, atol=1e-5)


@pytest.mark.parametrize("name", list(_flows(4)))
def test_log_det_jacobian_matches_autodiff(name):
    layer, x = _built(name)
    x = tf.constant(x[:5])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
    jac = tape.batch_jacobian(y, x).numpy().astype(np.float64)
    _, ref = np.linalg.slogdet(jac)
    np.testing.assert_allclose(layer.log_det_jacobian(x), ref, atol=1e-4)


def test_sequential_flow_density_integrates_to_one_on_a_grid():
    flow = keras.Sequential([ActNorm(), RealNVP([16]), Permutation("reverse"),
                             RealNVP(MADE([16], seed=1)), RealNVP([16], reverse_mask=True)])
    flow.build((None, 2))
    data = normal_array(200, 2) * [0.7, 0.4] + [0.3, -0.2]
    flow.layers[0].reverse(data)  # data-dependent init in the generative direction
    for i, layer in enumerate(flow.layers[1:]):
        _randomize(layer, scale=0.3, seed=i)
    base = RandomVariable(tfd.Normal(tf.zeros([1, 2]), 1.0))
    if KERAS3:  # a Keras 3 model converts a RandomVariable input to its value (docstring of
        out = base  # bayes_planet.layers.flows): the layers in turn are the composition
        for layer in flow.layers:
            out = layer(out)
        np.testing.assert_allclose(flow(base), out.value, rtol=1e-5, atol=1e-6)
    else:
        out = flow(base)
    assert isinstance(out, RandomVariable) and out.distribution.event_shape == (2,)
    edge = np.linspace(-6.0, 6.0, 401, dtype=np.float32)
    grid = np.stack(np.meshgrid(edge, edge, indexing="ij"), -1).reshape(-1, 2)
    density = np.exp(out.distribution.log_prob(grid).numpy())
    mass = density.sum() * (edge[1] - edge[0]) ** 2
    np.testing.assert_allclose(mass, 1.0, atol=0.01)
    # The Sequential acts as the composition: log p(y) = log N(z) - sum log|det|.
    y = normal_array(7, 2, seed=3)
    z, log_det = y, 0.0
    for layer in reversed(flow.layers):
        z = layer.reverse(z)
        log_det += layer.log_det_jacobian(z)
    manual = tfd.Independent(tfd.Normal(tf.zeros(2), 1.0), 1).log_prob(z) - log_det
    np.testing.assert_allclose(out.distribution.log_prob(y), manual, rtol=1e-5, atol=1e-5)
    # The value is the forward transform of the base's value.
    np.testing.assert_allclose(out.value, flow(base.value), rtol=1e-5, atol=1e-6)


def test_one_dimensional_density_integrates_to_one():
    layer = ActNorm()
    layer(normal_array(64, 1) * 3.0 + 2.0)  # forward data init
    out = layer(RandomVariable(tfd.Normal(0.0, 1.0)[None, None]))
    grid = np.linspace(-20, 20, 4001, dtype=np.float32)[:, None]
    mass = np.exp(out.distribution.log_prob(grid).numpy()).sum() * (grid[1, 0] - grid[0, 0])
    np.testing.assert_allclose(mass, 1.0, atol=1e-3)


def test_reverse_layer_swaps_directions_and_densities():
    inner, x = _built("realnvp_half")
    rev = Reverse(inner)
    np.testing.assert_allclose(rev(x), inner.reverse(x), atol=1e-6)
    np.testing.assert_allclose(rev.reverse(x), inner(x), atol=1e-6)
    # Normalizing direction: Reverse(flow) maps data to noise, density via the forward.
    base = RandomVariable(tfd.Normal(tf.zeros([3, 4]), 1.0))
    np.testing.assert_allclose(
        rev(base).distribution.log_prob(x[:3]),
        tfd.Independent(tfd.Normal(tf.zeros(4), 1.0), 1).log_prob(inner(x[:3]))
        + inner.log_det_jacobian(x[:3]), rtol=1e-5)


def test_reverse_needs_a_reverse_method():
    with pytest.raises(TypeError, match="reverse"):
        Reverse(keras.layers.Dense(3))


def test_actnorm_data_init_standardizes_the_first_batch_direction():
    data = normal_array(256, 3) * [1.0, 5.0, 0.1] + [3.0, -2.0, 0.5]
    gen = ActNorm()
    gen.build((None, 3))
    noise = gen.reverse(data).numpy()  # generative flow: init on reverse(data)
    np.testing.assert_allclose(noise.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(noise.std(0), 1.0, atol=1e-3)
    assert int(gen.initialized.numpy()) == 1
    before = gen.get_weights()
    gen.reverse(data * 2.0)  # no re-initialization
    np.testing.assert_array_equal(gen.get_weights()[0], before[0])
    norm = ActNorm()
    out = norm(data).numpy()  # forward direction
    np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(out.std(0), 1.0, atol=1e-3)
    graph = ActNorm()
    graph.build((None, 3))
    out = tf.function(graph)(tf.constant(data)).numpy()  # initialization in a graph
    np.testing.assert_allclose(out.std(0), 1.0, atol=1e-3)


@pytest.mark.parametrize("order", ["left-to-right", "right-to-left", "random", [2, 0, 4, 1, 3]])
def test_made_is_autoregressive(order):
    made = MADE([32, 32], units=3, order=order, seed=5)
    x = tf.constant(normal_array(2, 5))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = made(x)
    jac = np.abs(tape.batch_jacobian(y, x).numpy()).sum(0).sum(1)  # [out dim, in dim]
    degree = made.input_degrees
    allowed = degree[None, :] < degree[:, None]
    np.testing.assert_array_equal(jac[~allowed], 0.0)
    assert (jac[allowed] > 0).mean() > 0.9  # and it does use the allowed inputs
    assert y.shape == (2, 5, 3)


def test_realnvp_log_prob_uses_one_network_pass_and_matches_two():
    layer, x = _built("realnvp_half")
    calls = []
    network_call = layer.network.call
    layer.network.call = lambda *a, **k: calls.append(1) or network_call(*a, **k)
    base = RandomVariable(tfd.Normal(tf.zeros([16, 4]), 1.0))
    fast = layer(base).distribution.log_prob(x)
    assert len(calls) == 1
    z = layer.reverse(x)
    slow = tfd.Independent(tfd.Normal(tf.zeros(4), 1.0), 1).log_prob(z) - layer.log_det_jacobian(z)
    np.testing.assert_allclose(fast, slow, rtol=1e-6)


def test_made_with_an_int_names_the_argument():
    """Issue #19: MADE(8) raised "'int' object is not iterable"."""
    with pytest.raises(TypeError, match=r"hidden_dims=8 \(e.g. MADE\(\[8\]\)\)"):
        MADE(8)
    with pytest.raises(ValueError, match="hidden_dims=0"):
        MADE([0])
