"""The one place the project reaches Keras.

TF 2.15 ships Keras 2 as ``tf.keras``. On TF >= 2.16 switch this import to
``import tf_keras as keras`` (with ``TF_USE_LEGACY_KERAS=1``); nothing else changes.
"""

import tensorflow as tf

keras = tf.keras

__all__ = ["keras", "tf"]
