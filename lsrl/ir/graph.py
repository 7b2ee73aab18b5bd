"""The compiler's working graph: a private, rewritable copy of a program's DAG.

Ops mirror the six node types, with one difference: a Concat holds a *gather*, a list of slots
``(op, picks)`` that each take the components ``picks`` of ``op``. Slicing a value into a Concat
therefore never widens the Concat to the whole value.

The graph keeps, for every op, its users (with the number of edges to each), so that a rewrite
touches only the ops around it, and a running count of the non-zero weights it holds (``nnz``,
with its ``peak``). ``from_program`` copies the user's program (matrices are immutable and
shared); nothing here ever changes a user's node. Every compiler stage takes a graph and returns a
new one (``Graph.copy``); ``str(graph)`` prints it one op a line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from lsrl.ir.labels import UnitLabel, better
from lsrl.ir.ops import Op, OpParts
from lsrl.ir.verify import verify as _verify
from lsrl.kinds import CONCAT, INPUT, LINEAR, LINSTATE, MULTI, RELU, RELUSTATE, Kind
from lsrl.lang import nodes as N

if TYPE_CHECKING:
    from lsrl.lang.program import ForEach
    from lsrl.numbers import Backend, Matrix

Labels = Sequence[UnitLabel | None]  # one label per component (lsrl.ir.labels), None where unknown

_KIND_OF_NODE = {
    N.Input: INPUT, N.Linear: LINEAR, N.ReLU: RELU, N.LinState: LINSTATE,
    N.Concat: CONCAT, N.Multi: MULTI, N.ReLUState: RELUSTATE,
}


def _joined(slots: Iterable[tuple[Op, Sequence[int] | None]]) -> tuple[list[Op], list[Sequence[int]]]:
    """Inputs and picks of ``slots``, neighbouring slots of one op joined (``picks=None``: all)."""
    inputs: list[Op] = []
    picks: list[Sequence[int]] = []
    for x, p in slots:
        taken = range(x.dim) if p is None else p
        if inputs and inputs[-1] is x:
            picks[-1] = list(picks[-1]) + list(taken)
        else:
            inputs.append(x)
            picks.append(taken)
    return inputs, picks


def _nonnegative_components(op: Op, inputs_nonnegative: list[frozenset[int]]) -> frozenset[int]:
    """Components of ``op`` that are ``>= 0`` whenever the components ``inputs_nonnegative`` of its
    inputs are: ReLUs; sums of those with positive weights and a bias ``>= 0``; products of two;
    states that start, stay and are driven so."""
    if op.kind in (RELU, RELUSTATE):
        return frozenset(range(op.dim))
    if op.kind == INPUT:  # what it declares (nothing where it declares no bounds)
        return frozenset(i for i, low in enumerate(op.bounds[0]) if low >= 0) if op.bounds is not None else frozenset()
    if op.kind == CONCAT:
        picked = [p in nonnegative for nonnegative, picks in zip(inputs_nonnegative, op.picks) for p in picks]
        return frozenset(i for i, holds in enumerate(picked) if holds)
    (source,) = inputs_nonnegative
    if op.kind == MULTI:
        return frozenset(i for i in range(op.dim) if i in source and op.dim + i in source)

    def positive_sum(weights: Matrix, row: int, allowed: Collection[int]) -> bool:
        return all(w > 0 and j in allowed for j, w in weights.row(row).items())

    def at_least_zero(vector: Matrix, row: int) -> bool:
        return bool(vector.entry(row, 0) >= 0)

    drive = op.A if op.kind == LINEAR else op.B
    candidates = {i for i in range(op.dim) if at_least_zero(op.b, i) and positive_sum(drive, i, source)}
    if op.kind == LINEAR:
        return frozenset(candidates)
    candidates = {i for i in candidates if at_least_zero(op.init, i)}
    while True:  # a state stays >= 0 if it reads only such states, with positive weights; each round drops one
        # candidate or ends, so at most op.dim rounds
        kept = {i for i in candidates if positive_sum(op.A, i, candidates)}
        if kept == candidates:
            return frozenset(kept)
        candidates = kept


class Graph:
    """Ops reachable from ``output``, with user lists; rewritten in place by the compiler rules."""

    def __init__(self, backend: Backend, name: str = "program") -> None:
        self.backend = backend
        self.name = name
        # set by whoever builds the graph (from_program, copy, prune) before any pass reads them
        self.input: Op = cast(Op, None)
        self.output: Op = cast(Op, None)
        self.users: dict[Op, dict[Op, int]] = {}  # op -> {user: edges from op to it}
        self.stats: dict[str, int] = {}  # rule name -> times applied
        # program nodes whose value no longer flows only through units labelled with them (fused into
        # a reader, sharing units with another node, pruned as always 0): not patchable by labels
        self.entangled: set[str] = set()
        # program node name -> (topological index, names of its inputs)
        self.lineage: dict[str, tuple[int, list[str]]] = {}
        self.ancestry: dict[tuple[str, str], bool] = {}  # (node, ancestor) -> whether node is computed from ancestor
        self.nnz = self.peak_nnz = 0
        self.kinds: Counter[Kind] = Counter()  # ops of each kind, kept up to date like nnz
        # op -> components >= 0 at every step (kept: a rewrite keeps an op's value)
        self.signs: dict[Op, frozenset[int]] = {}

    # ---- construction ---------------------------------------------------------------------
    def add(self, op: Op) -> Op:
        self.users[op] = {}
        for x in op.inputs:
            edges = self.users[x]
            edges[op] = edges.get(op, 0) + 1
        self.nnz += op.nnz
        self.peak_nnz = max(self.peak_nnz, self.nnz)
        self.kinds[op.kind] += 1
        return op

    def linear(self, x: Op, A: Matrix, b: Matrix | None = None, name: str | None = None,
               labels: Labels | None = None) -> Op:
        b = b if b is not None else self.backend.zeros_vector(A.shape2d[0])
        return self.add(Op(LINEAR, [x], A.shape2d[0], name, OpParts(A=A, b=b), labels))

    def selection(self, x: Op, columns: Iterable[int], name: str | None = None) -> Op:
        """Slice of ``x`` picking ``columns``; ``x`` itself when that is the identity."""
        columns = list(columns)
        if columns == list(range(x.dim)):
            return x
        return self.linear(x, self.backend.selection(columns, x.dim), name=name)

    def slice(self, x: Op, start: int, stop: int) -> Op:
        return self.selection(x, range(start, stop))

    def relu(self, x: Op, name: str | None = None, labels: Labels | None = None) -> Op:
        return self.add(Op(RELU, [x], x.dim, name, labels=labels))

    def multi(self, x: Op, name: str | None = None, labels: Labels | None = None) -> Op:
        return self.add(Op(MULTI, [x], x.dim // 2, name, labels=labels))

    def concat(self, slots: Iterable[tuple[Op, Sequence[int] | None]], name: str | None = None) -> Op:
        """A gather of ``slots``: ``(op, picks)`` pairs, ``picks=None`` taking all of ``op``.

        Neighbouring slots of one op are joined into one slot, and a gather from a single op is a
        Slice of it (or the op itself)."""
        inputs, picks = _joined(slots)
        if len(inputs) == 1:
            return self.selection(inputs[0], picks[0], name=name)
        return self.add(Op(CONCAT, inputs, sum(len(p) for p in picks), name, OpParts(picks=picks)))

    def regather(self, concat: Op, old: Op, new: Op, remap: Sequence[int] | Mapping[int, int]) -> Op:
        """The slots of ``concat`` that read ``old`` read ``new`` instead, pick ``p`` becoming
        ``remap[p]``; in place, since a Concat rewritten slot by slot would otherwise be copied once
        per slot. Returns the op that now computes the gather (a Slice if one input is left)."""
        slots = ((new, [remap[p] for p in p_old]) if x is old else (x, p_old) for x, p_old in concat.slots)
        inputs, picks = _joined(slots)
        if len(inputs) == 1:
            gathered = self.selection(inputs[0], picks[0], name=concat.name)
            self.replace(concat, gathered)
            return gathered
        before, concat.inputs, concat.parts = concat.inputs, inputs, OpParts(picks=picks)  # picks: all a gather holds
        edges: dict[Op, int] = {}  # joining neighbouring slots changes other inputs' edge counts too
        for x in inputs:
            edges[x] = edges.get(x, 0) + 1
        for x in set(before).difference(edges):
            del self.users[x][concat]
        for x, count in edges.items():
            self.users[x][concat] = count
        self.remove(old)
        return concat

    def linstate(self, x: Op, A: Matrix, B: Matrix, b: Matrix, init: Matrix, name: str | None = None,
                 labels: Labels | None = None) -> Op:
        return self.add(Op(LINSTATE, [x], A.shape2d[0], name, OpParts(A=A, B=B, b=b, init=init), labels))

    def relustate(self, x: Op, A: Matrix, B: Matrix, b: Matrix, init: Matrix, name: str | None = None,
                  labels: Labels | None = None) -> Op:
        return self.add(Op(RELUSTATE, [x], A.shape2d[0], name, OpParts(A=A, B=B, b=b, init=init), labels))

    def state_like(self, state: Op, x: Op, B: Matrix, b: Matrix | None = None, name: str | None = None) -> Op:
        """An op of ``state``'s kind (linstate or relustate) with its ``A`` and ``init``, reading ``x``
        through ``B`` (and ``b``: ``state.b`` unless given)."""
        build = self.linstate if state.kind == LINSTATE else self.relustate
        return build(x, state.A, B, state.b if b is None else b, state.init, name=name)

    # ---- rewiring ---------------------------------------------------------------------------
    def distinct_users(self, op: Op) -> list[Op]:
        return list(self.users[op])

    def only_user(self, op: Op) -> Op | None:
        """The user of ``op`` if ``op`` has exactly one outgoing edge, else None."""
        edges = self.users[op]
        if len(edges) == 1:
            user, count = next(iter(edges.items()))
            if count == 1:
                return user
        return None

    def redirect(self, user: Op, old: Op, new: Op) -> None:
        """Every edge ``old -> user`` becomes ``new -> user``."""
        user.inputs = [new if x is old else x for x in user.inputs]
        count = self.users[old].pop(user)
        edges = self.users[new]
        edges[user] = edges.get(user, 0) + count

    def replace(self, old: Op, new: Op) -> None:
        """Every use of ``old`` becomes a use of ``new`` (which computes the same); ``old`` is then
        removed, its labels handed to ``new``."""
        self.adopt(new, old.labels)
        for user in self.distinct_users(old):
            self.redirect(user, old, new)
        if self.output is old:
            self.output = new
        self.remove(old, replaced=True)

    def adopt(self, op: Op, labels: Labels) -> None:
        """``op`` is shown to hold ``labels`` (per component); through Slices they reach the
        components picked, so a merged op learns what its parts hold."""
        positions: Sequence[int] = range(op.dim)
        while True:  # back through a chain of Slices towards the input: at most the graph's depth rounds
            for position, label in zip(positions, labels):
                mine = op.labels[position]
                if mine is not None and label is not None and mine.node != label.node:
                    self._share_unit(mine.node, label.node)
                op.labels[position] = better(mine, label)
            if not op.is_slice:
                return
            picked = op.A.selected_columns()
            labels = [op.labels[p] for p in positions]
            positions = [picked[p] for p in positions]
            op = op.inputs[0]

    def _share_unit(self, first: str, second: str) -> None:
        """Two program nodes turned out to hold one unit. Patching the one computed from the other
        would reach the other's readers too; patching the ancestor is still exact (the program
        recomputes the descendant from it). Nodes with neither relation can be patched by neither."""
        if first in self.entangled and second in self.entangled:
            return
        if self._derived_from(second, first):
            self.entangled.add(second)
        elif self._derived_from(first, second):
            self.entangled.add(first)
        else:
            self.entangled |= {first, second}

    def _derived_from(self, node: str, ancestor: str) -> bool:
        """Whether program node ``node`` is computed from ``ancestor`` (remembered: the same pairs meet
        again and again as merged ops hand labels on)."""
        key = (node, ancestor)
        if key not in self.ancestry:
            self.ancestry[key] = self._search_ancestry(node, ancestor)
        return self.ancestry[key]

    def _search_ancestry(self, node: str, ancestor: str, depth: int = 8) -> bool:
        """A search ``depth`` nodes up at most: the nodes that end up sharing a unit are a value and a
        slice, ReLU or sum of it a few nodes on; a farther relation is missed, which only makes the
        descendant unpatchable too (safe), and keeps the search from crossing the whole program."""
        if node not in self.lineage or ancestor not in self.lineage:
            return False
        limit = self.lineage[ancestor][0]  # inputs come first in topological order
        frontier, seen = [node], set()
        for _ in range(depth):
            upper = []
            for current in frontier:
                for parent in self.lineage[current][1]:
                    if parent == ancestor:
                        return True
                    if parent not in seen and self.lineage[parent][0] > limit:
                        seen.add(parent)
                        upper.append(parent)
            frontier = upper
        return False

    def remove(self, op: Op, replaced: bool = False) -> None:
        """Drop an op that has no users, and then any of its inputs left without users. A node whose
        own op goes without being ``replaced`` by an equal one was fused into its readers."""
        pending = [op]
        while pending:  # an op is deleted once and then pushes its inputs: at most 1 + (edges) rounds
            current = pending.pop()
            if current not in self.users or self.users[current] or current is self.output or current is self.input:
                continue
            if current.is_slice:  # what it held lives on in its source
                self.adopt(current, current.labels)
            elif not (replaced and current is op):
                self.entangled |= {label.node for label in current.labels if label and label.role == "value"}
            del self.users[current]
            self.nnz -= current.nnz
            self.kinds[current.kind] -= 1
            for x in set(current.inputs):
                if x in self.users:
                    self.users[x].pop(current, None)
                    pending.append(x)

    def count_of(self, kind: Kind) -> int:
        """The number of ops of ``kind`` in the graph."""
        return self.kinds[kind]

    def count(self, rule: str, times: int = 1) -> None:
        self.stats[rule] = self.stats.get(rule, 0) + times

    # ---- what ops hold -------------------------------------------------------------------------
    def nonnegative(self, op: Op) -> frozenset[int]:
        """Components of ``op`` that are ``>= 0`` at every step for every input within the Input's
        declared bounds, as far as signs alone show (``_nonnegative_components``)."""
        stack = [op]
        # an op pushes its missing inputs once (they are known when it is on top again): at most
        # 1 + (edges) rounds on the acyclic graph
        while stack:
            current = stack[-1]
            missing = [x for x in current.inputs if x not in self.signs]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            if current not in self.signs:
                self.signs[current] = _nonnegative_components(current, [self.signs[x] for x in current.inputs])
        return self.signs[op]

    # ---- whole-graph views ------------------------------------------------------------------
    def verify(self) -> None:
        """Check the invariants every stage keeps (shapes, users, labels, no dangling ops, running
        totals; ``lsrl.ir.verify``); ``InternalError`` naming the op and the invariant if one breaks."""
        _verify(self)

    def __len__(self) -> int:
        return len(self.users)

    def ops(self) -> list[Op]:
        """Every op, inputs before users (a topological order from the Input)."""
        order, seen, stack = [], set(), [(self.output, False)]
        while stack:  # an op is expanded once (seen): at most 1 + 2 (edges) rounds
            op, expanded = stack.pop()
            if expanded:
                order.append(op)
            elif op not in seen:
                seen.add(op)
                stack.append((op, True))
                stack.extend((x, False) for x in reversed(op.inputs) if x not in seen)
        return order

    def is_path(self) -> bool:
        return all(sum(edges.values()) <= 1 for edges in self.users.values())

    def path(self) -> list[Op]:
        """The ops from the Input to the output of a graph that is a path."""
        path, current = [self.input], self.input
        while self.users[current]:  # one op further along the acyclic path each round: at most len(self) rounds
            current = next(iter(self.users[current]))
            path.append(current)
        return path

    def copy(self) -> Graph:
        """A new graph with new ops (sharing the immutable matrices); stats carried over."""
        clone = Graph(self.backend, self.name)
        clone.stats, clone.entangled = dict(self.stats), set(self.entangled)
        clone.lineage, clone.ancestry = self.lineage, self.ancestry
        new: dict[Op, Op] = {}
        for op in self.ops():
            twin = Op(op.kind, [new[x] for x in op.inputs], op.dim, op.name, op.parts, op.labels)
            new[op] = clone.add(twin)
        clone.input, clone.output = new[self.input], new[self.output]
        clone.peak_nnz = max(clone.peak_nnz, self.peak_nnz)
        return clone

    def __str__(self) -> str:
        lines = [f"graph {self.name} [{self.backend.name}, {len(self)} ops, {self.nnz} non-zeros]:"]
        lines += [f"    {op.describe()}" for op in self.ops()]
        lines.append(f"    return %{self.output.name}")
        return "\n".join(lines)

    def to_program(self) -> ForEach:
        """The graph as an LSRL program (a gather becomes a Concat of slices), to run or inspect."""
        from lsrl.lang.program import ForEach

        nodes: dict[Op, N.Node] = {}
        for op in self.ops():
            inputs = [nodes[x] for x in op.inputs]
            node: N.Node
            if op.kind == INPUT:
                node = N.Input(op.dim, name=op.name, bounds=op.bounds, integer=op.integer)
            elif op.kind == LINEAR:
                node = N.Linear(inputs[0], op.A, op.b, name=op.name)
            elif op.kind == LINSTATE:
                node = N.LinState(inputs[0], op.A, op.B, op.b, op.init, name=op.name)
            elif op.kind == RELUSTATE:
                node = N.ReLUState(inputs[0], op.A, op.B, op.b, op.init, name=op.name)
            elif op.kind == RELU:
                node = N.ReLU(inputs[0], name=op.name)
            elif op.kind == MULTI:
                node = N.Multi(inputs[0], name=op.name)
            else:
                parts = [
                    x if list(p) == list(range(x.dim)) else N.Linear(x, self.backend.selection(p, x.dim))
                    for x, p in zip(inputs, op.picks)
                ]
                node = N.Concat(parts, name=op.name)
            nodes[op] = node
        return ForEach(nodes[self.output], name=self.name)


def from_program(program: ForEach, backend: Backend) -> Graph:
    """Copy a ``ForEach`` into a working graph, converting every matrix to ``backend``."""
    graph = Graph(backend, program.name)
    ops: dict[N.Node, Op] = {}
    convert = backend.convert
    for node in program.nodes:
        kind, dim = _KIND_OF_NODE[type(node)], node.dim
        inputs = [ops[x] for x in node.inputs]
        labels: list[UnitLabel | None] = [UnitLabel(program.names[node], i, "value") for i in range(dim)]
        graph.lineage[program.names[node]] = (len(graph.lineage), [program.names[x] for x in node.inputs])
        if isinstance(node, N.Linear):
            op = Op(kind, inputs, dim, node.name, OpParts(A=convert(node.A), b=convert(node.b)))
        elif isinstance(node, N.StateNode):
            op = Op(kind, inputs, dim, node.name, OpParts(A=convert(node.A), B=convert(node.B), b=convert(node.b),
                                                          init=convert(node.init_state)))
        elif isinstance(node, N.Concat):
            op = Op(kind, inputs, dim, node.name, OpParts(picks=[range(x.dim) for x in inputs]))
        elif isinstance(node, N.Input):
            op = Op(kind, inputs, dim, node.name, OpParts(bounds=node.bounds, integer=node.integer))
        else:
            op = Op(kind, inputs, dim, node.name)
        op.labels = labels
        ops[node] = graph.add(op)
    graph.input = ops[program.input]
    # layers read the input by weights, not only by copies: patching it means running on another input
    graph.entangled.add(program.names[program.input])
    graph.output = ops[program.output]
    return graph
