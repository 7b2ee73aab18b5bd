"""The values and rules of the relational value analysis (``lsrl.lang.relational_bounds``, whose module doc
states the analysis and its soundness): a component at a step as a table over its atoms plus an offset
interval (``Value``), the rules that compute such values exactly or with a bound on their rounding (``linear_row``,
``relu``, ``product``), the shortcuts that pass an operand on as it is where a rule would return it bit for bit
(``_copied_term``, ``_times_one``, ``_times_zero``, ``_atom_as_it_is``), and the atoms with the objects that
stand for equal values (``Atoms``, ``as_atom``).
"""

from __future__ import annotations

import itertools
import math
import struct
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from lsrl.numbers import to_rational

ATOM_VALUES = 4096  # a state component or token with more distinct values is an interval
JOINT_VALUES = 1 << 14  # the largest table (joint assignments of a value's atoms)
MERGE = 2.0 ** -40  # centres (and table slices) this close, relative, are merged into the offset
MAX_GRID = 60  # finer grids are not tracked (their values get rounding slack)
EXACT_UNITS = 2.0 ** 51  # a sum of multiples of 2**-q below 2**(51 - q) is exact in float64, with room
DISTINCT_SPAN = 8  # a table's distinct entries are found on its grid where it spans this many points per entry
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


def constant(value: float, lo: float = 0.0, hi: float = 0.0) -> Value:
    grids = [dyadic(v) for v in (value, lo, hi)]
    known = [g for g in grids if g is not None]
    return Value((), float(value), lo, hi, max(known) if len(known) == len(grids) else None)


_dyadics: dict[float, int | None] = {}


def dyadic(value: float) -> int | None:
    """The least ``q <= MAX_GRID`` with ``value * 2**q`` a whole number, or None (cached)."""
    if value not in _dyadics:
        _dyadics[value] = next((q for q in range(MAX_GRID + 1) if math.ldexp(value, q).is_integer()), None)
    return _dyadics[value]


def exact_float(value: object) -> Value:
    """A rational as a float constant, the conversion's error in the offset."""
    rational = to_rational(value)
    near = float(rational)
    slack = abs(near) * _U + _TINY if to_rational(near) != rational else 0.0
    return constant(near, -slack, slack)


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


def linear_row(row: list[tuple[int, float, int | None]], constant: Value, inputs: Sequence[Value],
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
    """``linear_row`` computed term by term."""
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


def relu(value: Value) -> Value:
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


def product(x: Value, y: Value, sizes: dict[int, int]) -> Value:
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
    """``product`` computed on the tables."""
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


class Atoms:
    """The atoms handed out so far and their sizes, and the values made from them.

    An atom's id is its *source* (a state component or an ``Input`` component, numbered in the order the step
    creates them: the states' components, then the inputs') and its contents: one step never reads two atoms of
    one source, and a source whose centres and offset repeat at a later step gets the same id there (while
    it is among its last ``MEMO_STEPS`` contents), so that step's values repeat bit for bit and the analysis
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
            remember(ids, contents, atom)
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


def as_atom(value: Value, atoms: Atoms, source: int) -> Value:
    """A state component's value as the next step reads it: an atom over its distinct values."""
    if not value.support or _atom_as_it_is(value, source):
        return value
    centres = _distinct(value)
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


def _distinct(value: Value) -> np.ndarray:
    """``np.unique(value.table)``, bit for bit. A table on a grid (whole multiples of ``2**-grid``, checked) whose
    entries span at most ``DISTINCT_SPAN`` grid points per entry has them counted on those points instead of
    sorted: linear in the table, where the register tables of Listing 2 make sorting the larger share of the
    analysis. A table with a -0.0 or a non-finite entry is sorted (which zero, and which NaN, ``np.unique``
    keeps is its own)."""
    table = value.table
    if value.grid is None or not (math.isfinite(value.least) and math.isfinite(value.most)) or value.negative_zero:
        return np.unique(table)
    unit = math.ldexp(1.0, value.grid)
    low, high = value.least * unit, value.most * unit  # exact: a power of two (the grid is at most MAX_GRID)
    if not (-EXACT_UNITS < low and high < EXACT_UNITS and high - low <= DISTINCT_SPAN * table.size):
        return np.unique(table)
    scaled = table * unit if value.grid else table
    units = scaled.astype(np.int64)
    if not np.array_equal(units, scaled):  # an entry off the grid
        return np.unique(table)
    first = int(low)
    counts = np.bincount((units - first if first else units).ravel(), minlength=int(high) - first + 1)
    return (np.flatnonzero(counts) + first) / unit  # whole numbers below 2**51 over a power of two: exact


def _atom_as_it_is(value: Value, source: int) -> bool:
    """Whether ``as_atom`` makes of ``value``, a table over one atom of ``source``, the atom it is but for its id:
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


def remember(results: dict, key: Any, result: Any) -> None:
    """Keep ``result`` under ``key``, forgetting the oldest beyond ``MEMO_STEPS`` (bounded memory)."""
    if len(results) >= MEMO_STEPS:
        del results[next(iter(results))]
    results[key] = result
