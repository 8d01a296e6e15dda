"""Ensemble dense layers: rank-1 Bayesian (`DenseRank1`) and BatchEnsemble (`DenseBatchEnsemble`).

Both hold ``ensemble_size`` members that share one point-estimate kernel ``W``
``[in, units]`` and differ by per-member factors on the inputs (α ``[E, in]``) and the
outputs (γ ``[E, units]``) and a per-member bias ``[E, units]``: member ``e`` computes
``activation(((x ∘ α_e) @ W) ∘ γ_e + b_e)``, a rank-1 change of the shared kernel for
``E·(in + 2·units)`` extra parameters. The convolutional layers of
`bayes_planet.layers.ensemble.conv` are the same with the convolution for ``@``; the
mixins here (`EnsembleFactors`, `EnsembleLayer`, `Rank1Factors`, `Rank1Ensemble`,
`BatchEnsemble`) are shared by both, and `EnsembleFactors`/`Rank1Factors` by the rank-1
attention projections (`bayes_planet.layers.ensemble.attention`).

Batch convention (as in edward2, so its users' code ports unchanged): the input batch of
``E·b`` rows is ``E`` contiguous blocks of ``b`` rows and block ``e`` goes through member
``e``. To show every member the same examples, tile the batch ``E`` times (``tf.tile(x,
[E, 1])``) and the labels with it; average the members' predictive at test time. A batch
not divisible by ``E`` raises a one-line error naming both sizes (a ``tf.debugging``
assertion when the batch size is only known at run time). Inputs may have middle axes
``(E·b, ..., in)``; the factors then apply to every position of an example.

Factor posteriors: factorized normal (default) or, as an option, Cauchy
(``alpha_initializer='trainable_cauchy'`` with
``alpha_regularizer='rank1_cauchy_kl_divergence'``, prior Cauchy(1, 0.1), KL in closed form: a
Cauchy's KL to a normal prior is infinite, so that pairing is refused). The default means start
at random signs ±1 (edward2's and uncertainty-baselines' start,
`initializers.TrainableRandomSignNormal`, stddev ≈ 0.032) under the symmetric prior
½ N(1, 0.1²) + ½ N(−1, 0.1²) (`regularizers.Rank1SignMixtureKLDivergence`), which charges both
signs alike: the members start diverse and the KL does not pull the −1 entries to +1. The
earlier default, means near 1 (~ N(1, 0.5²), `initializers.TrainableRank1Normal`,
uncertainty-baselines' ``random_sign_init=-0.5``) under N(1, 0.1²)
(`regularizers.Rank1NormalKLDivergence`), stays available by name; the ±1 start under
N(1, 0.1²) costs about 200 nats of KL per −1 entry (``(1 - (-1))² / (2 · 0.1²)``), which on
small data swamps the likelihood (the benchmark's rank-1 Transformer stayed at chance). The
choice was made by the uncertainty benchmark, 9 tasks × 3 seeds (issue #27; the notes
``experiments/results/8c-rank1-initial-means.md`` to ``8f-sign-mixture-default.md``): the
symmetric configuration is within 10 % of a 4-member deep ensemble's NLL on every task and
beats the Transformer's dropout twin.

Registry: both are the ``'dense_ensemble'`` family of `bayes_planet.layer_registry`
(estimators ``'rank1'`` and ``'batch_ensemble'``, Keras twin ``Dense``), not estimators
of the ``'dense'`` family: that family's estimators are drop-in replacements read by the
agent config (``model.estimator``), the RSSM, the Transformer, the calibration
experiment and the uncertainty benchmark, all of which feed plain batches; an ensemble
layer needs the tiled batch convention, so listing it there would break them silently.
"""

import copy
import math

import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet._keras import keras
from bayes_planet.layers import _compat, initializers, regularizers
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers._registry import resolve
from bayes_planet.layers.base import BayesianLayer, check_dense_extras, check_positive_int, moments
from bayes_planet.layers.initializers import (
    DistributionInitializer,
    MomentsUnavailableError,
    TrainableRandomSignNormal,
)
from bayes_planet.layers.noise import MAX_ABS, per_example, split_seed, standard_normal

__all__ = [
    "BatchEnsemble",
    "DenseBatchEnsemble",
    "DenseRank1",
    "EnsembleFactors",
    "EnsembleLayer",
    "Rank1Ensemble",
    "Rank1CauchyKLDivergence",
    "Rank1Factors",
    "TrainableRandomSignCauchy",
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

tfd = tfp.distributions

#: Sampled rank-1 factors are clipped to [-CLIP, CLIP] (edward2's perturbation bounds).
CLIP = 10.0
#: Defaults shared by the dense and convolutional ensemble layers.
ENSEMBLE_SIZE = 4
RANK1_POSTERIOR = "trainable_random_sign_normal"  # α, γ means ±1, stddev ≈ 0.032
RANK1_PRIOR = "rank1_sign_mixture_kl_divergence"  # KL to ½ N(1, 0.1²) + ½ N(-1, 0.1²)
FAST_WEIGHTS = "random_sign"  # BatchEnsemble's α, γ start at ±1
#: `Rank1Ensemble` ``sampling`` modes.
SAMPLINGS = ("per_example", "per_member")
# Relative slack of the no-clip test for float rounding of a sample (float16 included).
_ROUNDING_SLACK = 1.01


def standard_cauchy(shape, seed, dtype=tf.float32):
    """Standard Cauchy draws ``tan(π (u - 1/2))`` of stateless uniforms ``u`` (computed in
    float32, returned in ``dtype``); unbounded, so factor draws are always clipped."""
    u = tf.random.stateless_uniform(tf.convert_to_tensor(shape, tf.int32), seed)
    return tf.cast(tf.tan(math.pi * (u - 0.5)), dtype)


@_register
class TrainableRandomSignCauchy(TrainableRandomSignNormal):
    """Cauchy(location, scale) posterior of a rank-1 factor (edward2's ``trainable_cauchy``,
    the heavy-tailed option of Dusenberry et al., 2020). Alias ``'trainable_cauchy'``.

    Parameters and initial values as `TrainableRandomSignNormal` (the location starts at
    random signs ±1, the scale at ≈ 0.032; held as its ``mean`` and log-space ``stddev``
    variables): ``loc()`` is the location (the median, what `posterior_mean` uses),
    ``scale()`` the Cauchy scale. A Cauchy has no mean or variance, so ``moments()``
    raises `MomentsUnavailableError` (closed-form normal KLs refuse it); ``sample`` draws
    ``loc + scale · standard_cauchy``. Its KL prior is `Rank1CauchyKLDivergence`.
    """

    def moments(self, dtype=None):
        raise MomentsUnavailableError(
            f"{type(self).__name__} is a Cauchy posterior: no mean or variance.")

    def sample(self, seed, dtype=None, num_samples=1):
        loc, scale = self.loc(), self.scale()
        dtype = dtype or loc.dtype
        shape = tf.shape(loc) if num_samples == 1 else [num_samples, *loc.shape]
        return tf.cast(loc, dtype) + tf.cast(scale, dtype) * standard_cauchy(shape, seed, dtype)

    def distribution(self):
        return tfd.Independent(tfd.Cauchy(self.loc(), self.scale()),
                               reinterpreted_batch_ndims=self.weight_shape.rank)


@_register
class Rank1CauchyKLDivergence(regularizers.KLRegularizer):
    """KL(q || Cauchy(loc, scale)) of a rank-1 factor with a `TrainableRandomSignCauchy`
    posterior, summed over its entries, in closed form (Chyzak & Nielsen, 2019; tfp's
    registered Cauchy–Cauchy KL): ``log((s_q + s_p)² + (l_q - l_p)²) - log(4 s_q s_p)``.
    Default prior Cauchy(1, 0.1): the factors act as the identity at 1 (as
    `regularizers.Rank1NormalKLDivergence`'s N(1, 0.1²)). A Cauchy posterior's KL to a
    normal prior is infinite (no variance), hence this prior. Alias
    ``'rank1_cauchy_kl_divergence'``.
    """

    def __init__(self, loc=1.0, scale=0.1, scale_factor=1.0, dataset_size=None):
        super().__init__(scale_factor, dataset_size)
        if not scale > 0:
            raise ValueError(f"Expected a positive prior scale. Received: scale={scale!r}")
        self.loc, self.scale = float(loc), float(scale)

    def divergence(self, x):
        if not isinstance(x, TrainableRandomSignCauchy):
            raise TypeError("Expected a Cauchy posterior (TrainableRandomSignCauchy) for "
                            f"Rank1CauchyKLDivergence. Received: {type(x).__name__}")
        loc, scale = x.loc(), x.scale()
        n = tf.cast(tf.size(loc), loc.dtype)
        spread = tf.square(scale + self.scale) + tf.square(loc - self.loc)
        return (tf.reduce_sum(tf.math.log(spread) - tf.math.log(scale))
                - n * math.log(4.0 * self.scale))

    def get_config(self):
        return {"loc": self.loc, "scale": self.scale, **super().get_config()}


#: The rank-1 factors' own posterior and prior names (besides those of
#: `initializers.get` and `regularizers.get`).
FACTOR_POSTERIORS = {"trainable_cauchy": TrainableRandomSignCauchy}
FACTOR_PRIORS = {"rank1_cauchy_kl_divergence": Rank1CauchyKLDivergence}


def _resolve(name, value, own, get, kind):
    """``value`` by `_registry.resolve` with ``own`` aliases (their configs too, legacy HDF5
    ones included) before ``get``; a one-line error naming the argument ``name``."""
    try:
        return resolve(value, own, get, kind)
    except (ValueError, TypeError) as e:
        raise ValueError(f"Unknown {name}. Expected one of {sorted(own)}, a library or Keras "
                         f"{kind} name, a config or an instance. Received: {name}={value!r}"
                         ) from e


def factor_initializer(name, value):
    """A rank-1 factor's posterior ``value`` resolved (``'trainable_cauchy'`` and every
    `initializers.get` name); a one-line error naming ``name`` for an unknown one."""
    return _resolve(name, value, FACTOR_POSTERIORS, initializers.get, "initializer")


def factor_regularizer(name, value):
    """A rank-1 factor's KL prior ``value`` resolved (``'rank1_cauchy_kl_divergence'`` and
    every `regularizers.get` name); a one-line error naming ``name`` for an unknown one."""
    return _resolve(name, value, FACTOR_PRIORS, regularizers.get, "regularizer")


#: Every rank-1 factor argument's name stem: ``<stem>_initializer``, ``<stem>_regularizer``
#: (dense, conv and attention layers have the first two, the recurrent cells all four).
FACTOR_NAMES = ("alpha", "gamma", "recurrent_alpha", "recurrent_gamma")


def factor_arguments(posterior=None, prior=None, names=FACTOR_NAMES[:2]):
    """Layer keyword arguments that give every factor of ``names`` (stems of
    `FACTOR_NAMES`) its own fresh instance of ``posterior`` (``<stem>_initializer``) and of
    ``prior`` (``<stem>_regularizer``): aliases, configs or instances, resolved by
    `factor_initializer` / `factor_regularizer`; a setting left at None is left out (the
    layer's default). The one place a factor setting (an agent config's, a Transformer
    block's, a benchmark's) becomes rank-1 layer arguments."""
    kwargs = {}
    for stem in names:
        if posterior is not None:
            key = f"{stem}_initializer"
            kwargs[key] = factor_initializer(key, copy.deepcopy(posterior))
        if prior is not None:
            key = f"{stem}_regularizer"
            kwargs[key] = factor_regularizer(key, copy.deepcopy(prior))
    return kwargs


def factor_prior_mismatch(posterior, prior):
    """Why ``prior`` cannot take ``posterior`` (a clause), or None: a Cauchy posterior has no
    closed-form (in fact an infinite) KL to a normal prior (or a mixture of normals)."""
    if isinstance(posterior, TrainableRandomSignCauchy) and isinstance(
            prior, (regularizers.NormalKLDivergence, regularizers.Rank1SignMixtureKLDivergence)):
        return ("a Cauchy posterior has an infinite KL divergence to a normal prior; use "
                f"'{next(iter(FACTOR_PRIORS))}'")
    return None


def check_factor_prior(layer_name, name, posterior, prior):
    """A one-line error naming both when ``prior`` cannot take ``posterior``
    (`factor_prior_mismatch`)."""
    reason = factor_prior_mismatch(posterior, prior)
    if reason is not None:
        raise ValueError(
            f"{layer_name}: {reason}. Received: {name}_initializer="
            f"{type(posterior).__name__}, {name}_regularizer={type(prior).__name__}")


def init_arguments(values):
    """The arguments an ``__init__`` was called with, by name, from its ``locals()`` taken
    as its first statement: every named parameter and the entries of ``**kwargs`` (for a
    layer whose signature is its API and whose body passes it all on to the mixins'
    cooperative ``__init__``s: ``super().__init__(**init_arguments(locals()))``)."""
    values = dict(values)
    for name in ("self", "__class__"):  # ``__class__``: the cell of zero-argument super()
        values.pop(name, None)
    kwargs = values.pop("kwargs", {})
    return {**values, **kwargs}


def point_initializer(name, value):
    """``value`` resolved as an initializer of a point-estimate weight (not a posterior)."""
    resolved = initializers.get(value)
    if isinstance(resolved, DistributionInitializer):
        raise ValueError(f"Expected a point-estimate initializer for {name} (the ensemble's "
                         f"shared weights are not sampled). Received: {name}={value!r}")
    return resolved


def member_rows(batch_size, ensemble_size):
    """Rows per member, ``batch_size // ensemble_size``; a one-line error if it does not
    divide (a ``tf.debugging`` assertion when ``batch_size`` is only known at run time).

    ``batch_size``: an int, a scalar int tensor (e.g. ``tf.shape(x)[0]``), or a batch
    ``x`` of rank >= 1 (its leading axis).
    """
    if not isinstance(batch_size, int) and getattr(batch_size, "shape", ()) != ():
        x = batch_size
        batch_size = x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]
    static = batch_size if isinstance(batch_size, int) else tf.get_static_value(batch_size)
    if static is not None:
        static = int(static)
        if static % ensemble_size:
            raise ValueError(f"Expected a batch size divisible by ensemble_size. Received: "
                             f"batch size {static}, ensemble_size={ensemble_size}")
        return static // ensemble_size
    rows = batch_size
    check = tf.debugging.assert_equal(
        rows % ensemble_size, 0,
        message=f"Expected a batch size divisible by ensemble_size={ensemble_size}. "
                "Received: batch size")
    with tf.control_dependencies([check]):
        return tf.identity(rows // ensemble_size)


class EnsembleFactors(_compat.LayerState):
    """Mixin for a Keras layer whose ``ensemble_size`` members share its point-estimate
    weights and differ by factors α (inputs) and γ (outputs): the construction and config
    every ensemble layer shares (placed before the Keras class).

    ``__init__`` takes, by name, the Keras layer's arguments (the shared weights'
    ``kernel_initializer`` and ``bias_initializer`` must be point estimates,
    `point_initializer`), ``ensemble_size`` and the factors' initializers and
    regularizers (resolved by `_factor_initializer`). The layer builds α, γ itself.
    """

    def __init__(self, *, ensemble_size, alpha_initializer, gamma_initializer,
                 alpha_regularizer=None, gamma_regularizer=None, kernel_initializer,
                 bias_initializer, kernel_regularizer=None, bias_regularizer=None, **kwargs):
        super().__init__(
            kernel_initializer=point_initializer("kernel_initializer", kernel_initializer),
            bias_initializer=point_initializer("bias_initializer", bias_initializer),
            kernel_regularizer=regularizers.get(kernel_regularizer),
            bias_regularizer=regularizers.get(bias_regularizer), **kwargs)
        self.ensemble_size = check_positive_int("ensemble_size", ensemble_size)
        self.alpha_initializer = self._factor_initializer("alpha_initializer",
                                                          alpha_initializer)
        self.gamma_initializer = self._factor_initializer("gamma_initializer",
                                                          gamma_initializer)
        self.alpha_regularizer = self._factor_regularizer("alpha_regularizer",
                                                          alpha_regularizer)
        self.gamma_regularizer = self._factor_regularizer("gamma_regularizer",
                                                          gamma_regularizer)

    def _factor_initializer(self, name, value):
        """A factor's initializer ``value`` resolved (a posterior or a point estimate)."""
        del name
        return initializers.get(value)

    def _factor_regularizer(self, name, value):
        """A factor's regularizer ``value`` resolved."""
        del name
        return regularizers.get(value)

    def _perturb(self, t, factor):
        """How a factor acts on the inputs and outputs: ``t ∘ factor``."""
        return t * factor

    def get_config(self):
        config = super().get_config()
        config.update(
            ensemble_size=self.ensemble_size,
            alpha_initializer=initializers.serialize(self.alpha_initializer),
            gamma_initializer=initializers.serialize(self.gamma_initializer),
        )
        return config


class EnsembleLayer(EnsembleFactors):
    """Mixin for a Keras layer with a shared kernel and per-member factors and biases.

    Placed before the Keras class (``Dense``, ``Conv1D``, ``Conv2D``), whose ``build``
    makes the kernel (``[..., in, out]``) and input spec; this mixin adds α ``[E, in]``,
    γ ``[E, out]`` and, with ``use_bias``, the bias ``[E, out]`` (the Keras bias is not
    built), and computes ``activation(linear(x ∘ α_e) ∘ γ_e + b_e)`` on block ``e`` of
    the batch. Subclasses define ``_factors`` (sampled or fast weights), and the layer
    its ``_linear`` op and ``_channel_axis``; construction as `EnsembleFactors`.
    """

    _channel_axis = -1

    def build(self, input_shape):
        use_bias, self.use_bias = self.use_bias, False  # The Keras bias is one vector.
        try:
            super().build(input_shape)
        finally:
            self.use_bias = use_bias
        in_dim, out_dim = self.kernel.shape[-2:]
        members = self.ensemble_size
        self.alpha = self.add_weight(
            name="alpha", shape=[members, in_dim], initializer=self.alpha_initializer,
            regularizer=self.alpha_regularizer, dtype=self.dtype, trainable=True)
        self.gamma = self.add_weight(
            name="gamma", shape=[members, out_dim], initializer=self.gamma_initializer,
            regularizer=self.gamma_regularizer, dtype=self.dtype, trainable=True)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=[members, out_dim], initializer=self.bias_initializer,
                regularizer=self.bias_regularizer, constraint=self.bias_constraint,
                dtype=self.dtype, trainable=True)
        self.built = True

    def _factors(self, rows, dtype):
        """(α, γ) of shapes ``[E, rows, in]`` and ``[E, rows, out]`` (or ``1`` for ``rows``
        where a factor is shared by a member's rows)."""
        raise NotImplementedError

    def _linear(self, x, kernel):
        """The shared linear op (``x @ W``, a convolution)."""
        raise NotImplementedError

    def _per_member(self, t, factor, rows, bias=None):
        """``perturb(t, factor) (+ bias)`` with block ``e`` of ``t``'s rows taking member
        ``e``'s factor ``[rows or 1, channels]`` along the channel axis."""
        shape = tf.shape(t)
        rank = t.shape.rank
        blocks = tf.reshape(t, tf.concat([[self.ensemble_size, rows], shape[1:]], 0))
        broadcast = [self.ensemble_size, -1] + [1] * (rank - 1)
        broadcast[self._channel_axis % rank + 1] = t.shape[self._channel_axis]
        out = self._perturb(blocks, tf.reshape(factor, broadcast))
        if bias is not None:
            out += tf.reshape(bias, broadcast)
        out = tf.reshape(out, shape)
        out.set_shape(t.shape)
        return out

    def call(self, inputs, training=None):
        del training  # The same computation in training and inference.
        x = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        rows = member_rows(x, self.ensemble_size)
        alpha, gamma = self._factors(rows, x.dtype)
        out = self._linear(self._per_member(x, alpha, rows), tf.cast(self.kernel, x.dtype))
        bias = tf.cast(self.bias, x.dtype) if self.use_bias else None
        out = self._per_member(out, gamma, rows, bias)
        return self.activation(out) if self.activation is not None else out


def factor_posterior(layer, name, dtype):
    """``(loc, scale, noise)`` of the posterior of the rank-1 factor ``layer.<name>``
    (``[E, dim]``) as ``[E, 1, dim]``: a factorized normal's moments with
    `standard_normal` noise, a Cauchy's location and scale with `standard_cauchy` (scale
    None: deterministic, e.g. inside `posterior_mean`). Any other posterior: a one-line
    error naming ``<name>_initializer``."""
    weight = getattr(layer, name)
    noise = standard_normal
    try:
        loc, scale = moments(weight, dtype)
    except MomentsUnavailableError as e:
        if not isinstance(weight, TrainableRandomSignCauchy):
            raise ValueError(
                f"{type(layer).__name__} samples {name} from a factorized normal or Cauchy "
                f"posterior. Received: {name}_initializer={type(weight).__name__}") from e
        loc, scale, noise = tf.cast(weight.loc(), dtype), tf.cast(weight.scale(), dtype), \
            standard_cauchy
    return tf.expand_dims(loc, 1), None if scale is None else tf.expand_dims(scale, 1), noise


def draw_factor(loc, scale, rows, seed, dtype, per_member=False, noise=standard_normal):
    """A draw of rank-1 factors ``loc + scale · noise`` from ``[E, 1, dim]`` parameters
    (`factor_posterior`): ``[E, rows, dim]`` (one per example, replica-aware via
    `noise.per_example`) or, with ``per_member``, ``[E, 1, dim]``; ``loc`` itself when
    ``scale`` is None. Clipped to [-CLIP, CLIP] (edward2's bounds)."""
    if scale is None:
        return loc
    members, dim = loc.shape[0], loc.shape[-1]
    if per_member:
        eps = noise([members, 1, dim], seed, dtype=dtype)
        return tf.clip_by_value(loc + scale * eps, -CLIP, CLIP)
    eps = per_example(lambda shape, s: noise(shape, s, dtype=dtype),
                      tf.stack([members * rows, dim]), seed)
    sample = loc + scale * tf.reshape(eps, [members, rows, dim])
    if noise is not standard_normal:  # unbounded (Cauchy): always clipped
        return tf.clip_by_value(sample, -CLIP, CLIP)
    # The clip is the identity (value and gradient) unless a draw can reach ±CLIP; as
    # |eps| <= MAX_ABS, that needs max|loc| + MAX_ABS · max(scale) near CLIP. Test that
    # on the [E, dim] parameters and clip the per-example draws only then.
    reach = tf.cast(tf.reduce_max(tf.abs(loc)) + MAX_ABS * tf.reduce_max(scale), tf.float32)
    return tf.cond(reach * _ROUNDING_SLACK < CLIP, lambda: tf.identity(sample),
                   lambda: tf.clip_by_value(sample, -CLIP, CLIP))


def sample_factor(layer, name, rows, seed, dtype):
    """One draw per example of the rank-1 factor ``layer.<name>``: `draw_factor` of its
    `factor_posterior`, ``[E, rows, dim]`` (``[E, 1, dim]``, the mean, when deterministic)."""
    loc, scale, noise = factor_posterior(layer, name, dtype)
    return draw_factor(loc, scale, rows, seed, dtype, noise=noise)


class Rank1Factors(BayesianLayer, EnsembleFactors):
    """Rank-1 Bayesian factors (Dusenberry et al., 2020): α and γ have a mean-field
    posterior whose KL to the prior (the factors' regularizers) is in ``layer.losses``;
    inside `posterior_mean` they are their means. Adds the keyword-only
    ``use_additive_perturbation`` (``t + factor`` instead of ``t ∘ factor``) and ``seed``
    to `EnsembleFactors`' arguments; the layer draws the factors (`sample_factor`).
    """

    def __init__(self, *, use_additive_perturbation=False, seed=None, **kwargs):
        super().__init__(**kwargs)
        for name in ("alpha", "gamma"):
            check_factor_prior(type(self).__name__, name, getattr(self, f"{name}_initializer"),
                               getattr(self, f"{name}_regularizer"))
        self.use_additive_perturbation = bool(use_additive_perturbation)
        self._init_seed(seed)

    def _factor_initializer(self, name, value):
        return factor_initializer(name, value)

    def _factor_regularizer(self, name, value):
        return factor_regularizer(name, value)

    def _perturb(self, t, factor):
        return t + factor if self.use_additive_perturbation else t * factor

    def get_config(self):
        config = super().get_config()
        config.update(
            alpha_regularizer=regularizers.serialize(self.alpha_regularizer),
            gamma_regularizer=regularizers.serialize(self.gamma_regularizer),
            use_additive_perturbation=self.use_additive_perturbation,
        )
        return config


class Rank1Ensemble(Rank1Factors, EnsembleLayer):
    """`EnsembleLayer` with `Rank1Factors`: α and γ sampled at each call and clipped to
    [-10, 10] as in edward2. Adds the keyword-only ``sampling``.

    ``sampling='per_example'`` (edward2's and uncertainty-baselines' only mode, the
    default) draws α and γ independently for every row of the batch (shared by its
    middle or spatial axes): ``rows × (in + out)`` normals per call, which on a CPU cost
    more than the layer's matmul. ``'per_member'`` draws them once per member and call
    (shared by the member's rows, and by the replicas of a distribution strategy):
    ``E × (in + out)`` normals, the same marginal distribution of each row's factors but
    correlated across a member's rows, so a noisier gradient estimate for a cheaper step.
    """

    def __init__(self, *, sampling="per_example", **kwargs):
        super().__init__(**kwargs)
        if sampling not in SAMPLINGS:
            raise ValueError(f"Expected sampling in {list(SAMPLINGS)}. "
                             f"Received: sampling={sampling!r}")
        self.sampling = sampling

    def _factors(self, rows, dtype):
        (alpha_loc, alpha_scale, alpha_noise), (gamma_loc, gamma_scale, gamma_noise) = (
            factor_posterior(self, "alpha", dtype), factor_posterior(self, "gamma", dtype))
        seed = self._next_seed()
        if (self.sampling == "per_member" and alpha_scale is not None
                and gamma_scale is not None and alpha_noise is gamma_noise):
            # One draw [E, 1, in + out] for both factors: half the ops of two small draws.
            both = self._sample(tf.concat([alpha_loc, gamma_loc], -1),
                                tf.concat([alpha_scale, gamma_scale], -1), rows, seed, dtype,
                                alpha_noise)
            return tf.split(both, [alpha_loc.shape[-1], gamma_loc.shape[-1]], axis=-1)
        alpha_seed, gamma_seed = split_seed(seed, 2)
        return (self._sample(alpha_loc, alpha_scale, rows, alpha_seed, dtype, alpha_noise),
                self._sample(gamma_loc, gamma_scale, rows, gamma_seed, dtype, gamma_noise))

    def _sample(self, loc, scale, rows, seed, dtype, noise):
        return draw_factor(loc, scale, rows, seed, dtype, self.sampling == "per_member",
                           noise)

    def get_config(self):
        config = super().get_config()
        config.update(sampling=self.sampling)
        return config


class BatchEnsemble(EnsembleLayer):
    """BatchEnsemble factors (Wen et al., 2020): α and γ are plain trainable weights (fast
    weights), the same for every row of a member; no noise, no KL. Their initializers
    must be point estimates (`point_initializer`)."""

    def _factor_initializer(self, name, value):
        return point_initializer(name, value)

    def _factors(self, rows, dtype):
        del rows  # The same fast weights for every row of a member.
        return (tf.expand_dims(tf.cast(self.alpha, dtype), 1),
                tf.expand_dims(tf.cast(self.gamma, dtype), 1))


class _EnsembleDense(EnsembleLayer, keras.layers.Dense):
    """Dense with per-member factors α, γ and biases (`EnsembleLayer`).

    Args (by name: the concrete layers hold the public signature): as `keras.layers.Dense`,
      plus those of `EnsembleFactors` (and of the factor mixin). ``kernel_initializer`` and
      ``bias_initializer`` must be point-estimate initializers.

    Input shape: ``(E·b, ..., input_dim)``. Output shape: ``(E·b, ..., units)``.
    """

    def __init__(self, *, units, lora_rank=None, lora_alpha=None, quantization_config=None,
                 **kwargs):
        check_dense_extras(lora_rank, lora_alpha, quantization_config)
        super().__init__(units=check_positive_int("units", units), **kwargs)

    def _linear(self, x, kernel):
        if x.shape.rank == 2:
            return tf.matmul(x, kernel)
        return tf.tensordot(x, kernel, [[x.shape.rank - 1], [0]])


@_register
class DenseRank1(Rank1Ensemble, _EnsembleDense):
    """Rank-1 Bayesian dense layer (Dusenberry et al., 2020).

    A point-estimate kernel ``W`` shared by ``ensemble_size`` members, each with a
    mean-field posterior over its input factor α_e and output factor γ_e (default: normal,
    means at random signs ±1, stddev ≈ 0.032; `initializers.TrainableRandomSignNormal`)
    and a point-estimate bias. Member ``e`` computes
    ``activation(((x ∘ α_e) @ W) ∘ γ_e + b_e)`` on block ``e`` of the batch (see the
    module docstring for the batch convention). As in edward2, each call draws α and γ
    independently *per example* (one draw per row of the batch, shared by its middle
    axes), clipped to [-10, 10]; only these vectors are sampled, never the kernel.
    ``sampling='per_member'`` draws them once per member instead (cheaper, noisier; see
    `Rank1Ensemble`). Inside `posterior_mean` α and γ are their posterior means;
    `fixed_noise` and ``seed`` work as for every Bayesian layer.

    The KL of α and γ to the prior (default `regularizers.Rank1SignMixtureKLDivergence`,
    ½ N(1, 0.1²) + ½ N(−1, 0.1²)) is in ``layer.losses``; the kernel and bias take plain Keras
    regularizers (None by default), as the shared weights in uncertainty-baselines.

    Takes the arguments of `keras.layers.Dense` (same order), plus keyword-only:

    Args:
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: the factors' posteriors: factorized
        normal (default) or ``'trainable_cauchy'`` (with the
        ``'rank1_cauchy_kl_divergence'`` prior).
      alpha_regularizer, gamma_regularizer: their KL regularizers.
      use_additive_perturbation: computes ``((x + α_e) @ W) + γ_e + b_e`` instead.
      sampling: ``'per_example'`` (default) or ``'per_member'``.
      seed: int or None, for reproducible noise.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, lora_rank=None,
                 lora_alpha=None, quantization_config=None, *,
                 ensemble_size=ENSEMBLE_SIZE, alpha_initializer=RANK1_POSTERIOR,
                 gamma_initializer=RANK1_POSTERIOR, alpha_regularizer=RANK1_PRIOR,
                 gamma_regularizer=RANK1_PRIOR, use_additive_perturbation=False,
                 sampling="per_example", seed=None, **kwargs):
        super().__init__(**init_arguments(locals()))


@_register
class DenseBatchEnsemble(BatchEnsemble, _EnsembleDense):
    """BatchEnsemble dense layer (Wen et al., 2020): deterministic rank-1 fast weights.

    Like `DenseRank1` with point-estimate factors: α ``[E, in]`` and γ ``[E, units]`` are
    plain trainable weights (default `initializers.RandomSign`, ±1), with per-member
    biases and no KL; no noise, so no ``seed``. Member ``e`` computes
    ``activation(((x ∘ α_e) @ W) ∘ γ_e + b_e)`` on block ``e`` of the batch (see the
    module docstring).

    Takes the arguments of `keras.layers.Dense` (same order), plus keyword-only:

    Args:
      ensemble_size: the number of members E (default 4).
      alpha_initializer, gamma_initializer: Keras initializers of the fast weights.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, lora_rank=None,
                 lora_alpha=None, quantization_config=None, *,
                 ensemble_size=ENSEMBLE_SIZE, alpha_initializer=FAST_WEIGHTS,
                 gamma_initializer=FAST_WEIGHTS, **kwargs):
        super().__init__(**init_arguments(locals()))
