"""bayes-planet: Bayesian Layers for Keras and a Bayesian PlaNet agent."""

import os

# TensorFlow's C++ INFO chatter hides real output; its warnings and errors stay visible
# (the CLI also filters the known start-up lines that are not errors: `_startup`).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

__version__ = "0.1.0"
