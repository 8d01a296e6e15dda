"""Ensemble layers: ``E`` members in one layer, on the ensemble batch convention.

    dense      rank-1 Bayesian (`DenseRank1`) and BatchEnsemble (`DenseBatchEnsemble`) dense
               layers, and the mixins and factor machinery every ensemble layer shares
    conv       their convolutional twins (`Conv1DRank1`, `Conv2DBatchEnsemble`, ...)
    attention  rank-1 attention (`EinsumDenseRank1`, `MultiHeadAttentionRank1`)
    recurrent  rank-1 recurrent cells (`LSTMCellRank1`, `GRUCellRank1`)
    models     ensembles as Keras models (`EnsembleModel`, `DeepEnsemble`, `MCDropout`)

The package itself is `dense`'s names (what ``bayes_planet.layers.ensemble`` held before it
became a package); every layer is also ``bayes_planet.layers.<Name>``.
"""

from bayes_planet.layers.ensemble.dense import (
    CLIP,
    ENSEMBLE_SIZE,
    FACTOR_NAMES,
    FACTOR_POSTERIORS,
    FACTOR_PRIORS,
    FAST_WEIGHTS,
    RANK1_POSTERIOR,
    RANK1_PRIOR,
    SAMPLINGS,
    BatchEnsemble,
    DenseBatchEnsemble,
    DenseRank1,
    EnsembleFactors,
    EnsembleLayer,
    Rank1CauchyKLDivergence,
    Rank1Ensemble,
    Rank1Factors,
    TrainableRandomSignCauchy,
    check_factor_prior,
    draw_factor,
    factor_arguments,
    factor_initializer,
    factor_posterior,
    factor_prior_mismatch,
    factor_regularizer,
    init_arguments,
    member_rows,
    point_initializer,
    sample_factor,
    standard_cauchy,
)

__all__ = [
    "CLIP",
    "ENSEMBLE_SIZE",
    "FACTOR_NAMES",
    "FACTOR_POSTERIORS",
    "FACTOR_PRIORS",
    "FAST_WEIGHTS",
    "RANK1_POSTERIOR",
    "RANK1_PRIOR",
    "SAMPLINGS",
    "BatchEnsemble",
    "DenseBatchEnsemble",
    "DenseRank1",
    "EnsembleFactors",
    "EnsembleLayer",
    "Rank1CauchyKLDivergence",
    "Rank1Ensemble",
    "Rank1Factors",
    "TrainableRandomSignCauchy",
    "check_factor_prior",
    "draw_factor",
    "factor_arguments",
    "factor_initializer",
    "factor_posterior",
    "factor_prior_mismatch",
    "factor_regularizer",
    "init_arguments",
    "member_rows",
    "point_initializer",
    "sample_factor",
    "standard_cauchy",
]
