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
from collections.abc import Iterable

import numpy as np

from lsrl.errors import DimensionError, GraphError, LsrlError, shown, whole_number
from lsrl.numbers import EXACT, Matrix, MatrixLike, to_rational

MAX_INPUT_DIM = 10**6  # an Input holds its bounds as two Python lists of dim entries; no program is this wide

_name_counters: dict = {}
rewirings = 0  # how many edges ``replace_input`` has changed, program-wide


def _auto_name(kind: str) -> str:
    counter = _name_counters.setdefault(kind, itertools.count())
    return f"{kind.lower()}_{next(counter)}"


def _check_node(value, owner: str, role: str = "input") -> "Node":
    if not isinstance(value, Node):
        raise GraphError(f"{owner}: {role} must be an LSRL node, got {type(value).__name__} {value!r}")
    return value


def _weights(value, owner: str, label: str, shape) -> Matrix:
    where = f"{owner}: {label}"
    if isinstance(value, Matrix):
        matrix = value.backend.matrix(value, where)
        if shape is not None and matrix.shape2d != tuple(shape):
            raise DimensionError(f"{where}: expected shape {tuple(shape)}, got {matrix.shape2d}")
        return matrix
    return EXACT.matrix(value, where, shape=shape)


def _vector(value, backend, dim: int, owner: str, label: str) -> Matrix:
    return backend.vector(value, dim, f"{owner}: {label}")


class Node:
    """A node of an LSRL program: ``inputs`` (tuple of nodes), output ``dim`` and a ``name``."""

    kind = "Node"
    __array_ufunc__ = None  # ``array - node``: numpy defers to Node.__rsub__ instead of looping over the array

    def __init__(self, inputs: Iterable[Node], dim: int | None, name: str | None) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise GraphError(f"{self.kind}: name must be a non-empty string or None, got {shown(name)}")
        self.name = name if name is not None else _auto_name(self.kind)
        self.named = name is not None  # given by the user (auto names depend on what was built before)
        self.inputs = tuple(_check_node(x, self.describe()) for x in inputs)
        self.dim = dim

    def describe(self) -> str:
        return f"{self.kind} '{self.name}'"

    def __repr__(self) -> str:
        return f"{self.kind}(name={self.name!r}, dim={self.dim})"

    def replace_input(self, old: "Node", new: "Node") -> None:
        """Rewire every edge from ``old`` to ``new`` (no checks; ``ForEach`` validates)."""
        global rewirings
        self.inputs = tuple(new if x is old else x for x in self.inputs)
        rewirings += 1  # results cached per node (value ranges) are stale now

    def check(self) -> None:
        """Re-validate dimensions against the current inputs."""

    def _check_reads_input(self, matrix, label: str) -> None:
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
        if isinstance(other, (Node, numbers.Number)):
            return self + (-other)
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
        divisor = to_rational(divisor, f"{self.describe()} / divisor")
        if divisor == 0:
            raise DimensionError(f"{self.describe()}: division by zero")
        return self * (1 / divisor)

    def __getitem__(self, index: int | slice | Iterable[int]) -> Linear:
        if isinstance(index, slice):
            if not all(part is None or whole_number(part) is not None for part in (index.start, index.stop,
                                                                                    index.step)) or index.step == 0:
                raise DimensionError(f"{self.describe()}: a slice index needs integer bounds and a non-zero step, "
                                     f"got {index!r}"[:300])
            columns = list(range(self.dim))[index]
        elif isinstance(index, (bool, np.bool_)):  # numpy reads a bool as a mask
            raise DimensionError(f"{self.describe()}: index must be an integer, a slice or integers, got {index!r}")
        elif whole_number(index) is not None:
            position = whole_number(index)  # a plain int (not the numpy or torch scalar given)
            if not -self.dim <= position < self.dim:
                raise DimensionError(f"{self.describe()}: index {position} out of range for dim {self.dim}")
            columns = [position % self.dim]
        else:
            # a list, tuple, range or 1-d array (not a 0-d one, which cannot be iterated, nor an unordered set or dict)
            listed = isinstance(index, (list, tuple, range)) or getattr(index, "ndim", 0) == 1
            if isinstance(index, (str, bytes)) or not listed or not all(
                    whole_number(i) is not None for i in index):
                raise DimensionError(f"{self.describe()}: index must be an integer, a slice or integers, got "
                                     f"{type(index).__name__} {index!r}"[:300])
            columns = [int(i) for i in index]
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

    kind = "Input"

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

    def _parse_bounds(self, bounds):
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

    def _bound_list(self, value, unbounded, label):
        values = value if isinstance(value, (list, tuple)) else [value] * self.dim
        if len(values) != self.dim:
            raise DimensionError(f"{self.describe()}: {label} has {len(values)} entries, expected {self.dim}")
        where = f"{self.describe()}: {label}"
        return [unbounded if v is None or (isinstance(v, float) and math.isinf(v)) else to_rational(v, where)
                for v in values]


class Linear(Node):
    """``A x + b``."""

    kind = "Linear"

    def __init__(self, x: Node, A: MatrixLike, b: MatrixLike | None = None, name: str | None = None) -> None:
        super().__init__((x,), None, name)
        self.A = _weights(A, self.describe(), "A", None)
        self.check()
        self.dim = self.A.shape2d[0]
        if not self.dim:
            raise DimensionError(f"{self.describe()}: A has no rows (shape {self.A.shape2d}); a node needs at least "
                                 "one component")
        self.b = _vector(b, self.A.backend, self.dim, self.describe(), "b")

    def check(self) -> None:
        self._check_reads_input(self.A, "A")


class ReLU(Node):
    """``max(0, x)`` element-wise."""

    kind = "ReLU"

    def __init__(self, x: Node, name: str | None = None) -> None:
        super().__init__((x,), None, name)
        self.dim = self.inputs[0].dim

    def check(self) -> None:
        self.dim = self.inputs[0].dim


class LinState(Node):
    """``s_t = A s_{t-1} + B x_t + b`` with ``s_0 = init_state``; the node's value is ``s_t``."""

    kind = "LinState"
    A: Matrix  # the weights, set by _set_state_weights
    B: Matrix
    b: Matrix
    init_state: Matrix

    def __init__(self, x: Node, A: MatrixLike, B: MatrixLike, b: MatrixLike | None = None,
                 init_state: MatrixLike | None = None, name: str | None = None) -> None:
        super().__init__((x,), None, name)
        _set_state_weights(self, A, B, b, init_state)

    def check(self) -> None:
        self._check_reads_input(self.B, "B")


def _set_state_weights(node, A, B, b, init_state) -> None:
    """``A`` (square), ``B``, ``b``, ``init_state`` and ``dim`` of a state node, checked."""
    A = _weights(A, node.describe(), "A", None)
    if A.shape2d[0] != A.shape2d[1]:
        raise DimensionError(f"{node.describe()}: A must be square, got shape {A.shape2d}")
    node.dim = A.shape2d[0]
    node.A = A
    node.B = _weights(B, node.describe(), "B", (node.dim, node.inputs[0].dim))
    node.b = _vector(b, A.backend, node.dim, node.describe(), "b")
    node.init_state = _vector(init_state, A.backend, node.dim, node.describe(), "init_state")


class ReLUState(Node):
    """``h_t = ReLU(A h_{t-1} + B x_t + b)`` with ``h_0 = init_state`` (non-negative); the value is ``h_t``.

    The state update depends on the state through one ReLU layer: the step of the classic ReLU RNN
    of Eq. (2), which a ``LinState`` cannot take (footnote 3 of the paper). Programs with such a
    node compile to the non-linear targets only ("rnn", "gated_rnn", "gru", "lstm").
    """

    kind = "ReLUState"
    A: Matrix  # the weights, set by _set_state_weights
    B: Matrix
    b: Matrix
    init_state: Matrix

    def __init__(self, x: Node, A: MatrixLike, B: MatrixLike, b: MatrixLike | None = None,
                 init_state: MatrixLike | None = None, name: str | None = None) -> None:
        super().__init__((x,), None, name)
        _set_state_weights(self, A, B, b, init_state)
        negative = [(i, v) for i, _, v in self.init_state.entries() if v < 0]
        if negative:
            raise DimensionError(
                f"{self.describe()}: init_state must be non-negative (the state is a ReLU output), "
                f"but component {negative[0][0]} is {negative[0][1]}"
            )

    def check(self) -> None:
        self._check_reads_input(self.B, "B")


class Concat(Node):
    """The inputs' values one after the other."""

    kind = "Concat"

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

    kind = "Multi"

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
