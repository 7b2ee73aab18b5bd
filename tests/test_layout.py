"""The package layout: no import cycle between lsrl's packages nor between its modules, no private name taken
from another module, and the light packages load without torch.

Every import statement of every module under ``lsrl/`` counts, at module level or inside a function (an import at
call time is still a dependency: it only hides the cycle from the interpreter).

Two graphs are checked. Between packages, a module belongs to its package (``lsrl.compiler.pipeline`` ->
``lsrl.compiler``); a top-level module (``lsrl.errors``, ``lsrl.sugar``) is its own node; an import under
``if TYPE_CHECKING:`` counts too (a lower package names no type of a higher one). Between modules, each module is a
node and a package's ``__init__.py`` is the node of the package's name; an import under ``if TYPE_CHECKING:`` does
not count there (it never runs: two modules of one design may name each other's types): ``from lsrl.bench import
standalone`` depends on the module ``lsrl.bench.standalone``, ``from lsrl.bench import load`` on
``lsrl/bench/__init__.py``. Importing ``lsrl.bench.eval.harness`` runs the ``__init__.py`` of ``lsrl.bench`` and
``lsrl.bench.eval`` first, but that is not counted as a dependency on them: a package's ``__init__.py`` re-exports
its modules' names (an edge from it to them), and a module of the package may import its siblings without passing
through it. In both graphs the root package ``lsrl/__init__.py``, whose names load lazily from ``lsrl.api``, is
left out (``from lsrl import targets`` depends on ``lsrl.targets``).

A private name (``_x``; not a dunder like ``__version__``) is imported by no module but its own, within a package
too and by a package's ``__init__.py`` too: a name another module needs, or one an ``__init__.py`` re-exports, is
public and is named without the underscore.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "lsrl"
Graph = dict[str, dict[str, list[str]]]  # node -> {node it imports: [where, as "path:line"]}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path) for path in ROOT.rglob("*.py")}


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


def _typing_only(tree: ast.Module) -> set[int]:
    """The ids of the statements under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) of ``tree``."""
    inside: set[int] = set()
    for block in ast.walk(tree):
        test = block.test if isinstance(block, ast.If) else None
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
                (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
            inside.update(id(node) for statement in block.body for node in ast.walk(statement))
    return inside


Import = tuple[str, str, tuple[str, ...], str, bool]


@functools.cache
def _imports() -> tuple[Import, ...]:
    """``(importer, imported module, imported names, line, typing only)`` for every import statement in lsrl/
    (read once: every test here walks the same sources)."""
    return tuple(_each_import())


def _each_import() -> Iterator[Import]:
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        typing_only = _typing_only(tree)
        for statement in ast.walk(tree):
            where = f"{path.relative_to(ROOT.parent)}:{statement.lineno}" if isinstance(statement, ast.stmt) else ""
            if isinstance(statement, ast.Import):
                for alias in statement.names:
                    yield module, alias.name, (), where, id(statement) in typing_only
            elif isinstance(statement, ast.ImportFrom):
                target = _resolve(module, statement, path.name == "__init__.py")
                names = tuple(alias.name for alias in statement.names)
                yield module, target, names, where, id(statement) in typing_only


def _imported_modules(imported: str, names: tuple[str, ...]) -> list[str]:
    """The lsrl modules an import statement depends on: per name, the submodule it names if there is one, else
    the module it is taken from (the root package left out)."""
    modules = [f"{imported}.{name}" if f"{imported}.{name}" in MODULES else imported for name in names or ("",)]
    return [module for module in dict.fromkeys(modules) if module in MODULES and module != "lsrl"]


def _module_graph(types: bool = False) -> Graph:
    """``{module: {module it imports: [where]}}`` over lsrl's modules (a package as its ``__init__.py``); ``types``:
    with the imports under ``if TYPE_CHECKING:``."""
    graph: Graph = {module: {} for module in MODULES if module != "lsrl"}
    for importer, imported, names, where, typing_only in _imports():
        if importer == "lsrl" or (typing_only and not types):
            continue
        for target in _imported_modules(imported, names):
            if target != importer:
                graph[importer].setdefault(target, []).append(where)
    return graph


def _package_graph() -> Graph:
    """``{package: {package it imports: [where]}}`` over lsrl's packages and top-level modules (the imports under
    ``if TYPE_CHECKING:`` too)."""
    graph: Graph = {}
    for module, edges in _module_graph(types=True).items():
        source = _node(module)
        assert source is not None, module
        graph.setdefault(source, {})
        for target, where in edges.items():
            node = _node(target)
            if node is not None and node != source:
                graph[source].setdefault(node, []).extend(where)
    return graph


def _cycle(graph: Graph) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes (first == last), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
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


def _cycles(graph: Graph) -> list[tuple[list[str], list[str]]]:
    """Per strongly connected part of ``graph`` that has a cycle: ``(its nodes, one cycle through some of them)``
    (found by ``_cycle`` within the part)."""
    reaches = {node: _reachable(graph, node) for node in graph}
    parts = {frozenset(other for other in reaches[node] if node in reaches.get(other, ())) for node in graph}
    found = []
    for part in sorted(parts, key=sorted):
        cycle = _cycle({node: {t: w for t, w in graph[node].items() if t in part} for node in part})
        if cycle:
            found.append((sorted(part), cycle))
    return found


def _reachable(graph: Graph, start: str) -> set[str]:
    """The nodes reached from ``start`` by one edge or more."""
    seen: set[str] = set()
    stack = list(graph.get(start, {}))
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack += list(graph.get(node, {}))
    return seen


def _describe(graph: Graph, cycle: list[str]) -> str:
    return "\n    ".join(f"{a} -> {b} ({', '.join(graph[a][b][:3])})" for a, b in zip(cycle, cycle[1:]))


def test_the_graph_sees_every_package():
    graph = _package_graph()
    for package in ("lsrl.ir", "lsrl.compiler", "lsrl.model", "lsrl.targets", "lsrl.lang", "lsrl.automata",
                    "lsrl.bench", "lsrl.llrnn", "lsrl.programs", "lsrl.experiments", "lsrl.errors"):
        assert package in graph or any(package in edges for edges in graph.values()), package
    assert "lsrl.ir" in graph["lsrl.compiler"]  # a known edge: the passes work on the IR


def test_the_module_graph_resolves_submodules_and_packages():
    """A name that is a submodule is an edge to it; a name of a package's ``__init__.py`` an edge to the package;
    a relative import resolves against the importer."""
    assert _imported_modules("lsrl.bench", ("standalone", "load")) == ["lsrl.bench.standalone", "lsrl.bench"]
    assert _imported_modules("lsrl", ("targets", "compile")) == ["lsrl.targets"]
    assert _imported_modules("numpy", ("array",)) == []
    graph = _module_graph()
    assert "lsrl.compiler.pipeline" in graph["lsrl.compiler"]  # the package re-exports compile
    assert "lsrl.errors" in graph["lsrl.compiler.pipeline"]


def test_imports_under_type_checking_are_told_apart():
    tree = ast.parse("import a\nif TYPE_CHECKING:\n    import b\nif typing.TYPE_CHECKING:\n    from c import d\n"
                     "def f():\n    import e\n")
    inside = _typing_only(tree)
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert {(node.names[0].name, id(node) in inside) for node in imports} == {
        ("a", False), ("b", True), ("d", True), ("e", False)}
    graph = _module_graph()
    assert "lsrl.ir.labels" not in graph["lsrl.ir.ops"]  # its type only: not an edge here
    assert "lsrl.ir.labels" in _module_graph(types=True)["lsrl.ir.ops"]


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": []}, "b": {}}) is None


def test_cycles_finds_one_per_strongly_connected_part():
    graph: Graph = {"a": {"b": []}, "b": {"a": [], "c": []}, "c": {"d": []}, "d": {"c": []}, "e": {"a": []}}
    assert _cycles(graph) == [(["a", "b"], ["a", "b", "a"]), (["c", "d"], ["c", "d", "c"])]
    assert _cycles({"a": {"b": []}, "b": {}}) == []


def test_no_import_cycle_between_packages():
    graph = _package_graph()
    cycle = _cycle(graph)
    if cycle:
        pytest.fail("import cycle between packages:\n    " + _describe(graph, cycle))


def test_no_import_cycle_between_modules():
    graph = _module_graph()
    cycles = _cycles(graph)
    if cycles:
        pytest.fail(f"{len(cycles)} import cycle(s) between modules:\n  " + "\n  ".join(
            f"{len(part)} modules ({', '.join(part)}), one cycle:\n    " + _describe(graph, cycle)
            for part, cycle in cycles))


def test_no_private_name_imported_from_another_module():
    taken = [
        f"{where}: {importer} imports {name} from {imported}"
        for importer, imported, names, where, _ in _imports()
        for name in names
        if name.startswith("_") and not name.endswith("__") and imported != importer
    ]
    assert not taken, "private names imported from another module:\n  " + "\n  ".join(taken)


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
