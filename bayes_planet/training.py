"""The agent loop: seed episodes, then {train, collect with the planner, evaluate}.

The run directory is owned by `bayes_planet.run.Run` (validation, lock, atomic config,
checkpoints, metrics; see its docstring for the layout and guarantees). A killed run resumes by
rerunning the same command and ends exactly as an uninterrupted one:

* episode ``k`` is committed when its file is written to ``episodes/``; before that the loop
  writes the checkpoint ``ckpt-(k+1)`` (every ``train.checkpoint_every`` episodes) and the
  metrics row, which `Run` discards if the episode file never came;
* every random number comes from a named stream (`bayes_planet.seeds`): episode ``k`` resets the
  environment and seeds its policy from ``k``, update ``u`` samples its chunks and its noise from
  ``u``, so whichever process does the work draws the same numbers;
* after restoring an older checkpoint (``checkpoint_every > 1`` or a damaged newer one), the
  updates of the episodes already on disk are redone with the replay limited to the episodes
  that existed at the time (`EpisodeReplay.sample`'s ``num_episodes``).

An update with a non-finite loss or gradient is skipped (weights unchanged), counted
(``nonfinite_steps`` in metrics) and after ``train.max_nonfinite_steps`` in a row the run stops
with `bayes_planet.run.NonFiniteError` (with several replicas the step applies zero gradients
instead of none; see `WorldModel`).
"""

import bayes_planet._extras.agent  # noqa: F401  isort: skip  (needs the 'agent' extra)

import os
import pathlib
import time

import numpy as np
import tensorflow as tf

from bayes_planet import envs, seeds
from bayes_planet.run import NonFiniteError, Run, fault_point
from bayes_planet.run import read_metrics as _read_run_metrics
from bayes_planet.world_model import as_batch

__all__ = ["EpisodeRecorder", "Trainer", "learning_curve_figure", "plot_learning_curve",
           "read_metrics"]


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
    """The agent loop over a run directory opened for writing (`bayes_planet.run.Run`).

    Args:
      config: merged `Config` (validated completely before anything is written).
      logdir: run directory (created; resumed if it holds a run of the same config).
    Attributes:
      run: the `Run`; ``model``, ``replay``, ``updates``, ``strategy``, ``env``,
      ``eval_env``, ``py_env``, ``py_eval_env`` are its objects.
    """

    def __init__(self, config, logdir):
        self.run_dir = Run(logdir, config)
        r = self.run_dir
        self.config, self.logdir = r.config, r.logdir
        self.strategy, self.model, self.replay, self.updates = r.strategy, r.model, r.replay, r.updates
        self.env, self.eval_env, self.py_env, self.py_eval_env = (
            r.env, r.eval_env, r.py_env, r.py_eval_env)

    # -- phases ------------------------------------------------------------------------------
    def target_updates(self, episode_index):
        """Updates done once the training phase before episode ``episode_index`` has run."""
        c = self.config.train
        return max(0, episode_index - c.seed_episodes + 1) * c.updates_per_episode

    def train(self, num_updates, num_episodes=None):
        """``num_updates`` gradient steps on chunks of the oldest ``num_episodes`` episodes.

        Update ``u`` draws its chunks from the stream ``replay(u)`` and its noise from
        ``train_step(u)``. Returns the mean metrics over the finite steps (NaN if none) plus
        ``nonfinite_steps``; raises `NonFiniteError` after ``train.max_nonfinite_steps``
        non-finite steps in a row.
        """
        c, r = self.config.train, self.run_dir
        seed = self.config.seed
        metrics, skipped = [], 0
        for _ in range(num_updates):
            u = int(self.updates.numpy())
            chunk = self.replay.sample(c.batch_size, c.chunk_length,
                                       seeds.numpy_rng(seed, "replay", u), num_episodes)
            step = self.model.train_step(as_batch(chunk, "obs"),
                                         seeds.tf_seed(seed, "train_step", u),
                                         self._transitions(num_episodes))
            self.updates.assign_add(1)
            step = {k: float(v) for k, v in step.items()}
            if step.pop("finite") < 1.0:
                skipped += 1
                r.nonfinite.assign_add(1)
                r.nonfinite_in_a_row.assign_add(1)
                limit = c.max_nonfinite_steps
                if int(r.nonfinite_in_a_row.numpy()) >= limit:
                    raise NonFiniteError(
                        f"training diverged: {limit} updates in a row (up to update {u + 1}) had "
                        f"a non-finite loss or gradient (last loss {step['loss']}); they were "
                        "skipped and nothing non-finite was saved. Lower train.learning_rate "
                        "or raise train.max_nonfinite_steps")
            else:
                r.nonfinite_in_a_row.assign(0)
                metrics.append(step)
            fault_point("train")
        if not num_updates:
            return {}
        keys = metrics[0] if metrics else {"loss": 0}
        out = {k: float(np.mean([m[k] for m in metrics])) if metrics else float("nan")
               for k in keys}
        out["nonfinite_steps"] = skipped
        return out

    def _transitions(self, num_episodes):
        if num_episodes is None or num_episodes == self.replay.num_episodes:
            return self.replay.num_steps
        steps = [len(e["action"]) - 1 for e in self.replay.episodes()[:num_episodes]]
        return int(sum(steps))

    def evaluate(self, episode_index):
        """Mean return of ``eval.episodes`` evaluation episodes after ``episode_index`` episodes."""
        returns, videos = [], []
        for i in range(self.config.eval.episodes):
            policy = self.run_dir.policy("eval", episode_index, i)
            episode, frames = self.run_dir.collect(
                policy, "eval_env_reset", episode_index, i, evaluation=True,
                render=self.config.eval.video, fault="eval")
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
        """Runs (or resumes) the loop until ``train.episodes`` episodes are collected.

        Releases the run's lock when done. Returns the metrics rows.
        """
        c, r = self.config, self.run_dir
        total = c.train.episodes
        start = time.perf_counter()
        # Catch up: redo the updates of committed episodes newer than the restored checkpoint.
        for k in range(r.restored or 0, self.replay.num_episodes):
            r.begin_episode(k)
            if k >= c.train.seed_episodes:
                self.train(max(0, self.target_updates(k) - int(self.updates.numpy())), k)
        bar = _progress(total, self.replay.num_episodes, progress)
        while self.replay.num_episodes < total:
            k = self.replay.num_episodes
            r.begin_episode(k)
            losses = {}
            if k >= c.train.seed_episodes:
                losses = self.train(max(0, self.target_updates(k) - int(self.updates.numpy())))
                policy, fault = r.policy("collect", k), "plan"
            else:
                policy, fault = r.policy("random", k), "seed_episode"
            episode, _ = r.collect(policy, "env_reset", k, fault=fault)
            record = {"episode": k + 1,
                      "env_steps": (self.replay.num_steps + len(episode["action"]) - 1)
                      * self.env.action_repeat,
                      "updates": int(self.updates.numpy()),
                      "return": float(episode["reward"].sum()), **losses,
                      "seconds": time.perf_counter() - start}
            if k >= c.train.seed_episodes and (k + 1) % c.eval.every == 0:
                record["eval_return"] = self.evaluate(k + 1)
                self.summarize_open_loop(k + 1)
            if (k + 1) % c.train.checkpoint_every == 0 or k + 1 == total:
                r.save_checkpoint(k + 1)
            r.append_metrics(record)
            self.replay.add(episode)  # The commit.
            self._summarize(record)
            bar.update(record)
        bar.close()
        plot_learning_curve(self.logdir)
        r.close()
        return self.read_metrics()

    def env_steps(self):
        return self.replay.num_steps * self.env.action_repeat

    def summarize_open_loop(self, step, context=5):
        """Open-loop prediction (``context`` observed steps, then the prior) as a video."""
        if not self.model.pixels:
            return
        length = min(self.config.train.chunk_length, 50)
        chunk = self.replay.sample(min(4, self.config.train.batch_size), length,
                                   seeds.numpy_rng(self.config.seed, "open_loop", step))
        truth, pred = self.model.open_loop(as_batch(chunk, "obs"), context,
                                           seeds.tf_seed(self.config.seed, "open_loop", step))
        frames = np.concatenate([truth[0].numpy(), pred[0].numpy()], 2)  # [T, H, 2W, 3]
        folder = self.logdir / "videos"
        folder.mkdir(exist_ok=True)
        envs.write_video((frames * 255).astype(np.uint8), folder / f"open_loop_{step:05d}.gif",
                         fps=10)
        with self.run_dir.summary_writer().as_default():
            tf.summary.image("open_loop", frames[::5], step=step, max_outputs=10)

    def _summarize(self, record):
        writer = self.run_dir.summary_writer()
        with writer.as_default():
            for key, value in record.items():
                if key != "episode" and value is not None and np.isfinite(value):
                    tf.summary.scalar(key, value, step=record["env_steps"])
        writer.flush()

    def read_metrics(self):
        return read_metrics(self.logdir)


def read_metrics(logdir):
    """The metrics rows of a run (see `bayes_planet.run.read_metrics`)."""
    return _read_run_metrics(logdir)


def learning_curve_figure(records):
    """The learning-curve figure of metrics rows: returns (left) and KL terms (right, log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.5))
    ax.plot([r["env_steps"] for r in records], [r["return"] for r in records], ".-",
            label="collection (with noise)")
    evals = [r for r in records if r.get("eval_return") is not None]
    ax.plot([r["env_steps"] for r in evals], [r["eval_return"] for r in evals], "o-",
            label="evaluation")
    ax.set(xlabel="environment steps", ylabel="return")
    ax.legend()
    for key in ("state_kl", "weight_kl"):
        pts = [(r["env_steps"], r[key]) for r in records
               if r.get(key) is not None and r[key] > 0]  # A log axis: positive values only.
        if pts:  # Markers, so a single point is visible.
            bx.plot(*zip(*pts, strict=True), ".-", label=key)
    bx.set(xlabel="environment steps", ylabel="KL (nats)", yscale="log")
    if bx.lines:
        bx.legend()
    fig.tight_layout()
    return fig


def plot_learning_curve(logdir):
    """Writes ``learning_curve.png`` (`learning_curve_figure` of the run's metrics rows)."""
    import matplotlib.pyplot as plt

    records = read_metrics(logdir)
    if not records:
        return None
    fig = learning_curve_figure(records)
    path = pathlib.Path(logdir) / "learning_curve.png"
    temp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fig.savefig(temp, dpi=100, format="png")
    plt.close(fig)
    os.replace(temp, path)
    return path


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
