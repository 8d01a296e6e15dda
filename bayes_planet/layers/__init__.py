"""Bayesian Layers: Keras layers that are distributions over functions.

Drop-in twins of Keras layers (same constructor arguments, tensor-in/tensor-out)
whose weights carry a posterior (a *distribution initializer*) and whose KL to the
prior is a *regularizer* collected in ``layer.losses`` (Tran et al., 2019).

``keras`` is the Keras the layers are built on (the process's own: Keras 2 with TF 2.15,
Keras 3 with TF >= 2.16 unless ``TF_USE_LEGACY_KERAS`` asks for tf-keras), and ``KERAS3``
says which: build the models around the layers with it (``from bayes_planet.layers import
keras``), never ``tf.keras``.
"""

from bayes_planet._keras import KERAS3, keras
from bayes_planet.layers import constraints, initializers, kernels, regularizers, tracing
from bayes_planet.layers.attention import (
    EinsumDenseFlipout,
    EinsumDenseReparameterization,
    MultiHeadAttentionFlipout,
    MultiHeadAttentionReparameterization,
)
from bayes_planet.layers.base import BayesianLayer, bayesian_layers, fixed_noise, posterior_mean
from bayes_planet.layers.conditional import CondDense
from bayes_planet.layers.constraints import Exp, Positive, Softplus
from bayes_planet.layers.conv import (
    Conv1DFlipout,
    Conv1DReparameterization,
    Conv1DVariationalDropout,
    Conv2DFlipout,
    Conv2DLocalReparameterization,
    Conv2DReparameterization,
    Conv2DVariationalDropout,
)
from bayes_planet.layers.dense import (
    DenseDVI,
    DenseFlipout,
    DenseLocalReparameterization,
    DenseReparameterization,
    DenseVariationalDropout,
)
from bayes_planet.layers.discrete_flows import (
    DiscreteAutoregressiveFlow,
    DiscreteBipartiteFlow,
    SinkhornAutoregressiveFlow,
)
from bayes_planet.layers.embeddings import EmbeddingReparameterization
from bayes_planet.layers.ensemble.attention import EinsumDenseRank1, MultiHeadAttentionRank1
from bayes_planet.layers.ensemble.conv import (
    Conv1DBatchEnsemble,
    Conv1DRank1,
    Conv2DBatchEnsemble,
    Conv2DRank1,
)
from bayes_planet.layers.ensemble.dense import DenseBatchEnsemble, DenseRank1
from bayes_planet.layers.ensemble.depthwise import DepthwiseConv2DBatchEnsemble
from bayes_planet.layers.ensemble.hyper import Conv2DHyperBatchEnsemble, DenseHyperBatchEnsemble
from bayes_planet.layers.ensemble.models import (
    DeepEnsemble,
    EnsembleModel,
    MCDropout,
    MonteCarloModel,
    deep_ensemble,
    mc_dropout,
    mean_predictive,
    tile_batch,
)
from bayes_planet.layers.ensemble.multihead import DenseMultihead
from bayes_planet.layers.ensemble.recurrent import GRUCellRank1, LSTMCellRank1
from bayes_planet.layers.flows import (
    MADE,
    ActNorm,
    Permutation,
    RealNVP,
    Reverse,
    ReversibleLayer,
    transform_random_variable,
)
from bayes_planet.layers.gaussian_process import (
    GaussianProcess,
    SparseGaussianProcess,
    TrainableMultivariateNormal,
    WhitenedKLDivergence,
)
from bayes_planet.layers.heteroscedastic import (
    EnsembleHeteroscedasticOutputs,
    ExactSigmoidDense,
    MCSigmoidDenseFA,
    MCSoftmaxDense,
    MCSoftmaxDenseFA,
    MCSoftmaxDenseFASegmentation,
)
from bayes_planet.layers.hetsngp import HeteroscedasticSNGPLayer
from bayes_planet.layers.hierarchical import Conv2DHierarchical, DenseHierarchical
from bayes_planet.layers.initializers import (
    DistributionInitializer,
    FixedNormal,
    RandomSign,
    TrainableDeterministic,
    TrainableFullCovarianceNormal,
    TrainableGlorotNormal,
    TrainableHeNormal,
    TrainableNormal,
    TrainableNormalSmallStddev,
    TrainableNormalWide,
    TrainableRandomSignNormal,
    TrainableRank1Normal,
)
from bayes_planet.layers.kernels import (
    ConstantMean,
    ExponentiatedQuadratic,
    Linear,
    LinearMean,
    Matern12,
    Matern32,
    Matern52,
    ZeroMean,
)
from bayes_planet.layers.laplace_covariance import LaplaceRandomFeatureCovariance
from bayes_planet.layers.linear_model import BayesianLinearModel
from bayes_planet.layers.ncp import NCPCategoricalPerturb, NCPNormalOutput, NCPNormalPerturb
from bayes_planet.layers.neural_process import NeuralProcess, NeuralProcessAttention
from bayes_planet.layers.outputs import (
    Bernoulli,
    Categorical,
    Discretize,
    DiscretizedDistribution,
    MixtureLogistic,
    MixtureNormal,
    Normal,
    negative_log_likelihood,
)
from bayes_planet.layers.point_process import GridPoissonProcess, PoissonProcess
from bayes_planet.layers.posterior_network import FlowDensity, PosteriorNetwork, uce_loss
from bayes_planet.layers.random_features import RandomFourierFeatures
from bayes_planet.layers.random_variable import RandomVariable
from bayes_planet.layers.recurrent import (
    GRUCellFlipout,
    GRUCellReparameterization,
    LSTMCellFlipout,
    LSTMCellReparameterization,
)
from bayes_planet.layers.regularizers import (
    FanInNormalKLDivergence,
    KLAnnealing,
    LogUniformKLDivergence,
    NormalEmpiricalBayesKLDivergence,
    NormalKLDivergence,
    NormalKLDivergenceWithTiedMean,
    Rank1NormalKLDivergence,
    Rank1SignMixtureKLDivergence,
    ScaleMixtureKLDivergence,
    set_dataset_size,
    set_kl_scale,
)
from bayes_planet.layers.revnet import RevNetBlock, RevNetSequence
from bayes_planet.layers.sngp import (
    GPCovarianceReset,
    RandomFeatureGaussianProcess,
    mean_field_logits,
)
from bayes_planet.layers.spectral_norm import SpectralNormalization, SpectralNormalizationConv2D
from bayes_planet.layers.tracing import condition, intercept, tape
from bayes_planet.layers.transformer import PositionEmbedding, TransformerBlock, build_transformer
from bayes_planet.layers.vq import VectorQuantizer, codebook_usage

__all__ = [
    "KERAS3",
    "ActNorm",
    "BayesianLayer",
    "Bernoulli",
    "Categorical",
    "CondDense",
    "ConstantMean",
    "Conv1DBatchEnsemble",
    "Conv1DFlipout",
    "Conv1DRank1",
    "Conv1DReparameterization",
    "Conv1DVariationalDropout",
    "Conv2DBatchEnsemble",
    "Conv2DFlipout",
    "Conv2DHyperBatchEnsemble",
    "Conv2DHierarchical",
    "Conv2DLocalReparameterization",
    "Conv2DRank1",
    "Conv2DReparameterization",
    "Conv2DVariationalDropout",
    "DeepEnsemble",
    "DenseBatchEnsemble",
    "DenseDVI",
    "DenseFlipout",
    "DenseHyperBatchEnsemble",
    "DenseMultihead",
    "DenseHierarchical",
    "DenseLocalReparameterization",
    "DenseRank1",
    "DenseReparameterization",
    "DenseVariationalDropout",
    "DepthwiseConv2DBatchEnsemble",
    "DiscreteAutoregressiveFlow",
    "DiscreteBipartiteFlow",
    "Discretize",
    "DiscretizedDistribution",
    "DistributionInitializer",
    "EmbeddingReparameterization",
    "EnsembleModel",
    "EinsumDenseFlipout",
    "EinsumDenseRank1",
    "EinsumDenseReparameterization",
    "Exp",
    "ExponentiatedQuadratic",
    "FixedNormal",
    "GPCovarianceReset",
    "EnsembleHeteroscedasticOutputs",
    "ExactSigmoidDense",
    "HeteroscedasticSNGPLayer",
    "MCSigmoidDenseFA",
    "MCSoftmaxDense",
    "MCSoftmaxDenseFA",
    "MCSoftmaxDenseFASegmentation",
    "GRUCellFlipout",
    "GRUCellRank1",
    "GRUCellReparameterization",
    "GaussianProcess",
    "GridPoissonProcess",
    "LSTMCellFlipout",
    "LSTMCellRank1",
    "LSTMCellReparameterization",
    "Linear",
    "LinearMean",
    "FanInNormalKLDivergence",
    "KLAnnealing",
    "LogUniformKLDivergence",
    "MCDropout",
    "MADE",
    "Matern12",
    "Matern32",
    "Matern52",
    "MixtureLogistic",
    "MixtureNormal",
    "MonteCarloModel",
    "MultiHeadAttentionFlipout",
    "MultiHeadAttentionRank1",
    "MultiHeadAttentionReparameterization",
    "NCPCategoricalPerturb",
    "NCPNormalOutput",
    "NCPNormalPerturb",
    "Normal",
    "NormalEmpiricalBayesKLDivergence",
    "NormalKLDivergence",
    "NormalKLDivergenceWithTiedMean",
    "ScaleMixtureKLDivergence",
    "Permutation",
    "PosteriorNetwork",
    "FlowDensity",
    "PoissonProcess",
    "PositionEmbedding",
    "Positive",
    "RandomFeatureGaussianProcess",
    "LaplaceRandomFeatureCovariance",
    "BayesianLinearModel",
    "NeuralProcess",
    "NeuralProcessAttention",
    "RandomFourierFeatures",
    "RandomSign",
    "RandomVariable",
    "Rank1NormalKLDivergence",
    "Rank1SignMixtureKLDivergence",
    "RealNVP",
    "RevNetBlock",
    "RevNetSequence",
    "Reverse",
    "ReversibleLayer",
    "Softplus",
    "SinkhornAutoregressiveFlow",
    "SparseGaussianProcess",
    "SpectralNormalization",
    "SpectralNormalizationConv2D",
    "TrainableDeterministic",
    "TrainableFullCovarianceNormal",
    "TrainableGlorotNormal",
    "TrainableHeNormal",
    "TrainableMultivariateNormal",
    "TrainableNormal",
    "TrainableNormalSmallStddev",
    "TrainableNormalWide",
    "TrainableRandomSignNormal",
    "TrainableRank1Normal",
    "TransformerBlock",
    "VectorQuantizer",
    "WhitenedKLDivergence",
    "ZeroMean",
    "bayesian_layers",
    "build_transformer",
    "codebook_usage",
    "condition",
    "constraints",
    "deep_ensemble",
    "fixed_noise",
    "initializers",
    "intercept",
    "keras",
    "kernels",
    "mc_dropout",
    "mean_field_logits",
    "mean_predictive",
    "negative_log_likelihood",
    "posterior_mean",
    "regularizers",
    "set_dataset_size",
    "set_kl_scale",
    "tape",
    "tile_batch",
    "tracing",
    "transform_random_variable",
    "uce_loss",
]
