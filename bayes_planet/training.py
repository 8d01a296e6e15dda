"""The agent loop: seed episodes, then {train, collect with the planner, evaluate}.

Everything lives in the run's logdir and a killed run resumes by rerunning the
same command::

    <logdir>/config.yaml        the merged config (a different config is refused)
    <logdir>/episodes/*.npz     every collected episode (`EpisodeReplay`)
    <logdir>/checkpoints/       model, optimizer, update counter (CheckpointManager)
    <logdir>/metrics.jsonl      one line per collected / evaluated episode
    <logdir>/events.*           TensorBoard summaries (losses, state/weight KL, returns)
    <logdir>/learning_curve.png, <logdir>/videos/*.gif|mp4

The number of collected episodes is read from the replay (the data on disk is
the source of truth); the number of updates from the checkpoint, written after
every training phase and every collected episode. Killing the process at any
moment loses at most the updates since the last checkpoint, never data.
"""

import bayes_planet._extras.agent  # noqa: F401  isort: skip  (needs the 'agent' extra)

import json
import pathlib
import time

import numpy as np
import tensorflow as tf
from tf_agents.drivers import py_driver
from tf_agents.environments import tf_py_environment
from tf_agents.policies import py_tf_eager_policy, random_py_policy

from bayes_planet import config as config_lib
from bayes_planet import distribute, envs
from bayes_planet.agent import PlannerPolicy
from bayes_planet.envs.tf_agents_env import TFAgentsEnv
from bayes_planet.replay import EpisodeReplay
from bayes_planet.world_model import WorldModel, as_batch

__all__ = ["EpisodeRecorder", "Trainer"]


class EpisodeRecorder:
    """TF-Agents observer turning trajectories into replay episodes.

    Converts TF-Agents' ``(o_t, a_t, r_{t+1})`` trajectories to the replay layout
    where ``action[t]``/``reward[t]`` are the action that led to ``o_t`` and the
    reward received on arriving there (both 0 at ``t = 0``). With ``info_fn`` it also
    stores the true physics state of every observation as ``physics`` (for latent
    probes); optionally renders a frame per step for videos.
    """

    def __init__(self, obs_key, action_size, render_fn=None, info_fn=None):
        self.obs_key, self.action_size, self.render_fn = obs_key, action_size, render_fn
        self.info_fn = info_fn
        self.episodes = []
        self._reset()

    def _reset(self):
        self.obs, self.action, self.reward, self.frames, self.physics = [], [], [], [], []

    def start(self):
        """Call after the environment reset: records the first observation's state."""
        if self.info_fn is not None:
            self._first_physics = _physics(self.info_fn())

    def __call__(self, traj):
        if traj.is_first():
            self._reset()
            self.action.append(np.zeros(self.action_size, np.float32))
            self.reward.append(np.float32(0.0))
            if self.info_fn is not None:
                self.physics.append(self._first_physics)
        self.obs.append(np.asarray(traj.observation[self.obs_key]))
        if self.render_fn is not None:
            self.frames.append(self.render_fn())
        if traj.is_last():
            episode = {"obs": np.stack(self.obs), "action": np.stack(self.action),
                       "reward": np.asarray(self.reward, np.float32)}
            if self.info_fn is not None:
                episode["physics"] = np.stack(self.physics)
            self.episodes.append((episode, self.frames))
            self._reset()
        else:
            self.action.append(np.asarray(traj.action, np.float32))
            self.reward.append(np.float32(traj.reward))
            if self.info_fn is not None:  # The env already stepped: this is o_{t+1}'s state.
                self.physics.append(_physics(self.info_fn()))


def _physics(info):
    """The flat true physics state (qpos, qvel, act) from an env info dict."""
    return np.asarray(info["physics_state"], np.float64)


class Trainer:
    """Builds everything for one run in ``logdir`` and runs the agent loop.

    Args:
      config: merged `Config`.
      logdir: run directory (created; resumed if it holds a run of the same config).
    """

    def __init__(self, config, logdir):
        self.config, self.logdir = config, pathlib.Path(logdir)
        c = config
        # First (a multi-worker strategy must exist before other ops); see docs/distributed.md.
        self.strategy = distribute.make_strategy(c.strategy)
        env_seed = c.seed
        if not distribute.is_chief(self.strategy):  # Own episodes, logs and checkpoints.
            task = self.strategy.cluster_resolver
            self.logdir = self.logdir / f"{task.task_type}_{task.task_id}"
            env_seed = c.seed + 100_003 * (1 + task.task_id)
        size = (c.env.image_size, c.env.image_size)
        self.env = envs.make(c.task, obs_type=c.obs_type, seed=env_seed,
                             action_repeat=c.env.action_repeat, size=size,
                             episode_length=c.env.episode_length)
        self.eval_env = envs.make(c.task, obs_type=c.obs_type, seed=env_seed + 10_000,
                                  action_repeat=c.env.action_repeat, size=size,
                                  episode_length=c.env.episode_length)
        self._check_logdir()  # After the task is known to exist.
        self.py_env, self.py_eval_env = TFAgentsEnv(self.env), TFAgentsEnv(self.eval_env)
        self.obs_key = next(iter(self.env.observation_spec()))
        obs_shape = self.env.observation_spec()[self.obs_key].shape
        action_size = self.env.action_spec().shape[0]
        self.replay = EpisodeReplay(self.logdir / "episodes")
        self.model = WorldModel(c, obs_shape, action_size, strategy=self.strategy)
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.model.optimizer,
                                              updates=self.updates)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.logdir / "checkpoints",
                                                  max_to_keep=2)
        if self.manager.latest_checkpoint:
            self.checkpoint.restore(self.manager.latest_checkpoint).assert_existing_objects_matched()
        self.writer = tf.summary.create_file_writer(str(self.logdir))
        tf_env = tf_py_environment.TFPyEnvironment(self.py_env)
        specs = (tf_env.time_step_spec(), tf_env.action_spec())
        self.collect_policy = PlannerPolicy(*specs, self.model, c.planner, explore=True,
                                            seed=c.seed)
        self.eval_policy = PlannerPolicy(*specs, self.model, c.planner, explore=False,
                                         seed=c.seed + 1)
        self.rng = np.random.default_rng([c.seed, self.replay.num_episodes])

    def _check_logdir(self):
        path = self.logdir / "config.yaml"
        if path.exists():
            previous = config_lib.read(path)
            if previous != self.config:
                diff = _diff(previous.to_dict(), self.config.to_dict())
                raise config_lib.ConfigError(
                    f"logdir {self.logdir} holds a run with a different config ({diff}); "
                    "use a new --logdir or the same presets and --set values")
        else:
            config_lib.write(self.config, path)

    # -- phases ------------------------------------------------------------------------------
    def collect(self, policy, py_env, render=False):
        """Runs one episode with a TF-Agents PyDriver; returns (episode, frames)."""
        action_size = self.env.action_spec().shape[0]
        render_fn = py_env.render if render else None
        recorder = EpisodeRecorder(self.obs_key, action_size, render_fn, py_env.get_info)
        driver = py_driver.PyDriver(py_env, policy, observers=[recorder], max_episodes=1)
        time_step = py_env.reset()
        recorder.start()
        driver.run(time_step, policy.get_initial_state(1))
        return recorder.episodes[-1]

    def _py_policy(self, policy, episode_index):
        if policy is None:
            spec = self.py_env.action_spec()
            return random_py_policy.RandomPyPolicy(
                self.py_env.time_step_spec(), spec, seed=self.config.seed * 100_003 + episode_index)
        policy.reseed(self.config.seed, episode_index)
        if not hasattr(policy, "_py_wrapper"):
            policy._py_wrapper = py_tf_eager_policy.PyTFEagerPolicy(policy, use_tf_function=True)
        return policy._py_wrapper

    def train(self, num_updates):
        """``num_updates`` gradient steps on chunks sampled from the replay."""
        c = self.config.train
        metrics = []
        for _ in range(num_updates):
            chunk = self.replay.sample(c.batch_size, c.chunk_length, self.rng)
            seed = tf.constant([self.config.seed, int(self.updates.numpy()) % (2**31 - 1)],
                               tf.int32)
            step = self.model.train_step(as_batch(chunk, "obs"), seed, self.replay.num_steps)
            self.updates.assign_add(1)
            metrics.append({k: float(v) for k, v in step.items()})
        return {k: float(np.mean([m[k] for m in metrics])) for k in metrics[0]} if metrics else {}

    def evaluate(self, episode_index):
        returns, videos = [], []
        for i in range(self.config.eval.episodes):
            policy = self._py_policy(self.eval_policy, 1_000_000 + 1000 * episode_index + i)
            episode, frames = self.collect(policy, self.py_eval_env, render=self.config.eval.video)
            returns.append(float(episode["reward"].sum()))
            videos.append(frames)
        if self.config.eval.video and videos[0]:
            folder = self.logdir / "videos"
            folder.mkdir(exist_ok=True)
            envs.write_video(np.stack(videos[0]), folder / f"eval_{episode_index:05d}.gif",
                             fps=20)
        return float(np.mean(returns))

    # -- the loop ----------------------------------------------------------------------------
    def run(self, progress=True):
        """Runs (or resumes) the loop until ``train.episodes`` episodes are collected."""
        c = self.config
        total = c.train.episodes
        bar = _progress(total, self.replay.num_episodes, progress)
        start = time.perf_counter()
        while self.replay.num_episodes < total:
            index = self.replay.num_episodes
            losses = {}
            if index >= c.train.seed_episodes:
                target = (index - c.train.seed_episodes + 1) * c.train.updates_per_episode
                losses = self.train(max(0, target - int(self.updates.numpy())))
                self.manager.save(checkpoint_number=int(self.updates.numpy()))
                policy = self._py_policy(self.collect_policy, index)
            else:
                policy = self._py_policy(None, index)
            episode, _ = self.collect(policy, self.py_env)
            self.replay.add(episode)
            record = {"episode": index + 1, "env_steps": self.env_steps(),
                      "updates": int(self.updates.numpy()),
                      "return": float(episode["reward"].sum()), **losses,
                      "seconds": time.perf_counter() - start}
            if index >= c.train.seed_episodes and (index + 1) % c.eval.every == 0:
                record["eval_return"] = self.evaluate(index + 1)
                self.summarize_open_loop(index + 1)
            self.manager.save(checkpoint_number=int(self.updates.numpy()))
            self._log(record)
            bar.update(record)
        bar.close()
        plot_learning_curve(self.logdir)
        return self.read_metrics()

    def env_steps(self):
        return self.replay.num_steps * self.env.action_repeat

    def summarize_open_loop(self, step, context=5):
        """Open-loop prediction (``context`` observed steps, then the prior) as a video."""
        if not self.model.pixels:
            return
        length = min(self.config.train.chunk_length, 50)
        chunk = self.replay.sample(min(4, self.config.train.batch_size), length, self.rng)
        truth, pred = self.model.open_loop(as_batch(chunk, "obs"), context,
                                           tf.constant([self.config.seed, step]))
        frames = np.concatenate([truth[0].numpy(), pred[0].numpy()], 2)  # [T, H, 2W, 3]
        folder = self.logdir / "videos"
        folder.mkdir(exist_ok=True)
        envs.write_video((frames * 255).astype(np.uint8), folder / f"open_loop_{step:05d}.gif",
                         fps=10)
        with self.writer.as_default():
            tf.summary.image("open_loop", frames[::5], step=step, max_outputs=10)

    def _log(self, record):
        with open(self.logdir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        with self.writer.as_default():
            for key, value in record.items():
                if key not in ("episode",):
                    tf.summary.scalar(key, value, step=record["env_steps"])
        self.writer.flush()

    def read_metrics(self):
        return read_metrics(self.logdir)


def read_metrics(logdir):
    path = pathlib.Path(logdir) / "metrics.jsonl"
    if not path.exists():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_learning_curve(logdir):
    """Writes ``learning_curve.png``: training and evaluation returns over env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(logdir)
    if not records:
        return None
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.5))
    ax.plot([r["env_steps"] for r in records], [r["return"] for r in records], ".-",
            label="collection (with noise)")
    evals = [r for r in records if "eval_return" in r]
    ax.plot([r["env_steps"] for r in evals], [r["eval_return"] for r in evals], "o-",
            label="evaluation")
    ax.set(xlabel="environment steps", ylabel="return")
    ax.legend()
    for key in ("state_kl", "weight_kl"):
        pts = [(r["env_steps"], r[key]) for r in records if key in r]
        if pts:
            bx.plot(*zip(*pts, strict=True), label=key)
    bx.set(xlabel="environment steps", ylabel="KL (nats)", yscale="log")
    if bx.lines:
        bx.legend()
    fig.tight_layout()
    path = pathlib.Path(logdir) / "learning_curve.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _diff(a, b, prefix=""):
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out.extend(_diff(va, vb, f"{prefix}{key}.").split("; ") if _diff(va, vb) else [])
        elif va != vb:
            out.append(f"{prefix}{key}: {va!r} -> {vb!r}")
    return "; ".join(x for x in out if x)


class _progress:
    """A tqdm bar over episodes showing steps, return, loss and ETA (no-op if disabled)."""

    def __init__(self, total, done, enabled):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit="episode", dynamic_ncols=True)

    def update(self, record):
        if self.bar is not None:
            post = {"steps": record["env_steps"], "return": f"{record['return']:.1f}"}
            if "loss" in record:
                post["loss"] = f"{record['loss']:.2f}"
            if "eval_return" in record:
                post["eval"] = f"{record['eval_return']:.1f}"
            self.bar.set_postfix(post)
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()
