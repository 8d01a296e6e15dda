"""The Bayesian PlaNet agent: training, evaluation and probes of a world model on DeepMind
Control (or Gymnasium) tasks, built on the layer library (`bayes_planet.layers`).

Its modules, from the command line down:

    cli          the ``bayes-planet`` command (train, eval, probe, demo)
    training     `Trainer`: the training loop of a run
    agent        `Agent`: a run directory's strategy, environments, replay, models, policies
    probes       ``bayes-planet probe``: what the latent state knows
    collection   `Collector`: seeded episodes through the planner policies
    policy       the planner policies (CEM over the world model's imagination)
    world_model  `WorldModel`: encoder, RSSM, decoder, reward head and their losses
    rssm         the recurrent state-space model (its transition layers from the layer library)
    networks     the convolutional encoder and decoder, the MLP heads
    value        the optional latent critic and policy (value-aware planning)
    replay       the episode store and its chunk sampling
    run          a run directory: lock, config.yaml, checkpoints, metrics
    config       the agent's configuration (``configs.yaml``), its ranges and older layouts
    faults       crash points for the tests

Everything here needs the ``agent`` extra (``pip install 'bayes-planet[agent]'``, Python
3.10-3.11): importing this package, or any of its modules, without it fails with one line
naming the extra.
"""

import bayes_planet._extras.agent  # noqa: F401  isort: skip  (needs the 'agent' extra)

__all__ = ["Agent", "check_config"]


def __getattr__(name):
    """``bayes_planet.agent.Agent`` (and ``check_config``): `bayes_planet.agent.agent`'s, imported
    on first use, so that importing the package (e.g. for its config) stays light."""
    if name in __all__:
        from bayes_planet.agent import agent

        return getattr(agent, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
