"""The paper's Bayesian ResNet (Fig. 15, experiments/resnet.py) and Image Transformer
(Figs. 6/16, experiments/generative.py ``image_transformer``) run end to end at debug
size; the ResNet switch changes only the convolutions."""

import math

import pytest

from bayes_planet._keras import keras
from tests.scripts import _experiments


@pytest.fixture(scope="module")
def resnet():
    return _experiments.load("resnet")


@pytest.fixture(scope="module")
def generative():
    return _experiments.load("generative")


def test_resnet_switch_changes_only_the_convolutions(resnet):
    import bayes_planet.layers as bl

    plain = resnet.build_resnet(False, 4, [1, 1], seed=0)
    bayes = resnet.build_resnet(True, 4, [1, 1], seed=0)
    kinds = [type(layer).__name__ for layer in plain.layers]
    swapped = [type(layer).__name__.replace("Conv2DReparameterization", "Conv2D")
               for layer in bayes.layers]
    assert kinds == swapped and kinds.count("Conv2D") == 6  # stem + 2 blocks x 2 + 1 shortcut
    convs = [layer for layer in bayes.layers if isinstance(layer, bl.Conv2DReparameterization)]
    assert len(bayes.losses) == len(convs) == 6  # one KL term per Bayesian convolution
    assert len({layer.seed for layer in convs}) == 6  # every noise stream is named
    for a, b in zip(plain.layers, bayes.layers, strict=True):
        assert tuple(a.output.shape) == tuple(b.output.shape)  # (Keras 3 has no output_shape)
    assert isinstance(plain.layers[1], keras.layers.Conv2D)


def test_resnet_example_debug(resnet, tmp_path):
    r = _experiments.run_example(resnet, tmp_path, "resnet")
    assert r["num_train"] + r["num_test"] == 1797
    for name in ("deterministic", "bayesian"):
        m = r[name]
        assert 0.0 <= m["accuracy"] <= 1.0 and 0.0 <= m["ece"] <= 1.0
        assert 0.0 < m["nll"] < 10.0 and math.isfinite(m["final_train_loss"])
    assert r["deterministic"]["mutual_info"] == 0.0  # one deterministic "sample"
    assert r["bayesian"]["mutual_info"] >= 0.0
    # Bayesian convolutions carry a mean and a stddev per kernel entry.
    assert r["bayesian"]["num_parameters"] > r["deterministic"]["num_parameters"]


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
