"""edward2's ``DenseHyperBatchEnsemble`` and ``Conv2DHyperBatchEnsemble`` over
`bayes_planet.layers.DenseHyperBatchEnsemble` and `bayes_planet.layers.Conv2DHyperBatchEnsemble`.

edward2 names the hyperparameter columns by ``lambda_key_to_index``, ``{'<layer>_l2_kernel':
column, '<layer>_l2_bias': column}``, ``<layer>`` the layer's name without its part between
the first two ``/`` (a group of layers sharing hyperparameters); they are looked up once, at
construction. edward2's two BatchEnsemble sublayers are views here: ``layer.dense`` (or
``layer.conv2d``) has ``kernel``, ``alpha``, ``gamma`` and ``ensemble_bias`` (W, α, γ, b),
``layer.delta_dense`` (``layer.delta_conv2d``) those of W', α', γ'; ``layer.bias`` is edward2's
``b'``, the bias the embedding modulates.
"""

import types

import bayes_planet.layers as _bl
from bayes_planet.compat.edward2._bridge import register, signature
from bayes_planet.compat.edward2.layers._arguments import Edward2Arguments
from bayes_planet.layers.ensemble.hyper import HyperBatchEnsemble

__all__ = ["Conv2DHyperBatchEnsemble", "DenseHyperBatchEnsemble", "layer_name_identifier"]


def layer_name_identifier(name):
    """edward2's key stem of a layer name: the name without its part between the first two
    ``'/'`` (``'group_1/conv_3/'`` -> ``'group_1'``; ``'conv_2'`` stays)."""
    start = name.find("/")
    end = name.find("/", start + 1)
    if start > -1 and end > -1:
        name = name[:start] + name[end + 1:]
    return name


class _Edward2Hyper(Edward2Arguments):
    """edward2's arguments and views of a Hyper-BatchEnsemble layer (module docstring)."""

    edward2_renamed = {"fast_weights_eq_contraint": "shared_fast_weights"}
    edward2_fixed = {"rank": 1, "kernel_regularizer": None, "bias_regularizer": None}
    edward2_dropped = {"lambda_key_to_index": (None,)}

    def __init__(self, *args, **kwargs):
        arguments = self.edward2_signature.bind(*args, **kwargs).arguments
        lambda_key_to_index = dict(arguments.pop("lambda_key_to_index"))
        arguments.update(arguments.pop("kwargs", {}))
        super().__init__(lambda_key_to_index=None, **arguments)
        self.lambda_key_to_index = lambda_key_to_index
        stem = layer_name_identifier(self.name)
        self.l2_kernel_index = self._column(stem, "l2_kernel")
        if self.use_bias:
            self.l2_bias_index = self._column(stem, "l2_bias")

    def _column(self, stem, kind):
        key = f"{stem}_{kind}"
        if key not in self.lambda_key_to_index:
            raise KeyError(f"{type(self).__name__} {self.name!r}: no {key!r} in "
                           f"lambda_key_to_index={self.lambda_key_to_index!r}")
        return int(self.lambda_key_to_index[key])

    def _views(self):
        """edward2's two sublayers' weights: (W, α, γ, b) and (W', α', γ')."""
        def view(kernel, alpha, gamma, bias):
            return types.SimpleNamespace(kernel=kernel, alpha=alpha, gamma=gamma,
                                         ensemble_bias=bias, rank=1,
                                         ensemble_size=self.ensemble_size)
        return (view(self.kernel, self.alpha, self.gamma,
                     HyperBatchEnsemble.bias.fget(self)),
                view(self.hyper_kernel, self.hyper_alpha, self.hyper_gamma, None))

    @property
    def bias(self):
        """edward2's ``bias``: ``b'``, the biases the embedding ``e2`` modulates."""
        return self.hyper_bias

    @property
    def fast_weights_eq_contraint(self):
        return self.shared_fast_weights

    def get_config(self):
        config = super().get_config()
        del config["l2_kernel_index"], config["l2_bias_index"]
        config["fast_weights_eq_contraint"] = config.pop("shared_fast_weights")
        config["lambda_key_to_index"] = dict(self.lambda_key_to_index)
        return config


_SHARED = dict(kernel_initializer="glorot_uniform", bias_initializer="zeros",
               kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
               kernel_constraint=None, bias_constraint=None, regularize_fast_weights=True,
               fast_weights_eq_contraint=False)


@register
class DenseHyperBatchEnsemble(_Edward2Hyper, _bl.DenseHyperBatchEnsemble):
    """edward2's ``DenseHyperBatchEnsemble(units, lambda_key_to_index, ...)``: fast weights
    start at ``'ones'`` (the library's: random signs); ``rank=1`` only."""

    edward2_signature = signature("units", "lambda_key_to_index", rank=1, ensemble_size=4,
                                  activation=None, use_bias=True, alpha_initializer="ones",
                                  gamma_initializer="ones", **_SHARED)

    @property
    def dense(self):
        """edward2's BatchEnsemble sublayer: ``kernel``, ``alpha``, ``gamma``,
        ``ensemble_bias``."""
        return self._views()[0]

    @property
    def delta_dense(self):
        """edward2's modulated sublayer: ``kernel``, ``alpha``, ``gamma`` (W', α', γ')."""
        return self._views()[1]


@register
class Conv2DHyperBatchEnsemble(_Edward2Hyper, _bl.Conv2DHyperBatchEnsemble):
    """edward2's ``Conv2DHyperBatchEnsemble(lambda_key_to_index, filters, kernel_size, ...)``
    (views ``conv2d`` and ``delta_conv2d``); ``rank=1`` and ``channels_last`` only."""

    edward2_signature = signature("lambda_key_to_index", "filters", "kernel_size", rank=1,
                                  ensemble_size=4, alpha_initializer="ones",
                                  gamma_initializer="ones", strides=(1, 1), padding="valid",
                                  data_format=None, activation=None, use_bias=True, **_SHARED)

    @property
    def conv2d(self):
        """edward2's BatchEnsemble sublayer: ``kernel``, ``alpha``, ``gamma``,
        ``ensemble_bias``."""
        return self._views()[0]

    @property
    def delta_conv2d(self):
        """edward2's modulated sublayer: ``kernel``, ``alpha``, ``gamma`` (W', α', γ')."""
        return self._views()[1]
