"""Benchmarks: ``python -m benchmarks.<name>``.

Their modules import TensorFlow at the top; it is imported here first without its start-up
lines that are not errors (and gym's banner, where the agent stack is installed), as the
``bayes-planet`` command and the experiment scripts do."""

import bayes_planet

bayes_planet.quiet_import(*bayes_planet.AGENT_STACK)
