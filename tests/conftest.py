"""Shared pytest configuration: quiet TensorFlow, deterministic seeds per test."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_everything():
    tf.keras.utils.set_random_seed(0)
    np.random.seed(0)
    yield
    tf.keras.backend.clear_session()
