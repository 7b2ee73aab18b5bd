"""Stage 3: drop the components of every layer that nothing downstream reads or that are constant.

Bypasses carry whole vectors, merged LinStates carry every state, a branch such as ``x * 0``
leaves rows that are 0 at every step, and a bias carried past layers is a unit that holds one
number. On the finished path a forward sweep finds the components that are constant whatever the
input, a backward liveness sweep finds the output components each layer really needs (a reader
folds a constant into its bias instead of reading it), and a last forward sweep rebuilds the
layers with only those rows (and the matching columns of the next layer).
"""

from __future__ import annotations

from lsrl.compiler.fusion import (
    fuse_linear_linear, fuse_linear_linstate, fuse_linstate_linstate, fuse_stateless_linstate,
)
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from lsrl.ir.graph import Graph
from lsrl.ir.ops import Op, OpParts
from lsrl.kinds import LINEAR, LINSTATE, MULTI, RELU, RELUSTATE, STATE_KINDS
from lsrl.errors import GraphError, InternalError

if TYPE_CHECKING:
    from lsrl.numbers import Matrix


def _columns(matrix: Matrix, rows: Iterable[int]) -> set[int]:
    return {j for i in rows for j in matrix.row(i)}


def _reads_only(matrix: Matrix, row: int, allowed: Collection[int]) -> bool:
    return all(j in allowed for j in matrix.row(row))


def _always_zero(layer: Op, zero_in: set[int]) -> set[int]:
    """Output components of ``layer`` that are 0 at every step, given the input's such components."""
    if layer.kind == RELU:
        return set(zero_in)
    if layer.kind == MULTI:
        return {i for i in range(layer.dim) if i in zero_in or layer.dim + i in zero_in}
    if layer.kind == LINEAR:
        return {i for i in range(layer.dim) if i not in layer.b.nonzero_rows() and _reads_only(layer.A, i, zero_in)}
    # a LinState or ReLUState (ReLU(0) = 0): the largest set of states with no initial value, bias or
    # drive that only read each other
    zero = {
        i for i in range(layer.dim)
        if i not in layer.init.nonzero_rows() and i not in layer.b.nonzero_rows() and _reads_only(layer.B, i, zero_in)
    }
    while True:  # each round drops a unit or ends: at most layer.dim rounds
        kept = {i for i in zero if _reads_only(layer.A, i, zero)}
        if kept == zero:
            return zero
        zero = kept


def _constants(layer: Op, known: dict[int, Any], zero: set[int]) -> dict[int, Any]:
    """Output components of ``layer`` that hold one value at every step (component -> value), given
    those of its input (``known``) and its always-0 ones (``zero``). A state counts only from step 1
    on, which is all a reader sees: one whose update does not read the state (``A`` row 0)."""
    values: dict[int, Any] = dict.fromkeys(zero, 0)
    if layer.kind == RELU:
        values.update((i, max(c, 0)) for i, c in known.items())
    elif layer.kind == MULTI:
        values.update((i, known[i] * known[layer.dim + i]) for i in range(layer.dim)
                      if i in known and layer.dim + i in known)
    else:
        weights = layer.A if layer.kind == LINEAR else layer.B
        recurrent = set() if layer.kind == LINEAR else layer.A.nonzero_rows()
        for i in range(layer.dim):
            row = weights.row(i)
            if i in values or i in recurrent or not row.keys() <= known.keys():
                continue
            value = sum((w * known[j] for j, w in row.items()), layer.b.entry(i, 0))
            values[i] = max(value, 0) if layer.kind == RELUSTATE else value
    return values


def _state_closure(A: Matrix, rows: Iterable[int], zero: Collection[int]) -> set[int]:
    """State components that ``rows`` depend on through the recurrence ``A`` (0 ones excepted)."""
    closed, frontier = set(rows), list(rows)
    while frontier:  # a component is pushed once, when first reached: at most A's width rounds
        for j in A.row(frontier.pop()):
            if j not in closed and j not in zero:
                closed.add(j)
                frontier.append(j)
    return closed


def _fed_by_rigid_layer(layers: Sequence[Op], index: int) -> bool:
    """Whether the ReLUs before layer ``index`` lead back to a LinState or the Input: those may keep
    components nobody asked for (a state's closure, the whole input), which a Multi cannot pair."""
    index -= 1
    while index >= 0 and layers[index].kind == RELU:  # index falls by 1: at most len(layers) rounds
        index -= 1
    return index < 0 or layers[index].kind in STATE_KINDS


def _needed_components(layers: Sequence[Op], zeros: Sequence[set[int]],
                       constants: Sequence[dict[int, Any]]) -> list[set[int]]:
    """For each layer, the output components read downstream (at least one, so no layer is empty).

    A constant component is never read (its reader folds it into its bias), except by a Multi,
    whose halves must stay paired. A state that other states read stays unless it is always 0:
    its first value is its initial one.
    """
    needed_by_layer: list[set[int]] = [set()] * len(layers)
    needed = set(range(layers[-1].dim))
    for index in range(len(layers) - 1, -1, -1):
        layer = layers[index]
        if layer.kind == MULTI and _fed_by_rigid_layer(layers, index):
            needed = set(range(layer.dim))
        if layer.kind in STATE_KINDS:
            needed = _state_closure(layer.A, needed, zeros[index])
        needed = needed or {0}
        needed_by_layer[index] = needed
        constant_in = constants[index - 1].keys() if index else set()
        if layer.kind == LINEAR:
            needed = _columns(layer.A, needed) - constant_in
        elif layer.kind in STATE_KINDS:
            needed = _columns(layer.B, needed) - constant_in
        elif layer.kind == MULTI:
            needed = needed | {layer.dim + i for i in needed}
    return needed_by_layer


def _rebuilt(layer: Op, previous: Op, previous_live: list[int], keep: list[int], folded: dict[int, Any]) -> Op:
    """``layer`` reading ``previous`` (which holds ``previous_live``) with only the rows ``keep``;
    the constant inputs ``folded`` (component -> value) that ``previous`` no longer holds are
    added to the bias."""
    labels = [layer.labels[k] for k in keep]
    if layer.kind not in (LINEAR, *STATE_KINDS):
        return Op(layer.kind, [previous], len(keep), layer.name, labels=labels)
    weights = (layer.A if layer.kind == LINEAR else layer.B).take_rows(keep)
    shift = [(r, 0, sum(w * folded[j] for j, w in weights.row(r).items() if j in folded))
             for r in range(len(keep))]
    shift = [entry for entry in shift if entry[2] != 0]
    b = layer.b.take_rows(keep) + layer.b.backend.from_entries(shift, (len(keep), 1), is_vector=True)
    if layer.kind == LINEAR:
        return Op(LINEAR, [previous], len(keep), layer.name, OpParts(A=weights.take_columns(previous_live), b=b),
                  labels)
    state = OpParts(A=layer.A.take_rows(keep).take_columns(keep), B=weights.take_columns(previous_live), b=b,
                    init=layer.init.take_rows(keep))
    return Op(layer.kind, [previous], len(keep), layer.name, state, labels)


def prune(graph: Graph) -> Graph:
    """Stage 3: the path ``graph`` rebuilt without unread and constant components."""
    if not graph.is_path():
        raise GraphError(f"prune needs a path graph; {graph.name} still branches (run debranch first)")
    path = graph.path()
    start, layers = path[0], path[1:]
    pruned = Graph(graph.backend, graph.name)
    pruned.stats, pruned.peak_nnz, pruned.entangled = dict(graph.stats), graph.peak_nnz, set(graph.entangled)
    pruned.input = previous = pruned.add(
        Op(start.kind, [], start.dim, start.name, start.parts, start.labels)
    )
    zeros: list[set[int]] = []
    constants: list[dict[int, Any]] = []
    zero_in: set[int] = set()
    known: dict[int, Any] = {}
    for layer in layers:
        zero_in = _always_zero(layer, zero_in)
        known = _constants(layer, known, zero_in)
        zeros.append(zero_in)
        constants.append(known)
        # a state that reads an always-0 one drops it: a patched value would not reach the reader
        pruned.entangled |= {label.node for label in (layer.labels[i] for i in zero_in) if label is not None}
    previous_live, previous_labels = list(range(start.dim)), start.labels
    previous_constants: dict[int, Any] = {}
    for layer, needed, known in zip(layers, _needed_components(layers, zeros, constants) if layers else [], constants):
        if layer.kind == RELU:  # element-wise: it keeps whatever its input kept
            keep = previous_live
        elif layer.kind == MULTI:
            keep = [i for i in previous_live if i < layer.dim]
            if previous_live != keep + [layer.dim + i for i in keep]:
                raise InternalError(f"pruning unpaired the halves of Multi {layer.name}")
        else:
            keep = sorted(needed)
        folded = {j: c for j, c in previous_constants.items() if j not in previous_live}
        # a node patched to another value would not reach the readers of a folded unit
        pruned.entangled |= {label.node for label in (previous_labels[j] for j in folded) if label is not None}
        pruned.count("prune_unused", layer.dim - len(keep))
        previous = pruned.add(_rebuilt(layer, previous, previous_live, keep, folded))
        previous_live, previous_constants, previous_labels = keep, known, layer.labels
    pruned.output = previous
    _fuse_layers(pruned)
    return pruned


_LINEAR_FUSIONS = {LINEAR: fuse_linear_linear, LINSTATE: fuse_linear_linstate}  # by the Lin's reader


def _fuse_layers(path: Graph) -> None:
    """Layers that are one layer in disguise once the path is pruned: a LinState that forgets its
    past (the dummy carriers of Case 6, once Case 2 merged nothing into them) becomes a Lin, and a
    Lin is fused into the Lin or LinState after it, and a LinState into the LinState before it
    (``fuse_linstate_linstate``), where that adds no weights."""
    for layer in path.path()[1:]:
        if fuse_stateless_linstate(path, layer):
            path.count("fuse_stateless_linstate")
    op = path.only_user(path.input)
    # each round fuses away one layer of the path or moves one layer on: at most 2 len(path) rounds
    while op is not None:
        user = path.only_user(op)
        fuse = _LINEAR_FUSIONS.get(user.kind) if user else None
        before = op.inputs[0]
        if (op.kind == LINEAR and fuse and user and _fused_weights(op, user) <= op.nnz + user.nnz
                and fuse(path, op, user)):  # a fusion whose products leave float64's range is skipped
            path.count(fuse.__name__)
            op = path.only_user(before)  # the fused layer, which may fuse again
        elif user is not None and fuse_linstate_linstate(path, op, user):
            path.count("fuse_linstate_linstate")
            op = path.only_user(before)
        else:
            op = user


def _fused_weights(linear: Op, user: Op) -> int:
    """Non-zero weights of ``user`` with ``linear`` fused into it."""
    matrix = user.A if user.kind == LINEAR else user.B
    weights = (matrix @ linear.A).nnz + (matrix @ linear.b + user.b).nnz
    return weights + (user.A.nnz + user.init.nnz if user.kind == LINSTATE else 0)
