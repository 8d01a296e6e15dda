"""Posterior Network (Charpentier et al., 2020): a Dirichlet output from class-wise
normalizing-flow densities.

`PosteriorNetwork` is an output layer on a latent ``z`` (e.g. an encoder's last features).
It batch-normalizes ``z`` and evaluates one normalizing-flow density per class, ``p(z | c)``;
the Dirichlet concentration of class ``c`` is

    α_c(z) = 1 + N_c · p(z | c),

``N_c`` the class's share of the training examples (``class_counts``; ones by default).
Far from the training latents every ``p(z | c)`` is small and ``α`` falls back to the flat
Dirichlet ``α = 1`` (maximal epistemic uncertainty); the expected class probabilities are
``α / sum(α)`` and the evidence ``sum(α) - C`` measures how much the data supports the
prediction. `uce_loss` is the paper's training loss (the expected cross-entropy under the
Dirichlet, with an entropy bonus).

The densities are `FlowDensity` layers: a standard normal base pulled back through
``depth`` transforms of one kind, each mapping data to noise with an exact log-determinant
(the density direction; nothing is sampled, so a transform needs no cheap inverse):

    radial  `RadialTransform` (Rezende & Mohamed, 2015, applied in the density direction)
    affine  `ElementwiseAffineTransform` (per-feature scale and shift)
    maf     `MaskedAffineTransform` (masked autoregressive flow, Papamakarios et al., 2017,
            on `bayes_planet.layers.MADE`, alternating orders)
"""

import math

import numpy as np
import tensorflow as tf

from bayes_planet import seeds
from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.checks import check_positive_int
from bayes_planet.layers.flows import MADE

__all__ = [
    "FLOW_KINDS",
    "MAX_LOG_EVIDENCE",
    "ElementwiseAffineTransform",
    "FlowDensity",
    "MaskedAffineTransform",
    "PosteriorNetwork",
    "RadialTransform",
    "uce_loss",
]

#: The ``flow`` kinds of `FlowDensity` and `PosteriorNetwork`.
FLOW_KINDS = ("radial", "affine", "maf")
#: ``log N_c + log p(z | c)`` is clipped above at this value before its exponential
#: (exp(80) ≈ 5.5e34, finite in float32; a density that large is a degenerate flow anyway).
MAX_LOG_EVIDENCE = 80.0
#: `MaskedAffineTransform`'s log-scales are soft-clamped to (-c, c) by ``c tanh(s / c)``.
LOG_SCALE_CLIP = 3.0


def _uniform(limit, seed, name):
    if seed is None:
        return keras.initializers.RandomUniform(-limit, limit)
    return keras.initializers.RandomUniform(-limit, limit, seed=seeds.int_seed(seed, name))


class _Transform(keras.layers.Layer):
    """A density-direction transform: ``normalize(z) -> (u, log |det ∂u/∂z|)`` per example
    (the event is the last axis)."""

    def __init__(self, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.seed = None if seed is None else int(seed)

    def call(self, inputs):
        return self.normalize(tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype))[0]

    def normalize(self, z):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config["seed"] = self.seed
        return config


@_register
class RadialTransform(_Transform):
    """A radial transform ``u = z + β h(r) (z - z₀)``, ``h(r) = 1 / (α + r)``, ``r = |z - z₀|``.

    Rezende & Mohamed (2015), Eq. (14), used in the density direction (data to noise), as
    in the Posterior Network: only its log-determinant
    ``(d - 1) log(1 + β h) + log(1 + β h + β h'(r) r)`` is needed, no inverse. ``α =
    softplus(a)`` and ``β = -α + softplus(b)`` keep it invertible (``β > -α``) for any
    trainable ``a``, ``b`` (drawn from U(-1/√d, 1/√d)); the centre ``z₀`` starts at 0.
    """

    def build(self, input_shape):
        dim = tf.TensorShape(input_shape)[-1]
        if dim is None:
            raise ValueError(f"RadialTransform needs a known last input dimension. Received: "
                             f"input_shape={input_shape}")
        self.dim = int(dim)
        limit = 1.0 / math.sqrt(self.dim)
        self.center = self.add_weight(name="center", shape=[self.dim], initializer="zeros")
        self.alpha_raw = self.add_weight(name="alpha_raw", shape=[],
                                         initializer=_uniform(limit, self.seed, "alpha"))
        self.beta_raw = self.add_weight(name="beta_raw", shape=[],
                                        initializer=_uniform(limit, self.seed, "beta"))
        super().build(input_shape)

    def normalize(self, z):
        alpha = tf.nn.softplus(tf.cast(self.alpha_raw, z.dtype))
        beta = tf.nn.softplus(tf.cast(self.beta_raw, z.dtype)) - alpha
        diff = z - tf.cast(self.center, z.dtype)
        r = tf.norm(diff, axis=-1, keepdims=True)
        h = 1.0 / (alpha + r)
        beta_h = beta * h
        # h'(r) r = -r / (α + r)², so 1 + βh + βh' r = 1 + β α / (α + r)².
        log_det = ((self.dim - 1) * tf.math.log1p(beta_h)
                   + tf.math.log1p(beta * alpha * tf.square(h)))
        return z + beta_h * diff, tf.squeeze(log_det, -1)


@_register
class ElementwiseAffineTransform(_Transform):
    """``u = z · exp(s) + t`` per feature (log-determinant ``sum(s)``); ``s`` and ``t`` start
    at 0 (the identity)."""

    def build(self, input_shape):
        dim = tf.TensorShape(input_shape)[-1]
        self.log_scale = self.add_weight(name="log_scale", shape=[dim], initializer="zeros")
        self.shift = self.add_weight(name="shift", shape=[dim], initializer="zeros")
        super().build(input_shape)

    def normalize(self, z):
        log_scale = tf.cast(self.log_scale, z.dtype)
        u = z * tf.exp(log_scale) + tf.cast(self.shift, z.dtype)
        return u, tf.zeros(tf.shape(z)[:-1], z.dtype) + tf.reduce_sum(log_scale)


@_register
class MaskedAffineTransform(_Transform):
    """A masked autoregressive affine transform (Papamakarios et al., 2017) in the density
    direction: ``u_i = (z_i - μ_i(z_<i)) · exp(-s_i(z_<i))`` in one `MADE` pass
    (log-determinant ``-sum(s)``). ``s`` is soft-clamped to (-3, 3).

    Args:
      hidden_dims: the MADE's hidden layer sizes.
      order: the MADE's ``order`` (``'left-to-right'`` or ``'right-to-left'``: stack both).
      seed: int or None: the MADE's kernels' initial values.
    """

    def __init__(self, hidden_dims, order="left-to-right", seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        if not isinstance(hidden_dims, list | tuple):
            raise TypeError(f"Expected a list of hidden layer sizes. Received: "
                            f"hidden_dims={hidden_dims!r}")
        self.hidden_dims = [check_positive_int("hidden_dims", h) for h in hidden_dims]
        self.order = order
        kernel = "glorot_uniform" if seed is None else keras.initializers.GlorotUniform(
            seed=seeds.int_seed(seed, "made"))
        self.made = MADE(self.hidden_dims, units=2, order=order, kernel_initializer=kernel,
                         seed=0 if seed is None else seed, dtype=self.dtype_policy,
                         name="made")

    def build(self, input_shape):
        _compat.build_sublayer(self.made, input_shape)
        super().build(input_shape)

    def normalize(self, z):
        shift, raw = tf.unstack(self.made(z), axis=-1)
        log_scale = LOG_SCALE_CLIP * tf.tanh(raw / LOG_SCALE_CLIP)
        return (z - shift) * tf.exp(-log_scale), -tf.reduce_sum(log_scale, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_dims=self.hidden_dims, order=self.order)
        return config


def check_flow(flow):
    """``flow`` if it is one of `FLOW_KINDS`; a one-line ValueError otherwise."""
    if flow not in FLOW_KINDS:
        raise ValueError(f"Expected flow in {list(FLOW_KINDS)}. Received: flow={flow!r}")
    return flow


@_register
class FlowDensity(keras.layers.Layer):
    """A normalizing-flow density: ``log p(z) = log N(u; 0, I) + sum_k log |det ∂u_k/∂u_{k-1}|``
    with ``u_0 = z`` and ``u_k`` the ``k``-th transform's output.

    Called on ``z`` ``(..., d)`` it returns ``log p(z)`` ``(...,)``.

    Args:
      flow: ``'radial'`` (default), ``'affine'`` or ``'maf'``.
      depth: the number of transforms.
      width: the hidden width of each ``'maf'`` transform's MADE (one hidden layer; default
        ``2 d``); unused by the others.
      seed: int or None: the transforms' initial values.
    """

    def __init__(self, flow="radial", depth=8, width=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.flow = check_flow(flow)
        self.depth = check_positive_int("depth", depth)
        self.width = None if width is None else check_positive_int("width", width)
        self.seed = None if seed is None else int(seed)
        self.transforms = []

    def build(self, input_shape):
        dim = tf.TensorShape(input_shape)[-1]
        if dim is None:
            raise ValueError(f"FlowDensity needs a known last input dimension. Received: "
                             f"input_shape={input_shape}")
        self.dim = int(dim)
        policy = self.dtype_policy
        for k in range(self.depth):
            seed = None if self.seed is None else seeds.int_seed(self.seed, "transform", k)
            name = f"{self.flow}_{k}"
            if self.flow == "radial":
                transform = RadialTransform(seed=seed, dtype=policy, name=name)
            elif self.flow == "affine":
                transform = ElementwiseAffineTransform(seed=seed, dtype=policy, name=name)
            else:
                order = "left-to-right" if k % 2 == 0 else "right-to-left"
                transform = MaskedAffineTransform([self.width or 2 * self.dim], order=order,
                                                  seed=seed, dtype=policy, name=name)
            _compat.build_sublayer(transform, input_shape)
            self.transforms.append(transform)
        super().build(input_shape)

    def call(self, inputs):
        u = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        log_det = tf.zeros(tf.shape(u)[:-1], u.dtype)
        for transform in self.transforms:
            u, step = transform.normalize(u)
            log_det += step
        base = -0.5 * tf.reduce_sum(tf.square(u), -1) - 0.5 * self.dim * math.log(2 * math.pi)
        return base + log_det

    def get_config(self):
        config = super().get_config()
        config.update(flow=self.flow, depth=self.depth, width=self.width, seed=self.seed)
        return config


def _class_counts(class_counts, num_classes):
    if class_counts is None:
        return [1.0] * num_classes
    counts = [float(c) for c in np.asarray(class_counts, dtype=np.float64).reshape(-1)]
    if len(counts) != num_classes or not all(c > 0 for c in counts):
        raise ValueError(f"Expected {num_classes} positive class counts. Received: "
                         f"class_counts={counts}")
    return counts


@_register
class PosteriorNetwork(keras.layers.Layer):
    """Posterior Network output layer (Charpentier et al., 2020): Dirichlet concentrations
    ``α_c = 1 + N_c · p(BatchNorm(z) | c)`` from one normalizing-flow density per class.

    Input ``(batch, ..., d)``; output ``(batch, ..., num_classes)``: the concentrations, or
    with ``layer(z, probabilities=True)`` the Dirichlet mean ``α / sum(α)``. Train with
    `uce_loss`. See the module docstring.

    Args:
      num_classes: the number of classes C.
      flow: the densities' kind, ``'radial'`` (default, the paper's), ``'affine'`` or
        ``'maf'`` (`FlowDensity`).
      flow_depth: transforms per density (default 8).
      flow_width: a ``'maf'`` transform's hidden width (default ``2 d``).
      class_counts: ``N_c``, the training examples per class (C positive numbers; default
        ones); the paper's "certainty budget".
      batch_norm: whether to batch-normalize the latent first (default True; epsilon 1e-5,
        momentum 0.9, the paper's PyTorch defaults).
      seed: int or None: the flows' initial values.
    """

    def __init__(self, num_classes, flow="radial", flow_depth=8, flow_width=None,
                 class_counts=None, batch_norm=True, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.flow = check_flow(flow)
        self.flow_depth = check_positive_int("flow_depth", flow_depth)
        self.flow_width = None if flow_width is None else check_positive_int("flow_width",
                                                                             flow_width)
        self.class_counts = _class_counts(class_counts, self.num_classes)
        self.batch_norm = bool(batch_norm)
        self.seed = None if seed is None else int(seed)
        policy = self.dtype_policy
        self.normalization = (keras.layers.BatchNormalization(
            epsilon=1e-5, momentum=0.9, dtype=policy, name="batch_norm")
            if self.batch_norm else None)
        self.densities = [
            FlowDensity(self.flow, self.flow_depth, self.flow_width,
                        seed=None if self.seed is None else seeds.int_seed(self.seed, "class", c),
                        dtype=policy, name=f"class_{c}_density")
            for c in range(self.num_classes)]

    def build(self, input_shape):
        input_shape = tf.TensorShape(input_shape)
        if input_shape[-1] is None:
            raise ValueError(f"PosteriorNetwork needs a known last input dimension. Received: "
                             f"input_shape={input_shape}")
        if self.normalization is not None:
            _compat.build_sublayer(self.normalization, input_shape)
        for density in self.densities:
            _compat.build_sublayer(density, input_shape)
        super().build(input_shape)

    def latents(self, inputs, training=None):
        """The latent the densities see: ``BatchNorm(inputs)`` (or ``inputs``)."""
        z = tf.cast(tf.convert_to_tensor(inputs), self.compute_dtype)
        if self.normalization is None:
            return z
        return self.normalization(z, training=training)

    def log_densities(self, latents):
        """``log p(z | c)`` of every class, ``(..., C)``, at latents ``z`` (`latents`)."""
        z = tf.cast(tf.convert_to_tensor(latents), self.compute_dtype)
        return tf.stack([density(z) for density in self.densities], axis=-1)

    def concentrations(self, log_densities):
        """``α = 1 + N_c exp(log p(z | c))`` from `log_densities` (the exponent clipped
        above at `MAX_LOG_EVIDENCE`; in float32 at least, as exp(80) overflows float16)."""
        log_densities = tf.convert_to_tensor(log_densities)
        if log_densities.dtype.size < 4:  # float16/bfloat16 (a mixed policy): α in float32
            log_densities = tf.cast(log_densities, tf.float32)
        log_counts = tf.math.log(tf.constant(self.class_counts, log_densities.dtype))
        return 1.0 + tf.exp(tf.minimum(log_counts + log_densities, MAX_LOG_EVIDENCE))

    def call(self, inputs, training=None, probabilities=False):
        alphas = self.concentrations(self.log_densities(self.latents(inputs, training)))
        if probabilities:
            return alphas / tf.reduce_sum(alphas, axis=-1, keepdims=True)
        return alphas

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)[:-1] + (self.num_classes,)

    def get_config(self):
        config = super().get_config()
        config.update(num_classes=self.num_classes, flow=self.flow, flow_depth=self.flow_depth,
                      flow_width=self.flow_width, class_counts=list(self.class_counts),
                      batch_norm=self.batch_norm, seed=self.seed)
        return config


def uce_loss(labels, concentrations, entropy_weight=1e-5):
    """The Posterior Network's loss (Charpentier et al., 2020, Eq. 6), per example: the
    expected cross-entropy under ``Dir(α)``, ``ψ(α₀) - ψ(α_y)`` (``α₀ = sum(α)``, ``ψ`` the
    digamma function), minus ``entropy_weight`` times the Dirichlet's entropy.

    Args:
      labels: integer class labels ``(...,)`` (or ``(..., 1)``).
      concentrations: ``α`` ``(..., C)`` (`PosteriorNetwork`'s output).
      entropy_weight: the entropy bonus's weight (the paper's 1e-5 by default; 0 drops it).
    """
    alphas = tf.convert_to_tensor(concentrations)
    labels = tf.cast(tf.convert_to_tensor(labels), tf.int32)
    if labels.shape.rank == alphas.shape.rank:
        labels = tf.squeeze(labels, -1)
    total = tf.reduce_sum(alphas, -1)
    chosen = tf.gather(alphas, labels, axis=-1, batch_dims=labels.shape.rank)
    loss = tf.math.digamma(total) - tf.math.digamma(chosen)
    if entropy_weight:
        num_classes = tf.cast(tf.shape(alphas)[-1], alphas.dtype)
        log_beta = tf.reduce_sum(tf.math.lgamma(alphas), -1) - tf.math.lgamma(total)
        entropy = (log_beta + (total - num_classes) * tf.math.digamma(total)
                   - tf.reduce_sum((alphas - 1.0) * tf.math.digamma(alphas), -1))
        loss -= entropy_weight * entropy
    return loss
