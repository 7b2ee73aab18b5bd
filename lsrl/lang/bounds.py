"""Value-range analysis: an interval per component of every node, sound over all time steps.

Intervals start from the bounds declared on ``Input`` and are propagated exactly (rationals and
infinities). The optimised ``f_ifelse`` variants ask this analysis which values are non-negative or
identically zero instead of asking the user.

A ``LinState`` ``s_t = A s_{t-1} + u_t`` (``u_t = B x_t + b`` in a box) is bounded through the
interval recurrence on ``z = (high, -low)``: ``z_t = M z_{t-1} + c`` with ``M = [[A+, A-], [A-, A+]]``
(``A+ = max(A, 0)``, ``A- = max(-A, 0)``) and ``c`` the box of ``u``. ``M >= 0``, so any ``z`` with
``M z + c <= z`` and ``z >= z_0`` bounds every step (induction). Strongly connected blocks of ``M``
are bounded one after another, starting from the box of the first output ``s_1``:

1. iterate the hull ``z <- max(z, M z + c)``: a bounded orbit (a one-hot counter) closes in a few
   steps and gives the exact bounds of the interval recurrence;
2. a contracting block (spectral radius < 1: ``I - M`` is invertible with ``(I - M)^-1 >= 0``) is
   bounded by the geometric series ``z* = (I - M)^-1 c`` (``A = 1/2``, ``u`` in ``[0, 1]``: 2), or,
   where the start lies above ``z*``, by the larger ``max(z*, z_0)`` when it checks, else by
   ``(I - M)^-1 (c + max(z_0 - z*, 0))``;
3. with a declared ``max_length`` (sequences of at most that many steps), the hull after that many
   steps (a counter ``s + 1`` is at most ``max_length``). The hull is iterated until it reaches a
   point ``h`` where the linear step rises in every component (``M h + c >= h``); from there on the
   hull is the linear recurrence itself (``M >= 0`` keeps it rising), so the rest is one power of
   the affine map, by repeated squaring: ``max_length = 10**100`` takes a few hundred matrix
   products, not 10^100 steps. Bounds of more than ``_MAX_BOUND_BITS`` bits are reported as
   infinite; a block that reaches no such point within ``_MAX_HULL_STEPS`` steps, or is too large
   to square (more than ``_SOLVED_BLOCK`` components), is iterated for at most
   ``_MAX_HULL_STEPS`` steps, and a longer ``max_length`` is refused;
4. otherwise the block is unbounded: its bounds are infinite, and the result says so.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

from lsrl.errors import InternalError, LsrlError, whole_number
from lsrl.lang import nodes as N
from lsrl.numbers import ONE, ZERO, Bound, to_rational

if TYPE_CHECKING:
    import gmpy2

    from lsrl.numbers import Matrix

INF = math.inf
Sides: TypeAlias = "tuple[list[Bound], list[Bound]]"  # (low, high), one bound per component
Rows: TypeAlias = "dict[int, dict[int, Bound]]"  # a non-negative matrix by rows, {i: {j: weight}}
Vector: TypeAlias = "dict[int, Bound]"  # a vector by component
_SOLVED_BLOCK = 64  # larger strongly connected blocks are not inverted or squared (cubic cost)
_MAX_HULL_STEPS = 10**6  # hull steps iterated one by one at most (about a second per component)
_MAX_BOUND_BITS = 2**20  # a bound that needs more bits (|bound| > 2^(2^20)) is reported as infinite


class ValueRange(NamedTuple):
    """``(low, high)``: per-component bounds, rational or infinite."""

    low: list[Bound]
    high: list[Bound]

    @property
    def unbounded(self) -> list:
        """Components with an infinite bound."""
        return [i for i, (lo, hi) in enumerate(zip(self.low, self.high)) if lo == -INF or hi == INF]

    @property
    def finite(self) -> bool:
        return not self.unbounded


def _times(a: Bound, x: Bound) -> Bound:
    """``a * x`` for a non-zero rational ``a`` and ``x`` rational or infinite."""
    if x == INF or x == -INF:
        return x if a > 0 else -x
    return a * x


def _plus(x: Bound, y: Bound) -> Bound:
    if x in (INF, -INF):
        return x
    if y in (INF, -INF):
        return y
    return x + y


def _affine(A: Matrix, b: Matrix, low: Sequence[Bound], high: Sequence[Bound]) -> Sides:
    """Interval of ``A v + b`` for ``v`` in the box ``[low, high]``."""
    out_low = [to_rational(v) for v in b.values()]
    out_high = list(out_low)
    for i, j, a in A.entries():
        a = to_rational(a)
        if a > 0:
            out_low[i] = _plus(out_low[i], _times(a, low[j]))
            out_high[i] = _plus(out_high[i], _times(a, high[j]))
        else:
            out_low[i] = _plus(out_low[i], _times(a, high[j]))
            out_high[i] = _plus(out_high[i], _times(a, low[j]))
    return out_low, out_high


def _product(l1: Bound, h1: Bound, l2: Bound, h2: Bound) -> tuple[Bound, Bound]:
    def mul(x: Bound, y: Bound) -> Bound:
        return 0 if x == 0 or y == 0 else (_times(x, y) if x not in (INF, -INF) else _times(y, x))

    candidates = [mul(l1, l2), mul(l1, h2), mul(h1, l2), mul(h1, h2)]
    return min(candidates), max(candidates)


# ---- LinState bounds ---------------------------------------------------------------------------


def _interval_matrix(A: Matrix, n: int) -> Rows:
    """``M`` of the interval recurrence as rows ``{i: {j: weight}}`` over ``z = (high, -low)``."""
    rows: Rows = {i: {} for i in range(2 * n)}
    for i, j, a in A.entries():
        a = to_rational(a)
        if a > 0:
            rows[i][j] = rows[n + i][n + j] = a
        else:
            rows[i][n + j] = rows[n + i][j] = -a
    return rows


def _blocks(rows: Rows) -> list[list[int]]:
    """Strongly connected blocks of ``i -> j`` (i reads j), each after the blocks it reads (Tarjan)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    blocks: list[list[int]] = []
    counter = 0
    for root in rows:
        if root in index:
            continue
        work = [(root, iter(rows[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:  # each round pushes a node first reached or pops a finished one: at most 2 len(rows) rounds
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(rows[nxt])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                block: list[int] = []
                while True:  # pops the block's members, node last: at most len(stack) rounds
                    member = stack.pop()
                    on_stack.discard(member)
                    block.append(member)
                    if member == node:
                        break
                blocks.append(sorted(block))
    return blocks


def _step(rows: Rows, block: Iterable[int], z: Vector, c: Vector) -> Vector:
    """``M z + c`` on the components of ``block`` (``z`` holds what ``rows`` read)."""
    out: Vector = {}
    for i in block:
        total = c[i]
        for j, m in rows[i].items():
            total = _plus(total, _times(m, z[j]))
        out[i] = total
    return out


def _hull_iteration(rows: Rows, block: list[int], z: Vector, c: Vector, steps: int) -> tuple[bool, Vector]:
    """Iterate the hull from ``z`` for at most ``steps`` steps; returns (closed, z on ``block``)."""
    current = {i: z[i] for i in block}
    for _ in range(steps):
        grown = {i: max(current[i], v) for i, v in _step(rows, block, current, c).items()}
        if grown == current:
            return True, current
        current = grown
    return False, current


def _inverse_if_contracting(rows: Rows, block: list[int]) -> list[list[gmpy2.mpq]] | None:
    """``(I - M)^-1`` on ``block`` when it is non-negative (spectral radius of ``M`` < 1), else None."""
    size = len(block)
    where = {i: k for k, i in enumerate(block)}
    augmented = [[ZERO] * (2 * size) for _ in range(size)]
    for k, i in enumerate(block):
        augmented[k][k] = ONE
        augmented[k][size + k] = ONE
        for j, m in rows[i].items():
            if j in where:
                augmented[k][where[j]] -= m
    for col in range(size):
        pivot = next((r for r in range(col, size) if augmented[r][col] != 0), None)
        if pivot is None:
            return None
        augmented[col], augmented[pivot] = augmented[pivot], augmented[col]
        scale = augmented[col][col]
        augmented[col] = [v / scale for v in augmented[col]]
        for r in range(size):
            if r != col and augmented[r][col] != 0:
                factor = augmented[r][col]
                augmented[r] = [v - factor * p for v, p in zip(augmented[r], augmented[col])]
    inverse = [row[size:] for row in augmented]
    return inverse if all(v >= 0 for row in inverse for v in row) else None


def _geometric_bound(rows: Rows, block: list[int], z: Vector, c: Vector) -> Vector | None:
    """The contracting block's invariant bound, or None if the block does not contract."""
    if len(block) > _SOLVED_BLOCK or any(c[i] == INF for i in block):
        return None
    inverse = _inverse_if_contracting(rows, block)
    if inverse is None:
        return None

    def solve(rhs: list[Bound]) -> Vector:
        return {i: sum(inverse[k][q] * rhs[q] for q in range(len(block))) for k, i in enumerate(block)}

    fixed = solve([c[i] for i in block])
    start = {i: max(fixed[i], z[i]) for i in block}
    if all(v <= start[i] for i, v in _step(rows, block, start, c).items()):
        return start
    return solve([c[i] + max(z[i] - fixed[i], 0) for i in block])


def _affine_power(rows: Rows, block: list[int], start: Vector, c: Vector, power: int) -> Vector | None:
    """``L^power(start)`` for the affine map ``L(z) = M z + c`` on ``block`` (all finite), by repeated
    squaring of ``[[M, c], [0, 1]]``; None when an entry needs more than ``_MAX_BOUND_BITS`` bits."""
    size = len(block)
    where = {i: k for k, i in enumerate(block)}
    square = [[ZERO] * (size + 1) for _ in range(size + 1)]
    for k, i in enumerate(block):
        for j, m in rows[i].items():
            square[k][where[j]] = to_rational(m)
        square[k][size] = to_rational(c[i])
    square[size][size] = ONE
    vector = [to_rational(start[i]) for i in block] + [ONE]

    def too_large(values: Iterable[gmpy2.mpq]) -> bool:
        return any(v.numerator.bit_length() > _MAX_BOUND_BITS or v.denominator.bit_length() > _MAX_BOUND_BITS
                   for v in values)

    while power:  # halves power: at most power.bit_length() rounds
        if power & 1:
            vector = [sum((a * v for a, v in zip(row, vector)), ZERO) for row in square]
            if too_large(vector):
                return None
        power >>= 1
        if power:
            square = [[sum((row[q] * square[q][col] for q in range(size + 1) if row[q]), ZERO)
                       for col in range(size + 1)] for row in square]
            if too_large(v for row in square for v in row):
                return None
    return {i: vector[k] for k, i in enumerate(block)}


def _hull_after(rows: Rows, block: list[int], z: Vector, c: Vector, steps: int) -> Vector:
    """The hull of ``z_t = M z_{t-1} + c`` over ``steps`` steps from ``z`` (step 3 of the module doc)."""
    current = {i: z[i] for i in block}
    for done in range(min(steps, _MAX_HULL_STEPS)):
        following = _step(rows, block, current, c)
        rising = all(following[i] >= current[i] for i in block)
        finite = all(current[i] not in (INF, -INF) for i in block) and all(c[i] != INF for i in block)
        if rising and finite and len(block) <= _SOLVED_BLOCK:
            # from here on the hull is the linear recurrence: M (L h - h) >= 0 keeps every step rising
            power = _affine_power(rows, block, current, c, steps - done)
            return power if power is not None else {i: INF for i in block}
        grown = {i: max(current[i], following[i]) for i in block}
        if grown == current:
            return current
        current = grown
    if steps > _MAX_HULL_STEPS:
        raise LsrlError(
            f"value_bounds: max_length={steps + 1} is beyond the {_MAX_HULL_STEPS:,} steps that a state whose "
            "bound has no closed form is iterated for; give a smaller max_length or none (infinite bounds)"
        )
    return current


def _linstate_bounds(node: N.LinState, x_low: list[Bound], x_high: list[Bound], max_length: int | None) -> Sides:
    n = node.dim
    rows = _interval_matrix(node.A, n)
    u_low, u_high = _affine(node.B, node.b, x_low, x_high)
    c = {i: u_high[i] for i in range(n)} | {n + i: -u_low[i] for i in range(n)}
    init = [to_rational(v) for v in node.init_state.values()]
    initial = {i: init[i] for i in range(n)} | {n + i: -init[i] for i in range(n)}
    z = _step(rows, rows, initial, c)  # the first output, s_1: s_0 itself is never output
    _bound_blocks(rows, z, c, max_length)
    return [-z[n + i] for i in range(n)], [z[i] for i in range(n)]


def _bound_blocks(rows: Rows, z: Vector, c: Vector, max_length: int | None) -> None:
    """Raise ``z`` (the first output) to a bound of every step of ``z_t = M z_{t-1} + c``, ``M = rows``
    non-negative, block after block (the numbered steps of the module doc)."""
    for block in _blocks(rows):
        # what the block reads of earlier blocks enters as part of its drive
        inside = set(block)
        drive = {
            i: _plus(c[i], sum((_times(m, z[j]) for j, m in rows[i].items() if j not in inside), start=0))
            if all(z[j] != INF for j in rows[i] if j not in inside) else INF
            for i in block
        }
        local = {i: {j: m for j, m in rows[i].items() if j in inside} for i in block}
        bound: Vector | None
        closed, bound = _hull_iteration(local, block, z, drive, 2 * len(block) + 8)
        if not closed:
            bound = _geometric_bound(local, block, z, drive)
        if bound is None and max_length is not None:
            bound = _hull_after(local, block, z, drive, max_length - 1)
        if bound is None:
            bound = {i: INF for i in block}
        z.update(bound)


def _relustate_bounds(node: N.ReLUState, x_low: list[Bound], x_high: list[Bound], max_length: int | None
                      ) -> Sides:
    """``h_t = ReLU(A h_{t-1} + u_t)`` lies in ``[0, z_t]`` for ``z_t = A+ z_{t-1} + max(u_high, 0)``,
    ``z_0 = h_0`` (``h >= 0``, so ``A h <= A+ z``): the LinState machinery on that non-negative
    system bounds it from above. The lower bound is the ReLU of the lowest ``A h + u`` over
    ``h`` in ``[0, max(z, h_0)]``."""
    n = node.dim
    rows: Rows = {i: {} for i in range(n)}
    for i, j, a in node.A.entries():
        if a > 0:
            rows[i][j] = to_rational(a)
    u_low, u_high = _affine(node.B, node.b, x_low, x_high)
    c = {i: max(u_high[i], 0) for i in range(n)}
    init = {i: to_rational(v) for i, v in enumerate(node.init_state.values())}
    z = _step(rows, rows, init, c)
    _bound_blocks(rows, z, c, max_length)
    reach = [max(z[i], init[i]) for i in range(n)]
    from_state, _ = _affine(node.A, node.A.backend.zeros_vector(n), [0] * n, reach)
    low = [max(_plus(p, u), 0) for p, u in zip(from_state, u_low)]
    return low, [z[i] for i in range(n)]


def _node_bounds(node: N.Node, inputs: Sequence[ValueRange], max_length: int | None) -> Sides:
    if isinstance(node, N.Input):
        return node.bounds
    if isinstance(node, N.Linear):
        return _affine(node.A, node.b, *inputs[0])
    if isinstance(node, N.ReLU):
        low, high = inputs[0]
        return [max(v, 0) for v in low], [max(v, 0) for v in high]
    if isinstance(node, N.Concat):
        return [v for low, _ in inputs for v in low], [v for _, high in inputs for v in high]
    if isinstance(node, N.Multi):
        low, high = inputs[0]
        half = node.dim
        pairs = [_product(low[i], high[i], low[half + i], high[half + i]) for i in range(half)]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if isinstance(node, N.LinState):
        return _linstate_bounds(node, inputs[0].low, inputs[0].high, max_length)
    if isinstance(node, N.ReLUState):
        return _relustate_bounds(node, inputs[0].low, inputs[0].high, max_length)
    raise TypeError(node)


# node -> {max_length: (node.version when computed, its bounds)}; a rewiring above a node bumps its version
_known: weakref.WeakKeyDictionary[N.Node, dict[int | None, tuple[int, ValueRange]]] = weakref.WeakKeyDictionary()


def _cached(node: N.Node, max_length: int | None) -> ValueRange | None:
    """The bounds cached for ``node`` under ``max_length``, if computed for its current wiring."""
    entry = _known.get(node, {}).get(max_length)
    return entry[1] if entry is not None and entry[0] == node.version else None


def value_bounds(node: N.Node, max_length: int | None = None) -> ValueRange:
    """``(low, high)``: lists of rational or infinite bounds on every component of ``node``, sound at
    every step of every sequence whose inputs lie within the declared ``Input`` bounds (and, with
    ``max_length``, that has at most ``max_length`` steps). ``.finite`` says whether all are finite,
    ``.unbounded`` lists the components that are not."""
    if max_length is not None and (whole_number(max_length) is None or max_length < 1):
        raise LsrlError(f"value_bounds: max_length must be a positive integer (the longest sequence) or None, "
                        f"got {type(max_length).__name__} {max_length!r}")
    if not isinstance(node, N.Node):
        raise LsrlError(f"value_bounds: expected a node, got {type(node).__name__}")
    max_length = None if max_length is None else int(max_length)
    stack = [node]
    while stack:  # a node pushes its pending inputs once (known when it is on top again): at most 1 + (edges) rounds
        current = stack[-1]
        if _cached(current, max_length) is not None:
            stack.pop()
            continue
        known = [_cached(x, max_length) for x in current.inputs]
        inputs = [bounds for bounds in known if bounds is not None]
        if len(inputs) < len(known):
            stack.extend(x for x, bounds in zip(current.inputs, known) if bounds is None)
            continue
        _known.setdefault(current, {})[max_length] = (current.version, ValueRange(*_node_bounds(current, inputs,
                                                                                                   max_length)))
        stack.pop()
    found = _cached(node, max_length)
    if found is None:
        raise InternalError(f"value_bounds: the walk from {node.describe()} left it without bounds")
    return found


def is_nonnegative(node: N.Node) -> bool:
    return all(v >= 0 for v in value_bounds(node).low)


def is_nonpositive(node: N.Node) -> bool:
    return all(v <= 0 for v in value_bounds(node).high)


def is_zero(node: N.Node) -> bool:
    return is_nonnegative(node) and is_nonpositive(node)


def max_abs(node: N.Node) -> Bound:
    low, high = value_bounds(node)
    return max(max(abs(v) for v in low), max(abs(v) for v in high))
