"""The paper's Bayesian ResNet (Fig. 15, experiments/resnet.py) runs end to end at debug size;
its switch changes only the convolutions."""

import math

import pytest

from bayes_planet._keras import keras
from tests.scripts import _experiments


@pytest.fixture(scope="module")
def resnet():
    return _experiments.load("resnet")


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
