"""The one registry of layer classes by family and estimator.

``get(family, estimator)`` returns the layer class: ``get('dense', 'flipout')`` is
`bayes_planet.layers.DenseFlipout`, and the estimator ``'deterministic'`` of every
family is its Keras twin (``get('dense', 'deterministic')`` is ``keras.layers.Dense``).
``estimators(family)`` lists a family's estimator names, deterministic first
(``ensembles=True`` adds those of its ensemble family, `ensemble_family`). The
agent's config, the RSSM, the Transformer, the experiments and the benchmarks read
their estimator choices here, so a new estimator or layer family touches its own
file, this table and its tests.

Families are the layer types: ``'dense'``, ``'conv1d'``, ``'conv2d'``,
``'einsum_dense'``, ``'multi_head_attention'``, ``'lstm_cell'``, ``'gru_cell'``, and
``'dense_ensemble'``, ``'conv1d_ensemble'``, ``'conv2d_ensemble'`` (rank-1 and
BatchEnsemble layers: families of their own because they need the ensemble batch
convention of `bayes_planet.layers.ensemble`, while the ``'dense'``/``'conv*'``
families' readers feed plain batches), and for the same reason
``'einsum_dense_ensemble'``, ``'multi_head_attention_ensemble'`` (rank-1 attention,
`bayes_planet.layers.ensemble.attention`; the Transformer reads them, see
`bayes_planet.layers.transformer`), ``'lstm_cell_ensemble'`` and ``'gru_cell_ensemble'``
(rank-1 cells, `bayes_planet.layers.ensemble.recurrent`).
Estimators are the ways a family's weights are sampled (`bayes_planet.layers.estimators`)
or, for ``'variational_dropout'``, a whole recipe (its own prior; it samples only with
``training=True`` and prunes at inference), which ``estimators(family,
sampling_only=True)`` leaves out for callers that call layers without ``training``.

Importing this module does not import TensorFlow (the agent's config reads it);
`get` imports the layer library.
"""

import importlib

__all__ = ["ensemble_family", "ensemble_members", "estimators", "families", "family_for", "get",
           "register", "unregister"]

#: family -> (its Keras twin in ``keras.layers``,
#:            {estimator: "module.Class" in ``bayes_planet.layers``, imported by `get`}).
_FAMILIES = {
    "dense": ("Dense", {
        "reparameterization": "dense.DenseReparameterization",
        "flipout": "dense.DenseFlipout",
        "local_reparameterization": "dense.DenseLocalReparameterization",
        "variational_dropout": "dense.DenseVariationalDropout",
    }),
    "dense_ensemble": ("Dense", {
        "rank1": "ensemble.dense.DenseRank1",
        "batch_ensemble": "ensemble.dense.DenseBatchEnsemble",
    }),
    "conv1d": ("Conv1D", {
        "reparameterization": "conv.Conv1DReparameterization",
        "flipout": "conv.Conv1DFlipout",
        "variational_dropout": "conv.Conv1DVariationalDropout",
    }),
    "conv2d": ("Conv2D", {
        "reparameterization": "conv.Conv2DReparameterization",
        "flipout": "conv.Conv2DFlipout",
        "local_reparameterization": "conv.Conv2DLocalReparameterization",
        "variational_dropout": "conv.Conv2DVariationalDropout",
    }),
    "conv1d_ensemble": ("Conv1D", {
        "rank1": "ensemble.conv.Conv1DRank1",
        "batch_ensemble": "ensemble.conv.Conv1DBatchEnsemble",
    }),
    "conv2d_ensemble": ("Conv2D", {
        "rank1": "ensemble.conv.Conv2DRank1",
        "batch_ensemble": "ensemble.conv.Conv2DBatchEnsemble",
    }),
    "einsum_dense": ("EinsumDense", {
        "reparameterization": "attention.EinsumDenseReparameterization",
        "flipout": "attention.EinsumDenseFlipout",
    }),
    "multi_head_attention": ("MultiHeadAttention", {
        "reparameterization": "attention.MultiHeadAttentionReparameterization",
        "flipout": "attention.MultiHeadAttentionFlipout",
    }),
    "lstm_cell": ("LSTMCell", {
        "reparameterization": "recurrent.LSTMCellReparameterization",
        "flipout": "recurrent.LSTMCellFlipout",
    }),
    "gru_cell": ("GRUCell", {
        "reparameterization": "recurrent.GRUCellReparameterization",
        "flipout": "recurrent.GRUCellFlipout",
    }),
    "einsum_dense_ensemble": ("EinsumDense", {
        "rank1": "ensemble.attention.EinsumDenseRank1",
    }),
    "multi_head_attention_ensemble": ("MultiHeadAttention", {
        "rank1": "ensemble.attention.MultiHeadAttentionRank1",
    }),
    "lstm_cell_ensemble": ("LSTMCell", {
        "rank1": "ensemble.recurrent.LSTMCellRank1",
    }),
    "gru_cell_ensemble": ("GRUCell", {
        "rank1": "ensemble.recurrent.GRUCellRank1",
    }),
}
DETERMINISTIC = "deterministic"
#: ``<family><_ENSEMBLE>`` holds the ensemble layers of ``<family>`` (`ensemble_family`).
_ENSEMBLE = "_ensemble"
#: Estimators that are whole recipes (own prior, ``training``-dependent call).
_RECIPES = ("variational_dropout",)


def families():
    """The registered family names."""
    return tuple(_FAMILIES)


def _family(family):
    if family not in _FAMILIES:
        raise ValueError(f"Unknown layer family. Expected one of {list(_FAMILIES)}. "
                         f"Received: family={family!r}")
    return _FAMILIES[family]


def estimators(family, sampling_only=False, ensembles=False):
    """The estimator names of ``family``, ``'deterministic'`` first, in registration order.

    ``sampling_only=True`` leaves out the recipes (``'variational_dropout'``);
    ``ensembles=True`` appends the estimators of ``family``'s ensemble family
    (`ensemble_family`; ``'rank1'``, ``'batch_ensemble'`` for ``'dense'``), for a reader
    that feeds those layers the ensemble batch convention (e.g. the agent's RSSM).
    """
    twin, classes = _family(family)
    names = ((DETERMINISTIC,) if twin else ()) + tuple(classes)
    names = tuple(n for n in names if not (sampling_only and n in _RECIPES))
    ensemble = ensemble_family(family) if ensembles else None
    if ensemble is not None:
        names += tuple(n for n in estimators(ensemble, sampling_only) if n not in names)
    return names


def ensemble_family(family):
    """The family of ``family``'s ensemble layers (``'dense'`` -> ``'dense_ensemble'``),
    or None where it has none (an ensemble family has none either)."""
    _family(family)
    name = family + _ENSEMBLE
    return name if name in _FAMILIES else None


def family_for(family, estimator):
    """``family``, or its ensemble family, whichever has ``estimator`` (a one-line error
    naming both families' choices if neither has it)."""
    if estimator in estimators(family):
        return family
    ensemble = ensemble_family(family)
    if ensemble is not None and estimator in estimators(ensemble):
        return ensemble
    raise ValueError(f"Unknown estimator for the {family!r} family. Expected one of "
                     f"{list(estimators(family, ensembles=True))}. "
                     f"Received: estimator={estimator!r}")


def ensemble_members(family, estimator, ensemble_size):
    """The members a ``family`` layer of ``estimator`` holds: ``ensemble_size`` for an
    estimator of the ensemble family (``'rank1'``, ``'batch_ensemble'``), 1 for the others."""
    return ensemble_size if family_for(family, estimator) != family else 1


def get(family, estimator):
    """The layer class of ``family`` with ``estimator`` (the Keras twin for 'deterministic')."""
    twin, classes = _family(family)
    if estimator == DETERMINISTIC and twin:
        from bayes_planet._keras import keras

        return getattr(keras.layers, twin)
    if estimator not in classes:
        raise ValueError(f"Unknown estimator for the {family!r} family. Expected one of "
                         f"{list(estimators(family))}. Received: estimator={estimator!r}")
    cls = classes[estimator]
    if isinstance(cls, str):
        module, name = cls.rsplit(".", 1)
        cls = getattr(importlib.import_module(f"bayes_planet.layers.{module}"), name)
    return cls


def register(family, estimator, cls):
    """Adds ``cls`` as ``family``'s ``estimator`` (e.g. a layer defined outside the library).

    A new family (``family`` not yet known) needs ``cls`` to be its first estimator and has
    no Keras twin under 'deterministic' until it is written into the table above.
    """
    if not isinstance(estimator, str) or not estimator or estimator == DETERMINISTIC:
        raise ValueError("Expected a new estimator name (not 'deterministic'). "
                         f"Received: estimator={estimator!r}")
    if not isinstance(cls, type):
        raise TypeError(f"Expected a layer class. Received: cls={cls!r}")
    _, classes = _FAMILIES.setdefault(family, (None, {}))
    if estimator in classes:
        raise ValueError(f"Estimator {estimator!r} of the {family!r} family is already "
                         f"registered. Received: cls={cls.__name__}")
    classes[estimator] = cls
    return cls


def unregister(family, estimator):
    """Removes an estimator added with `register` (the table's own entries stay)."""
    twin, classes = _family(family)
    if not isinstance(classes.get(estimator), type):
        raise ValueError(f"Expected an estimator added with register(). "
                         f"Received: family={family!r}, estimator={estimator!r}")
    del classes[estimator]
    if twin is None and not classes:
        del _FAMILIES[family]
