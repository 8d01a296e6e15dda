"""The heteroscedastic heads (`bayes_planet.layers.heteroscedastic`, `hetsngp`): Monte Carlo
averages against large numpy references drawn independently, the factor-analysis covariance
``V Vᵀ + diag(d²)`` against the sample covariance of the latents, `ExactSigmoidDense` against
a Monte Carlo estimate, the ensemble's mixtures, the SNGP variant's inference noise, the
contract harness (config, save/load, XLA, fit) and bad input.

Monte Carlo tolerances are stated per test: with ``S`` draws the standard error of a mean
probability is at most ``0.5 / sqrt(S)``, and the tolerances are about 4 standard errors of
the layer's estimate plus the reference's."""

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import expit, softmax
from scipy.stats import norm

import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers import heteroscedastic as het
from bayes_planet.layers.testing import normal_array, run_layer_test

REFERENCE_DRAWS = 100_000
LAYER_DRAWS = 10_000
#: 4 standard errors of a mean probability from LAYER_DRAWS draws (0.5 / sqrt(10000) each),
#: with a fifth more for the reference's (a third as large).
MC_ATOL = 4 * 0.5 / np.sqrt(LAYER_DRAWS) * 1.2


def _softplus(x):
    return np.logaddexp(0.0, x)


def _dense(layer, x):
    kernel, bias = (np.asarray(w, np.float64) for w in layer.weights)
    return x.astype(np.float64) @ kernel + bias


def _draws(kind, shape, rng):
    if kind == "normal":
        return rng.standard_normal(shape)
    if kind == "logistic":
        return rng.logistic(size=shape)
    return rng.gumbel(size=shape)


# Statistics ---------------------------------------------------------------------------------

@pytest.mark.parametrize("noise", het.LOGIT_NOISES)
def test_mc_softmax_average_matches_a_numpy_reference(noise):
    """E[softmax((μ + σ ε) / τ)] for each noise family: the layer's 10000-draw average
    against an independent numpy estimate from 100000 draws (tolerance MC_ATOL)."""
    x = normal_array(3, 4, seed=1)
    layer = bl.MCSoftmaxDense(5, logit_noise=noise, temperature=1.5,
                              test_mc_samples=LAYER_DRAWS, seed=3)
    probs = layer(x)[2].numpy()
    mu, sigma = _dense(layer.loc_layer, x), _softplus(_dense(layer.scale_layer, x)) + 1e-3
    rng = np.random.default_rng(0)
    eps = _draws(noise, (REFERENCE_DRAWS, 1, 5), rng)
    expected = softmax((mu + sigma * eps) / 1.5, axis=-1).mean(0)
    np.testing.assert_allclose(probs, expected, atol=MC_ATOL)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("parameter_efficient", [False, True])
def test_factor_analysis_softmax_matches_a_numpy_reference(parameter_efficient):
    """u = μ + V ε_R + d ⊙ ε_K (or v ⊙ (V ε_R) + d ⊙ ε_K): the layer's average against numpy's
    (tolerance MC_ATOL)."""
    x = normal_array(2, 4, seed=2)
    layer = bl.MCSoftmaxDenseFA(5, 2, parameter_efficient=parameter_efficient,
                                test_mc_samples=LAYER_DRAWS, seed=4)
    probs = layer(x)[2].numpy()
    rng = np.random.default_rng(1)
    mu, d = _dense(layer.loc_layer, x), _softplus(_dense(layer.diag_layer, x)) + 1e-3
    eps_r = rng.standard_normal((REFERENCE_DRAWS, 1, 2))
    if parameter_efficient:
        shared = eps_r @ np.asarray(layer.scale_layer_homoscedastic.kernel, np.float64) + \
            np.asarray(layer.scale_layer_homoscedastic.bias, np.float64)
        factor = shared * _dense(layer.scale_layer_heteroscedastic, x)
    else:
        v = _dense(layer.scale_layer, x).reshape(2, 5, 2)
        factor = np.einsum("bkr,sbr->sbk", v, np.broadcast_to(eps_r, (REFERENCE_DRAWS, 2, 2)))
    latents = mu + factor + d * rng.standard_normal((REFERENCE_DRAWS, 2, 5))
    np.testing.assert_allclose(probs, softmax(latents, -1).mean(0), atol=MC_ATOL)


def test_factor_analysis_covariance_is_v_vt_plus_diagonal():
    """The latents' sample covariance (the inverse sigmoid of a sigmoid head's single draws)
    against V Vᵀ + diag(d²); 10000 draws give standard errors under 0.03 for these entries
    (tolerance 0.12)."""
    x = normal_array(1, 3, seed=5)
    layer = bl.MCSigmoidDenseFA(4, 2, test_mc_samples=LAYER_DRAWS, return_unaveraged_logits=True,
                                logits_only=True, eps=1e-12, dtype="float64", seed=6)
    latents = layer(x)[1].numpy()[0]  # [samples, 4]
    v = _dense(layer.scale_layer, x).reshape(4, 2)
    d = _softplus(_dense(layer.diag_layer, x))[0] + 1e-3
    np.testing.assert_allclose(np.cov(latents.T), v @ v.T + np.diag(d ** 2), atol=0.12)
    np.testing.assert_allclose(latents.mean(0), _dense(layer.loc_layer, x)[0], atol=0.12)


@pytest.mark.parametrize("noise, cdf", [("normal", norm.cdf), ("logistic", expit)])
def test_exact_sigmoid_is_the_probability_of_a_positive_latent(noise, cdf):
    """P(μ + σ ε > 0) in closed form against its formula and a 10⁶-draw Monte Carlo estimate
    (standard error ≤ 5e-4; tolerance 3e-3)."""
    x = normal_array(4, 3, seed=7)
    layer = bl.ExactSigmoidDense(2, logit_noise=noise)
    logits, log_probs, probs = (t.numpy() for t in layer(x))
    mu, sigma = _dense(layer.loc_layer, x), _softplus(_dense(layer.diag_layer, x)) + 1e-2
    np.testing.assert_allclose(probs, cdf(mu / sigma), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_probs, np.log(cdf(mu / sigma)), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(expit(logits), probs, rtol=1e-4, atol=1e-6)
    eps = _draws(noise, (1_000_000, 1, 1), np.random.default_rng(2))
    np.testing.assert_allclose(probs, (mu + sigma * eps > 0).mean(0), atol=3e-3)


def test_exact_sigmoid_logits_stay_finite_in_the_tails():
    layer = bl.ExactSigmoidDense(1, dtype="float64")
    layer(np.zeros((1, 1)))
    layer.loc_layer.kernel.assign([[100.0]])
    logits = layer(np.array([[-1.0], [1.0]]))[0].numpy()
    assert np.all(np.isfinite(logits)) and logits[0, 0] < -1000 and logits[1, 0] > 1000


def test_predictive_variance_is_the_variance_of_the_sampled_probabilities():
    layer = bl.MCSoftmaxDense(4, test_mc_samples=64, compute_pred_variance=True,
                              return_unaveraged_logits=True, eps=1e-30, dtype="float64", seed=8)
    _, sample_logits, _, probs, variance = layer(normal_array(3, 2, dtype="float64"))
    samples = np.exp(sample_logits.numpy())
    np.testing.assert_allclose(probs, samples.mean(1), rtol=1e-10)
    np.testing.assert_allclose(variance, samples.var(1), rtol=1e-8, atol=1e-14)


def test_binary_heads_return_the_inverse_sigmoid_of_the_mean():
    layer = bl.MCSoftmaxDense(2, test_mc_samples=32, seed=9)
    logits, log_probs, probs, variance = layer(normal_array(5, 3))
    assert probs.shape == (5, 1) and variance is None
    np.testing.assert_allclose(expit(logits.numpy()), probs.numpy(), rtol=1e-5)
    np.testing.assert_allclose(np.exp(log_probs.numpy()), probs.numpy(), rtol=1e-5)


def test_training_calls_take_train_mc_samples():
    layer = bl.MCSoftmaxDenseFA(3, 1, train_mc_samples=7, test_mc_samples=11,
                                return_unaveraged_logits=True, logits_only=True, seed=0)
    x = normal_array(2, 3)
    assert layer(x, training=True)[1].shape == (2, 7, 3)
    assert layer(x)[1].shape == (2, 11, 3)


def test_shared_samples_give_equal_rows_equal_outputs():
    x = np.repeat(normal_array(1, 3), 2, axis=0)
    shared = bl.MCSoftmaxDenseFA(4, 2, test_mc_samples=8, share_samples_across_batch=True,
                                 seed=1)(x)[2].numpy()
    np.testing.assert_array_equal(shared[0], shared[1])
    own = bl.MCSoftmaxDenseFA(4, 2, test_mc_samples=8, seed=1)(x)[2].numpy()
    assert not np.allclose(own[0], own[1])


def test_noise_is_seeded_per_call_and_by_a_call_seed():
    layer, again = (bl.MCSoftmaxDense(3, test_mc_samples=8, seed=5) for _ in range(2))
    layer.build((None, 3))
    again.build((None, 3))
    again.set_weights(layer.get_weights())
    x = normal_array(2, 3)
    first, second = layer(x)[0].numpy(), layer(x)[0].numpy()
    assert not np.allclose(first, second)  # The counter moved.
    np.testing.assert_array_equal(again(x)[0], first)  # Same seed, weights and counter.
    np.testing.assert_array_equal(layer(x, seed=12)[0], layer(x, seed=12)[0])


def test_tuned_temperature_starts_mid_interval_and_trains():
    assert float(het.compute_temperature(0.0)) == pytest.approx(
        (het.TEMPERATURE_LOWER_BOUND + het.TEMPERATURE_UPPER_BOUND) / 2)
    layer = bl.MCSoftmaxDense(3, tune_temperature=True, temperature_lower_bound=0.5,
                              temperature_upper_bound=2.0, test_mc_samples=16, seed=2)
    x = normal_array(4, 3)
    layer(x)
    assert float(layer.current_temperature()) == pytest.approx(1.25)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x, training=True)[0][:, 0])
    grad = tape.gradient(loss, layer.pre_sigmoid_temperature)
    assert grad is not None and abs(float(grad)) > 0


def test_segmentation_inputs_get_one_latent_per_pixel():
    layer = bl.MCSoftmaxDenseFASegmentation(5, 2, test_mc_samples=4,
                                            return_unaveraged_logits=True, seed=3)
    logits, samples, _, probs, _ = layer(normal_array(2, 3, 4, 6))
    assert logits.shape == (2, 3, 4, 5) and samples.shape == (2, 4, 3, 4, 5)
    np.testing.assert_allclose(tf.reduce_sum(probs, -1), 1.0, rtol=1e-5)


def test_ensemble_cross_entropy_mixes_probabilities_and_gibbs_averages_logits():
    x = normal_array(3, 2, seed=4)
    members = [bl.ExactSigmoidDense(1), bl.ExactSigmoidDense(1, logit_noise="logistic")]
    outputs = [[t.numpy() for t in m(x)] for m in members]
    mixture = bl.EnsembleHeteroscedasticOutputs(2, members, (0.7, 0.3))
    logits, log_probs, probs = (t.numpy() for t in mixture(x))
    expected = 0.7 * outputs[0][2] + 0.3 * outputs[1][2]
    np.testing.assert_allclose(probs, expected, rtol=1e-5)
    np.testing.assert_allclose(expit(logits), expected, rtol=1e-5)
    gibbs = bl.EnsembleHeteroscedasticOutputs(2, members, (0.7, 0.3), "gibbs_cross_ent")
    np.testing.assert_allclose(gibbs(x, training=True)[0],
                               0.7 * outputs[0][0] + 0.3 * outputs[1][0], rtol=1e-5)
    np.testing.assert_allclose(gibbs(x)[2], expected, rtol=1e-5)


def test_hetsngp_inference_noise_adds_the_gp_variance():
    """At inference u = μ_GP + sqrt(w_het d² + w_sngp v_GP) ε (no factors here): the layer's
    average against numpy's with the GP's own logits and variance (tolerance MC_ATOL); in
    training the GP's variance is left out."""
    x = normal_array(3, 2, seed=6)
    layer = bl.HeteroscedasticSNGPLayer(3, 0, num_inducing=16, test_mc_samples=LAYER_DRAWS,
                                        train_mc_samples=LAYER_DRAWS, het_var_weight=0.5,
                                        sngp_var_weight=2.0, logits_only=False, seed=7)
    layer(x, training=True)  # Builds, and adds x to the GP's precision.
    probs = layer(x)[2].numpy()
    gp = layer.gp_layer
    mu = gp(x)[0].numpy()
    phi = gp.features(x).numpy()
    variance = np.sum((phi @ gp.covariance().numpy()) * phi, -1, keepdims=True)
    d = _softplus(_dense(layer.diag_layer, x)) + 1e-3
    scale = np.sqrt(0.5 * d ** 2 + 2.0 * variance)
    eps = np.random.default_rng(3).standard_normal((REFERENCE_DRAWS, 3, 3))
    np.testing.assert_allclose(probs, softmax(mu + scale * eps, -1).mean(0), atol=MC_ATOL)
    training = layer(x, training=True)[2].numpy()
    np.testing.assert_allclose(training, softmax(mu + d * eps, -1).mean(0), atol=MC_ATOL)


# The contract harness ------------------------------------------------------------------------

_MC = dict(train_mc_samples=8, test_mc_samples=8, logits_only=True)


# The default run: one head of each kind (its variants, marked slow, take the same paths).
@pytest.mark.parametrize("cls, kwargs, shape, out, trainable", [
    (bl.MCSoftmaxDense, dict(num_classes=4, **_MC), (6, 5), (6, 4), 4),
    pytest.param(bl.MCSoftmaxDense, dict(num_classes=2, logit_noise="logistic", **_MC), (6, 5), (6, 1), 4, marks=pytest.mark.slow),
    (bl.MCSoftmaxDenseFA, dict(num_classes=4, num_factors=2, tune_temperature=True, **_MC),
     (6, 5), (6, 4), 7),
    pytest.param(bl.MCSoftmaxDenseFA, dict(num_classes=4, num_factors=2, parameter_efficient=True, **_MC),
     (6, 5), (6, 4), 8, marks=pytest.mark.slow),
    pytest.param(bl.MCSigmoidDenseFA, dict(num_outputs=3, num_factors=1, **_MC), (6, 5), (6, 3), 6, marks=pytest.mark.slow),
    pytest.param(bl.MCSoftmaxDenseFASegmentation, dict(num_classes=3, num_factors=1, **_MC),
     (2, 3, 3, 4), (2, 3, 3, 3), 6, marks=pytest.mark.slow),
    (bl.ExactSigmoidDense, dict(num_outputs=2, logits_only=True), (6, 5), (6, 2), 4),
    (bl.HeteroscedasticSNGPLayer, dict(num_classes=3, num_factors=2, num_inducing=8, **_MC),
     (6, 5), (6, 3), 8),
])
def test_contract(cls, kwargs, shape, out, trainable):
    run_layer_test(cls, kwargs, shape, expected_output_shape=out,
                   expected_num_trainable_weights=trainable)


def test_contract_of_the_ensemble():
    members = [keras.saving.serialize_keras_object(m) for m in (
        bl.MCSoftmaxDense(3, train_mc_samples=4, test_mc_samples=4, seed=1),
        bl.MCSoftmaxDenseFA(3, 1, train_mc_samples=4, test_mc_samples=4, seed=2))]
    run_layer_test(bl.EnsembleHeteroscedasticOutputs,
                   dict(num_classes=3, layers=members, ensemble_weighting=[0.6, 0.4]), (5, 4),
                   expected_output_shape=((5, 3), (5, 3), (5, 3)),
                   expected_num_trainable_weights=10, run_fit=False)
    # The fit (the harness fits a model of the layer's whole, here nested, output).
    inputs = keras.Input((4,))
    ensemble = bl.EnsembleHeteroscedasticOutputs.from_config(
        dict(num_classes=3, layers=members, ensemble_weighting=[0.6, 0.4]))
    model = keras.Model(inputs, ensemble(inputs)[0])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    history = model.fit(normal_array(5, 4), np.arange(5) % 3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_full_outputs_reload_in_a_functional_model(tmp_path):
    inputs = keras.Input((3,))
    outputs = bl.MCSoftmaxDenseFA(4, 2, test_mc_samples=8, compute_pred_variance=True,
                                  seed=0)(inputs)
    model = keras.Model(inputs, list(outputs))
    x = normal_array(2, 3)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    for ours, theirs in zip(model(x), loaded(x), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


# Bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("make, message", [
    (lambda: bl.MCSoftmaxDense(0), "Expected a positive integer. Received: num_classes=0"),
    (lambda: bl.MCSoftmaxDense(1), "Expected num_classes >= 2. Received: num_classes=1"),
    (lambda: bl.MCSoftmaxDense(3, logit_noise="cauchy"), "Received: logit_noise='cauchy'"),
    (lambda: bl.MCSoftmaxDense(3, temperature=0), "Expected a positive number. Received: "
                                                   "temperature=0"),
    (lambda: bl.MCSoftmaxDense(3, train_mc_samples=0), "Received: train_mc_samples=0"),
    (lambda: bl.MCSoftmaxDense(3, eps=0.5), "Expected a number in \\(0, 0.5\\). Received: "
                                           "eps=0.5"),
    (lambda: bl.MCSoftmaxDense(3, temperature_lower_bound=2.0, temperature_upper_bound=1.0),
     "Expected temperature_lower_bound < temperature_upper_bound"),
    (lambda: bl.MCSoftmaxDenseFA(2, 1), "Expected num_classes > 2"),
    (lambda: bl.MCSoftmaxDenseFA(3, 4), "Expected num_factors <= num_classes=3. Received: "
                                        "num_factors=4"),
    (lambda: bl.MCSoftmaxDenseFA(3, -1), "Expected a non-negative integer. Received: "
                                         "num_factors=-1"),
    (lambda: bl.MCSigmoidDenseFA(2, 3), "Expected num_factors <= num_outputs=2"),
    (lambda: bl.ExactSigmoidDense(1, logit_noise="gumbel"), "Received: logit_noise='gumbel'"),
    (lambda: bl.EnsembleHeteroscedasticOutputs(2, [bl.ExactSigmoidDense(1)] * 2, (0.4, 0.5)),
     "Expected ensemble_weighting to be one probability per layer"),
    (lambda: bl.EnsembleHeteroscedasticOutputs(2, [bl.ExactSigmoidDense(1)], (1.0,), "mean"),
     "Received: averaging='mean'"),
    (lambda: bl.HeteroscedasticSNGPLayer(3, 2, sngp_var_weight=-1.0),
     "Received: sngp_var_weight=-1.0"),
])
def test_bad_arguments_are_one_line_errors(make, message):
    with pytest.raises(ValueError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_bad_inputs_and_call_seeds():
    with pytest.raises(ValueError, match="Expected inputs of shape \\[batch, height, width, d\\]"):
        bl.MCSoftmaxDenseFASegmentation(3, 1)(normal_array(2, 4))
    with pytest.raises(ValueError, match="Expected inputs of shape \\[batch, ..., d\\]"):
        bl.MCSoftmaxDense(3)(np.zeros([4], "float32"))
    with pytest.raises(ValueError, match="Received: seed=-1"):
        bl.MCSoftmaxDense(3, test_mc_samples=2)(normal_array(2, 2), seed=-1)
