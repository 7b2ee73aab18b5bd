"""Value lattices: where a value of a compiled program can only take finitely many values, exactly (docs/stock.md,
"Threshold units"). A lattice ``(offset, step)`` of rationals says a value lies in ``offset + step Z`` (step 0: it
is the offset). Also what exact units rest on: thresholds on a lattice, dyadic grids and sums that are exact in
floating point."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import gmpy2
import numpy as np
import torch

from lsrl.kinds import Kind
from lsrl.numbers import to_rational
from lsrl.targets.blocks import input_width
from lsrl.targets.stock.scales import MAX_THRESHOLDS

if TYPE_CHECKING:
    from lsrl.model.compiled import CompiledProgram
    from lsrl.numbers import Matrix

# A layer of a compiled path (``lsrl.lang.nodes``: ``Linear``, ``ReLU``, ``Multi``, ``LinState``, ``ReLUState``, or
# the ``Input``): which attributes it has (``A``, ``B``, ``b``, ``init_state``) follows from its kind, which the code
# checks before reading them
CompiledLayer = Any
Lattice = tuple[Any, Any]  # (offset, step), rationals: the values lie in offset + step Z

def rational_gcd(a: Any, b: Any) -> Any:
    """The largest rational ``g`` with ``a`` and ``b`` whole multiples of it (``gcd(a, 0) = |a|``)."""
    a, b = abs(gmpy2.mpq(a)), abs(gmpy2.mpq(b))
    if not a or not b:
        return a or b
    return gmpy2.mpq(gmpy2.gcd(a.numerator * b.denominator, b.numerator * a.denominator),
                     a.denominator * b.denominator)


def _exact_rows(matrix: Matrix) -> list[dict]:
    """Per row of a compiled ``Matrix``, its non-zero entries as ``{column: rational}``."""
    rows: list[dict] = [{} for _ in range(matrix.shape2d[0])]
    for i, j, a in matrix.entries():
        if a != 0:
            rows[i][j] = to_rational(a)
    return rows


def affine_lattices(rows: list[dict], bias: list, lattices: list) -> list:
    """The lattices of ``A v + b`` (None where a term's lattice is unknown): offset ``b + sum a o``, step the
    gcd of the ``a step``."""
    out: list = []
    for row, constant in zip(rows, bias):
        if any(lattices[j] is None for j in row):
            out.append(None)
            continue
        step = gmpy2.mpq(0)
        for j, a in row.items():
            step = rational_gcd(step, a * lattices[j][1])
        out.append((constant + sum((a * lattices[j][0] for j, a in row.items()), gmpy2.mpq(0)), step))
    return out


def _relu_lattice(lattice: Any) -> Any:
    """``relu`` maps ``o + g Z`` into ``{0} ∪ (o + g Z)``, inside ``gcd(o, g) Z``."""
    return None if lattice is None else (gmpy2.mpq(0), rational_gcd(lattice[0], lattice[1]))


def _product_lattice(q: Any, p: Any) -> Any:
    """``(o + g Z)(o' + g' Z)`` lies in ``o o' + gcd(o g', o' g, g g') Z``."""
    if q is None or p is None:
        return None
    return q[0] * p[0], rational_gcd(rational_gcd(q[0] * p[1], p[0] * q[1]), q[1] * p[1])


def update_rows(layer: CompiledLayer) -> tuple[list[dict], list]:
    """A state's update ``A s + B x + b`` as rows over ``[s; x]`` and its bias (rationals)."""
    n = layer.dim
    rows = [{**own, **{n + j: b for j, b in fed.items()}} for own, fed in zip(_exact_rows(layer.A),
                                                                                 _exact_rows(layer.B))]
    return rows, [to_rational(v) for v in layer.b.values()]


def _state_lattices(layer: CompiledLayer, inputs: list) -> list:
    """A state's lattices: the least ones holding its initial state and closed under its update (iterated
    from the initial state; each round joins a component's lattice with its update's, only refining steps);
    None for every component when a step keeps shrinking (a weight 1/2 halves it), or a term is unknown."""
    n = layer.dim
    rows, bias = update_rows(layer)
    lattices: list = [(to_rational(v), gmpy2.mpq(0)) for v in layer.init_state.values()]
    for _ in range(4 * n + 8):  # bound: a fixed point within these rounds or none claimed
        updated = affine_lattices(rows, bias, lattices + inputs)
        if layer.kind is Kind.RELUSTATE:
            updated = [_relu_lattice(lattice) for lattice in updated]
        if any(lattice is None for lattice in updated):
            return [None] * n
        joined = [(o, rational_gcd(rational_gcd(g, step), offset - o)) for (o, g), (offset, step) in
                  zip(lattices, updated)]
        if joined == lattices:
            return lattices
        lattices = joined
    return [None] * n


def value_lattices(model: CompiledProgram) -> list[list]:
    """Per compiled layer (the input first), per component, a lattice ``(offset, step)`` holding every value
    it takes on inputs within the declared bounds, or None: an integer ``Input`` lies in ``Z``; ``Linear``,
    ``ReLU``, ``Multi`` and the states map lattices as above (by induction over the steps, a state's values
    stay in a lattice closed under its update that holds its initial state)."""
    lattices: list = [(gmpy2.mpq(0), gmpy2.mpq(1)) if model.input.integer else None] * input_width(model)
    out = [lattices]
    layer: CompiledLayer
    for layer in model.layers:
        if layer.kind is Kind.LINEAR:
            lattices = affine_lattices(_exact_rows(layer.A), [to_rational(v) for v in layer.b.values()], lattices)
        elif layer.kind is Kind.RELU:
            lattices = [_relu_lattice(lattice) for lattice in lattices]
        elif layer.kind is Kind.MULTI:
            m = layer.dim
            lattices = [_product_lattice(lattices[j], lattices[m + j]) for j in range(m)]
        else:
            lattices = _state_lattices(layer, lattices)
        out.append(lattices)
    return out


def threshold_plan(lattice: Any, low: Any, high: Any, relu: bool) -> tuple[float, np.ndarray, np.ndarray] | None:
    """A value ``v = f(y)`` (``f`` relu or the identity) of a ``y`` on ``lattice``, ``low <= v <= high``, as
    ``offset + sum_k weight_k [y > threshold_k]``: the thresholds halfway between consecutive lattice points
    where ``f`` changes (for relu: from the largest point ``<= 0``, which need not be reached, to the largest
    ``<= high``); None without a lattice, or with more than ``MAX_THRESHOLDS`` of them."""
    if lattice is None or not (math.isfinite(low) and math.isfinite(high)):
        return None
    offset, step = lattice
    if not step:  # a constant
        return float(max(offset, 0) if relu else offset), np.zeros(0), np.zeros(0)
    first = (gmpy2.floor(-offset / step) if relu else gmpy2.ceil((to_rational(low) - offset) / step))
    last = gmpy2.floor((to_rational(high) - offset) / step)
    if last - first > MAX_THRESHOLDS:
        return None
    points = [offset + k * step for k in range(int(first), int(last) + 1)]
    values = [max(p, 0) if relu else p for p in points]
    if not points:
        return None
    return (float(values[0]), np.array([float((a + b) / 2) for a, b in zip(points, points[1:])]),
            np.array([float(b - a) for a, b in zip(values, values[1:])]))


def sums_exactly(rows: np.ndarray, bias: np.ndarray, grid: np.ndarray, H: np.ndarray,
                  dtype: torch.dtype) -> np.ndarray:
    """Per row of ``rows h + bias``: whether its float sum is exact in ``dtype``, whatever the order of the additions
    (and with or without fused multiply-adds): it reads exact units only (``h`` a whole multiple of ``grid``, a power
    of two, with ``|h| <= H``), every weight and the bias are representable, and every ``w grid`` and the bias are
    whole multiples of one ``2^-q`` with ``(sum |w| H + |bias|) 2^q <= 2^(digits - 1)``: then every product and every
    partial sum is such a multiple below ``2^(digits - 1 - q)``, representable (``digits`` the significand's bits)."""
    digits = 24 if dtype == torch.float32 else 53
    narrow = np.float32 if dtype == torch.float32 else np.float64
    exact = []
    for row, constant in zip(rows, bias):
        used = row != 0
        representable = bool(np.all(row.astype(narrow) == row)) and float(narrow(constant)) == constant
        q = _binary_exponent(np.append(row[used] * grid[used], constant)) if representable else None
        exact.append(q is not None and not np.any(used & (grid == 0))
                     and math.ldexp(float(np.abs(row) @ H + abs(constant)), q) <= 2.0 ** (digits - 1))
    return np.array(exact, dtype=bool)


def nonzero_weights(row: np.ndarray) -> dict:
    """``{column: weight}`` of a row's non-zero entries (recurrent weights)."""
    return {int(k): float(row[k]) for k in np.flatnonzero(row)}


def dyadic_grid(lattice: Any) -> float | None:
    """The largest power of two that every point of ``lattice`` (``o + g Z``) is a whole multiple of, or None when
    the points are not all dyadic rationals (a step 1/3) or there is no lattice. A constant 0: 1."""
    if lattice is None:
        return None
    step = rational_gcd(*lattice)
    if not step:
        return 1.0
    numerator, denominator = int(step.numerator), int(step.denominator)
    if denominator & (denominator - 1):
        return None
    twos = (numerator & -numerator).bit_length() - 1  # the power of two in the numerator
    return math.ldexp(1.0, twos - (denominator.bit_length() - 1))


def relu_gate(lattice: Any) -> tuple[float, float] | None:
    """``(theta, margin)`` of an identity unit's relu gate ``[y > theta]`` for ``y`` on ``lattice``: theta halfway
    between the largest point below 0 and the next (which is ``>= 0``: ``relu`` is the identity from there, and 0
    below), margin half the step; a constant ``y = o``: theta ``o / 2``. None without a lattice."""
    if lattice is None:
        return None
    offset, step = lattice
    if not step:
        return (float(offset) / 2, abs(float(offset)) / 2) if offset else (-1.0, 1.0)
    first = offset + step * gmpy2.ceil(-offset / step)  # the smallest point >= 0
    return float(first - step / 2), float(step) / 2


def _binary_exponent(values: np.ndarray) -> int | None:
    """The least ``q <= 64`` with every value a whole multiple of ``2^-q``, or None."""
    return next((q for q in range(65) if np.all(np.ldexp(values, q) % 1 == 0)), None)
