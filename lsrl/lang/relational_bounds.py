"""Unrolled, relational value bounds: ``value_bounds`` made sharp enough to prove programs such as
Listing 2 exact.

The interval analysis (``lsrl.lang.bounds``) forgets that two values come from one: the step
``relu(2x) - relu(2x - 1)`` gets ``[-2 hi, 2 hi]`` instead of ``[0, 1]``, a conditional ``c t`` with
such a ``c`` multiplies that loss by ``|t|``, and a ``LinState`` with ``A = 1`` adds the result up
at every one of ``max_length`` steps, although a written-once register is written once. Listing 2
(robust, n = 2, tokens up to 9) gets outputs bounded by 4.6e11 at 66 steps; its outputs are tokens.
This analysis runs the program over the steps ``1 .. max_length`` on *sets of values*:

* **Atoms.** At step ``t`` the values a step computes depend on the input ``x_t`` and on the
  states' previous values ``s_(t-1)``. A component of an integer ``Input`` with at most
  ``ATOM_VALUES`` values, and a state component whose previous values form a set of at most
  ``ATOM_VALUES`` centres, is an *atom*: a variable ranging over a finite set of centres
  ``v_1 .. v_m`` (plus a common offset interval, below). A real ``Input`` component, or a larger
  set, enters as an interval. Atoms of different steps, of different inputs, and of different state
  components are treated as independent (a superset of the reachable combinations: sound).
* **Values.** Each component of each node at step ``t`` is held as ``T[a] + [lo, hi]``: a table
  ``T`` of floats over the joint assignments ``a`` of the atoms it reads (its *support*; a constant
  has none) and an offset interval. The value is in ``T[a] + [lo, hi]`` for the atoms' actual
  values ``a``. A value that depends only on the step (a counter, a phase flag, a shift register
  of constants) is a constant, so conditions on it are decided; a value that depends on one token
  and one query token is a table of their pairs, exact.
* **Rules** (``T``, ``[lo, hi]`` of the operands broadcast over the union of their supports):
  ``Linear``: ``T' = b + sum a_j T_j``, ``[lo', hi'] = sum a_j [lo_j, hi_j]`` (interval product);
  ``ReLU``: ``T' = relu(T)`` and, entry by entry, ``relu(T + lo) - relu(T) .. relu(T + hi) - relu(T)``
  (relu is monotone: ``v`` in ``T + [lo, hi]`` gives ``relu(v)`` in ``[relu(T + lo), relu(T + hi)]``),
  whose min and max are ``[lo', hi']``; so ``relu(t + lam c) - lam c`` for an atom ``c`` and a
  ``t`` far from ``-lam c`` is exact entry by entry: the ``f_ifelse`` terms cancel. ``Multi``:
  ``T' = T_x T_y`` and ``T_x [lo_y, hi_y] + T_y [lo_x, hi_x] + [lo_x, hi_x][lo_y, hi_y]`` entry by entry.
  ``LinState`` ``s_t = A s_(t-1) + B x_t + b`` is the ``Linear`` ``[A | B]`` over the atoms of
  ``s_(t-1)`` and ``x_t``; ``ReLUState`` that and a ``ReLU``. At the end of a step each state
  component becomes an atom: its centres are the distinct entries of ``T`` (entries closer than
  ``MERGE`` relative are one centre, the difference moved into the offset), its offset ``[lo, hi]``.
* **Size.** Where the union of supports would hold more than ``JOINT_VALUES`` assignments, operands
  are widened to intervals (largest support first) until it does not; after each rule, an atom along
  which ``T`` varies by at most ``MERGE`` relative is dropped, its variation moved into the offset.
  Both only widen: sound.
* **Floats.** Tables and offsets are float64. Every rule widens ``[lo', hi']`` by a bound on its
  rounding: ``gamma_(k+2) (sum |a_j| (max |T_j| + max(|lo_j|, |hi_j|)) + |b|)`` for a sum of ``k``
  terms (Higham's bound on a float dot product, ``u = 2**-53``; the extra rounding covers the
  conversion of a rational weight to a float), ``2 u`` times the magnitudes for a ReLU or a product,
  doubled, plus ``2**-1000`` per rule for underflow. So every bound is sound for the exact values
  of the program, not for a float run of it.

**Soundness.** By induction over the steps and, within a step, over the nodes in topological order:
if every atom's actual value is one of its centres plus its offset, every rule above yields a table
and offset containing the node's actual value (each rule is an over-approximation of the exact
operation on every assignment, rounding included), and the end of the step turns the states' values
into atoms whose centres and offsets contain them. Sequences of at most ``max_length`` steps
are prefixes of the unrolled run, so the union over its steps of ``min T + lo .. max T + hi`` bounds
every step of every such sequence. The result is intersected with ``value_bounds`` (both sound), so
it is never looser than the interval analysis.

**Cost.** At most linear in ``max_length`` and in the number of node components, times the table
sizes (at most ``JOINT_VALUES`` entries), and far less where the program settles: a value at a step is
a function of what its rule reads there, bit for bit, and an atom whose centres and offset repeat is the
same atom (``_Atoms``), so what reads what it read at an earlier step reuses that step's result, which
is the one the rules would compute again (the soundness above holds as it is). Reused are the values of
each group of nodes that depend on the same states (``_Group``: the token atoms, phase flags and
permutation counters of Listing 2 run in a period and cost one look-up per step), and each component's
value (``_Stepper``: a register written at one step in four is computed at those steps). A rule whose
result is an operand as it is, bit for bit (a copy ``1 x + 0``, a product by the exact constant 1:
``_copied_term``, ``_times_one``; a product by an exact zero, ``_times_zero``; a state that kept its
atom's values, ``_atom_as_it_is``), passes it on without its tables. ``benchmarks/build_time.py``
times the builds. Without ``max_length``, or for an ``Input`` with an unbounded component, it is
``value_bounds`` itself.
"""

from __future__ import annotations

import itertools
import math
import operator
import struct
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from lsrl.errors import LsrlError, whole_number
from lsrl.kinds import STATE_KINDS
from lsrl.lang import nodes as N
from lsrl.lang.bounds import ValueRange, value_bounds
from lsrl.lang.program import topological_order
from lsrl.numbers import ZERO, Bound, Matrix, to_rational

ATOM_VALUES = 4096  # a state component or token with more distinct values is an interval
JOINT_VALUES = 1 << 14  # the largest table (joint assignments of a value's atoms)
MERGE = 2.0 ** -40  # centres (and table slices) this close, relative, are merged into the offset
MAX_GRID = 60  # finer grids are not tracked (their values get rounding slack)
EXACT_UNITS = 2.0 ** 51  # a sum of multiples of 2**-q below 2**(51 - q) is exact in float64, with room
EXACT_STATE_BITS = 1 << 16  # a fixed state sequence is carried exactly while its denominators are this small
MAX_UNROLLED = 100_000  # longer max_length: the interval analysis alone
MEMO_STEPS = 64  # per node, the results of this many distinct steps are kept for reuse (periods up to this)
_SOURCE_STRIDE = 1 << 48  # atom ids: source * _SOURCE_STRIDE + a serial number
_U = 2.0 ** -53
_TINY = 2.0 ** -1000


class Value:
    """One component at one step: in ``table[a] + [lo, hi]`` for the assignment ``a`` of ``support``
    (a constant: ``table`` a float, no support). ``grid``: table and offsets are multiples of
    ``2**-grid`` computed exactly (no rounding slack), or None."""

    __slots__ = ("support", "table", "lo", "hi", "grid", "least", "most", "size", "low", "high", "squeezed",
                 "_settled", "_negative_zero", "__weakref__")

    def __init__(self, support: tuple[int, ...], table: Any, lo: float, hi: float, grid: int | None) -> None:
        self.support, self.table, self.lo, self.hi, self.grid = support, table, lo, hi, grid
        if support:
            self.least, self.most = float(table.min()), float(table.max())
        else:
            self.least = self.most = float(table)
        self.size = max(abs(self.least), abs(self.most)) + max(abs(lo), abs(hi))  # the largest |value|
        self.low, self.high = self.least + lo, self.most + hi  # its bounds
        self.squeezed = False  # known to be its own ``_squeezed`` (set there)
        self._settled: bool | None = None
        self._negative_zero: bool | None = None

    @property
    def settled(self) -> bool:
        """Whether a rule that makes this table again (bit for bit) and this offset and grid makes this value:
        its entries finite, ``_joint`` leaving it alone (its table within ``JOINT_VALUES``) and ``_squeezed`` too.
        Found once per value."""
        if self._settled is None:
            self._settled = (math.isfinite(self.least) and math.isfinite(self.most)
                             and (len(self.support) <= 1 or self.table.size <= JOINT_VALUES)
                             and (self.squeezed or _squeezed(self) is self))
        return self._settled

    @property
    def negative_zero(self) -> bool:
        """Whether the table holds a -0.0 (found once per value)."""
        if self._negative_zero is None:
            table = self.table
            self._negative_zero = (self.least <= 0 <= self.most) and bool(np.signbit(table[table == 0]).any())
        return self._negative_zero

    @property
    def contents(self) -> tuple:
        """Everything the rules read, bit for bit (-0.0 is not 0.0): equal contents, equal results."""
        table = (self.table.shape, self.table.tobytes()) if self.support else ((), struct.pack("<d", self.table))
        return (self.support, *table, struct.pack("<dd", self.lo, self.hi), self.grid)

    @property
    def summary(self) -> tuple:
        """``contents`` but for the table's entries: its shape and extremes (bit for bit)."""
        if not self.support:
            return self.contents
        shape = self.table.shape
        return (self.support, shape, struct.pack("<dddd", self.least, self.most, self.lo, self.hi), self.grid)

    def same(self, other: Value) -> bool:
        """Whether ``other`` has the contents of this value (of the same ``summary``): their tables bit for bit."""
        if not self.support:
            return True  # the summary is the contents
        return bool(np.array_equal(self.table.view(np.uint64), other.table.view(np.uint64)))


def _constant(value: float, lo: float = 0.0, hi: float = 0.0) -> Value:
    grids = [_dyadic(v) for v in (value, lo, hi)]
    known = [g for g in grids if g is not None]
    return Value((), float(value), lo, hi, max(known) if len(known) == len(grids) else None)


_dyadics: dict[float, int | None] = {}


def _dyadic(value: float) -> int | None:
    """The least ``q <= MAX_GRID`` with ``value * 2**q`` a whole number, or None (cached)."""
    if value not in _dyadics:
        _dyadics[value] = next((q for q in range(MAX_GRID + 1) if math.ldexp(value, q).is_integer()), None)
    return _dyadics[value]


def _exact_float(value: object) -> Value:
    """A rational as a float constant, the conversion's error in the offset."""
    rational = to_rational(value)
    near = float(rational)
    slack = abs(near) * _U + _TINY if to_rational(near) != rational else 0.0
    return _constant(near, -slack, slack)


def _widened(value: Value) -> Value:
    """``value`` as an interval (no support)."""
    return Value((), 0.0, value.low, value.high, value.grid) if value.support else value


def _exact(grid: int | None, magnitude: float) -> bool:
    """Whether every partial result of magnitude at most ``magnitude`` on the grid ``2**-grid`` is a
    float64 computed exactly: a whole multiple of ``2**-grid`` below ``2**51`` of them."""
    return grid is not None and grid <= MAX_GRID and magnitude * 2.0 ** grid < EXACT_UNITS


def _spread(value: Value, support: tuple[int, ...]) -> Any:
    """``value.table`` with an axis of length 1 for each atom of ``support`` it does not read."""
    if value.support == support or not value.support:
        return value.table
    shape = [value.table.shape[value.support.index(atom)] if atom in value.support else 1
             for atom in support]
    return value.table.reshape(shape)


def _joint(values: list[Value], sizes: dict[int, int]) -> tuple[list[Value], tuple[int, ...]]:
    """``values`` with the largest supports widened to intervals until their union has at most
    ``JOINT_VALUES`` assignments; and that union."""
    while True:  # each round widens one value: at most len(values) rounds
        atoms = {atom for value in values for atom in value.support}
        if len(atoms) <= 1 or math.prod(sizes[atom] for atom in atoms) <= JOINT_VALUES:
            return values, tuple(sorted(atoms))
        largest = max(range(len(values)), key=lambda k: math.prod(sizes[a] for a in values[k].support))
        values = values[:largest] + [_widened(values[largest])] + values[largest + 1:]


def _squeezed(value: Value) -> Value:
    """Drop every atom along which the table varies by at most ``MERGE`` relative (into the offset)."""
    if not value.support:
        return value
    if value.least == value.most:
        return Value((), value.least, value.lo, value.hi, value.grid)
    table, support, lo, hi = value.table, list(value.support), value.lo, value.hi
    scale = MERGE * (1.0 + max(abs(value.least), abs(value.most)))
    if len(support) == 1:
        return _squeezed_line(value, scale)
    axis = 0
    while axis < len(support):  # each round drops an axis or moves past it: at most 2 len(support) rounds
        if _visibly_varies(table, axis, scale):
            axis += 1
            continue
        first = np.take(table, [0], axis=axis)
        difference = table - first
        if float(np.abs(difference).max()) <= scale:
            slack = 0.0 if value.grid is not None else 2 * _U * scale + _TINY  # the subtraction's rounding
            lo += float(difference.min()) - slack
            hi += float(difference.max()) + slack
            table = np.squeeze(first, axis=axis)
            del support[axis]
        else:
            axis += 1
    if len(support) == len(value.support):
        value.squeezed = True
        return value
    return Value(tuple(support), table if support else float(table), lo, hi, value.grid)


def _visibly_varies(table: np.ndarray, axis: int, scale: float) -> bool:
    """Whether the table's last and first entries along ``axis``, at index 0 or at the last index along the
    others, differ by more than ``scale`` (or by NaN): then ``table - table[0]`` along ``axis`` does too, and
    ``_squeezed`` keeps the axis; a look at four entries that spares it the arrays."""
    for corner in (0, -1):
        first, last = [corner] * table.ndim, [corner] * table.ndim
        first[axis], last[axis] = 0, -1
        if not abs(float(table[tuple(last)]) - float(table[tuple(first)])) <= scale:
            return True
    return False


def _squeezed_line(value: Value, scale: float) -> Value:
    """``_squeezed`` of a table over one atom, without its arrays: rounding is monotone, so the extremes of
    ``table - table[0]`` are ``least - table[0]`` and ``most - table[0]`` (and NaN keeps the atom, as there)."""
    first = float(value.table[0])
    least, most = value.least - first, value.most - first
    if not (abs(least) <= scale and abs(most) <= scale):
        value.squeezed = True
        return value
    slack = 0.0 if value.grid is not None else 2 * _U * scale + _TINY  # the subtraction's rounding
    return Value((), first, value.lo + (least - slack), value.hi + (most + slack), value.grid)


def _linear_row(row: list[tuple[int, float, int | None]], constant: Value, inputs: Sequence[Value],
                sizes: dict[int, int]) -> Value:
    """``sum a_j inputs[j] + constant`` over the non-zero ``(j, a_j, grid of a_j)`` (floats) of ``row`` (a row of
    ``A v + b``), ``constant`` a constant."""
    copied = _copied_term(row, constant, inputs)
    return copied if copied is not None else _linear_terms(row, constant, inputs, sizes)


def _copied_term(row: list[tuple[int, float, int | None]], constant: Value, inputs: Sequence[Value]
                 ) -> Value | None:
    """The row's one term with a support where ``_linear_terms`` would return it as it is, bit for bit; else None.

    That is a copy: its weight 1, every other addend (the constant, the other terms' tables) a zero, the sum
    exact. Then each entry of the sum is the term's entry plus zeros, itself, except a -0.0 that a +0.0 turns
    into +0.0 (none may be in the table); the offsets are replayed as the rule computes them (scalars, no
    tables) and must be the term's, bit for bit; and ``_unchanged`` checks the rest of the rule."""
    term = None
    for j, a, _ in row:
        value = inputs[j]
        if value.support:
            if term is not None or a != 1.0:
                return None
            term = value
        elif value.table != 0:
            return None
    if term is None or constant.table != 0 or term.negative_zero:
        return None
    grid, lo, hi, magnitude = constant.grid, constant.lo, constant.hi, constant.size
    for j, a, a_grid in row:  # as _linear_terms, in its order
        value = inputs[j]
        grid = None if grid is None or a_grid is None or value.grid is None else max(grid, a_grid + value.grid)
        if a > 0:
            lo, hi = lo + a * value.lo, hi + a * value.hi
        else:
            lo, hi = lo + a * value.hi, hi + a * value.lo
        magnitude += abs(a) * value.size
    if not _exact(grid, magnitude):
        return None
    return term if _unchanged(term, lo - 0.0, hi + 0.0, grid) else None


def _unchanged(value: Value, lo: float, hi: float, grid: int | None) -> bool:
    """Whether a rule that computes ``value.table`` bit for bit from ``value`` and, for its offset and grid,
    ``lo, hi`` and ``grid``, returns ``value`` as it is: those are ``value``'s, bit for bit, and it is
    ``Value.settled``."""
    return (grid == value.grid and struct.pack("<dd", lo, hi) == struct.pack("<dd", value.lo, value.hi)
            and value.settled)


def _linear_terms(row: list[tuple[int, float, int | None]], constant: Value, inputs: Sequence[Value],
                  sizes: dict[int, int]) -> Value:
    """``_linear_row`` computed term by term."""
    grid = constant.grid
    terms = []
    for j, _, a_grid in row:
        value = inputs[j]
        terms.append(value)
        grid = None if grid is None or a_grid is None or value.grid is None else max(grid, a_grid + value.grid)
    support: tuple[int, ...] = ()
    if any(value.support for value in terms):
        terms, support = _joint(terms, sizes)
    # c + a_1 T_1 + ...: broadcasting gives the joint table (the terms' supports are its support), each
    # entry the same float operations; 1 x and -1 x are x and -x exactly, so their products are skipped
    table = constant.table
    lo, hi, magnitude = constant.lo, constant.hi, constant.size
    for (_, a, _), value in zip(row, terms):
        term = _spread(value, support) if value.support else value.table
        table = table + term if a == 1.0 else table - term if a == -1.0 else table + a * term
        if a > 0:
            lo, hi = lo + a * value.lo, hi + a * value.hi
        else:
            lo, hi = lo + a * value.hi, hi + a * value.lo
        magnitude += abs(a) * value.size
    exact = _exact(grid, magnitude)
    slack = 0.0 if exact else 2 * _gamma(len(row) + 2) * magnitude + _TINY
    result = Value(support, table, lo - slack, hi + slack, grid if exact else None)
    return _squeezed(result) if support else result


def _add(p: int | None, q: int | None) -> int | None:
    return None if p is None or q is None else p + q


def _gamma(n: int) -> float:
    return n * _U / (1 - n * _U)


def _relu(value: Value) -> Value:
    exact = _exact(value.grid, value.size)
    slack = 0.0 if exact else 4 * _U * value.size + _TINY
    grid = value.grid if exact else None
    if not value.support:
        point = float(value.table)
        centre = max(point, 0.0)
        low, high = max(point + value.lo, 0.0) - centre - slack, max(point + value.hi, 0.0) - centre + slack
        return Value((), centre, low, high, grid)
    if value.low >= 0:  # relu is the identity on the whole range
        return value
    if value.high <= 0:
        return Value((), 0.0, 0.0, 0.0, 0)
    table = value.table
    positive = np.maximum(table, 0.0)
    lows = np.maximum(table + value.lo, 0.0) - positive
    highs = np.maximum(table + value.hi, 0.0) - positive
    return _squeezed(Value(value.support, positive, float(lows.min()) - slack, float(highs.max()) + slack, grid))


def _times_interval(table: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Entry-wise ``table * [lo, hi]`` (0 times an infinite end is 0)."""
    if math.isfinite(lo) and math.isfinite(hi):
        first, second = table * lo, table * hi
    else:
        with np.errstate(invalid="ignore"):
            first, second = np.nan_to_num(table * lo, nan=0.0), np.nan_to_num(table * hi, nan=0.0)
    return np.minimum(first, second), np.maximum(first, second)


def _product(x: Value, y: Value, sizes: dict[int, int]) -> Value:
    known = _times_one(x, y)
    if known is None:
        known = _times_zero(x, y)
    return known if known is not None else _product_tables(x, y, sizes)


def _times_one(x: Value, y: Value) -> Value | None:
    """The factor with a support where ``_product_tables`` would return it as it is, bit for bit, the other
    being the constant 1 with a zero offset; else None.

    Then the table is the factor's times 1.0, itself; the offset's rule is ``min(T [0, 0] + [lo, hi]) + 0.0``
    (corners all 0.0, no slack when exact), with finite entries ``lo`` itself, or +0.0 where ``lo`` is a zero
    (and so for ``hi``); ``_unchanged`` checks that this is the factor's offset and the rest of the rule."""
    value, one = (x, y) if x.support else (y, x)
    if not value.support or one.support or one.table != 1.0 or one.lo != 0 or one.hi != 0:
        return None
    if not (math.isfinite(value.lo) and math.isfinite(value.hi) and value.lo <= value.hi):
        return None
    grid = _add(x.grid, y.grid)
    if not _exact(grid, 4 * x.size * y.size):
        return None
    lo, hi = (value.lo if value.lo != 0 else 0.0), (value.hi if value.hi != 0 else 0.0)
    return value if _unchanged(value, lo, hi, grid) else None


def _times_zero(x: Value, y: Value) -> Value | None:
    """What ``_product_tables`` returns, bit for bit, where one factor is a zero (either sign) with a zero offset
    and the other has a support, finite entries of one sign and no -0.0, and the product is exact; else None.

    Then the table's entries are all the same zero (its sign: the factors' signs'), so ``_squeezed`` makes it
    that constant; the offset's rule is ``min`` (``max``) of zeros plus the corners' 0.0, +0.0."""
    value, zero = (x, y) if x.support else (y, x)
    if not value.support or zero.support or zero.table != 0 or zero.lo != 0 or zero.hi != 0:
        return None
    if not all(map(math.isfinite, (value.least, value.most, value.lo, value.hi))):
        return None
    if len(value.support) > 1 and value.table.size > JOINT_VALUES:  # _joint would widen it
        return None
    grid = _add(x.grid, y.grid)
    if not _exact(grid, 4 * x.size * y.size):
        return None
    if value.least >= 0 and not value.negative_zero:
        return Value((), 1.0 * zero.table, 0.0, 0.0, grid)
    if value.most < 0:
        return Value((), -1.0 * zero.table, 0.0, 0.0, grid)
    return None


def _product_tables(x: Value, y: Value, sizes: dict[int, int]) -> Value:
    """``_product`` computed on the tables."""
    (x, y), support = _joint([x, y], sizes)
    tx, ty = _spread(x, support), _spread(y, support)
    a_low, a_high = _times_interval(tx, y.lo, y.hi)
    b_low, b_high = _times_interval(ty, x.lo, x.hi)
    corners = [0.0 if p == 0 or q == 0 else p * q for p in (x.lo, x.hi) for q in (y.lo, y.hi)]
    grid = _add(x.grid, y.grid)
    exact = _exact(grid, 4 * x.size * y.size)
    slack = 0.0 if exact else 4 * _U * x.size * y.size + _TINY
    lo = float(np.min(a_low + b_low)) + min(corners) - slack
    hi = float(np.max(a_high + b_high)) + max(corners) + slack
    table = tx * ty
    return _squeezed(Value(support, table if support else float(table), lo, hi, grid if exact else None))


class _Atoms:
    """The atoms handed out so far and their sizes, and the values made from them.

    An atom's id is its *source* (a state component or an ``Input`` component, numbered in the order the step
    creates them: the states' components, then the inputs') and its contents: one step never reads two atoms of
    one source, and a source whose centres and offset repeat at a later step gets the same id there (while
    it is among its last ``MEMO_STEPS`` contents), so that step's values repeat bit for bit and ``_unrolled``
    reuses them. Ids sort by source, as atoms handed out in creation order would."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self._ids: dict[int, dict[tuple, int]] = {}  # per source: contents -> id
        self._serials = itertools.count()
        self._values: weakref.WeakValueDictionary[tuple, Value] = weakref.WeakValueDictionary()

    def new(self, source: int, centres: np.ndarray, lo: float, hi: float, grid: int | None) -> Value:
        contents = (centres.tobytes(), struct.pack("<dd", lo, hi), grid)
        ids = self._ids.setdefault(source, {})
        atom = ids.get(contents)
        if atom is None:
            atom = source * _SOURCE_STRIDE + next(self._serials)
            _remember(ids, contents, atom)
            self.sizes[atom] = len(centres)
        return Value((atom,), centres, lo, hi, grid)

    def canonical(self, values: list[Value]) -> tuple[Value, ...]:
        """``values``, each as the one object of its contents where one is kept: identity compares them. Kept by
        ``Value.summary`` and compared bit for bit (no hash of a whole table); where a value of the same summary
        but other contents is kept, the value itself (its equals then recompute, as fresh values do)."""
        return tuple(self._canonical(value) for value in values)

    def _canonical(self, value: Value) -> Value:
        kept = self._values.setdefault(value.summary, value)
        return kept if kept is value or kept.same(value) else value


def _as_atom(value: Value, atoms: _Atoms, source: int) -> Value:
    """A state component's value as the next step reads it: an atom over its distinct values."""
    if not value.support or _atom_as_it_is(value, source):
        return value
    centres = np.unique(value.table)
    lo, hi = value.lo, value.hi
    if len(centres) > 1:  # merge centres closer than MERGE (relative) into clusters
        scale = MERGE * (1.0 + float(np.abs(centres).max()))
        gaps = np.diff(centres) > scale
        if gaps.all() and math.isfinite(centres[0]) and math.isfinite(centres[-1]):
            # no cluster: every deviation in _merged is x - x = 0.0 (sorted: infinities and NaN at the ends)
            slack = 0.0 if value.grid is not None else 2 * _U * scale + _TINY
            lo, hi = lo + 0.0 - slack, hi + 0.0 + slack
        else:
            centres, lo, hi = _merged(centres, np.concatenate([[True], gaps]), value.grid, scale, lo, hi)
    if len(centres) == 1:
        return Value((), float(centres[0]), lo, hi, value.grid)
    if len(centres) > ATOM_VALUES:
        return Value((), 0.0, float(centres[0]) + lo, float(centres[-1]) + hi, value.grid)
    return atoms.new(source, centres, lo, hi, value.grid)


def _atom_as_it_is(value: Value, source: int) -> bool:
    """Whether ``_as_atom`` makes of ``value``, a table over one atom of ``source``, the atom it is but for its id:
    its entries increasing with every gap beyond the merge scale (so they are their own distinct centres), its ends
    finite, exact (no slack) and its offsets their own plus 0.0. The next step then reads the atom's id again: ids
    only order atoms by source (one per source at a step), so every value computed from it is the same."""
    table = value.table
    if len(value.support) != 1 or value.support[0] // _SOURCE_STRIDE != source or value.grid is None:
        return False
    if len(table) < 2 or not (math.isfinite(value.least) and math.isfinite(value.most)):
        return False
    if struct.pack("<dd", value.lo + 0.0, value.hi + 0.0) != struct.pack("<dd", value.lo, value.hi):
        return False
    scale = MERGE * (1.0 + max(abs(value.least), abs(value.most)))
    return bool((np.diff(table) > scale).all())


def _merged(centres: np.ndarray, starts: np.ndarray, grid: int | None, scale: float, lo: float, hi: float
            ) -> tuple[np.ndarray, float, float]:
    """The clusters' first centres (``starts`` marks them) and the offset widened by the merged centres'."""
    labels = np.cumsum(starts) - 1
    kept = centres[starts]
    deviation = centres - kept[labels]
    slack = 0.0 if grid is not None else 2 * _U * scale + _TINY  # the subtraction's rounding
    return kept, lo + float(deviation.min()) - slack, hi + float(deviation.max()) + slack


class _Weights:
    """A node's matrices as float rows of terms (``terms``) and constant biases, converted once."""

    def __init__(self, node: Any) -> None:
        self.terms: list = _rows(node.A) if hasattr(node, "A") else []
        self.b: list[Value] = [_exact_float(v) for v in node.b.values()] if hasattr(node, "b") else []
        self.init: list[Value] = []
        self.exact_init: list = []
        if node.kind in STATE_KINDS:
            state_rows, input_rows = _rows(node.A), _rows(node.B)
            width = node.dim
            self.terms = [s + [(width + j, a, g) for j, a, g in x] for s, x in zip(state_rows, input_rows)]
            self.init = [_exact_float(v) for v in node.init_state.values()]
            self.exact_rows, self.exact_inputs = _rows(node.A, exact=True), _rows(node.B, exact=True)
            self.exact_b = [to_rational(v) for v in node.b.values()]
            self.exact_init = [to_rational(v) for v in node.init_state.values()]


def _rows(matrix: Matrix, exact: bool = False) -> list[list[tuple]]:
    """Per row, the non-zero ``(j, a, grid of a)`` (floats) or ``(j, a)`` (``exact``: rationals)."""
    rows: list[list[tuple]] = [[] for _ in range(matrix.shape2d[0])]
    for i, j, a in matrix.entries():
        if a != 0:
            weight = float(to_rational(a))
            # a weight that is no float (1/3) is computed with rounding slack, never on a grid
            grid = _dyadic(weight) if to_rational(weight) == to_rational(a) else None
            rows[i].append((j, to_rational(a)) if exact else (j, weight, grid))
    return rows


def _exact_state(node: N.Node, weights: _Weights, state: list, inputs: Sequence[Value]) -> list:
    """The state's exact (rational) components at this step where they are fixed sequences: a
    component whose row reads only components known exactly at the previous step and inputs that are
    exact constants (the permutation counters: no drive); None for the others. Carrying them exactly
    keeps rounding slack from growing around the state's loop (``|A|`` of a rotation block expands
    intervals by up to the golden ratio per step)."""
    updated: list = []
    for row, inputs_row, b in zip(weights.exact_rows, weights.exact_inputs, weights.exact_b):
        known = all(state[j] is not None for j, _ in row) and all(
            not inputs[j].support and inputs[j].lo == 0 and inputs[j].hi == 0 for j, _ in inputs_row)
        if not known:
            updated.append(None)
            continue
        value = b + sum((a * state[j] for j, a in row), ZERO) + sum(
            (a * to_rational(inputs[j].table) for j, a in inputs_row), ZERO)
        value = max(value, ZERO) if isinstance(node, N.ReLUState) else value
        updated.append(value if value.denominator.bit_length() <= EXACT_STATE_BITS else None)
    return updated


def _outward(bound: Bound, direction: float) -> float:
    """A rational bound as a float no tighter than it (one step towards ``direction`` where it rounds)."""
    near = float(bound)
    return near if to_rational(near) == to_rational(bound) else math.nextafter(near, direction)


def _input_values(node: N.Input, atoms: _Atoms, first_source: int) -> list[Value]:
    out = []
    for source, (low, high) in enumerate(zip(*node.bounds), start=first_source):
        lo, hi = _outward(low, -math.inf), _outward(high, math.inf)
        count = hi - lo + 1
        if node.integer and lo == math.ceil(lo) and 1 < count <= ATOM_VALUES:
            out.append(atoms.new(source, np.arange(lo, hi + 1.0), 0.0, 0.0, 0))
        else:
            out.append(_constant(0.0, lo, hi))
    return out


def _reads(node: Any, weights: _Weights) -> list[tuple[int, ...]]:
    """Per component, the operands (``_operands``) its rule reads."""
    if isinstance(node, (N.Linear, N.StateNode)):
        return [tuple(j for j, _, _ in row) for row in weights.terms]
    dim: int = node.dim
    if isinstance(node, N.Multi):
        return [(i, dim + i) for i in range(dim)]
    return [(i,) for i in range(dim)]


def _operands(node: Any, inputs: list[tuple[Value, ...]], previous: tuple[Value, ...]) -> tuple[Value, ...]:
    """The values the node's components read: its inputs' components (a state's: its previous ones first)."""
    if isinstance(node, N.StateNode):
        return previous + inputs[0]
    return tuple(v for part in inputs for v in part)


def _component(node: Any, weights: _Weights, i: int, operands: tuple[Value, ...], sizes: dict[int, int]) -> Value:
    """The node's component ``i`` at this step, from the operands it reads."""
    if isinstance(node, N.Linear):
        return _linear_row(weights.terms[i], weights.b[i], operands, sizes)
    if isinstance(node, N.ReLU):
        return _relu(operands[i])
    if isinstance(node, N.Multi):
        return _product(operands[i], operands[len(operands) // 2 + i], sizes)
    if isinstance(node, N.StateNode):
        updated = _linear_row(weights.terms[i], weights.b[i], operands, sizes)
        return _relu(updated) if isinstance(node, N.ReLUState) else updated
    raise TypeError(node)


def _nothing(operands: tuple[Value, ...]) -> tuple:
    """What a component that reads no operand reads (a row of zero weights)."""
    return ()


class _Stepper:
    """One node's rules over the steps, with what its components computed at recent steps.

    A component's value is a function of the operands it reads (``_reads``), bit for bit, and a state
    component's atom a function of its value: both are kept per component (its last ``MEMO_STEPS`` distinct
    reads), so a component whose reads repeat costs a look-up even where others of its node change (the
    answer register of Listing 2 changes one component at a step)."""

    def __init__(self, node: Any, first_source: int) -> None:
        self.node = node
        self.weights = _Weights(node)
        self.first_source = first_source
        self.reads = [] if isinstance(node, N.Concat) else _reads(node, self.weights)
        self.read = [operator.itemgetter(*reads) if reads else _nothing for reads in self.reads]
        self.parts: list[dict[tuple, Value]] = [{} for _ in self.reads]
        self.atoms: list[dict[Value, Value]] = [{} for _ in self.reads]
        self.exact_steps: dict[tuple, tuple[tuple, tuple]] = {}

    def step(self, inputs: list[tuple[Value, ...]], previous: tuple[Value, ...], exact: tuple | None, atoms: _Atoms
             ) -> tuple[tuple[Value, ...], tuple | None, tuple[Value, ...] | None]:
        """The node's components at this step; for a state (``exact`` not None) also its exact components
        (``_exact_state``) and its components as the atoms the next step reads. Values as ``atoms.canonical``
        objects."""
        operands = _operands(self.node, inputs, previous)
        if isinstance(self.node, N.Concat):
            return operands, None, None
        values = tuple(self._part(i, operands, atoms) for i in range(len(self.reads)))
        if exact is None:
            return values, None, None
        exact, known = self._exact(exact, inputs[0], atoms)
        values = tuple(v if e is None else e for v, e in zip(values, known))
        return values, exact, tuple(self._atom(i, v, atoms) for i, v in enumerate(values))

    def _exact(self, exact: tuple, inputs: tuple[Value, ...], atoms: _Atoms) -> tuple[tuple, tuple]:
        """The exact components after this step (``_exact_state``) and each known one as a float value (None for
        the others), kept per previous exact components and inputs (the last ``MEMO_STEPS``)."""
        key = (exact, inputs)
        result = self.exact_steps.get(key)
        if result is None:
            after = tuple(_exact_state(self.node, self.weights, list(exact), inputs))
            result = after, tuple(None if e is None else atoms.canonical([_exact_float(e)])[0] for e in after)
            _remember(self.exact_steps, key, result)
        return result

    def _part(self, i: int, operands: tuple[Value, ...], atoms: _Atoms) -> Value:
        key = self.read[i](operands)
        value = self.parts[i].get(key)
        if value is None:
            value = _component(self.node, self.weights, i, operands, atoms.sizes)
            if not any(value is operands[j] for j in self.reads[i]):  # an operand passed on is canonical already
                value = atoms.canonical([value])[0]
            _remember(self.parts[i], key, value)
        return value

    def _atom(self, i: int, value: Value, atoms: _Atoms) -> Value:
        atom = self.atoms[i].get(value)
        if atom is None:
            atom = atoms.canonical([_as_atom(value, atoms, self.first_source + i)])[0]
            _remember(self.atoms[i], value, atom)
        return atom


class _Group:
    """The nodes whose values at a step are a function of the same states' previous values and exact
    components (``states``: the states they depend on, themselves included), the inputs' atoms being the same
    at every step. Its results per distinct ``states`` key are kept (the last ``MEMO_STEPS``), so a part of the
    program that settled into a period (token atoms, phase flags, permutation counters) costs one look-up per
    step, however many nodes it has."""

    def __init__(self, steppers: list[_Stepper], states: list[Any]) -> None:
        self.steppers, self.states = steppers, states
        self.known: dict[tuple, tuple[dict, dict, dict]] = {}

    def step(self, values: dict, previous: dict, exact: dict, atoms: _Atoms) -> tuple[dict, dict, dict, bool]:
        """The group's nodes' values, its states' exact components and atoms at this step (per node), and
        whether they are new (not a repeated step's)."""
        key = tuple((previous[state], exact[state]) for state in self.states)
        known = self.known.get(key)
        if known is not None:
            return (*known, False)
        now: dict = {}
        exact_now: dict = {}
        atomized: dict = {}
        for stepper in self.steppers:
            node = stepper.node
            inputs = [now[x] if x in now else values[x] for x in node.inputs]
            now[node], exact_after, atomized_after = stepper.step(inputs, previous.get(node, ()), exact.get(node),
                                                                  atoms)
            if exact_after is not None:
                exact_now[node], atomized[node] = exact_after, atomized_after
        _remember(self.known, key, (now, exact_now, atomized))
        return now, exact_now, atomized, True


def _groups(order: list[Any], first_source: dict[Any, int]) -> list[_Group]:
    """The non-``Input`` nodes of ``order`` (topological) grouped by the states they depend on; a group after
    every group whose states are a subset of its own (those its nodes read)."""
    depends: dict[Any, frozenset] = {}
    members: dict[frozenset, list[Any]] = {}
    for node in order:
        depends[node] = frozenset().union(*(depends[x] for x in node.inputs))
        if isinstance(node, N.StateNode):
            depends[node] |= {node}
        if not isinstance(node, N.Input):
            members.setdefault(depends[node], []).append(node)
    position = {node: k for k, node in enumerate(order)}
    groups = sorted(members.items(), key=lambda item: len(item[0]))
    return [_Group([_Stepper(node, first_source.get(node, 0)) for node in nodes],
                   sorted(states, key=position.__getitem__)) for states, nodes in groups]


def _first_sources(order: list[Any], states: list[Any]) -> dict[Any, int]:
    """Per state and ``Input`` node, the source number of its first component (``_Atoms``): the states'
    components first (their atoms are made at the end of the step before), then the inputs'."""
    first: dict[Any, int] = {}
    for node in states + [node for node in order if isinstance(node, N.Input)]:
        first[node] = sum(x.dim for x in first)
    return first


def _unrolled(output: N.Node, max_length: int) -> dict[N.Node, tuple[list[float], list[float]]]:
    """Per node (``output`` and its ancestors), per component, ``(low, high)`` over the steps.

    A node's values at a step are a function of what it reads (its inputs' values, its previous state and
    exact components, bit for bit: ``Value.contents``), and atoms of equal contents have equal ids (``_Atoms``), so
    what reads what it read at an earlier step computes what it computed then: the results of recent steps
    are kept per group of nodes (``_Group``) and per component (``_Stepper``) and reused, and values seen
    before leave the bounds as they are. The parts of a program that settle into a period (token atoms,
    phase flags, permutation counters) cost a look-up per step; only the parts that keep changing are
    computed. Groups run in an order where every group they read from runs before them."""
    order: list[Any] = topological_order(output)
    states = [node for node in order if isinstance(node, N.StateNode)]
    first_source = _first_sources(order, states)
    groups = _groups(order, first_source)
    weights = {stepper.node: stepper.weights for group in groups for stepper in group.steppers}
    atoms = _Atoms()
    low = {node: [math.inf] * node.dim for node in order}
    high = {node: [-math.inf] * node.dim for node in order}
    # every step reads the same input atoms
    values = {node: atoms.canonical(_input_values(node, atoms, first_source[node]))
              for node in order if isinstance(node, N.Input)}
    for node, components in values.items():
        _widen_bounds(low, high, node, components)
    previous = {node: atoms.canonical(weights[node].init) for node in states}
    exact = {node: tuple(weights[node].exact_init) for node in states}
    for _ in range(max_length):  # one round per step
        atomized: dict = {}
        exact_next: dict = {}
        for group in groups:
            now, exact_now, atomized_now, new = group.step(values, previous, exact, atoms)
            values.update(now)
            exact_next.update(exact_now)
            atomized.update(atomized_now)
            if new:
                for node, components in now.items():
                    _widen_bounds(low, high, node, components)
        previous, exact = atomized, exact_next
    return {node: (low[node], high[node]) for node in order}


def _widen_bounds(low: dict, high: dict, node: Any, values: tuple[Value, ...]) -> None:
    low[node] = [min(a, v.low) for a, v in zip(low[node], values)]
    high[node] = [max(a, v.high) for a, v in zip(high[node], values)]


def _remember(results: dict, key: Any, result: Any) -> None:
    """Keep ``result`` under ``key``, forgetting the oldest beyond ``MEMO_STEPS`` (bounded memory)."""
    if len(results) >= MEMO_STEPS:
        del results[next(iter(results))]
    results[key] = result


# node -> {max_length: (node.version when computed, its bounds)}; a rewiring above a node bumps its version
_known: weakref.WeakKeyDictionary[N.Node, dict[int, tuple[int, ValueRange]]] = weakref.WeakKeyDictionary()


def _intersected(sharp: tuple[list[float], list[float]], interval: ValueRange) -> ValueRange:
    low = [max(to_rational(a), b) if math.isfinite(a) else b for a, b in zip(sharp[0], interval.low)]
    high = [min(to_rational(a), b) if math.isfinite(a) else b for a, b in zip(sharp[1], interval.high)]
    return ValueRange(low, high)


def relational_bounds(node: N.Node, max_length: int | None = None) -> ValueRange:
    """``value_bounds(node, max_length)`` sharpened by the unrolled relational analysis of the module
    doc: per component ``(low, high)``, rational or infinite, sound at every step of every sequence of
    at most ``max_length`` steps whose inputs lie within the declared ``Input`` bounds, and never
    looser than ``value_bounds``. The bounds of every ancestor of ``node`` are computed (and cached)
    at once, so asking for the last layer of a compiled program first makes the others free."""
    interval = value_bounds(node, max_length)
    if max_length is None or max_length > MAX_UNROLLED:
        return interval
    if whole_number(max_length) is None:
        raise LsrlError(f"relational_bounds: max_length must be a positive integer, got {max_length!r}")
    length = int(max_length)
    cached = _known.get(node, {}).get(length)
    if cached is not None and cached[0] == node.version:
        return cached[1]
    order = topological_order(node)
    inputs = [x for x in order if isinstance(x, N.Input)]
    if any(not math.isfinite(float(v)) for x in inputs for side in x.bounds for v in side):
        return interval
    for current, sharp in _unrolled(node, length).items():
        sharpened = _intersected(sharp, value_bounds(current, length))
        _known.setdefault(current, {})[length] = (current.version, sharpened)
    return _known[node][length][1]
