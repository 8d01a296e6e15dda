"""Bayesian Layers: Keras layers that are distributions over functions.

Drop-in twins of Keras layers (same constructor arguments, tensor-in/tensor-out)
whose weights carry a posterior (a *distribution initializer*) and whose KL to the
prior is a *regularizer* collected in ``layer.losses`` (Tran et al., 2019).
"""

from bayes_planet.layers import constraints, initializers, kernels, regularizers, tracing
from bayes_planet.layers.base import BayesianLayer, bayesian_layers, fixed_noise
from bayes_planet.layers.constraints import Exp, Positive, Softplus
from bayes_planet.layers.conv import (
    Conv1DFlipout,
    Conv1DReparameterization,
    Conv2DFlipout,
    Conv2DLocalReparameterization,
    Conv2DReparameterization,
)
from bayes_planet.layers.dense import (
    DenseDVI,
    DenseFlipout,
    DenseLocalReparameterization,
    DenseReparameterization,
    DenseVariationalDropout,
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
    TrainableDeterministic,
    TrainableGlorotNormal,
    TrainableHeNormal,
    TrainableNormal,
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
from bayes_planet.layers.point_process import GridPoissonProcess, PoissonProcess
from bayes_planet.layers.random_features import RandomFourierFeatures
from bayes_planet.layers.random_variable import RandomVariable
from bayes_planet.layers.regularizers import (
    LogUniformKLDivergence,
    NormalEmpiricalBayesKLDivergence,
    NormalKLDivergence,
    set_dataset_size,
)
from bayes_planet.layers.tracing import condition, intercept, tape

__all__ = [
    "BayesianLayer",
    "ConstantMean",
    "Conv1DFlipout",
    "Conv1DReparameterization",
    "Conv2DFlipout",
    "Conv2DLocalReparameterization",
    "Conv2DReparameterization",
    "DenseDVI",
    "DenseFlipout",
    "DenseLocalReparameterization",
    "DenseReparameterization",
    "DenseVariationalDropout",
    "DistributionInitializer",
    "Exp",
    "ExponentiatedQuadratic",
    "FixedNormal",
    "GaussianProcess",
    "GridPoissonProcess",
    "Linear",
    "LinearMean",
    "LogUniformKLDivergence",
    "Matern12",
    "Matern32",
    "Matern52",
    "NormalEmpiricalBayesKLDivergence",
    "NormalKLDivergence",
    "PoissonProcess",
    "Positive",
    "RandomFourierFeatures",
    "RandomVariable",
    "Softplus",
    "SparseGaussianProcess",
    "TrainableDeterministic",
    "TrainableGlorotNormal",
    "TrainableHeNormal",
    "TrainableMultivariateNormal",
    "TrainableNormal",
    "WhitenedKLDivergence",
    "ZeroMean",
    "bayesian_layers",
    "condition",
    "constraints",
    "fixed_noise",
    "initializers",
    "intercept",
    "kernels",
    "regularizers",
    "set_dataset_size",
    "tape",
    "tracing",
]
