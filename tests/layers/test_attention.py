"""Bayesian EinsumDense and multi-head attention (`bayes_planet.layers.attention`): contract,
Keras equivalence, estimator semantics, gradients, mixed precision, XLA and strategy. The
Transformer built from them: test_transformer.py."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet import layer_registry
from bayes_planet._keras import keras
from bayes_planet.layers import estimators
from bayes_planet.layers.attention import (
    EinsumDenseFlipout,
    EinsumDenseReparameterization,
    MultiHeadAttentionFlipout,
    MultiHeadAttentionReparameterization,
)
from bayes_planet.layers.initializers import TrainableNormal
from bayes_planet.layers.testing import SelfAttention, run_layer_test
from bayes_planet.layers.transformer import PositionEmbedding, TransformerBlock, build_transformer

MHAS = [layer_registry.get("multi_head_attention", e)  # every registered one
        for e in layer_registry.estimators("multi_head_attention")[1:]]
EINSUMS = [layer_registry.get("einsum_dense", e) for e in layer_registry.estimators("einsum_dense")[1:]]
PROJECTIONS = ("_query_dense", "_key_dense", "_value_dense", "_output_dense")


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _wide():
    return TrainableNormal(stddev_initializer=keras.initializers.Constant(-1.0))


# Contract ------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", EINSUMS)
def test_einsum_dense_contract(cls):
    run_layer_test(cls, {"equation": "abc,cde->abde", "output_shape": (None, 2, 3),
                         "bias_axes": "de"}, (4, 5, 6),
                   expected_output_shape=(4, 5, 2, 3), expected_num_trainable_weights=3,
                   expected_num_non_trainable_weights=1, expected_num_losses=1)


@pytest.mark.parametrize("cls", MHAS)
def test_mha_contract(cls):
    attention = keras.saving.serialize_keras_object(cls(num_heads=2, key_dim=3, seed=4))
    run_layer_test(SelfAttention, {"attention": attention}, (3, 5, 8),
                   expected_output_shape=(3, 5, 8), expected_num_trainable_weights=12,
                   expected_num_non_trainable_weights=4, expected_num_losses=4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="equation='ab,cd->abcd'"):
        EinsumDenseFlipout("ab,cd->abcd", output_shape=(3, 4))
    EinsumDenseReparameterization("ab,cd->abcd", output_shape=(3, 4))  # any equation
    with pytest.raises(ValueError, match="seed=-1"):
        MultiHeadAttentionFlipout(num_heads=2, key_dim=2, seed=-1)
    with pytest.raises(ValueError, match="attention='bayes'"):
        TransformerBlock(2, 2, 4, attention="bayes")
    with pytest.raises(ValueError, match="feed_forward='mc'"):
        TransformerBlock(2, 2, 4, feed_forward="mc")
    with pytest.raises(ValueError, match="ff_dim=0"):
        TransformerBlock(2, 2, 0)
    with pytest.raises(ValueError, match="max_length=4"):
        PositionEmbedding(4)(tf.zeros([1, 5, 2]))


# Zero variance == Keras ----------------------------------------------------------------

@pytest.mark.parametrize("cls", MHAS)
def test_zero_variance_equals_keras_mha(cls):
    """Cross attention with a mask and output_shape: copying the locations into
    keras.layers.MultiHeadAttention reproduces it exactly."""
    q, v = _data(3, 5, 8), _data(3, 7, 6, seed=1)
    mask = np.random.default_rng(2).random((3, 5, 7)) > 0.3
    kwargs = dict(num_heads=2, key_dim=4, value_dim=3, output_shape=10)
    ours = cls(kernel_initializer="trainable_deterministic", seed=1, **kwargs)
    theirs = keras.layers.MultiHeadAttention(**kwargs)
    ours(q, v)
    theirs(q, v)
    rng = np.random.default_rng(3)
    for name in PROJECTIONS:
        a, b = getattr(ours, name), getattr(theirs, name)
        b.kernel.assign(a.kernel.loc())
        bias = rng.standard_normal(a.bias.shape).astype("float32")
        a.bias.assign(bias)
        b.bias.assign(bias)
    out, scores = ours(q, v, attention_mask=mask, return_attention_scores=True)
    k_out, k_scores = theirs(q, v, attention_mask=mask, return_attention_scores=True)
    assert out.shape == (3, 5, 10)
    np.testing.assert_allclose(out, k_out, rtol=0, atol=1e-6)
    np.testing.assert_allclose(scores, k_scores, rtol=0, atol=1e-6)


# Estimator semantics --------------------------------------------------------------------

def _flat_reference(layer, x, seed, estimator):
    """The shared estimator on the flattened-feature view of a projection."""
    loc_shape = layer.kernel.weight_shape
    k = layer._plan[0]
    in_flat = int(np.prod(loc_shape[:k]))
    out_dims = loc_shape[k:]
    x2 = tf.reshape(x, [*x.shape[:-k], in_flat])
    op = lambda t, w: tf.reshape(  # noqa: E731
        tf.einsum(layer.equation, tf.reshape(t, x.shape), w), [*x.shape[:-k], -1])
    y = estimator(op, x2, layer.kernel, seed)
    return tf.reshape(y, [*x.shape[:-k], *out_dims])


@pytest.mark.parametrize("equation, x_shape, out_shape", [
    ("abc,cde->abde", (3, 4, 6), (None, 2, 5)),   # query/key/value projections
    ("abcd,cde->abe", (3, 4, 2, 5), (None, 6)),   # output projection
])
def test_flipout_einsum_is_the_shared_estimator(equation, x_shape, out_shape):
    x = tf.constant(_data(*x_shape))
    layer = EinsumDenseFlipout(equation, out_shape, kernel_initializer=_wide(), seed=7)
    layer(x)
    seed = tf.stack([7, int(layer._seed_counter.numpy()) + 1])
    kernel_seed = tf.random.experimental.stateless_split(seed, 2)[0]
    expected = _flat_reference(layer, x, kernel_seed, estimators.flipout)
    np.testing.assert_allclose(layer(x), expected, atol=1e-5)


@pytest.mark.parametrize("cls", EINSUMS)
def test_distribution_bias(cls):
    layer = cls("abc,cde->abde", (None, 2, 3), bias_axes="de",
                bias_initializer="trainable_normal", bias_regularizer="normal_kl_divergence")
    x = _data(2, 4, 5)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x)) + tf.add_n(layer.losses)
    assert len(layer.losses) == 2 and len(layer.trainable_variables) == 4
    assert all(g is not None for g in tape.gradient(loss, layer.trainable_variables))


def test_flipout_examples_get_different_perturbations():
    """(The sign layout itself is pinned by the test above.)"""
    x = np.repeat(_data(1, 4, 6), 3, axis=0)
    layer = EinsumDenseFlipout("abc,cde->abde", (None, 2, 5), kernel_initializer=_wide(),
                               seed=3)
    out = layer(x).numpy()
    assert np.abs(out[0] - out[1]).max() > 1e-3


def test_reparameterization_shares_one_sample_across_the_batch():
    x = np.repeat(_data(1, 4, 6), 3, axis=0)
    layer = MultiHeadAttentionReparameterization(2, 3, kernel_initializer=_wide(), seed=3)
    out = layer(x, x).numpy()
    np.testing.assert_allclose(out[0], out[1], atol=1e-6)
    assert np.abs(layer(x, x).numpy() - out).max() > 1e-3  # a new sample per call


# Gradients, mixed precision --------------------------------------------------------------

@pytest.mark.parametrize("cls", MHAS)
def test_gradients_reach_every_variational_parameter(cls):
    q = _data(2, 5, 8)
    layer = cls(num_heads=2, key_dim=4, seed=1)
    layer(q, q)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(layer(q, q))) + tf.add_n(layer.losses)
    grads = tape.gradient(loss, layer.trainable_variables)
    assert len(grads) == 12
    for v, g in zip(layer.trainable_variables, grads, strict=True):
        assert g is not None and np.abs(g).max() > 0, v.name


@pytest.mark.parametrize("attention", ["reparameterization", "flipout"])
def test_mixed_precision(attention):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = build_transformer(11, 6, 11, d_model=8, num_heads=2, ff_dim=16, num_layers=1,
                                  attention=attention, seed=1)
        tokens = np.random.default_rng(0).integers(0, 11, (4, 6))
        with tf.GradientTape() as tape:
            logits = model(tokens)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                tokens, logits, from_logits=True)) + tf.add_n(model.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        block = model.get_layer("block_0")
        assert block(tf.zeros([1, 6, 8], tf.float16)).dtype == tf.float16
        assert logits.dtype == tf.float32 and np.isfinite(loss)
        assert all(v.dtype == tf.float32 for v in model.trainable_variables)
        assert all(g is not None and np.all(np.isfinite(tf.cast(tf.convert_to_tensor(g), tf.float32)))
                   for g in grads)
        assert len(model.losses) == 6 and all(v.dtype == tf.float32 for v in model.losses)
    finally:
        keras.mixed_precision.set_global_policy("float32")


STRATEGY_SCRIPT = textwrap.dedent("""
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from bayes_planet._keras import keras
    from bayes_planet.layers.transformer import build_transformer
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    tokens = np.random.default_rng(0).integers(0, 9, (8, 6))

    def fit(attention, feed_forward, jit):
        with strategy.scope():
            model = build_transformer(9, 6, 9, d_model=8, num_heads=2, ff_dim=16, num_layers=1,
                                      attention=attention, feed_forward=feed_forward, seed=1)
            model.compile(keras.optimizers.Adam(1e-2),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          jit_compile=jit)
        try:
            hist = model.fit(tokens, tokens, batch_size=8, epochs=2, verbose=0)
        except tf.errors.InvalidArgumentError as e:
            return None, str(e).splitlines()[-3:]
        return model, hist.history["loss"]

    # XLA under MirroredStrategy on logical CPUs: TF 2.15 cannot run plain Keras either.
    keras_jit = fit("deterministic", "deterministic", jit=True)[0] is not None
    for attention in ("reparameterization", "flipout"):
        model, losses = fit(attention, "local_reparameterization", jit=False)
        assert np.all(np.isfinite(losses)), losses
        assert model.predict(tokens, batch_size=8, verbose=0).shape == (8, 6, 9)
        counter = model.get_layer("block_0").attention_layer._query_dense._seed_counter
        values = [int(v) for v in strategy.experimental_local_results(counter)]
        assert values[0] == values[1] and values[0] >= 2, values
        jit_model, info = fit(attention, "local_reparameterization", jit=True)
        assert (jit_model is not None) == keras_jit, (keras_jit, info)
        print(attention, losses, values, "xla under strategy:", jit_model is not None)
    print("STRATEGY OK; plain Keras XLA under strategy:", keras_jit)
""")


@pytest.mark.slow
def test_mirrored_strategy_two_logical_cpus():
    result = subprocess.run([sys.executable, "-c", STRATEGY_SCRIPT], capture_output=True,
                            text=True, timeout=600)
    assert "STRATEGY OK" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]


def test_softmax_robust_masking_follows_the_installed_keras():
    import inspect

    MultiHeadAttentionFlipout(2, 4, softmax_robust_masking=False)  # accepted on every stack
    if "softmax_robust_masking" in inspect.signature(
            keras.layers.MultiHeadAttention.__init__).parameters:
        layer = MultiHeadAttentionFlipout(2, 4, softmax_robust_masking=True)
        assert layer.get_config()["softmax_robust_masking"] is True
    else:
        with pytest.raises(ValueError, match="softmax_robust_masking=True"):
            MultiHeadAttentionFlipout(2, 4, softmax_robust_masking=True)
