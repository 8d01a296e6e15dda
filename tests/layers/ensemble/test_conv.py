"""Rank-1 (`Conv1DRank1`, `Conv2DRank1`) and BatchEnsemble (`Conv1DBatchEnsemble`,
`Conv2DBatchEnsemble`) convolutions.

The contract harness; each member against ``tf.nn.convolution`` with the kernel scaled by
the member's α (input channels) and γ (output channels) at their posterior means; the
noise per example and per member; the KL against tfp's closed form; bad input; the
float64 and mixed-precision dtypes.
"""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet import layer_registry
from bayes_planet._keras import keras
from bayes_planet.layers.testing import (
    check_batch_checked_at_run_time,
    check_mixed_precision_fit,
    factor_means,
    global_policy,
    normal_array,
    normal_kl,
    run_layer_test,
    wide_factors,
)

CONVS = [bl.Conv1DRank1, bl.Conv2DRank1, bl.Conv1DBatchEnsemble, bl.Conv2DBatchEnsemble]
RANK1 = (bl.Conv1DRank1, bl.Conv2DRank1)


def _spatial(cls):
    return (7,) if issubclass(cls, keras.layers.Conv1D) else (6, 5)


def _means(layer):
    return bl.posterior_mean(layer) if isinstance(layer, RANK1) else contextlib.nullcontext()


def test_registered_as_their_own_families():
    assert layer_registry.estimators("conv1d_ensemble") == ("deterministic", "rank1",
                                                           "batch_ensemble")
    assert layer_registry.estimators("conv2d_ensemble") == ("deterministic", "rank1",
                                                           "batch_ensemble")
    assert layer_registry.get("conv1d_ensemble", "rank1") is bl.Conv1DRank1
    assert layer_registry.get("conv1d_ensemble", "batch_ensemble") is bl.Conv1DBatchEnsemble
    assert layer_registry.get("conv2d_ensemble", "rank1") is bl.Conv2DRank1
    assert layer_registry.get("conv2d_ensemble", "batch_ensemble") is bl.Conv2DBatchEnsemble
    assert layer_registry.get("conv2d_ensemble", "deterministic") is keras.layers.Conv2D
    # Not estimators of 'conv2d': its readers (the uncertainty benchmark) feed plain batches.
    assert "rank1" not in layer_registry.estimators("conv2d")


@pytest.mark.parametrize("cls, trainable, non_trainable, losses", [
    (bl.Conv1DRank1, 6, 1, 2),  # kernel, α/γ (mean, stddev), bias; seed counter; KL α, γ
    (bl.Conv2DRank1, 6, 1, 2),
    (bl.Conv1DBatchEnsemble, 4, 0, 0),  # kernel, α, γ, bias
    (bl.Conv2DBatchEnsemble, 4, 0, 0),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_contract(cls, trainable, non_trainable, losses):
    spatial = _spatial(cls)
    out_spatial = tuple(s - 2 for s in spatial)
    run_layer_test(cls, {"filters": 3, "kernel_size": 3, "activation": "relu"},
                   (8, *spatial, 2), expected_output_shape=(8, *out_spatial, 3),
                   expected_num_trainable_weights=trainable,
                   expected_num_non_trainable_weights=non_trainable,
                   expected_num_losses=losses)


@pytest.mark.parametrize("cls, kwargs, input_shape, output_shape", [
    (bl.Conv1DRank1, {"padding": "causal", "dilation_rate": 2, "use_bias": False},
     (4, 7, 2), (4, 7, 3)),
    (bl.Conv2DRank1, {"strides": 2, "padding": "same", "sampling": "per_member"},
     (4, 6, 5, 2), (4, 3, 3, 3)),
    (bl.Conv2DBatchEnsemble, {"strides": 2, "padding": "same", "use_bias": False},
     (4, 6, 5, 2), (4, 3, 3, 3)),
], ids=["Conv1DRank1-causal", "Conv2DRank1-per_member", "Conv2DBatchEnsemble-no_bias"])
def test_contract_variants(cls, kwargs, input_shape, output_shape):
    run_layer_test(cls, {"filters": 3, "kernel_size": 3, "ensemble_size": 2, **kwargs},
                   input_shape, expected_output_shape=output_shape, run_save=False)


def _reference_member(x, kernel, alpha, gamma, bias, *, strides, padding, dilation):
    """``conv(x, W ∘ α[:, None] ∘ γ[None, :]) + b`` by ``tf.nn.convolution``."""
    if padding == "causal":  # Conv1D: left-pad by the dilated kernel's reach, then 'valid'.
        reach = dilation[0] * (kernel.shape[0] - 1)
        x = np.pad(x, [(0, 0), (reach, 0), (0, 0)])
        padding = "valid"
    scaled = kernel * alpha[:, None] * gamma[None, :]  # over the (in, out) channel axes
    out = tf.nn.convolution(x, scaled, strides=strides, padding=padding.upper(),
                            dilations=dilation).numpy()
    return out if bias is None else out + bias


@pytest.mark.parametrize("cls, kwargs", [
    (bl.Conv1DRank1, {"padding": "causal", "dilation_rate": 2}),
    (bl.Conv1DRank1, {"strides": 2}),
    (bl.Conv2DRank1, {"padding": "same"}),
    (bl.Conv2DRank1, {"strides": 2}),
    (bl.Conv1DBatchEnsemble, {"padding": "causal", "dilation_rate": 2}),
    (bl.Conv2DBatchEnsemble, {"dilation_rate": 2, "padding": "same"}),
    (bl.Conv2DBatchEnsemble, {"use_bias": False}),
], ids=lambda v: getattr(v, "__name__", None) or "-".join(f"{k}={w}" for k, w in v.items()))
@pytest.mark.parametrize("ensemble_size", [1, 3])
def test_block_e_is_the_convolution_with_member_e_kernel(cls, kwargs, ensemble_size):
    """Output block e is the plain convolution with the kernel scaled by α_e on its input
    channels and γ_e on its output channels, plus b_e (α, γ at their posterior means)."""
    rows = 2
    x = normal_array(ensemble_size * rows, *_spatial(cls), 3, seed=1)
    layer = cls(4, 3, ensemble_size=ensemble_size, bias_initializer="random_normal", **kwargs)
    layer.build(x.shape)
    with _means(layer):
        out = layer(x).numpy()
    alpha, gamma = factor_means(layer)
    kernel = layer.kernel.numpy()
    bias = layer.bias.numpy() if layer.use_bias else None
    assert np.ptp(alpha) > 0 and np.ptp(gamma) > 0  # members differ
    strides, dilation = layer.strides, layer.dilation_rate
    for e in range(ensemble_size):
        expected = _reference_member(x[e * rows:(e + 1) * rows], kernel, alpha[e], gamma[e],
                                     None if bias is None else bias[e], strides=strides,
                                     padding=layer.padding, dilation=dilation)
        np.testing.assert_allclose(out[e * rows:(e + 1) * rows], expected, rtol=1e-5,
                                   atol=1e-5)


def test_rank1_additive_perturbation():
    """``use_additive_perturbation=True``: block e is ``conv(x + α_e, W) + γ_e + b_e`` (the
    'same' padding pads the perturbed input with zeros)."""
    x = normal_array(4, 5, 5, 2, seed=4)
    layer = bl.Conv2DRank1(3, 3, padding="same", ensemble_size=2, seed=0,
                           use_additive_perturbation=True, bias_initializer="random_normal")
    layer.build(x.shape)
    with bl.posterior_mean(layer):
        out = layer(x).numpy()
    alpha, gamma = factor_means(layer)
    kernel, bias = layer.kernel.numpy(), layer.bias.numpy()
    for e in range(2):
        expected = tf.nn.convolution(x[2 * e:2 * e + 2] + alpha[e], kernel, padding="SAME")
        np.testing.assert_allclose(out[2 * e:2 * e + 2], expected + gamma[e] + bias[e],
                                   rtol=1e-5, atol=1e-5)


def test_channels_first_equals_channels_last():
    """``data_format='channels_first'`` scales the channel axis 1 (XLA: the CPU convolution
    kernels are channels-last only)."""
    x = normal_array(4, 5, 5, 2, seed=5)
    last = bl.Conv2DBatchEnsemble(3, 3, ensemble_size=2, bias_initializer="random_normal")
    first = bl.Conv2DBatchEnsemble(3, 3, ensemble_size=2, data_format="channels_first")
    x_first = np.transpose(x, [0, 3, 1, 2])
    last.build(x.shape)
    first.build(x_first.shape)
    first.set_weights(last.get_weights())
    out = tf.function(first, jit_compile=True)(x_first)
    np.testing.assert_allclose(np.transpose(out, [0, 2, 3, 1]), last(x), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("cls", RANK1)
def test_rank1_noise_per_example_and_per_member(cls):
    """Per example (default): rows of one member differ by their draws of α, γ; per member:
    a member's rows share one draw, redrawn at the next call; the mean call is exact."""
    one = normal_array(1, *_spatial(cls), 2, seed=2)
    x = np.tile(one, [8] + [1] * (one.ndim - 1))  # one example: rows differ by noise only
    noisy = {}
    for sampling in ("per_example", "per_member"):
        layer = cls(4, 3, ensemble_size=2, seed=0, sampling=sampling, **wide_factors(["alpha"]))
        noisy[sampling] = layer(x).numpy(), layer(x).numpy()
        with bl.posterior_mean(layer):
            mean = layer(x).numpy()
        np.testing.assert_allclose(mean[:4], np.tile(mean[:1], [4] + [1] * (x.ndim - 1)),
                                   rtol=1e-6)
        assert not np.allclose(mean[0], mean[4])  # the two members differ
    first, second = noisy["per_example"]
    assert not np.allclose(first[0], first[1])  # same member and input, different draws
    first, second = noisy["per_member"]
    np.testing.assert_array_equal(first[:4], np.tile(first[:1], [4] + [1] * (x.ndim - 1)))
    assert not np.allclose(first[0], first[4]) and not np.allclose(first[0], second[0])


@pytest.mark.parametrize("cls", RANK1)
def test_rank1_kl_is_the_closed_form_to_n_1_0_1(cls):
    layer = cls(4, 3, ensemble_size=3, seed=0, alpha_regularizer="rank1_normal_kl_divergence",
                gamma_regularizer="rank1_normal_kl_divergence")
    layer(normal_array(6, *_spatial(cls), 5))
    expected = normal_kl([layer.alpha, layer.gamma], 1.0, 0.1)
    assert [w.weight_shape.as_list() for w in (layer.alpha, layer.gamma)] == [[3, 5], [3, 4]]
    np.testing.assert_allclose([float(v) for v in layer.losses], expected, rtol=1e-5)
    assert all(k > 0 for k in expected)
    default = cls(4, 3, ensemble_size=3, seed=0)  # the sign-mixture bound
    default(normal_array(6, *_spatial(cls), 5))
    prior = bl.Rank1SignMixtureKLDivergence()
    np.testing.assert_allclose([float(v) for v in default.losses],
                               [float(prior(default.alpha)), float(prior(default.gamma))],
                               rtol=1e-5)


def test_rank1_noise_is_seeded():
    x = normal_array(8, 6, 5, 2, seed=3)
    a, b, c = (bl.Conv2DRank1(3, 3, seed=seed) for seed in (1, 1, 2))
    for layer in (a, b, c):
        layer.build(x.shape)
        layer.set_weights(a.get_weights())  # the same weights: only the seeds differ
    out_a, out_b, out_c = a(x).numpy(), b(x).numpy(), c(x).numpy()
    np.testing.assert_array_equal(out_a, out_b)
    assert not np.allclose(out_a, out_c)
    with bl.fixed_noise(a, [4, 5]):
        np.testing.assert_array_equal(a(x).numpy(), a(x).numpy())


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match=r"^Expected a positive integer\. "
                                         r"Received: ensemble_size=0$"):
        bl.Conv2DRank1(3, 3, ensemble_size=0)
    with pytest.raises(ValueError, match=r"^Expected a positive integer\. Received: filters=0$"):
        bl.Conv2DBatchEnsemble(0, 3)
    with pytest.raises(ValueError, match=r"^Expected groups=1\. Received: groups=2$"):
        bl.Conv1DRank1(4, 3, groups=2)
    with pytest.raises(ValueError, match=r"^Expected sampling in \['per_example', "
                                         r"'per_member'\]\. Received: sampling='per_row'$"):
        bl.Conv2DRank1(3, 3, sampling="per_row")
    with pytest.raises(ValueError, match=r"Expected a batch size divisible by ensemble_size\. "
                                         r"Received: batch size 6, ensemble_size=4"):
        bl.Conv2DRank1(3, 3)(tf.zeros([6, 5, 5, 2]))
    with pytest.raises(ValueError, match=r"Received: batch size 3, ensemble_size=2"):
        bl.Conv1DRank1(3, 3, ensemble_size=2)(tf.zeros([3, 5, 2]))
    with pytest.raises(ValueError, match=r"Received: kernel_initializer='trainable_normal'$"):
        bl.Conv2DRank1(3, 3, kernel_initializer="trainable_normal")
    with pytest.raises(ValueError, match=r"Received: alpha_initializer='trainable_normal'$"):
        bl.Conv2DBatchEnsemble(3, 3, alpha_initializer="trainable_normal")
    with pytest.raises(ValueError, match=r"Received: gamma_initializer='trainable_normal'$"):
        bl.Conv1DBatchEnsemble(3, 3, gamma_initializer="trainable_normal")
    with pytest.raises(ValueError, match=r"^Expected groups=1\. Received: groups=3$"):
        bl.Conv1DBatchEnsemble(3, 3, groups=3)


@pytest.mark.parametrize("cls", CONVS)
def test_unknown_batch_size_is_checked_at_run_time(cls):
    check_batch_checked_at_run_time(cls(3, 3, ensemble_size=4), [*_spatial(cls), 2], 4)


@pytest.mark.parametrize("cls", CONVS)
def test_mixed_float16(cls):
    spatial = _spatial(cls)
    with global_policy("mixed_float16"):
        model = keras.Sequential([keras.Input((*spatial, 2)),
                                  cls(4, 3, activation="relu", padding="same"),
                                  cls(2, 3, padding="same")])
        check_mixed_precision_fit(model, normal_array(8, *spatial, 2),
                                  normal_array(8, *spatial, 2, seed=1))
