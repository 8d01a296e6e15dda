"""The Bayesian dense and convolution classes of `layer_registry`, and a posterior of zero
variance: the cases of test_dense.py, test_conv.py and test_base.py (not collected by pytest)."""

import bayes_planet.layers as bl
from bayes_planet import layer_registry
from bayes_planet._keras import keras


def registered(family, sampling_only=False):
    """The family's Bayesian classes in `layer_registry` (every one gets the contract)."""
    return [layer_registry.get(family, e)
            for e in layer_registry.estimators(family, sampling_only)[1:]]


DENSE = registered("dense")
CONV2D = registered("conv2d", sampling_only=True)
CONV1D = registered("conv1d", sampling_only=True)


def zero_variance_kernel():
    """A kernel posterior of zero variance: softplus(-1e4) == 0 exactly in float32."""
    return bl.TrainableNormal(stddev_initializer=keras.initializers.Constant(-1e4))
