"""The one place the project reaches Keras.

The layers are Keras 2 layers. TF 2.15 ships Keras 2 as ``tf.keras``; from TF 2.16 on,
``tf.keras`` is Keras 3 and Keras 2 is the separate ``tf-keras`` package (``import tf_keras``).
There, ``TF_USE_LEGACY_KERAS=1`` is also set (unless the user set it) before anything reads
``tf.keras``, so that ``tf.keras`` and TensorFlow Probability's Keras are the same tf-keras
(on TF 2.15 it must stay unset: TF 2.15 would then look for tf-keras too). Import ``keras``
from here, never ``tf.keras``.
"""

import os

import tensorflow as tf

if tuple(int(v) for v in tf.__version__.split(".")[:2]) >= (2, 16):
    # TF resolves tf.keras lazily, on first use, so setting it after `import tensorflow` works.
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    try:
        import tf_keras as keras
    except ImportError as e:  # pragma: no cover - the base install depends on tf-keras here
        raise ImportError(f"bayes_planet needs tf-keras (Keras 2) with TensorFlow {tf.__version__}: "
                          f"pip install 'tf-keras~={tf.__version__.rsplit('.', 1)[0]}.0'") from e
else:
    keras = tf.keras

__all__ = ["keras", "tf"]
