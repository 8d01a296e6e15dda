"""Rank-1 Bayesian recurrent cells (`LSTMCellRank1`, `GRUCellRank1`).

The contract harness inside ``keras.layers.RNN``; member semantics against the Keras cells
with the kernels scaled by the factors' means; one factor draw per example and
sequence (against a Keras reference per example, the seed counter, and a GRU identity
that only holds when the factors stay fixed over the steps); the KL against tfp's
closed form; bad input; mixed precision and float64.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet import layer_registry
from bayes_planet._keras import keras
from bayes_planet.layers.ensemble.dense import sample_factor
from bayes_planet.layers.noise import split_seed
from bayes_planet.layers.testing import (
    CellRNN,
    check_batch_checked_at_run_time,
    check_gradients,
    global_policy,
    normal_array,
    normal_kl,
    run_layer_test,
    wide_factors,
)

CELLS = [bl.LSTMCellRank1, bl.GRUCellRank1]
TWIN = {bl.LSTMCellRank1: keras.layers.LSTMCell, bl.GRUCellRank1: keras.layers.GRUCell}
FACTORS = ("alpha", "gamma", "recurrent_alpha", "recurrent_gamma")
# (class, kwargs) covering the GRU's two bias layouts.
VARIANTS = [(bl.LSTMCellRank1, {}), (bl.GRUCellRank1, {"reset_after": True}),
            (bl.GRUCellRank1, {"reset_after": False})]
VARIANT_IDS = ["LSTM", "GRU-reset_after", "GRU"]


def _seq(batch=4, time=5, dim=3, seed=0):
    return normal_array(batch, time, dim, seed=seed)


def _random_bias(cell, seed=1):
    cell.bias.assign(np.random.default_rng(seed).standard_normal(cell.bias.shape) * 0.5)


def _keras_member(cls, kwargs, x, kernel, recurrent_kernel, bias):
    """``keras.layers.RNN(<Keras twin>)`` with the given weights, run on ``x``."""
    cell = TWIN[cls](kernel.shape[1] // (4 if cls is bl.LSTMCellRank1 else 3), **kwargs)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    for var, value in ((cell.kernel, kernel), (cell.recurrent_kernel, recurrent_kernel),
                       (cell.bias, bias)):
        var.assign(value)
    return rnn(x).numpy()


def test_registered_as_their_own_families():
    assert layer_registry.estimators("lstm_cell_ensemble") == ("deterministic", "rank1")
    assert layer_registry.estimators("gru_cell_ensemble") == ("deterministic", "rank1")
    assert layer_registry.get("lstm_cell_ensemble", "rank1") is bl.LSTMCellRank1
    assert layer_registry.get("gru_cell_ensemble", "rank1") is bl.GRUCellRank1
    assert layer_registry.get("gru_cell_ensemble", "deterministic") is keras.layers.GRUCell
    # Not estimators of the plain cell families: the RSSM feeds them plain batches.
    assert "rank1" not in layer_registry.estimators("lstm_cell")


@pytest.mark.parametrize("cls, kwargs", VARIANTS[:2] + [
    pytest.param(*VARIANTS[2], marks=pytest.mark.slow)], ids=VARIANT_IDS)
def test_contract(cls, kwargs):
    # kernel, recurrent kernel, bias, 4 factors x (mean, stddev); seed counter; 4 KL terms.
    cell = keras.saving.serialize_keras_object(cls(3, ensemble_size=2, seed=5, **kwargs))
    run_layer_test(CellRNN, {"cell": cell, "return_sequences": True}, (4, 6, 2),
                   expected_output_shape=(4, 6, 3), expected_num_trainable_weights=11,
                   expected_num_non_trainable_weights=1, expected_num_losses=4)


@pytest.mark.parametrize("cls", CELLS)
def test_contract_step_sampling_without_bias(cls):
    cell = keras.saving.serialize_keras_object(
        cls(2, use_bias=False, ensemble_size=2, sampling="step", seed=5))
    run_layer_test(CellRNN, {"cell": cell}, (4, 3, 2), expected_output_shape=(4, 2),
                   expected_num_trainable_weights=10, expected_num_losses=4, run_save=False,
                   run_fit=False)


def test_unit_forget_bias_per_member():
    cell = bl.LSTMCellRank1(3, ensemble_size=2, bias_initializer="ones")
    cell.build((None, 2))
    np.testing.assert_array_equal(cell.bias.numpy(), np.ones([2, 12]))
    cell = bl.LSTMCellRank1(3, ensemble_size=2, bias_initializer="random_normal")
    cell.build((None, 2))
    bias = cell.bias.numpy()
    np.testing.assert_array_equal(bias[:, 3:6], 1.0)  # the forget gate's, as in Keras
    assert np.ptp(bias[:, :3]) > 0 and np.ptp(bias[:, 6:]) > 0


@pytest.mark.parametrize("cls, kwargs", VARIANTS, ids=VARIANT_IDS)
def test_member_e_is_the_keras_cell_with_scaled_kernels(cls, kwargs):
    """Inside `posterior_mean`, block e of the batch goes through the Keras cell with
    kernel ``diag(α_e) W diag(γ_e)``, recurrent kernel ``diag(ρ_e) U diag(δ_e)`` and bias
    ``b_e`` (α, γ, ρ, δ the factors' posterior means)."""
    members, rows = 3, 2
    x = _seq(batch=members * rows)
    cell = cls(4, ensemble_size=members, seed=0, **kwargs)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    _random_bias(cell)
    with bl.posterior_mean(cell):
        ours = rnn(x).numpy()
        np.testing.assert_array_equal(ours, rnn(x).numpy())  # deterministic
    a, g, ra, rg = (getattr(cell, name).loc().numpy() for name in FACTORS)
    assert np.ptp(a) > 0 and np.ptp(rg) > 0  # the members differ
    kernel, recurrent, bias = (w.numpy() for w in (cell.kernel, cell.recurrent_kernel, cell.bias))
    for e in range(members):
        block = slice(e * rows, (e + 1) * rows)
        theirs = _keras_member(cls, kwargs, x[block], kernel * a[e][:, None] * g[e],
                               recurrent * ra[e][:, None] * rg[e], bias[e])
        np.testing.assert_allclose(ours[block], theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls, kwargs", VARIANTS, ids=VARIANT_IDS)
def test_additive_perturbation_is_a_bias_shift(cls, kwargs):
    """``use_additive_perturbation``: ``(x + α) W + γ = x W + (α W + γ)``, so member e is
    the Keras cell with the shared kernels and its bias shifted by ``α_e W + γ_e`` (and
    ``ρ_e U + δ_e`` on the recurrent side, which reset_after GRUs keep separate)."""
    members, rows = 2, 2
    x = _seq(batch=members * rows, seed=2)
    cell = cls(3, ensemble_size=members, use_additive_perturbation=True, **kwargs)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    _random_bias(cell)
    with bl.posterior_mean(cell):
        ours = rnn(x).numpy()
    a, g, ra, rg = (getattr(cell, name).loc().numpy() for name in FACTORS)
    kernel, recurrent, bias = (w.numpy() for w in (cell.kernel, cell.recurrent_kernel, cell.bias))
    for e in range(members):
        shift_in, shift_rec = a[e] @ kernel + g[e], ra[e] @ recurrent + rg[e]
        if kwargs.get("reset_after"):
            member_bias = bias[e] + np.stack([shift_in, shift_rec])
        else:
            member_bias = bias[e] + shift_in + shift_rec
        block = slice(e * rows, (e + 1) * rows)
        theirs = _keras_member(cls, kwargs, x[block], kernel, recurrent, member_bias)
        np.testing.assert_allclose(ours[block], theirs, rtol=1e-5, atol=1e-5)
    config = cls.from_config(cell.get_config()).get_config()
    assert config["use_additive_perturbation"] is True and config["ensemble_size"] == 2


@pytest.mark.parametrize("cls", CELLS)
def test_a_sequence_holds_one_factor_draw_per_example(cls):
    """After ``sample_weights(seed)``, example i (of member e) runs through the Keras cell
    with the kernels scaled by *its* draw of the factors — the same draw at every step;
    identical examples get different draws."""
    members, rows = 2, 2
    x = np.repeat(_seq(batch=1, seed=3), members * rows, axis=0)  # differences: noise only
    cell = cls(3, ensemble_size=members, seed=4, **wide_factors(FACTORS))
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    _random_bias(cell)
    seed = tf.constant([7, 8])
    cell.sample_weights(seed=seed)
    ours = rnn(x).numpy()
    factor_seeds = split_seed(seed, len(FACTORS) + 1)[:len(FACTORS)]
    a, g, ra, rg = (sample_factor(cell, name, rows, s, tf.float32).numpy().reshape(
        members * rows, -1) for name, s in zip(FACTORS, factor_seeds, strict=True))
    kernel, recurrent, bias = (w.numpy() for w in (cell.kernel, cell.recurrent_kernel, cell.bias))
    for i in range(members * rows):
        theirs = _keras_member(cls, {}, x[i:i + 1], kernel * a[i][:, None] * g[i],
                               recurrent * ra[i][:, None] * rg[i], bias[i // rows])
        np.testing.assert_allclose(ours[i:i + 1], theirs, rtol=1e-5, atol=1e-5)
    assert np.abs(ours[0] - ours[1]).max() > 1e-3  # same member, same input, own draws
    assert np.abs(rnn(x).numpy() - ours).max() > 1e-3  # the next sequence draws again


def _gru_identity_residual(h):
    """For a GRU whose recurrent kernel and bias are zero, on a constant input from h0 = 0:
    with gates fixed over time, ``h2 = (1 + z) h1`` and ``h3 = (1 + z + z²) h1``. Returns
    ``|h3 - (1 + z + z²) h1|`` with ``z = h2 / h1 - 1``, on entries with ``|h1| > 0.05``."""
    h1, h2, h3 = h[:, 0], h[:, 1], h[:, 2]
    keep = np.abs(h1) > 0.05
    z = h2[keep] / h1[keep] - 1.0
    return np.abs(h3[keep] - (1.0 + z + z * z) * h1[keep])


@pytest.mark.parametrize("sampling", ["sequence", "step"])
def test_factors_are_fixed_across_the_steps_of_a_sequence(sampling):
    """One draw per RNN call (seed counter +1, under tf.function and XLA too) and a
    recurrence that only holds with fixed gates: it holds with ``sampling='sequence'``
    and breaks with a draw per step (``'step'``)."""
    x = np.repeat(_seq(batch=4, time=1, seed=5), 3, axis=1)  # the same input at 3 steps
    cell = bl.GRUCellRank1(6, ensemble_size=2, seed=6, sampling=sampling,
                           **wide_factors(FACTORS, 0.5))
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    cell.recurrent_kernel.assign(tf.zeros_like(cell.recurrent_kernel))
    cell.bias.assign(tf.zeros_like(cell.bias))
    for run in (rnn, tf.function(rnn), tf.function(rnn, jit_compile=True)):
        before = int(cell._seed_counter.numpy())
        residual = _gru_identity_residual(run(x).numpy())
        draws = int(cell._seed_counter.numpy()) - before
        assert residual.size > 10
        if sampling == "sequence":
            assert draws == 1
            assert residual.max() < 1e-4, residual.max()
        else:
            assert draws >= 3  # one per step (Keras also steps once to infer shapes)
            assert residual.max() > 1e-2, residual.max()


@pytest.mark.parametrize("cls", CELLS)
def test_unknown_batch_at_the_sequence_start_gives_the_same_draws(cls):
    """With an explicit ``initial_state`` (no ``get_initial_state``) and no batch size at
    ``sample_weights``, the steps regenerate the factors from the sequence's seed: the
    outputs equal those of the draw made once with the batch size known."""
    x = _seq(seed=6)
    cell = cls(3, ensemble_size=2, seed=1, **wide_factors(FACTORS))
    rnn = keras.layers.RNN(cell, return_sequences=True)
    rnn(x)
    seed = tf.constant([3, 4])
    cell.sample_weights(seed=seed, batch_size=4)
    drawn_once = rnn(x).numpy()
    cell.sample_weights(seed=seed)
    zeros = tf.zeros([4, 3])
    state = [zeros, zeros] if cls is bl.LSTMCellRank1 else [zeros]
    np.testing.assert_allclose(rnn(x, initial_state=state), drawn_once, atol=1e-6)


def test_fixed_noise_and_scan():
    """`fixed_noise`: the same draw in every call of the block; a cell stepped with
    tf.scan (no sequence start) draws once per call, outside the loop."""
    x = _seq()
    cell = bl.GRUCellRank1(3, ensemble_size=2, seed=2, **wide_factors(FACTORS))
    keras.layers.RNN(cell)(x)

    def scan(t):
        h0 = tf.zeros([t.shape[0], cell.units])
        hs = tf.scan(lambda h, xt: cell(xt, h)[0], tf.transpose(t, [1, 0, 2]), initializer=h0)
        return tf.transpose(hs, [1, 0, 2])

    scanned = tf.function(scan)
    before = int(cell._seed_counter.numpy())
    first, second = scanned(x), scanned(x)
    assert int(cell._seed_counter.numpy()) == before + 2
    assert np.abs(first - second).max() > 1e-3
    with bl.fixed_noise(cell, [1, 2]):  # read at trace time: a function traced in the block
        in_block = tf.function(scan)
        np.testing.assert_array_equal(in_block(x), in_block(x))
        np.testing.assert_array_equal(in_block(x), scan(x))  # and eager


def test_kl_is_the_closed_form_to_n_1_0_1():
    cell = bl.LSTMCellRank1(3, ensemble_size=2, seed=0,
                            **{f"{name}_regularizer": "rank1_normal_kl_divergence"
                               for name in FACTORS})
    cell.build((None, 5))
    expected = sum(normal_kl([getattr(cell, name) for name in FACTORS], 1.0, 0.1))
    np.testing.assert_allclose(float(tf.add_n(cell.losses)), expected, rtol=1e-5)
    assert len(cell.losses) == 4 and all(float(k) > 0 for k in cell.losses)


def test_default_kl_is_the_sign_mixture_bound_of_every_factor():
    cell = bl.LSTMCellRank1(3, ensemble_size=2, seed=0)
    cell.build((None, 5))
    prior = bl.Rank1SignMixtureKLDivergence()
    expected = sum(float(prior(getattr(cell, name))) for name in FACTORS)
    np.testing.assert_allclose(float(tf.add_n(cell.losses)), expected, rtol=1e-5)
    assert len(cell.losses) == 4 and all(float(k) > 0 for k in cell.losses)


@pytest.mark.parametrize("cls", CELLS)
def test_gradients_reach_every_parameter(cls):
    x = _seq(time=6)
    cell = cls(4, ensemble_size=2, seed=2)
    rnn = keras.layers.RNN(cell)  # loss on the last output only: through the full sequence
    rnn(x)
    check_gradients(lambda: tf.reduce_sum(tf.square(rnn(x))) + tf.add_n(cell.losses),
                    cell.trainable_variables)


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match=r"^Expected a positive integer\. "
                                         r"Received: ensemble_size=0$"):
        bl.LSTMCellRank1(3, ensemble_size=0)
    with pytest.raises(ValueError, match=r"Received: kernel_initializer='trainable_normal'$"):
        bl.GRUCellRank1(3, kernel_initializer="trainable_normal")
    with pytest.raises(ValueError, match=r"Received: recurrent_initializer='trainable_normal'$"):
        bl.LSTMCellRank1(3, recurrent_initializer="trainable_normal")
    with pytest.raises(ValueError, match=r"sampling='often'"):
        bl.GRUCellRank1(3, sampling="often")
    for cls in CELLS:
        with pytest.raises(ValueError, match=r"Expected a batch size divisible by "
                                             r"ensemble_size\. Received: batch size 6, "
                                             r"ensemble_size=4"):
            keras.layers.RNN(cls(3))(tf.zeros([6, 2, 2]))
    cell = bl.GRUCellRank1(3, ensemble_size=2)
    cell.build((None, 2))
    with pytest.raises(ValueError, match=r"^Expected num_samples=1: .* Received: num_samples=2$"):
        cell.sample_weights(num_samples=2)
    with pytest.raises(ValueError, match=r"Received: batch size 3, ensemble_size=2"):
        cell(tf.zeros([3, 2]), [tf.zeros([3, 3])])  # a step without a sequence start


@pytest.mark.parametrize("cls", CELLS)
def test_unknown_batch_size_is_checked_at_run_time(cls):
    out = check_batch_checked_at_run_time(keras.layers.RNN(cls(3, ensemble_size=4)), [2, 2], 4)
    assert out.shape == (8, 3)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("cls", CELLS)
def test_mixed_precision(cls, policy):
    with global_policy(policy):
        x, y = _seq(), np.zeros((4, 2), "float32")
        model = keras.Sequential([keras.Input((5, 3)),
                                  keras.layers.RNN(cls(4, ensemble_size=2, seed=1)),
                                  keras.layers.Dense(2, dtype="float32")])
        cell = model.layers[0].cell
        with tf.GradientTape() as tape:
            hidden = model.layers[0](x)
            loss = tf.reduce_mean(tf.square(model.layers[1](hidden))) + tf.add_n(model.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        assert hidden.dtype == keras.mixed_precision.global_policy().compute_dtype
        assert loss.dtype == tf.float32
        assert all(v.dtype == tf.float32 for v in cell.trainable_variables)
        assert all(kl.dtype == tf.float32 and np.isfinite(kl) for kl in cell.losses)
        assert all(g is not None and np.all(np.isfinite(tf.cast(g, tf.float32))) for g in grads)
        model.compile(keras.optimizers.Adam(1e-3), "mse")  # a loss-scale optimizer for float16
        hist = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        assert np.isfinite(hist.history["loss"][0])


def test_cauchy_factors():
    """``'trainable_cauchy'`` factors with their Cauchy(1, 0.1) prior: the KL is tfp's
    closed form, the config round trip keeps them, a normal prior is refused naming both."""
    cauchy = {**{f"{name}_initializer": "trainable_cauchy" for name in FACTORS},
              **{f"{name}_regularizer": "rank1_cauchy_kl_divergence" for name in FACTORS}}
    cell = bl.GRUCellRank1(3, ensemble_size=2, seed=0, **cauchy)
    out = keras.layers.RNN(cell)(_seq())
    assert np.all(np.isfinite(out))
    factors = [getattr(cell, name) for name in FACTORS]
    expected = [float(tf.reduce_sum(tfp.distributions.kl_divergence(
        tfp.distributions.Cauchy(w.loc(), w.scale()), tfp.distributions.Cauchy(1.0, 0.1))))
        for w in factors]
    np.testing.assert_allclose([float(v) for v in cell.losses], expected, rtol=1e-5)
    clone = bl.GRUCellRank1.from_config(cell.get_config())
    assert type(clone.recurrent_gamma_initializer) is type(cell.recurrent_gamma_initializer)
    with pytest.raises(ValueError, match=r"Received: recurrent_alpha_initializer="
                                         r"TrainableRandomSignCauchy, recurrent_alpha_"
                                         r"regularizer=Rank1SignMixtureKLDivergence$"):
        bl.LSTMCellRank1(3, recurrent_alpha_initializer="trainable_cauchy")
