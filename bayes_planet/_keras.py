"""The one place the project reaches Keras, and chooses which Keras.

The process's own choice decides, so that importing bayes_planet never changes which Keras the
user's code sees:

* TF 2.15: ``tf.keras`` is Keras 2: the layers are Keras 2 layers (``KERAS3 = False``).
* TF >= 2.16: ``tf.keras`` is Keras 3 (``import keras``): the layers are native Keras 3 layers
  (``KERAS3 = True``), unless the process opted into Keras 2 (tf-keras) by setting
  ``TF_USE_LEGACY_KERAS`` to ``1``/``true``/``True`` before TensorFlow reads ``tf.keras``, as
  TensorFlow itself reads it: then ``keras`` is ``tf_keras`` (``KERAS3 = False``).

Nothing here sets ``TF_USE_LEGACY_KERAS``. Import ``keras`` from here, never ``tf.keras``;
code that must differ between the two generations branches on ``KERAS3`` in one place
(`bayes_planet.layers._compat`).
"""

import os

import tensorflow as tf

TF_VERSION = tuple(int(v) for v in tf.__version__.split(".")[:2])

#: The values of ``TF_USE_LEGACY_KERAS`` that make TensorFlow's ``tf.keras`` tf-keras (TensorFlow's
#: own test, ``tensorflow/python/util/lazy_loader.py``).
_LEGACY_VALUES = ("true", "True", "1")


def legacy_keras_requested():
    """Whether this process asked TensorFlow (>= 2.16) for Keras 2: ``TF_USE_LEGACY_KERAS``."""
    return os.environ.get("TF_USE_LEGACY_KERAS") in _LEGACY_VALUES


if TF_VERSION < (2, 16):
    keras = tf.keras
    KERAS3 = False
elif legacy_keras_requested():
    try:
        import tf_keras as keras
    except ImportError as e:  # pragma: no cover - the base install depends on tf-keras here
        raise ImportError(
            f"TF_USE_LEGACY_KERAS asks for Keras 2, which needs tf-keras with TensorFlow "
            f"{tf.__version__}: pip install 'tf-keras~={tf.__version__.rsplit('.', 1)[0]}.0'"
        ) from e
    KERAS3 = False
else:
    import keras

    KERAS3 = keras.__version__.split(".")[0] == "3"
    if not KERAS3:  # pragma: no cover - TF >= 2.16 installs Keras 3
        raise ImportError(f"Expected Keras 3 with TensorFlow {tf.__version__}. "
                          f"Received: keras=={keras.__version__}")

__all__ = ["KERAS3", "TF_VERSION", "keras", "legacy_keras_requested", "tf"]
