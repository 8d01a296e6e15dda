"""Imported first by the YAML config loader: fails with one line if PyYAML is missing."""

from bayes_planet._extras import require_agent_extra

require_agent_extra("bayes-planet's YAML config loader", modules=("yaml",))
