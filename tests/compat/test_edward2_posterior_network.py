"""edward2's ``PosteriorNetworkLayer`` through `bayes_planet.compat.edward2`: its argument
order and defaults, ``return_probs``, the config round trip and a saved model."""

import os
import tempfile

import numpy as np
import pytest

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl
from bayes_planet.layers.testing import normal_array


def test_arguments_order_and_defaults():
    layer = ed.layers.PosteriorNetworkLayer(3)
    assert isinstance(layer, bl.PosteriorNetwork)
    assert layer.flow_type == layer.flow == "maf"  # edward2's default flow
    assert (layer.flow_depth, layer.flow_width) == (8, None)
    assert layer.class_counts == [1.0, 1.0, 1.0] and layer.name == "PosteriorNetworkLayer"
    positional = ed.layers.PosteriorNetworkLayer(2, "radial", 3, 5, [4, 6], "head")
    assert (positional.flow, positional.flow_depth, positional.flow_width) == ("radial", 3, 5)
    assert positional.class_counts == [4.0, 6.0] and positional.name == "head"
    with pytest.raises(ValueError, match="Expected flow in"):
        ed.layers.PosteriorNetworkLayer(2, flow_type="planar")


def test_return_probs_is_the_dirichlet_mean():
    layer = ed.layers.PosteriorNetworkLayer(4, flow_type="affine", flow_depth=2,
                                            class_counts=[1, 2, 3, 4], seed=0)
    x = normal_array(6, 3, seed=1)
    alphas = layer(x).numpy()
    probs = layer(x, return_probs=True).numpy()
    np.testing.assert_allclose(probs, alphas / alphas.sum(-1, keepdims=True), rtol=1e-6)
    assert (alphas > 1).all()


@pytest.mark.parametrize("flow", ["maf", "radial"])
def test_config_round_trip_keeps_the_flow(flow):
    layer = ed.layers.PosteriorNetworkLayer(2, flow_type=flow, flow_depth=2, seed=3)
    config = layer.get_config()
    assert config["flow_type"] == flow
    clone = ed.layers.PosteriorNetworkLayer.from_config(config)
    assert clone.flow == flow and clone.get_config() == config


def test_saved_model_reloads_as_the_compat_class():
    inputs = bl.keras.Input(shape=(3,))
    layer = ed.layers.PosteriorNetworkLayer(2, flow_type="radial", flow_depth=2, seed=1)
    model = bl.keras.Model(inputs, layer(inputs))
    x = normal_array(5, 3, seed=2)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.keras")
        model.save(path)
        loaded = bl.keras.models.load_model(path)
    assert type(loaded.layers[-1]) is ed.layers.PosteriorNetworkLayer
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-6)
