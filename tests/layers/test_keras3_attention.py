"""Keras 3 (TF >= 2.16): the attention family end to end as native Keras 3 layers (issue #28
phase 2): a `build_transformer` model trains with ``fit`` (its KL terms in ``model.losses``),
saves to ``.keras`` and reloads in a fresh process with identical posterior-mean predictions.

Skipped on Keras 2 (TF 2.15, the agent's stack), where test_attention.py and
ensemble/test_attention.py cover the same layers.
"""

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import KERAS3, keras
from bayes_planet.layers.testing import assert_reloads_in_a_fresh_process, submodules

pytestmark = pytest.mark.skipif(
    not KERAS3, reason=f"needs Keras 3 (TF >= 2.16 without TF_USE_LEGACY_KERAS); this process "
    f"has TF {tf.__version__} with Keras 2")

VOCAB, LENGTH = 6, 5


def _first_token_task(n, seed):
    """Token sequences whose label at every position is the sequence's first token: each
    position must attend to position 0 (chance accuracy: 1 / VOCAB)."""
    tokens = np.random.default_rng(seed).integers(0, VOCAB, (n, LENGTH)).astype("int32")
    return tokens, np.repeat(tokens[:, :1], LENGTH, axis=1)


@pytest.mark.slow  # ~60 s each on 2 shared CPU cores (fit, then a fresh TF process)
@pytest.mark.parametrize("attention, feed_forward, members, num_losses", [
    # The paper's Bayesian Transformer: a KL per projection (4) and feed-forward layer (2).
    ("flipout", "local_reparameterization", 1, 6),
    # Rank-1 members (the batch tiled once per member): a KL per factor (α, γ) of each.
    ("rank1", "rank1", 2, 12),
], ids=["flipout", "rank1"])
def test_transformer_fits_saves_and_reloads_in_a_fresh_process(attention, feed_forward, members,
                                                                num_losses, tmp_path):
    """`build_transformer` on Keras 3: ``fit`` lowers its loss (data term plus KL / N, the KL
    terms in ``model.losses``) and it learns the task; it saves to ``.keras`` and a fresh process loads it with bit-identical
    posterior-mean predictions and the same KL."""
    tokens, labels = _first_token_task(256, seed=0)
    model = bl.build_transformer(VOCAB, LENGTH, VOCAB, d_model=16, num_heads=2, ff_dim=32,
                                 num_layers=1, attention=attention, feed_forward=feed_forward,
                                 seed=1, ensemble_size=members if members > 1 else None)
    block = model.get_layer("block_0")
    assert all(isinstance(layer, keras.Layer) for layer in submodules(model))
    assert len(model.losses) == num_losses
    assert bl.set_dataset_size(model, len(tokens)) > 0
    x, y = np.tile(tokens, [members, 1]), np.tile(labels, [members, 1])
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, epochs=12, batch_size=32 * members, shuffle=False,
                        verbose=0).history["loss"]
    assert history[-1] < history[0], history  # KL / N dominates it (N = 256)
    with bl.posterior_mean(model):
        accuracy = np.mean(np.argmax(model(x).numpy(), -1) == y)
    assert accuracy > 0.9, accuracy  # chance: 1 / 6

    # fit's loss is the data term plus the KL terms (checked at the mean: no noise).
    with bl.posterior_mean(model):
        logits = model(x[:64]).numpy()
        evaluated = model.evaluate(x[:64], y[:64], batch_size=64, verbose=0)
    data = float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y[:64], logits))
    np.testing.assert_allclose(evaluated, data + float(sum(model.losses)), rtol=1e-5)

    assert block.attention_layer.built and block.attention_layer._query_dense.built
    test_tokens = np.tile(_first_token_task(8, seed=1)[0], [members, 1])
    assert_reloads_in_a_fresh_process(model, test_tokens, tmp_path)


def test_gate_projection_is_bayesian_too():
    """Keras 3's ``use_gate=True`` adds a gate projection: it is Bayesian like the other four
    (its own KL term) and the layer is otherwise Keras' gated attention."""
    layer = bl.MultiHeadAttentionFlipout(2, 3, use_gate=True, seed=0)
    x = np.random.default_rng(0).standard_normal((2, 4, 6)).astype("float32")
    assert layer(x, x).shape == (2, 4, 6)
    assert isinstance(layer._gate_dense, bl.EinsumDenseFlipout)
    assert layer._gate_dense.activation is keras.activations.sigmoid
    assert len(layer.losses) == 5


@pytest.mark.parametrize("name, value", [("lora_rank", 2), ("quantization_config", "int8")])
def test_kernel_rewrites_are_refused_in_one_line(name, value):
    """Keras 3's EinsumDense LoRA/quantization arguments rewrite a point-estimate kernel: a
    Bayesian projection takes them in their place but only at their default."""
    with pytest.raises(ValueError, match=rf"^Expected {name}=None .*Received: {name}="):
        bl.EinsumDenseFlipout("ab,bc->ac", 3, **{name: value})
