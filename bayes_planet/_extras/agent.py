"""Imported first by the agent's modules: fails with one line if the ``agent`` extra is missing."""

from bayes_planet._extras import require_agent_extra

require_agent_extra("bayes-planet's agent (training, environments, config, CLI)")
