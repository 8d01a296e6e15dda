"""The old import paths of moved modules: each warns and is the moved module itself."""

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bayes_planet"


def alias_target(path):
    """The new path of the alias module at ``path`` (its body: a docstring, the import of
    `bayes_planet._deprecation.alias` and ``alias(__name__, "<new path>")``), or None."""
    body = ast.parse(path.read_text()).body
    if len(body) != 3 or not isinstance(body[0], ast.Expr):
        return None
    imported, call = body[1], body[2]
    if not (isinstance(imported, ast.ImportFrom) and imported.module == "bayes_planet._deprecation"
            and isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
            and getattr(call.value.func, "id", None) == "alias"):
        return None
    return call.value.args[1].value


def module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


ALIASES = {module_name(p): t for p in sorted(PACKAGE.rglob("*.py"))
           if (t := alias_target(p)) is not None}


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
