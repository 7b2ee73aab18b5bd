"""The preparation step of App. A: fuse consecutive ops that are one op in disguise.

Each rule looks at an op (and its single user) and returns True when it rewrote the graph. The
``prepare`` stage runs them over the whole graph; debranching runs them again wherever it creates
new chains.
"""

from __future__ import annotations

from collections.abc import Sequence

import sys

from lsrl.errors import InternalError
from lsrl.ir.graph import Graph
from lsrl.ir.ops import WEIGHTS, Op
from lsrl.kinds import CONCAT, INPUT, LINEAR, LINSTATE, RELU, RELUSTATE
from lsrl.numbers import Entry, Matrix, mpq, to_rational_exactly

FLOAT64_LARGEST = mpq(sys.float_info.max)
FLOAT64_SMALLEST_NORMAL = mpq(sys.float_info.min)


def products_fit_float64(left: Matrix, right: Matrix) -> bool:
    """Whether ``left @ right`` holds every product of weights faithfully in float64: each product
    ``a b`` of non-zero weights lies within float64's normal range, and so does the sum of their
    magnitudes in every entry. Unfused, the two weights act one after the other on the values;
    fused, a product beyond the range becomes ``inf`` (float backend) or a weight with no float64
    form (exact backend), and a product below it is rounded to a subnormal or lost (``1e-200 *
    1e-200`` is 0). Checked exactly: first by the largest and smallest weights (programs with
    ordinary weights pass there), then product by product."""
    left_sizes, right_sizes = left.magnitudes(), right.magnitudes()
    if left_sizes is None or right_sizes is None:
        return True
    inner = left.shape2d[1]
    if (left_sizes[0] * right_sizes[0] * inner <= FLOAT64_LARGEST
            and left_sizes[1] * right_sizes[1] >= FLOAT64_SMALLEST_NORMAL):
        return True
    for i in left.nonzero_rows():
        totals: dict[int, object] = {}
        for k, a in left.row(i).items():
            a = abs(to_rational_exactly(a))
            for j, b in right.row(k).items():
                product = a * abs(to_rational_exactly(b))
                if not FLOAT64_SMALLEST_NORMAL <= product <= FLOAT64_LARGEST:
                    return False
                totals[j] = totals.get(j, 0) + product
        if any(total > FLOAT64_LARGEST for total in totals.values()):
            return False
    return True


def _fusable(*pairs: tuple[Matrix, Matrix]) -> bool:
    """Whether every ``left @ right`` of a fusion fits float64 (``products_fit_float64``); a fusion
    that does not is skipped: the two ops stay two layers, and the answer stays the interpreter's."""
    return all(products_fit_float64(left, right) for left, right in pairs)


def fuse_linear_linear(graph: Graph, first: Op, second: Op) -> bool:
    """``Lin[A2, b2](Lin[A1, b1](x)) = Lin[A2 A1, A2 b1 + b2](x)``."""
    if first.kind != LINEAR or second.kind != LINEAR:
        return False
    if not _fusable((second.A, first.A), (second.A, first.b)):
        return False
    fused = graph.linear(first.inputs[0], second.A @ first.A, second.A @ first.b + second.b, name=second.name)
    graph.replace(second, fused)
    return True


def _absorb_linear(graph: Graph, linear: Op, state: Op) -> None:
    """``state`` reading ``linear``'s input, the Lin folded into its ``B`` and ``b``."""
    fused = graph.state_like(state, linear.inputs[0], state.B @ linear.A, state.B @ linear.b + state.b, name=state.name)
    graph.replace(state, fused)


def fuse_linear_linstate(graph: Graph, linear: Op, state: Op) -> bool:
    """A Lin feeding a LinState is absorbed into its ``B`` and ``b``."""
    if linear.kind != LINEAR or state.kind != LINSTATE:
        return False
    if not _fusable((state.B, linear.A), (state.B, linear.b)):
        return False
    _absorb_linear(graph, linear, state)
    return True


def fuse_linear_relustate(graph: Graph, linear: Op, state: Op) -> bool:
    """A Lin feeding a ReLUState is absorbed into its ``B`` and ``b`` (they act before its ReLU)."""
    if linear.kind != LINEAR or state.kind != RELUSTATE:
        return False
    if not _fusable((state.B, linear.A), (state.B, linear.b)):
        return False
    _absorb_linear(graph, linear, state)
    return True


def fuse_relustate_relu(graph: Graph, state: Op, relu: Op) -> bool:
    """A ReLU after a ReLUState is dropped: the state is a ReLU output, non-negative already."""
    if state.kind != RELUSTATE or relu.kind != RELU:
        return False
    graph.replace(relu, state)
    return True


def fuse_relu_relu(graph: Graph, relu: Op) -> bool:
    """ReLU is idempotent: a ReLU of a ReLU is dropped, whatever else reads the inner one."""
    if relu.kind != RELU or relu.inputs[0].kind != RELU:
        return False
    graph.replace(relu, relu.inputs[0])
    return True


def fuse_slice_concat(graph: Graph, piece: Op, concat: Op) -> bool:
    """A Slice read only by a Concat becomes part of the Concat's gather."""
    if not (piece.is_slice and concat.kind == CONCAT):
        return False
    graph.regather(concat, piece, piece.inputs[0], piece.A.selected_columns())
    return True


def fuse_concat_concat(graph: Graph, inner: Op, outer: Op) -> bool:
    """A Concat read only by a Concat is spliced into the outer gather."""
    if inner.kind != CONCAT or outer.kind != CONCAT:
        return False
    slots: list[tuple[Op, Sequence[int]]] = []
    for x, picks in outer.slots:
        if x is inner:  # each pick of the inner Concat is one component of one of its inputs
            owners = [(y, c) for y, inner_picks in inner.slots for c in inner_picks]
            slots.extend((owners[p][0], [owners[p][1]]) for p in picks)
        else:
            slots.append((x, picks))
    graph.replace(outer, graph.concat(slots, name=outer.name))
    return True


def fuse_concat_identical(graph: Graph, concat: Op) -> bool:
    """A Concat whose inputs are all one op only gathers its components: a Slice."""
    if concat.kind != CONCAT or any(x is not concat.inputs[0] for x in concat.inputs):
        return False
    source = concat.inputs[0]
    columns = [c for picks in concat.picks for c in picks]
    graph.replace(concat, graph.selection(source, columns, name=concat.name))
    return True


def fuse_identity(graph: Graph, linear: Op) -> bool:
    """A Lin that is the identity (left behind by bypasses) is dropped."""
    if linear.kind != LINEAR or not linear.is_identity():
        return False
    graph.replace(linear, linear.inputs[0])
    return True


def fuse_stateless_linstate(graph: Graph, state: Op) -> bool:
    """A LinState with ``A = 0`` forgets its past (``s_t = B x_t + b``): it is a Lin."""
    if state.kind != LINSTATE or not state.A.is_zero():
        return False
    graph.replace(state, graph.linear(state.inputs[0], state.B, state.b, name=state.name))
    return True


def fuse_linstate_linstate(graph: Graph, first: Op, second: Op) -> bool:
    """On a path, a LinState whose every unit either runs on its own (reads nothing of the LinState
    before it, nor units that do: it joins that LinState) or keeps no state (``A`` row 0: a function of this step's
    input, folded into the Lin or LinState that reads it) is no layer of its own. Applied where that
    adds no weights; a folded unit's node is then computed only inside its reader."""
    reader = graph.only_user(second) if second.kind == LINSTATE else None
    if first.kind != LINSTATE or reader is None or reader.kind not in (LINEAR, LINSTATE):
        return False
    backend, A2 = graph.backend, second.A
    runs_alone = [i for i in range(second.dim) if not second.B.row(i)]
    stateless = [i for i in range(second.dim) if second.B.row(i)]
    if any(A2.row(i) for i in stateless) or any(not A2.row(i).keys() <= set(runs_alone) for i in runs_alone):
        return False
    width = first.dim + len(runs_alone)
    merged_A = backend.block_diag([first.A, A2.take_rows(runs_alone).take_columns(runs_alone)])
    merged_B = backend.vstack([first.B, backend.zeros(len(runs_alone), first.B.shape2d[1])])
    merged_b = backend.vstack([first.b, second.b.take_rows(runs_alone)])
    merged_init = backend.vstack([first.init, second.init.take_rows(runs_alone)])
    # second's output as a function of the merged output: P y + c
    position = {i: first.dim + k for k, i in enumerate(runs_alone)}
    entries: list[tuple[int, int, Entry]] = [(i, position[i], 1) for i in runs_alone]
    entries += [(i, j, w) for i in stateless for j, w in second.B.row(i).items()]
    P = backend.from_entries(entries, (second.dim, width))
    c = backend.from_entries(((i, 0, second.b.entry(i, 0)) for i in stateless if second.b.row(i)),
                             (second.dim, 1), is_vector=True)
    weight = reader.A if reader.kind == LINEAR else reader.B
    if not _fusable((weight, P), (weight, c)):
        return False
    read_weight, read_bias = weight @ P, weight @ c + reader.b
    kept = reader.A.nnz + reader.init.nnz if reader.kind == LINSTATE else 0
    added = merged_A.nnz + merged_B.nnz + merged_b.nnz + merged_init.nnz + read_weight.nnz + read_bias.nnz + kept
    if added > first.nnz + second.nnz + reader.nnz:
        return False
    labels = first.labels + [second.labels[i] for i in runs_alone]
    merged = graph.linstate(first.inputs[0], merged_A, merged_B, merged_b, merged_init, name=first.name, labels=labels)
    if reader.kind == LINEAR:
        rebuilt = graph.linear(merged, read_weight, read_bias, name=reader.name)
    else:
        rebuilt = graph.linstate(merged, reader.A, read_weight, read_bias, reader.init, name=reader.name)
    entangled = graph.entangled | {label.node for label in (second.labels[i] for i in stateless) if label}
    graph.replace(reader, rebuilt)
    graph.entangled = entangled  # the merged LinState still holds ``first``'s units
    return True


PAIR_RULES = (fuse_linear_linear, fuse_linear_linstate, fuse_slice_concat, fuse_concat_concat,
              fuse_linear_relustate, fuse_relustate_relu)
SINGLE_RULES = (fuse_concat_identical, fuse_identity, fuse_relu_relu)


def fuse_at(graph: Graph, op: Op) -> str | None:
    """Apply the first preparation rule that fits ``op`` (alone, or with its only user); the name
    of the rule applied, None if none fits."""
    for rule in SINGLE_RULES:
        if rule(graph, op):
            graph.count(rule.__name__)
            return rule.__name__
    user = graph.only_user(op)
    if user is None or op.kind == INPUT:
        return None
    for pair_rule in PAIR_RULES:
        if pair_rule(graph, op, user):
            graph.count(pair_rule.__name__)
            return pair_rule.__name__
    return None


def fuse_all_at(graph: Graph, op: Op) -> None:
    """Apply the preparation rules at ``op`` until none fits or ``op`` is gone. Every rule that fits
    removes ``op`` (it is fused or replaced: the last round) or an op of the graph (the ReLU after a
    ReLUState), so at most ``len(graph) + 1`` rules apply; more would mean a rule that removes nothing."""
    rounds = len(graph) + 1
    for _ in range(rounds):
        if op not in graph.users or fuse_at(graph, op) is None:
            return
    raise InternalError(f"fusion: {rounds} rules applied at {op.name} without removing it or another op")


def computation(op: Op) -> tuple:
    """What ``op`` computes, as a key: equal keys mean equal values at every step."""
    weights = tuple(tuple(getattr(op, w).row_keys()) for w in WEIGHTS.get(op.kind, ()))
    picks = tuple(tuple(p) for p in op.picks) if op.kind == CONCAT else None
    return op.kind, tuple(x.id for x in op.inputs), weights, picks


def merge_duplicates(graph: Graph) -> None:
    """Ops computing the same thing from the same inputs are one op (common subexpressions), so
    debranching never carries two copies of a value."""
    seen: dict[tuple, Op] = {}
    for op in graph.ops():
        if op.kind == INPUT or op not in graph.users:
            continue
        twin = seen.setdefault(computation(op), op)
        if twin is not op:
            graph.replace(op, twin)
            graph.count("merge_duplicates")


def prepare(graph: Graph) -> Graph:
    """Stage 1: the preparation fusions over the whole graph (inputs first), then common
    subexpressions merged."""
    graph = graph.copy()
    for op in graph.ops():
        fuse_all_at(graph, op)
    merge_duplicates(graph)
    return graph
