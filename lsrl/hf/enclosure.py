"""Irrational eigenvalues as exact algebraic numbers, and rational enclosures of them (``lsrl.hf.lowering``).

A state block ``C`` whose characteristic polynomial ``p`` is irreducible over Q (kept whole, in rationals, by
``lsrl.compiler.diagonal.rational_block_diagonal``) is diagonalised here exactly, in the field ``Q(l)`` of each
of its roots ``l``: an element is a polynomial in ``l`` with rational coefficients of degree below ``deg p``
(``Algebraic``), so sums, products, inverses and the test for 0 are exact, and an element that is not a
rational (some coefficient past the constant non-zero) is irrational, never 0. A simple root's spectral
projector is ``P(l) = adj(l I - C) / p'(l)`` (rank 1, ``P**2 = P``, ``trace P = 1``): with ``j`` such that
``P_jj != 0`` (one exists, by the trace), ``v = P[:, j]`` is a right and ``w = P[j, :] / P_jj`` a left
eigenvector with ``w v = (P**2)_jj / P_jj = 1``, and ``w_k v_m = 0`` for distinct roots. The entries are
the same polynomials for every root (its conjugates), so one computation serves all; where every root is
real, ``C = sum_k l_k v_k w_k`` and ``s = sum_k v_k (w_k s)`` (``real_eigenpairs``).

``RealRoot`` isolates a real root by a rational interval on which ``p`` changes sign (``p`` is irreducible of
degree >= 2: no rational point is a root, so bisection never meets it) and narrows it by bisection.
``Algebraic.enclosure`` evaluates an element on that interval in interval arithmetic with rational ends
(Horner; each step's product of intervals takes the least and greatest of its four corners) and narrows
the root until the enclosure excludes 0 and its width is at most ``2**-PRECISION`` of its magnitude;
``Algebraic.nearest_float`` narrows until both ends round to the same float64, which then is the element
rounded to the nearest (``float`` of a rational is correctly rounded, and monotone; an irrational number
is never a rounding midpoint, so this ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsrl.errors import InternalError
from lsrl.numbers import ONE, ZERO, mpq

PRECISION = 120  # an enclosure's width at most 2**-PRECISION of its magnitude
ROUND_BITS = 64  # each round of narrowing takes the root's interval 2**-ROUND_BITS narrower
MAX_ROUNDS = 64  # rounds at most (2**-4096 of the root's interval): a non-zero element is far wider
Rational = Any  # a gmpy2.mpq
Number = Any  # a Rational or an Algebraic
Poly = tuple  # rational coefficients, lowest degree first


def _evaluate(poly: Poly, x: Rational) -> Rational:
    value = ZERO
    for c in reversed(poly):
        value = value * x + c
    return value


def _interval_evaluate(poly: Poly, low: Rational, high: Rational) -> tuple[Rational, Rational]:
    """Rational ends of an interval holding ``poly(x)`` for every ``x`` in ``[low, high]`` (Horner)."""
    lo = hi = ZERO
    for c in reversed(poly):
        lo, hi = times_interval((lo, hi), (low, high))
        lo, hi = lo + c, hi + c
    return lo, hi


def times_interval(a: tuple[Rational, Rational], b: tuple[Rational, Rational]) -> tuple[Rational, Rational]:
    """``{x y : x in a, y in b}``'s hull (rational ends)."""
    corners = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(corners), max(corners)


class RealRoot:
    """The real root of ``poly`` (monic, irreducible over Q, degree >= 2) in ``[low, high]``: its only root
    there, ``poly`` changing sign between the ends. ``narrow`` halves the interval in place."""

    def __init__(self, poly: Poly, low: Rational, high: Rational) -> None:
        self.poly, self.low, self.high = poly, mpq(low), mpq(high)
        at_low, at_high = _evaluate(poly, self.low), _evaluate(poly, self.high)
        if at_low * at_high >= 0:
            raise InternalError(f"[{low}, {high}] isolates no irrational root of {poly}")
        self.low_sign = at_low > 0

    @property
    def degree(self) -> int:
        return len(self.poly) - 1

    def narrow(self, width: Rational) -> None:
        """Bisect until the interval is at most ``width`` wide."""
        while self.high - self.low > width:  # halves it: log2((high - low) / width) rounds
            middle = (self.low + self.high) / 2
            if (_evaluate(self.poly, middle) > 0) == self.low_sign:  # never 0: the root is irrational
                self.low = middle
            else:
                self.high = middle


def _reduced(poly: list[Rational], modulus: Poly) -> list[Rational]:
    """``poly`` mod the monic ``modulus`` (lowest first)."""
    poly = list(poly)
    top = len(modulus) - 1
    for degree in range(len(poly) - 1, top - 1, -1):
        lead = poly[degree]
        if lead:
            for i, c in enumerate(modulus):
                poly[degree - top + i] -= lead * c
    return poly[:top]


def element(root: RealRoot, coefficients: list[Rational] | tuple) -> Number:
    """``sum coefficients[i] root**i`` (reduced mod the root's polynomial): a rational where it is one."""
    reduced = _reduced([mpq(c) for c in coefficients], root.poly)
    while reduced and not reduced[-1]:  # drops trailing zeros: at most len(reduced) rounds
        reduced.pop()
    if len(reduced) <= 1:
        return reduced[0] if reduced else ZERO
    return Algebraic(root, tuple(reduced))


def _poly_divmod(a: list[Rational], b: list[Rational]) -> tuple[list[Rational], list[Rational]]:
    """Quotient and remainder of polynomials (lowest first; ``b`` with a non-zero leading coefficient)."""
    a = list(a)
    quotient = [ZERO] * max(len(a) - len(b) + 1, 1)
    for shift in range(len(a) - len(b), -1, -1):
        factor = a[shift + len(b) - 1] / b[-1]
        quotient[shift] = factor
        for i, c in enumerate(b):
            a[shift + i] -= factor * c
    remainder = a[:len(b) - 1]
    while remainder and not remainder[-1]:  # drops trailing zeros: at most len(b) rounds
        remainder.pop()
    return quotient, remainder


def _poly_sub_product(a: list[Rational], q: list[Rational], b: list[Rational]) -> list[Rational]:
    """``a - q b``."""
    out = list(a) + [ZERO] * max(0, len(q) + len(b) - 1 - len(a))
    for i, x in enumerate(q):
        for j, y in enumerate(b):
            out[i + j] -= x * y
    return out


class Algebraic:
    """``sum coefficients[i] root**i``, exact, with some coefficient past the first non-zero: an irrational
    element of ``Q(root)`` (``element`` returns a rational otherwise). Arithmetic with rationals and with
    elements of the same field is exact (``+``, ``-``, ``*``, ``/``)."""

    __slots__ = ("root", "coefficients")

    def __init__(self, root: RealRoot, coefficients: tuple) -> None:
        self.root, self.coefficients = root, coefficients

    def _coefficients_of(self, other: Number) -> list[Rational]:
        if isinstance(other, Algebraic):
            if other.root is not self.root:
                raise InternalError("elements of two fields mixed")
            return list(other.coefficients)
        return [mpq(other)]

    def __add__(self, other: Number) -> Number:
        mine, theirs = list(self.coefficients), self._coefficients_of(other)
        size = max(len(mine), len(theirs))
        mine, theirs = mine + [ZERO] * (size - len(mine)), theirs + [ZERO] * (size - len(theirs))
        return element(self.root, [a + b for a, b in zip(mine, theirs)])

    __radd__ = __add__

    def __neg__(self) -> Number:
        return element(self.root, [-c for c in self.coefficients])

    def __sub__(self, other: Number) -> Number:
        return self + (-other)

    def __rsub__(self, other: Number) -> Number:
        return (-self) + other

    def __mul__(self, other: Number) -> Number:
        theirs = self._coefficients_of(other)
        product = [ZERO] * (len(self.coefficients) + len(theirs) - 1)
        for i, a in enumerate(self.coefficients):
            for j, b in enumerate(theirs):
                product[i + j] += a * b
        return element(self.root, product)

    __rmul__ = __mul__

    def inverse(self) -> Number:
        """``1 / self`` by the extended Euclidean algorithm: ``s self + t p = 1`` (``p`` irreducible)."""
        r0, r1 = list(self.root.poly), list(self.coefficients)
        s0: list[Rational] = [ZERO]
        s1: list[Rational] = [ONE]
        while len(r1) > 1:  # the remainder's degree falls each round: at most deg p rounds
            quotient, remainder = _poly_divmod(r0, r1)
            r0, r1, s0, s1 = r1, remainder, s1, _poly_sub_product(s0, quotient, s1)
        if not r1:
            raise InternalError("an irrational element with no inverse: its polynomial is reducible")
        return element(self.root, [c / r1[0] for c in s1])

    def __truediv__(self, other: Number) -> Number:
        return self * (other.inverse() if isinstance(other, Algebraic) else 1 / mpq(other))

    def __rtruediv__(self, other: Number) -> Number:
        return self.inverse() * other

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Algebraic) and other.root is self.root and other.coefficients == self.coefficients

    def __hash__(self) -> int:
        return hash((id(self.root), self.coefficients))

    def __bool__(self) -> bool:
        return True  # irrational: never 0

    def __float__(self) -> float:
        return self.nearest_float()

    def __repr__(self) -> str:
        return f"Algebraic({float(self):.17g})"

    def enclosure(self, bits: int = PRECISION) -> tuple[Rational, Rational]:
        """Rational ends ``low < self < high``, 0 outside, ``high - low <= 2**-bits min(|low|, |high|)``."""
        root = self.root
        for _ in range(MAX_ROUNDS):  # each round narrows the root 2**ROUND_BITS-fold (module doc)
            low, high = _interval_evaluate(self.coefficients, root.low, root.high)
            if (low > 0 or high < 0) and (high - low) * 2 ** bits <= min(abs(low), abs(high)):
                return low, high
            root.narrow((root.high - root.low) / 2 ** ROUND_BITS)
        raise InternalError(f"no enclosure of an element of Q(root of {root.poly}) to 2**-{bits}")

    def nearest_float(self) -> float:
        """The float64 nearest to ``self`` (module doc)."""
        for rounds in range(1, MAX_ROUNDS + 1):  # each round doubles the precision asked for
            low, high = self.enclosure(PRECISION * rounds)
            if float(low) == float(high):
                return float(low)
        raise InternalError("an irrational number that does not round to one float64")

    def sign(self) -> int:
        low, _ = self.enclosure(1)
        return 1 if low > 0 else -1


def sign(value: Number) -> int:
    """-1, 0 or 1."""
    if isinstance(value, Algebraic):
        return value.sign()
    return (value > 0) - (value < 0)


def interval(value: Number, bits: int = PRECISION) -> tuple[Rational, Rational]:
    """Rational ends enclosing ``value`` (both ``value`` itself for a rational)."""
    if isinstance(value, Algebraic):
        return value.enclosure(bits)
    return mpq(value), mpq(value)


def midpoint(value: Number) -> tuple[Rational, Rational]:
    """``(mid, radius)`` with ``|value - mid| <= radius``: a rational is itself (radius 0); an irrational
    number's ``mid`` is a dyadic of about ``PRECISION + 8`` significant bits (short numbers in the forms)."""
    if not isinstance(value, Algebraic):
        return mpq(value), ZERO
    low, high = value.enclosure()
    centre = (low + high) / 2
    step = mpq(2) ** (centre.numerator.bit_length() - centre.denominator.bit_length() - PRECISION - 8)
    mid = round(centre / step) * step
    return mid, max(high - mid, mid - low)


@dataclass(frozen=True)
class Eigenpair:
    """A real eigenvalue ``value`` of a block, its right eigenvector ``right`` and left one ``left`` with
    ``left . right = 1`` (exact elements of ``Q(value)``)."""

    value: Number
    right: list
    left: list


def characteristic(block: list[list[Rational]]) -> Any:
    """``det(x I - block)`` as a sympy ``Poly`` over Q."""
    import sympy

    x = sympy.Symbol("x")
    matrix = sympy.Matrix([[sympy.Rational(int(v.numerator), int(v.denominator)) for v in row] for row in block])
    return sympy.Poly(matrix.charpoly(x).as_expr(), x, domain="QQ")


def _rationals(poly: Any) -> list[Rational]:
    """A sympy ``Poly``'s coefficients as rationals, lowest first."""
    import sympy

    return [mpq(int(sympy.Rational(c).p), int(sympy.Rational(c).q)) for c in reversed(poly.all_coeffs())]


def real_eigenpairs(block: list[list[Rational]]) -> list[Eigenpair] | None:
    """The eigenpairs of a rational block whose characteristic polynomial is irreducible (module doc), one
    per root, or None where some root is complex. ``InternalError`` for a reducible one."""
    import sympy

    poly = characteristic(block)
    if not poly.is_irreducible or poly.degree() < 2:
        raise InternalError(f"a kept irrational block's characteristic polynomial {poly.as_expr()} is reducible")
    intervals = poly.intervals()
    if len(intervals) != poly.degree():
        return None
    x = poly.gens[0]
    monic = tuple(_rationals(poly.monic()))
    size = len(block)
    matrix = sympy.Matrix([[sympy.Rational(int(v.numerator), int(v.denominator)) for v in row] for row in block])
    adjugate = (x * sympy.eye(size) - matrix).adjugate()
    scale = sympy.Poly(poly.diff(x), x, domain="QQ").invert(poly)
    projector = [[_rationals(sympy.Poly(adjugate[i, j], x, domain="QQ").mul(scale).rem(poly)) for j in range(size)]
                 for i in range(size)]
    pairs = []
    for (low, high), _ in intervals:
        root = RealRoot(monic, mpq(int(low.p), int(low.q)), mpq(int(high.p), int(high.q)))
        entries = [[element(root, c) for c in row] for row in projector]
        j = next(j for j in range(size) if entries[j][j])  # trace 1: some diagonal entry is not 0
        pivot = entries[j][j]
        inverse = pivot.inverse() if isinstance(pivot, Algebraic) else 1 / pivot
        pairs.append(Eigenpair(element(root, [ZERO, ONE]), [row[j] for row in entries],
                               [inverse * value for value in entries[j]]))
    return pairs


def square_root(value: Rational) -> Number:
    """``sqrt(value)`` for a rational ``0 < value``: exact (``Algebraic`` in ``Q(sqrt(value))`` where irrational)."""
    import gmpy2

    value = mpq(value)
    if gmpy2.is_square(value.numerator) and gmpy2.is_square(value.denominator):
        return mpq(gmpy2.isqrt(value.numerator), gmpy2.isqrt(value.denominator))
    return element(RealRoot((-value, ZERO, ONE), ZERO, max(ONE, value)), [ZERO, ONE])
