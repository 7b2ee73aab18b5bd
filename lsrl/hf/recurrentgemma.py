"""Every LSRL program in a stock ``transformers`` ``RecurrentGemmaForCausalLM``: Hawk (recurrent
blocks only) and Griffin (recurrent, recurrent, local attention, repeated). Only a config and
weights are written; the stock modules run unchanged.

**The stream.** The residual stream is ``lsrl.hf.stream``'s: anchor channels holding ``alpha`` and
payload channels holding ``beta * v``, ``beta`` from ``relational_bounds`` at ``max_len``, so every
RMSNorm (``rms_norm_eps = 0``, weight 0, so ``x / rms * (1 + 0)``) is exactly the identity. The
stock model multiplies the embeddings by ``sqrt(hidden_size)`` rounded to bfloat16; the stream is
built with 1 or 4 anchors, so ``hidden_size`` is a power of 4 and that factor ``s`` is a power of
two, and the embeddings are the stream divided by ``s`` (exact). Every value the program computes
and that a later layer reads is *materialised* in its own payload channel (a slot); a ``Linear``
never is: it is folded, as an affine map of slots, into the weights of whatever reads it.

**Layers.** The program is taken in diagonal form (``lsrl.compiler.diagonal``). Each residual
block is a temporal half and an MLP half, each adding to the stream; a layer takes the first free
half of its kind after the layer it reads (Griffin's attention halves are never used: their
``o_proj`` is 0, so they add an exact 0).

* ``ReLU``: MLP units ``gelu_tanh(G x) * (1/G)`` with ``G = 2**40``. torch's ``gelu_tanh(y) ==
  relu(y)`` exactly for ``|y| >= 8`` in float32 and float64 (in float64 not yet at 7.2 on its
  vectorised path) and at ``y = 0``; for the rest, ``|x| < 8 / G``, the error is at most ``0.17 / G
  < 2**-42``. ``G`` and ``1/G`` are powers of two, so a saturated unit is the rounded ``relu(x)``.
* ``Multi`` ``p * q``: two units ``gelu(G q) * (p / G)`` and ``gelu(-G q) * (-p / G)``; one of them
  is an exact 0 (for ``|q| >= 8 / G``), the other the rounded product.
* ``LinState`` in diagonal form, per mode ``z_t = l z_{t-1} + w_t`` (``w = B x + b``):

  - ``l = 0`` (a copy) is folded: ``z_t = w_t``.
  - ``l = 1`` (a counter, an accumulator): the RG-LRU cannot hold ``a = 1`` (its input scale
    ``m = sqrt(1 - a**2)`` would be 0). **The float rounding trick** is used: ``recurrent_param``
    is chosen so that the stock code's ``a = exp(-8 softplus(L))`` rounds to exactly 1.0 in the
    float32 scan while ``a**2 = exp(2 log a)`` rounds to ``1 - 2**-24`` (float32 model; ``1 -
    2**-26`` in float64, whose ``a`` is cast to float32 in the scan), so ``m = 2**-12``
    (``2**-13``) exactly; the drive is fed as ``w / m``. The counter is then exact: ``h_t =
    h_{t-1} + w_t`` with one rounding per step, as the interpreter's float runner. This holds in
    the stock float32 / float64 code on CPU (``unit_decay`` checks it on the running torch before
    anything is written, and ``tests/test_hf_recurrentgemma.py`` at its boundaries); a kernel that
    computes ``a**2`` as ``a * a``, or bf16, breaks it (then ``m = 0``). The genuine decay ``a =
    1 - 2**-24`` would instead give an error up to ``2**-24 T**2``.
  - ``0 < l < 1``: the genuine decay ``a = exp(-8 softplus(L))``, ``L`` solved for ``l``, the
    drive fed as ``w / m`` with ``m`` the stock code's own; its error is in the tolerance below.
  - The stock RG-LRU resets where ``position_ids == 0`` (``a = 0`` and ``m = 1`` there), so each
    such mode is two channels with the same ``a``: ``P`` fed ``w / m`` and gated off at the first
    step, ``Q`` fed ``w + l z_0`` (the initial state's share) and gated on only at the first step;
    ``z = P + Q``. The gate comes from a first-step channel ``F``: the conv of a constant with
    taps ``+1, -1`` is 1 at the first step (the conv's zero padding) and exactly 0 after;
    ``sigmoid(+-1024)`` is exactly 1 or 0.
  - Delay lines (nilpotent blocks) are the depthwise conv: one channel per (unit, source,
    lag) with ``a = 0``, ``m = 1``; the initial state's fading part ``N^t z_0`` is a conv of a
    constant.
  - Eigenvalues outside ``[0, 1]`` (negative, complex pairs, growth) cannot be an RG-LRU decay;
    they are emulated over a *clock*: a step counter ``tau`` (an exact ``l = 1`` mode), ``tau mod
    p`` by exact thresholds in two MLP levels (``tau - M floor(tau / M)``, then ``mod p``, with
    ``M ~ sqrt(max_len p)``, so about ``2 sqrt(max_len / p)`` units each), and its one-hot by a
    third. Every threshold compares integers at a distance >= 1, so the saturated units are exact.
    A block with no drive (``B`` rows 0), such as Listing 2's permutation counters, is a fixed
    sequence ``z_t``: when it is periodic (period ``p <= 64``) or ``max_len <= 64`` it is read as a
    linear map of the one-hot. A driven block ``J = rho R`` with ``0 < rho <= 1`` and ``R**p = I``
    (``p <= 12``: a sign flip, a rational rotation) is ``s_t = R^t z_t`` with ``z_t = rho z_{t-1} +
    R^-t w_t`` (``z_0 = s_0``; indeed ``R^t z_t = rho R R^{t-1} z_{t-1} + w_t``): an MLP multiplies
    the drive by ``R^-t`` (units ``gelu(G [phase = r]) * (R^-(r+1) w / G)``, exact since the
    one-hot is exactly 0 or 1), the RG-LRU holds ``z``, and a second MLP multiplies by ``R^t``.
    Any other such block is refused with an ``LsrlError`` naming the state.

**Output.** ``lm_head`` reads the output as an affine map of slots; the logits soft-cap
``tanh(l / cap) * cap`` is the identity in floating point since ``cap`` is a power of two at
least ``2**40`` times the largest output bound (``tanh(y) == y`` for ``|y| < 2**-27``).

**Tolerance (the proof).** Slot by slot, with ``lsrl.hf.rounding``'s pieces (``U = 2**-24`` for
every rounding, ``gamma_n``, ``TINY``, grids for exact slots); ``M_s`` from ``relational_bounds`` at
``max_len`` (the plan's slot bounds), ``E_s`` the error bound, ops taken in the order the blocks run
them (every op reads slots written before it).

- *Inputs*: a token is read exactly (``beta * token / s`` times the embedding factor ``s``, powers
  of two); ``inputs_embeds`` holds ``fl(beta x / s)`` in the dtype: ``E = 2**-53 M`` beyond the
  norm's own rounding (float64; in float32 the two are one rounding).
- *Reads*: each RMSNorm is the identity up to its float32 rounding (the stream's claim, for the
  bounds ``M_s + E_s`` the stream is planned for); a projection row is ``lsrl.hf.rounding.form_error``.
- *MLP units* ``gelu(G f) * (b / G)`` added with weight ``w``: **assumed of torch, tested**:
  ``gelu_tanh(y) == relu(y)`` for ``|y| >= 8`` and ``|fl(gelu_tanh(y)) - relu(y)| <= 0.171`` elsewhere
  (0.1700 in real arithmetic); so ``relu(f)`` within ``e_f + 0.171 / G`` (exact on a grid ``q`` with
  ``G 2**-q >= 8``), and the unit is ``product_error`` of that and ``b`` (a ReLU's ``b = 1``; a
  product's pair ``gelu(+-G q) (+-p / G)`` two such units; a phase product's gate is an exact 0 / 1).
- *Recurrent channels*: the conv (taps ``c_k``) adds ``sum |c_k| e_x + gamma_(K+1) sum |c_k| (X + e_x)``
  (exact for one tap 1, or on a grid); ``a = 0`` channels copy it (``m = 1``, ``i = 1`` exactly:
  ``sigmoid(+-1024)`` and ``exp(-8192)`` are exact 1 / 0); decay channels scale their drive by ``m``
  (exact for the unit decay, ``m = 2**-12``; one rounding for a genuine decay, whose ``m`` the builder
  computes with the stock code's own operations: **assumed**, as for ``a`` below, that torch computes
  the same operation on the same values identically), round it to float32 (one more ``U``) and scan
  it: ``lsrl.hf.rounding.scan_error`` with ``a^`` the float32 decay ``_rglru_decay`` computes (1.0
  exactly for the unit decay, checked by ``unit_decay``) and ``delta = |a^ - l|``. The reset at
  ``position_ids == 0`` and the first-step gates are exact (``F`` is exactly 1 then 0). ``y =
  gelu_tanh(8) = 8`` exactly, so ``h y`` is exact; ``linear_out`` writes the slot (``written``).
  Griffin's attention halves add an exact 0 (``o_proj = 0``).
- *Output*: ``lm_head`` is a projection row; the soft-cap is the identity (``Output``);
  ``tolerance = max_j e_j + U (M_j + e_j)``; 0 where every output is on a grid (exact: the
  ``lm_head`` sum, the soft-cap's powers of two and ``tanh(y) == y`` for ``|y| <= 2**-27``, assumed of
  torch and tested), so that every token decision is exact.

Step counters (integer partial sums below ``2**24``) and their thresholds are exact on grid 0, so
the phase indicators, and the emulations resting on them, carry no error of their own. Every
computed value lies within ``M_s + E_s``; ``LsrlError`` naming the node where an ``E_s`` exceeds
``2**20 (M_s + 1)`` or a scan is too long for its rounding (``2 U R >= 1/2``). A tolerance as large as
the outputs' bound proves nothing: ``ToleranceWarning``. Not proved: the float64 values the builder
computes for coefficients (eigen-decompositions of a float diagonal form, the sequences of emulated
driveless modes) are taken as the program's up to the spare rounding in ``gamma_(m+2)``. The bounds
``M_s`` are ``lsrl.lang.relational_bounds`` (sound, never looser than the intervals ``value_bounds``, whose
4.4e14 on the robust Listing 2's outputs at ``max_len = 256`` made its tolerance 2.9e11): the robust
Listing 2 (n = 2, 3) is on the grid throughout, stated exact (tolerance 0). Where a program is not on a
grid the errors are bounded slot by slot, independently, which can be far above the error measured
(Listing 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lsrl.errors import InternalError, LsrlError
from lsrl.hf.lowering import decay_and_rotation, declared
from lsrl.hf.mamba import finished
from lsrl.hf.rounding import (
    U, computed_bounds, factor, form_error, form_grid, gamma, informative, on_grid, product_error, reach, scan_error,
    written,
)
from lsrl.hf.stream import Stream, plan_stream
from lsrl.lang.relational_bounds import relational_bounds
from lsrl.numbers import FLOAT64_MAX
from lsrl.model.structure import DELAY, DIAGONAL, PAIR, state_blocks

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from lsrl.model.compiled import CompiledProgram

GATE_GAIN = 2.0 ** 40  # G: gelu_tanh(G x) / G == relu(x) once |G x| >= 8
GELU_EXACT = 8.0  # gelu_tanh(y) == relu(y) for |y| >= 8, in float32 and float64
GELU_GAP = 0.171  # |fl(gelu_tanh(y)) - relu(y)| for |y| < 8: 0.1700 plus the rounding of gelu
SATURATE = 1024.0  # sigmoid(+-SATURATE) is exactly 1 / 0; exp(-8 * SATURATE) is exactly 0
Y_GAIN = 8.0  # the gate branch y = gelu_tanh(8) == 8 exactly
MAX_PERIOD = 64  # a driveless emulated mode's period (or max_len) at most this
MAX_ROTATION = 12  # a driven rotation's period at most this
WEIGHT_LIMIT = 2.0 ** 120  # every weight and pre-activation below this (float32 overflows at 2**128)
GRIFFIN_PATTERN = ("recurrent", "recurrent", "attention")


# ---- the RG-LRU's decays, checked on the running torch ----------------------------------------


def _rglru_decay(recurrent_param: float, dtype: torch.dtype) -> tuple[float, float]:
    """``(a, m)`` as the stock RG-LRU computes them with a saturated recurrence gate: ``a`` as the
    float32 scan uses it, ``m = sqrt(1 - a**2)`` in ``dtype``."""
    import torch
    import torch.nn.functional as F

    param = torch.tensor(recurrent_param, dtype=dtype)
    log_a = -8.0 * torch.sigmoid(torch.tensor(SATURATE, dtype=dtype)) * F.softplus(param)
    a = torch.exp(log_a).to(torch.float32)
    m = torch.sqrt(1 - torch.exp(2 * log_a))
    return float(a), float(m)


def unit_decay(dtype: torch.dtype) -> tuple[float, float]:
    """``(recurrent_param, m)`` for ``a = 1`` by the rounding trick (module doc): the scan's ``a``
    is exactly 1.0 and ``m`` is ``2**-12`` (float32) or ``2**-13`` (float64), checked here."""
    import torch

    if dtype == torch.float32:
        softplus, m = 1.5 * 2.0 ** -29, 2.0 ** -12  # a**2 = 1 - 0.75 * 2**-24 rounds to 1 - 2**-24
    else:
        softplus, m = -math.log1p(-(2.0 ** -26)) / 16, 2.0 ** -13  # a**2 = 1 - 2**-26 exactly
    param = float(torch.tensor(math.log(math.expm1(softplus)), dtype=dtype))
    if _rglru_decay(param, dtype) != (1.0, m):
        raise LsrlError(f"hawk: this torch's exp / softplus do not round the RG-LRU's unit decay as the "
                        f"construction needs (a = 1.0, m = {m}) in {dtype}; the counters cannot be exact here")
    return param, m


def decay_param(eigenvalue: float, dtype: torch.dtype) -> tuple[float, float]:
    """``(recurrent_param, m)`` for a genuine decay ``a ~ eigenvalue`` in (0, 1)."""
    import torch

    param = float(torch.tensor(math.log(math.expm1(-math.log(eigenvalue) / 8)), dtype=dtype))
    return param, _rglru_decay(param, dtype)[1]


# ---- the plan: slots, affine maps and operations ---------------------------------------------


@dataclass
class Affine:
    """``value = W @ slots + c``: ``W`` ``(dim, n)`` over the first ``n`` slots (more are zeros)."""

    W: np.ndarray
    c: np.ndarray

    def over(self, n: int) -> np.ndarray:
        """``W`` widened to ``n`` slots."""
        return np.hstack([self.W, np.zeros((self.W.shape[0], n - self.W.shape[1]))])

    def then(self, A: np.ndarray, b: np.ndarray) -> Affine:
        return Affine(A @ self.W, A @ self.c + b)

    def take_rows(self, index: Any) -> Affine:
        return Affine(self.W[index], self.c[index])

    def bound(self, slot_bounds: list[float]) -> np.ndarray:
        """Per row, the largest ``|value|`` (interval arithmetic over the slots' bounds)."""
        return np.abs(self.W) @ np.asarray(slot_bounds[: self.W.shape[1]]) + np.abs(self.c)


def _stack(parts: list[Affine], n: int) -> Affine:
    return Affine(np.vstack([p.over(n) for p in parts]), np.concatenate([p.c for p in parts]))


@dataclass
class Channel:
    """One RG-LRU channel: input ``x`` (an affine row of slots), conv taps ``{lag: weight}``, decay
    (``"pass"``: a = 0; ``"unit"``: a = 1; a float: a genuine decay), input gate (``"always"``,
    ``"later"``: off at the first step, ``"first"``: only then), and what it adds to which slot."""

    x: Affine
    taps: dict
    decay: Any = "pass"
    gate: str = "always"
    slot: int | None = None
    weight: float = 0.0


@dataclass
class Unit:
    """One MLP unit: ``gelu(gate) * up`` added to ``slot`` times ``weight``."""

    gate: Affine
    up: Affine
    slot: int
    weight: float = 1.0


@dataclass
class Op:
    """What one half of a residual block computes: ``"temporal"`` (channels) or ``"mlp"`` (units)."""

    kind: str
    channels: list = field(default_factory=list)
    units: list = field(default_factory=list)


@dataclass
class Plan:
    dtype: Any = None  # the torch dtype the model is built in
    slot_bounds: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    clock: dict = field(default_factory=dict)  # period -> Affine of its one-hot (rows: phase 0 .. p-1)
    clock_ops: list = field(default_factory=list)
    names: list = field(default_factory=list)  # per slot, the node it belongs to (for messages)

    def slots(self, bounds: Any, where: str) -> list[int]:
        """New slots for values bounded by ``bounds`` (LsrlError naming ``where`` for an infinite one)."""
        bounds = [float(b) for b in bounds]
        if not all(math.isfinite(b) for b in bounds):
            raise LsrlError(f"{where} has no finite bound at max_len; declare bounds on the Input (or a shorter "
                            "max_len) so that the residual stream can be scaled")
        if max(bounds, default=0.0) > WEIGHT_LIMIT:
            raise LsrlError(f"{where} may reach {max(bounds):.3g} at max_len (relational_bounds), too large for the "
                            "residual stream beside its anchors; lower max_len or the Input bounds")
        start = len(self.slot_bounds)
        self.slot_bounds.extend(bounds)
        self.names.extend([where] * len(bounds))
        return list(range(start, start + len(bounds)))

    def reading(self, slots: list[int]) -> Affine:
        """The values of ``slots``."""
        W = np.zeros((len(slots), len(self.slot_bounds)))
        W[np.arange(len(slots)), slots] = 1.0
        return Affine(W, np.zeros(len(slots)))


def _same_values(layer: Any, original: Any) -> Any:
    """``original`` (a layer of the compiled program) where ``layer`` (of its diagonal form) computes the
    same values (same name, kind and weights: the pass left it alone), else ``layer``. The original's
    bounds are the tighter: the diagonal form's eigen-coordinates widen the interval analysis."""
    if original is None or original.kind != layer.kind or original.dim != layer.dim:
        return layer
    names = {"Linear": ("A", "b"), "LinState": ("A", "B", "b", "init_state")}.get(layer.kind, ())
    same = all(np.array_equal(getattr(layer, n).to_numpy(), getattr(original, n).to_numpy()) for n in names)
    return original if same else layer


def _layer_bound(layer: Any, max_len: int) -> list[float]:
    """Per component, the largest ``|value|`` at ``max_len`` (inf beyond float64: slots() refuses it)."""
    low, high = relational_bounds(getattr(layer, "bounded_by", layer), max_len)
    largest = [max(abs(lo), abs(hi)) for lo, hi in zip(low, high)]
    return [math.inf if bound > FLOAT64_MAX else float(bound) for bound in largest]


def _relu_units(x: Affine, out: list[int], sign: float = 1.0) -> list[Unit]:
    const = Affine(np.zeros((1, 0)), np.array([1.0 / GATE_GAIN]))
    return [Unit(x.take_rows([j]).then(np.array([[sign * GATE_GAIN]]), np.zeros(1)), const, slot)
            for j, slot in enumerate(out)]


def _product_units(x: Affine, out: list[int]) -> list[Unit]:
    half = len(out)
    p, q = x.take_rows(slice(0, half)), x.take_rows(slice(half, 2 * half))
    units = []
    for j, slot in enumerate(out):
        for sign in (1.0, -1.0):
            units.append(Unit(q.take_rows([j]).then(np.array([[sign * GATE_GAIN]]), np.zeros(1)),
                              p.take_rows([j]).then(np.array([[sign / GATE_GAIN]]), np.zeros(1)), slot))
    return units


def _first_step_channel() -> Channel:
    """``F``: 1 at the first step, exactly 0 after (a constant's conv with taps +1, -1)."""
    return Channel(Affine(np.zeros((1, 0)), np.ones(1)), {0: 1.0, 1: -1.0})


def _state(plan: Plan, layer: Any, x: Affine, max_len: int, dtype: Any) -> Affine:
    """Plan a diagonal-form ``LinState`` reading ``x``; returns its output as an affine map."""
    A, B, b, s0 = (layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy(), layer.init_state.to_numpy())
    drive = x.then(B, b)  # w_t = B x_t + b
    bounds = _layer_bound(layer, max_len)
    rows: list[Affine | None] = [None] * layer.dim
    channels: list[Channel] = []
    before, after = Op("mlp"), Op("mlp")  # a driven rotation's R^-t and R^t (module doc)
    for kind, units in state_blocks(layer.A):
        where = f"LinState '{layer.name}' (units {units})"
        eigenvalue = float(A[units[0], units[0]]) if kind == DIAGONAL else math.nan
        if kind == DIAGONAL and eigenvalue == 0:
            rows[units[0]] = drive.take_rows([units[0]])
        elif kind == DIAGONAL and eigenvalue == 1 and not np.any(B[units]) and b[units[0]] == 0:
            rows[units[0]] = Affine(np.zeros((1, 0)), s0[units])  # a constant: no channel (and no float32 state)
        elif kind == DIAGONAL and 0 < eigenvalue <= 1:
            slot = plan.slots([bounds[units[0]]], where)[0]
            channels += _decay_channels(plan, drive.take_rows([units[0]]), eigenvalue, s0[units[0]], slot, dtype,
                                        bounds)
            rows[units[0]] = plan.reading([slot])
        elif kind == DELAY:
            slots = plan.slots([bounds[i] for i in units], where)
            channels += _delay_channels(A[np.ix_(units, units)], drive.take_rows(units), s0[units], slots)
            for i, slot in zip(units, slots):
                rows[i] = plan.reading([slot])
        elif kind in (DIAGONAL, PAIR) and np.any(B[units]):
            J = A[np.ix_(units, units)]
            slots = _rotated(plan, J, drive.take_rows(units), s0[units], [bounds[i] for i in units], where,
                             (before, after, channels), max_len)
            for i, slot in zip(units, slots):
                rows[i] = plan.reading([slot])
        elif kind in (DIAGONAL, PAIR):
            values = _emulated(A[np.ix_(units, units)], B[units], b[units], s0[units], max_len, where)
            phase = _clock(plan, len(values), max_len)
            for position, i in enumerate(units):
                rows[i] = phase.then(values[:, [position]].T, np.zeros(1))
        else:
            raise InternalError(f"{where}: a '{kind}' block in a diagonal form")
    if before.units:
        plan.ops.append(before)
    if channels:
        plan.ops.append(Op("temporal", [_first_step_channel()] + channels))
    if after.units:
        plan.ops.append(after)
    return _stack([row for row in rows if row is not None], len(plan.slot_bounds))


def _phase_products(phase: Affine, matrices: list[np.ndarray], v: Affine, out: list[int]) -> list[Unit]:
    """Units adding ``matrices[r] @ v`` to ``out`` where the phase is r: ``gelu(G [phase = r]) * (M v / G)``."""
    units = []
    for r, M in enumerate(matrices):
        gate = phase.take_rows([r]).then(np.array([[GATE_GAIN]]), np.zeros(1))
        units += [Unit(gate, v.then(M[[i]] / GATE_GAIN, np.zeros(1)), slot) for i, slot in enumerate(out)]
    return units


def _rotated(plan: Plan, J: np.ndarray, w: Affine, start: np.ndarray, bounds: list[float], where: str,
             ops: tuple, max_len: int) -> list[int]:
    """A driven block ``s_t = J s_(t-1) + w_t`` with ``J = rho R``, ``R**p = I``: ``s_t = R^t z_t`` with
    ``z_t = rho z_(t-1) + R^-t w_t`` (``z_0 = s_0``; check: ``R^t z_t = rho R R^(t-1) z_(t-1) + w_t``), the
    phase ``t mod p`` from the clock; returns the slots of ``s``."""
    rotation = decay_and_rotation(J, MAX_ROTATION)
    if rotation is None:
        eigen = "complex eigenvalues" if J.shape[0] == 2 else f"eigenvalue {J[0, 0]:g}"
        raise LsrlError(f"{where}: the RG-LRU's decays lie in [0, 1], so a state with {eigen} cannot be written "
                        f"into RecurrentGemma, and it is driven by the input and is not a decay times a rotation "
                        f"of period <= {MAX_ROTATION}, so no step-counter emulation reproduces it")
    rho, R, period = rotation
    before, after, channels = ops
    phase = _clock(plan, period, max_len)
    # at step tau (t = tau + 1) of phase r = tau mod p: R^-t = R^-(r+1), R^t = R^(r+1)
    backward = [np.linalg.matrix_power(np.linalg.inv(R), r + 1) for r in range(period)]
    forward = [np.linalg.matrix_power(R, r + 1) for r in range(period)]
    w_bound = w.bound(plan.slot_bounds)
    v = plan.slots(np.max([np.abs(M) @ w_bound for M in backward], axis=0), f"{where} (R^-t w)")
    z = plan.slots(np.max([np.abs(M) @ np.asarray(bounds) for M in backward], axis=0), f"{where} (R^-t s)")
    s = plan.slots(bounds, where)
    before.units += _phase_products(phase, backward, w, v)
    for i, slot in enumerate(z):
        channels += _decay_channels(plan, plan.reading([v[i]]), rho, start[i], slot, plan.dtype, bounds)
    after.units += _phase_products(phase, forward, plan.reading(z), s)
    return s


def _decay_channels(plan: Plan, w: Affine, eigenvalue: float, start: float, slot: int, dtype: Any,
                    bounds: list) -> list[Channel]:
    """``P`` and ``Q`` (module doc) for a mode ``z_t = l z_{t-1} + w_t``, ``l`` in (0, 1]."""
    decay: str | float = "unit"
    if eigenvalue == 1:
        m = unit_decay(dtype)[1]
    else:
        decay, m = float(eigenvalue), decay_param(float(eigenvalue), dtype)[1]
    later = Channel(w.then(np.array([[1.0 / m]]), np.zeros(1)), {0: 1.0}, decay, "later", slot, 1.0)
    first = Channel(w.then(np.eye(1), np.array([eigenvalue * start])), {0: 1.0}, decay, "first", slot, 1.0)
    return [later, first]


def _delay_channels(N: np.ndarray, w: Affine, start: np.ndarray, slots: list[int]) -> list[Channel]:
    """A delay line ``z_t = N z_{t-1} + w_t`` (``N`` nilpotent): ``z_t = sum_lag N^lag w_{t-lag} + N^t z_0``."""
    k = len(slots)
    powers = [np.linalg.matrix_power(N, lag) for lag in range(k + 1)]
    channels = []
    for i, slot in enumerate(slots):
        for lag in range(k):
            for j in range(k):
                if powers[lag][i, j] != 0:
                    channels.append(Channel(w.take_rows([j]), {lag: float(powers[lag][i, j])}, slot=slot, weight=1.0))
        fading = [float((powers[t + 1] @ start)[i]) for t in range(k)]  # N^(tau+1) z_0 at step tau
        if any(fading):
            taps = {lag: fading[lag] - (fading[lag - 1] if lag else 0.0) for lag in range(k)}
            channels.append(Channel(Affine(np.zeros((1, 0)), np.ones(1)), taps, slot=slot, weight=1.0))
    return channels


def _emulated(J: np.ndarray, B: np.ndarray, b: np.ndarray, start: np.ndarray, max_len: int, where: str) -> np.ndarray:
    """The fixed sequence ``z_1, z_2, ...`` of a driveless mode as one period ``(p, d)`` (or all
    ``max_len`` steps); LsrlError where it cannot be emulated."""
    eigen = "complex eigenvalues" if J.shape[0] == 2 else f"eigenvalue {J[0, 0]:g}"
    if np.any(B):
        raise LsrlError(f"{where}: the RG-LRU's decays lie in [0, 1], so a state with {eigen} cannot be "
                        "written into RecurrentGemma, and it is driven by the input, so no step-counter "
                        "emulation reproduces it")
    z, values = start, []
    for _ in range(min(max_len, MAX_PERIOD) + 1):
        z = J @ z + b
        values.append(z)
    scale = max(1.0, float(np.max(np.abs(values))))
    for period in range(1, len(values)):
        if np.allclose(values[period], values[0], rtol=0, atol=1e-12 * scale):
            return np.array(values[:period])
    if max_len <= MAX_PERIOD:
        return np.array(values[:max_len])
    raise LsrlError(f"{where}: a state with {eigen} has no RG-LRU form, and its sequence repeats with no period "
                    f"<= {MAX_PERIOD}; it cannot be emulated by a step counter up to max_len={max_len}")


# ---- the clock: tau, tau mod p and its one-hot ------------------------------------------------


def _steps(x: Affine, thresholds: list[int], slot: int, weight: float) -> list[Unit]:
    """Units adding ``weight * [x >= k]`` (for integer ``x``: ``relu(x - k + 1) - relu(x - k)``) to ``slot``."""
    units = []
    for k in thresholds:
        for shift, sign in ((1 - k, 1.0), (-k, -1.0)):
            unit = _relu_units(x.then(np.eye(1), np.array([float(shift)])), [slot])[0]
            unit.weight = sign * weight
            units.append(unit)
    return units


def _clock(plan: Plan, period: int, max_len: int) -> Affine:
    """The one-hot of ``tau mod period`` (``tau`` = the step, from 0), planned on first use."""
    if period in plan.clock:
        return plan.clock[period]
    if not plan.clock_ops:
        tau = plan.slots([max_len], "the step counter")[0]
        step = 1.0 / unit_decay(plan.dtype)[1]  # h_tau = h_(tau-1) + m * (1 / m), from 0 at the first step
        counter = Channel(Affine(np.zeros((1, 0)), np.array([step])), {0: 1.0}, "unit", "later", tau, 1.0)
        plan.clock_ops = [Op("temporal", [_first_step_channel(), counter]), Op("mlp"), Op("mlp"), Op("mlp")]
        plan.tau = plan.reading([tau])  # type: ignore[attr-defined]
    tau = plan.tau  # type: ignore[attr-defined]
    wide = period * max(1, round(math.sqrt(max_len / period)))  # M, a multiple of the period
    coarse = plan.slots([max_len], f"the step counter mod {wide}")[0]
    plan.clock_ops[1].units += _steps(tau, list(range(wide, max_len, wide)), coarse, -float(wide))
    within = _sum(tau, plan.reading([coarse]), len(plan.slot_bounds))  # tau mod M
    fine = plan.slots([wide], f"the step counter mod {period}")[0]
    plan.clock_ops[2].units += _steps(within, list(range(period, wide, period)), fine, -float(period))
    phase = _sum(within, plan.reading([fine]), len(plan.slot_bounds))  # tau mod period
    onehot = plan.slots([1.0] * period, f"the phase of a period-{period} state")
    for j, slot in enumerate(onehot):  # [r == j] = [r >= j] - [r >= j + 1]
        plan.clock_ops[3].units += _steps(phase, [j], slot, 1.0) + _steps(phase, [j + 1], slot, -1.0)
    plan.clock[period] = plan.reading(onehot)
    return plan.clock[period]


def _sum(a: Affine, b: Affine, n: int) -> Affine:
    return Affine(a.over(n) + b.over(n), a.c + b.c)


# ---- planning a whole program -----------------------------------------------------------------


def plan_program(model: CompiledProgram, max_len: int, dtype: Any) -> tuple[Plan, Affine]:
    """The slots and operations computing ``model`` (diagonal form), and its output as an affine map."""
    spec = declared(model)
    plan = Plan(dtype)
    where = f"Input '{spec.name}'"
    current = plan.reading(plan.slots([max(abs(lo), abs(hi)) for lo, hi in zip(spec.low, spec.high)], where))
    originals = {layer.name: layer for layer in model.layers}
    layers: list[Any] = list(_diagonal(model).layers)
    for last in (model.layers[-1], layers[-1]):  # every layer's bounds in one unrolled run each (cached)
        relational_bounds(last, max_len)
    for layer in layers:
        layer.bounded_by = _same_values(layer, originals.get(layer.name))
        if layer.kind == "Linear":
            current = current.then(layer.A.to_numpy(), layer.b.to_numpy())
        elif layer.kind == "LinState":
            current = _state(plan, layer, current, max_len, dtype)
        elif layer.kind in ("ReLU", "Multi"):
            out = plan.slots(_layer_bound(layer, max_len), f"{layer.kind} '{layer.name}'")
            units = _relu_units(current, out) if layer.kind == "ReLU" else _product_units(current, out)
            plan.ops.append(Op("mlp", units=units))
            current = plan.reading(out)
        else:
            raise LsrlError(f"hawk / griffin: a {layer.kind} layer ('{layer.name}') has no RecurrentGemma form "
                            "(its state update is non-linear)")
    plan.ops = plan.clock_ops + plan.ops
    return plan, current


def _diagonal(model: CompiledProgram) -> CompiledProgram:
    from lsrl.compiler.diagonal import float_diagonal

    return float_diagonal(model)


def place(ops: list[Op], block_types: tuple[str, ...]) -> list[dict]:
    """Residual blocks ``[{"temporal": Op | None, "mlp": Op | None}]``: each op in the first free half
    of its kind after the op before it (temporal halves only in recurrent blocks)."""
    blocks: list[dict] = []
    half = 0  # the next free half: block half // 2, temporal when even
    for op in ops:
        while True:  # both patterns hold a recurrent block: a fitting half lies within 2 len(block_types) rounds
            index, temporal = divmod(half, 2)[0], half % 2 == 0
            recurrent = block_types[index % len(block_types)] == "recurrent"
            if (op.kind == "temporal") == temporal and (recurrent or not temporal):
                break
            half += 1
        while len(blocks) <= index:  # one block appended per round: at most index + 1 rounds
            blocks.append({"temporal": None, "mlp": None})
        blocks[index][op.kind] = op
        half += 1
    return blocks or [{"temporal": None, "mlp": None}]


# ---- weights ------------------------------------------------------------------------------------


def _stream(plan: Plan, where: str, bounds: list[float], beta: float | None = None) -> Stream:
    """``lsrl.hf.stream``'s stream, widened to a power of 4 channels with one anchor, so that the
    stock embedding factor ``bf16(sqrt(hidden_size))`` is a power of two (an exact scaling)."""
    width = len(plan.slot_bounds)
    size = 4 ** math.ceil(math.log(width + 1, 4) - 1e-12) if width else 4
    size = max(size, 16)
    return plan_stream(bounds, where, beta, extra_width=size - 1 - width)


class _Writer:
    """Affine maps of slots as weights over the normed stream (``alpha`` on the anchor, ``beta * v``
    on a slot's channel)."""

    def __init__(self, stream: Stream, slots: int) -> None:
        self.stream, self.slots = stream, slots

    def weights(self, form: Affine) -> np.ndarray:
        """``(rows, hidden)``: the non-constant part of ``form``."""
        W = np.zeros((form.W.shape[0], self.stream.hidden_size))
        W[:, list(self.stream.payload)] = form.over(self.slots) / self.stream.beta
        return W

    def with_anchor(self, form: Affine) -> np.ndarray:
        """``form`` with its constant read from the anchor (for a map without bias)."""
        W = self.weights(form)
        W[:, self.stream.anchor] += form.c / self.stream.alpha
        return W

    def channel(self, slot: int) -> int:
        return self.stream.payload[slot]


def _recurrent_weights(op: Op | None, writer: _Writer, lru: int, kernel: int, dtype: Any) -> dict:
    hidden = writer.stream.hidden_size
    w = {"linear_x.weight": np.zeros((lru, hidden)), "linear_x.bias": np.zeros(lru),
         "linear_y.weight": np.zeros((lru, hidden)), "linear_y.bias": np.zeros(lru),
         "linear_out.weight": np.zeros((hidden, lru)), "linear_out.bias": np.zeros(hidden),
         "conv_1d.weight": np.zeros((lru, 1, kernel)), "conv_1d.bias": np.zeros(lru),
         "rg_lru.recurrent_param": np.zeros(lru),
         "rg_lru.input_gate_weight": np.zeros((1, lru, lru)), "rg_lru.input_gate_bias": np.zeros((1, lru)),
         "rg_lru.recurrent_gate_weight": np.zeros((1, lru, lru)), "rg_lru.recurrent_gate_bias": np.zeros((1, lru))}
    if op is None:
        return w
    first = 0  # the first-step channel F is the op's channel 0
    gate_sign = {"always": 0.0, "later": -1.0, "first": 1.0}
    for index, channel in enumerate(op.channels):
        w["linear_x.weight"][index] = writer.weights(channel.x)[0]
        w["linear_x.bias"][index] = channel.x.c[0]
        for lag, tap in channel.taps.items():
            w["conv_1d.weight"][index, 0, kernel - 1 - lag] = tap
        if channel.decay == "pass":
            w["rg_lru.recurrent_param"][index] = SATURATE  # a = exp(-8 * 1024) = 0, m = 1
        elif channel.decay == "unit":
            w["rg_lru.recurrent_param"][index] = unit_decay(dtype)[0]
        else:
            w["rg_lru.recurrent_param"][index] = decay_param(channel.decay, dtype)[0]
        w["rg_lru.recurrent_gate_bias"][0, index] = SATURATE  # r = 1
        sign = gate_sign[channel.gate]  # i = sigmoid(1024 - 2048 F) (later) or sigmoid(2048 F - 1024) (first)
        w["rg_lru.input_gate_bias"][0, index] = SATURATE * (1.0 if sign <= 0 else -1.0)
        w["rg_lru.input_gate_weight"][0, first, index] = 2 * SATURATE * sign
        if channel.slot is not None:
            w["linear_y.bias"][index] = Y_GAIN
            w["linear_out.weight"][writer.channel(channel.slot), index] = (
                channel.weight * writer.stream.beta / Y_GAIN)
    return w


def _mlp_weights(op: Op | None, writer: _Writer, inner: int) -> dict:
    hidden = writer.stream.hidden_size
    w = {"gate_proj.weight": np.zeros((inner, hidden)), "gate_proj.bias": np.zeros(inner),
         "up_proj.weight": np.zeros((inner, hidden)), "up_proj.bias": np.zeros(inner),
         "down_proj.weight": np.zeros((hidden, inner)), "down_proj.bias": np.zeros(hidden)}
    for index, unit in enumerate(op.units if op is not None else []):
        w["gate_proj.weight"][index], w["gate_proj.bias"][index] = writer.weights(unit.gate)[0], unit.gate.c[0]
        w["up_proj.weight"][index], w["up_proj.bias"][index] = writer.weights(unit.up)[0], unit.up.c[0]
        w["down_proj.weight"][writer.channel(unit.slot), index] = unit.weight * writer.stream.beta
    return w


def _check_sizes(plan: Plan, out: Affine, weights: dict, where: str) -> None:
    """Overflow, checked before anything is written: every weight and every gate pre-activation
    below ``WEIGHT_LIMIT``."""
    for name, value in weights.items():
        largest = float(np.max(np.abs(value))) if np.size(value) else 0.0
        if not largest < WEIGHT_LIMIT:
            raise LsrlError(f"{where}: weight {name} would reach {largest:.3g}, beyond float32's range; lower "
                            "max_len or the Input bounds")
    for op in plan.ops:
        for unit in op.units:
            reach = float(unit.gate.bound(plan.slot_bounds)[0])
            if not reach < WEIGHT_LIMIT:
                raise LsrlError(f"{where}: an MLP gate would reach {reach:.3g}, beyond float32's range")


# ---- the tolerance (module doc) -------------------------------------------------------------------


@dataclass(frozen=True)
class _Row:
    """One row of an ``Affine`` as ``lsrl.hf.rounding`` reads forms."""

    coef: tuple[tuple[int, float], ...]
    const: float


def _row(form: Affine, scale: float = 1.0) -> _Row:
    """Row 0 of ``form`` times ``scale``."""
    return _Row(tuple((s, float(c) * scale) for s, c in enumerate(form.W[0]) if c), float(form.c[0]) * scale)


def _bound(form: Affine, plan: Plan, scale: float = 1.0) -> float:
    return float(form.bound(plan.slot_bounds)[0]) * abs(scale)


def _unit_part(unit: Unit, plan: Plan, errors: list[float], grids: list) -> tuple[float, float, float, Any]:
    """``(weight, error, bound, grid)`` of an MLP unit ``gelu(G f) * (b / G)`` (module doc, MLP)."""
    bounds = plan.slot_bounds
    gate, up = _row(unit.gate, 1 / GATE_GAIN), _row(unit.up, GATE_GAIN)
    e_a, grid_a = factor(gate, GATE_GAIN, GELU_EXACT, GELU_GAP, bounds, errors, grids)
    grid_b = form_grid(up, bounds, grids)
    e_b = 0.0 if grid_b is not None else form_error(up, bounds, errors)
    a, b = _bound(unit.gate, plan, 1 / GATE_GAIN), _bound(unit.up, plan, GATE_GAIN)
    grid = on_grid([(1.0, grid_a + grid_b, a * b)]) if grid_a is not None and grid_b is not None else None
    return unit.weight, (0.0 if grid is not None else product_error(a, e_a, b, e_b)), a * b, grid


def _channel_part(channel: Channel, plan: Plan, errors: list[float], grids: list, max_len: int
                  ) -> tuple[float, float, float, Any]:
    """``(weight, error, bound, grid)`` of an RG-LRU channel (module doc, recurrent blocks)."""
    bounds, x = plan.slot_bounds, _row(channel.x)
    x_grid = form_grid(x, bounds, grids)
    e_x = 0.0 if x_grid is not None else form_error(x, bounds, errors)
    size = _bound(channel.x, plan)
    taps = [float(tap) for tap in channel.taps.values()]
    grid = on_grid([(tap, x_grid, size) for tap in taps]) if x_grid is not None else None
    conv_error = sum(map(abs, taps)) * e_x if taps == [1.0] else (
        sum(map(abs, taps)) * (e_x + gamma(len(taps) + 1) * (size + e_x)))
    conv_bound = sum(map(abs, taps)) * size
    if channel.decay == "pass":  # h = x exactly (a = 0, m = 1, i = 1)
        return channel.weight, (0.0 if grid is not None else conv_error), conv_bound, grid
    m = 1.0 if channel.gate == "first" else (
        unit_decay(plan.dtype)[1] if channel.decay == "unit" else decay_param(channel.decay, plan.dtype)[1])
    drive, drive_error = conv_bound * m, conv_error * m
    drive_error += U * (drive + drive_error) * (1 if channel.decay == "unit" else 2)  # x m; float32 scan input
    if channel.decay == "unit":
        decay, computed, delta = 1.0, 1.0, 0.0
    else:
        decay = float(channel.decay)
        computed = _rglru_decay(decay_param(decay, plan.dtype)[0], plan.dtype)[0]
        delta = abs(computed - decay) * (1 + 2.0 ** -52)
    bound = drive * reach(decay, max_len)
    grid = on_grid([(1.0, grid, bound)]) if decay == 1 and grid is not None else None
    error = 0.0 if grid is not None else scan_error(drive, drive_error, decay, computed, delta, max_len)
    return channel.weight, error, bound, grid


def plan_errors(model: CompiledProgram, plan: Plan, max_len: int) -> tuple[list[float], list]:
    """``E_s`` and the grid per slot (module doc, tolerance), op by op in the order the blocks run them."""
    bounds = plan.slot_bounds
    spec = declared(model)
    errors = [0.0 if spec.integer else 2.0 ** -53 * bound for bound in bounds[: spec.dim]]
    errors += [0.0] * (len(bounds) - len(errors))
    grids: list = [0 if spec.integer and i < spec.dim else None for i in range(len(bounds))]
    for op in plan.ops:
        parts: dict[int, list] = {}
        for unit in op.units:
            parts.setdefault(unit.slot, []).append(_unit_part(unit, plan, errors, grids))
        for channel in op.channels:
            if channel.slot is not None:
                parts.setdefault(channel.slot, []).append(_channel_part(channel, plan, errors, grids, max_len))
        for slot, slot_parts in parts.items():
            errors[slot], grids[slot] = written(slot_parts)
    return errors, grids


def _tolerance(model: CompiledProgram, plan: Plan, out: Affine, errors: list[float], grids: list, max_len: int
               ) -> float:
    """The record's (absolute) tolerance (module doc; 0 where every output is on a grid); a
    ``ToleranceWarning`` where it proves nothing."""
    tolerance = 0.0
    for j in range(out.W.shape[0]):
        if form_grid(_row(out.take_rows([j])), plan.slot_bounds, grids) is not None:
            continue
        error = form_error(_row(out.take_rows([j])), plan.slot_bounds, errors)
        tolerance = max(tolerance, error + U * (_bound(out.take_rows([j]), plan) + error))
    largest = float(np.max(out.bound(plan.slot_bounds), initial=0.0))
    return informative(model.name, tolerance, largest, max_len)


def build(model: CompiledProgram, max_len: int, dtype: torch.dtype, arch: str, beta: float | None = None
          ) -> PreTrainedModel:
    """``model`` in a stock ``RecurrentGemmaForCausalLM`` (``arch``: "hawk" or "griffin"); ``beta``
    overrides the stream's payload scale (for the tests of its bound)."""
    from transformers import RecurrentGemmaConfig, RecurrentGemmaForCausalLM

    pattern = ("recurrent",) if arch == "hawk" else GRIFFIN_PATTERN
    plan, out = plan_program(model, max_len, dtype)
    blocks = place(plan.ops, pattern)
    errors, grids = plan_errors(model, plan, max_len)
    stream = _stream(plan, f"{arch}: {model.name}", computed_bounds(plan.names, plan.slot_bounds, errors, max_len),
                     beta)
    tolerance = _tolerance(model, plan, out, errors, grids, max_len)
    writer = _Writer(stream, len(plan.slot_bounds))
    lru = max([len(b["temporal"].channels) for b in blocks if b["temporal"]] + [1])
    inner = max([len(b["mlp"].units) for b in blocks if b["mlp"]] + [1])
    kernel = max([2] + [max(c.taps) + 1 for b in blocks if b["temporal"] for c in b["temporal"].channels])
    spec = declared(model)
    vocab = spec.vocabulary(out.W.shape[0])
    out_bound = float(max(out.bound(plan.slot_bounds), default=1.0))
    cap = 2.0 ** (math.ceil(math.log2(max(out_bound, 1.0))) + 40)
    config = RecurrentGemmaConfig(
        num_hidden_layers=len(blocks), vocab_size=vocab, hidden_size=stream.hidden_size,
        intermediate_size=2 * inner, num_attention_heads=1, lru_width=lru, attention_window_size=min(max_len, 64),
        conv1d_width=kernel, logits_soft_cap=cap, rms_norm_eps=0.0, block_types=list(pattern),
        tie_word_embeddings=False, pad_token_id=None, bos_token_id=None, eos_token_id=None,
        use_cache=False)  # a stock Hawk fails to count its cache (no attention layer): step with position_ids
    hf = RecurrentGemmaForCausalLM(config)
    weights = {name: np.zeros(tuple(p.shape)) for name, p in hf.state_dict().items()}
    for index, block in enumerate(blocks):
        prefix = f"model.layers.{index}."
        if pattern[index % len(pattern)] == "recurrent":
            for name, value in _recurrent_weights(block["temporal"], writer, lru, kernel, dtype).items():
                weights[prefix + "temporal_block." + name] = value
        for name, value in _mlp_weights(block["mlp"], writer, inner).items():
            weights[prefix + "mlp_block." + name] = value
    scale = math.sqrt(stream.hidden_size)  # the stock embedding factor, a power of two here
    embed = weights["model.embed_tokens.weight"]
    if spec.token:
        embed[:, stream.anchor] = stream.alpha / scale
        embed[:, stream.payload[0]] = stream.beta * (spec.token_low + np.arange(vocab)) / scale
    weights["lm_head.weight"][: out.W.shape[0]] = writer.with_anchor(out)
    _check_sizes(plan, out, weights, f"{arch}: {model.name}")
    record = {"arch": arch, "max_len": max_len, "tolerance": tolerance, "outputs": out.W.shape[0],
              "embed_factor": scale}
    return finished(hf, weights, model, stream, dtype, record)


def build_hawk(model: CompiledProgram, max_len: int, dtype: torch.dtype) -> PreTrainedModel:
    """``model`` in a stock Hawk (``RecurrentGemmaForCausalLM``, ``block_types=("recurrent",)``)."""
    return build(model, max_len, dtype, "hawk")


def build_griffin(model: CompiledProgram, max_len: int, dtype: torch.dtype) -> PreTrainedModel:
    """``model`` in a stock Griffin (recurrent, recurrent, local attention; the attention adds 0)."""
    return build(model, max_len, dtype, "griffin")
