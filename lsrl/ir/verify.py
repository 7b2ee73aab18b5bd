"""``Graph.verify()``: the invariants every compiler stage keeps, checked (a lint, as torch.fx has).

Each check names the op and the invariant it found broken, in an ``InternalError``: a graph that
breaks one was made by a bug in a pass, never by the user's program (``from_program`` copies only
programs whose nodes passed their own checks).

* **membership**: the input and the output are ops of the graph, and every input of an op is;
* **shapes**: per kind, the weights fit the op's width and its input's (``_check_shapes``);
* **labels**: one label (or None) per component;
* **users**: the ``users`` map holds, for every op, exactly the ops that read it, each with the
  number of edges (``inputs`` entries) it has to it;
* **no dangling ops**: only the output has no users, the graph has no cycle, and every op is
  reached from the output (backwards) and from the input (forwards);
* **running totals**: ``nnz`` is the sum of the ops' non-zero weights (each op's own ``nnz`` that
  of its weights), ``peak_nnz`` at least ``nnz``, and ``kinds`` counts the ops of each kind.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from lsrl.errors import InternalError
from lsrl.ir.ops import WEIGHTS, Op
from lsrl.kinds import CONCAT, INPUT, LINEAR, MULTI, RELU, STATE_KINDS

if TYPE_CHECKING:
    from lsrl.ir.graph import Graph
    from lsrl.numbers import Matrix


def verify(graph: Graph) -> None:
    """Raise ``InternalError`` naming the op and the invariant if ``graph`` breaks one (see above)."""
    _check_membership(graph)
    for op in graph.users:
        _check_shapes(graph, op)
        if len(op.labels) != op.dim:
            _broken(graph, op, f"has {len(op.labels)} labels for {op.dim} components")
    _check_users(graph)
    _check_reachability(graph)
    _check_totals(graph)


def _broken(graph: Graph, op: Op | None, invariant: str) -> None:
    where = f"op %{op.name} ({op.kind})" if op is not None else "the graph"
    raise InternalError(f"graph {graph.name}: {where} {invariant}")


def _check_membership(graph: Graph) -> None:
    for role, op in (("input", graph.input), ("output", graph.output)):
        if op is None or op not in graph.users:
            _broken(graph, op, f"is the graph's {role} but not one of its ops")
    for op in graph.users:
        for x in op.inputs:
            if x not in graph.users:
                _broken(graph, op, f"reads %{x.name}, which is not in the graph")


def _check_shape(graph: Graph, op: Op, weight: str, expected: tuple[int, int]) -> None:
    matrix: Matrix | None = getattr(op.parts, weight)
    if matrix is None:
        _broken(graph, op, f"has no weight {weight}")
    elif matrix.shape2d != expected:
        _broken(graph, op, f"has {weight} of shape {matrix.shape2d}, expected {expected}")


def _check_shapes(graph: Graph, op: Op) -> None:
    """The weights and widths each kind needs: Linear ``A (dim, in)``, ``b (dim, 1)``; the states
    ``A (dim, dim)``, ``B (dim, in)``, ``b`` and ``init (dim, 1)``; ReLU as wide as its input; Multi
    half as wide as an input of even width; Concat picks of its inputs' components, one list per
    input, as many in all as its width; Input reads nothing."""
    if op.kind == INPUT:
        if op.inputs:
            _broken(graph, op, f"is an input but reads {len(op.inputs)} ops")
        if op is not graph.input:
            _broken(graph, op, "is a second input")
        return
    if op.kind == CONCAT:
        _check_gather(graph, op)
        return
    if len(op.inputs) != 1:
        _broken(graph, op, f"reads {len(op.inputs)} ops, expected 1")
    width = op.inputs[0].dim
    if op.kind == LINEAR:
        _check_shape(graph, op, "A", (op.dim, width))
    elif op.kind in STATE_KINDS:
        _check_shape(graph, op, "A", (op.dim, op.dim))
        _check_shape(graph, op, "B", (op.dim, width))
        _check_shape(graph, op, "init", (op.dim, 1))
    elif op.kind == RELU and op.dim != width:
        _broken(graph, op, f"has width {op.dim} but its input has {width}")
    elif op.kind == MULTI and (width % 2 or op.dim != width // 2):
        _broken(graph, op, f"has width {op.dim} but its input has {width} (expected an even width, twice its own)")
    if "b" in WEIGHTS.get(op.kind, ()):
        _check_shape(graph, op, "b", (op.dim, 1))


def _check_gather(graph: Graph, op: Op) -> None:
    if op.parts.picks is None or len(op.parts.picks) != len(op.inputs):
        lists = 0 if op.parts.picks is None else len(op.parts.picks)
        _broken(graph, op, f"has {len(op.inputs)} inputs but {lists} pick lists")
    for x, picks in op.slots:
        bad = [p for p in picks if not 0 <= p < x.dim]
        if bad:
            _broken(graph, op, f"picks components {bad} of %{x.name}, which has {x.dim}")
    picked = sum(len(p) for p in op.picks)
    if picked != op.dim:
        _broken(graph, op, f"has width {op.dim} but picks {picked} components")


def _check_users(graph: Graph) -> None:
    implied: dict[Op, Counter[Op]] = {op: Counter() for op in graph.users}
    for op in graph.users:
        for x in op.inputs:
            implied[x][op] += 1
    for op, edges in graph.users.items():
        if dict(edges) != dict(implied[op]):
            shown = {user.name: count for user, count in edges.items()}
            expected = {user.name: count for user, count in implied[op].items()}
            _broken(graph, op, f"has users {shown}, but the ops' inputs say {expected}")


def _check_reachability(graph: Graph) -> None:
    for op, edges in graph.users.items():
        if not edges and op is not graph.output:
            _broken(graph, op, "has no users but is not the output")
    if graph.users[graph.output]:
        _broken(graph, graph.output, "is the output but has users")
    order = graph.ops()  # every op the output reads, inputs first
    position = {op: index for index, op in enumerate(order)}
    for op in graph.users:
        if op not in position:
            _broken(graph, op, "is not read by the output (dangling)")
    for op in order:
        if any(position[x] >= position[op] for x in op.inputs):
            _broken(graph, op, "is on a cycle")
    reached, frontier = {graph.input}, [graph.input]
    while frontier:  # an op is pushed once, when first reached: at most len(graph) rounds
        for user in graph.users[frontier.pop()]:
            if user not in reached:
                reached.add(user)
                frontier.append(user)
    for op in order:
        if op not in reached:
            _broken(graph, op, "is not reached from the input")


def _check_totals(graph: Graph) -> None:
    for op in graph.users:
        own = sum(getattr(op, w).nnz for w in WEIGHTS.get(op.kind, ()))
        if op.nnz != own:
            _broken(graph, op, f"says it holds {op.nnz} non-zero weights, but its weights hold {own}")
    total = sum(op.nnz for op in graph.users)
    if graph.nnz != total:
        _broken(graph, None, f"counts {graph.nnz} non-zero weights, but its ops hold {total}")
    if graph.peak_nnz < graph.nnz:
        _broken(graph, None, f"has a peak of {graph.peak_nnz} non-zero weights, below the {graph.nnz} it holds")
    kinds = Counter(op.kind for op in graph.users)
    if +graph.kinds != kinds:
        _broken(graph, None, f"counts ops by kind as {dict(+graph.kinds)}, but holds {dict(kinds)}")
