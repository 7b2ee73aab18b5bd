"""The compiler's working graph: a private, rewritable copy of a program's DAG.

Ops mirror the six node types. The graph keeps, for every op, the list of its users (one entry
per edge), so that a rewrite touches only the ops around it. ``from_program`` copies the user's
program (its matrices are immutable and shared); nothing here ever changes a user's node.
"""

from __future__ import annotations

import itertools

from lsrl.lang import nodes as N

LINEAR, RELU, LINSTATE, CONCAT, MULTI, INPUT = "linear", "relu", "linstate", "concat", "multi", "input"
_KIND_OF_NODE = {
    N.Input: INPUT, N.Linear: LINEAR, N.ReLU: RELU, N.LinState: LINSTATE, N.Concat: CONCAT, N.Multi: MULTI,
}


class Op:
    """One node of the working graph. ``A, b`` for linear; ``A, B, b, init`` for linstate."""

    _ids = itertools.count()

    def __init__(self, kind, inputs, dim, name=None, A=None, B=None, b=None, init=None):
        self.kind, self.inputs, self.dim = kind, list(inputs), dim
        self.A, self.B, self.b, self.init = A, B, b, init
        self.id = next(Op._ids)
        self.name = name or f"{kind}_{self.id}"
        self._is_slice = None

    def __repr__(self):
        return f"Op({self.name}, dim={self.dim}, in={[x.name for x in self.inputs]})"

    @property
    def is_slice(self) -> bool:
        """A Linear that only selects (and possibly repeats) input components."""
        if self._is_slice is None:
            self._is_slice = self.kind == LINEAR and self.b.is_zero() and self.A.is_selection()
        return self._is_slice

    def is_identity(self) -> bool:
        return (
            self.is_slice
            and self.dim == self.inputs[0].dim
            and self.A.selected_columns() == list(range(self.dim))
        )


class Graph:
    """Ops reachable from ``output``, with user lists; rewritten in place by the compiler rules."""

    def __init__(self, backend):
        self.backend = backend
        self.input = None
        self.output = None
        self.users: dict = {}

    # ---- construction ---------------------------------------------------------------------
    def add(self, op: Op) -> Op:
        self.users[op] = []
        for x in op.inputs:
            self.users[x].append(op)
        return op

    def linear(self, x, A, b=None, name=None) -> Op:
        b = b if b is not None else self.backend.zeros_vector(A.shape2d[0])
        return self.add(Op(LINEAR, [x], A.shape2d[0], name, A=A, b=b))

    def selection(self, x, columns, name=None) -> Op:
        """Slice of ``x`` picking ``columns``; ``x`` itself when that is the identity."""
        columns = list(columns)
        if columns == list(range(x.dim)):
            return x
        op = self.linear(x, self.backend.selection(columns, x.dim), name=name)
        op._is_slice = True
        return op

    def slice(self, x, start, stop) -> Op:
        return self.selection(x, range(start, stop))

    def relu(self, x) -> Op:
        return self.add(Op(RELU, [x], x.dim))

    def multi(self, x, name=None) -> Op:
        return self.add(Op(MULTI, [x], x.dim // 2, name))

    def concat(self, xs) -> Op:
        return self.add(Op(CONCAT, xs, sum(x.dim for x in xs)))

    def linstate(self, x, A, B, b, init, name=None) -> Op:
        return self.add(Op(LINSTATE, [x], A.shape2d[0], name, A=A, B=B, b=b, init=init))

    # ---- rewiring ---------------------------------------------------------------------------
    def distinct_users(self, op) -> list:
        return list(dict.fromkeys(self.users[op]))

    def redirect(self, user: Op, old: Op, new: Op) -> None:
        """Every edge ``old -> user`` becomes ``new -> user``."""
        count = sum(1 for x in user.inputs if x is old)
        user.inputs = [new if x is old else x for x in user.inputs]
        self.users[old] = [u for u in self.users[old] if u is not user]
        self.users[new].extend([user] * count)

    def replace(self, old: Op, new: Op) -> None:
        """Every use of ``old`` becomes a use of ``new``; ``old`` is then removed."""
        for user in self.distinct_users(old):
            self.redirect(user, old, new)
        if self.output is old:
            self.output = new
        self.remove(old)

    def remove(self, op: Op) -> None:
        """Drop an op that has no users, and then any of its inputs left without users."""
        pending = [op]
        while pending:
            current = pending.pop()
            if self.users.get(current) or current is self.output or current is self.input:
                continue
            self.users.pop(current, None)
            for x in set(current.inputs):
                if x in self.users:
                    self.users[x] = [u for u in self.users[x] if u is not current]
                    pending.append(x)

    def __len__(self) -> int:
        return len(self.users)


def from_program(program, backend) -> Graph:
    """Copy a ``ForEach`` into a working graph, converting every matrix to ``backend``."""
    graph = Graph(backend)
    ops = {}
    for node in program.nodes:
        kind = _KIND_OF_NODE[type(node)]
        inputs = [ops[x] for x in node.inputs]
        convert = backend.convert
        if kind == LINEAR:
            op = Op(kind, inputs, node.dim, node.name, A=convert(node.A), b=convert(node.b))
        elif kind == LINSTATE:
            op = Op(kind, inputs, node.dim, node.name, A=convert(node.A), B=convert(node.B),
                    b=convert(node.b), init=convert(node.init_state))
        else:
            op = Op(kind, inputs, node.dim, node.name)
        ops[node] = graph.add(op)
    graph.input = ops[program.input]
    graph.output = ops[program.output]
    return graph
