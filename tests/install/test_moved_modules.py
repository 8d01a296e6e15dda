"""The old import paths of moved modules: each warns and is the moved module itself."""

import ast
import importlib
import subprocess
import sys

import pytest

from tests.install._package import ALIASES, PACKAGE


def test_the_moved_modules_have_aliases():
    assert {"bayes_planet.config", "bayes_planet.cli", "bayes_planet.training"} <= set(ALIASES)


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_an_old_path_warns_and_is_the_moved_module(old, monkeypatch):
    new = ALIASES[old]
    try:
        expected = importlib.import_module(new)
    except ImportError as e:  # the agent's modules, on a layers-only install
        pytest.skip(str(e))
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is expected
    parent, _, leaf = old.rpartition(".")
    assert getattr(sys.modules[parent], leaf) is expected


def test_no_module_of_the_repository_imports_an_old_path():
    """The aliases are for code outside the repository: every import here uses the new paths."""
    root = PACKAGE.parent
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True,
                           check=True).stdout.split()
    found = []
    for rel in files:
        tree = ast.parse((root / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found += [f"{rel}:{node.lineno}: {n}" for n in names if n in ALIASES]
    assert found == []


def test_python_m_an_old_path_runs_the_moved_module():
    result = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-m",
                             "bayes_planet.cli", "--help"], capture_output=True, text=True,
                            cwd=PACKAGE.parent, timeout=300)
    if "MissingExtraError" in result.stderr:
        pytest.skip("the 'agent' extra is not installed")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("usage: bayes-planet")
    assert "bayes_planet.cli moved to bayes_planet.agent.cli" in result.stderr


@pytest.mark.parametrize("old, name", [
    ("bayes_planet.layers.base", "multi_replica_context"), ("bayes_planet.layers.base", "per_example"),
    ("bayes_planet.layers.base", "per_example_sample"), ("bayes_planet.layers.base", "split_seed"),
    ("bayes_planet.layers.base", "standard_normal"), ("bayes_planet.layers.estimators", "rademacher"),
    ("bayes_planet.layers.estimators", "random_signs")])
def test_a_function_moved_to_noise_warns_at_its_old_module(old, name):
    from bayes_planet.layers import noise

    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to bayes_planet.layers.noise"):
        assert getattr(module, name) is getattr(noise, name)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018
