"""edward2's heteroscedastic heads in `bayes_planet.compat.edward2.layers`: edward2's
positional order and defaults, its ``tfp.distributions`` noise classes, the SNGP variant's GP
arguments, config round trips and the names still not implemented."""

import json
import math

import numpy as np
import pytest
import tensorflow_probability as tfp

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl
from bayes_planet.layers.testing import normal_array

tfd = tfp.distributions


def test_noise_classes_map_to_the_library_names():
    for cls, name in ((tfd.Normal, "normal"), (tfd.Logistic, "logistic"), (tfd.Gumbel, "gumbel")):
        assert ed.layers.MCSoftmaxDense(10, cls).logit_noise == name
    assert ed.layers.ExactSigmoidDense(1, tfd.Logistic).logit_noise == "logistic"
    with pytest.raises(ValueError, match="Expected logit_noise in"):
        ed.layers.MCSoftmaxDense(10, tfd.Cauchy)


def test_edward2_defaults_and_positional_order():
    layer = ed.layers.MCSoftmaxDenseFA(10, 5, 2.0, True)
    assert (layer.num_factors, layer.temperature, layer.parameter_efficient) == (5, 2.0, True)
    assert (layer.train_mc_samples, layer.test_mc_samples, layer.logits_only) == (1000, 1000,
                                                                                    False)
    assert isinstance(layer, bl.MCSoftmaxDenseFA)
    sigmoid = ed.layers.MCSigmoidDenseFA(3)
    assert sigmoid.num_factors == 0 and sigmoid.num_outputs == 3
    sngp = ed.layers.HeteroscedasticSNGPLayer(12)
    assert sngp.num_factors == 10 and sngp.logits_only
    assert sngp.gp_layer.num_inducing == 1024 and sngp.gp_layer.gp_cov_momentum is None


def test_gp_arguments_become_the_library_kernel():
    layer = ed.layers.HeteroscedasticSNGPLayer(3, 2, num_inducing=8, gp_kernel_scale=4.0,
                                               gp_cov_momentum=0.9)
    kernel = layer.gp_layer.covariance_fn
    assert float(np.asarray(kernel.length_scale)) == pytest.approx(math.sqrt(4.0))
    assert not kernel.trainable and layer.gp_layer.gp_cov_momentum == 0.9
    linear = ed.layers.HeteroscedasticSNGPLayer(3, 2, gp_kernel_type="linear")
    assert linear.gp_layer.linear  # The GP's features are its inputs.
    again = type(linear).from_config(linear.get_config())
    assert again.gp_layer.linear
    with pytest.raises(ValueError, match=r"Received: gp_kernel_type='laplacian'$"):
        ed.layers.HeteroscedasticSNGPLayer(3, 2, gp_kernel_type="laplacian")
    with pytest.raises(ValueError, match="return_gp_cov=True only"):
        ed.layers.HeteroscedasticSNGPLayer(3, 2, return_gp_cov=False)


@pytest.mark.parametrize("make", [
    lambda: ed.layers.MCSoftmaxDense(4, tfd.Gumbel, test_mc_samples=4),
    lambda: ed.layers.MCSigmoidDenseFA(2, 1, test_mc_samples=4),
    lambda: ed.layers.ExactSigmoidDense(2, tfd.Logistic),
    lambda: ed.layers.HeteroscedasticSNGPLayer(3, 2, num_inducing=8, test_mc_samples=4),
    lambda: ed.layers.EnsembleHeteroscedasticOutputs(
        2, [ed.layers.MCSigmoidDenseFA(1, test_mc_samples=4), ed.layers.ExactSigmoidDense(1)],
        (0.5, 0.5)),
])
def test_configs_round_trip(make):
    layer = make()
    layer(normal_array(3, 4))
    config = json.loads(json.dumps(layer.get_config()))
    clone = type(layer).from_config(config)
    assert type(clone) is type(layer)
    clone(normal_array(3, 4))
    assert json.dumps(clone.get_config(), sort_keys=True) == json.dumps(config, sort_keys=True)


def test_compute_temperature_and_the_module_names():
    assert float(ed.layers.heteroscedastic.compute_temperature(0.0, 1.1, 1.2)) == \
        pytest.approx(1.15)
    assert ed.layers.heteroscedastic.MIN_SCALE_MONTE_CARLO == 1e-3


@pytest.mark.parametrize("name", ["MultiHeadMCSoftmaxDenseFA", "MCSoftmaxDenseFACustomLayers"])
def test_names_not_implemented_still_say_so(name):
    with pytest.raises(NotImplementedError, match=name):
        getattr(ed.layers, name)(10, 2)
