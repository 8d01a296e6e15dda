"""Drop-in signatures: every Bayesian layer with a Keras twin extends the twin's signature.

For each pair the test introspects ``keras.layers.<Twin>.__init__`` and requires that
the Bayesian layer's ``__init__`` lists the same parameters in the same order with the
same kinds (so every positional and keyword call the twin accepts binds the same
names), and that everything it adds comes after them as keyword-only arguments. It then
constructs both layers with the *same* positional arguments — every parameter of the
twin, given positionally — and checks that the resulting configs agree on every key
the twin has (except the initializers and regularizers whose Bayesian defaults differ
by design, which are given explicitly so they agree too), and that the Bayesian layer
runs on an input of the twin's shape.
"""

import inspect

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import keras

# Bayesian layer -> (Keras twin, input shape for a call).
TWINS = {
    bl.DenseReparameterization: (keras.layers.Dense, (2, 5)),
    bl.DenseFlipout: (keras.layers.Dense, (2, 5)),
    bl.DenseLocalReparameterization: (keras.layers.Dense, (2, 5)),
    bl.DenseVariationalDropout: (keras.layers.Dense, (2, 5)),
    bl.DenseDVI: (keras.layers.Dense, (2, 5)),
    bl.DenseRank1: (keras.layers.Dense, (4, 5)),  # ensemble layers: batch divisible by 4
    bl.DenseBatchEnsemble: (keras.layers.Dense, (4, 5)),
    bl.Conv1DRank1: (keras.layers.Conv1D, (4, 9, 3)),
    bl.Conv2DRank1: (keras.layers.Conv2D, (4, 9, 9, 3)),
    bl.Conv2DBatchEnsemble: (keras.layers.Conv2D, (4, 9, 9, 3)),
    bl.Conv1DBatchEnsemble: (keras.layers.Conv1D, (4, 9, 3)),
    bl.Conv1DReparameterization: (keras.layers.Conv1D, (2, 9, 3)),
    bl.Conv1DFlipout: (keras.layers.Conv1D, (2, 9, 3)),
    bl.Conv1DVariationalDropout: (keras.layers.Conv1D, (2, 9, 3)),
    bl.Conv2DReparameterization: (keras.layers.Conv2D, (2, 9, 9, 3)),
    bl.Conv2DFlipout: (keras.layers.Conv2D, (2, 9, 9, 3)),
    bl.Conv2DLocalReparameterization: (keras.layers.Conv2D, (2, 9, 9, 3)),
    bl.Conv2DVariationalDropout: (keras.layers.Conv2D, (2, 9, 9, 3)),
    bl.LSTMCellReparameterization: (keras.layers.LSTMCell, (2, 3)),
    bl.LSTMCellFlipout: (keras.layers.LSTMCell, (2, 3)),
    bl.GRUCellReparameterization: (keras.layers.GRUCell, (2, 3)),
    bl.GRUCellFlipout: (keras.layers.GRUCell, (2, 3)),
    bl.LSTMCellRank1: (keras.layers.LSTMCell, (4, 3)),  # ensemble cells: batch divisible by 4
    bl.GRUCellRank1: (keras.layers.GRUCell, (4, 3)),
    bl.EinsumDenseReparameterization: (keras.layers.EinsumDense, (2, 5)),
    bl.EinsumDenseFlipout: (keras.layers.EinsumDense, (2, 5)),
    bl.MultiHeadAttentionReparameterization: (keras.layers.MultiHeadAttention, (2, 4, 6)),
    bl.MultiHeadAttentionFlipout: (keras.layers.MultiHeadAttention, (2, 4, 6)),
    bl.MCDropout: (keras.layers.Dropout, (2, 5)),
    bl.EinsumDenseRank1: (keras.layers.EinsumDense, (4, 5)),
    bl.MultiHeadAttentionRank1: (keras.layers.MultiHeadAttention, (4, 4, 6)),
    bl.DenseHierarchical: (keras.layers.Dense, (2, 5)),
    bl.Conv2DHierarchical: (keras.layers.Conv2D, (2, 9, 9, 3)),
    bl.EmbeddingReparameterization: (keras.layers.Embedding, (2, 5)),
}

# Positional parameters that newer Keras releases append to a twin's signature
# (tf-keras 2.16+: MultiHeadAttention's softmax_robust_masking; Keras 3: Dense's LoRA and
# quantization arguments, the recurrent cells' seed).
NEWER_KERAS_PARAMETERS = {keras.layers.MultiHeadAttention: ("softmax_robust_masking",),
                          keras.layers.Dense: ("lora_rank", "lora_alpha", "quantization_config"),
                          keras.layers.LSTMCell: ("seed",), keras.layers.GRUCell: ("seed",),
                          keras.layers.Embedding: ("lora_rank", "lora_alpha",
                                                   "quantization_config")}


# Non-default values for each twin parameter, valid for both layers of the pair.
PROBES = {
    "units": 4, "filters": 4, "kernel_size": 3, "strides": 2, "padding": "same",
    "data_format": "channels_last", "dilation_rate": 1, "groups": 1, "activation": "relu",
    "recurrent_activation": "hard_sigmoid", "use_bias": True, "unit_forget_bias": False,
    "kernel_initializer": "trainable_normal", "recurrent_initializer": "trainable_normal",
    "bias_initializer": "ones", "kernel_regularizer": "normal_kl_divergence",
    "recurrent_regularizer": "normal_kl_divergence", "bias_regularizer": None,
    "activity_regularizer": None, "kernel_constraint": None, "recurrent_constraint": None,
    "bias_constraint": None, "dropout": 0.0, "recurrent_dropout": 0.0,
    "reset_after": False, "equation": "ab,bc->ac", "output_shape": 4, "bias_axes": "c",
    "num_heads": 2, "key_dim": 3, "value_dim": 5, "attention_axes": None,
    "lora_rank": None, "lora_alpha": None, "quantization_config": None,
    # Keras 3's EinsumDense (only its default: a Bayesian kernel is not quantized) and
    # MultiHeadAttention (use_gate: a Bayesian gate projection too).
    "gptq_unpacked_column_size": None, "sliding_window": 2, "flash_attention": None,
    "use_gate": True,
    # Embedding (Keras 2: input_length, sparse; Keras 3: weights).
    "input_dim": 6, "output_dim": 3, "embeddings_initializer": "trainable_normal",
    "embeddings_regularizer": "normal_kl_divergence", "embeddings_constraint": None,
    "mask_zero": True, "input_length": None, "sparse": False, "weights": None,
}
# Per-layer probes: the ensemble layers' kernel is a point estimate (no posterior).
LAYER_PROBES = {cls: {"kernel_initializer": "glorot_uniform"}
                for cls in (bl.DenseRank1, bl.DenseBatchEnsemble, bl.EinsumDenseRank1,
                            bl.MultiHeadAttentionRank1, bl.Conv1DRank1, bl.Conv2DRank1,
                            bl.Conv2DBatchEnsemble, bl.Conv1DBatchEnsemble)}
LAYER_PROBES.update({cls: {"kernel_initializer": "glorot_uniform",
                           "recurrent_initializer": "orthogonal"}
                     for cls in (bl.LSTMCellRank1, bl.GRUCellRank1)})
# Layers without noise take no ``seed``.
NOISELESS = (bl.DenseBatchEnsemble, bl.Conv2DBatchEnsemble, bl.Conv1DBatchEnsemble)
# Layers whose Keras twin takes the ``seed`` itself (positionally, in the twin's place; the
# cells' twins on Keras 3, and ours on Keras 2 in that place too).
TWIN_SEEDED = (bl.MCDropout, bl.LSTMCellReparameterization, bl.LSTMCellFlipout,
               bl.GRUCellReparameterization, bl.GRUCellFlipout, bl.LSTMCellRank1,
               bl.GRUCellRank1)


def _twin_seeded(ours, twin):
    """Whether ``ours`` takes its ``seed`` in its twin's place: listed in TWIN_SEEDED, or the
    twin takes one (Keras 3's MultiHeadAttention: its dropout's seed)."""
    return ours in TWIN_SEEDED or "seed" in inspect.signature(twin.__init__).parameters
# Keys whose Bayesian value is a distribution initializer / KL regularizer object that a
# Keras twin cannot hold: compared by presence only.
BAYESIAN_KEYS = {"kernel_initializer", "recurrent_initializer", "kernel_regularizer",
                 "recurrent_regularizer", "embeddings_initializer", "embeddings_regularizer"}
# MultiHeadAttention's output_shape is a shape; the probe for EinsumDense is an int.
PAIR_PROBES = {keras.layers.MultiHeadAttention: {"output_shape": None, "dropout": 0.1,
                                                 "softmax_robust_masking": False, "seed": 3},
               keras.layers.Dropout: {"rate": 0.3, "noise_shape": None, "seed": 3},
               keras.layers.LSTMCell: {"seed": 3}, keras.layers.GRUCell: {"seed": 3}}


# Where the Keras layer classes live (keras.src.layers.*: Keras 2.15 and Keras 3).
KERAS_LAYERS = keras.layers.Dense.__module__.split(".layers.")[0] + ".layers."


def _params(cls):
    return list(inspect.signature(cls.__init__).parameters.values())[1:]  # drop self


def _cases():
    for ours, (twin, shape) in TWINS.items():
        yield pytest.param(ours, twin, shape, id=ours.__name__)


def test_every_bayesian_keras_twin_is_covered():
    """Every exported Bayesian layer subclassing a Keras layer class is in TWINS."""
    missing = []
    for name in bl.__all__:
        cls = getattr(bl, name)
        if not (isinstance(cls, type) and issubclass(cls, bl.BayesianLayer)):
            continue
        twins = [base for base in cls.__mro__[1:]  # Keras layer classes, not the base Layer
                 if base.__module__.startswith(KERAS_LAYERS) and base is not keras.layers.Layer]
        if twins and cls not in TWINS:
            missing.append((name, twins[0].__name__))
    assert not missing, missing


@pytest.mark.parametrize("ours, twin, shape", list(_cases()))
def test_signature_extends_the_keras_twin(ours, twin, shape):
    del shape
    theirs = [p for p in _params(twin) if p.kind is not inspect.Parameter.VAR_KEYWORD]
    mine = _params(ours)
    head = mine[:len(theirs)]
    assert [(p.name, p.kind) for p in head] == [(p.name, p.kind) for p in theirs], (
        f"{ours.__name__}{inspect.signature(ours.__init__)} vs "
        f"{twin.__name__}{inspect.signature(twin.__init__)}")
    extra = mine[len(theirs):]
    # Parameters a newer Keras added at the end of the twin's signature: ours take them in
    # the newer position on every stack (so both stacks accept the newest positional call).
    while extra and extra[0].name in NEWER_KERAS_PARAMETERS.get(twin, ()):
        extra = extra[1:]
    assert all(p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD)
               for p in extra), [(p.name, str(p.kind)) for p in extra]
    assert extra and extra[-1].kind is inspect.Parameter.VAR_KEYWORD  # **kwargs last
    assert any(p.name == "seed" for p in extra) or ours in NOISELESS or _twin_seeded(ours, twin)


def _positional_args(twin, ours=None):
    probes = {**PROBES, **PAIR_PROBES.get(twin, {}), **LAYER_PROBES.get(ours, {})}
    return [probes[p.name] for p in _params(twin)
            if p.kind is not inspect.Parameter.VAR_KEYWORD]


@pytest.mark.parametrize("ours, twin, shape", list(_cases()))
def test_same_positional_arguments_build_the_same_layer(ours, twin, shape):
    args = _positional_args(twin, ours)
    keras_args = [
        "glorot_uniform" if p.name in ("kernel_initializer", "recurrent_initializer")
        else "uniform" if p.name == "embeddings_initializer"
        else None if p.name in ("kernel_regularizer", "recurrent_regularizer",
                                "embeddings_regularizer") else a
        for p, a in zip(_params(twin), args, strict=False)]
    seeded = ours in NOISELESS or _twin_seeded(ours, twin)
    ours_layer = ours(*args) if seeded else ours(*args, seed=3)
    twin_layer = twin(*keras_args)
    mine, theirs = ours_layer.get_config(), twin_layer.get_config()
    for key, value in theirs.items():
        if key == "name":
            continue
        assert key in mine, key
        if key not in BAYESIAN_KEYS:
            assert mine[key] == value, (key, mine[key], value)
    x = tf.random.stateless_normal(shape, [1, 2])
    if twin is keras.layers.Embedding:  # indices
        x = tf.random.stateless_uniform(shape, [1, 2], 0, PROBES["input_dim"], tf.int32)
    if twin is keras.layers.MultiHeadAttention:
        out = ours_layer(x, x)
    elif twin in (keras.layers.LSTMCell, keras.layers.GRUCell):
        out = keras.layers.RNN(ours_layer)(x[:, None, :])
    else:
        out = ours_layer(x)
    assert np.all(np.isfinite(tf.convert_to_tensor(out).numpy()))


@pytest.mark.parametrize("call, shape", [
    (lambda: bl.Conv2DFlipout(32, 5, 1, "same"), (2, 8, 8, 3)),  # the paper's Fig. 4 form
    (lambda: bl.Conv2DReparameterization(8, 3, 2), (2, 9, 9, 3)),
    (lambda: bl.DenseVariationalDropout(10, "relu"), (2, 5)),
], ids=["Conv2DFlipout(32,5,1,same)", "Conv2DReparameterization(8,3,2)",
        "DenseVariationalDropout(10,relu)"])
def test_issue_examples_mean_what_keras_means(call, shape):
    layer = call()
    out = layer(tf.ones(shape))
    twin = {bl.Conv2DFlipout: keras.layers.Conv2D(32, 5, 1, "same"),
            bl.Conv2DReparameterization: keras.layers.Conv2D(8, 3, 2),
            bl.DenseVariationalDropout: keras.layers.Dense(10, "relu")}[type(layer)]
    assert out.shape == twin(tf.ones(shape)).shape


def test_recurrent_cells_take_activation_positionally():
    cell = bl.LSTMCellReparameterization(16, "relu", seed=0)
    assert cell.activation is keras.activations.relu
    gru = bl.GRUCellFlipout(4, "tanh", "sigmoid", True, reset_after=False, seed=0)
    assert gru.reset_after is False
    with pytest.raises(TypeError):  # seed is keyword-only (after Keras 3's lora_rank,
        # lora_alpha and quantization_config)
        bl.DenseFlipout(4, None, True, "trainable_normal", "zeros", "normal_kl_divergence",
                        None, None, None, None, None, None, None, 5)


@pytest.mark.parametrize("cls", [c for c, (twin, _) in TWINS.items() if twin is keras.layers.Dense
                                 and c is not bl.MCDropout], ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", ["lora_rank", "lora_alpha", "quantization_config"])
def test_dense_lora_and_quantization_arguments_are_refused(cls, name):
    """Keras 3's Dense arguments after bias_constraint bind the same names here, and only
    their default is accepted (LoRA/quantization rewrite a point-estimate kernel)."""
    with pytest.raises(ValueError, match=f"Expected {name}=None.*Received: {name}=4"):
        cls(3, **{name: 4})
