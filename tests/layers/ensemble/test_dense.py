"""Rank-1 Bayesian (`DenseRank1`) and BatchEnsemble (`DenseBatchEnsemble`) dense layers.

The contract harness, the batch convention against a hand computation of every member,
the KL against tfp's closed form, seeded noise, bad input, and the float64 and
mixed-precision dtypes.
"""

import contextlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet import layer_registry
from bayes_planet._keras import keras
from bayes_planet.layers import initializers
from bayes_planet.layers.ensemble.dense import (
    FACTOR_NAMES,
    RANK1_PRIOR,
    Rank1CauchyKLDivergence,
    TrainableRandomSignCauchy,
    factor_arguments,
)
from bayes_planet.layers.testing import (
    check_batch_checked_at_run_time,
    check_mixed_precision_fit,
    factor_means,
    global_policy,
    normal_array,
    normal_kl,
    run_layer_test,
    wide_factors,
)

tfd = tfp.distributions
ENSEMBLES = [bl.DenseRank1, bl.DenseBatchEnsemble]


def test_registered_as_their_own_family():
    assert layer_registry.estimators("dense_ensemble") == ("deterministic", "rank1",
                                                          "batch_ensemble")
    assert layer_registry.get("dense_ensemble", "rank1") is bl.DenseRank1
    assert layer_registry.get("dense_ensemble", "batch_ensemble") is bl.DenseBatchEnsemble
    # Not estimators of 'dense': its readers (agent config, RSSM) feed plain batches.
    assert "rank1" not in layer_registry.estimators("dense")


@pytest.mark.parametrize("cls, trainable, non_trainable, losses", [
    (bl.DenseRank1, 6, 1, 2),  # kernel, α/γ (mean, stddev), bias; seed counter; KL α, γ
    (bl.DenseBatchEnsemble, 4, 0, 0),  # kernel, α, γ, bias
], ids=["DenseRank1", "DenseBatchEnsemble"])
def test_contract(cls, trainable, non_trainable, losses):
    run_layer_test(cls, {"units": 3, "activation": "relu"}, (8, 5),
                   expected_output_shape=(8, 3), expected_num_trainable_weights=trainable,
                   expected_num_non_trainable_weights=non_trainable,
                   expected_num_losses=losses)


@pytest.mark.parametrize("cls", ENSEMBLES)
def test_middle_axes_and_no_bias(cls):
    run_layer_test(cls, {"units": 2, "use_bias": False, "ensemble_size": 2}, (4, 3, 5),
                   expected_output_shape=(4, 3, 2), run_save=False, run_fit=False)


@pytest.mark.parametrize("cls", ENSEMBLES)
@pytest.mark.parametrize("ensemble_size", [1, 3])
def test_block_e_uses_member_e(cls, ensemble_size):
    """Output block e is ``((x ∘ α_e) @ W) ∘ γ_e + b_e`` with α, γ at their means."""
    rows, units = 2, 4
    x = normal_array(ensemble_size * rows, 3, seed=1)
    layer = cls(units, ensemble_size=ensemble_size, bias_initializer="random_normal")
    layer.build(x.shape)
    with bl.posterior_mean(layer) if cls is bl.DenseRank1 else contextlib.nullcontext():
        out = layer(x).numpy()
    alpha, gamma = factor_means(layer)
    kernel, bias = layer.kernel.numpy(), layer.bias.numpy()
    assert np.ptp(bias) > 0 and np.ptp(alpha) > 0  # members differ
    for e in range(ensemble_size):
        block = x[e * rows:(e + 1) * rows]
        expected = ((block * alpha[e]) @ kernel) * gamma[e] + bias[e]
        np.testing.assert_allclose(out[e * rows:(e + 1) * rows], expected, rtol=1e-5,
                                   atol=1e-6)


def test_rank1_additive_perturbation():
    """``use_additive_perturbation=True``: block e is ``((x + α_e) @ W) + γ_e + b_e``."""
    x = normal_array(4, 3, seed=4)
    layer = bl.DenseRank1(2, ensemble_size=2, use_additive_perturbation=True,
                          bias_initializer="random_normal", seed=0)
    layer.build(x.shape)
    with bl.posterior_mean(layer):
        out = layer(x).numpy()
    alpha, gamma = factor_means(layer)
    kernel, bias = layer.kernel.numpy(), layer.bias.numpy()
    for e in range(2):
        expected = ((x[2 * e:2 * e + 2] + alpha[e]) @ kernel) + gamma[e] + bias[e]
        np.testing.assert_allclose(out[2 * e:2 * e + 2], expected, rtol=1e-5, atol=1e-6)
    config = bl.DenseRank1.from_config(layer.get_config()).get_config()
    assert config["use_additive_perturbation"] is True


def test_rank1_samples_per_example_around_the_mean():
    """Without posterior_mean, each row gets its own draw of α, γ; the mean call is exact."""
    x = np.tile(normal_array(1, 3, seed=2), [8, 1])  # one example: rows differ by noise only
    layer = bl.DenseRank1(4, ensemble_size=2, seed=0, **wide_factors(["alpha"]))
    noisy = layer(x).numpy()
    with bl.posterior_mean(layer):
        mean = layer(x).numpy()
    assert not np.allclose(noisy[0], noisy[1])  # same member, same input, different draw
    np.testing.assert_allclose(mean[:4], np.tile(mean[:1], [4, 1]), rtol=1e-6)
    assert not np.allclose(mean[0], mean[4])  # the two members differ


def test_rank1_kl_is_the_closed_form_to_n_1_0_1():
    layer = bl.DenseRank1(4, ensemble_size=3, seed=0,
                          alpha_regularizer="rank1_normal_kl_divergence",
                          gamma_regularizer="rank1_normal_kl_divergence")
    layer(normal_array(6, 5))
    expected = sum(normal_kl([layer.alpha, layer.gamma], 1.0, 0.1))
    np.testing.assert_allclose(float(tf.add_n(layer.losses)), expected, rtol=1e-5)
    kls = sorted(float(v) for v in layer.losses)
    assert all(k > 0 for k in kls)


def test_rank1_default_kl_is_the_sign_mixture_bound_of_both_factors():
    layer = bl.DenseRank1(4, ensemble_size=3, seed=0)
    layer(normal_array(6, 5))
    prior = bl.Rank1SignMixtureKLDivergence()
    expected = float(prior(layer.alpha)) + float(prior(layer.gamma))
    np.testing.assert_allclose(float(tf.add_n(layer.losses)), expected, rtol=1e-5)
    assert len(layer.losses) == 2 and all(float(v) > 0 for v in layer.losses)


def test_default_factors_start_at_random_signs_under_the_sign_mixture_prior():
    """The default α, γ posterior (`TrainableRandomSignNormal`): means ±1, each sign with
    probability ½ (4 × 200 entries, 4 standard errors), stddev ≈ 0.032, per-member sign
    patterns that differ; its prior the symmetric `Rank1SignMixtureKLDivergence`, under which
    a −1 entry costs what a +1 entry does."""
    layer = bl.DenseRank1(200, ensemble_size=4, seed=0)
    layer(normal_array(4, 200))
    assert type(layer.gamma_initializer) is bl.TrainableRandomSignNormal
    assert type(layer.alpha_regularizer) is bl.Rank1SignMixtureKLDivergence
    means = layer.gamma.loc().numpy()
    np.testing.assert_array_equal(np.abs(means), 1.0)
    assert abs(np.mean(means > 0) - 0.5) < 4 * 0.5 / np.sqrt(means.size)
    assert np.any(means[0] != means[1])
    np.testing.assert_allclose(np.median(layer.gamma.scale().numpy()),
                               initializers.RANK1_INITIAL_STDDEV, rtol=0.05)
    kl = float(layer.gamma_regularizer(layer.gamma))
    layer.gamma.mean.assign(-means)  # every sign flipped: the same KL
    np.testing.assert_allclose(float(layer.gamma_regularizer(layer.gamma)), kl, rtol=1e-5)
    # ≈ log 2 + 0.69 nats per entry, against ≈ 100 per entry (200 per −1) under N(1, 0.1²).
    assert kl < 0.05 * float(bl.Rank1NormalKLDivergence()(layer.gamma))


def test_near_one_factor_posterior_starts_near_one():
    """`TrainableRank1Normal` (the earlier default, the agent's rank-1 setting): means
    ~ N(1, 0.5²) (moments of 4 × 200 entries, tolerance 4 standard errors), stddev ≈ 0.032,
    per-member draws that differ, seeded (the same seed: the same means), reloaded from its
    config."""
    layer = bl.DenseRank1(200, ensemble_size=4, seed=0, gamma_initializer="trainable_rank1_normal")
    layer(normal_array(4, 200))
    assert type(layer.gamma_initializer) is bl.TrainableRank1Normal
    means = layer.gamma.loc().numpy()
    assert abs(means.mean() - 1.0) < 4 * 0.5 / np.sqrt(means.size)
    assert abs(means.std() - 0.5) < 4 * 0.5 / np.sqrt(2 * means.size)
    assert np.min(np.abs(means[0] - means[1])) < 0.5 < np.max(np.abs(means[0] - means[1]))
    np.testing.assert_allclose(np.median(layer.gamma.scale().numpy()),
                               initializers.RANK1_INITIAL_STDDEV, rtol=0.05)
    a, b = (bl.TrainableRank1Normal(seed=7) for _ in range(2))
    a.build((3, 5))
    b.build((3, 5))
    np.testing.assert_array_equal(a.loc().numpy(), b.loc().numpy())
    clone = bl.TrainableRank1Normal.from_config(a.get_config())
    assert clone.get_config() == a.get_config()
    assert isinstance(initializers.get("trainable_rank1_normal"), bl.TrainableRank1Normal)


def test_rank1_noise_is_seeded():
    x = normal_array(8, 5, seed=3)

    a, b, c = (bl.DenseRank1(3, seed=seed) for seed in (1, 1, 2))
    for layer in (a, b, c):
        layer.build(x.shape)
        layer.set_weights(a.get_weights())  # the same weights: only the seeds differ
    out_a, out_b, out_c = a(x).numpy(), b(x).numpy(), c(x).numpy()
    np.testing.assert_array_equal(out_a, out_b)
    assert not np.allclose(out_a, out_c)
    assert not np.allclose(out_a, a(x).numpy())  # the next call draws again
    with bl.fixed_noise(a, [4, 5]):
        first = a(x).numpy()
        np.testing.assert_array_equal(first, a(x).numpy())


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match=r"^Expected a positive integer\. "
                                         r"Received: ensemble_size=0$"):
        bl.DenseRank1(3, ensemble_size=0)
    with pytest.raises(ValueError, match=r"Received: ensemble_size=-1$"):
        bl.DenseBatchEnsemble(3, ensemble_size=-1)
    with pytest.raises(ValueError, match=r"Expected a batch size divisible by ensemble_size\. "
                                         r"Received: batch size 6, ensemble_size=4"):
        bl.DenseRank1(3)(tf.zeros([6, 2]))
    with pytest.raises(ValueError, match=r"Received: kernel_initializer='trainable_normal'$"):
        bl.DenseRank1(3, kernel_initializer="trainable_normal")
    with pytest.raises(ValueError, match=r"Received: alpha_initializer='trainable_normal'$"):
        bl.DenseBatchEnsemble(3, alpha_initializer="trainable_normal")


@pytest.mark.parametrize("cls", ENSEMBLES)
def test_unknown_batch_size_is_checked_at_run_time(cls):
    assert check_batch_checked_at_run_time(cls(3, ensemble_size=4), [2], 4).shape == (8, 3)


@pytest.mark.parametrize("cls", ENSEMBLES)
def test_float64(cls):
    layer = cls(3, dtype="float64")
    x = normal_array(8, 5, dtype="float64")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x)) + tf.add_n(layer.losses or [tf.zeros([], tf.float64)])
    grads = tape.gradient(loss, layer.trainable_variables)
    assert layer(x).dtype == tf.float64
    assert all(v.dtype == tf.float64 for v in layer.trainable_variables)
    assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)


@pytest.mark.parametrize("cls", ENSEMBLES)
def test_mixed_float16(cls):
    with global_policy("mixed_float16"):
        model = keras.Sequential([keras.Input((5,)), cls(8, "relu"), cls(2)])
        check_mixed_precision_fit(model, normal_array(8, 5), normal_array(8, 2, seed=1))


def _alpha_probe(sampling, alpha_mean, alpha_stddev, rows, ensemble_size=2, dim=8, seed=0,
                 posterior=bl.TrainableRandomSignNormal):
    """A DenseRank1 whose output is its draw of α: ``W = I``, γ ≡ 1 (stddev e⁻³⁰), no bias,
    inputs of ones; α ~ N(alpha_mean, alpha_stddev²) per entry (or the ``posterior``
    class with that location and scale, e.g. Cauchy)."""
    layer = bl.DenseRank1(
        dim, use_bias=False, kernel_initializer="identity", ensemble_size=ensemble_size,
        sampling=sampling, seed=seed,
        alpha_initializer=posterior(
            mean_initializer=keras.initializers.Constant(alpha_mean),
            stddev_initializer=keras.initializers.Constant(np.log(alpha_stddev))),
        alpha_regularizer=("rank1_cauchy_kl_divergence"
                           if posterior is TrainableRandomSignCauchy else RANK1_PRIOR),
        gamma_initializer=bl.TrainableRandomSignNormal(
            mean_initializer="ones", stddev_initializer=keras.initializers.Constant(-30.0)))
    x = np.ones([ensemble_size * rows, dim], np.float32)
    layer.build(x.shape)
    return layer, x


@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
def test_rank1_sampling_draws_the_posterior(sampling):
    """Both modes draw α ~ N(μ, σ²) (mean and variance within 5 standard errors over n
    draws); per example every row has its own draw, per member a member's rows share one."""
    mu, sigma = 0.5, 0.3
    rows, calls = (4096, 1) if sampling == "per_example" else (4, 1024)
    layer, x = _alpha_probe(sampling, mu, sigma, rows)
    call = tf.function(layer)
    out = np.stack([call(x).numpy() for _ in range(calls)])
    blocks = out.reshape(-1, 2, rows, 8)  # [calls, member, row, α entry]
    if sampling == "per_member":
        np.testing.assert_array_equal(blocks, np.repeat(blocks[:, :, :1], rows, axis=2))
        samples = blocks[:, :, 0].ravel()
    else:
        assert np.all(np.abs(np.diff(blocks, axis=2)) > 0)  # rows of a member differ
        samples = out.ravel()
    n = samples.size
    assert abs(samples.mean() - mu) < 5 * sigma / np.sqrt(n)
    assert abs(samples.var() / sigma**2 - 1) < 5 * np.sqrt(2 / n)
    config = bl.DenseRank1.from_config(layer.get_config()).get_config()
    assert config["sampling"] == sampling


@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
@pytest.mark.parametrize("mean, stddev", [(9.95, 1.0), (0.5, 0.3)], ids=["reaches", "inside"])
def test_rank1_factors_are_clipped_to_10_with_the_clip_gradient(sampling, mean, stddev):
    """α = clip(loc + scale · eps, -10, 10): for α ~ N(9.95, 1) about 48 % of draws are 10
    (P(N(0, 1) > 0.05) = 0.480, within 5 standard errors); for N(0.5, 0.3²) none can reach
    the bounds (the clip is skipped, not changed). In both, the mean's gradient counts the
    unclipped draws and the log-stddev's sums their ``scale · eps``."""
    layer, x = _alpha_probe(sampling, mean, stddev, rows=512, ensemble_size=1)
    with tf.GradientTape() as tape:
        out = layer(x)
        total = tf.reduce_sum(out)
    d_mean, d_raw_stddev = tape.gradient(total, [layer.alpha.mean, layer.alpha.raw_stddev])
    out = out.numpy()
    unclipped = out < 10.0
    if mean > 9:
        assert out.max() == 10.0
        if sampling == "per_example":
            frac = 1 - unclipped.mean()
            assert abs(frac - 0.480) < 5 * np.sqrt(0.48 * 0.52 / out.size)
    else:
        assert unclipped.all() and np.abs(out).max() < 10.0
    np.testing.assert_allclose(d_mean.numpy()[0], unclipped.sum(axis=0))
    scaled_eps = out - mean  # scale · eps = d α / d log-stddev
    np.testing.assert_allclose(d_raw_stddev.numpy()[0],
                               np.where(unclipped, scaled_eps, 0).sum(axis=0),
                               rtol=1e-4, atol=1e-3)


def test_bad_sampling_is_one_line():
    with pytest.raises(ValueError, match=r"^Expected sampling in \['per_example', 'per_member'\]"
                                         r"\. Received: sampling='per_batch'$"):
        bl.DenseRank1(3, sampling="per_batch")


def test_rank1_per_member_with_one_deterministic_factor():
    """A point-mass α (``trainable_deterministic``) is used as it is; γ is still drawn once
    per member: a member's rows (same input) agree, the next call differs."""
    layer = bl.DenseRank1(3, ensemble_size=2, sampling="per_member", seed=0,
                          alpha_initializer="trainable_deterministic")
    x = np.tile(normal_array(1, 5), [4, 1])
    first, second = layer(x).numpy(), layer(x).numpy()
    np.testing.assert_array_equal(first[0], first[1])
    assert not np.allclose(first, second)
    assert len(layer.losses) == 2  # the point mass's -log prior and γ's KL


# Cauchy factors ---------------------------------------------------------------------------

CAUCHY = {"alpha_initializer": "trainable_cauchy", "gamma_initializer": "trainable_cauchy",
          "alpha_regularizer": "rank1_cauchy_kl_divergence",
          "gamma_regularizer": "rank1_cauchy_kl_divergence"}


@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
def test_cauchy_factor_draws_are_tfp_cauchy(sampling):
    """α ~ Cauchy(0.5, 0.3) clipped to [-10, 10]: the empirical CDF at 9 points (inside
    the clip) and the clipped fraction equal tfp's Cauchy CDF within 5 binomial standard
    errors (n = 8192 draws, seeded)."""
    loc, scale = 0.5, 0.3
    rows, calls = (4096, 1) if sampling == "per_example" else (4, 1024)
    layer, x = _alpha_probe(sampling, loc, scale, rows, posterior=TrainableRandomSignCauchy)
    call = tf.function(layer)
    out = np.stack([call(x).numpy() for _ in range(calls)])
    blocks = out.reshape(-1, 2, rows, 8)  # [calls, member, row, α entry]
    samples = (blocks[:, :, 0] if sampling == "per_member" else blocks).ravel()
    n = samples.size
    cauchy = tfd.Cauchy(loc, scale)
    for point in (-9.0, -1.0, 0.0, 0.3, 0.5, 0.7, 1.0, 2.0, 9.0):
        p = float(cauchy.cdf(point))
        assert abs(np.mean(samples <= point) - p) < 5 * np.sqrt(p * (1 - p) / n), point
    tails = float(cauchy.cdf(-10.0)) + 1 - float(cauchy.cdf(10.0))  # ≈ 0.019: clipped
    clipped = np.mean(np.abs(samples) == 10.0)
    assert abs(clipped - tails) < 5 * np.sqrt(tails * (1 - tails) / n), (clipped, tails)
    assert np.abs(samples).max() == 10.0


def test_cauchy_kl_is_tfps_closed_form_to_cauchy_1_0_1():
    layer = bl.DenseRank1(4, ensemble_size=3, seed=0, **CAUCHY)
    layer(normal_array(6, 5))
    prior = tfd.Cauchy(1.0, 0.1)
    expected = [float(tf.reduce_sum(tfd.kl_divergence(tfd.Cauchy(w.loc(), w.scale()), prior)))
                for w in (layer.alpha, layer.gamma)]
    np.testing.assert_allclose([float(v) for v in layer.losses], expected, rtol=1e-5)
    assert all(k > 0 for k in expected)


def test_cauchy_contract_and_posterior_mean_is_the_location():
    run_layer_test(bl.DenseRank1, {"units": 3, "ensemble_size": 2, **CAUCHY}, (4, 5),
                   expected_output_shape=(4, 3), expected_num_losses=2)
    layer = bl.DenseRank1(3, ensemble_size=2, use_bias=False, seed=0, **CAUCHY)
    x = normal_array(4, 5, seed=1)
    layer.build(x.shape)
    with bl.posterior_mean(layer):
        mean = layer(x).numpy()
    alpha, gamma = (w.loc().numpy() for w in (layer.alpha, layer.gamma))
    kernel = layer.kernel.numpy()
    for e in range(2):
        np.testing.assert_allclose(mean[2 * e:2 * e + 2],
                                   ((x[2 * e:2 * e + 2] * alpha[e]) @ kernel) * gamma[e],
                                   rtol=1e-5, atol=1e-6)


def test_cauchy_bad_names_and_priors_are_one_line():
    with pytest.raises(ValueError, match=r"^Unknown alpha_initializer\. .* Received: "
                                         r"alpha_initializer='trainable_cauchi'$"):
        bl.DenseRank1(3, alpha_initializer="trainable_cauchi")
    with pytest.raises(ValueError, match=r"^Unknown gamma_regularizer\. .* Received: "
                                         r"gamma_regularizer='cauchy_kl'$"):
        bl.Conv2DRank1(3, 3, gamma_regularizer="cauchy_kl")
    with pytest.raises(ValueError, match=r"infinite KL divergence to a normal prior; use "
                                         r"'rank1_cauchy_kl_divergence'\. Received: "
                                         r"alpha_initializer=TrainableRandomSignCauchy, "
                                         r"alpha_regularizer=Rank1SignMixtureKLDivergence$"):
        bl.DenseRank1(3, alpha_initializer="trainable_cauchy")
    with pytest.raises(ValueError, match=r"Received: alpha_initializer=TrainableRandomSignCauchy, "
                                         r"alpha_regularizer=Rank1NormalKLDivergence$"):
        bl.DenseRank1(3, alpha_initializer="trainable_cauchy",
                      alpha_regularizer="rank1_normal_kl_divergence")
    with pytest.raises(ValueError, match=r"^Expected a positive prior scale\. "
                                         r"Received: scale=0\.0$"):
        Rank1CauchyKLDivergence(scale=0.0)


def test_factor_arguments_gives_each_factor_a_fresh_resolved_instance():
    """`factor_arguments`: every stem gets its own instance of the posterior and the prior
    (aliases, configs and instances alike, the library's own aliases included); a None
    setting is left to the layer's default; an unknown name is a one-line error naming the
    argument."""
    prior = Rank1CauchyKLDivergence(scale=0.2)
    kwargs = factor_arguments("trainable_cauchy", prior, FACTOR_NAMES)
    assert sorted(kwargs) == sorted(f"{s}_{k}" for s in FACTOR_NAMES
                                    for k in ("initializer", "regularizer"))
    posteriors = [kwargs[f"{s}_initializer"] for s in FACTOR_NAMES]
    priors = [kwargs[f"{s}_regularizer"] for s in FACTOR_NAMES]
    assert all(type(p) is TrainableRandomSignCauchy for p in posteriors)
    assert all(type(p) is Rank1CauchyKLDivergence and p.scale == 0.2 for p in priors)
    assert len({id(p) for p in posteriors + priors + [prior]}) == 2 * len(FACTOR_NAMES) + 1
    config = keras.regularizers.serialize(prior)
    from_config = factor_arguments(None, config)
    assert sorted(from_config) == ["alpha_regularizer", "gamma_regularizer"]
    assert from_config["alpha_regularizer"].scale == 0.2
    assert factor_arguments() == {}
    layer = bl.DenseRank1(3, ensemble_size=2, **factor_arguments("trainable_cauchy", config))
    assert type(layer.gamma_initializer) is TrainableRandomSignCauchy
    with pytest.raises(ValueError, match=r"^Unknown alpha_initializer\. .* Received: "
                                         r"alpha_initializer='trainable_cauchi'$"):
        factor_arguments("trainable_cauchi")
