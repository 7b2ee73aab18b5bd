"""``lsrl.compile``: program -> working graph -> prepare -> debranch -> prune -> layers.

Each stage is a public function from a ``Graph`` to a new ``Graph`` and can be run, printed
(``print(graph)``) and run as a program (``graph.to_program()``) on its own::

    graph = lsrl.compiler.to_graph(program)
    graph = lsrl.compiler.prepare(graph)
    graph = lsrl.compiler.debranch(graph)
    graph = lsrl.compiler.prune(graph)
    model = lsrl.compiler.to_layers(graph)
"""

from __future__ import annotations

from tqdm.auto import tqdm

from lsrl.model.compiled import CompiledProgram
from lsrl.compiler.debranch import debranch
from lsrl.compiler.fusion import prepare
from lsrl.ir.graph import Graph, from_program
from lsrl.ir.labels import path_labels
from lsrl.compiler.prune import prune
from lsrl.errors import GraphError
from lsrl.lang.program import ForEach
from lsrl.numbers import get_backend


def to_graph(program: ForEach, backend="exact") -> Graph:
    """Stage 0: the program as a working graph, its matrices in ``backend``."""
    if not isinstance(program, ForEach):
        raise GraphError(f"lsrl.compile expects a ForEach program, got {type(program).__name__}")
    return from_program(program, get_backend(backend))


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


def compile(program: ForEach, backend="exact", progress=None) -> CompiledProgram:
    """Compile a ``ForEach`` to a path graph (a stack of (Gated) Linear RNN layers).

    ``backend="exact"`` keeps rational weights (bit-exact); ``"float"`` computes in float64.
    ``progress``: show a tqdm bar (``None``: only when compilation takes more than a second).
    The user's program is never modified: the compiler works on a copy.
    """
    graph = to_graph(program, backend)
    with tqdm(
        total=len(graph), desc=f"compiling {program.name}", unit="op", leave=False,
        disable=progress is False, delay=0 if progress else 1.0,
    ) as bar:

        shown = []  # the stages shown so far

        def show(stage, done=0, total=1):
            bar.set_postfix_str(stage, refresh=False)
            bar.total = total
            bar.update(done - bar.n)
            if stage not in shown:
                shown.append(stage)
                if not bar.disable and bar.format_dict["elapsed"] >= bar.delay:  # never before the bar's delay
                    bar.refresh()

        show("prepare")
        graph = prepare(graph)
        graph = debranch(graph, lambda done, total: show("debranch", done, total))
        show("prune", bar.total, bar.total)
        graph = prune(graph)
    return to_layers(graph)
