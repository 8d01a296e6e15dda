"""bayes-planet: Bayesian Layers for Keras and a Bayesian PlaNet agent."""

import os

# TensorFlow's C++ start-up chatter (CUDA probing on CPU machines) hides real output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
