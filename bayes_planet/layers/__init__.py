"""Bayesian Layers: Keras layers that are distributions over functions.

Drop-in twins of Keras layers (same constructor arguments, tensor-in/tensor-out)
whose weights carry a posterior (a *distribution initializer*) and whose KL to the
prior is a *regularizer* collected in ``layer.losses`` (Tran et al., 2019).
"""

from bayes_planet.layers import constraints, initializers, kernels, regularizers, tracing
from bayes_planet.layers.attention import (
    EinsumDenseFlipout,
    EinsumDenseReparameterization,
    MultiHeadAttentionFlipout,
    MultiHeadAttentionReparameterization,
)
from bayes_planet.layers.base import BayesianLayer, bayesian_layers, fixed_noise, posterior_mean
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
from bayes_planet.layers.ensemble import DenseBatchEnsemble, DenseRank1
from bayes_planet.layers.ensemble_conv import Conv1DRank1, Conv2DBatchEnsemble, Conv2DRank1
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
from bayes_planet.layers.initializers import (
    DistributionInitializer,
    FixedNormal,
    RandomSign,
    TrainableDeterministic,
    TrainableGlorotNormal,
    TrainableHeNormal,
    TrainableNormal,
    TrainableRandomSignNormal,
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
    LogUniformKLDivergence,
    NormalEmpiricalBayesKLDivergence,
    NormalKLDivergence,
    Rank1NormalKLDivergence,
    ScaleMixtureKLDivergence,
    set_dataset_size,
)
from bayes_planet.layers.revnet import RevNetBlock, RevNetSequence
from bayes_planet.layers.tracing import condition, intercept, tape
from bayes_planet.layers.transformer import PositionEmbedding, TransformerBlock, build_transformer
from bayes_planet.layers.vq import VectorQuantizer, codebook_usage

__all__ = [
    "ActNorm",
    "BayesianLayer",
    "Bernoulli",
    "Categorical",
    "ConstantMean",
    "Conv1DFlipout",
    "Conv1DRank1",
    "Conv1DReparameterization",
    "Conv1DVariationalDropout",
    "Conv2DBatchEnsemble",
    "Conv2DFlipout",
    "Conv2DLocalReparameterization",
    "Conv2DRank1",
    "Conv2DReparameterization",
    "Conv2DVariationalDropout",
    "DenseBatchEnsemble",
    "DenseDVI",
    "DenseFlipout",
    "DenseLocalReparameterization",
    "DenseRank1",
    "DenseReparameterization",
    "DenseVariationalDropout",
    "Discretize",
    "DiscretizedDistribution",
    "DistributionInitializer",
    "EinsumDenseFlipout",
    "EinsumDenseReparameterization",
    "Exp",
    "ExponentiatedQuadratic",
    "FixedNormal",
    "GRUCellFlipout",
    "GRUCellReparameterization",
    "GaussianProcess",
    "GridPoissonProcess",
    "LSTMCellFlipout",
    "LSTMCellReparameterization",
    "Linear",
    "LinearMean",
    "FanInNormalKLDivergence",
    "LogUniformKLDivergence",
    "MADE",
    "Matern12",
    "Matern32",
    "Matern52",
    "MixtureLogistic",
    "MixtureNormal",
    "MultiHeadAttentionFlipout",
    "MultiHeadAttentionReparameterization",
    "Normal",
    "NormalEmpiricalBayesKLDivergence",
    "NormalKLDivergence",
    "ScaleMixtureKLDivergence",
    "Permutation",
    "PoissonProcess",
    "PositionEmbedding",
    "Positive",
    "RandomFourierFeatures",
    "RandomSign",
    "RandomVariable",
    "Rank1NormalKLDivergence",
    "RealNVP",
    "RevNetBlock",
    "RevNetSequence",
    "Reverse",
    "ReversibleLayer",
    "Softplus",
    "SparseGaussianProcess",
    "TrainableDeterministic",
    "TrainableGlorotNormal",
    "TrainableHeNormal",
    "TrainableMultivariateNormal",
    "TrainableNormal",
    "TrainableRandomSignNormal",
    "TransformerBlock",
    "VectorQuantizer",
    "WhitenedKLDivergence",
    "ZeroMean",
    "bayesian_layers",
    "build_transformer",
    "codebook_usage",
    "condition",
    "constraints",
    "fixed_noise",
    "initializers",
    "intercept",
    "kernels",
    "negative_log_likelihood",
    "posterior_mean",
    "regularizers",
    "set_dataset_size",
    "tape",
    "tracing",
    "transform_random_variable",
]
