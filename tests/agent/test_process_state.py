"""Process state that one test could leave behind for another (issue #29's flaky test).

The flaky failure was ``FlushSummaryWriter`` inside an XLA-compiled recurrent cell: a `Run`
left over from an earlier test (a `Trainer` run in test_probes) was garbage-collected while the
cell traced its lazy weight draw, and the finalizer's ``writer.flush()`` ran in the graph being
traced instead of eagerly. Finalizers must never add ops to whatever graph is current.
"""

import gc

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.agent import config as config_lib


@pytest.fixture
def run_with_writer(tmp_path):
    from bayes_planet.agent.run import Run

    run = Run(tmp_path / "run", config_lib.load(["debug"], ["eval.video=false"]))
    tf.summary.scalar  # noqa: B018 (the writer below is the one `Trainer` uses)
    with run.summary_writer().as_default():
        tf.summary.scalar("x", 1.0, step=0)
    return run


@pytest.mark.parametrize("how", ["close", "finalizer"])
def test_closing_a_run_while_a_graph_is_traced_adds_no_op_to_it(run_with_writer, how):
    runs = [run_with_writer]
    del run_with_writer

    @tf.function(jit_compile=True)
    def step(x):
        run = runs.pop()
        if how == "close":
            run.close()
        else:  # The flaky test's way: the last reference dies mid-trace, in a cycle.
            run.cycle = run
            del run
            gc.collect()
        return x * 2.0

    graph = step.get_concrete_function(tf.TensorSpec([2])).graph
    ops = {op.type for op in graph.get_operations()}
    assert not ops & {"FlushSummaryWriter", "CloseSummaryWriter"}, ops
    np.testing.assert_array_equal(step(tf.ones([2])).numpy(), [2.0, 2.0])  # XLA compiles it.


def test_a_finished_trainer_leaves_no_open_writer_or_lock(tmp_path):
    from bayes_planet.agent.training import Trainer

    trainer = Trainer(config_lib.load(["debug"], ["eval.video=false", "train.episodes=2"]),
                      tmp_path / "run")
    trainer.loop(progress=False)
    assert trainer.agent.run.closed



def test_evaluation_renders_only_the_episode_its_video_shows(tmp_path, monkeypatch):
    """``eval.video``: of ``eval.episodes`` episodes only the first is rendered (it is the
    video); rendering every episode gives the same returns (it draws no random number)."""
    from bayes_planet.agent.training import Trainer

    trainer = Trainer(config_lib.load(["debug"], ["eval.episodes=3", "train.episodes=2"]),
                      tmp_path / "run")
    collector, collect = trainer.agent.collector, trainer.agent.collector.collect
    renders, returns = [], []

    def spy(*args, render=False, always=False, **kwargs):
        renders.append(render)
        episode, frames = collect(*args, render=render or always, **kwargs)
        returns.append(float(episode["reward"].sum()))
        return episode, frames

    try:
        monkeypatch.setattr(collector, "collect", spy)
        mean = trainer.evaluate(2)
        assert renders == [True, False, False] and mean == float(np.mean(returns))
        assert (tmp_path / "run" / "videos" / "eval_00002.gif").exists()
        first = returns[:]
        returns.clear()
        monkeypatch.setattr(collector, "collect", lambda *a, **k: spy(*a, always=True, **k))
        trainer.evaluate(2)
        assert returns == first
    finally:  # Rendered: closed here, on this thread, not by the garbage collector.
        collector.env.close()
        collector.eval_env.close()
        trainer.agent.close()
