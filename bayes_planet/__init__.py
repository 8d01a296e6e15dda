"""bayes-planet: Bayesian Layers for Keras and a Bayesian PlaNet agent."""

import os

# TensorFlow's C++ INFO chatter hides real output; its warnings and errors stay visible
# (the CLI also filters the known start-up lines that are not errors: `_startup`).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from bayes_planet._startup import AGENT_STACK, quiet_import  # noqa: E402  (the environment first)

__all__ = ["AGENT_STACK", "quiet_import"]

__version__ = "0.1.0"
