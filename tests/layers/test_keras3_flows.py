"""Keras 3 end to end for the flows, RevNet and ensemble models (issue #28, phase 2): each
model trains with ``fit``, saves to ``.keras``, and a fresh process loads it with the same
outputs (log-densities for the flow) to within 1e-6.

Skips on Keras 2 (TF 2.15), where test_flows.py and ensemble/test_models.py check the same
saves in-process.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet._keras import KERAS3, keras
from bayes_planet.layers.testing import run_python

pytestmark = pytest.mark.skipif(
    not KERAS3, reason=f"needs Keras 3 (TF >= 2.16 without TF_USE_LEGACY_KERAS); this process "
    f"has TF {tf.__version__} with Keras 2 (the agent's stack)")

TOLERANCE = 1e-6  # max |difference| of the reloaded model's outputs

# The fresh process: loads `model.keras` from `directory`, writes `what` of it on `x.npy` to
# `reloaded.npy`. `what` is "log_prob" (a Sequential of generative flows: log p(x) under the
# flow of N(0, I), the layers composed in turn) or "predict".
_LOAD = """
    import json, os
    import numpy as np
    import tensorflow as tf
    import tensorflow_probability as tfp
    import bayes_planet.layers as bl
    from bayes_planet._keras import KERAS3, keras
    directory, what = {directory!r}, {what!r}
    model = keras.models.load_model(os.path.join(directory, "model.keras"), compile=False)
    x = np.load(os.path.join(directory, "x.npy"))
    if what == "log_prob":
        rv = bl.RandomVariable(tfp.distributions.Normal(tf.zeros(x.shape), 1.0))
        for layer in model.layers:
            rv = layer(rv)
        out = rv.distribution.log_prob(x)
    else:
        out = model.predict(x, verbose=0)
    np.save(os.path.join(directory, "reloaded.npy"), np.asarray(out))
    print(json.dumps({{"keras3": KERAS3, "type": type(model).__name__}}))
"""


def _reloaded(model, x, what, directory):
    """Saves ``model`` to ``.keras`` in ``directory``; what a fresh Keras 3 process computes
    from it (`_LOAD`), and the type it loaded."""
    model.save(directory / "model.keras")
    np.save(directory / "x.npy", x)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    fresh = run_python(_LOAD.format(directory=str(directory), what=what), env)
    assert fresh["keras3"]
    return np.load(directory / "reloaded.npy"), fresh["type"]


def _log_prob(flow, x):
    """log p(x) under ``flow`` (generative layers, composed in turn) of N(0, I)."""
    rv = bl.RandomVariable(tfp.distributions.Normal(tf.zeros(tf.shape(x)), 1.0))
    for layer in flow.layers:
        rv = layer(rv)
    return rv.distribution.log_prob(x)


class _NegativeLogLikelihood(keras.Model):
    """Training-only wrapper: ``-log p(x)`` per example under ``flow`` (not saved)."""

    def __init__(self, flow, **kwargs):
        super().__init__(**kwargs)
        self.flow = flow

    def call(self, x):
        return -_log_prob(self.flow, x)


def _moons(n, seed):
    """4-D data: two interleaved half-moons in the first two features, the other two a
    noisy nonlinear function of them (a density with dependent features)."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.0, np.pi, n)
    upper = rng.integers(0, 2, n)
    a = np.where(upper, np.cos(t), 1.0 - np.cos(t))
    b = np.where(upper, np.sin(t), 0.5 - np.sin(t))
    c = np.sin(2.0 * a) + 0.1 * rng.standard_normal(n)
    d = a * b + 0.1 * rng.standard_normal(n)
    x = np.stack([a, b, c, d], 1) + 0.05 * rng.standard_normal((n, 4))
    return (3.0 * x + 2.0).astype("float32")  # ActNorm's data init has work to do


def test_maf_style_flow_with_actnorm_and_revnet_fits_and_reloads_in_a_fresh_process(tmp_path):
    """A Sequential of generative flows: ActNorm (data init), a masked autoregressive coupling
    (RealNVP over MADE), a permutation, a RevNet block and a RealNVP coupling. ``fit`` of the
    data's negative log-likelihood initializes ActNorm on the first real batch (not while
    Keras traces the model symbolically), lowers the NLL, and a fresh process computes the
    same log-densities from the ``.keras`` file. (~20 s, in the default run: the one check of
    a flow's ``fit`` and fresh-process reload on Keras 3.)"""
    flow = keras.Sequential([
        keras.Input((4,)),
        bl.ActNorm(),
        bl.RealNVP(bl.MADE([16], seed=1), mask="checkerboard"),
        bl.Permutation("random", seed=2),
        bl.RevNetBlock(hidden_units=16),
        bl.RealNVP([16], reverse_mask=True),
    ])
    actnorm = flow.layers[0]
    assert int(actnorm.initialized.numpy()) == 0  # the symbolic build initializes nothing
    x = _moons(256, seed=0)
    model = _NegativeLogLikelihood(flow, name="flow_nll")
    model.compile(keras.optimizers.Adam(3e-3), loss=lambda _, nll: nll)
    history = model.fit(x, np.zeros(len(x), "float32"), epochs=15, batch_size=64,
                        verbose=0).history["loss"]
    assert int(actnorm.initialized.numpy()) == 1  # in fit's first step
    assert history[-1] < history[0] - 1.0, history  # nats per example

    test = _moons(64, seed=1)
    ours = _log_prob(flow, test).numpy()
    assert np.all(np.isfinite(ours))
    reloaded, kind = _reloaded(flow, test, "log_prob", tmp_path)
    assert kind == "Sequential"
    np.testing.assert_array_less(np.abs(reloaded - ours), TOLERANCE)


def test_actnorm_initializes_on_the_first_batch_of_fit():
    """ActNorm built symbolically (a functional model) initializes inside ``fit``'s traced
    train step, on its first batch (the forward direction here): its outputs on that batch
    have zero mean and unit variance per feature."""
    x = _moons(64, seed=2)
    model = keras.Sequential([keras.Input((4,)), bl.ActNorm()])
    model.compile(keras.optimizers.SGD(0.0), "mse")  # no update: the init alone
    model.fit(x, np.zeros_like(x), batch_size=64, epochs=1, verbose=0)
    assert int(model.layers[0].initialized.numpy()) == 1
    out = model(x).numpy()
    np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(out.std(0), 1.0, atol=1e-3)


@pytest.mark.slow
def test_revnet_regression_fits_through_the_custom_gradient_and_reloads(tmp_path):
    """A RevNet block and sequence (custom gradients that recompute activations) between
    Dense layers: ``fit`` lowers a regression loss and a fresh process predicts the same."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 4)).astype("float32")
    y = (np.sin(x[:, :1]) + x[:, 1:2] * x[:, 2:3]).astype("float32")
    model = keras.Sequential([
        keras.Input((4,)), keras.layers.Dense(8),
        bl.RevNetBlock(hidden_units=16), bl.RevNetSequence(num_blocks=2, hidden_units=16),
        keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    history = model.fit(x, y, epochs=20, batch_size=32, verbose=0).history["loss"]
    assert history[-1] < 0.5 * history[0], history
    reloaded, kind = _reloaded(model, x[:32], "predict", tmp_path)
    assert kind == "Sequential"
    np.testing.assert_array_less(np.abs(reloaded - model.predict(x[:32], verbose=0)), TOLERANCE)


@pytest.mark.slow
def test_deep_ensemble_fits_and_reloads_in_a_fresh_process(tmp_path):
    """`deep_ensemble` of three classifiers: ``fit`` trains every member, and a fresh process
    loads the `DeepEnsemble` with the same averaged predictive."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((256, 5)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32") + 2 * (x[:, 2] > 0).astype("int32")

    def build():
        return keras.Sequential([keras.Input((5,)), keras.layers.Dense(16, "relu"),
                                 keras.layers.Dense(4)])

    model = bl.deep_ensemble(build, 3, seed=0)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    before = [m.get_weights()[0].copy() for m in model.members]
    history = model.fit(x, y, epochs=10, batch_size=32, verbose=0).history
    assert history["loss"][-1] < history["loss"][0], history["loss"]
    assert history["accuracy"][-1] > 0.8, history["accuracy"]  # chance: about 0.25
    for member, kernel in zip(model.members, before, strict=True):
        assert not np.allclose(member.get_weights()[0], kernel)  # every member trained
    reloaded, kind = _reloaded(model, x[:32], "predict", tmp_path)
    assert kind == "DeepEnsemble"
    np.testing.assert_array_less(np.abs(reloaded - model.predict(x[:32], verbose=0)), TOLERANCE)
