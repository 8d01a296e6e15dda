"""Ensembles as Keras models: `EnsembleModel`, `DeepEnsemble`, `MonteCarloModel`/`mc_dropout`
and `MCDropout`.

``fit`` against hand-tiled / separately trained models, the predictive against the hand
average of the members' probabilities (and its stability), ``.keras`` save/load, seeds,
MC dropout's Monte Carlo average against its closed-form mean and variance, bad input,
and the float64 and mixed-precision dtypes.
"""

import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers.testing import global_policy, normal_array, run_layer_test
from tests.layers._keras_files import edited_keras_file

tfd = tfp.distributions
E = 3
LOGITS_LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _labels(n, classes=4, seed=0):
    return np.random.default_rng(seed).integers(0, classes, n)


def _batch_ensemble_net(classes=4, activation=None, head=None):
    layers = [keras.Input((5,)),
              bl.DenseBatchEnsemble(8, "tanh", ensemble_size=E, alpha_initializer="random_normal",
                                    gamma_initializer="random_normal",
                                    bias_initializer="random_normal"),
              bl.DenseBatchEnsemble(classes, activation, ensemble_size=E,
                                    alpha_initializer="random_normal",
                                    gamma_initializer="random_normal")]
    return keras.Sequential(layers + ([head] if head is not None else []))


def _twin(model):
    """A second model of the same architecture with the same weights."""
    twin = keras.models.clone_model(model)
    twin.set_weights(model.get_weights())
    return twin


def _softmax(logits):
    z = logits - logits.max(-1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(-1, keepdims=True)


def _member_blocks(inner, x, size):
    """The members' outputs on the hand-tiled batch: ``[size, b, ...]`` (float64)."""
    out = inner(np.concatenate([x] * size, 0)).numpy().astype("float64")
    return out.reshape((size, len(x)) + out.shape[1:])


# --- EnsembleModel ------------------------------------------------------------------------


@pytest.mark.parametrize("with_sample_weight", [False, True])
def test_fit_equals_hand_tiling(with_sample_weight):
    """``EnsembleModel(inner, E).fit(x, y)`` = ``inner.fit`` on batches tiled E times by hand:
    the same losses and metrics each epoch and the same weights after."""
    x, y = normal_array(8, 5), _labels(8)
    weights = np.linspace(0.5, 1.5, 8).astype("float32") if with_sample_weight else None
    inner = _batch_ensemble_net()
    twin = _twin(inner)
    model = bl.EnsembleModel(inner, E)
    for m in (model, twin):
        m.compile(keras.optimizers.SGD(0.1), LOGITS_LOSS, metrics=["accuracy"])
    history = model.fit(x, y, sample_weight=weights, batch_size=4, epochs=3, shuffle=False,
                        verbose=0).history

    def tile(*batch):
        return tuple(tf.concat([t] * E, 0) for t in batch)

    parts = (x, y) if weights is None else (x, y, weights)
    tiled = tf.data.Dataset.from_tensor_slices(parts).batch(4).map(tile)
    expected = twin.fit(tiled, epochs=3, shuffle=False, verbose=0).history  # (a dataset: never)
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(history[key], expected[key], rtol=1e-6, err_msg=key)
    for a, b in zip(inner.get_weights(), twin.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not np.allclose(inner.get_weights()[0], _batch_ensemble_net().get_weights()[0])


@pytest.mark.parametrize("output, activation, link", [
    ("logits", None, lambda p: np.log(p)),
    ("probabilities", "softmax", lambda p: p),
    ("binary_logits", None, lambda p: np.log(p) - np.log1p(-p)),
    ("mean", None, lambda p: p),
])
def test_predict_is_the_hand_average_of_the_members(output, activation, link):
    """The predictive is the average of the members' probabilities, returned in the
    members' own kind (logits of the mean for 'logits'/'binary_logits')."""
    x = normal_array(5, 5, seed=1)
    inner = _batch_ensemble_net(activation=activation)
    model = bl.EnsembleModel(inner, E, output=output)
    blocks = _member_blocks(inner, x, E)
    if output == "logits":
        mean = _softmax(blocks).mean(0)
    elif output == "binary_logits":
        mean = (1 / (1 + np.exp(-blocks))).mean(0)
    else:
        mean = blocks.mean(0)
    np.testing.assert_allclose(model.predict(x, verbose=0), link(mean), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(x).numpy(), link(mean), rtol=1e-5, atol=1e-6)
    if output == "logits":  # normalized log-probabilities: softmax of them is the mean
        np.testing.assert_allclose(tf.nn.softmax(model(x)).numpy(), mean, rtol=1e-5,
                                   atol=1e-7)


def test_evaluate_is_the_nll_and_accuracy_of_the_mean_probabilities():
    x, y = normal_array(6, 5, seed=2), _labels(6, seed=2)
    inner = _batch_ensemble_net()
    model = bl.EnsembleModel(inner, E)
    model.compile("sgd", LOGITS_LOSS, metrics=["accuracy"])
    nll, accuracy = model.evaluate(x, y, verbose=0)
    mean = _softmax(_member_blocks(inner, x, E)).mean(0)
    np.testing.assert_allclose(nll, -np.log(mean[np.arange(6), y]).mean(), rtol=1e-5)
    np.testing.assert_allclose(accuracy, (mean.argmax(-1) == y).mean())


def test_mean_of_probabilities_is_stable_for_extreme_logits():
    """log mean_e p_e as a log-mean-exp: finite where the probabilities underflow float32."""
    logits = tf.constant([[0.0, -200.0], [0.0, -300.0]])  # two members, one example
    out = bl.mean_predictive(logits, 2).numpy()
    # log((e^-200 + e^-300) / 2) up to normalization (log(1 + e^-200) = 0 in float64)
    np.testing.assert_allclose(out[0], [-math.log(1.0), -200.0 - math.log(2.0)], rtol=1e-6)
    binary = bl.mean_predictive(tf.constant([[-200.0], [-300.0]]), 2, "binary_logits").numpy()
    np.testing.assert_allclose(binary, [[-200.0 - math.log(2.0)]], rtol=1e-6)
    with np.errstate(divide="ignore"):
        naive = np.log(_softmax(logits.numpy().astype("float32")).mean(0))
    assert not np.isfinite(naive[1])  # what a mean of float32 probabilities would give


def test_tile_batch_and_mean_predictive_follow_the_ensemble_convention():
    x = {"a": normal_array(2, 3), "b": normal_array(2, 1, seed=1)}
    tiled = bl.tile_batch(x, 3)
    np.testing.assert_array_equal(tiled["a"], np.concatenate([x["a"]] * 3))
    assert bl.tile_batch(None, 3) is None
    blocks = tf.constant(np.arange(12, dtype="float32").reshape(6, 2))
    np.testing.assert_array_equal(bl.mean_predictive(blocks, 3, "mean"),
                                  np.arange(12).reshape(3, 2, 2).mean(0))


def test_random_variable_outputs_give_the_uniform_mixture():
    """A member returning a RandomVariable: the predictive is the members' uniform mixture,
    whose log_prob is log mean_e p_e(y); negative_log_likelihood trains it."""
    x, y = normal_array(4, 5, seed=3), normal_array(4, 2, seed=4)
    inner = _batch_ensemble_net(classes=2, head=bl.Normal(scale=0.5, seed=1))
    model = bl.EnsembleModel(inner, E, seed=2)
    rv = model(x)
    assert isinstance(rv, bl.RandomVariable) and rv.shape == (4, 2)
    members = inner(np.concatenate([x] * E, 0)).distribution.log_prob(np.concatenate([y] * E))
    expected = tf.reduce_logsumexp(tf.reshape(members, [E, 4]), 0) - math.log(E)
    np.testing.assert_allclose(rv.distribution.log_prob(y), expected, rtol=1e-5)
    model.compile(keras.optimizers.Adam(1e-2), bl.negative_log_likelihood, run_eagerly=True)
    losses = model.fit(x, y, batch_size=4, epochs=10, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    assert np.isfinite(model.evaluate(x, y, verbose=0))


def _deep(seed=0, num_models=2, **kwargs):
    def build():
        return keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, "tanh"),
                                 keras.layers.Dense(4, kernel_regularizer="l2")])
    return bl.deep_ensemble(build, num_models, seed=seed, **kwargs)


def _mc(seed=0):
    base = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, "relu"),
                             keras.layers.Dropout(0.3), keras.layers.Dense(4)])
    return bl.mc_dropout(base, 6, seed=seed)


@pytest.mark.parametrize("make", [
    lambda: bl.EnsembleModel(_batch_ensemble_net(), E),
    lambda: bl.EnsembleModel(_batch_ensemble_net(classes=2, head=bl.Normal(seed=1)), E,
                             seed=5),
    _deep,
    _mc,
], ids=["EnsembleModel", "EnsembleModel(RandomVariable)", "DeepEnsemble", "mc_dropout"])
def test_keras_save_and_load_model_reproduce_the_predictions(make, tmp_path):
    x = normal_array(6, 5, seed=5)
    model = make()
    model.compile(keras.optimizers.Adam(1e-2), LOGITS_LOSS)
    rv_output = isinstance(model(x), bl.RandomVariable)
    if rv_output:
        model.compile(keras.optimizers.Adam(1e-2), bl.negative_log_likelihood)
    y = normal_array(6, 2) if rv_output else _labels(6)
    model.fit(x, y, epochs=1, verbose=0)  # saved with its optimizer's state (built by a step)
    path = os.path.join(tmp_path, "ensemble.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is type(model)
    assert (loaded.ensemble_size, loaded.output_type) == (model.ensemble_size, model.output_type)
    # Same weights and noise counters: the next predictions (sampled ones too) are equal.
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert loaded.evaluate(x, y, verbose=0) == model.evaluate(x, y, verbose=0)


# --- DeepEnsemble -------------------------------------------------------------------------


def test_deep_ensemble_members_are_seeded_by_name():
    model, again, other = (_deep(seed=s, num_models=3) for s in (0, 0, 1))
    kernels = [m.get_weights()[0] for m in model.members]
    assert not any(np.allclose(a, b) for i, a in enumerate(kernels) for b in kernels[i + 1:])
    for a, b in zip(model.get_weights(), again.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(model.get_weights()[0], other.get_weights()[0])
    seen = []
    bl.deep_ensemble(lambda seed: seen.append(seed) or keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(1)]), 2, seed=0, output="mean")
    assert len(set(seen)) == 2  # build_fn(seed=...) gets each member's own seed


def test_deep_ensemble_fit_is_independent_training_of_each_member():
    """One fit = each member trained alone on the same batches (SGD, with each member's own
    L2 term); the reported loss is the mean of the members' losses."""
    x, y = normal_array(8, 5, seed=6), _labels(8, seed=6)
    model = _deep(seed=2)
    alone = [_twin(m) for m in model.members]
    model.compile(keras.optimizers.SGD(0.1), LOGITS_LOSS, metrics=["accuracy"])
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    histories = []
    for member in alone:
        member.compile(keras.optimizers.SGD(0.1), LOGITS_LOSS, metrics=["accuracy"])
        histories.append(member.fit(x, y, batch_size=4, epochs=2, shuffle=False,
                                    verbose=0).history)
    for trained, reference in zip(model.members, alone, strict=True):
        for a, b in zip(trained.get_weights(), reference.get_weights(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(history[key], np.mean([h[key] for h in histories], 0),
                                   rtol=1e-5, err_msg=key)


def test_deep_ensemble_predicts_the_mean_of_the_members_probabilities():
    x = normal_array(5, 5, seed=7)
    model = _deep(seed=3)
    mean = np.mean([_softmax(m(x).numpy().astype("float64")) for m in model.members], 0)
    np.testing.assert_allclose(tf.nn.softmax(model.predict(x, verbose=0)), mean, rtol=1e-5)
    assert model.ensemble_size == 2


# --- MC dropout ---------------------------------------------------------------------------


def test_mc_dropout_layer_contract():
    run_layer_test(bl.MCDropout, {"rate": 0.3}, (4, 5), expected_output_shape=(4, 5),
                   expected_num_trainable_weights=0, expected_num_non_trainable_weights=1,
                   expected_num_losses=0, run_fit=False)


def test_mc_dropout_layer_drops_at_inference_with_the_keras_scaling():
    x = np.abs(normal_array(200, 50)) + 1.0
    layer = bl.MCDropout(0.25, seed=0)
    out = layer(x, training=False).numpy()
    dropped = out == 0
    np.testing.assert_allclose(out[~dropped], x[~dropped] / 0.75, rtol=1e-6)
    # 10,000 Bernoulli(0.25) drops: standard error 0.0043; 5 standard errors.
    assert abs(dropped.mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / dropped.size)
    shared = bl.MCDropout(0.5, noise_shape=(None, 1), seed=0)(x).numpy() == 0
    assert np.all(shared == shared[:, :1])  # one mask entry per row, broadcast
    a, b = bl.MCDropout(0.5, seed=3), bl.MCDropout(0.5, seed=3)
    first = a(x).numpy()
    np.testing.assert_array_equal(first, b(x).numpy())  # seeded
    assert not np.array_equal(first, a(x).numpy())  # new mask each call


def test_mc_average_converges_to_the_linear_models_expectation():
    """Dropout (rate p, inverted) then a linear layer: E[f(x)] = W x + b, and one sample has
    variance sum_i W_i² x_i² p/(1-p). The average of T samples lies within 5 standard
    errors of the expectation."""
    p, samples = 0.3, 4000
    net = keras.Sequential([keras.Input((6,)), bl.MCDropout(p, seed=1),
                            keras.layers.Dense(2, bias_initializer="random_normal")])
    model = bl.MonteCarloModel(net, samples, output="mean")
    x = normal_array(3, 6, seed=8)
    kernel, bias = (w.astype("float64") for w in net.layers[-1].get_weights())
    expected = x @ kernel + bias
    variance = (x[:, :, None] ** 2 * kernel[None] ** 2).sum(1) * p / (1 - p)
    error = np.abs(model(x).numpy() - expected)
    assert np.all(error < 5 * np.sqrt(variance / samples) + 1e-5), (error, variance)


def test_mc_dropout_swaps_dropout_and_shares_the_other_layers():
    x, y = normal_array(6, 5, seed=9), _labels(6, seed=9)
    base = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, "relu"),
                             keras.layers.Dropout(0.3), keras.layers.Dense(4)])
    model = bl.mc_dropout(base, 8, seed=4)
    assert [type(layer) for layer in model.inner.layers] == [
        keras.layers.Dense, bl.MCDropout, keras.layers.Dense]
    assert model.inner.layers[0] is base.layers[0] and model.num_samples == 8
    assert not np.array_equal(model(x), model(x))  # on at inference
    np.testing.assert_array_equal(bl.mc_dropout(base, 8, seed=4).predict(x, verbose=0),
                                  bl.mc_dropout(base, 8, seed=4).predict(x, verbose=0))
    before = base.get_weights()[0].copy()
    model.compile("adam", LOGITS_LOSS)
    model.fit(x, y, verbose=0)
    assert not np.array_equal(before, base.get_weights()[0])  # training it trains the model


def test_mc_dropout_swaps_the_dropout_of_a_functional_model():
    """A functional model (Keras 2 and 3) gets its Dropout swapped like a Sequential one; the
    swapped layer drops a fraction ``rate`` at inference (20,000 entries: 4 SE)."""
    inputs = keras.Input((50,))
    hidden = keras.layers.Dropout(0.1)(keras.layers.Dense(50, "relu")(inputs))
    base = keras.Model(inputs, keras.layers.Dense(4)(hidden))
    model = bl.mc_dropout(base, 3, seed=1)
    swapped = [layer for layer in model.inner.layers if isinstance(layer, keras.layers.Dropout)]
    assert [type(layer) for layer in swapped] == [bl.MCDropout]
    mask = swapped[0](np.ones((400, 50), np.float32)).numpy() == 0
    assert abs(mask.mean() - 0.1) < 4 * np.sqrt(0.1 * 0.9 / mask.size)

    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.drop = keras.layers.Dropout(0.1)

        def call(self, x):
            return self.drop(x)

    with pytest.raises(ValueError, match="Received: model=Subclassed"):
        bl.mc_dropout(Subclassed(), 3)


def test_monte_carlo_fit_is_the_inner_models_fit():
    """``fit`` trains on the untiled batch: the same losses as ``inner.fit``."""
    x, y = normal_array(8, 5, seed=10), _labels(8, seed=10)

    def net():
        return keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, "relu"),
                                 bl.MCDropout(0.3, seed=2), keras.layers.Dense(4)])

    inner, alone = net(), net()
    alone.set_weights(inner.get_weights())
    model = bl.MonteCarloModel(inner, 5)
    for m in (model, alone):
        m.compile(keras.optimizers.SGD(0.1), LOGITS_LOSS)
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    expected = alone.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-6)


# --- bad input ----------------------------------------------------------------------------


def _softmax_net():
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, "softmax")])


@pytest.mark.parametrize("call, error, message", [
    (lambda: bl.EnsembleModel(_softmax_net(), 0, output="probabilities"), ValueError,
     "Expected a positive integer. Received: ensemble_size=0"),
    (lambda: bl.deep_ensemble(_softmax_net, 0), ValueError,
     "Expected a positive integer. Received: num_models=0"),
    (lambda: bl.mc_dropout(_softmax_net(), 0), ValueError,
     "Expected a positive integer. Received: num_samples=0"),
    (lambda: bl.mean_predictive(tf.zeros([5, 3]), 2), ValueError,
     "Expected a batch size divisible by ensemble_size. Received: batch size 5, "
     "ensemble_size=2"),
    (lambda: bl.mean_predictive(tf.zeros([4, 3]), 2, output="softmax"), ValueError,
     "Received: output='softmax'"),
    (lambda: bl.EnsembleModel(_softmax_net(), 2), ValueError,
     "pass output='probabilities'. Received: output='logits'"),
    (lambda: bl.EnsembleModel("model", 2), TypeError, "Received: model='model'"),
    (lambda: bl.DeepEnsemble([]), ValueError, "Received: members=[]"),
    (lambda: bl.deep_ensemble(lambda: keras.Sequential([keras.layers.Dense(2)]), 2, seed=0),
     ValueError, "Expected build_fn to return a built model"),
    (lambda: bl.mc_dropout(_softmax_net(), 4, output="probabilities"), ValueError,
     "Expected a model with Dropout layers"),
    (lambda: bl.tile_batch(tf.constant(1.0), 2), ValueError, "Expected inputs with a batch"),
])
def test_bad_input_is_one_line(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def _attention_net(size):
    inputs = keras.Input((4, 6))
    outputs = bl.MultiHeadAttentionRank1(2, 3, ensemble_size=size, seed=0)(inputs, inputs)
    return keras.Model(inputs, keras.layers.Flatten()(outputs))


#: Models whose ensemble layer (``name``) holds ``size`` members, and their inputs' shape.
OTHER_SIZE_NETS = {
    "DenseRank1": (lambda size: keras.Sequential([
        keras.Input((5,)), keras.layers.Dense(4),
        bl.DenseRank1(3, ensemble_size=size, seed=0, name="rank1")]), (5,)),
    "DenseBatchEnsemble": (lambda size: keras.Sequential([
        keras.Input((5,)), bl.DenseBatchEnsemble(3, ensemble_size=size, name="batch_ens")]),
        (5,)),
    "Conv1DRank1": (lambda size: keras.Sequential([
        keras.Input((6, 2)), bl.Conv1DRank1(3, 2, ensemble_size=size, seed=0, name="conv"),
        keras.layers.Flatten()]), (6, 2)),
    "LSTMCellRank1": (lambda size: keras.Sequential([
        keras.Input((6, 2)), keras.layers.RNN(bl.LSTMCellRank1(3, ensemble_size=size, seed=0,
                                                               name="cell"))]), (6, 2)),
    "MultiHeadAttentionRank1": (_attention_net, (4, 6)),
}


@pytest.mark.parametrize("kind", list(OTHER_SIZE_NETS))
def test_ensemble_layers_of_another_ensemble_size_are_refused(kind):
    """``EnsembleModel(inner, 3)`` with inner ensemble layers of 4 members would give every
    member's rows to the wrong member (silently when the tiled batch divides by 4): one
    line naming the layer and both sizes, at construction."""
    make, shape = OTHER_SIZE_NETS[kind]
    assert bl.EnsembleModel(make(3), 3)(np.zeros((2, *shape), "float32")).shape[0] == 2
    with pytest.raises(ValueError) as info:
        bl.EnsembleModel(make(4), 3)
    message = str(info.value)
    assert message.startswith("Expected the model's ensemble layers to have ensemble_size=3 "
                              "(EnsembleModel's). Received: layer=") and message.endswith(
                                  " with ensemble_size=4") and "\n" not in message, message


def test_ensemble_size_of_an_unbuilt_model_is_checked_at_the_first_call():
    """A model whose layers are made when it is first called (a subclassed model here): the
    first call, the first fit step and ``predict`` refuse it, whatever the batch."""

    class Net(keras.Model):
        def __init__(self, size):
            super().__init__()
            self.size = size

        def build(self, input_shape):
            self.head = bl.DenseBatchEnsemble(3, ensemble_size=self.size, name="late")
            super().build(input_shape)

        def call(self, x):
            return self.head(x)

    assert bl.EnsembleModel(Net(3), 3)(np.zeros((4, 5), "float32")).shape == (4, 3)
    message = ("Expected the model's ensemble layers to have ensemble_size=3 (EnsembleModel's). "
               "Received: layer='late' with ensemble_size=4")
    for batch in (12, 8):
        with pytest.raises(ValueError) as info:
            bl.EnsembleModel(Net(4), 3)(np.zeros((batch, 5), "float32"))
        assert str(info.value).endswith(message), str(info.value)
    model = bl.EnsembleModel(Net(4), 3)
    model.compile("sgd", LOGITS_LOSS)
    with pytest.raises(ValueError, match=re.escape(message)):
        model.fit(np.zeros((12, 5), "float32"), _labels(12, classes=3), batch_size=12,
                  verbose=0)


def test_ensemble_size_is_checked_again_when_a_model_is_loaded(tmp_path):
    """A config or ``.keras`` file whose EnsembleModel size is not its layers' (written by hand
    or by a version that did not check) is refused when it is loaded."""
    model = bl.EnsembleModel(_batch_ensemble_net(), E)
    model(normal_array(2, 5))
    config = model.get_config()
    with pytest.raises(ValueError, match=r"ensemble_size=2 \(EnsembleModel's\)\. Received: "
                                         r"layer='dense_batch_ensemble(_\d+)?' with "
                                         r"ensemble_size=3$"):
        bl.EnsembleModel.from_config(dict(config, ensemble_size=2))
    path = tmp_path / "ensemble.keras"
    model.save(path)
    damaged = edited_keras_file(path, tmp_path / "damaged.keras",
                                lambda saved: saved["config"].update(ensemble_size=2))
    with pytest.raises((ValueError, TypeError), match=r"ensemble_size=2 \(EnsembleModel's\)"):
        keras.models.load_model(damaged)


def test_a_model_without_ensemble_layers_is_refused_but_not_by_monte_carlo():
    """Without ensemble layers the E members would be E copies of one network."""
    plain = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)], name="plain")
    with pytest.raises(ValueError) as info:
        bl.EnsembleModel(plain, E)
    assert str(info.value) == (
        "Expected a model with ensemble layers (an ensemble_size attribute: DenseRank1, "
        "DenseBatchEnsemble, ...), else its members are identical. Received: model='plain' "
        "without any"), str(info.value)
    assert bl.MonteCarloModel(plain, E)(normal_array(2, 5)).shape == (2, 3)


def test_batch_not_divisible_inside_a_graph_is_checked_at_run_time():
    fn = tf.function(lambda t: bl.mean_predictive(t, 2),
                     input_signature=[tf.TensorSpec([None, 3])])
    with pytest.raises(tf.errors.InvalidArgumentError, match="divisible by ensemble_size=2"):
        fn(tf.zeros([5, 3]))


# --- dtypes -------------------------------------------------------------------------------


def test_float64_ensemble_and_mc_dropout():
    x = tf.constant(normal_array(4, 5), tf.float64)
    net = keras.Sequential([keras.Input((5,), dtype="float64"),
                            bl.DenseBatchEnsemble(3, ensemble_size=2, dtype="float64"),
                            bl.MCDropout(0.2, seed=0, dtype="float64")])
    out = bl.EnsembleModel(net, 2)(x)
    assert out.dtype == tf.float64 and np.all(np.isfinite(out.numpy()))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_fit_and_float32_predictive(policy):
    with global_policy(policy):
        inner = keras.Sequential([keras.Input((5,)), bl.DenseBatchEnsemble(8, "relu",
                                                                           ensemble_size=2),
                                  bl.MCDropout(0.2, seed=0), bl.DenseBatchEnsemble(
                                      4, ensemble_size=2)])
        compute = keras.mixed_precision.global_policy().compute_dtype
        assert inner(normal_array(4, 5)).dtype == compute
        model = bl.EnsembleModel(inner, 2)
        model.compile(keras.optimizers.Adam(1e-3), LOGITS_LOSS)
        history = model.fit(normal_array(4, 5), _labels(4), batch_size=4, epochs=2, verbose=0)
        out = model(normal_array(4, 5))
    assert np.all(np.isfinite(history.history["loss"]))
    assert out.dtype == tf.float32 and np.all(np.isfinite(out.numpy()))
    assert all(v.dtype == tf.float32 for v in model.trainable_variables)
