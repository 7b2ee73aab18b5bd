"""Last pass: drop the components of every layer that nothing downstream reads.

Bypasses carry whole vectors and merged LinStates carry every state; on the finished path a
backward liveness sweep finds which output components each layer really needs and a forward sweep
rebuilds the layers with only those rows (and the matching columns of the next layer).
"""

from __future__ import annotations

from lsrl.compiler.graph import LINEAR, LINSTATE, MULTI, RELU, Op
from lsrl.errors import LsrlError


def _columns(matrix, rows) -> set:
    return {j for i in rows for j in matrix.rows.get(i, {})}


def _state_closure(A, rows) -> set:
    """State components that ``rows`` depend on through the recurrence ``A``."""
    closed, frontier = set(rows), list(rows)
    while frontier:
        for j in A.rows.get(frontier.pop(), {}):
            if j not in closed:
                closed.add(j)
                frontier.append(j)
    return closed


def _fed_by_rigid_layer(layers, index) -> bool:
    """Whether the ReLUs before layer ``index`` lead back to a LinState or the Input: those may keep
    components nobody asked for (a state's closure, the whole input), which a Multi cannot pair."""
    index -= 1
    while index >= 0 and layers[index].kind == RELU:
        index -= 1
    return index < 0 or layers[index].kind == LINSTATE


def _needed_components(layers) -> list:
    """For each layer, the output components read downstream (at least one, so no layer is empty)."""
    needed_by_layer = [None] * len(layers)
    needed = set(range(layers[-1].dim))
    for index in range(len(layers) - 1, -1, -1):
        layer = layers[index]
        if layer.kind == MULTI and _fed_by_rigid_layer(layers, index):
            needed = set(range(layer.dim))
        if layer.kind == LINSTATE:
            needed = _state_closure(layer.A, needed)
        needed = needed or {0}
        needed_by_layer[index] = needed
        if layer.kind == LINEAR:
            needed = _columns(layer.A, needed)
        elif layer.kind == LINSTATE:
            needed = _columns(layer.B, needed)
        elif layer.kind == MULTI:
            needed = needed | {layer.dim + i for i in needed}
    return needed_by_layer


def prune_unused(path, stats) -> list:
    """``path`` (Input op first) rebuilt without unread components."""
    layers = path[1:]
    if not layers:
        return path
    pruned, previous, previous_live = [path[0]], path[0], list(range(path[0].dim))
    for layer, needed in zip(layers, _needed_components(layers)):
        if layer.kind == RELU:  # element-wise: it keeps whatever its input kept
            keep = previous_live
        elif layer.kind == MULTI:
            keep = [i for i in previous_live if i < layer.dim]
            if previous_live != keep + [layer.dim + i for i in keep]:
                raise LsrlError(f"internal compiler error: pruning unpaired the halves of {layer.name}")
        else:
            keep = sorted(needed)
        stats["prune_unused"] = stats.get("prune_unused", 0) + layer.dim - len(keep)
        if layer.kind == LINEAR:
            A = layer.A.take_rows(keep).take_columns(previous_live)
            op = Op(LINEAR, [previous], len(keep), layer.name, A=A, b=layer.b.take_rows(keep))
        elif layer.kind == LINSTATE:
            op = Op(
                LINSTATE, [previous], len(keep), layer.name,
                A=layer.A.take_rows(keep).take_columns(keep),
                B=layer.B.take_rows(keep).take_columns(previous_live),
                b=layer.b.take_rows(keep), init=layer.init.take_rows(keep),
            )
        else:
            op = Op(layer.kind, [previous], len(keep), layer.name)
        pruned.append(op)
        previous, previous_live = op, keep
    return pruned
