"""Ensemble transitions (``model.estimator`` ``rank1`` / ``batch_ensemble``, issue #27 item 8):
every member is an explicit deterministic model that sees the whole batch, the planner scores
a candidate by mean + β·std across members, the ELBO puts the KL on the rank-1 factors only,
and the policy, value model and probes take the member layout."""

import contextlib

import numpy as np
import pytest
import tensorflow as tf
import yaml
from tf_agents.environments import tf_py_environment

from bayes_planet import envs
from bayes_planet import layers as bl
from bayes_planet.agent import config as config_lib
from bayes_planet.agent.policy import PlannerPolicy, candidate_scores, imagined_returns
from bayes_planet.agent.probes import encode_closed_loop, encode_open_loop
from bayes_planet.agent.rssm import RSSM
from bayes_planet.agent.value import ValueModel
from bayes_planet.agent.world_model import WorldModel
from bayes_planet.envs.tf_agents_env import TFAgentsEnv
from bayes_planet.layers import posterior_mean
from bayes_planet.layers.base import moments
from tests.agent.conftest import debug_config

TRANSITION = ("transition_in", "prior_hidden", "prior_stats")
SHARED = ("cell", "post_hidden", "post_stats")


def _config(estimator, *sets):
    return debug_config(f"model.estimator={estimator}", *sets)


def _member_as_dense(layer, member):
    """Member ``member`` of an ensemble dense layer as a Dense kernel and bias:
    ``diag(α_e) W diag(γ_e)`` and ``b_e``, the factors at their (posterior) means."""
    alpha, _ = moments(layer.alpha, tf.float32)
    gamma, _ = moments(layer.gamma, tf.float32)
    return alpha[member][:, None] * layer.kernel * gamma[member][None, :], layer.bias[member]


def _near_deterministic_latents(model):
    """Latent stddevs of ~1e-6 (min_stddev 1e-6 and softplus(-40)): the latent samples are
    their means to 1e-6, whichever rows of a batch the noise is drawn for."""
    stoch = model.rssm.stoch_size
    for layer in (model.rssm.post_stats, model.rssm.prior_stats):  # bias [2s] or [E, 2s]
        layer.kernel.assign(tf.concat([layer.kernel[:, :stoch],
                                       tf.zeros_like(layer.kernel[:, stoch:])], 1))
        layer.bias.assign(tf.concat([layer.bias[..., :stoch],
                                     tf.fill(layer.bias[..., stoch:].shape, -40.0)], -1))


def _members_as_models(ensemble, members):
    """One deterministic world model per member, with that member's transition weights and
    the ensemble's shared weights."""
    models = []
    for e in range(members):
        det = WorldModel(_config("deterministic", "model.min_stddev=1e-6"), (5,), 1)
        for name in ("encoder", "decoder", "reward_net"):
            for a, b in zip(getattr(ensemble, name).weights, getattr(det, name).weights,
                            strict=True):
                b.assign(a)
        for name in SHARED:
            for a, b in zip(getattr(ensemble.rssm, name).weights,
                            getattr(det.rssm, name).weights, strict=True):
                b.assign(a)
        for name in TRANSITION:
            kernel, bias = _member_as_dense(getattr(ensemble.rssm, name), e)
            getattr(det.rssm, name).kernel.assign(kernel)
            getattr(det.rssm, name).bias.assign(bias)
        models.append(det)
    return models


@pytest.mark.parametrize("estimator", ["batch_ensemble", "rank1"])
def test_each_member_filters_the_whole_batch_and_candidates_score_mean_plus_beta_std(estimator):
    """The members are explicit deterministic models (rank-1: the factors at their means,
    inside `posterior_mean`): filtering the tiled batch gives each member's own posterior, and
    a candidate's score is ``mean + β·std`` (population std) of the members' returns (plus
    ``planner.novelty`` times the members' latent disagreement), computed here by hand from
    the per-member models."""
    members, beta, novelty = 3, 0.7, 2.5
    model = WorldModel(_config(estimator, f"model.ensemble_size={members}",
                               "model.min_stddev=1e-6"), (5,), 1)
    _near_deterministic_latents(model)
    references = _members_as_models(model, members)
    rng = np.random.default_rng(0)
    obs = tf.constant(rng.normal(size=(2, 6, 5)), tf.float32)
    action = tf.constant(rng.uniform(-1, 1, size=(2, 6, 1)), tf.float32)
    candidates = tf.constant(rng.uniform(-1, 1, size=(2, 5, 4, 1)), tf.float32)
    seeds = tf.constant([[1, 2]])
    mode = posterior_mean(model) if estimator == "rank1" else contextlib.nullcontext()
    with mode:
        embed, tiled_action = model.rssm.tile_members((model.encoder(obs), action))
        post, _ = model.rssm.observe(embed, tiled_action, tf.constant([3, 4]))
        by_member = model.rssm.split_members(post)
        last = {k: v[:, -1] for k, v in post.items()}  # [E·B, size], member blocks
        returns = imagined_returns(model, last, candidates, seeds).numpy()
        scores = candidate_scores(model, last, candidates, seeds, beta).numpy()
        novel = candidate_scores(model, last, candidates, seeds, beta, novelty=novelty).numpy()
    expected, means = [], []
    for e, det in enumerate(references):
        ref, _ = det.rssm.observe(det.encoder(obs), action, tf.constant([3, 4]))
        for key in ("deter", "mean"):
            np.testing.assert_allclose(by_member[key][e], ref[key], atol=1e-4, err_msg=key)
        ref_last = {k: v[:, -1] for k, v in ref.items()}
        expected.append(imagined_returns(det, ref_last, candidates, seeds)[0].numpy())
        tiled = {k: tf.repeat(v[:, None], candidates.shape[1], axis=1)
                 for k, v in ref_last.items()}
        means.append(det.rssm.imagine(candidates, tiled, seeds[0])["mean"].numpy())
    expected = np.stack(expected)  # [E, B, N]
    assert returns.shape == (members, 2, 5)
    np.testing.assert_allclose(returns, expected, atol=1e-4)
    assert expected.std(0).min() > 1e-3  # The members disagree: the std term matters.
    np.testing.assert_allclose(scores, expected.mean(0) + beta * expected.std(0), atol=1e-4)
    # planner.novelty: + η Σ_t (std across members of the prior mean at t, averaged over dims).
    disagreement = np.stack(means).std(0).mean(-1).sum(-1)  # [B, N]
    assert disagreement.min() > 1e-3
    np.testing.assert_allclose(novel, scores + novelty * disagreement, atol=1e-4)


def test_k_weight_samples_per_member_give_k_times_e_returns():
    model = WorldModel(_config("rank1", "model.ensemble_size=2"), (5,), 1)
    state = model.rssm.tile_members(model.rssm.initial(3))
    candidates = tf.random.stateless_uniform([3, 4, 2, 1], [0, 1], -1.0, 1.0)
    returns = imagined_returns(model, state, candidates, tf.constant([[1, 2], [3, 4]]))
    assert returns.shape == (4, 3, 4)  # k·E + e
    assert not np.allclose(returns[0], returns[2])  # Two draws of member 0's factors.


@pytest.mark.parametrize("estimator", ["rank1", "batch_ensemble"])
def test_the_loss_is_the_tiled_elbo_with_the_kl_on_the_rank1_factors_only(estimator):
    """Every member sees the whole batch; the weight KL (rank-1: α and γ of each transition
    layer to N(1, 0.1²), in closed form here; BatchEnsemble: none) is divided by N as for
    mean-field transitions; the shared kernels carry no prior."""
    model = WorldModel(_config(estimator, "loss.free_nats=0.0"), (5,), 1)
    rng = np.random.default_rng(1)
    batch = {"obs": tf.constant(rng.normal(size=(2, 6, 5)), tf.float32),
             "action": tf.constant(rng.uniform(-1, 1, size=(2, 6, 1)), tf.float32),
             "reward": tf.constant(rng.normal(size=(2, 6)), tf.float32)}
    loss, m = model.loss(batch, tf.constant([0, 1]), 250)
    expected = m["obs_nll"] + 10.0 * m["reward_nll"] + m["state_kl"] + m["weight_kl"] / 250
    np.testing.assert_allclose(float(loss), float(expected), rtol=1e-5)
    layers = [getattr(model.rssm, name) for name in TRANSITION]
    assert all(layer.kernel_regularizer is None for layer in layers)
    if estimator == "batch_ensemble":
        assert not model.rssm.losses and float(m["weight_kl"]) == 0.0
        return
    kl = 0.0
    for layer in layers:
        for factor in (layer.alpha, layer.gamma):
            loc, scale = (t.numpy() for t in moments(factor, tf.float32))
            kl += np.sum(np.log(0.1 / scale) + (scale**2 + (loc - 1.0) ** 2) / (2 * 0.01) - 0.5)
    assert len(model.rssm.losses) == 2 * len(layers)
    np.testing.assert_allclose(float(m["weight_kl"]), kl, rtol=1e-4)


def test_a_rank1_world_model_learns_toy_sequences():
    """Learnable sines (as the mean-field test); 40 Adam steps at lr 3e-3 lower the data terms
    (reconstruction and reward NLL), not only the factors' KL."""
    model = WorldModel(_config("rank1", "train.learning_rate=0.003"), (5,), 1)
    t = np.arange(8)[None, :, None] + np.arange(4)[:, None, None]
    obs = np.sin(0.5 * t * np.arange(1, 6)).astype(np.float32)
    batch = {"obs": tf.constant(obs), "action": tf.zeros([4, 8, 1]),
             "reward": tf.constant(obs[..., 0])}
    steps = [model.train_step(batch, tf.constant([0, i]), 1000) for i in range(40)]
    loss = np.array([float(s["loss"]) for s in steps])
    data = np.array([float(s["obs_nll"] + 10.0 * s["reward_nll"]) for s in steps])
    assert np.all(np.isfinite(loss)) and all(float(s["finite"]) == 1.0 for s in steps)
    # Measured (means of the first / last 5 steps): loss 51.9 -> 47.4, data terms 17.9 -> 16.5.
    assert loss[-5:].mean() < loss[:5].mean() - 2.0, loss
    assert data[-5:].mean() < data[:5].mean() - 0.7, data


def test_ensemble_rssm_errors_are_one_line():
    model = config_lib.load(["debug"]).model.to_dict()
    with pytest.raises(ValueError, match=r"^Expected an estimator with a GRU cell, one of "
                                         r"\['reparameterization', 'flipout', 'rank1'\], with "
                                         r"bayesian_gru=True\. Received: "
                                         r"estimator='batch_ensemble'$"):
        RSSM(dict(model, estimator="batch_ensemble", bayesian_gru=True))
    rssm = RSSM(dict(model, estimator="rank1", ensemble_size=3))
    with pytest.raises(ValueError, match=r"^Expected a batch size divisible by ensemble_size\. "
                                         r"Received: batch size 4, ensemble_size=3$"):
        rssm.observe(tf.zeros([4, 2, 6]), tf.zeros([4, 2, 1]), tf.constant([0, 0]))


@pytest.mark.parametrize("sets, message", [
    (["model.ensemble_size=0"], "Expected a positive integer. Received: model.ensemble_size=0"),
    (["model.ensemble_size=-2"], "Expected a positive integer. Received: model.ensemble_size=-2"),
    (["model.estimator=batch_ensemble", "model.bayesian_gru=true"],
     "model.bayesian_gru=True has no batch_ensemble cell; use model.estimator in "
     "['reparameterization', 'flipout', 'rank1']. Received: model.estimator='batch_ensemble'"),
    (["model.factor_posterior=zeros"], "Expected a trainable distribution initializer, e.g. "
     "'trainable_rank1_normal'. Received: model.factor_posterior='zeros'"),
    (["model.factor_prior=l2"], "Expected a KL regularizer, e.g. 'rank1_normal_kl_divergence'. "
     "Received: model.factor_prior='l2'"),
    (["model.factor_posterior=trainable_cauchy"], "model.factor_posterior: a Cauchy posterior "
     "has an infinite KL divergence to a normal prior; use 'rank1_cauchy_kl_divergence'. "
     "Received: model.factor_posterior='trainable_cauchy', "
     "model.factor_prior='rank1_normal_kl_divergence'"),
])
def test_bad_ensemble_and_factor_settings_are_one_line_config_errors(sets, message):
    with pytest.raises(config_lib.ConfigError) as info:
        config_lib.validate(config_lib.load(["debug"], sets))
    assert str(info.value) == message


def test_a_config_without_ensemble_size_reads_with_the_default():
    data = config_lib.load(["debug"]).to_dict()
    del data["model"]["ensemble_size"]
    read = config_lib.parse(yaml.safe_dump(data))
    assert read.model.ensemble_size == config_lib.load().model.ensemble_size


def test_a_config_without_factor_settings_reads_with_the_old_layer_default():
    """Runs started before ``model.factor_posterior``/``factor_prior`` existed took the rank-1
    layers' default of that time (means near 1, prior N(1, 0.1²)): read back with it, not
    with whatever the layers' default is today."""
    data = config_lib.load(["debug"]).to_dict()
    del data["model"]["factor_posterior"], data["model"]["factor_prior"]
    read = config_lib.parse(yaml.safe_dump(data))
    assert (read.model.factor_posterior, read.model.factor_prior) == (
        "trainable_rank1_normal", "rank1_normal_kl_divergence")


@pytest.mark.parametrize("bayesian_gru", [False, True])
def test_the_factor_settings_reach_every_rank1_layer_of_the_transition(bayesian_gru):
    """``model.factor_posterior``/``factor_prior`` set α, γ (and the GRU cell's recurrent
    factors) of every rank-1 transition layer; the agent's default is the setting it was
    measured with, not the layers' own default."""
    model = config_lib.load(["debug"]).model.to_dict()
    default = RSSM(dict(model, estimator="rank1", bayesian_gru=bayesian_gru))
    signs = RSSM(dict(model, estimator="rank1", bayesian_gru=bayesian_gru,
                      factor_posterior="trainable_random_sign_normal",
                      factor_prior="rank1_sign_mixture_kl_divergence"))
    names = ["alpha", "gamma"] + (["recurrent_alpha", "recurrent_gamma"] if bayesian_gru else [])
    for rssm, posterior, prior in ((default, bl.TrainableRank1Normal,
                                    bl.Rank1NormalKLDivergence),
                                   (signs, bl.TrainableRandomSignNormal,
                                    bl.Rank1SignMixtureKLDivergence)):
        layers = [rssm.transition_in, rssm.prior_hidden, rssm.prior_stats] + (
            [rssm.cell] if bayesian_gru else [])
        for layer in layers:
            for name in (names if layer is rssm.cell else ["alpha", "gamma"]):
                assert type(getattr(layer, f"{name}_initializer")) is posterior, (layer, name)
                assert type(getattr(layer, f"{name}_regularizer")) is prior, (layer, name)


def test_an_unknown_factor_posterior_names_the_key():
    with pytest.raises(config_lib.ConfigError, match=r"^Unknown model\.factor_posterior\. .*"
                                                     r"Received: model\.factor_posterior='nope'$"):
        config_lib.validate(config_lib.load(["debug"], ["model.factor_posterior=nope"]))


@pytest.fixture(scope="module")
def cartpole():
    env = envs.make("cartpole-swingup", obs_type="state", seed=0, episode_length=80)
    yield env, tf_py_environment.TFPyEnvironment(TFAgentsEnv(env))
    env.close()


@pytest.mark.parametrize("estimator", ["rank1", "batch_ensemble"])
def test_the_policy_keeps_a_belief_per_member_and_plans_with_value_proposals(cartpole,
                                                                              estimator):
    env, tf_env = cartpole
    config = config_lib.load(["debug", "value"], [f"model.estimator={estimator}",
                                                  "model.ensemble_size=3",
                                                  "planner.weight_samples=2",
                                                  "planner.beta=0.5"])
    model = WorldModel(config, env.observation_spec()["state"].shape, 1)
    spec = tf_env.action_spec()
    value = ValueModel(config, model, spec.minimum, spec.maximum)
    policy = PlannerPolicy(tf_env.time_step_spec(), spec, model, config.planner,
                           value_model=value, proposals=5)  # 2 per member, 5 kept
    time_step, state = tf_env.reset(), policy.get_initial_state(1)
    for i in range(2):
        step = policy.action(time_step, state, seed=tf.constant([1, i]))
        again = policy.action(time_step, state, seed=tf.constant([1, i]))
        np.testing.assert_array_equal(step.action.numpy(), again.action.numpy())
        assert np.all(np.abs(step.action.numpy()) <= 1.0)
        state, time_step = step.state, tf_env.step(step.action)
    assert state["deter"].shape == (1, 3, config.model.deter)
    assert state["action"].shape == (1, 1)
    deter = state["deter"].numpy()[0]
    assert not np.allclose(deter[0], deter[1])  # Each member filters with its own weights.


def test_probes_read_the_member_average_latent():
    model = WorldModel(_config("batch_ensemble", "model.ensemble_size=2"), (5,), 1)
    rng = np.random.default_rng(0)
    episode = {"obs": rng.normal(size=(12, 5)).astype(np.float32),
               "action": rng.uniform(-1, 1, size=(12, 1)).astype(np.float32)}
    closed = encode_closed_loop(model, episode, seed=(3, 4))
    assert closed.shape == (12, model.rssm.stoch_size + model.rssm.deter_size)
    # The two members' posterior means, averaged (BatchEnsemble: no weight noise).
    obs = model.observation(tf.constant(episode["obs"][None]))
    embed, action = model.rssm.tile_members((model.encoder(obs),
                                             tf.constant(episode["action"][None])))
    post, _ = model.rssm.observe(embed, action, tf.constant([3, 4]))
    feats = tf.concat([post["mean"], post["deter"]], -1).numpy()  # [2, 12, F]
    np.testing.assert_allclose(closed, feats.mean(0), atol=1e-6)
    assert not np.allclose(feats[0], feats[1])
    opened, index = encode_open_loop(model, episode, 5, [1, 4])
    assert opened[1].shape == (7, closed.shape[1]) and index[4].tolist() == list(range(8, 12))
