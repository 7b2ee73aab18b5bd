"""Habits: the command line starts without torch where it needs none, every imported package
is declared, ruff passes on the package, and every public function has type hints."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lsrl"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
PROGRAM = '''
import lsrl
bits = lsrl.Input(1, name="bits")
counter = lsrl.ForEach(lsrl.LinState(2 * bits - 1, [[1]], [[1]]))
'''

# Runs `lsrl ARGS...` in a fresh interpreter; prints the stack that first imported torch, if any did.
CLI_RUN = '''
import sys, traceback

class WatchTorch:
    stack = None
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and WatchTorch.stack is None:
            WatchTorch.stack = "".join(traceback.format_stack())
        return None

sys.meta_path.insert(0, WatchTorch())
from lsrl.cli import main
code = main.main(sys.argv[1:], prog_name="lsrl", standalone_mode=False)
print("exit code", code or 0)
print("torch imported by:\\n" + WatchTorch.stack if WatchTorch.stack else "torch not imported")
'''


def _lsrl_in_a_fresh_interpreter(args: list[str], folder: Path) -> str:
    result = subprocess.run([sys.executable, "-c", CLI_RUN, *args], cwd=folder, capture_output=True, text=True,
                            env=ENV, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# Commands that need no torch: the help texts, compiling to the path form and running it. The ones that do
# need it: inspect, compile --target ARCH, bench build and every llrnn command (not their --help).
@pytest.mark.parametrize("args", [
    ["--help"], ["--version"], ["llrnn", "--help"], ["compile", "--help"], ["run", "--help"], ["demo", "--help"],
    ["experiment", "noise", "--help"], ["bench", "--help"], ["compile", "prog.py", "-o", "m"],
    ["run", "m", "--input", "xs.txt"],
], ids=" ".join)
@pytest.mark.slow
def test_commands_that_need_no_torch_do_not_import_it(args, tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    if args[0] == "run" and "--help" not in args:
        _lsrl_in_a_fresh_interpreter(["compile", "prog.py", "-o", "m"], tmp_path)
        (tmp_path / "xs.txt").write_text("1\n1\n0\n")
    output = _lsrl_in_a_fresh_interpreter(args, tmp_path)
    assert "exit code 0" in output, output
    # on failure the output holds the stack of whatever imported torch
    assert "torch not imported" in output, output


# What `lsrl --version` and every --help must not import: the numerical and ML stacks and lsrl's own heavy
# packages (each command imports them when it runs). A check of the imports, not of the time: the time is
# measured by benchmarks/cli_startup.py.
HEAVY_MODULES = ("numpy", "scipy", "gmpy2", "torch", "transformers", "matplotlib", "onnx", "onnxruntime",
                 "safetensors", "networkx", "tqdm", "lsrl.api", "lsrl.lang", "lsrl.compiler", "lsrl.model",
                 "lsrl.targets", "lsrl.hf", "lsrl.llrnn.train", "lsrl.llrnn.explicit", "lsrl.llrnn.tasks",
                 "lsrl.llrnn.cell")  # lsrl.llrnn.settings, the options of lsrl llrnn, is light
HELP_RUN = f'''
import sys
from lsrl.cli import main
code = main.main(sys.argv[1:], prog_name="lsrl", standalone_mode=False)
print("exit code", code or 0)
print("heavy modules:", sorted(name for name in {HEAVY_MODULES!r} if name in sys.modules))
'''


def _help_commands(group: click.Group, path: tuple[str, ...] = ()) -> list[list[str]]:
    """``--help`` of ``group`` and of every command under it (``lsrl llrnn``'s too)."""
    commands = [[*path, "--help"]]
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        commands += (_help_commands(command, (*path, name)) if isinstance(command, click.Group)
                     else [[*path, name, "--help"]])
    return commands


def test_the_help_walk_reaches_every_command():
    from lsrl.cli import main

    walked = _help_commands(main)
    assert ["compile", "--help"] in walked and ["bench", "eval-all", "--help"] in walked
    assert ["llrnn", "--help"] in walked and ["experiment", "noise", "--help"] in walked
    assert ["llrnn", "reproduce", "--help"] in walked


@pytest.mark.parametrize("args", [["--version"], *_help_commands(__import__("lsrl.cli").cli.main)], ids=" ".join)
def test_version_and_every_help_import_no_heavy_module(args, tmp_path):
    result = subprocess.run([sys.executable, "-c", HELP_RUN, *args], cwd=tmp_path, capture_output=True, text=True,
                            env=ENV, timeout=300)
    assert result.returncode == 0 and "exit code 0" in result.stdout, result.stdout + result.stderr
    assert "heavy modules: []" in result.stdout, result.stdout


def test_the_options_of_the_command_line_are_the_libraries_names():
    """The choices ``lsrl compile`` offers without importing the targets are theirs."""
    import lsrl.hf
    import lsrl.targets
    from lsrl import cli

    assert cli.ARCHITECTURES == lsrl.targets.ARCHITECTURES and cli.STOCK == lsrl.targets.STOCK
    assert cli.HF_ARCHITECTURES == lsrl.hf.ARCHITECTURES


@pytest.mark.slow
def test_the_modules_of_demo_and_experiment_noise_need_no_torch():
    modules = ["lsrl.demo", "lsrl.plot", "lsrl.experiments.noise"]
    check = f"import sys, {', '.join(modules)}; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                            env=ENV, timeout=300)
    assert result.stdout.strip() == "False", result.stdout + result.stderr


def test_lsrl_bench_eval_offers_the_harness_methods_and_tiers():
    from lsrl.bench.eval.methods import METHODS
    from lsrl.bench.tiers import FOLDER_TIERS, TIERS
    from lsrl.cli import BUILD_TIERS, EVAL_METHODS, EVAL_TIERS

    assert EVAL_METHODS == tuple(METHODS) and EVAL_TIERS == TIERS and BUILD_TIERS == (*FOLDER_TIERS, "all")


def test_the_llrnn_settings_name_what_the_registries_hold():
    """lsrl.llrnn.settings holds the names the command line offers, without torch; they are the registries'."""
    from lsrl.llrnn.explicit import CONTROLLERS
    from lsrl.llrnn.settings import CONTROLLER_NAMES, MODEL_NAMES, TASK_NAMES
    from lsrl.llrnn.tasks import TASKS
    from lsrl.llrnn.train import MODELS

    assert TASK_NAMES == tuple(TASKS) and MODEL_NAMES == tuple(MODELS) and CONTROLLER_NAMES == tuple(CONTROLLERS)


def test_lsrl_llrnn_help_lists_the_llrnn_commands_as_they_describe_themselves():
    from lsrl.cli import LLRNN
    from lsrl.llrnn.cli import llrnn

    assert LLRNN.help == llrnn.help and sorted(LLRNN.summaries) == sorted(llrnn.commands)
    for name, summary in LLRNN.summaries.items():
        listed = click.Command(name, help=summary)
        for limit in range(10, 130):
            assert listed.get_short_help_str(limit) == llrnn.commands[name].get_short_help_str(limit), name
    assert LLRNN.get_command(click.Context(LLRNN), "train") is llrnn.commands["train"]


def _normalised(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_normalised(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group()) for requirement in requirements}


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DEPENDENCIES = _requirement_names(PROJECT["dependencies"])
EXTRAS = {extra: _requirement_names(requirements) for extra, requirements in PROJECT["optional-dependencies"].items()}


def _with_extras(extra: str) -> set[str]:
    """The distributions ``lsrl[extra]`` installs beside the dependencies (extras may name ``lsrl[...]``)."""
    names = set()
    for requirement in PROJECT["optional-dependencies"][extra]:
        included = re.fullmatch(r"lsrl\[(.*)\]", requirement.replace(" ", ""))
        names |= set().union(*map(_with_extras, included.group(1).split(","))) if included else (
            _requirement_names([requirement]))
    return names


def _imports(path: Path) -> dict[str, bool]:
    """Top-level module names that ``path`` imports -> whether one import of it runs on import of ``path``
    (not inside a function, not under ``if TYPE_CHECKING``)."""
    found: dict[str, bool] = {}

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
                [node.module] if node.level == 0 else [])
            for module in modules:
                top = module.split(".")[0]
                found[top] = found.get(top, False) or not lazy
        lazy = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) or (
            isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
        for child in ast.iter_child_nodes(node):
            visit(child, lazy)

    visit(ast.parse(path.read_text(), str(path)), lazy=False)
    return found


def _third_party(folder: Path, local: set[str]) -> dict[str, list[str]]:
    """Third-party distributions imported under ``folder`` -> 'path (module-level|lazy)' of each import."""
    distributions = importlib.metadata.packages_distributions()
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for module, eager in _imports(path).items():
            if module in sys.stdlib_module_names or module in local:
                continue
            assert module in distributions, f"{path}: imports {module}, which no installed distribution provides"
            for distribution in distributions[module]:
                found.setdefault(_normalised(distribution), []).append(
                    f"{path.relative_to(ROOT)} ({'module-level' if eager else 'lazy'})")
    return found


@pytest.mark.slow
def test_every_package_the_library_imports_is_declared():
    undeclared = []
    for distribution, places in _third_party(PACKAGE, local={"lsrl", "__future__"}).items():
        eager = any(place.endswith("(module-level)") for place in places)
        declared = DEPENDENCIES if eager else DEPENDENCIES.union(*EXTRAS.values())  # lazy: an extra may do
        if distribution not in declared:
            undeclared.append(f"{distribution}: imported by {', '.join(places)}")
    assert not undeclared, "not declared in pyproject.toml:\n" + "\n".join(undeclared)


@pytest.mark.slow
def test_the_test_extra_installs_what_the_tests_import():
    local = {"lsrl", "tests", "__future__"} | {path.stem for path in (ROOT / "tests").glob("*.py")}
    declared = DEPENDENCIES | _with_extras("test")
    undeclared = {distribution: places for distribution, places in _third_party(ROOT / "tests", local).items()
                  if distribution not in declared}
    assert not undeclared, f"neither a dependency nor in the test extra: {undeclared}"
    assert {"ruff", "mypy", "mkdocs-material", "mkdocstrings", "transformers"} <= _with_extras("test")


def test_ruff_passes_on_the_package():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "lsrl"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def _public_functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Module-level functions and the methods of module-level (and nested) public classes; not functions
    defined inside functions. Public: no leading underscore, or a dunder that takes parameters."""
    found = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _is_public(node):
                found.append(node)
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                visit(node.body)
            elif isinstance(node, ast.If | ast.Try):  # e.g. a definition chosen by a version check
                visit(node.body + node.orelse)

    visit(tree.body)
    return found


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [argument for argument in (arguments.vararg, arguments.kwarg) if argument is not None]
    return [argument for argument in every if argument.arg not in ("self", "cls")]


def _is_public(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    if function.name.startswith("__") and function.name.endswith("__"):
        return bool(_parameters(function))
    return not function.name.startswith("_")


def _missing_hints(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    missing = [argument.arg for argument in _parameters(function) if argument.annotation is None]
    return missing + (["return"] if function.returns is None else [])


def unannotated_public_functions(folder: Path = PACKAGE) -> list[str]:
    """``path:line name (missing: ...)`` for every public function under ``folder`` that lacks a hint."""
    offenders = []
    for path in sorted(folder.rglob("*.py")):
        for function in _public_functions(ast.parse(path.read_text(), str(path))):
            if missing := _missing_hints(function):
                offenders.append(f"{path.relative_to(ROOT)}:{function.lineno} {function.name} "
                                 f"(missing: {', '.join(missing)})")
    return offenders


def test_the_hint_checker_finds_what_is_missing():
    tree = ast.parse("def f(a: int, *rest, b) -> int: ...\n"
                     "class C:\n    def __init__(self, x: int): ...\n    def __len__(self): ...\n"
                     "    def _private(self, y): ...\n    def g(self) -> None:\n        def inner(z): ...\n"
                     "class _Hidden:\n    def h(self, w): ...\n")
    assert {function.name: _missing_hints(function) for function in _public_functions(tree)} == {
        "f": ["b", "rest"], "__init__": ["return"], "g": []}


@pytest.mark.slow
def test_every_public_function_has_type_hints():
    offenders = unannotated_public_functions()
    assert not offenders, f"{len(offenders)} public functions without full type hints:\n" + "\n".join(offenders)


# ---- kinds: one enum, never its names as strings ----------------------------------------------------------

KIND_NAMES = {"Input", "Linear", "ReLU", "LinState", "ReLUState", "Concat", "Multi"}  # lsrl.kinds.Kind's values


def _is_kind_name(node: ast.expr) -> bool:
    """A string literal naming a kind, or a tuple, list or set of literals one of which does."""
    if isinstance(node, ast.Constant):
        return node.value in KIND_NAMES
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(_is_kind_name(item) for item in node.elts)


def kind_names_as_strings(source: str) -> list[int]:
    """The lines of ``source`` that compare with a kind's name as a string (``x.kind == "Linear"``,
    ``kind in ("LinState", "ReLUState")``) or key a table by one (``{"Linear": ...}``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(map(_is_kind_name, [node.left, *node.comparators])):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(key is not None and _is_kind_name(key) for key in node.keys):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_kind_string_finder_finds_comparisons_and_tables():
    source = ('a = layer.kind == "Linear"\nb = kind in ("LinState", "ReLUState")\nc = {"Multi": 1}\n'
              'd = edge.kind == "input"\ne = layer.kind is Kind.RELU\nf = "ReLU" != kind\ng = op("Concat", [])\n')
    assert kind_names_as_strings(source) == [1, 2, 3, 6]


@pytest.mark.slow
def test_kinds_are_compared_as_the_enum_never_as_strings():
    """Every comparison of a node's, op's or layer's kind goes through ``lsrl.kinds.Kind``."""
    from lsrl.kinds import Kind

    assert KIND_NAMES == {kind.value for kind in Kind}
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
                 for line in kind_names_as_strings(path.read_text())]
    assert not offenders, "kinds compared as strings (use lsrl.kinds.Kind):\n" + "\n".join(offenders)


# ---- files a reader can hold in mind ---------------------------------------------------------------------------

MAX_FILE_LINES = 800


def test_no_module_of_the_package_is_over_800_lines():
    """A module that outgrows this is two subjects: split it along the seam (``docs/layout.md`` lists each)."""
    long = {path.relative_to(ROOT).as_posix(): lines for path in sorted(PACKAGE.rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > MAX_FILE_LINES}
    assert not long, f"modules over {MAX_FILE_LINES} lines: {long}"
