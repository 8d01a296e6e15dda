"""Test helpers that read the package's source: its modules and the old paths of moved ones
(not collected by pytest)."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "bayes_planet"


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


def module_name(path, package=PACKAGE):
    """The dotted name of the module at ``path`` in ``package`` (a directory)."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: ``{old path: new path}`` of the moved modules.
ALIASES = {module_name(p): t for p in sorted(PACKAGE.rglob("*.py"))
           if (t := alias_target(p)) is not None}
