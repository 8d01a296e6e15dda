"""Hyper-BatchEnsemble layers (`DenseHyperBatchEnsemble`, `Conv2DHyperBatchEnsemble`).

The contract harness on the three inputs; every row against numpy with its own kernel
``W ∘ α γᵀ + e1 ∘ W' ∘ α' γ'ᵀ`` and bias; the L2 penalty against the per-row sum it
stands for; tied fast weights; bad input.
"""

import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet.layers.testing import normal_array, run_layer_test

E, N = 3, 4  # members, rows per member


def _inputs(data_shape, out_channels, columns=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((E * N, *data_shape)).astype(np.float32)
    hyperparameters = rng.uniform(0.1, 1.0, (E * N, columns)).astype(np.float32)
    embedding = rng.standard_normal((E * N, 2 * out_channels)).astype(np.float32)
    return [x, hyperparameters, embedding]


def _layer(cls, **kwargs):
    # Random fast weights and biases, so that every term shows in the outputs.
    init = {"alpha_initializer": "glorot_uniform", "gamma_initializer": "glorot_uniform",
            "bias_initializer": "glorot_uniform"}
    if cls is bl.DenseHyperBatchEnsemble:
        return cls(5, ensemble_size=E, **init, **kwargs)
    return cls(4, 3, padding="same", ensemble_size=E, **init, **kwargs)


def _row_kernels(layer, row, embedding, fast=True):
    """Row ``row``'s two kernels (numpy), as the module docstring defines them."""
    member = row // N
    kernel, hyper = np.asarray(layer.kernel), np.asarray(layer.hyper_kernel)
    if fast:
        kernel = kernel * np.asarray(layer.alpha)[member][:, None] * \
            np.asarray(layer.gamma)[member]
        hyper = hyper * np.asarray(layer.hyper_alpha)[member][:, None] * \
            np.asarray(layer.hyper_gamma)[member]
    out = kernel.shape[-1]
    return kernel, hyper * embedding[row, :out]


def _row_bias(layer, row, embedding):
    member, out = row // N, np.asarray(layer.bias).shape[-1]
    return (np.asarray(layer.bias)[member]
            + np.asarray(layer.hyper_bias)[member] * embedding[row, out:])


@pytest.mark.parametrize("cls, data_shape, out_shape", [
    (bl.DenseHyperBatchEnsemble, (4,), (E * N, 5)),
    (bl.Conv2DHyperBatchEnsemble, (5, 6, 2), (E * N, 5, 6, 4)),
])
def test_contract(cls, data_shape, out_shape):
    # kernel, α, γ, W', α', γ', b, b'; one loss (the penalty).
    out = out_shape[-1]
    kwargs = {"units": out} if cls is bl.DenseHyperBatchEnsemble else {
        "filters": out, "kernel_size": 3, "padding": "same"}
    # (The harness saves one-input models; test_save_and_load saves a three-input one.)
    run_layer_test(cls, {**kwargs, "ensemble_size": E, "activation": "relu"},
                   input_data=_inputs(data_shape, out), expected_output_shape=out_shape,
                   expected_num_trainable_weights=8, expected_num_non_trainable_weights=0,
                   expected_num_losses=1, run_save=False)


@pytest.mark.parametrize("name", ["m.keras", "m.h5"])
def test_save_and_load(name):
    data = _inputs((5, 6, 2), 4)
    inputs = [bl.keras.Input(shape=d.shape[1:], batch_size=E * N) for d in data]
    layer = bl.Conv2DHyperBatchEnsemble(4, 3, ensemble_size=E, name="hyper")
    model = bl.keras.Model(inputs, layer(inputs))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        model.save(path)
        loaded = bl.keras.models.load_model(path)
    assert isinstance(loaded.get_layer("hyper"), bl.Conv2DHyperBatchEnsemble)
    assert loaded.get_layer("hyper").get_config() == layer.get_config()
    np.testing.assert_allclose(loaded(data).numpy(), model(data).numpy(), rtol=1e-6)
    np.testing.assert_allclose(float(loaded.losses[0]), float(model.losses[0]), rtol=1e-6)


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("shared", [False, True])
def test_dense_rows_against_numpy(use_bias, shared):
    layer = _layer(bl.DenseHyperBatchEnsemble, use_bias=use_bias, shared_fast_weights=shared)
    x, hyperparameters, embedding = _inputs((4,), 5)
    outputs = layer([x, hyperparameters, embedding]).numpy()
    for row in range(E * N):
        kernel, hyper = _row_kernels(layer, row, embedding)
        expected = x[row] @ (kernel + hyper)
        if use_bias:
            expected += _row_bias(layer, row, embedding)
        np.testing.assert_allclose(outputs[row], expected, rtol=1e-5, atol=1e-5)
    if shared:
        assert layer.hyper_alpha is layer.alpha and layer.hyper_gamma is layer.gamma
        assert len(layer.trainable_weights) == (6 if use_bias else 4)


def test_conv_rows_against_numpy():
    layer = _layer(bl.Conv2DHyperBatchEnsemble)
    x, hyperparameters, embedding = _inputs((5, 6, 2), 4)
    outputs = layer([x, hyperparameters, embedding]).numpy()
    for row in range(E * N):
        kernel, hyper = _row_kernels(layer, row, embedding)
        expected = tf.nn.conv2d(x[row:row + 1], kernel + hyper, 1, "SAME").numpy()[0]
        expected += _row_bias(layer, row, embedding)
        np.testing.assert_allclose(outputs[row], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", [bl.DenseHyperBatchEnsemble, bl.Conv2DHyperBatchEnsemble])
@pytest.mark.parametrize("fast", [True, False])
def test_penalty_is_the_mean_of_the_rows_l2(cls, fast):
    layer = _layer(cls, regularize_fast_weights=fast, l2_kernel_index=2, l2_bias_index=0)
    data_shape = (4,) if cls is bl.DenseHyperBatchEnsemble else (5, 6, 2)
    out = 5 if cls is bl.DenseHyperBatchEnsemble else 4
    x, hyperparameters, embedding = _inputs(data_shape, out, columns=3)
    layer([x, hyperparameters, embedding])
    expected = 0.0
    for row in range(E * N):
        kernel, hyper = _row_kernels(layer, row, embedding, fast)
        expected += hyperparameters[row, 2] * np.sum((kernel + hyper) ** 2)
        expected += hyperparameters[row, 0] * np.sum(_row_bias(layer, row, embedding) ** 2)
    expected /= E * N
    assert len(layer.losses) == 1
    np.testing.assert_allclose(float(layer.losses[0]), expected, rtol=1e-5)
    np.testing.assert_allclose(float(layer.l2_penalty(hyperparameters, embedding)), expected,
                               rtol=1e-5)


def test_zero_embedding_is_the_batch_ensemble():
    # e = 0: the layer is the BatchEnsemble layer on (W, α, γ, b).
    layer = _layer(bl.DenseHyperBatchEnsemble)
    x, hyperparameters, embedding = _inputs((4,), 5)
    outputs = layer([x, hyperparameters, np.zeros_like(embedding)]).numpy()
    twin = bl.DenseBatchEnsemble(5, ensemble_size=E)
    twin(x)
    twin.set_weights([np.asarray(w) for w in (layer.kernel, layer.alpha, layer.gamma,
                                              layer.bias)])
    np.testing.assert_allclose(outputs, twin(x).numpy(), rtol=1e-5, atol=1e-6)


def test_same_seeded_initializers_same_layer():
    x = _inputs((4,), 5)
    outs = []
    for _ in range(2):
        init = bl.keras.initializers.GlorotUniform(seed=3)
        layer = bl.DenseHyperBatchEnsemble(5, ensemble_size=E, kernel_initializer=init)
        layer(x)
        outs.append(np.asarray(layer.kernel))
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(np.asarray(layer.kernel), np.asarray(layer.hyper_kernel))


@pytest.mark.parametrize("inputs, message", [
    (lambda: normal_array(6, 4), "takes three inputs"),
    (lambda: _inputs((4,), 4), "Expected an embedding of width 10"),
    (lambda: _inputs((4,), 5, columns=1), "Expected at least 2 hyperparameter columns"),
    (lambda: [normal_array(7, 4), *_inputs((4,), 5)[1:]], "divisible by ensemble_size"),
])
def test_bad_inputs(inputs, message):
    layer = bl.DenseHyperBatchEnsemble(5, ensemble_size=E)
    with pytest.raises(ValueError, match=message):
        layer(inputs())


@pytest.mark.parametrize("kwargs, message", [
    ({"units": 0}, "Expected a positive integer. Received: units=0"),
    ({"units": 2, "ensemble_size": 0}, "Received: ensemble_size=0"),
    ({"units": 2, "l2_kernel_index": -1}, "Received: l2_kernel_index=-1"),
    ({"units": 2, "kernel_initializer": "trainable_normal"}, "point-estimate initializer"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bl.DenseHyperBatchEnsemble(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"padding": "causal"}, "Expected padding 'valid' or 'same'"),
    ({"data_format": "channels_first"}, "Expected data_format='channels_last'"),
    ({"kernel_size": (3, 0)}, "Received: kernel_size=\\(3, 0\\)"),
])
def test_bad_conv_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bl.Conv2DHyperBatchEnsemble(**{"filters": 2, "kernel_size": 3, **kwargs})
