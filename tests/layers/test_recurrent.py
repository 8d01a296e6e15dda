"""Bayesian LSTM/GRU cells: contract, Keras equivalence, sampling semantics, gradients,
mixed precision, XLA and MirroredStrategy."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet import layer_registry
from bayes_planet._keras import keras
from bayes_planet.layers import estimators
from bayes_planet.layers.noise import split_seed
from bayes_planet.layers.recurrent import (
    GRUCellFlipout,
    GRUCellReparameterization,
    LSTMCellFlipout,
    LSTMCellReparameterization,
)
from bayes_planet.layers.testing import CellRNN, run_layer_test

# Every registered cell gets the contract; ESTIMATOR: cell class -> its estimator function.
ESTIMATOR = {layer_registry.get(family, name): getattr(estimators, name)
             for family in ("lstm_cell", "gru_cell")
             for name in layer_registry.estimators(family)[1:]}
LSTMS = [c for c in ESTIMATOR if issubclass(c, keras.layers.LSTMCell)]
GRUS = [c for c in ESTIMATOR if issubclass(c, keras.layers.GRUCell)]
CELLS = LSTMS + GRUS


def _seq(batch=4, time=6, dim=3, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, time, dim)).astype("float32")


def _wide(cls, units=5, **kwargs):
    """A cell whose posterior is wide (stddev ~0.5), so sampling differences show."""
    from bayes_planet.layers.initializers import TrainableNormal

    def init():
        return TrainableNormal(stddev_initializer=keras.initializers.Constant(-0.5))

    return cls(units, kernel_initializer=init(), recurrent_initializer=init(), **kwargs)


# Contract ------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", CELLS)
def test_contract_sequence_sampling(cls):
    cell = keras.saving.serialize_keras_object(cls(3, seed=5))
    run_layer_test(CellRNN, {"cell": cell, "return_sequences": True}, (4, 6, 2),
                   expected_output_shape=(4, 6, 3), expected_num_trainable_weights=5,
                   expected_num_non_trainable_weights=1, expected_num_losses=2)


@pytest.mark.slow
@pytest.mark.parametrize("cls", CELLS)
def test_contract_step_sampling(cls):
    cell = keras.saving.serialize_keras_object(cls(3, seed=5, sampling="step"))
    run_layer_test(CellRNN, {"cell": cell, "return_sequences": True}, (4, 6, 2),
                   expected_output_shape=(4, 6, 3), expected_num_trainable_weights=5,
                   expected_num_non_trainable_weights=1, expected_num_losses=2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="sampling='often'"):
        LSTMCellFlipout(3, sampling="often")
    with pytest.raises(ValueError, match="units=0"):
        GRUCellFlipout(0)
    cell = LSTMCellReparameterization(3)
    with pytest.raises(ValueError, match="not built"):
        cell.sample_weights()
    cell.build((None, 2))
    with pytest.raises(ValueError, match="num_samples=0"):
        cell.sample_weights(num_samples=0)
    with pytest.raises(ValueError, match="seed"):
        cell.sample_weights(seed=[1, 2, 3])
    step_cell = GRUCellFlipout(3, sampling="step")
    step_cell.build((None, 2))
    with pytest.raises(ValueError, match="sampling='sequence'"):
        step_cell.sample_weights()


def test_config_keeps_sampling_and_seed():
    cell = GRUCellFlipout(4, sampling="step", seed=7, reset_after=False)
    clone = GRUCellFlipout.from_config(cell.get_config())
    assert (clone.sampling, clone.seed, clone.reset_after) == ("step", 7, False)


# Zero variance == Keras ----------------------------------------------------------------

def _copy_to_keras(cell, keras_cell, x):
    keras.layers.RNN(keras_cell)(x)
    keras_cell.kernel.assign(cell.kernel.loc())
    keras_cell.recurrent_kernel.assign(cell.recurrent_kernel.loc())
    bias = np.random.default_rng(1).standard_normal(cell.bias.shape).astype("float32")
    cell.bias.assign(bias)
    keras_cell.bias.assign(bias)


@pytest.mark.parametrize("cls, kwargs", [(c, {}) for c in LSTMS] + [
    (c, {"reset_after": r}) for c in GRUS for r in (True, False)])
@pytest.mark.parametrize("sampling", ["sequence", "step"])
def test_zero_variance_equals_keras(cls, kwargs, sampling):
    keras_cls = keras.layers.LSTMCell if cls in LSTMS else keras.layers.GRUCell
    x = _seq()
    cell = cls(5, kernel_initializer="trainable_deterministic",
               recurrent_initializer="trainable_deterministic", sampling=sampling, **kwargs)
    ours = keras.layers.RNN(cell, return_sequences=True)
    ours(x)
    keras_cell = keras_cls(5, **kwargs)
    _copy_to_keras(cell, keras_cell, x)
    theirs = keras.layers.RNN(keras_cell, return_sequences=True)
    np.testing.assert_allclose(ours(x), theirs(x), rtol=0, atol=1e-6)
    # Also step by step from Python, as in the paper's Fig. 1.
    state = cell.get_initial_state(x)
    keras_state = state  # zeros (Keras 3's get_initial_state takes a batch size, not inputs)
    for t in range(x.shape[1]):
        out, state = cell(x[:, t], state)
        keras_out, keras_state = keras_cell(x[:, t], keras_state)
        np.testing.assert_allclose(out, keras_out, rtol=0, atol=1e-6)


# Sampling semantics --------------------------------------------------------------------

def _reference(cell, x, seeds_per_step, initial=None):
    """Unrolls the cell's equations with the shared estimators, one seed per step
    (eagerly: stateless noise for a seed differs between XLA and non-XLA runs)."""
    est = ESTIMATOR[type(cell)]
    x = tf.convert_to_tensor(x)
    h = tf.zeros([x.shape[0], cell.units]) if initial is None else initial
    c = tf.zeros_like(h)
    outs = []
    for t, seed in enumerate(seeds_per_step):
        k_seed, r_seed, b_seed = split_seed(seed, 3)
        del b_seed  # deterministic bias
        xk = est(tf.matmul, x[:, t], cell.kernel, k_seed)
        if isinstance(cell, LSTMCellReparameterization | LSTMCellFlipout):
            z = tf.nn.bias_add(xk + est(tf.matmul, h, cell.recurrent_kernel, r_seed), cell.bias)
            i, f, g, o = tf.split(z, 4, axis=1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            h = tf.sigmoid(o) * tf.tanh(c)
        else:
            u = cell.units
            xz, xr, xh = tf.split(tf.nn.bias_add(xk, cell.bias[0]), 3, axis=-1)
            inner = tf.nn.bias_add(est(tf.matmul, h, cell.recurrent_kernel, r_seed), cell.bias[1])
            rz, rr, rh = tf.split(inner, [u, u, -1], axis=-1)
            z, r = tf.sigmoid(xz + rz), tf.sigmoid(xr + rr)
            h = z * h + (1 - z) * tf.tanh(xh + r * rh)
        outs.append(h)
    return tf.stack(outs, axis=1)


@pytest.mark.parametrize("cls", CELLS)
def test_sequence_sampling_is_one_sample_from_the_estimators(cls):
    """With ``sample_weights(seed)`` every step uses the weights (and, for Flipout, the
    per-example signs) the shared estimator draws from that seed's split."""
    x = _seq()
    cell = _wide(cls, seed=3)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    seed = tf.constant([11, 12])
    cell.sample_weights(seed=seed)  # kept by the next sequence: not yet used
    ours = rnn(x)
    np.testing.assert_allclose(ours, _reference(cell, x, [seed] * x.shape[1]), atol=1e-5)
    # The next sequence draws a new sample.
    assert np.abs(rnn(x) - ours).max() > 1e-3


@pytest.mark.parametrize("cls", CELLS)
def test_step_sampling_draws_a_new_sample_every_step(cls):
    x = _seq()
    cell = _wide(cls, seed=3, sampling="step")
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    ours = rnn(x)
    # Consecutive seeds, one per step: the last T drawn (Keras' RNN also calls the
    # step once before its loop, to infer output shapes, and discards it).
    end = int(cell._seed_counter.numpy())
    seeds = [tf.constant([3, end - x.shape[1] + 1 + t]) for t in range(x.shape[1])]
    np.testing.assert_allclose(ours, _reference(cell, x, seeds), atol=1e-5)
    # ... which is not one sample: the step-1 seed reproduces step 1 only.
    fixed = _reference(cell, x, [seeds[0]] * x.shape[1])
    np.testing.assert_allclose(ours[:, 0], fixed[:, 0], atol=1e-5)
    assert np.abs(ours[:, 1:] - fixed[:, 1:]).max() > 1e-3


@pytest.mark.parametrize("cls, explicit_state, jit", [
    (LSTMCellFlipout, False, False), (LSTMCellFlipout, True, False),
    (GRUCellReparameterization, False, False), (GRUCellReparameterization, True, True),
    pytest.param(LSTMCellFlipout, True, True, marks=pytest.mark.slow),
    pytest.param(GRUCellReparameterization, False, True, marks=pytest.mark.slow),
])
def test_one_sample_per_rnn_call(cls, explicit_state, jit):
    """Each RNN call is one sequence: one seed drawn, matching the reference, also with
    an explicit ``initial_state`` (no ``get_initial_state`` call) and under XLA."""
    x = _seq()
    cell = _wide(cls, seed=4)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    h0 = tf.random.stateless_normal([x.shape[0], 5], [0, 1])
    initial = None
    if explicit_state:
        initial = [h0, tf.zeros_like(h0)] if cls in LSTMS else [h0]

    def run(t):
        return rnn(t, initial_state=initial) if explicit_state else rnn(t)

    def run_seeded(t, seed):
        cell.sample_weights(seed=seed)
        return run(t)

    fn = tf.function(run, jit_compile=jit)
    seeded = tf.function(run_seeded, jit_compile=jit)
    for _ in range(2):
        before = int(cell._seed_counter.numpy())
        ours = fn(x)
        after = int(cell._seed_counter.numpy())
        assert after == before + 1
        if jit:  # XLA noise differs from eager noise: compare with the same path under XLA
            ref = seeded(x, tf.constant([4, after]))
        else:
            ref = _reference(cell, x, [tf.constant([4, after])] * x.shape[1],
                             initial=h0 if explicit_state else None)
        np.testing.assert_allclose(ours, ref, atol=1e-5)


@pytest.mark.parametrize("cls", CELLS)
def test_num_samples_groups_the_batch(cls):
    """``sample_weights(num_samples=K)``: row b uses sample b // (B // K)."""
    k, per = 3, 2
    row = _seq(batch=1)
    x = np.repeat(row, k * per, axis=0)
    cell = _wide(cls, seed=6)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    cell.sample_weights(num_samples=k, batch_size=k * per)
    out = rnn(x).numpy().reshape(k, per, *x.shape[1:2], 5)
    if cls in (LSTMCellReparameterization, GRUCellReparameterization):
        np.testing.assert_allclose(out[:, 0], out[:, 1], atol=1e-6)  # same sample in a group
    for a in range(k):
        for b in range(a):
            assert np.abs(out[a] - out[b]).max() > 1e-3  # different samples across groups


@pytest.mark.parametrize("cls", [LSTMCellReparameterization, GRUCellReparameterization])
def test_num_samples_groups_a_sampled_bias_too(cls):
    """With a distribution bias, ``num_samples=K`` draws K biases: group k adds bias k."""
    k, per = 2, 2
    x = np.repeat(_seq(batch=1), k * per, axis=0)
    cell = _wide(cls, seed=6, bias_initializer="trainable_normal")
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    cell.bias.raw_stddev.assign(tf.fill(cell.bias.raw_stddev.shape, -0.5))
    cell.sample_weights(num_samples=k, batch_size=k * per)
    out = rnn(x).numpy().reshape(k, per, *x.shape[1:2], 5)
    assert out.shape == (k, per, x.shape[1], 5)
    np.testing.assert_allclose(out[:, 0], out[:, 1], atol=1e-6)  # one sample per group
    assert np.abs(out[0] - out[1]).max() > 1e-3


def test_flipout_signs_are_per_example_and_fixed_per_sequence():
    """Identical rows get different pseudo-samples; signs drawn once (batch size known)
    or regenerated at every step from the sequence's seeds give the same outputs."""
    x = np.repeat(_seq(batch=1), 4, axis=0)
    cell = _wide(LSTMCellFlipout, seed=8)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    seed = tf.constant([5, 6])
    cell.sample_weights(seed=seed, batch_size=4)
    out = rnn(x).numpy()
    assert np.abs(out[0] - out[1]).max() > 1e-3
    cell.sample_weights(seed=seed)  # no batch size, and no get_initial_state below
    zeros = tf.zeros([4, 5])
    np.testing.assert_allclose(rnn(x, initial_state=[zeros, zeros]), out, atol=1e-6)


def _scan(cell, t):
    h0 = tf.zeros([t.shape[0], cell.units])
    hs = tf.scan(lambda h, xt: cell(xt, h)[0], tf.transpose(t, [1, 0, 2]), initializer=h0)
    return tf.transpose(hs, [1, 0, 2])


@pytest.mark.parametrize("jit", [False, True])
def test_step_by_step_scan_uses_one_sample(jit):
    """World-model use: a GRU stepped with tf.scan. After ``sample_weights(seed)`` it
    equals the RNN layer with that seed; without a sequence start it draws once per
    call, outside the loop (one seed), not once per step."""
    x = _seq()
    cell = _wide(GRUCellReparameterization, seed=9)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    seed = tf.constant([1, 2])

    @tf.function(jit_compile=jit)
    def presampled(t):
        cell.sample_weights(seed=seed)
        return _scan(cell, t)

    @tf.function(jit_compile=jit)
    def layer(t):
        cell.sample_weights(seed=seed)
        return rnn(t)

    np.testing.assert_allclose(presampled(x), layer(x), atol=1e-6)
    lazy = tf.function(lambda t: _scan(cell, t), jit_compile=jit)
    for _ in range(2):
        before = int(cell._seed_counter.numpy())
        out = lazy(x)
        after = int(cell._seed_counter.numpy())
        assert after == before + 1
        if not jit:  # (under XLA the seeds' noise differs; the counter is the check)
            ref = _reference(cell, x, [tf.constant([9, after])] * 6)
            np.testing.assert_allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize("cls", [GRUCellReparameterization, GRUCellFlipout])
@pytest.mark.parametrize("sampling", ["sequence", "step"])
def test_fixed_noise_blocks(cls, sampling):
    """`fixed_noise(module, seed)` (as the RSSM uses it): every step of a scan uses the
    block's seed, in both sampling modes; a second block in the same graph redraws."""
    from bayes_planet.layers.base import fixed_noise

    x = _seq()
    cell = _wide(cls, seed=9, sampling=sampling)
    keras.layers.RNN(cell)(x)
    seeds = [tf.constant([3, 4]), tf.constant([5, 6])]

    @tf.function
    def two_blocks(t):
        outs = []
        for seed in seeds:
            with fixed_noise(cell, seed):
                outs.append(_scan(cell, t))
        return outs

    before = int(cell._seed_counter.numpy())
    outs = two_blocks(x)
    assert int(cell._seed_counter.numpy()) == before  # the blocks' seeds, not the counter
    for out, seed in zip(outs, seeds, strict=True):
        block_seed = tf.random.experimental.stateless_fold_in(seed, 0)
        np.testing.assert_allclose(out, _reference(cell, x, [block_seed] * 6), atol=1e-5)
    assert np.abs(outs[0] - outs[1]).max() > 1e-3


@pytest.mark.parametrize("cls", [GRUCellReparameterization, GRUCellFlipout])
@pytest.mark.parametrize("jit", [False, True])
def test_gradients_through_scan_with_a_hoisted_draw(cls, jit):
    """The RSSM's training path: tf.scan over a cell (lazy draw, placed outside the
    loop) inside `fixed_noise`, differentiated inside a tf.function."""
    from bayes_planet.layers.base import fixed_noise

    x = _seq(time=5)
    cell = cls(5, seed=1)
    keras.layers.RNN(cell)(x)

    @tf.function(jit_compile=jit)
    def grads(t, seed):
        with tf.GradientTape() as tape:
            with fixed_noise(cell, seed):
                loss = tf.reduce_sum(tf.square(_scan(cell, t)))
        return tape.gradient(loss, cell.trainable_variables)

    for v, g in zip(cell.trainable_variables, grads(x, tf.constant([1, 2])), strict=True):
        assert g is not None and np.all(np.isfinite(g)) and np.abs(g).max() > 0, v.name


def test_eager_python_loop_fig1():
    """Paper Fig. 1: get_initial_state starts a sequence; steps share its sample."""
    x = _seq()
    cell = _wide(LSTMCellReparameterization, seed=10)
    outs = []
    for _ in range(2):
        state = cell.get_initial_state(x)  # builds the cell from x on first use
        seq = []
        for t in range(x.shape[1]):
            h, state = cell(x[:, t], state)
            seq.append(h)
        outs.append(tf.stack(seq, 1))
    seed = tf.constant([10, int(cell._seed_counter.numpy())])
    np.testing.assert_allclose(outs[1], _reference(cell, x, [seed] * x.shape[1]), atol=1e-5)
    assert np.abs(outs[0] - outs[1]).max() > 1e-3
    assert len(cell.losses) == 2


def test_distribution_bias_keeps_unit_forget_bias():
    from bayes_planet.layers.initializers import TrainableNormal

    cell = LSTMCellReparameterization(3, bias_initializer=TrainableNormal(mean_initializer="zeros"))
    cell.build((None, 2))
    loc = cell.bias.loc().numpy()
    assert np.allclose(loc[3:6], 1.0, atol=0.05) and np.allclose(loc[:3], 0.0, atol=0.05)
    assert len(cell.losses) == 2  # bias_regularizer=None by default
    x = _seq()
    for sampling in ("sequence", "step"):  # the bias is sampled too
        gru = GRUCellFlipout(4, bias_initializer="trainable_normal", sampling=sampling)
        with tf.GradientTape() as tape:
            out = keras.layers.RNN(gru)(x)
        grads = tape.gradient(out, gru.bias.trainable_variables)
        assert all(g is not None and np.abs(g).max() > 0 for g in grads)


@pytest.mark.parametrize("cls", [LSTMCellReparameterization, GRUCellFlipout])
def test_keras_dropout_applies_in_training_only(cls):
    """The Keras cell's input and recurrent dropout, on the fused step: at the posterior mean
    (no weight noise) inference is deterministic and ``training=True`` drops units."""
    from bayes_planet.layers import posterior_mean

    x = _seq()
    cell = cls(5, dropout=0.5, recurrent_dropout=0.5, seed=1)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    with posterior_mean(cell):
        inference = [rnn(x, training=False).numpy() for _ in range(2)]
        trained = rnn(x, training=True).numpy()
    np.testing.assert_array_equal(inference[0], inference[1])
    assert np.all(np.isfinite(trained)) and np.abs(trained - inference[0]).max() > 1e-3


# Gradients -----------------------------------------------------------------------------

@pytest.mark.parametrize("cls", CELLS)
@pytest.mark.parametrize("sampling", ["sequence", "step"])
def test_gradients_reach_every_variational_parameter(cls, sampling):
    x = _seq(time=8)
    cell = cls(5, sampling=sampling, seed=2)
    rnn = keras.layers.RNN(cell)  # loss on the last output only: through the full sequence
    rnn(x)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(rnn(x)))
    grads = tape.gradient(loss, cell.trainable_variables)
    for v, g in zip(cell.trainable_variables, grads, strict=True):
        assert g is not None, v.name
        assert np.all(np.isfinite(g)) and np.abs(g).max() > 0, v.name


# Mixed precision, XLA, strategy ---------------------------------------------------------

@pytest.mark.parametrize("cls", CELLS)
def test_mixed_precision(cls):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x = _seq()
        model = keras.Sequential([keras.Input((6, 3)), keras.layers.RNN(cls(4, seed=1)),
                                  keras.layers.Dense(2, dtype="float32")])
        cell = model.layers[0].cell
        with tf.GradientTape() as tape:
            hidden = model.layers[0](x)
            loss = tf.reduce_mean(tf.square(model.layers[1](hidden))) + tf.add_n(model.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        assert hidden.dtype == tf.float16 and loss.dtype == tf.float32
        assert all(v.dtype == tf.float32 for v in cell.trainable_variables)
        assert all(loss.dtype == tf.float32 and np.isfinite(loss) for loss in cell.losses)
        assert all(g is not None and np.all(np.isfinite(tf.cast(g, tf.float32))) for g in grads)
        if cls is GRUCellFlipout:  # and Keras' fit with a loss-scale optimizer
            model.compile(keras.optimizers.Adam(1e-3), "mse")
            hist = model.fit(x, np.zeros((4, 2), "float32"), epochs=2, verbose=0)
            assert np.all(np.isfinite(hist.history["loss"]))
    finally:
        keras.mixed_precision.set_global_policy("float32")


STRATEGY_SCRIPT = textwrap.dedent("""
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from bayes_planet._keras import keras
    from bayes_planet.layers import _compat, recurrent
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    x = np.random.default_rng(0).standard_normal((8, 5, 3)).astype("float32")
    y = np.random.default_rng(1).standard_normal((8, 2)).astype("float32")

    def fit(make_cell, jit):
        with strategy.scope():
            cell = make_cell()
            model = keras.Sequential([keras.Input((5, 3)), keras.layers.RNN(cell),
                                      keras.layers.Dense(2)])
            model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=jit)
        try:
            hist = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
        except tf.errors.InvalidArgumentError as e:
            return None, None, str(e).splitlines()[-3:]
        return model, cell, hist.history["loss"]

    # XLA under MirroredStrategy on logical CPUs: TF 2.15 cannot run plain Keras either.
    keras_jit = fit(lambda: keras.layers.GRUCell(4), jit=True)[0] is not None
    for name in ["LSTMCellReparameterization", "LSTMCellFlipout", "GRUCellReparameterization",
                 "GRUCellFlipout"]:
        make = lambda: getattr(recurrent, name)(4, seed=1)  # noqa: E731
        model, cell, losses = fit(make, jit=False)
        assert np.all(np.isfinite(losses)), losses
        assert model.predict(x, batch_size=8, verbose=0).shape == (8, 2)
        counter = _compat.tf_variable(cell._seed_counter)
        assert counter.dtype == tf.int64
        values = [int(v) for v in strategy.experimental_local_results(counter)]
        assert values[0] >= 3 and values[0] == values[1], values  # one seed per sequence
        jit_model, _, jit_info = fit(make, jit=True)
        assert (jit_model is not None) == keras_jit, (keras_jit, jit_info)
        print(name, losses[-1], values, "xla under strategy:", jit_model is not None)
    print("STRATEGY OK; plain Keras XLA under strategy:", keras_jit)
""")


@pytest.mark.slow
def test_mirrored_strategy_two_logical_cpus():
    result = subprocess.run([sys.executable, "-c", STRATEGY_SCRIPT], capture_output=True,
                            text=True, timeout=600)
    assert "STRATEGY OK" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.parametrize("cls", CELLS)
def test_posterior_mean_makes_a_cell_deterministic_and_equal_to_its_zero_variance_self(cls):
    from bayes_planet.layers import posterior_mean

    x = _seq()
    cell = _wide(cls, seed=9)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    cell.sample_weights(seed=[1, 2])  # a sample drawn before the block is not used in it
    with posterior_mean(cell):
        means = [rnn(x).numpy() for _ in range(2)]
    np.testing.assert_array_equal(means[0], means[1])
    assert not np.allclose(rnn(x).numpy(), rnn(x).numpy())  # sampling again outside
    for weight in (cell.kernel, cell.recurrent_kernel):
        weight.raw_stddev.assign(tf.fill(weight.raw_stddev.shape, -1e4))  # exp(-1e4) == 0
    np.testing.assert_allclose(rnn(x).numpy(), means[0], atol=1e-6)


@pytest.mark.parametrize("cls", GRUS)
def test_posterior_mean_redraws_a_sample_cached_outside_the_block(cls):
    from bayes_planet.layers import posterior_mean

    x = _seq()
    cell = _wide(cls, seed=9)
    keras.layers.RNN(cell)(x)
    sampled = _scan(cell, x).numpy()  # caches a weight sample (eager)
    with posterior_mean(cell):
        eager = _scan(cell, x).numpy()
        traced = tf.function(lambda t: _scan(cell, t))(x).numpy()  # traced inside the block
    assert not np.allclose(sampled, eager)
    np.testing.assert_allclose(eager, traced, atol=1e-6)
    for weight in (cell.kernel, cell.recurrent_kernel):
        weight.raw_stddev.assign(tf.fill(weight.raw_stddev.shape, -1e4))  # exp(-1e4) == 0
    np.testing.assert_allclose(tf.function(lambda t: _scan(cell, t))(x).numpy(), eager, atol=1e-6)
