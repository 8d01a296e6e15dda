"""edward2's ``ed.layers``: its layer names, arguments and defaults over `bayes_planet.layers`.

Each class subclasses the library's layer of the same name (`_arguments.Edward2Arguments`):
edward2's positional order and defaults, every initializer, regularizer and constraint
resolved through the compat ``get``\\ s (so ``'trainable_normal'`` is edward2's
``TrainableNormal``, means ~ N(0, 1e-5²)), and edward2's extra methods (``call_weights``,
``ensemble_bias``, ``update_weights``). What the library does differently on purpose is
listed in docs/edward2.md; edward2 names the library does not implement raise
`NotImplementedError` when used.
"""

import tensorflow as tf

import bayes_planet.layers as _bl
from bayes_planet._keras import keras
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.initializers import TrainableDeterministic
from bayes_planet.compat.edward2.layers import gaussian_process, heteroscedastic, utils
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments
from bayes_planet.compat.edward2.layers.dense_extras import CondDense, DenseMultihead
from bayes_planet.compat.edward2.layers.depthwise import DepthwiseConv2DBatchEnsemble
from bayes_planet.compat.edward2.layers.discrete_flows import (
    DiscreteAutoregressiveFlow,
    DiscreteBipartiteFlow,
    SinkhornAutoregressiveFlow,
)
from bayes_planet.compat.edward2.layers.embeddings import EmbeddingReparameterization
from bayes_planet.compat.edward2.layers.heteroscedastic import (
    EnsembleHeteroscedasticOutputs,
    ExactSigmoidDense,
    HeteroscedasticSNGPLayer,
    MCSigmoidDenseFA,
    MCSoftmaxDense,
    MCSoftmaxDenseFA,
    MCSoftmaxDenseFASegmentation,
)
from bayes_planet.compat.edward2.layers.hierarchical import Conv2DHierarchical, DenseHierarchical
from bayes_planet.compat.edward2.layers.hyper_batch_ensemble import (
    Conv2DHyperBatchEnsemble,
    DenseHyperBatchEnsemble,
)
from bayes_planet.compat.edward2.layers.made import MADE
from bayes_planet.compat.edward2.layers.neural_process import Attention, NeuralProcess
from bayes_planet.compat.edward2.layers.noise import (
    NCPCategoricalPerturb,
    NCPNormalOutput,
    NCPNormalPerturb,
)
from bayes_planet.compat.edward2.layers.posterior_network import PosteriorNetworkLayer
from bayes_planet.compat.edward2.layers.random_feature import (
    LaplaceRandomFeatureCovariance,
    RandomFeatureGaussianProcess,
)

__all__ = [
    "ActNorm",
    "Attention",
    "BayesianLinearModel",
    "CondDense",
    "Conv1DBatchEnsemble",
    "Conv1DFlipout",
    "Conv1DRank1",
    "Conv1DReparameterization",
    "Conv2DBatchEnsemble",
    "Conv2DFlipout",
    "Conv2DHyperBatchEnsemble",
    "Conv2DHierarchical",
    "Conv2DRank1",
    "Conv2DReparameterization",
    "Conv2DVariationalDropout",
    "DenseBatchEnsemble",
    "DenseDVI",
    "DenseFlipout",
    "DenseHyperBatchEnsemble",
    "DenseMultihead",
    "DenseRank1",
    "DenseReparameterization",
    "DenseVariationalDropout",
    "DepthwiseConv2DBatchEnsemble",
    "DenseHierarchical",
    "DiscreteAutoregressiveFlow",
    "DiscreteBipartiteFlow",
    "EmbeddingReparameterization",
    "EnsembleHeteroscedasticOutputs",
    "ExactSigmoidDense",
    "ExponentiatedQuadratic",
    "GaussianProcess",
    "HeteroscedasticSNGPLayer",
    "LSTMCellFlipout",
    "LSTMCellRank1",
    "LSTMCellReparameterization",
    "MADE",
    "MCSigmoidDenseFA",
    "MCSoftmaxDense",
    "MCSoftmaxDenseFA",
    "MCSoftmaxDenseFASegmentation",
    "MixtureLogistic",
    "NeuralProcess",
    "PosteriorNetworkLayer",
    "NCPCategoricalPerturb",
    "NCPNormalOutput",
    "NCPNormalPerturb",
    "LaplaceRandomFeatureCovariance",
    "RandomFeatureGaussianProcess",
    "Reverse",
    "SinkhornAutoregressiveFlow",
    "SparseGaussianProcess",
    "SpectralNormalization",
    "SpectralNormalizationConv2D",
    "gaussian_process",
    "heteroscedastic",
    "utils",
]

ExponentiatedQuadratic = gaussian_process.ExponentiatedQuadratic
# Same arguments and defaults as edward2's.
ActNorm = _bl.ActNorm
GaussianProcess = _bl.GaussianProcess
BayesianLinearModel = _bl.BayesianLinearModel
Reverse = _bl.Reverse
SparseGaussianProcess = _bl.SparseGaussianProcess
MixtureLogistic = _bl.MixtureLogistic


class _ResampledEveryCall:
    """edward2's ``call_weights()``: the library's dense and convolutional layers draw fresh
    noise at every call, so there is nothing to redraw between calls."""

    def call_weights(self):
        """Kept for edward2 code: a no-op (every call draws its own noise)."""


def _dense(kernel_regularizer="normal_kl_divergence"):
    return signature("units", activation=None, use_bias=True,
                     kernel_initializer="trainable_normal", bias_initializer="zero",
                     kernel_regularizer=kernel_regularizer, bias_regularizer=None,
                     activity_regularizer=None)


_DENSE = _dense()


def _conv(strides, dilation_rate, kernel_regularizer="normal_kl_divergence"):
    return signature("filters", "kernel_size", strides=strides, padding="valid",
                     data_format=None, dilation_rate=dilation_rate, activation=None,
                     use_bias=True, kernel_initializer="trainable_normal",
                     bias_initializer="zeros", kernel_regularizer=kernel_regularizer,
                     bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                     bias_constraint=None)


@register
class DenseReparameterization(_ResampledEveryCall, Edward2Arguments,
                              _bl.DenseReparameterization):
    """edward2's ``DenseReparameterization`` (`bayes_planet.layers.DenseReparameterization`)."""

    edward2_signature = _DENSE


@register
class DenseFlipout(_ResampledEveryCall, Edward2Arguments, _bl.DenseFlipout):
    """edward2's ``DenseFlipout`` (`bayes_planet.layers.DenseFlipout`)."""

    edward2_signature = _DENSE


@register
class DenseVariationalDropout(_ResampledEveryCall, Edward2Arguments,
                              _bl.DenseVariationalDropout):
    """edward2's ``DenseVariationalDropout`` (`bayes_planet.layers.DenseVariationalDropout`)."""

    edward2_signature = _dense("log_uniform_kl_divergence")


@register
class DenseDVI(_ResampledEveryCall, Edward2Arguments, _bl.DenseDVI):
    """edward2's ``DenseDVI`` (`bayes_planet.layers.DenseDVI`)."""

    edward2_signature = _DENSE


@register
class Conv1DReparameterization(_ResampledEveryCall, Edward2Arguments,
                               _bl.Conv1DReparameterization):
    """edward2's ``Conv1DReparameterization``."""

    edward2_signature = _conv(1, 1)


@register
class Conv1DFlipout(_ResampledEveryCall, Edward2Arguments, _bl.Conv1DFlipout):
    """edward2's ``Conv1DFlipout``."""

    edward2_signature = _conv(1, 1)


@register
class Conv2DReparameterization(_ResampledEveryCall, Edward2Arguments,
                               _bl.Conv2DReparameterization):
    """edward2's ``Conv2DReparameterization``."""

    edward2_signature = _conv((1, 1), (1, 1))


@register
class Conv2DFlipout(_ResampledEveryCall, Edward2Arguments, _bl.Conv2DFlipout):
    """edward2's ``Conv2DFlipout``."""

    edward2_signature = _conv((1, 1), (1, 1))


@register
class Conv2DVariationalDropout(_ResampledEveryCall, Edward2Arguments,
                               _bl.Conv2DVariationalDropout):
    """edward2's ``Conv2DVariationalDropout``."""

    edward2_signature = _conv((1, 1), (1, 1), "log_uniform_kl_divergence")


# Recurrent cells -------------------------------------------------------------------------

_LSTM = dict(activation="tanh", recurrent_activation="sigmoid", use_bias=True,
             kernel_initializer="trainable_normal", recurrent_initializer="trainable_normal",
             bias_initializer="zeros", unit_forget_bias=True,
             kernel_regularizer="normal_kl_divergence",
             recurrent_regularizer="normal_kl_divergence", bias_regularizer=None,
             kernel_constraint=None, recurrent_constraint=None, bias_constraint=None,
             dropout=0.0, recurrent_dropout=0.0, implementation=2)


class _Edward2Cell(Edward2Arguments):
    """edward2's recurrent cell arguments and ``call_weights``.

    ``implementation`` (1: four gate matmuls, 2: one fused matmul) is accepted and dropped:
    the library's step is always the fused one, the same function.
    """

    edward2_dropped = {"implementation": (1, 2)}

    def call_weights(self):
        """edward2's ``call_weights``: draws the weight sample the next steps use
        (`sample_weights`)."""
        self.sample_weights()


@register
class LSTMCellReparameterization(_Edward2Cell, _bl.LSTMCellReparameterization):
    """edward2's ``LSTMCellReparameterization``: one weight sample per sequence, redrawn by
    ``call_weights()``, ``get_initial_state`` and every ``keras.layers.RNN`` call."""

    edward2_signature = signature("units", **_LSTM)


@register
class LSTMCellFlipout(_Edward2Cell, _bl.LSTMCellFlipout):
    """edward2's ``LSTMCellFlipout`` (weight perturbation and sign flips per sequence)."""

    edward2_signature = signature("units", **_LSTM)


# Ensembles -------------------------------------------------------------------------------


class _SharedOp:
    """Placed right after the compat ensemble class, so that edward2's
    ``super(ed.layers.DenseRank1, layer).call(x)`` is, as there, the shared Keras op without
    the members' factors and bias (``x @ W``, the convolution)."""

    def call(self, inputs, *args, **kwargs):
        del args, kwargs
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        return self._linear(x, tf.cast(self.kernel, x.dtype))


class _Edward2Ensemble(Edward2Arguments):
    """edward2's ensemble layers: ``ensemble_bias`` (the library's per-member ``bias``), and a
    point mass (``'trainable_deterministic'``) for a shared weight means its location, a
    trained point estimate (the library's shared weights are never distributions)."""

    _shared_weights = ("kernel_initializer", "bias_initializer", "recurrent_initializer")

    def edward2_initializer(self, name, initializer):
        if name in self._shared_weights and isinstance(initializer, TrainableDeterministic):
            return initializer.loc_initializer
        return initializer

    @property
    def ensemble_bias(self):
        return self.bias


def _ensemble(cls):
    """Class decorator of a compat ensemble layer ``class X(_SharedOp, _Edward2Ensemble,
    library X)``: its own ``call`` is the library's ensemble call (past `_SharedOp`, which
    edward2's ``super(X, layer).call`` reaches), and it is registered."""
    def call(self, inputs, *args, **kwargs):
        return super(_SharedOp, self).call(inputs, *args, **kwargs)
    call.__doc__ = "The library's ensemble call (every member on its block of the batch)."
    cls.call = call
    return register(cls)


_RANK1 = dict(alpha_initializer="trainable_normal", gamma_initializer="trainable_normal",
              kernel_initializer="glorot_uniform", bias_initializer="zeros",
              alpha_regularizer="normal_kl_divergence",
              gamma_regularizer="normal_kl_divergence", kernel_regularizer=None,
              bias_regularizer=None, activity_regularizer=None, alpha_constraint=None,
              gamma_constraint=None, kernel_constraint=None, bias_constraint=None,
              use_additive_perturbation=False, min_perturbation_value=-10,
              max_perturbation_value=10, ensemble_size=1)
_RANK1_FIXED = {"alpha_constraint": None, "gamma_constraint": None,
                "min_perturbation_value": -10, "max_perturbation_value": 10}


@_ensemble
class DenseRank1(_SharedOp, _Edward2Ensemble, _bl.DenseRank1):
    """edward2's ``DenseRank1``: ``ensemble_size=1`` and ``'trainable_normal'`` factors under
    ``'normal_kl_divergence'`` by default (the library's: 4, ±1 starts, the sign-mixture
    prior)."""

    edward2_signature = signature("units", activation=None, use_bias=True, **_RANK1)
    edward2_fixed = _RANK1_FIXED


def _conv_rank1(strides, dilation_rate, data_format):
    return signature("filters", "kernel_size", strides=strides, padding="valid",
                     data_format=data_format, dilation_rate=dilation_rate, activation=None,
                     use_bias=True, **_RANK1)


@_ensemble
class Conv1DRank1(_SharedOp, _Edward2Ensemble, _bl.Conv1DRank1):
    """edward2's ``Conv1DRank1`` (defaults as `DenseRank1`)."""

    edward2_signature = _conv_rank1(1, 1, "channels_last")
    edward2_fixed = _RANK1_FIXED


@_ensemble
class Conv2DRank1(_SharedOp, _Edward2Ensemble, _bl.Conv2DRank1):
    """edward2's ``Conv2DRank1`` (defaults as `DenseRank1`)."""

    edward2_signature = _conv_rank1((1, 1), (1, 1), None)
    edward2_fixed = _RANK1_FIXED


_BATCH_ENSEMBLE = dict(alpha_initializer="ones", gamma_initializer="ones")
_SHARED = dict(kernel_initializer="glorot_uniform", bias_initializer="zeros",
               kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
               kernel_constraint=None, bias_constraint=None)


@_ensemble
class DenseBatchEnsemble(_SharedOp, _Edward2Ensemble, _bl.DenseBatchEnsemble):
    """edward2's ``DenseBatchEnsemble``: fast weights start at ``'ones'`` (the library's: random
    signs); ``rank=1`` only."""

    edward2_signature = signature("units", rank=1, ensemble_size=4, activation=None,
                                  use_bias=True, **_BATCH_ENSEMBLE, **_SHARED)
    edward2_fixed = {"rank": 1}


@_ensemble
class Conv1DBatchEnsemble(_SharedOp, _Edward2Ensemble, _bl.Conv1DBatchEnsemble):
    """edward2's ``Conv1DBatchEnsemble`` (fast weights start at ``'ones'``)."""

    edward2_signature = signature("filters", "kernel_size", ensemble_size=4,
                                  **_BATCH_ENSEMBLE, strides=1, padding="valid",
                                  data_format="channels_last", activation=None, use_bias=True,
                                  **_SHARED)


@_ensemble
class Conv2DBatchEnsemble(_SharedOp, _Edward2Ensemble, _bl.Conv2DBatchEnsemble):
    """edward2's ``Conv2DBatchEnsemble`` (fast weights start at ``'ones'``; ``rank=1`` only)."""

    edward2_signature = signature("filters", "kernel_size", rank=1, ensemble_size=4,
                                  **_BATCH_ENSEMBLE, strides=(1, 1), padding="valid",
                                  data_format=None, activation=None, use_bias=True, **_SHARED)
    edward2_fixed = {"rank": 1}


_LSTM_RANK1 = dict(
    activation="tanh", recurrent_activation="sigmoid", use_bias=True,
    alpha_initializer="trainable_normal", gamma_initializer="trainable_normal",
    kernel_initializer="glorot_uniform", recurrent_alpha_initializer="trainable_normal",
    recurrent_gamma_initializer="trainable_normal", recurrent_initializer="orthogonal",
    bias_initializer="zeros", unit_forget_bias=True, alpha_regularizer="normal_kl_divergence",
    gamma_regularizer="normal_kl_divergence", kernel_regularizer=None,
    recurrent_alpha_regularizer="normal_kl_divergence",
    recurrent_gamma_regularizer="normal_kl_divergence", recurrent_regularizer=None,
    bias_regularizer=None, alpha_constraint=None, gamma_constraint=None, kernel_constraint=None,
    recurrent_alpha_constraint=None, recurrent_gamma_constraint=None, recurrent_constraint=None,
    bias_constraint=None, dropout=0.0, recurrent_dropout=0.0, implementation=2,
    use_additive_perturbation=False, ensemble_size=1)


@register
class LSTMCellRank1(_Edward2Cell, _Edward2Ensemble, _bl.LSTMCellRank1):
    """edward2's ``LSTMCellRank1`` (defaults as `DenseRank1`); ``_sample_weights(inputs)``
    draws the factors the next steps use."""

    edward2_signature = signature("units", **_LSTM_RANK1)
    edward2_fixed = {"alpha_constraint": None, "gamma_constraint": None,
                     "recurrent_alpha_constraint": None, "recurrent_gamma_constraint": None}

    def call(self, inputs, states, training=None):
        return _bl.LSTMCellRank1.call(self, inputs, states, training=training)

    def _sample_weights(self, inputs=None, batch_size=None):
        if batch_size is None and inputs is not None:
            batch_size = tf.shape(inputs)[0]
        self.sample_weights(batch_size=batch_size)


# Spectral normalization ------------------------------------------------------------------


class _Edward2SpectralNormalization(Edward2Arguments):
    """edward2's ``iteration`` (the library's ``power_iterations``) and ``update_weights()``.

    ``training`` (whether calls run the power iteration: the library runs it in training calls
    only), ``aggregation`` and ``inhere_layer_name`` are accepted at edward2's defaults.
    """

    edward2_renamed = {"iteration": "power_iterations"}
    edward2_fixed = {"training": True, "aggregation": tf.VariableAggregation.MEAN,
                     "inhere_layer_name": False}

    def update_weights(self):
        """edward2's ``update_weights``: runs ``iteration`` power-iteration steps and writes the
        normalized kernel into the wrapped layer's kernel (the library normalizes at every
        call; a written kernel, of spectral norm <= norm_multiplier, is left as it is)."""
        self.layer.kernel.assign(self.normalized_kernel(training=True))


@register
class SpectralNormalization(_Edward2SpectralNormalization, _bl.SpectralNormalization):
    """edward2's ``SpectralNormalization(layer, iteration=1, norm_multiplier=0.95)``."""

    edward2_signature = signature("layer", iteration=1, norm_multiplier=0.95, training=True,
                                  aggregation=tf.VariableAggregation.MEAN,
                                  inhere_layer_name=False)


@register
class SpectralNormalizationConv2D(_Edward2SpectralNormalization,
                                  _bl.SpectralNormalizationConv2D):
    """edward2's ``SpectralNormalizationConv2D(layer, iteration=1, norm_multiplier=0.95)``."""

    edward2_signature = signature("layer", iteration=1, norm_multiplier=0.95, training=True,
                                  aggregation=tf.VariableAggregation.MEAN,
                                  inhere_layer_name=False)


# edward2 layers the library does not implement -------------------------------------------

NOT_IMPLEMENTED = (
    "CondConv2D", "DepthwiseCondConv2D",
    "EnsembleSyncBatchNorm", "LinearKernel",
    "MCSoftmaxDenseFACustomLayers", "MultiHeadMCSoftmaxDenseFA", "Zeros",
)


def _not_implemented(name):
    """A class standing for edward2's layer ``name`` (so code may still subclass it); making
    one raises `NotImplementedError`."""
    def __init__(self, *args, **kwargs):
        del args, kwargs
        raise NotImplementedError(f"edward2's layers.{name} is not implemented in bayes_planet "
                                  "(docs/edward2.md lists what is).")
    return type(name, (keras.layers.Layer,), {"__init__": __init__, "__module__": __name__})


for _name in NOT_IMPLEMENTED:
    if _name not in globals():
        globals()[_name] = _not_implemented(_name)
del _name

# Keras' own layers under edward2's names of them.
keras_layers = keras.layers
