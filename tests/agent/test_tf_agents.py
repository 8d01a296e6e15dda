"""TF-Agents conventions: the planner policy at a batch size known only when it runs
(PolicySaver's default), its distribution and `GreedyPolicy`, and `bayes-planet export`,
reloaded in a fresh process without bayes_planet."""

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.environments import tf_py_environment
from tf_agents.policies import greedy_policy, policy_saver
from tf_agents.specs import tensor_spec

from bayes_planet import envs
from bayes_planet.agent import cli
from bayes_planet.agent import config as config_lib
from bayes_planet.agent.policy import PlannerPolicy
from bayes_planet.agent.value import ValueModel
from bayes_planet.agent.world_model import WorldModel
from bayes_planet.envs.tf_agents_env import TFAgentsEnv
from bayes_planet.planners import cross_entropy_method, random_shooting

# Untrained models (the numbers only need to be the same, not good): the debug agent (value
# proposals) and an ensemble transition with every planning option that keeps state or
# draws noise (warm start, shared latent noise, spread exploration, novelty).
CASES = {
    "debug": ([], False),
    "ensemble": (["model.estimator=rank1", "model.ensemble_size=2", "planner.weight_samples=2",
                  "planner.warm_start=true", "planner.latent=shared",
                  "planner.exploration=spread", "planner.novelty=0.5"], True),
}


@pytest.fixture(scope="module")
def cartpole():
    env = envs.make("cartpole-swingup", obs_type="state", seed=0, episode_length=80)
    yield tf_py_environment.TFPyEnvironment(TFAgentsEnv(env))
    env.close()


def _models(tf_env, sets):
    """The config, world model and value model of the debug agent with ``sets``."""
    tf.keras.utils.set_random_seed(0)
    config = config_lib.load(["debug"], sets)
    model = WorldModel(config, tf_env.observation_spec()["state"].shape, 1)
    spec = tf_env.action_spec()
    return config, model, ValueModel(config, model, spec.minimum, spec.maximum)


def _policy(tf_env, models, explore=False):
    config, model, value = models
    return PlannerPolicy(tf_env.time_step_spec(), tf_env.action_spec(), model, config.planner,
                         explore=explore, value_model=value,
                         proposals=config.value.policy_proposals)


def _time_steps(tf_env, batch, steps):
    """``steps`` batched time steps: the rows the environment's first ones, shifted apart."""
    offset = 0.1 * tf.range(batch, dtype=tf.float32)[:, None]
    rows = lambda x: tf.concat([x] * batch, 0) + (offset if x.shape.rank == 2 else 0)  # noqa: E731
    time_step, out = tf_env.reset(), []
    for i in range(steps):
        out.append(tf.nest.map_structure(rows, time_step))
        time_step = tf_env.step(tf.constant([[0.5 - i]]))
    return out


def _act(action_fn, policy, time_steps, batch):
    actions, state = [], policy.get_initial_state(batch)
    for i, time_step in enumerate(time_steps):
        step = action_fn(time_step, state, tf.constant([3, i]))
        actions.append(step.action.numpy())
        state = step.state
    return np.stack(actions), {k: v.numpy() for k, v in state.items()}


@pytest.mark.parametrize("case", ["debug", pytest.param("ensemble", marks=pytest.mark.slow)])
def test_at_an_unknown_batch_size_the_policy_acts_as_at_the_known_one(cartpole, case):
    """A `tf.function` over ``[None, ...]`` specs (PolicySaver's default) plans exactly what
    the policy plans at the batch size it runs with (batch 1 and 3): the same actions and the
    same state, step after step (that path's numbers are those of the code before)."""
    sets, explore = CASES[case]
    policy = _policy(cartpole, _models(cartpole, sets), explore)
    specs = tf.nest.map_structure(
        lambda spec: tensor_spec.add_outer_dims_nest(spec, (None,)),
        (policy.time_step_spec, policy.policy_state_spec))
    dynamic = tf.function(policy.action, input_signature=(*specs, tf.TensorSpec([2], tf.int32)))
    static = tf.function(policy.action)  # traced at each batch size it sees
    for batch in (1, 3):
        time_steps = _time_steps(cartpole, batch, 3)
        known, known_state = _act(static, policy, time_steps, batch)
        unknown, unknown_state = _act(dynamic, policy, time_steps, batch)
        np.testing.assert_array_equal(unknown, known)
        for key in known_state:
            np.testing.assert_array_equal(unknown_state[key], known_state[key], err_msg=key)
        assert known.shape == (3, batch, 1)
        assert len(np.unique(known)) == known.size  # Rows and steps plan differently.
    assert dynamic.experimental_get_tracing_count() == 1


def test_cem_and_random_shooting_take_a_batch_size_known_only_when_run():
    target = tf.constant([[0.5, -0.3]])

    def objective(actions):  # [B, N, H, A]: closer to the target is better.
        return -tf.reduce_sum((actions - target) ** 2, [-2, -1])

    def plans(batch_size):
        seed = tf.constant([4, 2])
        cem = cross_entropy_method(objective, 3, 2, -1.0, 1.0, num_candidates=16, top_k=4,
                                   iterations=3, seed=seed, batch_shape=(batch_size,))
        shooting = random_shooting(objective, 3, 2, -1.0, 1.0, num_candidates=16, seed=seed,
                                   batch_shape=(batch_size,))
        return cem, shooting

    @tf.function(input_signature=[tf.TensorSpec([None, 5])])
    def dynamic(x):
        cem, shooting = plans(tf.shape(x)[0])
        assert cem.shape.as_list() == shooting.shape.as_list() == [None, 3, 2]
        return cem, shooting

    for batch in (1, 3):
        for got, expected in zip(dynamic(tf.zeros([batch, 5])), plans(batch), strict=True):
            np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize("batch_shape, received", [
    ((tf.constant([2, 3]),), "batch_shape=(<tf.Tensor"),
    ((tf.constant(2.0),), "batch_shape=(<tf.Tensor"),
    ((tf.constant(0),), "batch_shape=(<tf.Tensor"),
    ((None,), "batch_shape=(None,)"),
])
def test_bad_batch_dims_are_one_line_errors(batch_shape, received):
    with pytest.raises(ValueError, match=r"^Expected batch_shape to be a tuple of positive "
                                         r"integers or scalar integer tensors\. Received: ") as e:
        cross_entropy_method(lambda a: tf.reduce_sum(a, [-2, -1]), 2, 1, -1.0, 1.0,
                             num_candidates=4, top_k=2, iterations=1, seed=0,
                             batch_shape=batch_shape)
    assert received in str(e.value) and "\n" not in str(e.value)


def test_distribution_is_the_noiseless_plan_and_greedy_policy_acts_with_it(cartpole):
    """`distribution` is a point at the plan's first action, seeded from the policy's stream
    as `action` without a seed is; `GreedyPolicy` of an exploring (collection) policy acts
    with it: the actions and state of the same planner without exploration noise."""
    models = _models(cartpole, CASES["ensemble"][0] + ["planner.exploration_noise=0.5"])
    collect = _policy(cartpole, models, explore=True)
    greedy = greedy_policy.GreedyPolicy(collect)
    time_steps = _time_steps(cartpole, 2, 3)

    def run(act, policy):  # From the policy's own seed stream, restarted.
        policy.reseed(11)
        state, actions = policy.get_initial_state(2), []
        for time_step in time_steps:
            step = act(time_step, state)
            actions.append(step.action.numpy())
            state = step.state
        return np.stack(actions), state

    collect.reseed(11)
    dist = collect.distribution(time_steps[0], collect.get_initial_state(2))
    assert dist.action.mode().shape == (2, 1)
    plan_greedy, greedy_state = run(greedy.action, collect)
    # The noiseless plan: what the same planner (same models) plans without exploring.
    quiet = _policy(cartpole, models, explore=False)
    plan_quiet, quiet_state = run(quiet.action, quiet)
    np.testing.assert_array_equal(plan_greedy, plan_quiet)
    np.testing.assert_array_equal(dist.action.mode().numpy(), plan_quiet[0])
    for key in quiet_state:
        np.testing.assert_array_equal(greedy_state[key], quiet_state[key], err_msg=key)
    noisy, _ = run(collect.action, collect)
    assert not np.allclose(noisy, plan_greedy)  # `action` of the exploring policy adds noise.
    assert np.all(np.abs(plan_greedy) <= 1.0)


# ---------------------------------------------------------------- saved, reloaded elsewhere
# The fresh process: TF-Agents' user, bayes_planet not importable (so not needed by the
# SavedModel). TFP is imported for the policy's saved distribution type (as tf_agents does).
RELOAD_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.modules["bayes_planet"] = None
    import numpy as np
    import tensorflow as tf
    import tensorflow_probability  # noqa: F401  (the saved distribution's type)
    from tf_agents.trajectories import time_step as ts

    path, steps, out = sys.argv[1], np.load(sys.argv[2]), sys.argv[3]
    saved = tf.saved_model.load(path)
    results = {}
    for batch in (1, 2):
        state, actions = saved.get_initial_state(batch), []
        for i in range(steps["reward"].shape[0]):
            time_step = ts.TimeStep(
                step_type=tf.constant(steps["step_type"][i, :batch]),
                reward=tf.constant(steps["reward"][i, :batch]),
                discount=tf.constant(steps["discount"][i, :batch]),
                observation={"state": tf.constant(steps["state"][i, :batch])})
            step = saved.action(time_step, state)
            actions.append(step.action.numpy().tolist())
            state = step.state
        results[batch] = actions
    mode = saved.distribution(time_step, saved.get_initial_state(2)).action.mode()
    results["mode_shape"] = list(mode.shape)
    results["train_step"] = int(saved.get_train_step().numpy())
    results["metadata"] = {k: int(v.numpy()) for k, v in saved.get_metadata().items()}
    with open(out, "w") as f:
        json.dump(results, f)
    print("LOADED")
""")


def _reload_elsewhere(path, time_steps, tmp_path):
    """Runs `RELOAD_SCRIPT` on the SavedModel at ``path`` (batch 1: the first row)."""
    np.savez(tmp_path / "steps.npz",
             step_type=np.stack([t.step_type.numpy() for t in time_steps]),
             reward=np.stack([t.reward.numpy() for t in time_steps]),
             discount=np.stack([t.discount.numpy() for t in time_steps]),
             state=np.stack([t.observation["state"].numpy() for t in time_steps]))
    result = subprocess.run(
        [sys.executable, "-c", RELOAD_SCRIPT, str(path), str(tmp_path / "steps.npz"),
         str(tmp_path / "reloaded.json")], capture_output=True, text=True, timeout=600,
        cwd=tmp_path, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES=""))
    assert "LOADED" in result.stdout, result.stderr[-3000:]
    return json.loads((tmp_path / "reloaded.json").read_text())


def _live(policy, time_steps, reseed):
    """The live policy's actions on the same steps, batch 1 then 2, without a seed: its own
    stream from ``reseed``, where the saved copy's starts, and on through both batches."""
    live = {}
    reseed()
    for batch in (1, 2):
        state, actions = policy.get_initial_state(batch), []
        for time_step in time_steps:
            rows = tf.nest.map_structure(lambda x, b=batch: x[:b], time_step)
            step = policy.action(rows, state)
            actions.append(step.action.numpy())
            state = step.state
        live[batch] = np.stack(actions)
    return live


@pytest.mark.slow  # ~20 s; the default suite reloads `bayes-planet export`'s (the page's test)
def test_policy_saver_at_its_default_batch_size_reloads_and_acts_the_same(cartpole, tmp_path):
    """An ensemble transition's policy with a warm-started plan: a state of beliefs per member
    and the last plan, saved and restored through the SavedModel."""
    policy = _policy(cartpole, _models(cartpole, CASES["ensemble"][0]))
    policy.reseed(21)
    policy_saver.PolicySaver(policy).save(str(tmp_path / "policy"))  # batch_size=None
    time_steps = _time_steps(cartpole, 2, 3)
    reloaded = _reload_elsewhere(tmp_path / "policy", time_steps, tmp_path)
    live = _live(policy, time_steps, lambda: policy.reseed(21))
    for batch in (1, 2):
        np.testing.assert_array_equal(np.array(reloaded[str(batch)], np.float32), live[batch])
    assert reloaded["mode_shape"] == [2, 1]
    assert not np.allclose(live[2][:, 0], live[2][:, 1])


@pytest.mark.parametrize("args, message", [
    (["--logdir", "{tmp}/none", "--out", "{tmp}/out"],
     "Expected a run directory. Received: --logdir='{tmp}/none'"),
    (["--logdir", "{tmp}", "--out", "{tmp}/out"],
     "Expected a run directory. Received: --logdir='{tmp}'"),
    (["--logdir", "{run}", "--out", "{run}/policy"],
     "Expected a folder outside any run (only a run's trainer writes into it). Received: "
     "--out='{run}/policy' lies inside the run"),
    (["--logdir", "{run}", "--out", "{tmp}/full"],
     "Expected a new or empty folder. Received: --out='{tmp}/full' holds files"),
    (["--logdir", "{run}", "--out", "{tmp}/file"],
     "Expected a directory. Received: --out='{tmp}/file' is a file"),
])
def test_bad_export_arguments_are_one_line_errors(tmp_path, capsys, args, message):
    """Refused before TensorFlow loads or anything is written (a folder that looks like a run
    is enough to get that far)."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    fill = lambda text: text.format(tmp=tmp_path, run=run)  # noqa: E731
    assert cli.main(["export", *map(fill, args)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bayes-planet export: error: {fill(message)}")
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists() and not (run / "policy").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "full", "run"]


PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "tf_agents.md"


def test_the_tf_agents_page_runs_and_its_export_acts_the_same_elsewhere(finished, tmp_path,
                                                                       monkeypatch, capsys):
    """docs/tf_agents.md's blocks, in order, in one namespace, against a trained run at the
    page's ``runs/quickstart``: python blocks executed, ``bayes-planet`` lines run by the CLI.
    Its export (`bayes-planet export`, the run's evaluation policy) then acts in a fresh
    process without bayes_planet as the live evaluation policy acts, at batch 1 and 2."""
    from bayes_planet import seeds

    shutil.copytree(finished, tmp_path / "runs" / "quickstart")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```(python|bash)\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert [kind for kind, _ in blocks].count("bash") == 1 and len(blocks) >= 6
    ns = {"__name__": "tf_agents_page"}
    for kind, code in blocks:
        if kind == "python":
            exec(compile(code, str(PAGE), "exec"), ns)  # noqa: S102
            continue
        for line in filter(None, map(str.strip, code.splitlines())):
            command = shlex.split(line)
            assert command[0] == "bayes-planet", line
            assert cli.main(command[1:]) == 0, line
    said = capsys.readouterr()
    assert "exported the evaluation policy of checkpoint 3 (3 updates)" in said.out
    assert "Sanitizing" not in said.err and "StructuredValue" not in said.err
    assert np.isfinite(ns["average_return"].result()) and np.isfinite(ns["tf_return"].result())
    assert ns["plan"].action.mode().shape == ns["step"].action.shape == (2, 1)
    assert {k: int(v) for k, v in ns["saved"].get_metadata().items()} == {"checkpoint": 3}
    exported = tmp_path / "runs" / "quickstart-policy"
    assert sorted(p.name for p in exported.parent.iterdir()) == ["quickstart", "quickstart-policy"]

    agent, policy = ns["agent"], ns["policy"]
    time_steps = _time_steps(tf_py_environment.TFPyEnvironment(ns["py_env"]), 2, 3)
    reloaded = _reload_elsewhere(exported, time_steps, tmp_path)
    live = _live(policy, time_steps, lambda: policy.reseed(
        *seeds.pair(agent.config.seed, "cli_export_policy", 0)))
    for batch in (1, 2):
        np.testing.assert_array_equal(np.array(reloaded[str(batch)], np.float32), live[batch])
    assert reloaded["mode_shape"] == [2, 1]
    assert reloaded["train_step"] == 3 and reloaded["metadata"] == {"checkpoint": 3}
