"""The Bayesian Transformer (`bayes_planet.layers.transformer`): the block's contract, its
estimators and deterministic baseline, the kernel regularizer reaching every Bayesian
sublayer, and a save round trip."""

import numpy as np
import pytest

from bayes_planet._keras import keras
from bayes_planet.layers.attention import MultiHeadAttentionFlipout
from bayes_planet.layers.testing import run_layer_test, submodules
from bayes_planet.layers.transformer import TransformerBlock, build_transformer


def test_transformer_block_contract():
    run_layer_test(TransformerBlock, {"num_heads": 2, "key_dim": 4, "ff_dim": 16}, (3, 5, 8),
                   expected_output_shape=(3, 5, 8), expected_num_losses=6)


def test_transformer_estimators_and_deterministic_baseline():
    bayes = build_transformer(7, 5, 7, d_model=8, num_heads=2, ff_dim=16, num_layers=2, seed=0)
    det = build_transformer(7, 5, 7, d_model=8, num_heads=2, ff_dim=16, num_layers=2,
                            attention="deterministic", feed_forward="deterministic")
    block = bayes.get_layer("block_0")
    assert isinstance(block.attention_layer, MultiHeadAttentionFlipout)
    assert type(block.ff_in).__name__ == "DenseLocalReparameterization"
    assert len(bayes.losses) == 12 and len(det.losses) == 0
    tokens = np.random.default_rng(0).integers(0, 7, (3, 5))
    assert bayes(tokens).shape == det(tokens).shape == (3, 5, 7)
    causal = build_transformer(7, 5, 7, d_model=8, num_heads=2, ff_dim=16, num_layers=1,
                               attention="deterministic", feed_forward="deterministic",
                               causal=True)
    changed = tokens.copy()
    changed[:, -1] = (changed[:, -1] + 1) % 7
    np.testing.assert_allclose(causal(tokens)[:, :-1], causal(changed)[:, :-1], atol=1e-6)


def test_transformer_kernel_regularizer_reaches_every_bayesian_sublayer():
    from bayes_planet.layers.regularizers import NormalKLDivergence, ScaleMixtureKLDivergence

    model = build_transformer(7, 5, 7, d_model=8, num_heads=2, ff_dim=16, num_layers=2, seed=0,
                              feed_forward="flipout",
                              kernel_regularizer="scale_mixture_kl_divergence")
    default = build_transformer(7, 5, 7, d_model=8, num_heads=2, ff_dim=16, num_layers=1, seed=0)
    from bayes_planet.layers.base import BayesianLayer

    priors = [layer.kernel_regularizer for layer in submodules(model)
              if isinstance(layer, BayesianLayer)]
    assert len(priors) == 12 and all(isinstance(p, ScaleMixtureKLDivergence) for p in priors)
    # One instance per sublayer (an attention layer's 4 projections share its own).
    assert len({id(p) for p in priors}) == 2 * 3
    assert isinstance(default.get_layer("block_0").ff_in.kernel_regularizer, NormalKLDivergence)
    config = model.get_layer("block_0").get_config()
    clone = TransformerBlock.from_config(config)
    assert clone.get_config()["kernel_regularizer"] == config["kernel_regularizer"]
    with pytest.raises(ValueError, match="no_such_prior"):
        TransformerBlock(2, 4, 8, kernel_regularizer="no_such_prior")


def test_transformer_save_round_trip(tmp_path):
    """Same seeds and noise state after loading, and the same KL: what was set on the
    block's sublayers after they were made (`set_dataset_size` on their priors) is saved."""
    from bayes_planet.layers.regularizers import set_dataset_size

    model = build_transformer(7, 5, 7, d_model=8, num_heads=2, ff_dim=16, num_layers=1, seed=2)
    tokens = np.random.default_rng(0).integers(0, 7, (3, 5))
    model(tokens)
    assert set_dataset_size(model, 100) > 0
    path = str(tmp_path / "t.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(model(tokens), loaded(tokens), atol=1e-6)  # same seeds/state
    np.testing.assert_allclose(sum(float(v) for v in loaded.losses),
                               sum(float(v) for v in model.losses), rtol=1e-6)
