"""The package's shape: a root of at most 10 modules and no import cycle.

The import graph is read from the source (`ast`), every import statement counted wherever it
is, at module level or deferred inside a function: a cycle closed only by a deferred import is
still a cycle (it only moves the failure to call time). ``from package import name`` is an
edge to the submodule where ``name`` is one, else to the package. That importing a submodule
first runs its package's ``__init__`` is not an edge (a package that imports its own
submodules would otherwise always be a cycle). The old paths of moved modules
(`bayes_planet._deprecation.alias`, one release) are not counted in the root.
"""

import ast

from tests.install._package import ALIASES, PACKAGE, module_name

MAX_ROOT_MODULES = 10


def _modules(package):
    """``{dotted name: path}`` of every module of ``package`` (a directory)."""
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def _resolve(name, modules):
    """The module ``name`` names (itself or, for ``pkg.obj``, the longest module prefix)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package=PACKAGE):
    """``{module: {modules it imports}}`` within ``package``, deferred imports included."""
    modules = _modules(package)
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")[:len(name.split(".")) - node.level + is_package]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            else:
                continue
            edges |= {t for t in map(lambda t: _resolve(t, modules), targets)
                      if t is not None and t != name}
        graph[name] = edges
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def root_modules(package=PACKAGE):
    """The modules directly in the package's root, but its ``__init__`` and the old paths."""
    return sorted(p.stem for p in package.glob("*.py")
                  if p.name != "__init__.py" and f"{package.name}.{p.stem}" not in ALIASES)


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_a_cycle_closed_by_a_deferred_import(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub import a\n")
    (package / "sub" / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from . import a\n")
    (package / "c.py").write_text("from pkg.sub import a\n")
    assert cycles(import_graph(package)) == [["pkg.sub.a", "pkg.sub.b"]]


def test_the_root_holds_at_most_ten_modules():
    assert len(root_modules()) <= MAX_ROOT_MODULES, root_modules()
