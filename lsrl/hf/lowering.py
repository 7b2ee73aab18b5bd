"""A compiled program as *slots* of a residual stream: what a stock block stack must compute.

Every value the stream holds is a slot: the program's input components, and values written by a
block as a sum of *channels*. Channels are signed and linear where they can be; each builder splits
them into what its blocks compute exactly (``split_signs`` in ``lsrl.hf.mamba``: the saturated SiLU
needs non-negative inputs; RecurrentGemma's MLP gates one factor and its RG-LRU is linear):

- ``relu``:    ``weight * relu(form)``;
- ``delay``:   ``weight * form`` at step ``t - lag`` (0 before the sequence starts); an ``impulse``
  (a positive constant form) only at step ``lag + 1``: an initial state in a delay line;
- ``product``: ``weight * form * gate``; ``scan``: ``weight * sum_j decay**(t-j) form_j``, ``decay`` in [0, 1];
- ``pulse``:   ``weight * decay**(t-1) * form`` (``form`` a positive constant): an initial state.

A ``Form`` is an affine function of earlier slots with an interval bound. Linear layers are only
composed into forms; a ReLU, a Multi and a LinState become slots. LinStates are lowered from
``model.diagonal()`` in exact rationals (``lsrl.compiler.diagonal.rational_block_diagonal``: a float model's
weights read as the binary values they hold; a simple irreducible factor of a state's characteristic polynomial
with irrational roots stays one rational block), block by block:

- a 1x1 block of eigenvalue ``l`` in [0, 1]: a scan (``l = 0``: the drive itself, a form; ``l = 1``
  with no drive: the constant initial state);
- a delay line (nilpotent shift ``N``): ``z_t = sum_m N^m w_(t-m) + N^t z_0``, delay channels of the exact powers,
  and its initial state as impulses (``_delay_line``);
- a block the input does not drive (its drive a constant ``c``) is the fixed sequence ``z_t = A
  z_(t-1) + c``: where it repeats with a period ``p <= 64`` (Listing 2's permutation counters), or
  ``max_len <= 64`` (``p = max_len``), ``z_t = sum_r z_r [t mod p = r]``, a linear map of the phase
  indicators below (``z_r`` computed exactly, the period found by exact equality);
- a driven block ``A = rho R`` with ``R**p = I``, ``p <= 12`` and ``0 < rho <= 1`` (``l < 0``: ``R = -1``; a
  complex pair whose rotation has a finite period, ``rho = sqrt(det A)``, irrational where ``det A`` is no
  rational square: then ``R`` holds elements of ``Q(rho)``, and ``R**2 = A**2 / det A`` rationals): with
  ``s_t = R**t z_t``,
  ``z_t = rho z_(t-1) + R**-t u_t`` (``z_0 = s_0``; check: ``R**t z_t = rho R R**(t-1) z_(t-1) + u_t``)
  is a scan of decay ``rho`` whose input, and whose read-out, are selected by the exact phase
  indicators ``[t mod p = r]`` (one slot of ``p`` product channels each: exactly one indicator is
  1 at every step, so its bound is the hull of the ``p`` selected forms');
- the phase indicators come from an exact step counter ``t`` by binary long division (``t <- t - p
  2**k H(t - p 2**k)``, ``H(y) = relu(y + 1) - relu(y)`` is exact on integers) and one bump per
  phase: about ``log2(max_len / p)`` blocks, shared by all states of period ``p``;
- a block ``C`` kept whole for its irrational eigenvalues (driven, or driveless beyond the fixed sequences):
  where every root ``l_k`` is real, it is diagonalised exactly in ``Q(l_k)`` (``lsrl.hf.enclosure``:
  ``z_k = w_k s`` with ``w_k C = l_k w_k``, ``s = sum_k v_k z_k``), each ``z_k`` a scan of decay ``l_k`` in
  (0, 1) or, for ``l_k`` in (-1, 0), the sign flip above (``R = -1``, ``rho = -l_k``); its coefficients are
  enclosed (below);
- anything else (a driven decay above 1 or below -1, a driven rotation of no finite period, a driven block of
  complex irrational roots of degree 3 or more, an irrational root outside (-1, 1), a repeated irrational factor
  ``p**k``, kept by ``rational_block_diagonal`` as one rational block of ``k deg p`` units), where ``max_len <=
  MAX_CONVOLUTION_LEN = 64``: its exact convolution over the whole sequence, ``z_t = sum_(m=0)^(t-1) A^m u_(t-m) +
  A^t z_0`` for ``t <= max_len``, the same code as a delay line (``_delay_line`` with ``max_len`` powers): ``A``
  is the block in its rational basis, so every power ``A^m`` is computed exactly in rationals even where its
  eigenvalues are irrational or complex; each row's drives at lag ``m`` are one delay channel (a conv tap), and
  ``A^t z_0`` an impulse at step ``t``. Bounds: each delay slot has its form's interval bound (the drives'), and
  the state's forms are tightened by the state's relational bounds, as every layer's are; the rounding analysis
  reads them as for any delay line. The cost: a block of ``n`` units takes up to ``n max_len`` delay slots and ``n
  max_len`` impulse slots (each one channel, two for a delay in Mamba's sign split), all in one block, and the
  conv kernel (``conv_kernel`` / ``conv1d_width``, shared by every channel of every block) grows to ``max_len + 1``
  taps in RecurrentGemma, ``max_len + 2`` in Mamba and Mamba-2 (an impulse at lag ``max_len - 1`` reads one step
  more); the limit 64 is the fixed sequences' (the phase indicators up to ``p = 64``), and keeps a state's channels
  to a few hundred (a 2x2 and a 4x4 block at 64 steps: 762 slots, 3.7M parameters in Mamba). Beyond it such a
  block is refused with an ``LsrlError`` naming the state, why, and the limit (a shorter ``max_len`` works).

**Exact coefficients.** Every coefficient the lowering computes (the forms' ``terms`` and ``offset``: the
program's Linears composed, eigenvector maps, rotation powers ``R**r``, driveless sequences ``z_r``) is
an exact rational, computed in rationals from the exact diagonal form. The builders read two float64
views: ``Form.coef`` / ``Form.const``, each rational rounded to the nearest float64 (a non-zero one below
float64's smallest normal number is refused, so each is within ``2**-53`` relative of its rational: the
spare rounding of ``lsrl.hf.rounding.form_error`` covers it), and ``Form.exact``, whether these floats *are*
the rationals; ``lsrl.hf.rounding.form_grid`` claims exactness only for such forms (a rational such as
``1 + 2**-60`` rounds to the short dyadic 1, yet is not exact). ``Channel.decay`` is the decay rounded to
the nearest float64, within ``DECAY_ROUNDING = 2**-53`` of it (absolute; a decay below 1 that would round to
1, or a positive one that would round to 0, is written as the float next to it, also within it), which
the builders add to their decay's distance ``delta``; decay 1 and 0 are exact. Bounds (``low``, ``high``)
are computed from the exact values and rounded outward.

**Enclosures (irrational eigenvalues).** The numbers of ``Q(l)`` the lowering needs (eigenvector entries,
rotation powers ``R**r`` in ``Q(rho)``, eigen-coordinates of initial states, a pulse's ``l z_0``) are exact
algebraic numbers (``lsrl.hf.enclosure.Algebraic``: sums, products, inverses and the test for 0 exact), and
each is written through an *enclosure*: a rational ``mid`` with ``|c - mid| <= r`` (rational ends from interval
arithmetic on an isolated root, ``r`` about ``2**-120 |c|``; a coefficient exactly 0 in ``Q(l)`` is the exact
0). A ``Form`` holds the ``mid``s, and its ``slack`` bounds ``|f~(v) - f(v)|``, ``f~`` the form of the ``mid``s and
``f`` the program's, at the program's slot values ``v`` (within their bounds): ``combine`` adds, per term
``w f``, ``r |f| + |mid| slack_f`` (``|w f - mid f~| <= |w - mid| |f| + |mid| |f - f~|``, ``|f|`` the bound of the
program's form), and ``r`` for an enclosed constant; ``scaled`` multiplies it by ``|factor|``. The builders'
bound on a form's computed value ``x^`` is a bound on ``|x^ - f~(v)|`` (the ``mid``s are rationals like any other,
rounded to float64 within ``2**-53``); ``lsrl.hf.rounding.form_error`` adds ``slack`` (rounded up), so
``|x^ - f(v)|`` is bounded. ``Form.exact`` is False wherever ``slack > 0``: no grid is claimed, and such a form is
taken as live at every step (``lsrl.hf.rounding.Activity``: the program's form need not vanish where its slots
do). An irrational decay is written as its float64 rounded to the nearest (``Algebraic.nearest_float``: the
enclosure narrowed until both ends round to one float64; an irrational number is no rounding midpoint), so
within ``DECAY_ROUNDING`` as a rational one; a scan's reach takes the enclosure's upper end. Every bound is a
bound on the program's values: the forms' intervals take each enclosed weight as its whole interval, and each
eigen-coordinate ``z_k = w_k s`` is also within ``w_k`` times the state's relational bounds (outward).

Every value must have a finite bound at ``max_len`` (``lsrl.lang.relational_bounds``, the interval
analysis ``value_bounds`` sharpened by an unrolled run over value sets): else ``LsrlError`` naming the
node. Bounds of forms are interval bounds, tightened by the program's own where a form is a node: those
of the diagonal form's layer, and of the compiled program's where the pass left the layer alone (an
exact model's; a float model's own bounds read its weights as decimals, so they are not used).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from lsrl.compiler.diagonal import rational_block_diagonal
from lsrl.errors import InternalError, LsrlError, shown
from lsrl.hf.enclosure import (
    Algebraic, characteristic, interval, midpoint, real_eigenpairs, sign, square_root, times_interval,
)
from lsrl.kinds import NODE_WEIGHTS, Kind
from lsrl.lang.relational_bounds import relational_bounds
from lsrl.model.compiled import CompiledProgram
from lsrl.model.structure import DELAY, DIAGONAL, OTHER, PAIR, state_blocks
from lsrl.numbers import FLOAT64_MAX, ONE, ZERO, as_float, mpq, to_rational_exactly

MAX_PERIOD = 12  # a driven rotation's period at most this
MAX_FIXED_PERIOD = 64  # a driveless block's period (or max_len) at most this
MAX_CONVOLUTION_LEN = 64  # at max_len at most this, a block no other rule holds is its exact convolution
DECAY_ROUNDING = 2.0 ** -53  # |Channel.decay - the exact decay| at most this (module doc)
SMALLEST_NORMAL = mpq(float(np.finfo(np.float64).tiny))
Rational = Any  # a gmpy2.mpq: the lowering's exact numbers
Number = Any  # a Rational or an irrational ``lsrl.hf.enclosure.Algebraic``
Block = list[list[Any]]  # a state block's exact entries, row by row


def rational(value: float | Rational) -> Rational:
    """``value`` (an int, a float or a rational) as the rational it is."""
    return to_rational_exactly(value)


def below(value: Rational) -> float:
    """The largest float64 at most ``value`` (-inf beyond float64's range)."""
    if value < -FLOAT64_MAX:
        return -math.inf
    near = float(value)
    return near if near <= value else math.nextafter(near, -math.inf)


def above(value: Rational) -> float:
    """The least float64 at least ``value`` (inf beyond float64's range)."""
    return -below(-value)


@dataclass(frozen=True)
class Form:
    """``sum terms[slot] * slot + offset`` (exact rationals), within ``[low, high]`` (floats, rounded outward);
    ``coef`` and ``const`` are the float64s the builders write (module doc: exact coefficients). ``slack``: where
    the program's coefficients are irrational, ``terms`` and ``offset`` hold rationals near them, and the form
    they make is within ``slack`` of the program's (at the program's slot values; module doc: enclosures)."""

    terms: tuple[tuple[int, Rational], ...]
    offset: Rational
    low: float
    high: float
    slack: Rational = ZERO

    @cached_property
    def coef(self) -> tuple[tuple[int, float], ...]:
        """The coefficients, each rounded to the nearest float64."""
        return tuple((slot, as_float(c)) for slot, c in self.terms)

    @cached_property
    def const(self) -> float:
        return as_float(self.offset)

    @cached_property
    def exact(self) -> bool:
        """Whether ``coef`` and ``const`` are the exact coefficients (no rounding, no slack)."""
        return (all(c == float_c for (_, c), (_, float_c) in zip(self.terms, self.coef)) and self.offset == self.const
                and not self.slack)

    @cached_property
    def coef_error(self) -> float:
        """``slack`` rounded up to a float64 (0 for the program's own coefficients)."""
        return above(self.slack) if self.slack else 0.0

    @property
    def bound(self) -> float:
        return max(abs(self.low), abs(self.high))

    def scaled(self, factor: float | Rational) -> Form:
        factor = rational(factor)
        low, high = sorted((rational(self.low) * factor, rational(self.high) * factor))
        return Form(tuple((s, c * factor) for s, c in self.terms if c * factor != 0), self.offset * factor,
                    below(low), above(high), self.slack * abs(factor))


def constant(value: float | Number) -> Form:
    """The constant ``value`` (an irrational one as a rational within its ``slack``)."""
    mid, radius = midpoint(value if isinstance(value, Algebraic) else rational(value))
    return Form((), mid, below(mid - radius), above(mid + radius), radius)


def combine(terms: Sequence[tuple[float | Number, Form]], const: float | Number = 0) -> Form:
    """``sum weight * form + const`` with the interval bound of the sum, in exact rationals; an irrational
    weight (or ``const``) enters as a rational ``mid`` within ``radius`` of it, and the sum's ``slack`` grows by
    ``radius |form| + |mid| form.slack`` (module doc: enclosures)."""
    coef: dict[int, Rational] = {}
    const, slack = midpoint(const if isinstance(const, Algebraic) else rational(const))
    low, high = const - slack, const + slack
    for weight, form in terms:
        mid, radius = midpoint(weight if isinstance(weight, Algebraic) else rational(weight))
        if mid == 0 and radius == 0:
            continue
        for slot, c in form.terms:
            coef[slot] = coef.get(slot, ZERO) + mid * c
        const += mid * form.offset
        ends = times_interval((mid - radius, mid + radius), (rational(form.low), rational(form.high)))
        low, high = low + ends[0], high + ends[1]
        slack += radius * max(abs(rational(form.low)), abs(rational(form.high))) + abs(mid) * form.slack
    return Form(tuple((s, c) for s, c in sorted(coef.items()) if c != 0), const, below(low), above(high), slack)


def _constant_times(factor: Form, form: Form) -> Form:
    """``form`` times the constant ``factor`` (its ``offset`` within ``factor.slack`` of the program's: the product
    is within ``factor.slack |form|`` more, in bounds and slack)."""
    product = form.scaled(factor.offset)
    if not factor.slack:
        return product
    wider = factor.slack * max(abs(rational(form.low)), abs(rational(form.high)))
    return Form(product.terms, product.offset, below(rational(product.low) - wider),
                above(rational(product.high) + wider), product.slack + wider)


def tightened(form: Form, low: float, high: float) -> Form:
    return Form(form.terms, form.offset, max(form.low, low), min(form.high, high), form.slack)


def decay_float(decay: Number) -> float:
    """``decay`` in [0, 1] as the float64 the builders read, within ``DECAY_ROUNDING`` of it: the nearest, but
    never 1 or 0 for a decay that is not (module doc)."""
    near = float(decay)
    if near == 1 and decay != 1:
        return math.nextafter(1.0, 0.0)
    return math.ulp(0.0) if near == 0 and decay != 0 else near


@dataclass(frozen=True)
class Declared:
    """What a program's ``Input`` declares, as the builders read it."""

    name: str
    dim: int
    low: list[float]
    high: list[float]
    integer: bool

    @property
    def token(self) -> bool:
        """Whether the program reads tokens (``input_ids``): one integer input with finite bounds."""
        return self.integer and self.dim == 1 and math.isfinite(self.low[0]) and math.isfinite(self.high[0])

    @property
    def token_low(self) -> int:
        return int(self.low[0])

    def vocabulary(self, outputs: int) -> int:
        """Tokens ``low .. high`` for a token program, and at least one logit per output."""
        return max(int(self.high[0]) - self.token_low + 1 if self.token else 1, outputs)


def declared(model: CompiledProgram) -> Declared:
    """``model``'s Input declarations."""
    node: Any = model.input
    low, high = node.bounds
    return Declared(str(node.name), int(node.dim), [float(v) for v in low], [float(v) for v in high],
                    bool(node.integer))


@dataclass
class Channel:
    kind: str  # "relu", "delay", "product", "scan", "pulse" (module doc)
    form: Form
    weight: float
    lag: int = 0
    gate: Form | None = None
    decay: float = 1.0  # the float64 the builders read, within DECAY_ROUNDING of exact_decay
    impulse: bool = False
    exact_decay: Any = None  # a scan's or a pulse's decay, an exact rational or Algebraic
    whole: Channel | None = field(default=None, compare=False, repr=False)  # what a sign split took it from


@dataclass
class Slot:
    name: str  # the program node it belongs to (for messages)
    channels: list[Channel] = field(default_factory=list)
    low: float = 0.0
    high: float = 0.0
    level: int = 0  # 0: an input component; else the block (1, 2, ...) that writes it

    @property
    def bound(self) -> float:
        return max(abs(self.low), abs(self.high))

    @property
    def scan_state(self) -> float | None:
        """``M_s / |w|``, a bound on the state of a slot that is one scan of a non-negative drive (its
        state is the slot's value over ``w``, however long the scan), else None."""
        if len(self.channels) == 1 and self.channels[0].kind == "scan" and self.channels[0].form.low >= 0:
            return self.bound / abs(self.channels[0].weight)
        return None


@dataclass
class Lowered:
    """The slots (inputs first), the output forms, and what the builders need to know."""

    slots: list[Slot]
    outputs: list[Form]
    max_len: int
    input_dim: int
    integer_input: bool = False  # the Input declares integer tokens

    @property
    def depth(self) -> int:
        return max((slot.level for slot in self.slots), default=0)

    @property
    def longest_lag(self) -> int:
        """The oldest input a channel reads (an impulse also reads the step before its lag)."""
        return max((c.lag + c.impulse for slot in self.slots for c in slot.channels), default=0)


class _Builder:
    def __init__(self, max_len: int, input_dim: int, bounds: tuple[list, list]) -> None:
        self.max_len = max_len
        self.slots: list[Slot] = []
        self.phases: dict[int, list[Form]] = {}
        self.counter: Form | None = None
        self.inputs = [self.slot(f"input[{i}]", [], _outward(lo, below), _outward(hi, above))
                       for i, (lo, hi) in enumerate(zip(*bounds))]

    def slot(self, name: str, channels: list[Channel], low: float, high: float) -> Form:
        """A new slot written by ``channels`` (bounded by ``[low, high]``), as a form."""
        level = 1 + max((self.slots[s].level for c in channels for f in (c.form, c.gate) if f for s, _ in f.terms),
                        default=0) if channels else 0
        self.slots.append(Slot(name, channels, low, high, level))
        return Form(((len(self.slots) - 1, ONE),), ZERO, low, high)

    # ---- primitives ------------------------------------------------------------------------------
    def relu(self, form: Form, name: str) -> Form:
        if form.low >= 0:
            return form
        if form.high <= 0:
            return constant(0)
        return self.slot(name, [Channel("relu", form, 1.0)], 0.0, form.high)

    def product(self, a: Form, b: Form, name: str) -> Form:
        if not a.terms or not b.terms:  # a constant factor: a Linear
            return _constant_times(a, b) if not a.terms else _constant_times(b, a)
        low, high = times_interval((rational(a.low), rational(a.high)), (rational(b.low), rational(b.high)))
        return self.slot(name, [Channel("product", a, 1.0, gate=b)], below(low), above(high))

    def selected(self, forms: list[Form], phases: list[Form], name: str) -> Form:
        """``forms[r]`` where ``t mod p = r``: ``sum_r forms[r] [t mod p = r]``, one slot of product channels
        (a constant form adds a multiple of its indicator). Exactly one indicator is 1 at every step, so
        the slot lies within the hull of the forms' bounds."""
        channels = [Channel("product", form, 1.0, gate=phase) for form, phase in zip(forms, phases) if form.terms]
        linear = [(form.offset, phase) if not form.slack else (ONE, _constant_times(form, phase))
                  for form, phase in zip(forms, phases) if not form.terms]
        if not channels:
            return combine(linear)
        low = min([0.0] + [form.low for form in forms if form.terms])
        high = max([0.0] + [form.high for form in forms if form.terms])
        return combine([(1, self.slot(name, channels, low, high))] + linear)

    def scan(self, drive: Form, decay: Number, init: Number, name: str) -> Form:
        """``s_t = decay s_(t-1) + drive_t``, ``s_0 = init`` (exact ``decay`` in (0, 1] and ``init``; an
        irrational decay is written correctly rounded, ``decay_float``)."""
        if decay == 1 and not (drive.terms or drive.offset or drive.slack):  # a constant: no channel
            return constant(init)
        top = interval(decay)[1]  # the decay itself where rational
        reach = mpq(self.max_len) if top >= 1 else min(mpq(self.max_len), 1 / (1 - top))
        written = decay_float(decay)
        driven = drive.terms or drive.offset or drive.slack
        channels = [Channel("scan", drive, 1.0, decay=written, exact_decay=decay)] if driven else []
        start = max(abs(end) for end in interval(init))
        if init:
            direction = sign(init)
            channels.append(Channel("pulse", constant(direction * decay * init), float(direction), decay=written,
                                    exact_decay=decay))
        low = min(rational(drive.low), ZERO) * reach - start
        high = max(rational(drive.high), ZERO) * reach + start
        return self.slot(name, channels, below(low), above(high))

    def bounded(self, form: Form, low: Rational, high: Rational) -> Form:
        """``form`` (a new slot) within ``[low, high]`` too: its slot's bounds tightened (rounded outward)."""
        index = form.terms[0][0]
        slot = self.slots[index]
        slot.low, slot.high = max(slot.low, below(low)), min(slot.high, above(high))
        return tightened(form, slot.low, slot.high)

    def delayed(self, form: Form, lag: int, name: str) -> Form:
        """``form`` at step ``t - lag`` (0 before the sequence)."""
        if lag == 0 or not (form.terms or form.offset or form.slack):
            return form
        return self.slot(name, [Channel("delay", form, 1.0, lag=lag)], min(form.low, 0.0), max(form.high, 0.0))

    def impulse(self, value: Rational, lag: int, name: str) -> Form:
        """``value`` at step ``lag + 1`` only."""
        channel = Channel("delay", constant(abs(value)), 1.0 if value > 0 else -1.0, lag=lag, impulse=True)
        return self.slot(name, [channel], below(min(value, ZERO)), above(max(value, ZERO)))

    # ---- the phase indicators [t mod p = r] -----------------------------------------------------------
    def step_counter(self) -> Form:
        if self.counter is None:
            self.counter = self.scan(constant(1), ONE, ZERO, "step counter")
        return self.counter

    def phase(self, period: int) -> list[Form]:
        """``[t mod period = r]`` for r in 0..period-1, exact 0 / 1 (t = 1, 2, ... counts the steps)."""
        if period in self.phases:
            return self.phases[period]
        rest = self.step_counter()
        power = 1
        while period * power * 2 <= self.max_len:  # doubles power: at most log2(max_len) rounds
            power *= 2
        while power >= 1:  # invariant: rest = t mod (2 * period * power), at most max_len
            size = period * power
            upper = self.relu(combine([(1, rest)], 1 - size), f"t mod {period}")
            lower = self.relu(combine([(1, rest)], -size), f"t mod {period}")
            rest = combine([(1, rest), (-size, upper), (size, lower)])
            rest = Form(rest.terms, rest.offset, 0.0, float(min(self.max_len, size - 1)))
            power //= 2
        ramps = {j: self.relu(combine([(1, rest)], -j), f"t mod {period}") for j in range(-1, period + 1)}
        indicators = [Form(f.terms, f.offset, 0.0, 1.0) for f in (
            combine([(1, ramps[r - 1]), (-2, ramps[r]), (1, ramps[r + 1])]) for r in range(period))]
        self.phases[period] = indicators
        return indicators


def lower(model: CompiledProgram, max_len: int) -> Lowered:
    """``model`` as slots (see the module doc); ``LsrlError`` for an unbounded value or a state the
    stock blocks cannot express."""
    _require_bounded(model, max_len)
    spec = declared(model)
    builder = _Builder(max_len, spec.dim, model.input.bounds)  # exact: rounded outward
    current = list(builder.inputs)
    originals = {layer.name: layer for layer in model.layers}
    layers: list[Any] = exact_layers(model)
    if layers:  # every layer's bounds in one unrolled run (cached); none where the output is the input
        relational_bounds(layers[-1], max_len)
    for layer in layers:
        first_new = len(builder.slots)
        low, high = _layer_bounds(layer, originals.get(layer.name), max_len)
        if layer.kind is Kind.LINEAR:
            current = _affine(layer.A, layer.b, current)
        elif layer.kind is Kind.RELU:
            current = [builder.relu(form, layer.name) for form in current]
        elif layer.kind is Kind.MULTI:
            half = layer.dim
            current = [builder.product(current[i], current[half + i], layer.name) for i in range(half)]
        elif layer.kind is Kind.LINSTATE:
            current = _lower_state(builder, layer, current, (low, high))
        else:
            raise LsrlError(f"{layer.describe()}: the stock blocks update their state linearly; a {layer.kind} "
                            "cannot be expressed")
        current = [tightened(form, lo, hi) for form, lo, hi in zip(current, low, high)]
        _tighten_new_slots(builder.slots, first_new, current)
    lowered = Lowered(builder.slots, current, max_len, spec.dim, spec.integer)
    _require_float64_coefficients(lowered)
    return lowered


# model -> (its layers, those of its diagonal form): a compiled model's layers never change
_diagonal_forms: weakref.WeakKeyDictionary[CompiledProgram, tuple[list, list]] = weakref.WeakKeyDictionary()


def exact_layers(model: CompiledProgram) -> list[Any]:
    """The layers of ``model``'s diagonal form in exact rationals, each irreducible factor with irrational roots
    kept as one rational block, a repeated one ``p**k`` as one block of ``k`` times its degree
    (``rational_block_diagonal``, lowered by ``_eigen_block``). Made once per model (while its layers are the
    same objects), so every build reads the same layers and their ``relational_bounds``, cached on them."""
    known = _diagonal_forms.get(model)
    if known is None or len(known[0]) != len(model.layers) or any(a is not b for a, b in zip(known[0], model.layers)):
        known = _diagonal_forms[model] = (list(model.layers), list(rational_block_diagonal(model).layers))
    return list(known[1])


def _require_float64_coefficients(lowered: Lowered) -> None:
    """Every coefficient the builders write as a float64 is within ``2**-53`` of its rational (module doc):
    ``LsrlError`` naming the slot for a non-zero one below float64's smallest normal number."""
    forms = [(f"the output {j}", form) for j, form in enumerate(lowered.outputs)]
    forms += [(slot.name, f) for slot in lowered.slots for c in slot.channels for f in (c.form, c.gate) if f]
    for name, form in forms:
        for value in [c for _, c in form.terms] + [form.offset]:
            if value and abs(value) < SMALLEST_NORMAL:
                raise LsrlError(f"{name}: a coefficient of about {float(value):.3g} is below float64's smallest normal "
                                "number (2.2e-308): written as a float64 it would lose its precision")


def _layer_bounds(layer: Any, original: Any, max_len: int) -> tuple[list[float], list[float]]:
    """``relational_bounds`` of ``layer`` (of the diagonal form), intersected with those of ``original``
    (the compiled program's layer of its name) where both compute the same values (``_same_values``):
    both are sound, and the diagonal form's eigen-coordinates can widen the analysis. Rounded outward."""
    low, high = relational_bounds(layer, max_len)
    if _same_values(layer, original):
        o_low, o_high = relational_bounds(original, max_len)
        low, high = list(map(max, low, o_low)), list(map(min, high, o_high))
    return [_outward(v, below) for v in low], [_outward(v, above) for v in high]


def _outward(value: Any, rounded: Any) -> float:
    """A bound (a rational or an infinity) as a float64, rounded by ``rounded`` (``below`` or ``above``)."""
    return float(value) if isinstance(value, float) or not math.isfinite(value) else rounded(value)


def _same_values(layer: Any, original: Any) -> bool:
    """Whether ``layer`` (of the diagonal form) computes the values of ``original`` (a layer of the compiled
    program): same kind and exact weights, the pass left it alone."""
    if original is None or original is layer or original.kind != layer.kind or original.dim != layer.dim:
        return False
    return all(getattr(layer, n).equals(getattr(original, n)) for n in NODE_WEIGHTS[layer.kind])


def _tighten_new_slots(slots: list[Slot], first_new: int, forms: list[Form]) -> None:
    """A layer component that is one new slot (times a non-zero factor) bounds that slot."""
    for form in forms:
        if len(form.terms) == 1 and form.offset == 0 and not form.slack and form.terms[0][0] >= first_new:
            index, factor = form.terms[0]
            low, high = sorted((rational(form.low) / factor, rational(form.high) / factor))
            slots[index].low, slots[index].high = max(slots[index].low, below(low)), min(slots[index].high, above(high))


def _require_bounded(model: CompiledProgram, max_len: int) -> None:
    spec = declared(model)
    unbounded_input = not all(math.isfinite(v) for v in spec.low + spec.high)
    advice = (f"Input '{spec.name}' has no finite bound: declare its bounds" if unbounded_input else
              "declare the Input's bounds, or bound the state")
    if model.layers:
        relational_bounds(model.layers[-1], max_len)  # every layer's bounds in one unrolled run (cached)
    for layer in model.layers:
        bounds = relational_bounds(layer, max_len)
        if not bounds.finite:
            raise LsrlError(f"{layer.describe()} has no finite bound on sequences of up to max_len={max_len} steps "
                            f"({advice}), so no finite scale can hold it")
        largest = max((abs(value) for side in bounds for value in side), default=0)
        if largest > FLOAT64_MAX:
            raise LsrlError(f"{layer.describe()}: its values may exceed float64's range (1.8e308) on sequences of "
                            f"up to max_len={shown(max_len)} steps; choose a smaller max_len")


def _affine(A: Any, b: Any, forms: list[Form]) -> list[Form]:
    """``A forms + b`` for exact lsrl matrices ``A`` and ``b`` (a vector)."""
    bias = b.values()
    return [combine([(c, forms[j]) for j, c in sorted(A.row(i).items())], bias[i]) for i in range(A.shape2d[0])]


def _lower_state(builder: _Builder, layer: Any, inputs: list[Form], bounds: tuple[list[float], list[float]]
                 ) -> list[Form]:
    """The forms of ``layer``'s units, block by block (module doc); ``bounds``: the units' value bounds."""
    drive = _affine(layer.B, layer.b, inputs)
    init = layer.init_state.values()
    out: list[Form | None] = [None] * layer.dim
    for kind, indices in state_blocks(layer.A):
        block = [[layer.A.entry(r, c) for c in indices] for r in indices]
        starts = [init[i] for i in indices]
        if kind == DIAGONAL and 0 <= block[0][0] <= 1:
            i, decay = indices[0], block[0][0]
            out[i] = drive[i] if decay == 0 else builder.scan(drive[i], decay, init[i], layer.name)
            continue
        drives, bounded = [drive[i] for i in indices], [(bounds[0][i], bounds[1][i]) for i in indices]
        first_new = len(builder.slots)
        if kind == DELAY:
            forms = _delay_line(builder, layer.name, block, drives, starts, len(indices))
        else:
            try:
                forms = _emulated(builder, layer, kind, block, drives, starts, bounded)
            except LsrlError as refusal:
                forms = _convolution(builder, layer, block, drives, starts, refusal, first_new)
        for i, form in zip(indices, forms):
            out[i] = form
    return [form for form in out if form is not None]


def _emulated(builder: _Builder, layer: Any, kind: str, block: Block, drive: list[Form], init: list[Rational],
              bounds: list[tuple[float, float]]) -> list[Form]:
    """A block that is no delay line (nor a decay in [0, 1]) by the first rule of the module doc that holds it;
    ``LsrlError`` naming the state where none does (raised before any slot is written)."""
    driven = any(form.terms or form.slack for form in drive)  # a constant with a slack: enclosed
    offsets = [form.offset for form in drive]
    if kind in (DIAGONAL, PAIR) and not driven:
        return _fixed_sequence(builder, layer, block, offsets, init)
    if kind in (DIAGONAL, PAIR):
        return _periodic(builder, layer, block, drive, init)
    if kind == OTHER and not driven and _period(_fixed_values(builder, block, offsets, init), builder.max_len):
        return _fixed_sequence(builder, layer, block, offsets, init)
    if kind == OTHER:
        return _eigen_block(builder, layer, block, drive, init, bounds)
    raise LsrlError(f"{layer.describe()}: a state block of size {len(block)} that is neither diagonal, a "
                    "rotation pair nor a delay line; the stock blocks cannot express it")


def _convolution(builder: _Builder, layer: Any, block: Block, drive: list[Form], init: list[Rational],
                 refusal: LsrlError, first_new: int) -> list[Form]:
    """A block the other rules refuse (``refusal``) as its exact convolution over ``max_len`` steps
    (``_delay_line``), where ``max_len <= MAX_CONVOLUTION_LEN``; beyond, the refusal, saying that limit."""
    if builder.max_len > MAX_CONVOLUTION_LEN:
        raise type(refusal)(f"{refusal}; only at max_len <= {MAX_CONVOLUTION_LEN} (here {builder.max_len}) is such a "
                            "state lowered as its exact convolution") from None
    if len(builder.slots) != first_new:
        raise InternalError(f"{layer.name}: a refused block left {len(builder.slots) - first_new} slots behind")
    return _delay_line(builder, layer.name, block, drive, init, builder.max_len)


def _delay_line(builder: _Builder, name: str, block: Block, drive: list[Form], init: list[Rational], length: int
                ) -> list[Form]:
    """``z_t = sum_(m<t) A^m w_(t-m) + A^t z_0`` for the block ``A`` (exact powers up to ``A^length``): each
    power's drives delayed by ``m`` steps (conv taps), the initial state as impulses at the steps it reaches.
    ``length``: a nilpotent block's size (``A^length = 0``: the state at every step; a row of ``A`` may have
    several entries, a tree of shifts, so every power is taken whole), or ``max_len`` (the state at every
    step of the sequence: the convolution fallback, module doc)."""
    powers = [_identity(len(block))]
    while len(powers) <= length and any(any(row) for row in powers[-1]):  # at most length + 1 powers
        powers.append(_times(powers[-1], block))
    if length < builder.max_len and any(any(row) for row in powers[-1]):
        raise InternalError(f"{name}: a delay block of size {len(block)} is not nilpotent")
    forms = []
    for i in range(len(block)):
        terms: list[tuple[Rational, Form]] = []
        for lag, power in enumerate(powers):
            taps = [(c, drive[j]) for j, c in enumerate(power[i]) if c]
            if taps and lag < length:
                terms.append((ONE, builder.delayed(combine(taps), lag, name)))
            start = sum((c * z for c, z in zip(power[i], init)), ZERO) if lag else ZERO
            if start:  # A^lag z_0 reaches z[i] at step lag
                terms.append((ONE, builder.impulse(start, lag - 1, name)))
        forms.append(combine(terms))
    return forms


def _times(a: Block, b: Block) -> Block:
    """The exact product of two small blocks."""
    return [[sum((a[i][k] * b[k][j] for k in range(len(b))), ZERO) for j in range(len(b[0]))] for i in range(len(a))]


def _identity(size: int) -> Block:
    return [[ONE if i == j else ZERO for j in range(size)] for i in range(size)]


def decay_and_rotation(block: Block, max_period: int) -> tuple[Number, Block, int] | None:
    """``(rho, R, p)`` with ``block = rho R`` (exact: rationals, or elements of ``Q(rho)``), ``0 < rho <= 1`` and
    ``R**p = I`` exactly (``p <= max_period``, the least such), or None: a state block a step counter can
    emulate (module doc). ``rho`` is ``|l|`` for a 1x1 block, ``sqrt(det)`` for a 2x2 one (an irrational one is
    an ``Algebraic``: ``R**r`` then holds rationals for even ``r``, since ``R**2 = block**2 / det``)."""
    if len(block) == 1:
        rho = abs(block[0][0])
    else:
        det = block[0][0] * block[1][1] - block[0][1] * block[1][0]
        rho = square_root(det) if 0 < det <= 1 else None
    if rho is None or not 0 < interval(rho)[0] <= 1:
        return None
    rotation = [[value / rho for value in row] for row in block]
    power, identity = rotation, _identity(len(block))
    for period in range(1, max_period + 1):
        if power == identity:
            return rho, rotation, period
        power = _times(rotation, power)
    return None


def _eigen_text(block: Block) -> str:
    if len(block) > 2:
        return "irrational eigenvalues"
    return "complex eigenvalues" if len(block) == 2 else f"eigenvalue {float(block[0][0]):g}"


def _fixed_values(builder: _Builder, block: Block, drive: list[Rational], init: list[Rational]) -> list[list[Any]]:
    """``z_1, z_2, ...`` of a block the input does not drive, exact, up to ``min(max_len, MAX_FIXED_PERIOD) + 1``."""
    z, values = list(init), []
    for _ in range(min(builder.max_len, MAX_FIXED_PERIOD) + 1):
        z = [sum((a * v for a, v in zip(row, z)), ZERO) + c for row, c in zip(block, drive)]
        values.append(z)
    return values


def _period(values: list[list[Any]], max_len: int) -> int | None:
    """The period ``p`` of a fixed sequence (``_fixed_values``) where ``p <= MAX_FIXED_PERIOD``, else ``max_len``
    where that is at most ``MAX_FIXED_PERIOD``, else None."""
    # z_(t+1) is a function of z_t: a sequence that meets its first value again repeats from there
    return next((p for p in range(1, len(values)) if values[p] == values[0]),
                max_len if max_len <= MAX_FIXED_PERIOD else None)


def _fixed_sequence(builder: _Builder, layer: Any, block: Block, drive: list[Rational], init: list[Rational]
                    ) -> list[Form]:
    """A block the input does not drive is a fixed sequence ``z_1, z_2, ...`` (exact): where it repeats with a
    period ``p <= MAX_FIXED_PERIOD`` (Listing 2's permutation counters), or ``max_len`` is at most that
    (``p = max_len``), ``z_t`` is a linear map of the phase indicators ``[t mod p = r]``."""
    values = _fixed_values(builder, block, drive, init)
    period = _period(values, builder.max_len)
    if period is None:
        raise LsrlError(f"{layer.describe()}: the stock blocks decay by factors in [0, 1], so a state with "
                        f"{_eigen_text(block)} is emulated over a step counter, and this one cannot be emulated: "
                        f"its fixed sequence has no period <= {MAX_FIXED_PERIOD} and max_len={builder.max_len} is "
                        f"above {MAX_FIXED_PERIOD}")
    phases = builder.phase(period)  # z_t = values[t - 1], t = 1, 2, ...
    return [combine([(values[(r - 1) % period][i], phases[r]) for r in range(period)]) for i in range(len(block))]


def _periodic(builder: _Builder, layer: Any, block: Block, drive: list[Form], init: list[Number]) -> list[Form]:
    """A block ``rho R`` with ``R**p = I`` through a phase-selected scan (module doc), exact (``rho`` and ``R``
    may be irrational: enclosed)."""
    found = decay_and_rotation(block, MAX_PERIOD)
    if found is None:
        eigenvalues = np.round(np.linalg.eigvals(np.array(block, dtype=float)), 6).tolist()
        raise LsrlError(f"{layer.describe()}: the stock blocks decay by factors in [0, 1], so a state with "
                        f"{_eigen_text(block)} {eigenvalues} is emulated over a step counter, and this one cannot be "
                        f"emulated: it is driven by the input and is no decay in (0, 1] times a rotation of period at "
                        f"most {MAX_PERIOD}")
    rho, rotation, period = found
    return _phase_selected_scan(builder, layer.name, rho, rotation, period, drive, init)


def _phase_selected_scan(builder: _Builder, name: str, rho: Number, rotation: Block, period: int, drive: list[Form],
                         init: list[Number], magnitude: Rational | None = None) -> list[Form]:
    """``z_t = rho R z_(t-1) + u_t`` with ``R**period = I`` as a scan of decay ``rho`` of ``R**-t u_t``, read out
    as ``R**t`` times it, both selected by the phase indicators (module doc); ``magnitude``, where given, bounds
    ``|z|`` and so each scan (``R = -1``: the scan is ``+-z``)."""
    size = len(rotation)
    phases = builder.phase(period)
    powers = [_identity(size)]
    for _ in range(period - 1):
        powers.append(_times(rotation, powers[-1]))
    inverse = [powers[(period - r) % period] for r in range(period)]  # R^-r = R^(p-r)
    feeds = [builder.selected([combine(list(zip(inverse[r][i], drive))) for r in range(period)], phases, name)
             for i in range(size)]
    z = [builder.scan(feed, rho, start, name) for feed, start in zip(feeds, init)]
    if magnitude is not None:
        z = [builder.bounded(state, -magnitude, magnitude) for state in z]
    return [builder.selected([combine(list(zip(powers[r][i], z))) for r in range(period)], phases, name)
            for i in range(size)]


def _eigen_block(builder: _Builder, layer: Any, block: Block, drive: list[Form], init: list[Rational],
                 bounds: list[tuple[float, float]]) -> list[Form]:
    """A rational block whose characteristic polynomial is irreducible with irrational, real roots
    (``rational_block_diagonal``) in its eigen-coordinates ``z_k = w_k s`` (``lsrl.hf.enclosure.real_eigenpairs``,
    exact in ``Q(l_k)``, enclosed where written): ``z_k`` is a scan of decay ``l_k`` in (0, 1), or a sign-flip
    emulation (``R = -1``, decay ``-l_k``) for ``l_k`` in (-1, 0); ``s = sum_k v_k z_k``. Each ``z_k`` is also
    within ``w_k`` times the units' ``bounds`` (interval arithmetic on the enclosures)."""
    why = _unfixed(builder, drive)
    if not characteristic(block).is_irreducible:  # p**k, k > 1: Jordan blocks over Q(l)
        raise LsrlError(f"{layer.describe()}: a block of {len(block)} units whose characteristic polynomial "
                        f"{_polynomial_text(block)} has a repeated irrational (or complex) factor and {why}; it has "
                        "no diagonal form the stock blocks can hold (only simple irrational eigenvalues are "
                        "enclosed), so this state is refused")
    pairs = real_eigenpairs(block)
    if pairs is None:
        raise LsrlError(f"{layer.describe()}: a block of {len(block)} units whose characteristic polynomial "
                        f"{_polynomial_text(block)} is irreducible with complex roots {why}; the stock blocks decay by "
                        "factors in [0, 1], and a rotation is emulated over a step counter only as a 2x2 block of "
                        "rational entries, so this state is refused")
    for pair in pairs:  # every root checked before a slot is written (``_convolution``)
        low, high = interval(pair.value)
        if not (-1 < low and high < 1):
            raise LsrlError(f"{layer.describe()}: its eigenvalue {float(pair.value):.6g} (irrational) lies outside "
                            f"(-1, 1) and it {why}; the stock blocks decay by factors in [0, 1], so this state is "
                            "refused")
    modes = []
    for pair in pairs:
        feed = combine(list(zip(pair.left, drive)))
        start = sum((w * z0 for w, z0 in zip(pair.left, init)), ZERO)
        mode_low, mode_high = _mode_bounds(pair.left, bounds)
        if interval(pair.value)[0] > 0:
            mode = builder.bounded(builder.scan(feed, pair.value, start, layer.name), mode_low, mode_high)
        else:  # z_t = (-1)**t y_t with y_t = (-l) y_(t-1) + (-1)**t u_t: |y| = |z|
            mode = _phase_selected_scan(builder, layer.name, -pair.value, [[-ONE]], 2, [feed], [start],
                                        max(-mode_low, mode_high))[0]
        modes.append(mode)
    return [combine([(pair.right[i], mode) for pair, mode in zip(pairs, modes)]) for i in range(len(block))]


def _unfixed(builder: _Builder, drive: list[Form]) -> str:
    """Why a block is no fixed sequence (``_fixed_sequence``), for a message."""
    if any(form.terms or form.slack for form in drive):
        return "is driven by the input"
    return (f"is undriven but has no period <= {MAX_FIXED_PERIOD} and max_len={builder.max_len} is above "
            f"{MAX_FIXED_PERIOD}")


def _mode_bounds(left: list[Number], bounds: list[tuple[float, float]]) -> tuple[Rational, Rational]:
    """Bounds of ``w . s`` for ``s`` within ``bounds`` (interval arithmetic; infinite bounds: none)."""
    low = high = ZERO
    for w, (s_low, s_high) in zip(left, bounds):
        if not (math.isfinite(s_low) and math.isfinite(s_high)):
            return -FLOAT64_MAX, FLOAT64_MAX
        ends = times_interval(interval(w), (rational(s_low), rational(s_high)))
        low, high = low + ends[0], high + ends[1]
    return low, high


def _polynomial_text(block: Block) -> str:
    return str(characteristic(block).as_expr())
