"""The agent loop: seed episodes, then {train, collect with the planner, evaluate}.

The agent is `bayes_planet.agent.Agent` (environments, replay, world model, policies) over a
run directory, `bayes_planet.agent.run.Run` (lock, atomic config, checkpoints, metrics; see its
docstring for the layout and guarantees). A killed run resumes by rerunning the same command
and ends exactly as an uninterrupted one:

* episode ``k`` is committed when its file is written to ``episodes/``; before that the loop
  writes the checkpoint ``ckpt-(k+1)`` (every ``train.checkpoint_every`` episodes) and the
  metrics row, which the `Run` discards if the episode file never came;
* every random number comes from a named stream (`bayes_planet.seeds`): episode ``k`` resets the
  environment and seeds its policy from ``k``, update ``u`` samples its chunks and its noise from
  ``u``, so whichever process does the work draws the same numbers;
* after restoring an older checkpoint (``checkpoint_every > 1`` or a damaged newer one), the
  updates of the episodes already on disk are redone with the replay limited to the episodes
  that existed at the time (`EpisodeReplay.sample`'s ``num_episodes``).

An update with a non-finite loss or gradient is skipped (weights unchanged), counted
(``nonfinite_steps`` in metrics) and after ``train.max_nonfinite_steps`` in a row the run stops
with `bayes_planet.agent.run.NonFiniteError` (with several replicas the step applies zero gradients
instead of none; see `WorldModel`).
"""

import os
import pathlib
import time

import numpy as np
import tensorflow as tf

from bayes_planet import envs, seeds
from bayes_planet.agent.agent import Agent
from bayes_planet.agent.config import target_updates
from bayes_planet.agent.faults import fault_point
from bayes_planet.agent.policy import exploration_noise
from bayes_planet.agent.run import NonFiniteError, read_metrics
from bayes_planet.agent.world_model import as_batch

__all__ = ["Trainer", "learning_curve_figure", "plot_learning_curve"]


class Trainer:
    """The agent loop over a run directory opened for writing.

    Args:
      config: merged `Config` (validated completely before anything is written).
      logdir: run directory (created; resumed if it holds a run of the same config).
    Attributes:
      agent: the `bayes_planet.agent.Agent` (its ``config``, ``run``, ``model``, ``replay``,
        ``updates``, ``collector``).
    """

    def __init__(self, config, logdir):
        self.agent = Agent(logdir, config)
        self.branch_point = self.agent.run.branch_point()

    # -- phases ------------------------------------------------------------------------------
    def target_updates(self, episode_index):
        """Updates done once the training phase before episode ``episode_index`` has run."""
        return target_updates(episode_index, self.agent.config.train, self.branch_point)

    def train(self, num_updates, num_episodes=None):
        """``num_updates`` gradient steps on chunks of the oldest ``num_episodes`` episodes.

        Update ``u`` draws its chunks from the stream ``replay(u)`` and its noise from
        ``train_step(u)``. Returns the mean metrics over the finite steps (NaN if none) plus
        ``nonfinite_steps``; raises `NonFiniteError` after ``train.max_nonfinite_steps``
        non-finite steps in a row.
        """
        a = self.agent
        c, seed = a.config.train, a.config.seed
        if num_updates and a.model.needs_observation_stats():
            # `model.normalize_obs`: fixed from the seed episodes, before the first update.
            seed_episodes = a.replay.episodes()[:c.seed_episodes]
            a.model.set_observation_stats(np.concatenate([e["obs"] for e in seed_episodes]))
        metrics, skipped = [], 0
        for _ in range(num_updates):
            u = int(a.updates.numpy())
            chunk = a.replay.sample(c.batch_size, c.chunk_length,
                                    seeds.numpy_rng(seed, "replay", u), num_episodes)
            args = (as_batch(chunk, "obs"), seeds.tf_seed(seed, "train_step", u),
                    a.replay.transitions(num_episodes))
            if a.value is None:
                step = a.model.train_step(*args)
            else:  # The value model learns from the step's posterior states.
                step, posterior = a.model.train_step(*args, return_posterior=True)
                step.update(a.value.train_step(posterior, seeds.tf_seed(seed, "value_step", u),
                                               args[0]["reward"]))
            a.updates.assign_add(1)
            step = {k: float(v) for k, v in step.items()}
            if step.pop("value_finite", 1.0) < 1.0:
                step["finite"] = 0.0  # Counted like a world-model step with a non-finite loss.
            if step.pop("finite") < 1.0:
                skipped += 1
                a.nonfinite.assign_add(1)
                a.nonfinite_in_a_row.assign_add(1)
                limit = c.max_nonfinite_steps
                if int(a.nonfinite_in_a_row.numpy()) >= limit:
                    raise NonFiniteError(
                        f"training diverged: {limit} updates in a row (up to update {u + 1}) had "
                        f"a non-finite loss or gradient (last loss {step['loss']}); they were "
                        "skipped and nothing non-finite was saved. Lower train.learning_rate "
                        "or raise train.max_nonfinite_steps")
            else:
                a.nonfinite_in_a_row.assign(0)
                metrics.append(step)
            fault_point("train")
        if not num_updates:
            return {}
        keys = metrics[0] if metrics else {"loss": 0}
        out = {k: float(np.mean([m[k] for m in metrics])) if metrics else float("nan")
               for k in keys}
        out["nonfinite_steps"] = skipped
        return out

    def evaluate(self, episode_index):
        """Mean return of ``eval.episodes`` evaluation episodes after ``episode_index`` episodes."""
        config, collector = self.agent.config, self.agent.collector
        returns, video = [], None
        for i in range(config.eval.episodes):
            policy = collector.policy("eval", episode_index, i)
            # Only the first episode's frames become the video: the others are not rendered.
            episode, frames = collector.collect(
                policy, "eval_env_reset", episode_index, i, evaluation=True,
                render=config.eval.video and i == 0, fault="eval")
            returns.append(float(episode["reward"].sum()))
            video = frames if i == 0 else video
        if config.eval.video and video:
            folder = self.agent.logdir / "videos"
            folder.mkdir(exist_ok=True)
            envs.write_video(np.stack(video), folder / f"eval_{episode_index:05d}.gif", fps=20)
        return float(np.mean(returns))

    # -- the loop ----------------------------------------------------------------------------
    def loop(self, progress=True):
        """Runs (or resumes) the loop until ``train.episodes`` episodes are collected.

        Releases the run's lock when done. Returns the metrics rows.
        """
        a = self.agent
        c, replay, collector = a.config, a.replay, a.collector
        total = c.train.episodes
        start = time.perf_counter()
        # Catch up: redo the updates of committed episodes newer than the restored checkpoint.
        for k in range(a.restored or 0, replay.num_episodes):
            a.begin_episode(k)
            if k >= c.train.seed_episodes:
                self.train(max(0, self.target_updates(k) - int(a.updates.numpy())), k)
        done = replay.num_episodes
        if (a.restored or 0) < done and (done % c.train.checkpoint_every == 0 or done == total):
            a.save_checkpoint(done)  # It was lost (deleted, unreadable): the redone state.
        bar = _progress(total, replay.num_episodes, progress)
        while replay.num_episodes < total:
            k = replay.num_episodes
            a.begin_episode(k)
            losses, phase = {}, time.perf_counter()
            if k >= c.train.seed_episodes:
                losses = self.train(max(0, self.target_updates(k) - int(a.updates.numpy())))
                collector.collect_policy.set_exploration_noise(exploration_noise(
                    c.planner, a.env_steps()))
                policy, fault = collector.policy("collect", k), "plan"
            else:
                policy, fault = collector.policy("random", k), "seed_episode"
            updated = time.perf_counter()
            episode, _ = collector.collect(policy, "env_reset", k, fault=fault)
            collected = time.perf_counter()
            record = {"episode": k + 1,
                      "env_steps": a.env_steps(pending=episode),
                      "updates": int(a.updates.numpy()),
                      "return": float(episode["reward"].sum()), **losses,
                      "seconds": collected - start,
                      # Wall-clock of the episode's phases (what a run's time is spent on).
                      "seconds_updates": updated - phase, "seconds_collect": collected - updated}
            if k >= c.train.seed_episodes and (k + 1) % c.eval.every == 0:
                record["eval_return"] = self.evaluate(k + 1)
                self.summarize_open_loop(k + 1)
                record["seconds_eval"] = time.perf_counter() - collected
            if (k + 1) % c.train.checkpoint_every == 0 or k + 1 == total:
                a.save_checkpoint(k + 1)
            a.run.append_metrics(record)
            replay.add(episode)  # The commit.
            self._summarize(record)
            bar.update(record)
        bar.close()
        plot_learning_curve(a.logdir)
        a.close()
        return a.run.read_metrics()

    def summarize_open_loop(self, step, context=5):
        """Open-loop prediction (``context`` observed steps, then the prior) as a video."""
        a = self.agent
        if not a.model.pixels:
            return
        length = min(a.config.train.chunk_length, 50)
        chunk = a.replay.sample(min(4, a.config.train.batch_size), length,
                                seeds.numpy_rng(a.config.seed, "open_loop", step))
        truth, pred = a.model.open_loop(as_batch(chunk, "obs"), context,
                                        seeds.tf_seed(a.config.seed, "open_loop", step))
        frames = np.concatenate([truth[0].numpy(), pred[0].numpy()], 2)  # [T, H, 2W, 3]
        folder = a.logdir / "videos"
        folder.mkdir(exist_ok=True)
        envs.write_video((frames * 255).astype(np.uint8), folder / f"open_loop_{step:05d}.gif",
                         fps=10)
        with a.run.summary_writer().as_default():
            tf.summary.image("open_loop", frames[::5], step=step, max_outputs=10)

    def _summarize(self, record):
        writer = self.agent.run.summary_writer()
        with writer.as_default():
            for key, value in record.items():
                if key != "episode" and value is not None and np.isfinite(value):
                    tf.summary.scalar(key, value, step=record["env_steps"])
        writer.flush()


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
