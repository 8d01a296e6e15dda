"""uncertainty-baselines' mean-field recipe as named options: the tied-mean KL, the small
initial posterior stddev and KL annealing.

The tied-mean KL against tfp's KL to a prior centred at the posterior mean (and its
gradients: none into the means, the closed form into the stddevs), the initial stddevs'
distribution, the annealing schedule, and a ``fit`` whose per-step loss is the
schedule times the KL, with one trace of the train step.
"""

import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers import initializers, regularizers

tfd = tfp.distributions


def _posterior(shape=(4, 3), seed=0, **kwargs):
    q = bl.TrainableNormal(mean_initializer="random_normal", seed=seed, **kwargs)
    q.build(shape)
    rng = np.random.default_rng(seed)
    q.raw_stddev.assign(rng.uniform(-3.0, 0.0, shape).astype("float32"))
    return q


# --- Tied-mean KL ----------------------------------------------------------------


@pytest.mark.parametrize("stddev", [1.0, 0.1])
def test_tied_mean_kl_is_tfps_kl_to_a_prior_at_the_posterior_mean(stddev):
    q = _posterior()
    reg = regularizers.NormalKLDivergenceWithTiedMean(stddev=stddev, scale_factor=0.5,
                                                      dataset_size=10)
    loc, scale = q.loc(), q.scale()
    expected = tf.reduce_sum(tfd.kl_divergence(tfd.Normal(loc, scale), tfd.Normal(loc, stddev)))
    np.testing.assert_allclose(float(reg.divergence(q)), float(expected), rtol=1e-5)
    np.testing.assert_allclose(float(reg(q)), 0.05 * float(expected), rtol=1e-5)
    # Only the stddevs count: moving the means leaves it unchanged.
    q.mean.assign(q.mean + 3.0)
    np.testing.assert_allclose(float(reg.divergence(q)), float(expected), rtol=1e-5)


def test_tied_mean_kl_has_no_gradient_into_the_means():
    """d KL / d log σ = σ²/s² - 1 per weight (minimal at σ = s); d KL / d μ = 0."""
    q = _posterior(seed=1)
    reg = regularizers.get("normal_kl_divergence_with_tied_mean")
    assert isinstance(reg, regularizers.NormalKLDivergenceWithTiedMean) and reg.stddev == 1.0
    with tf.GradientTape() as tape:
        kl = reg(q)
    grad_mean, grad_raw = tape.gradient(kl, [q.mean, q.raw_stddev])
    assert grad_mean is None or not np.any(grad_mean.numpy())
    sigma = q.scale().numpy()
    np.testing.assert_allclose(grad_raw.numpy(), sigma**2 - 1.0, rtol=1e-5, atol=1e-6)


def test_tied_mean_kl_in_a_layer_and_its_config():
    layer = bl.DenseFlipout(3, kernel_regularizer="normal_kl_divergence_with_tied_mean", seed=0)
    layer(np.ones((2, 4), "float32"))
    q = layer.kernel
    expected = tf.reduce_sum(tfd.kl_divergence(tfd.Normal(q.loc(), q.scale()),
                                               tfd.Normal(q.loc(), 1.0)))
    np.testing.assert_allclose(float(tf.add_n(layer.losses)), float(expected), rtol=1e-5)
    config = bl.DenseFlipout.from_config(layer.get_config()).get_config()
    assert config["kernel_regularizer"]["config"] == {"stddev": 1.0, "scale_factor": 1.0,
                                                      "dataset_size": None}
    with pytest.raises(TypeError, match="stochastic"):
        reg = regularizers.NormalKLDivergenceWithTiedMean()
        point = bl.TrainableDeterministic()
        point.build((2, 2))
        reg(point)
    with pytest.raises(ValueError, match=r"^Expected a positive prior stddev\. "
                                         r"Received: stddev=0$"):
        regularizers.NormalKLDivergenceWithTiedMean(stddev=0)


# --- Small initial stddev --------------------------------------------------------


@pytest.mark.parametrize("constraint", ["exp", "softplus"])
def test_initial_stddev_sets_the_stddevs(constraint):
    """Raw stddevs ~ TruncatedNormal(inverse(1e-3), 0.1): within 2 × 0.1 of it (truncation)
    and their mean within 4 standard errors."""
    q = bl.TrainableHeNormal(initial_stddev=1e-3, stddev_constraint=constraint, seed=0)
    q.build((64, 32))
    inverse = math.log(1e-3) if constraint == "exp" else math.log(math.expm1(1e-3))
    raw = q.raw_stddev.numpy()
    assert np.all(np.abs(raw - inverse) <= 0.2 + 1e-6)
    assert abs(raw.mean() - inverse) < 4 * 0.1 / math.sqrt(raw.size)
    np.testing.assert_allclose(np.median(q.scale().numpy()), 1e-3, rtol=0.02)


def test_small_stddev_alias_and_config_round_trip():
    q = initializers.get("trainable_normal_small_stddev")
    assert isinstance(q, bl.TrainableNormalSmallStddev)
    q.build((32, 32))
    np.testing.assert_allclose(np.median(q.scale().numpy()), initializers.SMALL_INITIAL_STDDEV,
                               rtol=0.02)
    clone = bl.TrainableNormalSmallStddev.from_config(q.get_config())
    assert clone.get_config() == q.get_config()
    layer = bl.DenseReparameterization(2, kernel_initializer="trainable_normal_small_stddev")
    layer(np.ones((1, 3), "float32"))
    assert np.all(layer.kernel.scale().numpy() < 1.3e-3)
    # The rank-1 factors' initial stddev is unchanged by the refactor.
    rank1 = bl.TrainableRandomSignNormal()
    assert rank1.stddev_initializer.mean == math.log(initializers.RANK1_INITIAL_STDDEV)
    # The default is unchanged: exp(-5).
    assert bl.TrainableNormal().stddev_initializer.mean == -5.0


def test_initial_stddev_bad_input_is_one_line():
    cases = [
        (lambda: bl.TrainableNormal(initial_stddev=0.0),
         r"^Expected a positive number\. Received: initial_stddev=0\.0$"),
        (lambda: bl.TrainableNormal(stddev_initializer="zeros", initial_stddev=1e-3),
         r"^Expected stddev_initializer or initial_stddev, not both\."),
        (lambda: bl.TrainableNormal(initial_stddev=1e-3, stddev_constraint="positive"),
         r"^Expected a stddev_constraint with an inverse"),
    ]
    for make, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as info:
            make()
        assert "\n" not in str(info.value)


# --- KL annealing ------------------------------------------------------------------


def test_annealing_schedule():
    steps = bl.KLAnnealing(steps=4)
    assert [steps.scale(t) for t in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    epochs = bl.KLAnnealing(epochs=3)
    assert [epochs.scale(e) for e in range(4)] == [1 / 3, 2 / 3, 1.0, 1.0]
    for kwargs, pattern in (({}, r"^Expected exactly one of steps and epochs\."),
                            ({"steps": 2, "epochs": 2}, r"Received: steps=2, epochs=2$"),
                            ({"steps": 0}, r"^Expected a positive integer\. Received: steps=0$"),
                            ({"epochs": 1.5}, r"Received: epochs=1\.5$")):
        with pytest.raises(ValueError, match=pattern):
            bl.KLAnnealing(**kwargs)


def _kl_model(seed=0):
    """A Bayesian model whose only loss is its KL (zero data loss; SGD(0): fixed weights)."""
    model = keras.Sequential([keras.Input((3,)), bl.DenseReparameterization(2, seed=seed),
                              bl.DenseFlipout(1, seed=seed + 1)])
    model.compile(keras.optimizers.SGD(0.0), loss=_counting_zero_loss())
    kl = float(tf.add_n(model.losses))
    return model, kl


def _counting_zero_loss():
    """A zero data loss counting its traces (``loss.traces``): a Python side effect runs once
    per trace of the train step, on either Keras."""
    def loss(y, p):
        loss.traces += 1
        return 0.0 * p[:, 0]

    loss.traces = 0
    return loss


def test_fit_loss_follows_the_step_schedule_without_retracing():
    model, kl = _kl_model()
    x, y = np.ones((4, 3), "float32"), np.zeros((4, 1), "float32")
    annealing = bl.KLAnnealing(steps=4)
    history = model.fit(x, y, batch_size=4, epochs=6, callbacks=[annealing], verbose=0)
    np.testing.assert_allclose(history.history["loss"], [kl * annealing.scale(t)
                                                         for t in range(6)], rtol=1e-5)
    # As many traces as a fit without the callback (Keras traces twice when the first trace
    # creates the optimizer's variables): none per change of the scale.
    baseline, _ = _kl_model()
    baseline.fit(x, y, batch_size=4, epochs=6, verbose=0)
    assert model.loss.traces == baseline.loss.traces
    assert float(annealing.kl_scale) == 1.0
    # Resumes with the optimizer: a second fit continues at step 6 (scale 1).
    history = model.fit(x, y, batch_size=4, epochs=1, callbacks=[annealing], verbose=0)
    np.testing.assert_allclose(history.history["loss"], [kl], rtol=1e-5)


def test_fit_loss_follows_the_epoch_schedule_after_an_earlier_fit():
    """A model trained before (its train step traced without the variable) is retraced once
    when the callback attaches it; two steps per epoch share the epoch's scale."""
    model, kl = _kl_model(seed=4)
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    plain = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    np.testing.assert_allclose(plain.history["loss"], [kl], rtol=1e-5)
    annealing = bl.KLAnnealing(epochs=4)
    model.loss.traces = 0
    history = model.fit(x, y, batch_size=4, epochs=5, callbacks=[annealing], verbose=0)
    np.testing.assert_allclose(history.history["loss"],
                               [kl * annealing.scale(e) for e in range(5)], rtol=1e-5)
    assert model.loss.traces == 1  # the new function, traced once


def test_set_kl_scale_attaches_and_detaches():
    model, kl = _kl_model(seed=8)
    scale = tf.Variable(0.25)
    assert regularizers.set_kl_scale(model, scale) == 2  # the two kernels
    np.testing.assert_allclose(float(tf.add_n(model.losses)), 0.25 * kl, rtol=1e-6)
    scale.assign(0.5)
    np.testing.assert_allclose(float(tf.add_n(model.losses)), 0.5 * kl, rtol=1e-6)
    assert regularizers.set_kl_scale(model, scale) == 0  # already attached
    regularizers.set_kl_scale(model, None)
    np.testing.assert_allclose(float(tf.add_n(model.losses)), kl, rtol=1e-6)
    with pytest.raises(TypeError, match=r"^Expected a scalar tf\.Variable or None\. "
                                        r"Received: kl_scale=0\.5$"):
        regularizers.set_kl_scale(model, 0.5)
