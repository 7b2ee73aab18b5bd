"""The six node types of LSRL (Sec. 3) and the operator sugar that builds Linear nodes.

A node is built from its inputs and never changes afterwards, except through ``replace_input``,
which rewires an edge without checks (``ForEach`` validates the result). Weights given as nested
lists, numpy arrays, scipy sparse matrices or numbers become exact rationals; ``Matrix`` objects
(e.g. float weights produced by the compiler) are kept in their own backend.
"""

from __future__ import annotations

import itertools
import math
import numbers
import weakref
from collections.abc import Iterable
from typing import ClassVar

import numpy as np

from lsrl.errors import DimensionError, GraphError, LsrlError, shown, whole_number
from lsrl.kinds import Kind
from lsrl.numbers import EXACT, Backend, Bound, Matrix, MatrixLike, to_rational

MAX_INPUT_DIM = 10**6  # an Input holds its bounds as two Python lists of dim entries; no program is this wide

_name_counters: dict[str, itertools.count[int]] = {}


def _auto_name(kind: str) -> str:
    counter = _name_counters.setdefault(kind, itertools.count())
    return f"{kind.lower()}_{next(counter)}"


def _negated(number: numbers.Number) -> numbers.Number:
    """``-number`` (numbers.Number declares no operators; every number Python or numpy gives has this one)."""
    negative: numbers.Number = -number  # type: ignore[operator]
    return negative


def _check_node(value: object, owner: str, role: str = "input") -> Node:
    if not isinstance(value, Node):
        raise GraphError(f"{owner}: {role} must be an LSRL node, got {type(value).__name__} {value!r}")
    return value


def _weights(value: MatrixLike, owner: str, label: str, shape: tuple[int, int] | None) -> Matrix:
    where = f"{owner}: {label}"
    if isinstance(value, Matrix):
        matrix = value.backend.matrix(value, where)
        if shape is not None and matrix.shape2d != tuple(shape):
            raise DimensionError(f"{where}: expected shape {tuple(shape)}, got {matrix.shape2d}")
        return matrix
    return EXACT.matrix(value, where, shape=shape)


def _vector(value: MatrixLike | None, backend: Backend, dim: int, owner: str, label: str) -> Matrix:
    return backend.vector(value, dim, f"{owner}: {label}")


class Node:
    """A node of an LSRL program: ``inputs`` (tuple of nodes), output ``dim`` and a ``name``."""

    kind: ClassVar[Kind]  # each node type's own
    __array_ufunc__ = None  # ``array - node``: numpy defers to Node.__rsub__ instead of looping over the array

    dim: int  # the width of its value; each node type sets it from its weights or inputs

    def __init__(self, inputs: Iterable[Node], dim: int | None, name: str | None) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise GraphError(f"{self.kind}: name must be a non-empty string or None, got {shown(name)}")
        self.name: str = name if name is not None else _auto_name(self.kind)
        self.named = name is not None  # given by the user (auto names depend on what was built before)
        self.inputs: tuple[Node, ...] = tuple(_check_node(x, self.describe()) for x in inputs)
        if dim is not None:
            self.dim = dim
        # bumped when this node or one it reads, directly or not, is rewired: what was cached for it is stale
        self.version = 0
        self._readers: list[weakref.ref[Node]] = []  # the nodes built on this one (and those rewired to it)
        for x in self.inputs:
            x._readers.append(weakref.ref(self))

    def __getstate__(self) -> dict[str, object]:
        return {key: value for key, value in vars(self).items() if key != "_readers"}  # weak references do not pickle

    def __setstate__(self, state: dict[str, object]) -> None:
        vars(self).update(state)
        self._readers = []
        for x in self.inputs:  # unpickled before this node (which holds them), except around a cycle
            if "_readers" in vars(x):
                x._readers.append(weakref.ref(self))

    def describe(self) -> str:
        return f"{self.kind} '{self.name}'"

    def __repr__(self) -> str:
        return f"{self.kind}(name={self.name!r}, dim={self.dim})"

    def replace_input(self, old: "Node", new: "Node") -> None:
        """Rewire every edge from ``old`` to ``new`` (no checks; ``ForEach`` validates). The ``version`` of this
        node and of every node that reads it, directly or not, goes up: results cached for the old wiring
        (value ranges) are not reused."""
        self.inputs = tuple(new if x is old else x for x in self.inputs)
        new._readers.append(weakref.ref(self))
        stale, seen = [self], set()
        while stale:  # a rewiring may close a cycle (ForEach refuses it): each node once
            node = stale.pop()
            if node not in seen:
                seen.add(node)
                node.version += 1
                stale.extend(reader for ref in node._readers if (reader := ref()) is not None)

    def check(self) -> None:
        """Re-validate dimensions against the current inputs."""

    def _check_reads_input(self, matrix: Matrix, label: str) -> None:
        if matrix.shape2d[1] != self.inputs[0].dim:
            raise DimensionError(
                f"{self.describe()}: {label} has {matrix.shape2d[1]} columns but its input "
                f"{self.inputs[0].describe()} has dim {self.inputs[0].dim}"
            )

    # ---- operator sugar: every operation below builds a Linear node --------------------------
    def __add__(self, other: Node | float | numbers.Number) -> Linear:
        if isinstance(other, Node):
            if other.dim != self.dim:
                raise DimensionError(
                    f"cannot add {self.describe()} (dim {self.dim}) and {other.describe()} (dim {other.dim})"
                )
            if other is self:
                return self * 2
            both = Concat([self, other])
            return Linear(both, EXACT.hstack([EXACT.eye(self.dim), EXACT.eye(self.dim)]))
        if isinstance(other, numbers.Number):
            constant = to_rational(other, f"{self.describe()} + operand")
            return Linear(self, EXACT.eye(self.dim), EXACT.constant_vector(self.dim, constant))
        raise self._bad_operand("+", other)

    __radd__ = __add__

    def _bad_operand(self, operation: str, operand: object) -> LsrlError:
        """The error for an operand the operator sugar does not take (raised, where Python's protocol
        would return NotImplemented and end in a bare TypeError)."""
        return LsrlError(f"{self.describe()} {operation} operand: expected a node or a number, got "
                         f"{type(operand).__name__}"[:300])

    def __neg__(self) -> Linear:
        return self * -1

    def __sub__(self, other: Node | float | numbers.Number) -> Linear:
        if isinstance(other, Node):
            return self + (-other)
        if isinstance(other, numbers.Number):
            return self + _negated(other)
        raise self._bad_operand("-", other)

    def __rsub__(self, other: float | numbers.Number) -> Linear:
        if not isinstance(other, numbers.Number):
            raise self._bad_operand("-", other)
        return (-self) + other

    def __mul__(self, factor: float | numbers.Number) -> Linear:
        if not isinstance(factor, numbers.Number):
            raise self._bad_operand("*", factor)
        return Linear(self, EXACT.eye(self.dim, to_rational(factor, f"{self.describe()} * factor")))

    __rmul__ = __mul__

    def __truediv__(self, divisor: float | numbers.Number) -> Linear:
        if not isinstance(divisor, numbers.Number):
            raise self._bad_operand("/", divisor)
        value = to_rational(divisor, f"{self.describe()} / divisor")
        if value == 0:
            raise DimensionError(f"{self.describe()}: division by zero")
        return self * (1 / value)

    def __getitem__(self, index: int | slice | Iterable[int]) -> Linear:
        if isinstance(index, slice):
            if not all(part is None or whole_number(part) is not None for part in (index.start, index.stop,
                                                                                    index.step)) or index.step == 0:
                raise DimensionError(f"{self.describe()}: a slice index needs integer bounds and a non-zero step, "
                                     f"got {index!r}"[:300])
            columns = list(range(self.dim))[index]
        elif isinstance(index, (bool, np.bool_)):  # numpy reads a bool as a mask
            raise DimensionError(f"{self.describe()}: index must be an integer, a slice or integers, got {index!r}")
        elif (position := whole_number(index)) is not None:  # a plain int (not the numpy or torch scalar given)
            if not -self.dim <= position < self.dim:
                raise DimensionError(f"{self.describe()}: index {position} out of range for dim {self.dim}")
            columns = [position % self.dim]
        else:
            # a list, tuple, range or 1-d array (not a 0-d one, which cannot be iterated, nor an unordered set or dict)
            refused = DimensionError(f"{self.describe()}: index must be an integer, a slice or integers, got "
                                     f"{type(index).__name__} {index!r}"[:300])
            if isinstance(index, (int, str, bytes)) or not (isinstance(index, (list, tuple, range))
                                                             or getattr(index, "ndim", 0) == 1):
                raise refused
            wholes = [whole_number(i) for i in index]
            columns = [c for c in wholes if c is not None]
            if len(columns) != len(wholes):
                raise refused
            if any(not 0 <= c < self.dim for c in columns):
                raise DimensionError(f"{self.describe()}: indices {columns} out of range for dim {self.dim}")
        if not columns:
            raise DimensionError(f"{self.describe()}: the slice {index} selects nothing")
        return Linear(self, EXACT.selection(columns, self.dim))


class Input(Node):
    """The program's single input, of dimension ``dim``.

    ``bounds=(lo, hi)`` declares the range of every component (scalars or sequences; ``None`` means
    unbounded). The value-range analysis behind the optimised ``f_ifelse`` variants starts from it.
    ``integer=True`` declares that every component is an integer (tokens). Both are checked on every
    run (interpreter, compiled model, torch targets) unless the caller passes ``check_bounds=False``.
    """

    kind = Kind.INPUT

    def __init__(self, dim: int, name: str | None = None, bounds: tuple[object, object] | None = None,
                 integer: bool = False) -> None:
        super().__init__((), dim, name)
        if whole_number(dim) is None or not 1 <= dim <= MAX_INPUT_DIM:
            raise DimensionError(f"{self.describe()}: dim must be an integer in 1..{MAX_INPUT_DIM:,}, got {shown(dim)}")
        self.dim = int(dim)
        self.bounds = self._parse_bounds(bounds)
        if not isinstance(integer, (bool, np.bool_)):
            raise DimensionError(f"{self.describe()}: integer must be True or False, got {shown(integer)}")
        self.integer = bool(integer)

    def fresh(self) -> "Input":
        """A new Input with the same name and declarations, to start another chain of layers."""
        return Input(self.dim, name=self.name, bounds=self.bounds, integer=self.integer)

    def _parse_bounds(self, bounds: tuple[object, object] | None) -> tuple[list[Bound], list[Bound]]:
        if bounds is None:
            return [-math.inf] * self.dim, [math.inf] * self.dim
        try:
            low, high = bounds
        except (TypeError, ValueError):
            raise DimensionError(f"{self.describe()}: bounds must be a pair (lo, hi)") from None
        lows = self._bound_list(low, -math.inf, "the lower bound of bounds")
        highs = self._bound_list(high, math.inf, "the upper bound of bounds")
        for i, (lo, hi) in enumerate(zip(lows, highs)):
            if lo > hi:
                raise DimensionError(f"{self.describe()}: bounds has lower bound {lo} > upper bound {hi} "
                                     f"at component {i}")
        return lows, highs

    def _bound_list(self, value: object, unbounded: float, label: str) -> list[Bound]:
        values = value if isinstance(value, (list, tuple)) else [value] * self.dim
        if len(values) != self.dim:
            raise DimensionError(f"{self.describe()}: {label} has {len(values)} entries, expected {self.dim}")
        where = f"{self.describe()}: {label}"
        return [unbounded if v is None or (isinstance(v, float) and math.isinf(v)) else to_rational(v, where)
                for v in values]


class Linear(Node):
    """``A x + b``."""

    kind = Kind.LINEAR

    def __init__(self, x: Node, A: MatrixLike, b: MatrixLike | None = None, name: str | None = None) -> None:
        super().__init__((x,), None, name)
        self.A: Matrix = _weights(A, self.describe(), "A", None)
        self.check()
        self.dim = self.A.shape2d[0]
        if not self.dim:
            raise DimensionError(f"{self.describe()}: A has no rows (shape {self.A.shape2d}); a node needs at least "
                                 "one component")
        self.b: Matrix = _vector(b, self.A.backend, self.dim, self.describe(), "b")

    def check(self) -> None:
        self._check_reads_input(self.A, "A")


class ReLU(Node):
    """``max(0, x)`` element-wise."""

    kind = Kind.RELU

    def __init__(self, x: Node, name: str | None = None) -> None:
        super().__init__((x,), None, name)
        self.dim = self.inputs[0].dim

    def check(self) -> None:
        self.dim = self.inputs[0].dim


class StateNode(Node):
    """A node that carries a state from step to step: square ``A``, ``B``, ``b`` and ``init_state``
    (what ``LinState`` and ``ReLUState`` share; the update is each one's)."""

    def __init__(self, x: Node, A: MatrixLike, B: MatrixLike, b: MatrixLike | None,
                 init_state: MatrixLike | None, name: str | None) -> None:
        super().__init__((x,), None, name)
        self.A: Matrix = _weights(A, self.describe(), "A", None)
        if self.A.shape2d[0] != self.A.shape2d[1]:
            raise DimensionError(f"{self.describe()}: A must be square, got shape {self.A.shape2d}")
        self.dim = self.A.shape2d[0]
        self.B: Matrix = _weights(B, self.describe(), "B", (self.dim, self.inputs[0].dim))
        self.b: Matrix = _vector(b, self.A.backend, self.dim, self.describe(), "b")
        self.init_state: Matrix = _vector(init_state, self.A.backend, self.dim, self.describe(), "init_state")

    def check(self) -> None:
        self._check_reads_input(self.B, "B")


class LinState(StateNode):
    """``s_t = A s_{t-1} + B x_t + b`` with ``s_0 = init_state``; the node's value is ``s_t``."""

    kind = Kind.LINSTATE

    def __init__(self, x: Node, A: MatrixLike, B: MatrixLike, b: MatrixLike | None = None,
                 init_state: MatrixLike | None = None, name: str | None = None) -> None:
        super().__init__(x, A, B, b, init_state, name)


class ReLUState(StateNode):
    """``h_t = ReLU(A h_{t-1} + B x_t + b)`` with ``h_0 = init_state`` (non-negative); the value is ``h_t``.

    The state update depends on the state through one ReLU layer: the step of the classic ReLU RNN
    of Eq. (2), which a ``LinState`` cannot take (footnote 3 of the paper). Programs with such a
    node compile to the non-linear targets only ("rnn", "gated_rnn", "gru", "lstm").
    """

    kind = Kind.RELUSTATE

    def __init__(self, x: Node, A: MatrixLike, B: MatrixLike, b: MatrixLike | None = None,
                 init_state: MatrixLike | None = None, name: str | None = None) -> None:
        super().__init__(x, A, B, b, init_state, name)
        negative = [(i, v) for i, _, v in self.init_state.entries() if v < 0]
        if negative:
            raise DimensionError(
                f"{self.describe()}: init_state must be non-negative (the state is a ReLU output), "
                f"but component {negative[0][0]} is {negative[0][1]}"
            )


class Concat(Node):
    """The inputs' values one after the other."""

    kind = Kind.CONCAT

    def __init__(self, xs: Iterable[Node], name: str | None = None) -> None:
        if isinstance(xs, Node) or not hasattr(xs, "__iter__") or getattr(xs, "ndim", 1) == 0:  # 0-d: no list
            raise GraphError(f"Concat '{name if isinstance(name, str) else '?'}': expects a list of nodes, got "
                             f"{type(xs).__name__}")
        xs = list(xs)
        super().__init__(xs, None, name)
        if not xs:
            raise DimensionError(f"{self.describe()}: needs at least one input, got an empty list")
        self.check()

    def check(self) -> None:
        self.dim = sum(x.dim for x in self.inputs)


class Multi(Node):
    """First half of the input times its second half, element-wise (the gate of Eq. (4))."""

    kind = Kind.MULTI

    def __init__(self, x: Node, name: str | None = None) -> None:
        super().__init__((x,), None, name)
        self.check()

    def check(self) -> None:
        width = self.inputs[0].dim
        if width % 2:
            raise DimensionError(
                f"{self.describe()}: input {self.inputs[0].describe()} has odd dim {width}; Multi needs an even dim"
            )
        self.dim = width // 2


as_node = _check_node
