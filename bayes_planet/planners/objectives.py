"""Scores that turn per-sample returns into one planning objective."""

import tensorflow as tf

__all__ = ["uncertainty_aware_score"]


def uncertainty_aware_score(returns, beta, axis=0):
    """Mean plus ``beta`` standard deviations of returns across model samples.

    With a Bayesian world model each candidate plan gets ``K`` returns, one per sample of the
    weights (epistemic uncertainty). The score ``mean + beta * std`` over those samples is
    optimistic for ``beta > 0`` (exploration, an upper-confidence bound), risk-averse for
    ``beta < 0`` (a lower-confidence bound) and plain PlaNet's expected return for
    ``beta = 0`` (with ``K = 1`` the standard deviation is 0 and the score is the return).

    Args:
        returns: Float tensor ``[K, ..., N]`` (samples along ``axis``).
        beta: Scalar (python float or tensor).
        axis: The sample axis (an int).

    Returns:
        The tensor of scores, ``returns`` with ``axis`` reduced (e.g. ``[..., N]``); the
        standard deviation is the population one (divides by ``K``).
    """
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ValueError(f"Expected an integer axis. Received: axis={axis!r}")
    returns = tf.convert_to_tensor(returns)
    if not returns.dtype.is_floating:
        returns = tf.cast(returns, tf.float32)
    rank = returns.shape.rank
    if rank is not None and not -rank <= axis < rank:
        raise ValueError(f"Expected axis in [-{rank}, {rank}) for returns of shape "
                         f"{returns.shape}. Received: axis={axis}")
    beta = tf.convert_to_tensor(beta, returns.dtype)
    if beta.shape.rank not in (0, None):
        raise ValueError(f"Expected a scalar beta. Received: beta with shape {beta.shape}")
    mean, variance = tf.nn.moments(returns, axes=[axis])
    return mean + beta * tf.sqrt(variance)
