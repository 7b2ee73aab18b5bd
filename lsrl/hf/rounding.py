"""The rounding analysis the constructions share: error bounds on the slots of a residual stream.

Each builder tracks, per slot ``s`` (bound ``M_s`` from ``lsrl.lang.relational_bounds`` at ``max_len``), a bound
``E_s`` on the distance of its computed value from the program's, and a *grid*: ``q`` where the
computed value is provably exact and a multiple of ``2**-q``, else None. The module docs of
``lsrl.hf.mamba`` and ``lsrl.hf.recurrentgemma`` give the proofs; this module holds the pieces:

- ``U = 2**-24`` bounds the relative error of every rounding in either dtype (the stock norms, and
  some casts, are float32 also in a float64 model); ``gamma(n) = n U / (1 - n U)``.
- ``TINY = 2**-50``: every quantity is a program value times a scale of at least ``2**-100`` (the
  stream's smallest payload scale), so a rounding in float32's subnormal range (absolute error at most
  ``2**-150``) adds at most ``TINY`` in value units.
- ``form_error``: a dot product ``sum c_i v_i + c_0`` over the normed stream, with weights rounded
  to the dtype: ``sum |c_i| (E_i + U M'_i) + gamma_(m+2) (sum |c_i| M'_i + |c_0|) + (m + 2) TINY``,
  ``M'_i = (1 + U)(M_i + E_i)`` (the norm's float32 rounding of each value read, the weights' rounding
  and ``m`` additions; the spare rounding covers the rounding of each exact coefficient to the nearest
  float64, ``lsrl.hf.lowering``), plus the form's ``coef_error`` (``slack`` rounded up: where the program's
  coefficients are irrational, the written rational ones make a form within it of the program's, at the
  program's slot values, ``lsrl.hf.lowering``; the rest of the bound reads the written coefficients).
  ``form_grid`` claims no grid for a form whose floats are such roundings (``Row.exact``).
- exactness (``dyadic_exponent``, ``on_grid``, ``form_grid``): a sum of multiples of ``2**-q`` whose
  magnitudes add up to less than ``2**(24 - q)`` is computed exactly in float32 in any order (every
  partial sum is such a multiple, representable), when every coefficient has at most 24 bits.
- ``factor``: ``relu(f)`` through a saturating activation of gain ``k`` (``act(k x) / k``), exact
  beyond ``window`` and within ``gap`` of ``relu`` elsewhere: error ``e_f + gap / k``, or exact (0) on a
  grid ``q`` with ``k 2**-q >= window``.
- ``product_error``: ``|a^ b^ - a b| + U |a^ b^|`` for ``|a| <= A``, ``|b| <= B``.
- ``scan_error``: a recurrence ``S_t = a S_(t-1) + d_t`` (``|d| <= D``, error ``e_d``, reach ``R =
  sum_(j<T) a^j``) run with a computed decay ``a^`` within ``delta`` of ``a`` and two roundings per
  step: ``eps_t <= a^ eps_(t-1) + delta R D + e_d + 2 U (R D + eps) + 2 TINY``, so ``eps <= R' (e_d +
  delta R D + 2 U R D + 2 TINY) / (1 - 2 U R')`` with ``R' = sum_(j<T) a^^j`` (``R D`` bounds ``|S|``; where
  the slot is that one scan of a non-negative drive, its own bound ``M_s / |w|`` does too, and the smaller
  is taken: a query written once is not ``T`` times its drive); a chunked scan (Mamba-2)
  replaces the per-step rounding by ``gamma_(2T+8) R (D + e_d)``, the sum of its terms' bounds; for
  the exact unit decay and a non-negative drive its exact terms sum to ``S``: ``gamma_(2T+8) (M + T
  e_d)``, ``M`` the state's own bound.
- ``pulse_error``: such a scan whose drive is non-zero at the first step only (an initial state): its
  value stays within the drive's bound, and with the exact unit decay it carries the first step's error
  alone (``S + 0`` and ``1 * S`` are exact), so a constant initial state such as ``1/3`` does not pick
  up ``2 U T**2`` over ``T`` steps.
- ``written``: a slot written as ``sum_ch w_ch y_ch`` (one output projection, weights rounded, into
  an unused stream channel, so the residual addition ``0 + x`` is exact): ``gamma_(c+2)`` of the
  magnitudes for ``c`` channels; where every ``|w|`` is a power of two, so is every builder's output
  weight (``beta w`` over powers of two: the gates, gains, ``rms``), its products are exact and only
  the ``c - 1`` additions round: ``gamma_(c-1)`` (a slot written by one channel is exact, up to ``TINY``).
- ``Activity``, *live steps*: per slot, the steps ``1 .. max_len`` at which it may be non-zero. A step
  where a slot is *dead* is one where both the program's value and the computed one are exactly 0
  (``+-0``). By induction over the blocks: an exact slot (on a grid) whose program values depend on the
  step alone (``known``: channels reading only such slots, or none) is computed equal to them, so it is
  dead where they are 0; a form of dead slots with no constant reads exact zeros from the normed
  stream (``0 / rms = 0``) and sums ``c * 0``: an exact 0; SiLU, GeLU and ReLU map 0 to 0, a product
  with an exact 0 factor (the other finite) is 0, a convolution of zeros is 0 (its other taps are 0
  weights or read a constant that cancels: an impulse's ``k c - k c``), the RG-LRU's gated input ``i x
  m`` is 0, and the out_proj sum of zeros into the slot's own stream channel is 0. So ``relu`` and
  ``delay`` channels are dead where their form is (shifted by the lag; an impulse lives at step
  ``lag + 1`` only), a ``product`` where either factor is, a ``scan`` until its drive first lives, and
  a ``pulse`` lives throughout. A scan of the exact unit decay (``a^ = 1``: ``1 * S + 0 = S``) adds no
  error at a step where its drive is dead, so only its ``K`` live steps count in ``scan_error`` (``live``):
  a value written once (a one-hot step selector times the input) rounds once, not ``T`` times, and
  Mamba-2's chunked sums hold ``K`` non-zero terms (an addition of an exact 0 is exact), so ``gamma_(2K+8)``.
  Beyond ``STEP_LIMIT`` steps nothing is tracked (every step is live).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from lsrl.errors import LsrlError

if TYPE_CHECKING:
    from lsrl.hf.lowering import Channel, Form, Slot

U = 2.0 ** -24
TINY = 2.0 ** -50
EXACT_SPAN = 2.0 ** 24  # multiples of 2**-q below 2**(24 - q) are exact in float32
ERROR_HEADROOM = 2.0 ** 20  # E_s <= ERROR_HEADROOM (M_s + 1) keeps every intermediate finite
STEP_LIMIT = 1 << 14  # longer max_len: live steps are not tracked (a bool per slot and step)


class Row(Protocol):
    """An affine form over slots: ``coef`` ``((slot, c), ...)`` and ``const``."""

    @property
    def coef(self) -> tuple[tuple[int, float], ...]: ...

    @property
    def const(self) -> float: ...

    @property
    def exact(self) -> bool: ...  # whether coef and const are the program's coefficients, not roundings of them

    @property
    def coef_error(self) -> float: ...  # the form's distance from the program's (irrational coefficients), or 0


def gamma(n: float) -> float:
    """``gamma_n = n U / (1 - n U)``: the relative error of ``n`` roundings (``n U < 1``)."""
    return n * U / (1.0 - n * U)


def form_error(form: Row, bounds: Sequence[float], errors: Sequence[float]) -> float:
    """A bound on the error of ``form`` computed from the normed stream (module doc)."""
    read = [(abs(c), bounds[s], errors[s]) for s, c in form.coef]
    carried = sum(c * (e + U * (m + e)) for c, m, e in read)
    magnitude = sum(c * (1 + U) * (m + e) for c, m, e in read) + abs(form.const)
    return carried + gamma(len(read) + 2) * magnitude + (len(read) + 2) * TINY + form.coef_error


def dyadic_exponent(value: float) -> int | None:
    """The least ``p >= 0`` with ``value * 2**p`` an integer below ``2**24`` in magnitude, or None."""
    for p in range(25):
        scaled = value * 2.0 ** p
        if scaled == math.floor(scaled):
            return p if abs(scaled) < EXACT_SPAN else None
    return None


def on_grid(terms: Sequence[tuple[float, int | None, float]]) -> int | None:
    """``q`` where ``sum c v`` (terms ``(c, q_v, bound of v)``, ``v`` a multiple of ``2**-q_v``, None: not
    exact) is a multiple of ``2**-q`` computed exactly in float32 in any order, or None."""
    exponents = [dyadic_exponent(c) for c, _, _ in terms]
    grids = [q for _, q, _ in terms]
    if any(p is None for p in exponents) or any(q is None for q in grids):
        return None
    q = max((p + g for p, g in zip(exponents, grids) if p is not None and g is not None), default=0)
    magnitude = sum(abs(c) * bound for c, _, bound in terms)
    return q if magnitude * 2.0 ** q < EXACT_SPAN else None


def form_grid(form: Row, bounds: Sequence[float], grids: Sequence[int | None]) -> int | None:
    """The grid of ``form`` over exact slots, or None (also where its floats are roundings: ``Row.exact``)."""
    if not form.exact:
        return None
    terms = [(c, grids[s], bounds[s]) for s, c in form.coef]
    return on_grid(terms + ([(form.const, 0, 1.0)] if form.const else []))


def factor(form: Row, gain: float, window: float, gap: float, bounds: Sequence[float], errors: Sequence[float],
           grids: Sequence[int | None]) -> tuple[float, int | None]:
    """``(error, grid)`` of ``relu(form)`` through ``act(gain x) / gain`` (``act == relu`` beyond
    ``window``, within ``gap`` of it elsewhere; ``gain`` inf: the activation is the identity)."""
    grid = form_grid(form, bounds, grids)
    if grid is not None and gain * 2.0 ** -grid >= window:
        return 0.0, grid
    return form_error(form, bounds, errors) + (gap / gain if math.isfinite(gain) else 0.0), None


def product_error(a: float, e_a: float, b: float, e_b: float) -> float:
    """``|a^ b^ - a b|`` plus the product's rounding, for ``|a| <= a``, ``|b| <= b`` with errors ``e_a``, ``e_b``."""
    return a * e_b + b * e_a + e_a * e_b + U * (a + e_a) * (b + e_b)


def reach(decay: float, max_len: int) -> float:
    """``sum_(j < max_len) decay**j`` bounded above: ``min(max_len, 1 / (1 - decay))``."""
    return float(max_len) if decay >= 1 else min(float(max_len), 1.0 / (1.0 - decay))


def scan_error(drive: float, drive_error: float, decay: float, computed: float, delta: float, max_len: int,
               chunked: bool = False, state: float | None = None, live: int | None = None) -> float:
    """``eps`` of a scan (module doc): drive at most ``drive`` in magnitude with error ``drive_error``,
    exact decay ``decay``, computed decay at most ``computed`` and within ``delta`` of ``decay``; ``state``,
    where known, bounds the exact state ``|S|`` better than ``R D``; ``live``, where known, the number of
    steps its drive may be non-zero (``Activity``): for the exact unit decay it takes the place of
    ``max_len``; inf where ``2 U R' >= 1/2``."""
    steps = max_len if live is None or not (decay == 1 and computed == 1) else live
    if steps == 0:  # S^ = S = 0 throughout
        return 0.0
    exact_reach, computed_reach = reach(decay, steps), reach(computed, steps)
    largest = exact_reach * drive if state is None else min(exact_reach * drive, state)
    if 2 * U * computed_reach >= 0.5:
        return math.inf
    step = drive_error + delta * largest + 2 * TINY
    rounding = (gamma(2 * steps + 8) * (_chunked_terms(drive, decay, computed, exact_reach, computed_reach, largest)
                                        + computed_reach * drive_error) if chunked
                else computed_reach * 2 * U * largest)
    return (computed_reach * step + rounding) / (1 - 2 * U * computed_reach)


def _chunked_terms(drive: float, decay: float, computed: float, exact_reach: float, computed_reach: float,
                   largest: float) -> float:
    """A bound on ``sum_j a^**(t-j) |d_j|``, the terms a chunked scan sums (exact drives): ``R' D``; for the
    exact unit decay (every power 1) ``largest``, the bound on ``|S|`` (``R D``, or the state's own bound,
    given only where the drive is non-negative: then the terms sum to ``S``)."""
    if decay == 1 and computed == 1:
        return largest
    return max(exact_reach, computed_reach) * drive


def pulse_error(value: float, value_error: float, decay: float, computed: float, delta: float, max_len: int
                ) -> float:
    """``eps`` of a pulse (module doc): a scan whose drive ``d`` (``|d| <= value``, error ``value_error``) enters at
    the first step only and is an exact 0 after. Then ``S_t = a^ S_(t-1)`` with ``|S| <= value``: each step
    rounds the product (the sum with an exact 0 is exact), so ``eps_t <= a^ eps_(t-1) + (delta + U) value +
    U eps + TINY`` from ``eps_1 = value_error``; for the unit decay (``a^ = 1`` exactly, ``1 * S`` exact) no step
    after the first rounds: ``eps = value_error``. inf where ``U R' >= 1/2``."""
    if decay == 1 and computed == 1:
        return value_error
    computed_reach = reach(computed, max_len)
    if U * computed_reach >= 0.5:
        return math.inf
    return (value_error + computed_reach * ((delta + U) * value + TINY)) / (1 - U * computed_reach)


def written(parts: Sequence[tuple[float, float, float, int | None]]) -> tuple[float, int | None]:
    """``(E_s, grid)`` of a slot written as ``sum w y`` (parts ``(w, error of y, bound of y, grid of y)``)."""
    grid = on_grid([(w, g, b) for w, _, b, g in parts])
    if grid is not None:
        return 0.0, grid
    magnitude = sum(abs(w) * (b + e) for w, e, b, _ in parts)
    exact_weights = all(w != 0 and abs(math.frexp(w)[0]) == 0.5 for w, _, _, _ in parts)  # powers of two
    roundings = len(parts) - 1 if exact_weights else len(parts) + 2
    error = sum(abs(w) * e for w, e, _, _ in parts) + gamma(roundings) * magnitude + (len(parts) + 2) * TINY
    return error, None


class Activity:
    """The live steps of every slot (module doc): ``live[s]`` a bool per step ``1 .. max_len`` (None: every
    step), ``known[s]`` the program's values per step where the slot is exact and they depend on the step
    alone. ``record(s)`` once the slot's grid is set in ``grids`` (the builder's list, filled block by
    block: a slot reads only slots recorded before it)."""

    def __init__(self, slots: Sequence[Slot], max_len: int, grids: Sequence[int | None]) -> None:
        self.slots, self.max_len, self.grids = slots, max_len, grids
        self.bounds = [slot.bound for slot in slots]
        self.tracked = max_len <= STEP_LIMIT
        self.live: list[np.ndarray | None] = [None] * len(slots)
        self.known: list[np.ndarray | None] = [None] * len(slots)

    def values(self, form: Form) -> np.ndarray | None:
        """``form``'s values per step where every slot it reads is known and it is computed exactly."""
        if any(self.known[s] is None for s, _ in form.coef) or form_grid(form, self.bounds, self.grids) is None:
            return None
        total = np.full(self.max_len, form.const)
        for s, c in form.coef:
            total = total + c * self.known[s]  # type: ignore[operator]
        return total

    def form_live(self, form: Form) -> np.ndarray | None:
        """Where ``form`` may be non-zero (None: every step)."""
        if not self.tracked:
            return None
        values = self.values(form)
        if values is not None:
            return values != 0
        if form.const or form.coef_error:  # a constant, or a form near the program's (whose constant may live)
            return None
        live = np.zeros(self.max_len, dtype=bool)
        for s, _ in form.coef:
            if self.live[s] is None:
                return None
            live |= self.live[s]
        return live

    def count(self, form: Form, after_first: bool = False) -> int:
        """The number of steps (from the second, with ``after_first``) where ``form`` may be non-zero."""
        live = self.form_live(form)
        if live is None:
            return self.max_len - after_first
        return int(np.count_nonzero(live[1:] if after_first else live))

    def record(self, slot: int) -> None:
        """``live`` and ``known`` of ``slot`` (after its grid is set)."""
        channels = self.slots[slot].channels
        if not self.tracked or not channels:  # an input: live at every step
            return
        if self.grids[slot] is not None:
            parts = [self._channel_values(channel) for channel in channels]
            if all(part is not None for part in parts):
                total = np.zeros(self.max_len)
                for part in parts:
                    total = total + part  # type: ignore[operator]
                self.known[slot], self.live[slot] = total, total != 0
                return
        lives = [self._channel_live(channel) for channel in channels]
        if any(live is None for live in lives):
            return
        union = np.zeros(self.max_len, dtype=bool)
        for live in lives:
            union |= live
        self.live[slot] = union

    def _shifted(self, values: np.ndarray, lag: int) -> np.ndarray:
        """``values`` at step ``t - lag`` (0 or False before the sequence)."""
        out = np.zeros_like(values)
        out[lag:] = values[:self.max_len - lag] if lag < self.max_len else values[:0]
        return out

    def _channel_values(self, channel: Channel) -> np.ndarray | None:
        """The program's values of an exact channel per step (``lsrl.hf.lowering``'s semantics), or None."""
        if channel.kind == "delay" and channel.impulse:
            values = np.zeros(self.max_len)
            values[channel.lag: channel.lag + 1] = channel.form.const
            return channel.weight * values
        if channel.kind == "pulse":
            return np.full(self.max_len, channel.weight * channel.form.const) if channel.decay == 1 else None
        form = self.values(channel.form)
        if form is None:
            return None
        if channel.kind == "relu":
            return channel.weight * np.maximum(form, 0.0)
        if channel.kind == "delay":
            return channel.weight * self._shifted(form, channel.lag)
        if channel.kind == "product":
            gate = self.values(channel.gate)  # type: ignore[arg-type]
            return None if gate is None else channel.weight * form * gate
        return channel.weight * np.cumsum(form) if channel.decay == 1 else None  # a scan

    def _channel_live(self, channel: Channel) -> np.ndarray | None:
        """Where an (inexact) channel may be non-zero (None: every step)."""
        if channel.kind == "pulse":
            return None
        if channel.kind == "delay" and channel.impulse:
            live = np.zeros(self.max_len, dtype=bool)
            live[channel.lag: channel.lag + 1] = True
            return live
        form = self.form_live(channel.form)
        if channel.kind == "product":
            gate = self.form_live(channel.gate)  # type: ignore[arg-type]
            return gate if form is None else form if gate is None else form & gate
        if form is None:
            return None
        if channel.kind == "relu":
            return form
        if channel.kind == "delay":
            return self._shifted(form, channel.lag)
        return np.maximum.accumulate(form)  # a scan lives from its drive's first live step on


def computed_bounds(names: Sequence[str], bounds: Sequence[float], errors: Sequence[float], max_len: int
                    ) -> list[float]:
    """``M_s + E_s`` per slot (what the stream must hold); ``LsrlError`` naming the node where an error
    bound is infinite or beyond ``ERROR_HEADROOM (M_s + 1)``."""
    for name, bound, error in zip(names, bounds, errors):
        if not error <= ERROR_HEADROOM * (bound + 1):
            raise LsrlError(f"{name}: its rounding error bound ({error:.3g}) at max_len={max_len:,} is beyond what "
                            f"its bound ({bound:.3g}) allows; lower max_len or the Input bounds")
    return [bound + error for bound, error in zip(bounds, errors)]


def informative(where: str, tolerance: float, largest: float, max_len: int) -> float:
    """``tolerance``, with a ``ToleranceWarning`` naming ``where`` when it is as large as the outputs'
    bound ``largest`` (it proves nothing; the model is still written: a step of slope ``2**26`` on a unit
    input is such, its input's rounding alone being multiplied past its outputs' range)."""
    if largest > 0 and not tolerance < largest:
        from lsrl.targets.precision import ToleranceWarning

        warnings.warn(f"{where}: the error bound of the outputs ({tolerance:.3g}) at max_len={max_len:,} is as large "
                      f"as their value bound ({largest:.3g}): it proves nothing for this program", ToleranceWarning,
                      stacklevel=4)
    return tolerance
