"""Gradient estimators shared by every Bayesian layer family.

An estimator is a function ``estimator(op, x, weight, seed, channel_axis=-1)`` that
computes a noisy linear map ``op(x, W)`` (a matmul, a convolution, an einsum) for
``W ~ q(W)``, given ``op``, the input, the layer's weight (a posterior, i.e. a
`initializers.DistributionInitializer`, or a plain tensor) and a stateless seed. It
reads the weight only through the posterior contract (`base.sample_weight` and
`base.moments`, which call the posterior's ``sample`` and ``moments``):
`reparameterization` works with any posterior that can be sampled; `flipout` and
`local_reparameterization` need a factorized normal one and raise a one-line
``ValueError`` for any other. A deterministic weight (``scale is None``) reduces
every estimator to ``op(x, loc)`` exactly.

A layer class picks its estimator with ``_estimator = staticmethod(estimator)``;
`bayes_planet.layer_registry` maps ``(family, estimator name)`` to the layer class.
"""

import tensorflow as tf

from bayes_planet._deprecation import moved_attributes
from bayes_planet.layers import noise
from bayes_planet.layers.base import moments, sample_weight
from bayes_planet.layers.initializers import MomentsUnavailableError
from bayes_planet.layers.noise import per_example, split_seed, standard_normal

__all__ = ["flipout", "flipout_perturbation", "local_reparameterization", "reparameterization"]

#: Moved to `bayes_planet.layers.noise`: the old names warn (for one release).
__getattr__ = moved_attributes(__name__, "bayes_planet.layers.noise", ("rademacher", "random_signs"))


def reparameterization(op, x, weight, seed, channel_axis=-1):
    """``op(x, loc + scale * eps)``: one weight sample shared by the batch."""
    del channel_axis
    return op(x, sample_weight(weight, seed, x.dtype))


def _sign_shape(t, channel_axis):
    """[batch, 1, ..., channels, ..., 1]: one sign per example and channel."""
    rank = t.shape.rank
    axis = channel_axis % rank
    dims = [tf.shape(t)[0]] + [1] * (rank - 1)
    dims[axis] = tf.shape(t)[axis]
    return tf.stack(dims)


def _moments(weight, dtype, estimator):
    """`base.moments`, with a one-line error naming the estimator that needed them."""
    try:
        return moments(weight, dtype)
    except MomentsUnavailableError as e:
        raise ValueError(
            f"The {estimator} estimator needs a posterior with closed-form factorized "
            "moments (loc, scale); use the reparameterization estimator for this one. "
            f"Received: weight={getattr(weight, 'name', None)!r} ({type(weight).__name__})"
        ) from e


def flipout_perturbation(weight, seed, dtype, num_samples=1):
    """Flipout's draws for ``weight``: ``(loc, delta, in_seed, out_seed)``.

    ``delta = σ ∘ E`` is the shared perturbation (``num_samples`` stacked on a leading
    axis if > 1; None for a point mass); ``in_seed``/``out_seed`` seed the input and
    output signs. `flipout` and the Flipout recurrent cells (which hold one draw per
    sequence) both draw through it, so they draw the same numbers for a seed.
    """
    eps_seed, in_seed, out_seed = split_seed(seed, 3)
    loc, scale = _moments(weight, dtype, "flipout")
    delta = None
    if scale is not None:
        shape = tf.shape(loc) if num_samples == 1 else [num_samples, *loc.shape]
        delta = scale * standard_normal(shape, eps_seed, dtype=dtype)
    return loc, delta, in_seed, out_seed


def flipout(op, x, weight, seed, channel_axis=-1):
    """Flipout (Wen et al., 2018): ``op(x, M) + op(x ∘ s, σ ∘ E) ∘ r``.

    ``E`` is one shared perturbation; ``s`` and ``r`` are per-example random signs
    over input and output channels (broadcast over spatial/time axes). Under a
    multi-replica strategy every example gets its single-device signs (`noise.rademacher`).
    """
    loc, delta, in_seed, out_seed = flipout_perturbation(weight, seed, x.dtype)
    mean = op(x, loc)
    if delta is None:
        return mean
    sign_in = noise.rademacher(_sign_shape(x, channel_axis), in_seed, x.dtype)
    sign_out = noise.rademacher(_sign_shape(mean, channel_axis), out_seed, x.dtype)
    return mean + op(x * sign_in, delta) * sign_out


def local_reparameterization(op, x, weight, seed, channel_axis=-1):
    """Local reparameterization (Kingma et al., 2015): sample the outputs.

    For a linear ``op`` and factorized normal weights, ``op(x, W)`` is normal with
    mean ``op(x, M)`` and variance ``op(x², σ²)``: ``out = mean + sqrt(var) ∘ ε``, with
    per-example ``ε`` (the single-device draws under a multi-replica strategy).
    """
    del channel_axis
    loc, scale = _moments(weight, x.dtype, "local reparameterization")
    mean = op(x, loc)
    if scale is None:
        return mean
    var = op(tf.square(x), tf.square(scale))
    eps = per_example(lambda s, sd: standard_normal(s, sd, dtype=x.dtype), tf.shape(mean), seed)
    return mean + tf.sqrt(var + 1e-16) * eps
