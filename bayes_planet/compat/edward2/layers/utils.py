"""edward2's ``ed.layers.utils``: the helpers the library implements."""

import tensorflow as tf

from bayes_planet.layers import sngp as _sngp

__all__ = ["mean_field_logits"]


def mean_field_logits(logits, covmat=None, mean_field_factor=1.0, likelihood="logistic"):
    """edward2's ``mean_field_logits(logits, covmat, mean_field_factor, likelihood)``: the
    library's `bayes_planet.layers.mean_field_logits` on the diagonal of ``covmat`` (1 when
    None, i.e. temperature scaling); a negative ``mean_field_factor`` returns the logits."""
    if mean_field_factor < 0:
        return logits
    variance = 1.0 if covmat is None else tf.linalg.diag_part(covmat)
    return _sngp.mean_field_logits(logits, variance, mean_field_factor, likelihood=likelihood)
