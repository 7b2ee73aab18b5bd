"""``lsrl.compile``: program -> working graph -> the ``PASSES`` -> layers.

Each stage is a public function from a ``Graph`` to a new ``Graph`` and can be run, printed
(``print(graph)``) and run as a program (``graph.to_program()``) on its own::

    graph = lsrl.compiler.to_graph(program)
    graph = lsrl.compiler.prepare(graph)
    graph = lsrl.compiler.debranch(graph)
    graph = lsrl.compiler.prune(graph)
    model = lsrl.compiler.to_layers(graph)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from lsrl.compiler.debranch import debranch
from lsrl.compiler.fusion import prepare
from lsrl.compiler.progress import OnProgress, progress_bar
from lsrl.compiler.prune import prune
from lsrl.errors import GraphError
from lsrl.ir.graph import Graph, from_program
from lsrl.ir.labels import path_labels
from lsrl.lang.program import ForEach
from lsrl.model.compiled import CompiledProgram
from lsrl.numbers import Backend, get_backend


@dataclass(frozen=True)
class Stage:
    """One pass of the pipeline: ``run(graph, on_progress(done, total))`` returns a new graph.
    A stage that does not ``report`` its own progress is shown with the progress made so far."""

    name: str
    run: Callable[[Graph, Callable[[int, int], None]], Graph]
    reports: bool = False


PASSES = (
    Stage("prepare", lambda graph, on_progress: prepare(graph)),
    Stage("debranch", debranch, reports=True),
    Stage("prune", lambda graph, on_progress: prune(graph)),
)


def to_graph(program: ForEach, backend: str | Backend = "exact") -> Graph:
    """Stage 0: the program as a working graph, its matrices in ``backend``."""
    if not isinstance(program, ForEach):
        raise GraphError(f"lsrl.compile expects a ForEach program, got {type(program).__name__}")
    return from_program(program, get_backend(backend))


def run_passes(graph: Graph, on_progress: OnProgress | None = None, verify: bool = False) -> Graph:
    """The ``PASSES`` in order, each reporting ``on_progress(stage, done, total)``; ``verify``:
    check the graph's invariants (``Graph.verify``) after every stage."""
    so_far = (0, 1)  # the progress shown while a stage that reports none runs

    def report(stage: str, done: int, total: int) -> None:
        nonlocal so_far
        so_far = (done, total)
        if on_progress is not None:
            on_progress(stage, done, total)

    if verify:
        graph.verify()
    for stage in PASSES:
        if not stage.reports:
            report(stage.name, *so_far)
        graph = stage.run(graph, partial(report, stage.name))
        if verify:
            graph.verify()
    return graph


def to_layers(graph: Graph) -> CompiledProgram:
    """Last stage: a path graph as a ``CompiledProgram``, its layers lsrl nodes chained from a new Input."""
    if not graph.is_path():
        raise GraphError(f"to_layers needs a path graph; {graph.name} still branches (run debranch first)")
    program = graph.to_program()  # a path has no Concat: its nodes, inputs first, are the Input and the layers
    stats = dict(graph.stats, peak_nonzeros=graph.peak_nnz)
    labels = path_labels(graph.path())
    model = CompiledProgram(program.input, program.nodes[1:], graph.backend, stats, graph.name, labels)
    model.entangled = frozenset(graph.entangled)
    return model


def compile(program: ForEach, backend: str | Backend = "exact", progress: bool | None = None) -> CompiledProgram:
    """Compile a ``ForEach`` to a path graph (a stack of (Gated) Linear RNN layers).

    ``backend="exact"`` keeps rational weights (bit-exact); ``"float"`` computes in float64.
    ``progress``: show a tqdm bar (``None``: only when compilation takes more than a second).
    The user's program is never modified: the compiler works on a copy.
    """
    graph = to_graph(program, backend)
    with progress_bar(f"compiling {program.name}", len(graph), progress) as on_progress:
        graph = run_passes(graph, on_progress)
    model = to_layers(graph)
    # the widths patches need (a validated program's nodes all have one)
    model.node_widths = {program.names[node]: dim for node in program.nodes if (dim := node.dim) is not None}
    return model
