"""Value-aware planning (issue #26): λ-returns, the critic's fixed point, the planning
objective with a terminal value, planner proposals, the config and kill-safe runs."""

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.agent import config as config_lib
from bayes_planet.agent.value import lambda_returns, sample_objective
from bayes_planet.planners import cross_entropy_method
from tests.agent.conftest import checkpoint_tensors, latest_checkpoint, metrics_rows, train_debug


def _reference_lambda_returns(rewards, values, gamma, lam):
    """The recursive definition, one time step at a time in numpy."""
    horizon = len(rewards)
    out = np.zeros_like(rewards)
    following = values[-1]
    for t in reversed(range(horizon)):
        following = rewards[t] + gamma * ((1 - lam) * values[t] + lam * following)
        out[t] = following
    return out


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_lambda_returns_match_the_recursion(lam):
    rng = np.random.default_rng(0)
    rewards, values = rng.normal(size=(7, 3)), rng.normal(size=(7, 3))
    got = lambda_returns(tf.constant(rewards), tf.constant(values), 0.9, lam).numpy()
    np.testing.assert_allclose(got, _reference_lambda_returns(rewards, values, 0.9, lam),
                               rtol=1e-12)


def test_lambda_returns_limits_are_td_and_monte_carlo():
    rng = np.random.default_rng(1)
    rewards, values = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    gamma = 0.8
    td = lambda_returns(tf.constant(rewards), tf.constant(values), gamma, 0.0).numpy()
    np.testing.assert_allclose(td, rewards + gamma * values, rtol=1e-12)
    mc = lambda_returns(tf.constant(rewards), tf.constant(values), gamma, 1.0).numpy()
    discounts = gamma ** np.arange(5)
    expected0 = (discounts[:, None] * rewards).sum(0) + gamma ** 5 * values[-1]
    np.testing.assert_allclose(mc[0], expected0, rtol=1e-12)


# -- planner proposals -----------------------------------------------------------------------
def test_cem_keeps_a_proposal_that_sampling_cannot_find():
    """The optimum sits in a corner the sampler almost never reaches in one iteration; handed
    in as a proposal, it is the elite and the plan."""
    target = np.full((4, 2), 0.97, np.float32)

    def objective(actions):
        return -tf.reduce_sum(tf.square(actions - target), [-2, -1]) * 100.0

    proposals = tf.constant(target[None, None])  # [B=1, M=1, H, A]
    plan = cross_entropy_method(objective, 4, 2, -1.0, 1.0, num_candidates=8, top_k=1,
                                iterations=1, seed=3, batch_shape=(1,), proposals=proposals)
    np.testing.assert_allclose(plan.numpy()[0], target, atol=1e-6)
    without = cross_entropy_method(objective, 4, 2, -1.0, 1.0, num_candidates=8, top_k=1,
                                   iterations=1, seed=3, batch_shape=(1,))
    assert np.abs(without.numpy()[0] - target).max() > 0.1


def test_proposals_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match=r"Expected proposals of shape \[1, M, 4, 2\]"):
        cross_entropy_method(lambda a: tf.reduce_sum(a, [-2, -1]), 4, 2, -1.0, 1.0,
                             num_candidates=8, top_k=2, iterations=1, seed=0, batch_shape=(1,),
                             proposals=tf.zeros([1, 3, 5, 2]))


# -- the value model on a small world model ----------------------------------------------------
def _models(sets=()):
    from bayes_planet.agent.value import ValueModel
    from bayes_planet.agent.world_model import WorldModel

    config = config_lib.load(["debug", "value"], list(sets))
    tf.keras.utils.set_random_seed(0)
    world_model = WorldModel(config, (5,), 1)
    value_model = ValueModel(config, world_model, np.array([-1.0]), np.array([1.0]))
    return config, world_model, value_model


def _constant_reward(world_model, reward):
    """Makes the reward head predict ``reward`` everywhere (last layer: zero kernel, bias)."""
    out = world_model.reward_net.out
    out.kernel.assign(tf.zeros_like(out.kernel))
    out.bias.assign(tf.fill(out.bias.shape, reward))


def _posterior(world_model, batch, seed=(1, 2)):
    post, _ = world_model.rssm.observe(world_model.encoder(batch["obs"]), batch["action"],
                                       tf.constant(seed))
    return post


def _batch(rng, batch=4, length=8):
    return {"obs": tf.constant(rng.normal(size=(batch, length, 5)), tf.float32),
            "action": tf.constant(rng.uniform(-1, 1, size=(batch, length, 1)), tf.float32),
            "reward": tf.constant(rng.uniform(size=(batch, length)), tf.float32)}


@pytest.mark.slow
def test_critic_converges_to_the_closed_form_value_of_a_constant_reward():
    """With r ≡ c the value of every state is c / (1 − γ); γ = 0.5, c = 0.3 → 0.6. Target
    rate 1 (the target is the critic) and λ = 0 make it plain TD; 400 updates at lr 0.01."""
    _, world_model, value_model = _models(
        ["value.discount=0.5", "value.td_lambda=0.0", "value.target_rate=1.0",
         "value.critic_learning_rate=0.01", "value.imagine_horizon=3"])
    _constant_reward(world_model, 0.3)
    rng = np.random.default_rng(0)
    batch = _batch(rng)
    posterior = _posterior(world_model, batch)
    for u in range(400):
        metrics = value_model.train_step(posterior, tf.constant([u, 7]))
    assert metrics["value_finite"] == 1.0
    states, _, _ = value_model.rollout(
        {k: v[:, 0] for k, v in world_model.rssm.observe(
            world_model.encoder(batch["obs"]), batch["action"], tf.constant([1, 2]))[0].items()},
        3, tf.constant([5, 5]))
    values = value_model.value(states).numpy()  # Imagined states, not the training starts.
    assert abs(values.mean() - 0.6) < 0.012, values  # 2 % on average,
    np.testing.assert_allclose(values, 0.6, atol=0.06)  # 10 % for every state


def test_value_step_is_reproducible_and_trains_only_the_value_model():
    _, world_model, value_model = _models()
    before = [v.numpy() for v in world_model.trainable_variables]
    rng = np.random.default_rng(0)
    batch = _batch(rng)
    first = value_model.train_step(_posterior(world_model, batch), tf.constant([1, 2]))
    after_one = [v.numpy() for v in value_model.variables]
    assert not {id(v) for v in value_model.variables} & {id(v) for v in world_model.variables}
    for b, a in zip(before, world_model.trainable_variables, strict=True):
        np.testing.assert_array_equal(b, a.numpy())
    _, world_model2, again = _models()
    second = again.train_step(_posterior(world_model2, batch), tf.constant([1, 2]))
    for key in first:
        np.testing.assert_array_equal(first[key].numpy(), second[key].numpy(), err_msg=key)
    for a, b in zip(after_one, again.variables, strict=True):
        np.testing.assert_array_equal(a, b.numpy())


@pytest.mark.slow
def test_actor_improves_the_imagined_return():
    """Dreamer's analytic policy gradient: after training, the policy's imagined rollouts
    (fresh seeds, not those of training) earn more predicted reward than the initial policy's,
    by more than 5 standard errors over 16 rollout seeds. The random reward head is scaled ×20
    so that rewards depend on the actions."""
    _, world_model, value_model = _models(["value.actor_learning_rate=0.003",
                                           "value.imagine_horizon=5"])
    out = world_model.reward_net.out
    out.kernel.assign(out.kernel * 20.0)
    batch = _batch(np.random.default_rng(3))
    post, _ = world_model.rssm.observe(world_model.encoder(batch["obs"]), batch["action"],
                                       tf.constant([1, 1]))
    start = {k: v[:, 0] for k, v in post.items()}

    def scores():
        return np.array([float(tf.reduce_mean(world_model.predict_reward(
            value_model.rollout(start, 5, tf.constant([1000 + i, 9]))[0]))) for i in range(16)])

    initial = scores()
    for u in range(150):
        value_model.train_step(post, tf.constant([u, 3]))
    trained = scores()
    gain = trained - initial  # Paired: the same rollout seeds.
    assert gain.mean() > 5 * gain.std(ddof=1) / 4, (initial.mean(), trained.mean())


def test_world_model_step_returns_its_posterior_without_changing_the_step():
    """``return_posterior=True``: the same update and metrics, plus the batch's posterior as the
    loss computed it (the same seeds give the same states through `rssm.observe`)."""
    config, world_model, _ = _models()
    batch = _batch(np.random.default_rng(0))
    seed = tf.constant([4, 5])
    metrics, posterior = world_model.train_step(batch, seed, 100, return_posterior=True)
    after = [v.numpy() for v in world_model.trainable_variables]
    tf.keras.utils.set_random_seed(0)
    from bayes_planet.agent.world_model import WorldModel

    twin = WorldModel(config, (5,), 1)
    expected_post, _ = twin.rssm.observe(
        twin.encoder(twin.observation(batch["obs"])), batch["action"],
        tf.unstack(tf.random.experimental.stateless_split(seed, 2))[1])
    plain = twin.train_step(batch, seed, 100)
    for key in plain:
        np.testing.assert_allclose(metrics[key].numpy(), plain[key].numpy(), rtol=1e-6)
    for a, b in zip(after, twin.trainable_variables, strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-7)
    for key in expected_post:
        np.testing.assert_allclose(posterior[key].numpy(), expected_post[key].numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_imagined_returns_add_the_discounted_terminal_value():
    from bayes_planet.agent.policy import imagined_returns

    _, world_model, value_model = _models(["value.discount=0.9"])
    rng = np.random.default_rng(0)
    state = {k: tf.constant(rng.normal(size=v.shape), tf.float32)
             for k, v in world_model.rssm.initial(2).items()}
    actions = tf.constant(rng.uniform(-1, 1, size=(2, 3, 4, 1)), tf.float32)
    seeds = tf.constant([[1, 2]])
    got = imagined_returns(world_model, state, actions, seeds, value_model).numpy()
    tiled = {k: tf.repeat(v[:, None], 3, axis=1) for k, v in state.items()}
    prior = world_model.rssm.imagine(actions, tiled, seeds[0])
    rewards = world_model.predict_reward(prior).numpy()
    last = value_model.value({k: v[:, :, -1] for k, v in prior.items()}).numpy()
    expected = (rewards * 0.9 ** np.arange(4)).sum(-1) + 0.9 ** 4 * last
    np.testing.assert_allclose(got[0], expected, rtol=1e-5)
    plain = imagined_returns(world_model, state, actions, seeds).numpy()
    np.testing.assert_allclose(plain[0], rewards.sum(-1), rtol=1e-5)


def test_planner_latent_shares_or_removes_the_candidates_latent_noise():
    """``planner.latent``: ``sample`` scores identical candidates differently (each its own
    latent draws), ``shared`` alike (one draw for all, another per seed), ``mean`` alike and
    whatever the seed (a deterministic transition: no weight draws either), equal to the
    rollout of the prior's means."""
    from bayes_planet.agent.policy import candidate_scores

    _, world_model, value_model = _models(["model.estimator=deterministic"])
    rng = np.random.default_rng(0)
    state = {k: tf.constant(rng.normal(size=v.shape), tf.float32)
             for k, v in world_model.rssm.initial(2).items()}
    one = rng.uniform(-1, 1, size=(2, 1, 4, 1))
    actions = tf.constant(np.concatenate([one, one, one, rng.uniform(-1, 1, (2, 1, 4, 1))], 1),
                          tf.float32)  # [B=2, N=4]: three identical candidates and another

    def scores(latent, seed):
        return candidate_scores(world_model, state, actions, tf.constant([seed]), 0.0,
                                value_model, latent=latent).numpy()

    sample = scores("sample", [1, 2])
    assert not np.allclose(sample[:, 0], sample[:, 1])
    shared = scores("shared", [1, 2])
    np.testing.assert_array_equal(shared[:, 1:3], shared[:, :2])
    assert not np.allclose(shared, scores("shared", [3, 4]))
    mean = scores("mean", [1, 2])
    np.testing.assert_array_equal(mean[:, 1:3], mean[:, :2])
    np.testing.assert_array_equal(mean, scores("mean", [3, 4]))
    tiled = {k: tf.repeat(v[:, None], 4, axis=1) for k, v in state.items()}
    prior = world_model.rssm.imagine(actions, tiled, tf.constant([1, 2]),
                                     noise=tf.zeros([2, 4, 4, world_model.rssm.stoch_size]))
    gamma = value_model.discount
    expected = ((world_model.predict_reward(prior).numpy() * gamma ** np.arange(4)).sum(-1)
                + gamma ** 4 * value_model.value({k: v[:, :, -1] for k, v in prior.items()}))
    np.testing.assert_allclose(mean, expected, rtol=1e-5)
    with pytest.raises(ValueError, match=r"^Expected planner.latent in \('sample', 'shared', "
                                         r"'mean'\)\. Received: 'noisy'$"):
        scores("noisy", [1, 2])


def test_value_latent_mean_imagines_the_priors_means():
    """``value.latent: mean``: every imagined state is the prior's mean (``stoch == mean``),
    and given the actions the rollout is the deterministic `RSSM.imagine` of the means;
    ``sample`` draws (Dreamer)."""
    rng = np.random.default_rng(0)
    for latent in ("sample", "mean"):
        _, world_model, value_model = _models(["model.estimator=deterministic",
                                               f"value.latent={latent}"])
        state = {k: tf.constant(rng.normal(size=v.shape), tf.float32)
                 for k, v in world_model.rssm.initial(3).items()}
        states, actions, _ = value_model.rollout(state, 4, tf.constant([1, 2]))
        same = np.allclose(states["stoch"].numpy(), states["mean"].numpy())
        assert same == (latent == "mean")
        if latent == "mean":
            replay = world_model.rssm.imagine(tf.transpose(actions, [1, 0, 2]), state,
                                              tf.constant([5, 5]),
                                              noise=tf.zeros([world_model.rssm.stoch_size]))
            np.testing.assert_allclose(tf.transpose(states["deter"], [1, 0, 2]).numpy(),
                                       replay["deter"].numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected one of \['sample', 'mean'\]\. Received: "
                             r"value.latent='shared'$"):
        config_lib.validate(config_lib.load(["debug"], ["value.latent=shared"]))
    data = config_lib.load(["debug", "value"]).to_dict()
    del data["value"]["latent"]
    assert config_lib.upgrade(data)["value"]["latent"] == "sample"


def test_planner_latent_is_checked_and_older_configs_sample():
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected one of \['sample', 'shared', 'mean'\]\. Received: "
                             r"planner.latent='means'$"):
        config_lib.validate(config_lib.load(["debug"], ["planner.latent=means"]))
    data = config_lib.load(["debug"]).to_dict()
    del data["planner"]["latent"]
    assert config_lib.upgrade(data)["planner"]["latent"] == "sample"
    assert config_lib.load().planner.latent == "sample"  # PlaNet's default


def test_novelty_adds_the_discounted_disagreement_of_the_weight_samples():
    """planner.novelty with a mean-field transition: K = 2 weight samples; the bonus is
    Σ_t γ^(t-1) (std over the samples of the prior mean at t, averaged over its dims)."""
    from bayes_planet.agent.policy import candidate_scores

    _, world_model, value_model = _models(["value.discount=0.9"])
    rng = np.random.default_rng(1)
    state = {k: tf.constant(rng.normal(size=v.shape), tf.float32)
             for k, v in world_model.rssm.initial(2).items()}
    actions = tf.constant(rng.uniform(-1, 1, size=(2, 3, 4, 1)), tf.float32)
    seeds = tf.constant([[1, 2], [5, 6]])
    plain = candidate_scores(world_model, state, actions, seeds, 0.5, value_model).numpy()
    novel = candidate_scores(world_model, state, actions, seeds, 0.5, value_model,
                             novelty=3.0).numpy()
    tiled = {k: tf.repeat(v[:, None], 3, axis=1) for k, v in state.items()}
    means = np.stack([world_model.rssm.imagine(actions, tiled, seed)["mean"].numpy()
                      for seed in seeds])  # [K, B, N, H, S]
    disagreement = (means.std(0).mean(-1) * 0.9 ** np.arange(4)).sum(-1)
    assert disagreement.min() > 1e-4  # Two weight draws: the rollouts differ.
    np.testing.assert_allclose(novel - plain, 3.0 * disagreement, rtol=1e-4, atol=1e-6)


def test_proposals_are_policy_rollouts_in_the_box():
    _, world_model, value_model = _models()
    state = world_model.rssm.initial(2)
    proposals = value_model.proposals(state, 3, 4, tf.constant([0, 1])).numpy()
    assert proposals.shape == (2, 3, 4, 1)
    assert np.all(np.abs(proposals) <= 1.0)
    assert np.unique(proposals.round(6)).size > 10  # Sampled, not one repeated action.


# -- config ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sets, message", [
    (["value.discount=0"], "value.discount=0"),
    (["value.discount=1.5"], "value.discount=1.5"),
    (["value.td_lambda=-0.1"], "value.td_lambda=-0.1"),
    (["value.target_rate=0"], "value.target_rate=0"),
    (["value.imagine_horizon=0"], "value.imagine_horizon=0"),
    (["value.policy_proposals=-1"], "value.policy_proposals=-1"),
    (["value.actor_init_std=0.05"], "value.actor_init_std=0.05"),
    (["value.enabled=true", "strategy=mirrored"], "strategy='mirrored'"),
    (["planner.novelty=-1"], "Expected a non-negative number. Received: planner.novelty=-1"),
    (["planner.novelty=1"], r"here model.estimator='reparameterization', "
                            r"planner.weight_samples=1\). Received: planner.novelty=1"),
    (["planner.novelty=1", "model.estimator=deterministic", "planner.weight_samples=4"],
     "here model.estimator='deterministic'"),
])
def test_bad_value_settings_are_one_line_errors(sets, message):
    config = config_lib.load(["debug"], sets)
    with pytest.raises(config_lib.ConfigError, match=message) as info:
        config_lib.validate(config)
    assert "\n" not in str(info.value)


def test_a_config_without_a_value_section_is_planet():
    data = config_lib.load(["debug", "value"]).to_dict()
    del data["value"]
    upgraded = config_lib.upgrade(data)
    assert upgraded["value"]["enabled"] is False
    assert upgraded["value"] == config_lib.load(["planet"]).to_dict()["value"]


# -- runs: reproducible and kill-safe with the value model ------------------------------------
@pytest.mark.slow
def test_a_value_run_killed_mid_training_resumes_exactly(tmp_path):
    sets = ("value.enabled=true", "planner.horizon=2")
    reference = train_debug(tmp_path / "reference", *sets)
    assert reference.returncode == 0, reference.stderr[-3000:]
    killed = train_debug(tmp_path / "run", *sets, fault="train:2")
    assert killed.returncode == -9
    rerun = train_debug(tmp_path / "run", *sets)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    rows = metrics_rows(tmp_path / "reference")
    assert "critic_loss" in rows[-1] and "eval_return" in rows[-1]
    assert metrics_rows(tmp_path / "run") == rows
    a = checkpoint_tensors(latest_checkpoint(tmp_path / "reference"))
    b = checkpoint_tensors(latest_checkpoint(tmp_path / "run"))
    assert any("value" in k for k in a)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


# -- the critic's replay target (value.replay_weight) -----------------------------------------
@pytest.mark.parametrize("estimator", ["deterministic", "rank1"])
def test_replay_returns_are_the_lambda_returns_of_the_real_rewards(estimator):
    """Targets of s_0..s_{T-2}: the recursion on rewards r_1..r_{T-1} (arriving at s_1..) and
    V'(s_1..s_{T-1}); an ensemble's posterior holds the batch once per member."""
    config, world_model, value_model = _models([f"model.estimator={estimator}",
                                                "value.replay_weight=1.0"])
    batch = _batch(np.random.default_rng(3))
    embed, action = world_model.rssm.tile_members((world_model.encoder(batch["obs"]),
                                                   batch["action"]))
    post, _ = world_model.rssm.observe(embed, action, tf.constant([1, 2]))
    members = world_model.rssm.ensemble_size
    got = value_model.replay_returns(post, batch["reward"]).numpy()
    assert got.shape == (members * 4, 7)
    values = value_model.value({k: v[:, 1:] for k, v in post.items()}, target=True).numpy()
    rewards = np.tile(batch["reward"].numpy(), (members, 1))
    for row in range(members * 4):
        want = _reference_lambda_returns(rewards[row, 1:], values[row], config.value.discount,
                                         config.value.td_lambda)
        np.testing.assert_allclose(got[row], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loss", ["squared", "self_imitation"])
def test_replay_weight_adds_the_replay_error_to_the_critic_loss(loss):
    """Same models, seeds and batch: critic loss(w) − critic loss(0) = w · ½ mean(e²) over the
    replayed states, e = R_t − V(s_t) (``squared``) or max(R_t − V(s_t), 0)
    (``self_imitation``); the loss is computed before the update."""
    batch = _batch(np.random.default_rng(4))
    batch["reward"] -= 0.5  # Returns of both signs around the untrained critic's V ≈ 0.
    losses = {}
    for w in (0.0, 2.5):
        _, world_model, value_model = _models([f"value.replay_weight={w}",
                                               f"value.replay_loss={loss}"])
        post = _posterior(world_model, batch)
        if w:
            targets = value_model.replay_returns(post, batch["reward"])
            inputs = {k: v[:, :-1] for k, v in post.items()}
            error = targets.numpy() - value_model.value(inputs).numpy()
            if loss == "self_imitation":
                # Both signs occur, so the one-sided loss differs from the squared one.
                assert (error > 0).any() and (error < 0).any()
                error = np.maximum(error, 0.0)
            replay = 0.5 * np.mean(error ** 2)
        losses[w] = value_model.train_step(post, tf.constant([1, 2]), batch["reward"])
    assert "replay_value" not in losses[0.0] and "replay_value" in losses[2.5]
    np.testing.assert_allclose(losses[2.5]["critic_loss"] - losses[0.0]["critic_loss"],
                               2.5 * replay, rtol=1e-4)
    np.testing.assert_allclose(losses[2.5]["replay_value"], targets.numpy().mean(), rtol=1e-5)
    _, world_model, value_model = _models(["value.replay_weight=1.0"])
    with pytest.raises(ValueError, match="reward=None"):
        value_model.train_step(_posterior(world_model, batch), tf.constant([1, 2]))


def test_replay_weight_is_checked_and_older_configs_get_zero():
    with pytest.raises(config_lib.ConfigError, match=r"value.replay_weight=-1"):
        config_lib.validate(config_lib.load(["debug"], ["value.replay_weight=-1"]))
    data = config_lib.load(["debug", "value"]).to_dict()
    del data["value"]["replay_weight"]
    assert config_lib.upgrade(data)["value"]["replay_weight"] == 0.0
    with pytest.raises(config_lib.ConfigError, match=r"value.replay_loss='huber'"):
        config_lib.validate(config_lib.load(["debug"], ["value.replay_loss=huber"]))
    del data["value"]["replay_loss"]
    assert config_lib.upgrade(data)["value"]["replay_loss"] == "squared"


# -- which start states an ensemble's members imagine from (value.ensemble_starts) -------------
def test_split_ensemble_starts_give_each_member_its_own_offsets():
    """``split``: member e keeps steps e·s, e·s + E·s, ... of its own block (as many per
    member), so the E members start as many rollouts as one model; ``all``: every member
    every s-th step; a model that is not an ensemble is unaffected."""
    batch = _batch(np.random.default_rng(5), batch=3, length=8)
    starts = {}
    for mode in ("all", "split"):
        _, world_model, value_model = _models(["model.estimator=rank1", "model.ensemble_size=2",
                                               f"value.ensemble_starts={mode}"])
        embed, action = world_model.rssm.tile_members((world_model.encoder(batch["obs"]),
                                                       batch["action"]))
        post, _ = world_model.rssm.observe(embed, action, tf.constant([1, 2]))
        starts[mode] = {k: v.numpy() for k, v in value_model.start_states(post).items()}
        deter = post["deter"].numpy()  # [E·B, T, size], member blocks of B = 3 rows
    every = 2  # the value preset's start_every
    np.testing.assert_array_equal(starts["all"]["deter"],
                                  deter[:, ::every].reshape(-1, deter.shape[-1]))
    want = np.concatenate([deter[e * 3:(e + 1) * 3, e * every::2 * every].reshape(
        -1, deter.shape[-1]) for e in range(2)])  # offsets 0, 4 and 2, 6: two each
    np.testing.assert_array_equal(starts["split"]["deter"], want)
    assert len(starts["split"]["deter"]) == 3 * 8 // every == len(starts["all"]["deter"]) // 2
    assert set(starts["split"]) == {"mean", "std", "stoch", "deter"}
    _, world_model, value_model = _models(["value.ensemble_starts=split"])  # not an ensemble
    post = _posterior(world_model, batch)
    np.testing.assert_array_equal(value_model.start_states(post)["stoch"].numpy(),
                                  post["stoch"].numpy()[:, ::every].reshape(3 * 4, -1))
    _, world_model, value_model = _models(["model.estimator=rank1", "model.ensemble_size=3",
                                           "value.ensemble_starts=split"])
    embed, action = world_model.rssm.tile_members((world_model.encoder(batch["obs"]),
                                                   batch["action"]))
    post, _ = world_model.rssm.observe(embed, action, tf.constant([1, 2]))
    metrics = value_model.train_step(post, tf.constant([3, 4]))  # offsets 0/2/4 stride 6: 1 each
    assert len(value_model.start_states(post)["deter"]) == 3 * 3
    assert np.isfinite(metrics["critic_loss"].numpy())


def test_ensemble_starts_is_checked_and_older_configs_get_all():
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected one of \['all', 'split'\]\. Received: "
                             r"value.ensemble_starts='some'$"):
        config_lib.validate(config_lib.load(["debug"], ["value.ensemble_starts=some"]))
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected more than \(model.ensemble_size - 1\) \* "
                             r"value.start_every = 6 .*Received: train.chunk_length=6$"):
        config_lib.validate(config_lib.load(["debug"], [
            "model.estimator=rank1", "model.ensemble_size=4", "value.start_every=2",
            "value.ensemble_starts=split", "train.chunk_length=6"]))
    config_lib.validate(config_lib.load(["debug"], [  # not an ensemble: any chunk will do
        "value.start_every=2", "value.ensemble_starts=split", "train.chunk_length=6"]))
    data = config_lib.load(["debug", "value"]).to_dict()
    del data["value"]["ensemble_starts"]
    assert config_lib.upgrade(data)["value"]["ensemble_starts"] == "all"


# -- optimism beyond the horizon: the transition's disagreement as a reward (value.novelty) ----
def _rollout_weight_seed(seed):
    """The weight sample `ValueModel.rollout` draws from its ``seed``."""
    return tf.random.experimental.stateless_split(tf.constant(seed), 2)[0]


@pytest.mark.parametrize("estimator", ["reparameterization", "batch_ensemble", "rank1"])
def test_disagreement_is_the_one_step_std_of_two_weight_samples(estimator):
    """d_t = mean over dims of |m_a - m_b| / 2 (the std of two values), m the prior's mean of
    s_{t+1} given (s_t, a_t) under the rollout's weight sample and a second one. One weight
    sample of a mean-field layer is one set of weights whatever the batch: with the rollout's
    own seed d is 0, and for t = 0 it equals one `img_step` from the start. Without weight
    noise (batch_ensemble) d is 0 for any seed, which needs every row evaluated by its own
    member (the member blocks of `tile_members` kept in place). A rank-1 layer draws its
    factors per row, so its second sample is a fresh draw for every row: d > 0."""
    _, world_model, value_model = _models([f"model.estimator={estimator}",
                                           "model.ensemble_size=2"])
    rssm = world_model.rssm
    rng = np.random.default_rng(2)
    start = {k: tf.constant(rng.normal(size=v.shape), tf.float32)
             for k, v in rssm.initial(3 * rssm.ensemble_size).items()}
    start["std"] = tf.abs(start["std"])
    seed = (4, 5)
    states, actions, _ = value_model.rollout(start, 4, tf.constant(seed))
    other = tf.constant([9, 9])
    d = value_model.disagreement(start, states, actions, other).numpy()
    assert d.shape == (4, 3 * rssm.ensemble_size)
    if estimator == "batch_ensemble":
        np.testing.assert_allclose(d, 0.0, atol=1e-6)
        return
    assert d.min() > 1e-5  # Two weight draws: the means differ at every step.
    if estimator == "rank1":
        return
    own = value_model.disagreement(start, states, actions, _rollout_weight_seed(seed))
    np.testing.assert_allclose(own.numpy(), 0.0, atol=1e-6)
    from bayes_planet.layers import fixed_noise
    with fixed_noise(rssm, other):
        first = rssm.img_step(start, actions[0], other, noise=tf.zeros_like(start["stoch"]))
    want = np.abs(states["mean"][0].numpy() - first["mean"].numpy()).mean(-1) / 2
    np.testing.assert_allclose(d[0], want, rtol=1e-5, atol=1e-7)


def test_value_novelty_adds_the_lambda_returns_of_the_disagreement():
    """λ-returns are linear in the rewards, so with η > 0 the critic's targets gain exactly
    the λ-returns of η d (bootstrapped with 0) over those of the same update with η = 0 (same
    initial weights, seeds, rollouts); the ``novelty`` metric is the mean of d."""
    batch = _batch(np.random.default_rng(4))
    seed, eta = tf.constant([6, 7]), 2.5
    metrics = {}
    for novelty in (0.0, eta):
        config, world_model, value_model = _models([f"value.novelty={novelty}",
                                                    "value.imagine_horizon=4"])
        post = _posterior(world_model, batch)
        if novelty:  # The update's rollouts, before it changes the policy.
            start = value_model.start_states(post)
            states, actions, _ = value_model.rollout(start, 4, seed)
            d = value_model.disagreement(start, states, actions,
                                         tf.random.experimental.stateless_fold_in(seed, 1))
        metrics[novelty] = value_model.train_step(post, seed)
    gain = lambda_returns(eta * d, tf.zeros_like(d), config.value.discount,
                          config.value.td_lambda)
    np.testing.assert_allclose(metrics[eta]["value"] - metrics[0.0]["value"],
                               tf.reduce_mean(gain), rtol=1e-4)
    np.testing.assert_allclose(metrics[eta]["novelty"], tf.reduce_mean(d), rtol=1e-6)
    assert float(tf.reduce_mean(gain)) > 1e-4
    assert "novelty" not in metrics[0.0]


def test_value_novelty_is_checked_and_older_configs_get_zero():
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected a non-negative number\. Received: value.novelty=-1\.0$"):
        config_lib.validate(config_lib.load(["debug"], ["value.novelty=-1"]))
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected 0 unless value.enabled .*\. Received: value.novelty=1\.0$"):
        config_lib.validate(config_lib.load(["debug"], ["value.enabled=false",
                                                        "value.novelty=1"]))  # no critic
    for estimator in ("deterministic", "batch_ensemble"):
        with pytest.raises(config_lib.ConfigError,
                           match=rf"here model.estimator='{estimator}'\)\. Received: "
                                 r"value.novelty=1\.0$"):
            config_lib.validate(config_lib.load(["debug", "value"], [
                f"model.estimator={estimator}", "value.novelty=1"]))
    config_lib.validate(config_lib.load(["debug", "value"], ["model.estimator=rank1",
                                                             "value.novelty=1"]))
    data = config_lib.load(["debug", "value"]).to_dict()
    del data["value"]["novelty"]
    assert config_lib.upgrade(data)["value"]["novelty"] == 0.0
    assert config_lib.load().value.novelty == 0.0  # off by default


# -- averaged and pessimistic targets over weight samples (value.weight_samples, pessimism) ----
def test_sample_objective_is_the_mean_minus_kappa_population_stds():
    returns = np.random.default_rng(5).normal(size=(3, 4, 6)).astype(np.float32)
    for kappa in (0.0, 0.5, 2.0):
        got = sample_objective(tf.constant(returns), kappa).numpy()
        want = returns.mean(0) - kappa * returns.std(0)  # numpy's std: ddof 0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_value_weight_samples_average_the_returns_of_the_samples_rollouts():
    """With K = 3 and κ = 1 the critic's targets are mean − std of the λ-returns of three
    rollouts of the same starts under the update's three weight seeds (the first the update's
    own: with K = 1 the update is exactly the one-sample update), every sample's states are
    regressed onto them, and ``return_std`` is the samples' mean disagreement."""
    batch = _batch(np.random.default_rng(6))
    seed = tf.constant([3, 8])
    one_config, world_model, value_model = _models(["value.imagine_horizon=4"])
    post = _posterior(world_model, batch)
    start = value_model.start_states(post)
    v = one_config.value
    returns = []
    for s in value_model.weight_seeds(seed, 3):
        states, _, _ = value_model.rollout(start, 4, s)
        values = value_model.value(states, target=True)
        returns.append(lambda_returns(world_model.predict_reward(states), values,
                                      v.discount, v.td_lambda).numpy())
    returns = np.stack(returns)  # [K, H, N]
    assert np.abs(returns[1] - returns[0]).max() > 1e-4  # Distinct weight samples.
    first = value_model.train_step(post, seed)
    np.testing.assert_allclose(first["value"], returns[0].mean(), rtol=1e-5)
    assert "return_std" not in first

    _, world_model3, value_model3 = _models(["value.imagine_horizon=4",
                                             "value.weight_samples=3", "value.pessimism=1"])
    metrics = value_model3.train_step(_posterior(world_model3, batch), seed)
    np.testing.assert_allclose(metrics["value"], (returns.mean(0) - returns.std(0)).mean(),
                               rtol=1e-5)
    np.testing.assert_allclose(metrics["return_std"], returns.std(0).mean(), rtol=1e-5)
    assert metrics["value_finite"] == 1.0

    # The critic's loss: every sample's s_0..s_{H-1} against its start's common target.
    _, world_model_c, value_model_c = _models(["value.imagine_horizon=4",
                                               "value.weight_samples=3", "value.pessimism=1"])
    post_c = _posterior(world_model_c, batch)
    start_c = value_model_c.start_states(post_c)
    target = returns.mean(0) - returns.std(0)
    errors = []
    for s in value_model_c.weight_seeds(seed, 3):
        states, _, _ = value_model_c.rollout(start_c, 4, s)
        inputs = {k: tf.concat([start_c[k][None], x[:-1]], 0) for k, x in states.items()}
        errors.append(value_model_c.value(inputs).numpy() - target)
    critic_loss = 0.5 * np.mean(np.square(np.stack(errors)))
    metrics_c = value_model_c.train_step(post_c, seed)
    np.testing.assert_allclose(metrics_c["critic_loss"], critic_loss, rtol=1e-4)


def test_value_weight_samples_and_pessimism_are_checked_and_older_configs_get_one():
    def check(sets):
        return config_lib.validate(config_lib.load(["debug", "value"], sets))

    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected a positive integer\. Received: value.weight_samples=0$"):
        check(["value.weight_samples=0"])
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected a non-negative number\. Received: value.pessimism=-1\.0$"):
        check(["value.weight_samples=2", "value.pessimism=-1"])
    with pytest.raises(config_lib.ConfigError,
                       match=r"here value.weight_samples=1\)\. Received: value.pessimism=0\.5$"):
        check(["value.pessimism=0.5"])
    for estimator in ("deterministic", "batch_ensemble"):
        with pytest.raises(config_lib.ConfigError,
                           match=rf"here model.estimator='{estimator}'\)\. Received: "
                                 r"value.weight_samples=2$"):
            check([f"model.estimator={estimator}", "value.weight_samples=2"])
    with pytest.raises(config_lib.ConfigError,
                       match=r"^Expected 1 unless value.enabled .*Received: value.weight_samples=2$"):
        config_lib.validate(config_lib.load(["debug"], ["value.enabled=false",
                                                        "value.weight_samples=2"]))
    check(["model.estimator=rank1", "value.weight_samples=2", "value.pessimism=1"])
    data = config_lib.load(["debug", "value"]).to_dict()
    del data["value"]["weight_samples"], data["value"]["pessimism"]
    upgraded = config_lib.upgrade(data)["value"]
    assert (upgraded["weight_samples"], upgraded["pessimism"]) == (1, 0.0)
    assert (config_lib.load().value.weight_samples, config_lib.load().value.pessimism) == (1, 0.0)
