"""Rank-1 attention (`EinsumDenseRank1`, `MultiHeadAttentionRank1`) and rank-1 Transformers.

The contract harness; member semantics against the Keras layers with the kernels scaled
by the factors' means; per-example draws shared by an example's positions; the KL
against tfp's closed form; bad input; the Transformer's ``'rank1'`` choices; mixed
precision (float64 is in test_float64.py).
"""

import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet import layer_registry
from bayes_planet._keras import keras
from bayes_planet.layers.ensemble.dense import Rank1CauchyKLDivergence, TrainableRandomSignCauchy
from bayes_planet.layers.testing import (
    SelfAttention,
    check_batch_checked_at_run_time,
    check_gradients,
    global_policy,
    normal_array,
    normal_kl,
    run_layer_test,
    wide_factors,
)

PROJECTIONS = ("_query_dense", "_key_dense", "_value_dense", "_output_dense")


def _member_kernel(layer, e):
    """The kernel of member e: ``W`` scaled by α_e on its contracted axes and γ_e on its
    output axes (the factors' posterior means)."""
    kernel = layer.kernel.numpy()
    n_in = layer._plan[0]
    alpha = layer.alpha.loc().numpy()[e].reshape(*kernel.shape[:n_in], *[1] * (kernel.ndim - n_in))
    gamma = layer.gamma.loc().numpy()[e].reshape(kernel.shape[n_in:])
    return kernel * alpha * gamma


def _randomize_biases(layers, seed=1):
    rng = np.random.default_rng(seed)
    for layer in layers:
        layer.bias.assign(rng.standard_normal(layer.bias.shape) * 0.5)


def test_registered_as_their_own_families():
    assert layer_registry.estimators("einsum_dense_ensemble") == ("deterministic", "rank1")
    assert layer_registry.get("einsum_dense_ensemble", "rank1") is bl.EinsumDenseRank1
    assert (layer_registry.get("multi_head_attention_ensemble", "rank1")
            is bl.MultiHeadAttentionRank1)
    assert "rank1" not in layer_registry.estimators("multi_head_attention")


# Contract ------------------------------------------------------------------------------

@pytest.mark.parametrize("equation, shape, output_shape, bias_axes, out", [
    ("abc,cde->abde", (4, 5, 6), (None, 2, 3), "de", (4, 5, 2, 3)),  # a q/k/v projection
    ("abcd,cde->abe", (4, 5, 2, 3), (None, 6), "e", (4, 5, 6)),  # the output projection
    ("...b,bc->...c", (4, 5), 3, None, (4, 3)),
], ids=["qkv", "output", "ellipsis-no-bias"])
def test_einsum_dense_contract(equation, shape, output_shape, bias_axes, out):
    # kernel, bias, α and γ (mean, stddev); seed counter; KL of α and γ.
    run_layer_test(bl.EinsumDenseRank1, {"equation": equation, "output_shape": output_shape,
                                         "bias_axes": bias_axes, "ensemble_size": 2},
                   shape, expected_output_shape=out,
                   expected_num_trainable_weights=6 if bias_axes else 5,
                   expected_num_non_trainable_weights=1, expected_num_losses=2)


def test_mha_contract():
    attention = keras.saving.serialize_keras_object(
        bl.MultiHeadAttentionRank1(num_heads=2, key_dim=3, ensemble_size=2, seed=4))
    run_layer_test(SelfAttention, {"attention": attention}, (4, 5, 8),
                   expected_output_shape=(4, 5, 8), expected_num_trainable_weights=24,
                   expected_num_non_trainable_weights=4, expected_num_losses=8)


@pytest.mark.slow
def test_transformer_block_contract():
    # Attention: 4 projections x (α, γ) KL terms; feed-forward: 2 DenseRank1 x (α, γ).
    run_layer_test(bl.TransformerBlock, {"num_heads": 2, "key_dim": 4, "ff_dim": 16,
                                         "attention": "rank1", "feed_forward": "rank1",
                                         "ensemble_size": 2},
                   (4, 5, 8), expected_output_shape=(4, 5, 8), expected_num_losses=12)


# Members -------------------------------------------------------------------------------

@pytest.mark.parametrize("equation, shape, output_shape, bias_axes", [
    ("abc,cde->abde", (6, 5, 4), (None, 2, 3), "de"),
    ("abcd,cde->abe", (6, 5, 2, 3), (None, 4), "e"),
])
@pytest.mark.parametrize("additive", [False, True])
def test_einsum_member_e_is_keras_einsum_dense_with_its_kernel(equation, shape, output_shape,
                                                               bias_axes, additive):
    """Inside `posterior_mean`, block e is ``EinsumDense`` with kernel ``W`` scaled by α_e
    and γ_e and bias b_e; with additive factors, ``einsum(x + α_e, W) + γ_e + b_e``."""
    members, rows = 3, 2
    x = normal_array(*shape)
    layer = bl.EinsumDenseRank1(equation, output_shape, bias_axes=bias_axes,
                                ensemble_size=members, use_additive_perturbation=additive)
    layer(x)
    _randomize_biases([layer])
    with bl.posterior_mean(layer):
        ours = layer(x).numpy()
    twin = keras.layers.EinsumDense(equation, output_shape, bias_axes=bias_axes)
    twin(x[:rows])
    n_in = layer._plan[0]
    for e in range(members):
        block = x[e * rows:(e + 1) * rows]
        if additive:
            alpha = layer.alpha.loc().numpy()[e].reshape(x.shape[-n_in:])
            gamma = layer.gamma.loc().numpy()[e].reshape(layer.kernel.shape[n_in:])
            twin.set_weights([layer.kernel.numpy(), layer.bias.numpy()[e]])
            expected = twin(block + alpha).numpy() + gamma
        else:
            twin.set_weights([_member_kernel(layer, e), layer.bias.numpy()[e]])
            expected = twin(block).numpy()
        np.testing.assert_allclose(ours[e * rows:(e + 1) * rows], expected, rtol=1e-5,
                                   atol=1e-5)


def test_mha_member_e_is_keras_mha_with_its_projections():
    """Inside `posterior_mean`, block e (with a mask) is ``keras.layers.MultiHeadAttention``
    whose four projections have member e's kernels and biases."""
    members, rows = 2, 2
    q, v = normal_array(members * rows, 5, 8), normal_array(members * rows, 4, 6, seed=1)
    mask = np.random.default_rng(2).random((members * rows, 5, 4)) > 0.3
    layer = bl.MultiHeadAttentionRank1(2, 3, ensemble_size=members, seed=0)
    layer(q, v)
    _randomize_biases([getattr(layer, attr) for attr in PROJECTIONS])
    with bl.posterior_mean(layer):
        ours, scores = layer(q, v, attention_mask=mask, return_attention_scores=True)
    twin = keras.layers.MultiHeadAttention(2, 3)
    twin(q[:rows], v[:rows])
    for e in range(members):
        for attr in PROJECTIONS:
            ensemble = getattr(layer, attr)
            getattr(twin, attr).set_weights([_member_kernel(ensemble, e),
                                             ensemble.bias.numpy()[e]])
        block = slice(e * rows, (e + 1) * rows)
        out, twin_scores = twin(q[block], v[block], attention_mask=mask[block],
                                return_attention_scores=True)
        np.testing.assert_allclose(ours[block], out, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(scores[block], twin_scores, rtol=1e-5, atol=1e-6)


# Sampling ------------------------------------------------------------------------------

def test_factors_are_drawn_per_example_and_shared_by_its_positions():
    """Every position of an example holds the same input: its outputs agree (one draw
    per example, shared by the sequence axis); identical examples of one member get
    different draws; `fixed_noise` repeats a draw; `posterior_mean` removes the noise."""
    row = np.repeat(normal_array(1, 1, 6), 5, axis=1)  # [1, 5 positions, 6], positions equal
    x = np.repeat(row, 4, axis=0)
    layer = bl.EinsumDenseRank1("abc,cd->abd", (None, 3), bias_axes="d", ensemble_size=2, seed=3,
                                **wide_factors())
    out = layer(x).numpy()
    np.testing.assert_allclose(out, np.repeat(out[:, :1], 5, axis=1), rtol=1e-6)
    assert np.abs(out[0] - out[1]).max() > 1e-3
    assert np.abs(layer(x).numpy() - out).max() > 1e-3  # a new draw per call
    with bl.fixed_noise(layer, [1, 2]):
        np.testing.assert_array_equal(layer(x), layer(x))
    with bl.posterior_mean(layer):
        mean = layer(x).numpy()
    np.testing.assert_allclose(mean[0], mean[1], rtol=1e-6)
    assert np.abs(mean[0] - mean[2]).max() > 1e-3  # the two members differ


@pytest.mark.parametrize("prior", [None, "rank1_normal_kl_divergence"])
def test_kl_is_the_closed_form_of_the_prior(prior):
    """Default: the sign-mixture bound; N(1, 0.1²): the normal KL in closed form."""
    kwargs = {} if prior is None else {"alpha_regularizer": prior, "gamma_regularizer": prior}
    layer = bl.MultiHeadAttentionRank1(2, 3, ensemble_size=2, seed=0, **kwargs)
    layer(normal_array(2, 4, 6), normal_array(2, 4, 6))
    factors = [getattr(getattr(layer, attr), name) for attr in PROJECTIONS
               for name in ("alpha", "gamma")]
    if prior is None:
        expected = sum(float(bl.Rank1SignMixtureKLDivergence()(w)) for w in factors)
    else:
        expected = sum(normal_kl(factors, 1.0, 0.1))
    np.testing.assert_allclose(float(tf.add_n(layer.losses)), expected, rtol=1e-5)
    assert len(layer.losses) == 8


def test_gradients_reach_every_parameter():
    layer = bl.MultiHeadAttentionRank1(2, 3, ensemble_size=2, seed=0)
    x = normal_array(4, 5, 6)
    layer(x, x)
    check_gradients(lambda: tf.reduce_sum(tf.square(layer(x, x))) + tf.add_n(layer.losses),
                    layer.trainable_variables)


# Bad input -----------------------------------------------------------------------------

def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match=r"^Expected a positive integer\. "
                                         r"Received: ensemble_size=0$"):
        bl.EinsumDenseRank1("ab,bc->ac", 3, ensemble_size=0)
    with pytest.raises(ValueError, match=r"Received: ensemble_size=-2$"):
        bl.MultiHeadAttentionRank1(2, 3, ensemble_size=-2)
    with pytest.raises(ValueError, match=r"Received: equation='ab,cd->abcd'$"):
        bl.EinsumDenseRank1("ab,cd->abcd", (3, 4))
    with pytest.raises(ValueError, match=r"Received: kernel_initializer='trainable_normal'$"):
        bl.MultiHeadAttentionRank1(2, 3, kernel_initializer="trainable_normal")
    with pytest.raises(ValueError, match=r"batch axis .* Received: input_shape=\(5,\)$"):
        bl.EinsumDenseRank1("b,bc->c", 3).build((5,))
    with pytest.raises(ValueError, match=r"Expected a batch size divisible by ensemble_size\. "
                                         r"Received: batch size 6, ensemble_size=4"):
        bl.MultiHeadAttentionRank1(2, 3)(tf.zeros([6, 2, 4]), tf.zeros([6, 2, 4]))
    out = check_batch_checked_at_run_time(bl.EinsumDenseRank1("abc,cd->abd", (None, 3)), [2, 5],
                                          4)
    assert out.shape == (8, 2, 3)
    with pytest.raises(ValueError, match=r"^ensemble_size needs an ensemble choice .*"
                                         r"Received: ensemble_size=2, attention='flipout', "
                                         r"feed_forward='flipout'$"):
        bl.TransformerBlock(2, 2, 4, feed_forward="flipout", ensemble_size=2)
    with pytest.raises(ValueError, match=r"Expected attention in \[.*'rank1'.*\]\. "
                                         r"Received: attention='batch_ensemble'$"):
        bl.TransformerBlock(2, 2, 4, attention="batch_ensemble")
    with pytest.raises(ValueError, match=r"^factor_initializer needs an ensemble choice .*"
                                         r"Received: factor_initializer='random_sign', "
                                         r"attention='flipout', feed_forward='flipout'$"):
        bl.TransformerBlock(2, 2, 4, feed_forward="flipout", factor_initializer="random_sign")


# Transformer -----------------------------------------------------------------------------

def test_rank1_transformer():
    """``attention='rank1', feed_forward='rank1'``: rank-1 sublayers with the block's
    ensemble size (no kernel prior handed to them), a deterministic ensemble inside
    `posterior_mean`, whose members differ (a Keras fit step: the block's contract)."""
    members = 2
    model = bl.build_transformer(7, 5, 7, d_model=8, num_heads=2, ff_dim=16, num_layers=1,
                                 attention="rank1", feed_forward="rank1",
                                 ensemble_size=members, seed=0,
                                 kernel_regularizer="scale_mixture_kl_divergence")
    block = model.get_layer("block_0")
    assert isinstance(block.attention_layer, bl.MultiHeadAttentionRank1)
    assert isinstance(block.ff_in, bl.DenseRank1)
    assert block.attention_layer.ensemble_size == block.ff_out.ensemble_size == members
    assert block.ff_in.kernel_regularizer is None  # the kernels are point estimates
    assert len(model.losses) == 12
    tokens = np.tile(np.random.default_rng(0).integers(0, 7, (3, 5)), [members, 1])
    with bl.posterior_mean(model):
        mean = model(tokens).numpy()
        np.testing.assert_array_equal(mean, model(tokens).numpy())
    assert np.abs(mean[:3] - mean[3:]).max() > 1e-3  # members differ on the same tokens
    assert np.abs(model(tokens).numpy() - model(tokens).numpy()).max() > 1e-4  # sampling
    mixed = bl.build_transformer(7, 5, 7, d_model=8, num_heads=2, ff_dim=16, num_layers=1,
                                 attention="flipout", feed_forward="batch_ensemble",
                                 ensemble_size=members, seed=0)
    assert isinstance(mixed.get_layer("block_0").ff_in, bl.DenseBatchEnsemble)
    assert len(mixed.losses) == 4  # the Flipout attention's kernels
    config = block.get_config()
    assert bl.TransformerBlock.from_config(config).get_config()["ensemble_size"] == members


def _factor_means(layer, kind):
    """The ``kind`` (alpha | gamma) posterior means of ``layer``'s rank-1 sublayers, by path."""
    # Keras 2: ".../alpha/mean:0"; Keras 3: ".../alpha/<initializer name>/mean".
    pattern = re.compile(rf"/{kind}/(.+/)?mean(:0)?$")
    return {getattr(w, "path", w.name): w.numpy().ravel() for w in layer.weights
            if pattern.search(getattr(w, "path", w.name))}


def _rank1_block(**kwargs):
    return bl.build_transformer(7, 5, 7, d_model=8, num_heads=2, ff_dim=8, num_layers=1,
                                attention="rank1", feed_forward="rank1", ensemble_size=2,
                                seed=0, **kwargs).get_layer("block_0")


def test_transformer_factor_initializer_reaches_every_ensemble_sublayer_and_reloads():
    """``factor_initializer`` is every rank-1 sublayer's α and γ (a fresh instance each):
    with the near-1 start every mean is ~ N(1, 0.5²) (moments over all entries, tolerance 4
    standard errors), against the default's random signs ±1; kept by the block's config."""
    keras.utils.set_random_seed(0)
    block = _rank1_block(factor_initializer="trainable_rank1_normal")
    default = _rank1_block()
    for kind in ("alpha", "gamma"):
        signs = _factor_means(default, kind)
        assert len(signs) == 6  # query, key, value, attention output, ff_in, ff_out
        signs = np.concatenate(list(signs.values()))
        np.testing.assert_array_equal(np.abs(signs), 1.0)
        assert 0.3 < np.mean(signs > 0) < 0.7
        values = np.concatenate(list(_factor_means(block, kind).values()))
        assert values.size == signs.size
        assert abs(values.mean() - 1.0) < 4 * 0.5 / np.sqrt(values.size)
        assert abs(values.std() - 0.5) < 4 * 0.5 / np.sqrt(2 * values.size)
    assert block.ff_in.alpha_initializer is not block.ff_out.alpha_initializer
    assert type(default.ff_in.alpha_initializer) is bl.TrainableRandomSignNormal
    config = block.get_config()
    assert config["factor_initializer"]["class_name"] == "TrainableRank1Normal"
    assert default.get_config()["factor_initializer"] is None
    reloaded = bl.TransformerBlock.from_config(config)
    reloaded.build((4, 5, 8))
    assert type(reloaded.ff_in.alpha_initializer) is bl.TrainableRank1Normal
    assert not np.any(np.abs(np.concatenate(list(_factor_means(reloaded, "gamma").values())))
                      == 1.0)


def test_transformer_factor_regularizer_reaches_every_ensemble_sublayer_and_reloads():
    """``factor_regularizer`` is every rank-1 sublayer's α and γ prior (a fresh instance
    each, so `set_dataset_size` reaches all), kept by the block's config; with the default
    random-sign factors the default sign-mixture prior costs far less than N(1, 0.1²)."""
    keras.utils.set_random_seed(0)
    block = _rank1_block(factor_regularizer="rank1_normal_kl_divergence")
    default = _rank1_block()
    for layer in (block.attention_layer, block.ff_in, block.ff_out):
        for kind in ("alpha", "gamma"):
            assert type(getattr(layer, f"{kind}_regularizer")) is bl.Rank1NormalKLDivergence
    for layer in (default.attention_layer, default.ff_in, default.ff_out):
        assert type(layer.alpha_regularizer) is bl.Rank1SignMixtureKLDivergence
    assert block.ff_in.alpha_regularizer is not block.ff_out.alpha_regularizer
    assert block.ff_in.alpha_regularizer is not block.ff_in.gamma_regularizer
    assert sum(float(loss) for loss in default.losses) * 20 < sum(
        float(loss) for loss in block.losses)
    config = block.get_config()
    assert config["factor_regularizer"]["class_name"] == "Rank1NormalKLDivergence"
    assert default.get_config()["factor_regularizer"] is None
    reloaded = bl.TransformerBlock.from_config(config)
    reloaded.build((4, 5, 8))
    assert type(reloaded.ff_out.gamma_regularizer) is bl.Rank1NormalKLDivergence


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    with global_policy(policy):
        model = bl.build_transformer(11, 6, 11, d_model=8, num_heads=2, ff_dim=16,
                                     num_layers=1, attention="rank1", feed_forward="rank1",
                                     ensemble_size=2, seed=1)
        tokens = np.random.default_rng(0).integers(0, 11, (4, 6))
        with tf.GradientTape() as tape:
            logits = model(tokens)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                tokens, logits, from_logits=True)) + tf.add_n(model.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        block = model.get_layer("block_0")
        compute = keras.mixed_precision.global_policy().compute_dtype
        assert block(tf.zeros([2, 6, 8], compute)).dtype == compute
        assert logits.dtype == tf.float32 and np.isfinite(loss)
        assert all(v.dtype == tf.float32 for v in model.trainable_variables)
        assert len(model.losses) == 12 and all(v.dtype == tf.float32 for v in model.losses)
        assert all(g is not None and np.all(np.isfinite(tf.cast(tf.convert_to_tensor(g),
                                                                tf.float32))) for g in grads)


def test_cauchy_factors():
    """``'trainable_cauchy'`` factors with their Cauchy(1, 0.1) prior on every projection:
    the KL is tfp's closed form, the outputs are finite, the config keeps them."""
    layer = bl.MultiHeadAttentionRank1(2, 3, ensemble_size=2, seed=0,
                                       alpha_initializer="trainable_cauchy",
                                       gamma_initializer="trainable_cauchy",
                                       alpha_regularizer="rank1_cauchy_kl_divergence",
                                       gamma_regularizer="rank1_cauchy_kl_divergence")
    x = normal_array(4, 5, 6)
    assert np.all(np.isfinite(layer(x, x)))
    factors = [getattr(getattr(layer, attr), name) for attr in PROJECTIONS
               for name in ("alpha", "gamma")]
    expected = sum(float(tf.reduce_sum(tfp.distributions.kl_divergence(
        tfp.distributions.Cauchy(w.loc(), w.scale()), tfp.distributions.Cauchy(1.0, 0.1))))
        for w in factors)
    np.testing.assert_allclose(float(tf.add_n(layer.losses)), expected, rtol=1e-5)
    config = bl.MultiHeadAttentionRank1.from_config(layer.get_config()).get_config()
    assert config["alpha_initializer"]["class_name"].endswith("TrainableRandomSignCauchy")


def test_transformer_takes_the_cauchy_factor_aliases_and_reloads_them():
    """The block resolves its factor settings as the rank-1 layers do, so the library's own
    ``'trainable_cauchy'`` / ``'rank1_cauchy_kl_divergence'`` aliases reach every ensemble
    sublayer (fresh instances) and survive the block's config."""
    block = _rank1_block(factor_initializer="trainable_cauchy",
                         factor_regularizer="rank1_cauchy_kl_divergence")
    for layer in (block.ff_in, block.ff_out):
        assert type(layer.alpha_initializer) is TrainableRandomSignCauchy
        assert type(layer.gamma_regularizer) is Rank1CauchyKLDivergence
    assert block.ff_in.alpha_initializer is not block.ff_out.alpha_initializer
    reloaded = bl.TransformerBlock.from_config(block.get_config())
    reloaded.build((4, 5, 8))
    assert type(reloaded.ff_out.gamma_initializer) is TrainableRandomSignCauchy
    assert type(reloaded.ff_out.alpha_regularizer) is Rank1CauchyKLDivergence
    with pytest.raises(ValueError, match=r"^Unknown factor_initializer\. .* Received: "
                                         r"factor_initializer='trainable_cauchi'$"):
        _rank1_block(factor_initializer="trainable_cauchi")
