"""The generative examples (experiments/generative.py) run end to end at debug size, the paper's
Image Transformer (Figs. 6/16, ``image_transformer``) among them, and it is autoregressive."""

import json
import math

import pytest

from tests.scripts import _experiments


@pytest.fixture(scope="module")
def generative():
    return _experiments.load("generative")


def _run(generative, tmp_path, preset, *overrides):
    argv = ["--preset", preset, "debug", "--out", str(tmp_path)]
    if overrides:
        argv += ["--set", *overrides]
    results = generative.main(argv)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["presets"] == [preset, "debug"] and (tmp_path / "config.yaml").exists()
    losses = [loss for _, loss in results["history"]]
    assert all(math.isfinite(v) for v in losses)
    return on_disk


def test_vae(generative, tmp_path):
    r = _run(generative, tmp_path, "vae")
    # An ELBO is a log-likelihood bound of 64 binary pixels: in (-64 log 2 * a few, 0).
    assert -200.0 < r["test_elbo_nats"] < 0.0
    assert -64 * math.log(2) < r["independent_pixel_test_log_lik_nats"] < 0.0


def test_vae_categorical_decoder(generative, tmp_path):
    r = _run(generative, tmp_path, "vae_categorical", "vae.steps=3")
    assert r["example"] == "vae" and r["likelihood"] == "categorical"
    assert -64 * math.log(17) * 3 < r["test_elbo_nats"] < 0


def test_realnvp(generative, tmp_path):
    r = _run(generative, tmp_path, "realnvp")
    assert (tmp_path / "density.png").stat().st_size > 1000
    assert math.isfinite(r["test_nll_nats"]) and math.isfinite(r["gaussian_test_nll_nats"])
    assert 0.9 < r["grid_mass"] < 1.01  # the flow's density is normalized


def test_vqvae(generative, tmp_path):
    r = _run(generative, tmp_path, "vqvae", "vqvae.ema=true")
    assert r["ema"] is True and 0.0 < r["test_mse"] < 1.0
    assert 0.0 < r["codebook_used_fraction"] <= 1.0
    assert 1.0 <= r["codebook_perplexity"] <= r["num_codes"]


def test_pixelcnn_mixture(generative, tmp_path):
    r = _run(generative, tmp_path, "pixelcnn_mixture")
    assert r["uniform_bits_per_dim"] == pytest.approx(math.log2(17), abs=1e-4)
    assert 0.0 < r["test_bits_per_dim"] < 10.0
    assert r["independent_pixel_test_bits_per_dim"] < r["uniform_bits_per_dim"]


def test_unknown_preset_is_rejected(generative, tmp_path):
    with pytest.raises(ValueError, match="unknown preset"):
        generative.main(["--preset", "nope", "--out", str(tmp_path)])


def test_image_transformer_example_debug(generative, tmp_path):
    results = generative.main(["--preset", "image_transformer", "debug", "--out",
                               str(tmp_path)])
    assert results["example"] == "image_transformer"
    assert results["uniform_bits_per_dim"] == pytest.approx(math.log2(17), abs=1e-4)
    # 5 steps: a proper likelihood (finite, positive bits) that has started to learn.
    assert 0.0 < results["test_bits_per_dim"] < results["uniform_bits_per_dim"] + 1.0
    assert all(math.isfinite(loss) for _, loss in results["history"])


@pytest.mark.slow
def test_image_transformer_with_bayesian_attention(generative, tmp_path):
    results = generative.main(["--preset", "image_transformer", "debug", "--out",
                               str(tmp_path), "--set", "image_transformer.attention=flipout",
                               "image_transformer.feed_forward=local_reparameterization"])
    assert 0.0 < results["test_bits_per_dim"] < results["uniform_bits_per_dim"] + 1.0


def test_image_transformer_is_autoregressive(generative):
    """Pixel i's log-probability depends on pixels <= i only: changing pixel j changes
    the log-probabilities of pixels >= j and leaves those before j unchanged."""
    import numpy as np

    cfg = {"num_components": 2, "d_model": 8, "num_heads": 2, "ff_dim": 16, "num_layers": 2,
           "attention": "deterministic", "feed_forward": "deterministic"}
    _, _, per_pixel = generative.build_image_transformer(cfg, seed=0)
    x = np.random.default_rng(0).integers(0, 17, (1, 64))
    base = per_pixel(x).numpy()[0]
    for j in (0, 10, 63):
        changed = x.copy()
        changed[0, j] = (changed[0, j] + 5) % 17
        out = per_pixel(changed).numpy()[0]
        np.testing.assert_array_equal(out[:j], base[:j])
        assert out[j] != base[j]
        if j < 63:
            assert np.any(out[j + 1:] != base[j + 1:])
