"""Bayesian Layers: Keras layers that are distributions over functions.

Drop-in twins of Keras layers (same constructor arguments, tensor-in/tensor-out)
whose weights carry a posterior (a *distribution initializer*) and whose KL to the
prior is a *regularizer* collected in ``layer.losses`` (Tran et al., 2019).
"""

from bayes_planet.layers import constraints, initializers, regularizers
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
from bayes_planet.layers.initializers import (
    DistributionInitializer,
    FixedNormal,
    TrainableDeterministic,
    TrainableGlorotNormal,
    TrainableHeNormal,
    TrainableNormal,
)
from bayes_planet.layers.random_variable import RandomVariable
from bayes_planet.layers.regularizers import (
    LogUniformKLDivergence,
    NormalEmpiricalBayesKLDivergence,
    NormalKLDivergence,
    set_dataset_size,
)

__all__ = [
    "BayesianLayer",
    "bayesian_layers",
    "fixed_noise",
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
    "FixedNormal",
    "LogUniformKLDivergence",
    "NormalEmpiricalBayesKLDivergence",
    "NormalKLDivergence",
    "Positive",
    "RandomVariable",
    "Softplus",
    "TrainableDeterministic",
    "TrainableGlorotNormal",
    "TrainableHeNormal",
    "TrainableNormal",
    "constraints",
    "initializers",
    "regularizers",
    "set_dataset_size",
]
