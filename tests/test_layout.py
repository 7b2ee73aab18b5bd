"""The package layout: no import cycle between lsrl's packages, no private name taken across them,
and the light packages load without torch.

Every import statement of every module under ``lsrl/`` counts, at module level or inside a function
(an import at call time is still a dependency: it only hides the cycle from the interpreter).
A module belongs to its package (``lsrl.compiler.pipeline`` -> ``lsrl.compiler``); a top-level module
(``lsrl.errors``, ``lsrl.sugar``) is its own node, and the package ``lsrl/__init__.py`` is the root,
which re-exports and is left out of the graph.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "lsrl"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _node(module: str) -> str | None:
    """The graph node of a module: ``lsrl.<first part>``; None for the root package and outside lsrl."""
    parts = module.split(".")
    if parts[0] != "lsrl" or len(parts) == 1:
        return None
    return ".".join(parts[:2])


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports():
    """``(importer, imported module, imported names, line)`` for every import statement in lsrl/."""
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        for statement in ast.walk(tree):
            if isinstance(statement, ast.Import):
                for alias in statement.names:
                    yield module, alias.name, (), f"{path.relative_to(ROOT.parent)}:{statement.lineno}"
            elif isinstance(statement, ast.ImportFrom):
                target = _resolve(module, statement, path.name == "__init__.py")
                names = tuple(alias.name for alias in statement.names)
                yield module, target, names, f"{path.relative_to(ROOT.parent)}:{statement.lineno}"


def _package_graph() -> dict:
    """``{package: {package it imports: [where]}}`` over lsrl's packages and top-level modules."""
    graph: dict = {}
    for importer, imported, names, where in _imports():
        source = _node(importer)
        if source is None:
            continue
        graph.setdefault(source, {})
        targets = [imported] if imported != "lsrl" else [f"lsrl.{name}" for name in names]
        for target in targets:
            node = _node(target)
            if node is not None and node != source:
                graph[source].setdefault(node, []).append(where)
    return graph


def _cycle(graph: dict) -> list | None:
    """One cycle of ``graph`` as a list of nodes (first == last), or None."""
    state: dict = {}
    path: list = []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for successor in sorted(graph.get(node, {})):
            if state.get(successor) == "open":
                return path[path.index(successor):] + [successor]
            if successor not in state:
                found = visit(successor)
                if found:
                    return found
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


@pytest.mark.slow
def test_the_graph_sees_every_package():
    graph = _package_graph()
    for package in ("lsrl.ir", "lsrl.compiler", "lsrl.model", "lsrl.targets", "lsrl.lang", "lsrl.automata",
                    "lsrl.bench", "lsrl.llrnn", "lsrl.programs", "lsrl.experiments", "lsrl.errors"):
        assert package in graph or any(package in edges for edges in graph.values()), package
    assert "lsrl.ir" in graph["lsrl.compiler"]  # a known edge: the passes work on the IR


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": []}, "b": {}}) is None


@pytest.mark.slow
def test_no_import_cycle_between_packages():
    graph = _package_graph()
    cycle = _cycle(graph)
    if cycle:
        steps = [f"{a} -> {b} ({', '.join(graph[a][b][:3])})" for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import cycle between packages:\n  " + "\n  ".join(steps))


@pytest.mark.slow
def test_no_private_name_imported_from_another_package():
    taken = [
        f"{where}: {importer} imports {name} from {imported}"
        for importer, imported, names, where in _imports()
        for name in names
        if name.startswith("_") and _node(imported) != _node(importer)
    ]
    assert not taken, "private names imported across packages:\n  " + "\n  ".join(taken)


@pytest.mark.parametrize("module", ["lsrl", "lsrl.targets", "lsrl.model", "lsrl.compiler"])
def test_light_packages_do_not_import_torch(module):
    code = f"import {module}, sys; assert 'torch' not in sys.modules, [m for m in sys.modules if 'torch' in m][:5]"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert result.returncode == 0, result.stderr


def test_every_module_has_a_room_in_the_layout_page():
    """docs/layout.md names every module (a top-level one as ``lsrl.name``, the others by file name)."""
    page = (ROOT.parent / "docs" / "layout.md").read_text()
    missing = [str(path.relative_to(ROOT.parent)) for path in sorted(ROOT.rglob("*.py"))
               if path.name != "__init__.py"
               and not (f"lsrl.{path.stem}" in page if path.parent == ROOT else path.name in page)]
    assert not missing, f"modules docs/layout.md does not place (add them to its table or rooms): {missing}"


def test_import_lsrl_is_light_and_its_first_name_loads_the_whole_api():
    """``import lsrl`` imports no numpy (``lsrl --help`` pays only for it); the first use of one of its names
    loads ``lsrl.api``, whose public names are ``lsrl.__all__``, the same objects."""
    code = ("import sys, lsrl; light = not {'numpy', 'scipy', 'lsrl.api'} & set(sys.modules); lsrl.Input; "
            "import lsrl.api as api; public = sorted(name for name in vars(api) if not name.startswith('_')); "
            "print(light, public == sorted(lsrl.__all__), all(getattr(lsrl, n) is getattr(api, n) for n in public))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert result.stdout.split() == ["True", "True", "True"], result.stdout + result.stderr


@pytest.mark.slow
def test_a_model_reached_through_submodules_finds_its_front_doors():
    """``lsrl.model.extensions`` loads the API when nothing is registered: no ``lsrl.<name>`` is touched here."""
    code = ("from lsrl.lang import ForEach, Input; from lsrl.compiler import compile; "
            "model = compile(ForEach(2 * Input(1))); net = model.to_torch('rnn'); "
            "print(type(net).__name__, type(model.diagonal()).__name__)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert result.stdout.split() == ["BlockModel", "CompiledProgram"], result.stdout + result.stderr
