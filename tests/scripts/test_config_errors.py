"""A script's config error (`bayes_planet.yaml_config.run_script`) ends it in one stderr line with
exit status 2, not a traceback; end to end through experiments/gp.py."""

import pytest

from tests.scripts import _experiments


def test_a_config_error_ends_a_script_in_one_line(capsys):
    """`yaml_config.run_script`: a script's `ConfigError` is one stderr line and exit status 2
    (argparse's), not a traceback; otherwise main's value comes back. End to end: a script
    with an unknown preset (experiments/gp.py, layers-only)."""
    import subprocess
    import sys

    from bayes_planet import yaml_config

    def bad(argv):
        raise yaml_config.ConfigError("Expected a positive integer. Received: seeds=0")

    with pytest.raises(SystemExit) as exit_info:
        yaml_config.run_script(bad)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(": error: Expected a positive integer. Received: seeds=0\n")
    assert err.count("\n") == 1
    assert yaml_config.run_script(lambda argv: {"argv": argv}, ["x"]) == {"argv": ["x"]}
    done = subprocess.run([sys.executable, str(_experiments.EXPERIMENTS / "gp.py"), "--preset",
                           "no_such_preset", "--out", "unused"], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("gp.py: error: ") and "no_such_preset" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
