"""Keras 3 end to end for the Gaussian-process families (issue #28 phase 2): an SNGP classifier
and a sparse-GP regression train with ``fit`` (their state updates and KL terms inside the
compiled train step), save to ``.keras`` and reload in a fresh process with the same
predictions.

Skipped on Keras 2 (TF 2.15, the agent's stack), where test_sngp.py and
test_gaussian_process.py are the checks of these layers.
"""

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.layers as bl
from bayes_planet._keras import KERAS3, keras
from bayes_planet.layers.sngp import MEAN_FIELD_FACTOR
from bayes_planet.layers.testing import assert_reloads_in_a_fresh_process, mean_prediction

pytestmark = pytest.mark.skipif(
    not KERAS3, reason=f"needs Keras 3 (TF >= 2.16 without TF_USE_LEGACY_KERAS); this process "
    f"has TF {tf.__version__} with Keras 2 (the agent's stack)")

#: The reloaded model's predictions agree with the saved one's to this (max abs difference).
RELOAD_ATOL = 1e-6


def _blobs(n, seed):
    """Three classes: unit-variance Gaussian blobs centred 4 apart on a triangle in 2-D."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [-2.0, -1.5], [2.0, -1.5]])
    labels = rng.integers(0, 3, n)
    x = centres[labels] + 0.5 * rng.standard_normal((n, 2))
    return x.astype("float32"), labels.astype("int32")


def _sngp_classifier():
    return keras.Sequential([
        keras.Input((2,)),
        bl.SpectralNormalization(keras.layers.Dense(32, activation="relu"), norm_multiplier=0.95,
                                 seed=1),
        bl.SpectralNormalization(keras.layers.Dense(32, activation="relu"), norm_multiplier=0.95,
                                 seed=2),
        # edward2's fixed unit kernel: the features' scale stays known (‖φ(x)‖² ≈ 1).
        bl.RandomFeatureGaussianProcess(
            3, 128, covariance_fn=bl.kernels.ExponentiatedQuadratic(trainable=False),
            mean_field_factor=MEAN_FIELD_FACTOR, seed=3),
    ])


@pytest.mark.slow
def test_sngp_classifier_trains_with_fit_and_reloads_in_a_fresh_process(tmp_path):
    """Spectral-normalized Dense layers and a `RandomFeatureGaussianProcess` output: ``fit``
    (with `GPCovarianceReset`) trains the classifier, runs the power iteration in every train
    step (the vectors ``u`` move) and accumulates the Laplace precision of the last epoch;
    ``predict`` refreshes the covariance inside its tf.function; inference is distance aware
    (far from the data the mean-field probabilities are closer to uniform); a fresh process
    reloads it with the same predictions."""
    x, y = _blobs(256, seed=0)
    model = _sngp_classifier()
    norms = [layer for layer in model.layers if isinstance(layer, bl.SpectralNormalization)]
    gp = model.layers[-1]
    u_before = [layer.u.numpy().copy() for layer in norms]
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs, batch_size = 12, 32
    history = model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0,
                        callbacks=[bl.GPCovarianceReset()]).history["loss"]
    assert history[-1] < 0.5 * history[0], history
    # The first inference after fit recomputes the stale covariance inside `predict`'s
    # tf.function (and stores it); the eager call then reads the stored one: the same logits.
    predicted = model.predict(x, batch_size=len(x), verbose=0)
    logits = mean_prediction(model, x)
    np.testing.assert_allclose(predicted, logits, rtol=1e-5, atol=1e-6)
    assert np.mean(np.argmax(logits, -1) == y) > 0.95  # chance: 1/3

    # State updated inside the compiled train step: each u is the (normalized) power-iteration
    # vector, moved by the steps; the precision holds the last epoch's 8 batches (reset at
    # its start): trace(P) = Σ_i ‖φ(x_i)‖², ‖φ‖² = (2/D) Σ_j cos²(ω_jᵀh/ℓ + b_j) ∈ [0, 2] with
    # mean 1 over the random phases: about N for one epoch of N examples (12 N if the reset
    # failed, 0 if nothing accumulated), checked within (N/2, 3N/2).
    for layer, before in zip(norms, u_before, strict=True):
        after = layer.u.numpy()
        assert np.linalg.norm(after - before) > 1e-3
        np.testing.assert_allclose(np.linalg.norm(after), 1.0, rtol=1e-5)
    trace = float(np.trace(gp.precision_matrix.numpy()))
    assert 0.5 * len(x) < trace < 1.5 * len(x), trace

    # Distance awareness: the most likely class is far less sure 20 units from the data.
    far = (20.0 * np.array([[np.cos(a), np.sin(a)] for a in np.linspace(0, 2 * np.pi, 16,
                                                                          endpoint=False)]))
    near_conf = np.mean(np.max(tf.nn.softmax(logits).numpy(), -1))
    far_conf = np.mean(np.max(tf.nn.softmax(mean_prediction(model, far.astype("float32")))
                              .numpy(), -1))
    assert far_conf < near_conf - 0.2, (far_conf, near_conf)

    test_x = np.concatenate([_blobs(16, seed=1)[0], far[:4].astype("float32")])
    assert_reloads_in_a_fresh_process(model, test_x, tmp_path, atol=RELOAD_ATOL)


def _regression_data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, (n, 1))
    return x.astype("float32"), (np.sin(3.0 * x) + 0.1 * rng.standard_normal((n, 1))).astype(
        "float32")


@pytest.mark.slow
def test_sparse_gp_regression_trains_with_fit_and_reloads_in_a_fresh_process(tmp_path):
    """A `SparseGaussianProcess` regression: its whitened KL / N is the one term of
    ``model.losses``, ``fit`` minimizes the Monte Carlo ELBO (mean squared error of the output
    sample: a Gaussian likelihood of variance 1/2, plus the KL) and moves the inducing points
    and kernel hyperparameters; the predictive mean fits sin(3x); a fresh process reloads it
    with the same predictive mean and KL."""
    x, y = _regression_data(128, seed=0)
    gp = bl.SparseGaussianProcess(1, num_inducing=12, dataset_size=len(x), seed=0,
                                  inducing_inputs_initializer=keras.initializers.RandomUniform(
                                      -2.0, 2.0, seed=0))
    model = keras.Sequential([keras.Input((1,)), gp])
    assert len(model.losses) == 1
    z_before = gp.inducing_inputs.numpy().copy()
    kernel_before = [v.numpy().copy() for v in gp.covariance_fn.trainable_weights]
    model.compile(keras.optimizers.Adam(3e-2), keras.losses.MeanSquaredError())
    history = model.fit(x, y, epochs=40, batch_size=32, verbose=0).history["loss"]
    assert np.mean(history[-5:]) < 0.5 * np.mean(history[:5]), history

    kl = float(sum(model.losses))
    expected_kl = float(bl.WhitenedKLDivergence().divergence(gp.inducing_outputs)) / len(x)
    assert kl == pytest.approx(expected_kl, rel=1e-5) and kl > 0
    assert np.max(np.abs(gp.inducing_inputs.numpy() - z_before)) > 1e-2
    assert any(np.max(np.abs(v.numpy() - b)) > 1e-2
               for v, b in zip(gp.covariance_fn.trainable_weights, kernel_before, strict=True))

    grid = np.linspace(-1.8, 1.8, 37, dtype="float32")[:, None]
    mean = mean_prediction(model, grid)
    rmse = float(np.sqrt(np.mean((mean - np.sin(3.0 * grid)) ** 2)))
    assert rmse < 0.15, rmse  # sin(3x) has RMS 0.7 on the grid

    assert_reloads_in_a_fresh_process(model, grid, tmp_path, atol=RELOAD_ATOL)
