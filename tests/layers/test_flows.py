"""Reversible layers: inverses, log-determinants against autodiff Jacobians, densities
that integrate to one, RevNet gradients and memory."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import KERAS3, keras
from bayes_planet.layers.flows import MADE, ActNorm, Permutation, RealNVP, Reverse
from bayes_planet.layers.random_variable import RandomVariable
from bayes_planet.layers.revnet import RevNetBlock, RevNetSequence
from bayes_planet.layers.testing import run_layer_test

tfd = tfp.distributions


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


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
    x = _x(16, dim, seed=seed) * 2.0 + 1.0
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
    data = _x(200, 2) * [0.7, 0.4] + [0.3, -0.2]
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
    y = _x(7, 2, seed=3)
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
    layer(_x(64, 1) * 3.0 + 2.0)  # forward data init
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
    data = _x(256, 3) * [1.0, 5.0, 0.1] + [3.0, -2.0, 0.5]
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
    x = tf.constant(_x(2, 5))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = made(x)
    jac = np.abs(tape.batch_jacobian(y, x).numpy()).sum(0).sum(1)  # [out dim, in dim]
    degree = made.input_degrees
    allowed = degree[None, :] < degree[:, None]
    np.testing.assert_array_equal(jac[~allowed], 0.0)
    assert (jac[allowed] > 0).mean() > 0.9  # and it does use the allowed inputs
    assert y.shape == (2, 5, 3)


def _grads(fn, x, variables):
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.sin(fn(x)) * tf.range(1.0, 9.0))
    return tape.gradient(loss, [x] + variables)


@pytest.mark.parametrize("compiled", [False, True])
def test_revnet_gradients_equal_standard_backprop(compiled):
    blocks = [RevNetBlock(hidden_units=32) for _ in range(3)]
    stack = RevNetSequence(blocks)
    x = tf.constant(_x(16, 8))
    stack(x)

    def plain(t):
        for block in blocks:
            t = block._step(t)  # ordinary ops, ordinary backprop
        return t

    def chain(t):
        for block in blocks:
            t = block(t)  # per-block custom gradient
        return t

    variables = stack.trainable_variables
    assert len(variables) == 3 * 2 * 4

    def grads(fn):  # closes over the variables (a Keras 3 variable passed to a tf.function
        return _grads(fn, x, variables)  # as an argument is traced as a tensor)

    run = tf.function(grads) if compiled else grads
    reference = _grads(plain, x, variables)
    for fn in (stack, chain):
        for ref, got in zip(reference, run(fn), strict=True):
            np.testing.assert_allclose(got, ref, atol=1e-5)


def test_revnet_traced_training_step_is_reproducible_and_exact():
    """A freshly traced SGD step (gradient + update in one tf.function) from the same
    weights applies the same update every time, and equals ordinary backprop's update:
    the recomputation reads every weight before the optimizer writes any (a race that
    once gave a different update in ~1 trace out of 10)."""
    x, y = tf.constant(_x(8, 6)), tf.constant(_x(8, 6, seed=1))
    tf.keras.utils.set_random_seed(0)
    layer = RevNetSequence(num_blocks=2, hidden_units=8)
    model = keras.Sequential([keras.Input((6,)), layer])
    start = [v.numpy() for v in layer.trainable_variables]

    def updated(fn):
        for v, a in zip(layer.trainable_variables, start, strict=True):
            v.assign(a)
        optimizer = keras.optimizers.SGD(0.5)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(fn(x) - y))
            grads = tape.gradient(loss, layer.trainable_variables)
            optimizer.apply_gradients(zip(grads, layer.trainable_variables, strict=True))
            return loss  # (with an output, the race showed in ~1 of 6 traces without the fix)

        step()
        return np.concatenate([v.numpy().ravel() for v in layer.trainable_variables])

    reference = updated(layer._step)  # ordinary backprop
    results = [updated(model) for _ in range(24)]
    for got in results:
        np.testing.assert_array_equal(got, results[0])
    np.testing.assert_allclose(results[0], reference, atol=1e-5)


_MEMORY_SCRIPT = textwrap.dedent("""
    import json, os
    os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"  # CPU memory stats need the BFC allocator
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    from bayes_planet.layers.revnet import RevNetBlock, RevNetSequence

    def peak_mib(kind, depth, batch=256, dim=16, hidden=512):
        tf.keras.utils.set_random_seed(0)
        x = tf.random.normal([batch, 2 * dim])
        if kind == "sequence":
            model = RevNetSequence(num_blocks=depth, hidden_units=hidden)
        else:
            model = tf.keras.Sequential([RevNetBlock(hidden_units=hidden,
                                                     recompute=kind == "blocks")
                                         for _ in range(depth)])
        model(x)
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x))
            return tape.gradient(loss, model.trainable_variables)
        step()
        tf.config.experimental.reset_memory_stats("CPU:0")
        base = tf.config.experimental.get_memory_info("CPU:0")["current"]
        step()
        return (tf.config.experimental.get_memory_info("CPU:0")["peak"] - base) / 2**20

    print(json.dumps({k: [peak_mib(k, d) for d in (2, 12)]
                      for k in ("plain", "blocks", "sequence")}))
""")


def test_revnet_peak_memory_does_not_grow_like_a_plain_residual_stack():
    """Peak bytes allocated by TF's CPU allocator during one eager forward+backward.

    Measured in a subprocess (the BFC allocator, which keeps the statistics, must be
    chosen before TensorFlow starts). Per block, plain backprop keeps the hidden
    activations of f and g (2 x 256 x 512 floats = 1 MiB); RevNetBlock keeps only
    its output (256 x 32 floats = 32 KiB); RevNetSequence keeps only the final output.
    Weight gradients (0.13 MiB per block) are part of every peak.
    """
    result = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True,
                            text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-2000:]
    peaks = json.loads(result.stdout.strip().splitlines()[-1])
    growth = {k: (v[1] - v[0]) / 10 for k, v in peaks.items()}  # MiB per extra block
    assert growth["plain"] > 1.0, peaks
    assert growth["blocks"] < 0.3 * growth["plain"], peaks
    assert growth["sequence"] < 0.3 * growth["plain"], peaks


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
