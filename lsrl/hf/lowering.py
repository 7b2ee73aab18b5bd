"""A compiled program as *slots* of a residual stream: what a stock block stack must compute.

Every value the stream holds is a slot: the program's input components, and values written by a
block as a sum of *channels*. Channels are signed and linear where they can be; each builder splits
them into what its blocks compute exactly (``split_signs`` in ``lsrl.hf.mamba``: the saturated SiLU
needs non-negative inputs; RecurrentGemma's MLP gates one factor and its RG-LRU is linear):

- ``relu``:    ``weight * relu(form)``;
- ``delay``:   ``weight * form`` at step ``t - lag`` (0 before the sequence starts); an ``impulse``
  (a positive constant form) only at step ``lag + 1``: an initial state in a delay line;
- ``product``: ``weight * form * gate``;
- ``scan``:    ``weight * sum_j decay**(t-j) form_j``, ``decay`` in [0, 1];
- ``pulse``:   ``weight * decay**(t-1) * form`` (``form`` a positive constant): an initial state.

A ``Form`` is an affine function of earlier slots with an interval bound. Linear layers are only
composed into forms; a ReLU, a Multi and a LinState become slots. LinStates are lowered from
``model.diagonal()`` (float form where eigenvalues are irrational), block by block:

- a 1x1 block of eigenvalue ``l`` in [0, 1]: a scan (``l = 0``: the drive itself, a form; ``l = 1``
  with no drive: the constant initial state);
- a delay line (nilpotent shift): ``z_i,t = sum_m c_m w_(j_m),t-m``, delay channels, and its
  initial state as impulses;
- a block the input does not drive (its drive a constant ``c``) is the fixed sequence ``z_t = A
  z_(t-1) + c``: where it repeats with a period ``p <= 64`` (Listing 2's permutation counters), or
  ``max_len <= 64`` (``p = max_len``), ``z_t = sum_r z_r [t mod p = r]``, a linear map of the phase
  indicators below (``z_r`` computed in float64: exact where the block and ``c`` are dyadic);
- a driven block ``A = rho R`` with ``R**p = I``, ``p <= 12`` (``l < 0``: ``R = -1``; a complex pair
  whose rotation has a finite period): with ``s_t = R**t z_t``,
  ``z_t = rho z_(t-1) + R**-t u_t`` (``z_0 = s_0``; check: ``R**t z_t = rho R R**(t-1) z_(t-1) + u_t``)
  is a scan of decay ``rho`` whose input, and whose read-out, are selected by the exact phase
  indicators ``[t mod p = r]`` (one slot of ``p`` product channels each: exactly one indicator is
  1 at every step, so its bound is the hull of the ``p`` selected forms');
- the phase indicators come from an exact step counter ``t`` by binary long division (``t <- t - p
  2**k H(t - p 2**k)``, ``H(y) = relu(y + 1) - relu(y)`` is exact on integers) and one bump per
  phase: about ``log2(max_len / p)`` blocks, shared by all states of period ``p``;
- anything else (a driven decay above 1, a block of another shape, a driven rotation of no finite
  period) is refused with an ``LsrlError`` naming the state and why.

Every value must have a finite bound at ``max_len`` (``lsrl.lang.relational_bounds``, the interval
analysis ``value_bounds`` sharpened by an unrolled run over value sets): else ``LsrlError`` naming the
node. Bounds of forms are interval bounds, tightened by the program's own where a form is a node: those
of the diagonal form's layer, and of the compiled program's where the pass left the layer alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lsrl.compiler.diagonal import float_diagonal
from lsrl.errors import InternalError, LsrlError, shown
from lsrl.lang.relational_bounds import relational_bounds
from lsrl.model.compiled import CompiledProgram
from lsrl.model.structure import DELAY, DIAGONAL, PAIR, state_blocks
from lsrl.numbers import FLOAT64_MAX

MAX_PERIOD = 12  # a driven rotation's period at most this
MAX_FIXED_PERIOD = 64  # a driveless block's period (or max_len) at most this


@dataclass(frozen=True)
class Form:
    """``sum coef[slot] * slot + const``, within ``[low, high]``."""

    coef: tuple[tuple[int, float], ...]
    const: float
    low: float
    high: float

    @property
    def bound(self) -> float:
        return max(abs(self.low), abs(self.high))

    def scaled(self, factor: float) -> Form:
        low, high = sorted((self.low * factor, self.high * factor))
        return Form(tuple((s, c * factor) for s, c in self.coef if c * factor != 0), self.const * factor, low, high)


def constant(value: float) -> Form:
    return Form((), float(value), float(value), float(value))


def combine(terms: list[tuple[float, Form]], const: float = 0.0) -> Form:
    """``sum weight * form + const`` with the interval bound of the sum."""
    coef: dict[int, float] = {}
    low = high = const
    for weight, form in terms:
        if weight == 0:
            continue
        for slot, c in form.coef:
            coef[slot] = coef.get(slot, 0.0) + weight * c
        const += weight * form.const
        low += min(weight * form.low, weight * form.high)
        high += max(weight * form.low, weight * form.high)
    return Form(tuple((s, c) for s, c in sorted(coef.items()) if c != 0), const, low, high)


def tightened(form: Form, low: float, high: float) -> Form:
    return Form(form.coef, form.const, max(form.low, low), min(form.high, high))


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
    decay: float = 1.0
    impulse: bool = False
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
        self.inputs = [self.slot(f"input[{i}]", [], float(lo), float(hi)) for i, (lo, hi) in enumerate(zip(*bounds))]

    def slot(self, name: str, channels: list[Channel], low: float, high: float) -> Form:
        """A new slot written by ``channels`` (bounded by ``[low, high]``), as a form."""
        level = 1 + max((self.slots[s].level for c in channels for f in (c.form, c.gate) if f for s, _ in f.coef),
                        default=0) if channels else 0
        self.slots.append(Slot(name, channels, low, high, level))
        return Form(((len(self.slots) - 1, 1.0),), 0.0, low, high)

    # ---- primitives ------------------------------------------------------------------------------
    def relu(self, form: Form, name: str) -> Form:
        if form.low >= 0:
            return form
        if form.high <= 0:
            return constant(0.0)
        return self.slot(name, [Channel("relu", form, 1.0)], 0.0, form.high)

    def product(self, a: Form, b: Form, name: str) -> Form:
        if not a.coef or not b.coef:  # a constant factor: a Linear
            return b.scaled(a.const) if not a.coef else a.scaled(b.const)
        corners = [x * y for x in (a.low, a.high) for y in (b.low, b.high)]
        return self.slot(name, [Channel("product", a, 1.0, gate=b)], min(corners), max(corners))

    def selected(self, forms: list[Form], phases: list[Form], name: str) -> Form:
        """``forms[r]`` where ``t mod p = r``: ``sum_r forms[r] [t mod p = r]``, one slot of product channels
        (a constant form adds a multiple of its indicator). Exactly one indicator is 1 at every step, so
        the slot lies within the hull of the forms' bounds."""
        channels = [Channel("product", form, 1.0, gate=phase) for form, phase in zip(forms, phases) if form.coef]
        linear = [(form.const, phase) for form, phase in zip(forms, phases) if not form.coef]
        if not channels:
            return combine(linear)
        low = min([0.0] + [form.low for form in forms if form.coef])
        high = max([0.0] + [form.high for form in forms if form.coef])
        return combine([(1.0, self.slot(name, channels, low, high))] + linear)

    def scan(self, drive: Form, decay: float, init: float, name: str) -> Form:
        """``s_t = decay s_(t-1) + drive_t``, ``s_0 = init``."""
        if decay == 1 and not drive.coef and not drive.const:  # a constant: no channel
            return constant(init)
        reach = self.max_len if decay == 1 else min(self.max_len, 1.0 / (1.0 - decay))
        channels = [Channel("scan", drive, 1.0, decay=decay)] if drive.coef or drive.const else []
        if init:
            sign = 1.0 if init > 0 else -1.0
            channels.append(Channel("pulse", constant(abs(decay * init)), sign, decay=decay))
        low = min(drive.low, 0.0) * reach - abs(init)
        high = max(drive.high, 0.0) * reach + abs(init)
        return self.slot(name, channels, low, high)

    def delayed(self, form: Form, lag: int, name: str) -> Form:
        """``form`` at step ``t - lag`` (0 before the sequence)."""
        if lag == 0 or not (form.coef or form.const):
            return form
        return self.slot(name, [Channel("delay", form, 1.0, lag=lag)], min(form.low, 0.0), max(form.high, 0.0))

    def impulse(self, value: float, lag: int, name: str) -> Form:
        """``value`` at step ``lag + 1`` only."""
        channel = Channel("delay", constant(abs(value)), 1.0 if value > 0 else -1.0, lag=lag, impulse=True)
        return self.slot(name, [channel], min(value, 0.0), max(value, 0.0))

    # ---- the phase indicators [t mod p = r] -----------------------------------------------------------
    def step_counter(self) -> Form:
        if self.counter is None:
            self.counter = self.scan(constant(1.0), 1.0, 0.0, "step counter")
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
            upper = self.relu(combine([(1.0, rest)], 1.0 - size), f"t mod {period}")
            lower = self.relu(combine([(1.0, rest)], -size), f"t mod {period}")
            rest = combine([(1.0, rest), (-size, upper), (size, lower)])
            rest = Form(rest.coef, rest.const, 0.0, float(min(self.max_len, size - 1)))
            power //= 2
        ramps = {j: self.relu(combine([(1.0, rest)], -j), f"t mod {period}") for j in range(-1, period + 1)}
        indicators = [Form(f.coef, f.const, 0.0, 1.0) for f in (
            combine([(1.0, ramps[r - 1]), (-2.0, ramps[r]), (1.0, ramps[r + 1])]) for r in range(period))]
        self.phases[period] = indicators
        return indicators


def lower(model: CompiledProgram, max_len: int) -> Lowered:
    """``model`` as slots (see the module doc); ``LsrlError`` for an unbounded value or a state the
    stock blocks cannot express."""
    _require_bounded(model, max_len)
    spec = declared(model)
    builder = _Builder(max_len, spec.dim, (spec.low, spec.high))
    current = list(builder.inputs)
    originals = {layer.name: layer for layer in model.layers}
    layers: list[Any] = list(float_diagonal(model).layers)
    relational_bounds(layers[-1], max_len)  # every layer's bounds in one unrolled run (cached)
    for layer in layers:
        first_new = len(builder.slots)
        low, high = _layer_bounds(layer, originals.get(layer.name), max_len)
        if layer.kind == "Linear":
            current = _affine(layer.A.to_numpy(), layer.b.to_numpy(), current)
        elif layer.kind == "ReLU":
            current = [builder.relu(form, layer.name) for form in current]
        elif layer.kind == "Multi":
            half = layer.dim
            current = [builder.product(current[i], current[half + i], layer.name) for i in range(half)]
        elif layer.kind == "LinState":
            current = _lower_state(builder, layer, current)
        else:
            raise LsrlError(f"{layer.describe()}: the stock blocks update their state linearly; a {layer.kind} "
                            "cannot be expressed")
        current = [tightened(form, lo, hi) for form, lo, hi in zip(current, low, high)]
        _tighten_new_slots(builder.slots, first_new, current)
    return Lowered(builder.slots, current, max_len, spec.dim, spec.integer)


def _layer_bounds(layer: Any, original: Any, max_len: int) -> tuple[list[float], list[float]]:
    """``relational_bounds`` of ``layer`` (of the diagonal form), intersected with those of ``original``
    (the compiled program's layer of its name) where both compute the same values (``_same_values``):
    both are sound, and the diagonal form's eigen-coordinates can widen the analysis."""
    low, high = (list(map(float, side)) for side in relational_bounds(layer, max_len))
    if _same_values(layer, original):
        o_low, o_high = relational_bounds(original, max_len)
        low, high = list(map(max, low, map(float, o_low))), list(map(min, high, map(float, o_high)))
    return low, high


def _same_values(layer: Any, original: Any) -> bool:
    """Whether ``layer`` (of the diagonal form) computes the values of ``original`` (a layer of the compiled
    program): same kind and weights, the pass left it alone."""
    if original is None or original is layer or original.kind != layer.kind or original.dim != layer.dim:
        return False
    names = {"Linear": ("A", "b"), "LinState": ("A", "B", "b", "init_state")}.get(layer.kind, ())
    return all(np.array_equal(getattr(layer, n).to_numpy(), getattr(original, n).to_numpy()) for n in names)


def _tighten_new_slots(slots: list[Slot], first_new: int, forms: list[Form]) -> None:
    """A layer component that is one new slot (times a non-zero factor) bounds that slot."""
    for form in forms:
        if len(form.coef) == 1 and form.const == 0 and form.coef[0][0] >= first_new:
            index, factor = form.coef[0]
            low, high = sorted((form.low / factor, form.high / factor))
            slots[index].low, slots[index].high = max(slots[index].low, low), min(slots[index].high, high)


def _require_bounded(model: CompiledProgram, max_len: int) -> None:
    spec = declared(model)
    unbounded_input = not all(math.isfinite(v) for v in spec.low + spec.high)
    advice = (f"Input '{spec.name}' has no finite bound: declare its bounds" if unbounded_input else
              "declare the Input's bounds, or bound the state")
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


def _affine(A: np.ndarray, b: np.ndarray, forms: list[Form]) -> list[Form]:
    return [combine([(float(a), form) for a, form in zip(row, forms) if a], float(bias)) for row, bias in zip(A, b)]


def _lower_state(builder: _Builder, layer: Any, inputs: list[Form]) -> list[Form]:
    A = layer.A.to_numpy()
    drive = _affine(layer.B.to_numpy(), layer.b.to_numpy(), inputs)
    init = layer.init_state.to_numpy().reshape(-1)
    out: list[Form | None] = [None] * layer.dim
    for kind, indices in state_blocks(layer.A):
        block = A[np.ix_(indices, indices)]
        if kind == DIAGONAL and 0 <= block[0, 0] <= 1:
            i, decay = indices[0], float(block[0, 0])
            out[i] = drive[i] if decay == 0 else builder.scan(drive[i], decay, float(init[i]), layer.name)
        elif kind == DELAY:
            for i, form in zip(indices, _delay_line(builder, layer, block, indices, drive, init)):
                out[i] = form
        elif kind in (DIAGONAL, PAIR) and not any(drive[i].coef for i in indices):
            forms = _fixed_sequence(builder, layer, block, [drive[i].const for i in indices], init[indices])
            for i, form in zip(indices, forms):
                out[i] = form
        elif kind in (DIAGONAL, PAIR):
            forms = _periodic(builder, layer, block, [drive[i] for i in indices], init[indices])
            for i, form in zip(indices, forms):
                out[i] = form
        else:
            raise LsrlError(f"{layer.describe()}: a state block of size {len(indices)} that is neither diagonal, a "
                            "rotation pair nor a delay line; the stock blocks cannot express it")
    return [form for form in out if form is not None]


def _delay_line(builder: _Builder, layer: Any, block: np.ndarray, indices: list[int], drive: list[Form],
                init: np.ndarray) -> list[Form]:
    """``z_t[i] = sum_m c_m w_t-m[next^m(i)] + c_t z_0[next^t(i)]`` (the path's product of weights
    ``c``): drives delayed by conv taps, the initial state as impulses at the steps it reaches."""
    successor = {i: int(np.flatnonzero(row)[0]) for i, row in enumerate(block) if np.any(row)}
    forms = []
    for i in range(len(indices)):
        terms, position, factor, lag = [], i, 1.0, 0
        while True:  # a DELAY block is a nilpotent shift (state_blocks): its chains end within len(indices) steps
            if lag >= len(indices):
                raise InternalError(f"{layer.name}: the delay line from unit {indices[i]} is longer than its block")
            terms.append((1.0, builder.delayed(drive[indices[position]].scaled(factor), lag, layer.name)))
            if position not in successor:
                break
            factor *= float(block[position, successor[position]])
            position, lag = successor[position], lag + 1
            start = factor * float(init[indices[position]])
            if start:  # reaches z[i] at step lag
                terms.append((1.0, builder.impulse(start, lag - 1, layer.name)))
        forms.append(combine(terms))
    return forms


def decay_and_rotation(block: np.ndarray, max_period: int) -> tuple[float, np.ndarray, int] | None:
    """``(rho, R, p)`` with ``block = rho R``, ``0 < rho <= 1`` and ``R**p = I`` (``p <= max_period``, the
    least such), or None: a state block a step counter can emulate (module doc)."""
    rho = abs(float(block[0, 0])) if block.shape[0] == 1 else math.sqrt(abs(float(np.linalg.det(block))))
    if not 0 < rho <= 1:
        return None
    rotation, power = block / rho, np.eye(block.shape[0])
    for period in range(1, max_period + 1):
        power = rotation @ power
        if np.allclose(power, np.eye(block.shape[0]), rtol=0, atol=1e-12):
            return rho, rotation, period
    return None


def _eigen_text(block: np.ndarray) -> str:
    return "complex eigenvalues" if block.shape[0] == 2 else f"eigenvalue {float(block[0, 0]):g}"


def _repeats(later: np.ndarray, first: np.ndarray) -> bool:
    """``later == first`` up to float64 roundings of their own size (a rotation's sequence)."""
    scale = max(1.0, float(np.max(np.abs(first))), float(np.max(np.abs(later))))
    return bool(np.allclose(later, first, rtol=0, atol=1e-12 * scale))


def _fixed_sequence(builder: _Builder, layer: Any, block: np.ndarray, drive: list[float], init: np.ndarray
                    ) -> list[Form]:
    """A block the input does not drive is a fixed sequence ``z_1, z_2, ...``: where it repeats with a
    period ``p <= MAX_FIXED_PERIOD`` (Listing 2's permutation counters), or ``max_len`` is at most that
    (``p = max_len``), ``z_t`` is a linear map of the phase indicators ``[t mod p = r]``."""
    z, values = init, []
    for _ in range(min(builder.max_len, MAX_FIXED_PERIOD) + 1):
        z = block @ z + np.asarray(drive)
        values.append(z)
    period = next((p for p in range(1, len(values)) if _repeats(values[p], values[0])),
                  builder.max_len if builder.max_len <= MAX_FIXED_PERIOD else None)
    if period is None:
        raise LsrlError(f"{layer.describe()}: the stock blocks decay by factors in [0, 1], so a state with "
                        f"{_eigen_text(block)} is emulated over a step counter, and this one cannot be emulated: "
                        f"its fixed sequence has no period <= {MAX_FIXED_PERIOD} and max_len={builder.max_len} is "
                        f"above {MAX_FIXED_PERIOD}")
    phases = builder.phase(period)  # z_t = values[t - 1], t = 1, 2, ...
    return [combine([(float(values[(r - 1) % period][i]), phases[r]) for r in range(period)])
            for i in range(block.shape[0])]


def _periodic(builder: _Builder, layer: Any, block: np.ndarray, drive: list[Form], init: np.ndarray) -> list[Form]:
    """A block ``rho R`` with ``R**p = I`` through a phase-selected scan (module doc)."""
    size = block.shape[0]
    found = decay_and_rotation(block, MAX_PERIOD)
    if found is None:
        eigenvalues = np.round(np.linalg.eigvals(block), 6).tolist()
        raise LsrlError(f"{layer.describe()}: the stock blocks decay by factors in [0, 1], so a state with "
                        f"{_eigen_text(block)} {eigenvalues} is emulated over a step counter, and this one cannot be "
                        f"emulated: it is driven by the input and is no decay times a rotation of period at most "
                        f"{MAX_PERIOD}")
    rho, rotation, period = found
    phases = builder.phase(period)
    powers = [np.linalg.matrix_power(rotation, r) for r in range(period)]
    inverse = [powers[(period - r) % period] for r in range(period)]  # R^-r = R^(p-r)
    feeds = [builder.selected([combine([(float(c), d) for c, d in zip(inverse[r][i], drive)]) for r in range(period)],
                              phases, layer.name) for i in range(size)]
    z = [builder.scan(feed, rho, float(start), layer.name) for feed, start in zip(feeds, init)]
    return [builder.selected([combine([(float(c), zz) for c, zz in zip(powers[r][i], z)]) for r in range(period)],
                             phases, layer.name) for i in range(size)]
