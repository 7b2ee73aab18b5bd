"""Programs whose state update depends on the state itself (footnote 3 of the paper), with ``ReLUState``.

A ``LinState`` cannot take ``s = 0 if s > 5 else s`` or ``s = (s + 1)^2``: its update is linear in
its own value. A ``ReLUState`` takes one ReLU layer per step, the step of the ReLU RNN of Eq. (2).
Every program here tracks a scalar ``s`` through *features* of it:

    h_t = ReLU(c (w . h_{t-1}) + B x_t + b),        s_t = w . h_t

``w . h_{t-1}`` is the previous value ``s_{t-1}``, so each feature is ``ReLU`` of an affine function
of ``s_{t-1}`` and ``x_t`` (``c_i`` is 1 where feature ``i`` reads the value, 0 where it does not),
and ``s_t`` is a weighted sum of such ReLUs: any piecewise-linear function of ``s_{t-1} + x_t`` with
knots at the biases. On integers a piecewise-linear function through chosen points is exact, so
each program is exact (exact backend: bit-identical rationals; float targets: exact integers while
they stay below 2^53) for every sequence length, as long as its inputs are the declared ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction

from lsrl.errors import LsrlError, listed, whole_number
from lsrl.numbers import is_number, to_rational
from lsrl.lang.nodes import Input, Linear, Node, ReLUState
from lsrl.lang.program import ForEach


def feature_state(x: Node, readout: Sequence[int | Fraction], reads_value: Sequence[int],
                  B: Sequence[Sequence[int | Fraction]], b: Sequence[int | Fraction], name: str) -> Linear:
    """The scalar ``s_t = w . h_t`` of ``h_t = ReLU(c (w . h_{t-1}) + B x_t + b)``, ``h_0 = 0``.

    ``readout`` is ``w``, ``reads_value`` is ``c`` (one entry per feature), ``B`` and ``b`` the
    features' input weights and biases. Returns the ``Linear`` node holding ``s_t``.
    """
    if not isinstance(name, str):
        raise LsrlError(f"feature_state: name must be a string, got {type(name).__name__}")
    readout, reads_value = _numbers(readout, name, "readout"), _numbers(reads_value, name, "reads_value")
    if len(readout) != len(reads_value):
        raise LsrlError(f"feature_state {name!r}: readout and reads_value need one entry per feature, got "
                        f"{len(readout)} and {len(reads_value)}")
    A = [[c * w for w in readout] for c in reads_value]
    features = ReLUState(x, A, B, b, name=f"{name}_features")
    return Linear(features, [list(readout)], name=name)


def _numbers(values: object, name: str, argument: str) -> list:
    """``values`` as a non-empty list of finite numbers, or an ``LsrlError`` naming the argument."""
    items = listed(values)
    if items is None:
        raise LsrlError(f"feature_state {name!r}: {argument} must be a sequence of numbers, got "
                        f"{type(values).__name__}")
    values = items
    if not values or not all(is_number(v) and not isinstance(v, (bool, complex)) for v in values):
        raise LsrlError(f"feature_state {name!r}: {argument} must be a non-empty sequence of real numbers, got "
                        f"{values!r}"[:300])
    for v in values:
        to_rational(v, f"feature_state {name!r}: {argument}")  # NaN and infinity are refused here
    return values


def conditional_reset(threshold: int = 5) -> ForEach:
    """``s_t = s_{t-1} + x_t``, reset to 0 when it exceeds ``threshold``: ``s = 0 if s > 5 else s``.

    Input: non-negative integer increments ``x_t`` (declared: ``bounds=(0, None), integer=True``);
    output ``s_t``. With ``v = s_{t-1} + x_t`` (a non-negative integer),

        s_t = v - (T + 1) ReLU(v - T) + T ReLU(v - T - 1)        (T = threshold)

    is ``v`` for ``v <= T`` and ``v - (T+1)(v-T) + T(v-T-1) = 0`` for ``v >= T + 1``: three features
    ``ReLU(v), ReLU(v - T), ReLU(v - T - 1)`` (``ReLU(v) = v`` as ``v >= 0``), exact for every integer
    input and every length.
    """
    if whole_number(threshold) is None or threshold < 0:
        raise LsrlError(f"conditional_reset: threshold must be a non-negative integer, got {threshold!r}")
    threshold = int(threshold)
    increments = Input(1, name="increments", bounds=(0, None), integer=True)
    total = feature_state(
        increments, readout=[1, -(threshold + 1), threshold], reads_value=[1, 1, 1],
        B=[[1], [1], [1]], b=[0, -threshold, -threshold - 1], name="total",
    )
    return ForEach(total, name=f"reset_above_{threshold}")


def parity() -> ForEach:
    """The parity of the number of 1s so far, for 0/1 inputs of any length (a LinState cannot do this).

    ``p_t = p_{t-1} XOR x_t``; with ``v = p_{t-1} + x_t`` in ``{0, 1, 2}``, ``XOR = ReLU(v) - 2 ReLU(v - 1)``:
    two features, and ``p`` never leaves ``{0, 1}``, so every step is exact.
    """
    bits = Input(1, name="bits", bounds=(0, 1), integer=True)
    return ForEach(
        feature_state(bits, readout=[1, -2], reads_value=[1, 1], B=[[1], [1]], b=[0, -1], name="parity"),
        name="parity",
    )


def squaring(values: Iterable[int] = range(26)) -> ForEach:
    """``s = (s + 1)^2`` over a declared set of values: ``s_t = (s_{t-1} + 1)^2`` when ``x_t = 1``,
    ``s_t = 0`` when ``x_t = 0`` (a reset, so that sequences of any length stay in range); ``s_0 = 0``.

    ``values``: the finite set of integers the state may hold (it must contain 0). The map
    ``g(s) = (s + 1)^2`` is replaced by the piecewise-linear interpolation through the points
    ``(p, (p + 1)^2)``, ``p`` in ``values`` sorted ``p_0 < ... < p_m``:

        g(s) = g(p_0) + sum_{i < m} (slope_i - slope_{i-1}) ReLU(s - p_i)       (slope_{-1} = 0)

    with ``slope_i`` the slope between ``p_i`` and ``p_{i+1}``; it equals ``(s + 1)^2`` at every
    declared value. The input gates it within the same ReLU layer: each knot feature is
    ``ReLU(s - p_i - M (1 - x_t))`` with ``M = p_m - p_0``, which is ``ReLU(s - p_i)`` for ``x_t = 1``
    and ``0`` for ``x_t = 0`` (as ``s - p_i <= M``), and one more feature ``ReLU(x_t)`` carries the
    constant ``g(p_0)``. So ``m + 1`` features, and the output is exact as long as every value the
    state reaches lies in ``values`` (with ``values = range(26)``: up to three squarings in a row,
    0 -> 1 -> 4 -> 25; outside, ``g`` continues its last segment linearly).
    """
    given = listed(values)
    if given is None or any(whole_number(v) is None for v in given):
        raise LsrlError(f"squaring: values must be integers that include 0, got {given!r}"[:300])
    points = sorted({Fraction(int(v)) for v in given})
    if 0 not in points:
        raise LsrlError(f"squaring: values must be integers that include 0, got {given!r}"[:300])
    square = Input(1, name="square", bounds=(0, 1), integer=True)
    slopes = [((q + 1) ** 2 - (p + 1) ** 2) / (q - p) for p, q in zip(points, points[1:])]
    changes = [s - previous for s, previous in zip(slopes, [Fraction(0)] + slopes[:-1])]
    spread = points[-1] - points[0]
    constant = (points[0] + 1) ** 2
    value = feature_state(
        square, readout=[constant] + changes, reads_value=[0] + [1] * len(changes),
        B=[[1]] + [[spread]] * len(changes), b=[0] + [-p - spread for p in points[:-1]], name="value",
    )
    return ForEach(value, name="squaring")
