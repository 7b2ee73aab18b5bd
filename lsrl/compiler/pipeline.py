"""``lsrl.compile``: program -> working graph -> preparation fusions -> debranching -> pruning -> layers."""

from __future__ import annotations

from tqdm.auto import tqdm

from lsrl.compiler.compiled import CompiledProgram
from lsrl.compiler.debranch import walk
from lsrl.compiler.fusion import prepare
from lsrl.compiler.prune import prune_unused
from lsrl.compiler.graph import LINEAR, LINSTATE, MULTI, RELU, from_program
from lsrl.errors import GraphError
from lsrl.lang.nodes import Input, Linear, LinState, Multi, ReLU
from lsrl.lang.program import ForEach
from lsrl.numbers import get_backend


def _inputs_first(graph) -> list:
    order, seen, stack = [], set(), [(graph.output, False)]
    while stack:
        op, expanded = stack.pop()
        if expanded:
            order.append(op)
        elif op not in seen:
            seen.add(op)
            stack.append((op, True))
            stack.extend((x, False) for x in op.inputs if x not in seen)
    return order


def _as_layers(path, program_input):
    """The path's ops as lsrl nodes chained from a fresh copy of the program's Input."""
    start = Input(program_input.dim, name=program_input.name, bounds=program_input.bounds)
    layers, previous = [], start
    for op in path[1:]:
        if op.kind == LINEAR:
            layer = Linear(previous, op.A, op.b, name=op.name)
        elif op.kind == RELU:
            layer = ReLU(previous, name=op.name)
        elif op.kind == LINSTATE:
            layer = LinState(previous, op.A, op.B, op.b, op.init, name=op.name)
        elif op.kind == MULTI:
            layer = Multi(previous, name=op.name)
        else:
            raise GraphError(f"internal compiler error: {op} left in the path")
        layers.append(layer)
        previous = layer
    return start, layers


def compile(program: ForEach, backend="exact", progress=None) -> CompiledProgram:
    """Compile a ``ForEach`` to a path graph (a stack of (Gated) Linear RNN layers).

    ``backend="exact"`` keeps rational weights (bit-exact); ``"float"`` computes in float64.
    ``progress``: show a tqdm bar (``None``: only when compilation takes more than a second).
    The user's program is never modified: the compiler works on a copy.
    """
    if not isinstance(program, ForEach):
        raise GraphError(f"lsrl.compile expects a ForEach program, got {type(program).__name__}")
    numbers = get_backend(backend)
    graph = from_program(program, numbers)
    stats: dict = {}
    prepare(graph, _inputs_first(graph), stats)
    with tqdm(
        total=len(graph), desc=f"compiling {program.name}", unit="op", leave=False,
        disable=progress is False, delay=0 if progress else 1.0,
    ) as bar:

        def step():
            if bar.n >= bar.total:
                bar.total = bar.n + 1
            bar.update()

        path = walk(graph, stats, on_step=step)
    start, layers = _as_layers(prune_unused(path, stats), program.input)
    return CompiledProgram(start, layers, numbers, stats, program.name)
