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

**Layers.** The program is lowered to slots by ``lsrl.hf.lowering``, the planner the Mamba targets
share (Linears folded into forms; delay lines; decaying rotations as phase-selected scans; driveless
blocks such as Listing 2's permutation counters as linear maps of the phase indicators ``[t mod p =
r]``, which come from an exact step counter by binary long division; the refusals). Each level of
slots becomes one residual block's halves: its recurrent channels the temporal half, its ReLU and
product channels the MLP half (each level reads only lower levels, and a block's temporal half runs
before its MLP half); a level takes the first free halves of its kinds after the level before it,
and Griffin's attention halves are never used (their ``o_proj`` is 0, so they add an exact 0).
The lowering's channels become:

* ``relu``: an MLP unit ``gelu_tanh(G f) * (1/G)`` with ``G = 2**40``. torch's ``gelu_tanh(y) ==
  relu(y)`` exactly for ``|y| >= 8`` in float32 and float64 (in float64 not yet at 7.2 on its
  vectorised path) and at ``y = 0``; for the rest, ``|f| < 8 / G``, the error is at most ``0.17 / G
  < 2**-42``. ``G`` and ``1/G`` are powers of two, so a saturated unit is the rounded ``relu(f)``.
* ``product`` ``p * q``: the units ``gelu(+-G q) * (+-p / G)`` of the signs ``q`` takes; one of them
  is an exact 0 (for ``|q| >= 8 / G``), the other the rounded product.
* ``delay``: the depthwise conv, a channel with ``a = 0``, ``m = 1`` and the tap at its lag; an
  impulse is a constant's conv with taps ``+1, -1`` (the conv's zero padding makes it 1 at step
  ``lag + 1`` only).
* ``scan`` of decay ``l`` in (0, 1] (``z_t = l z_{t-1} + w_t``):

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
  - The stock RG-LRU resets where ``position_ids == 0`` (``a = 0`` and ``m = 1`` there), so a scan
    is two channels with the same ``a``: ``P`` fed ``w / m`` and gated off at the first step, ``Q``
    fed ``w`` and gated on only at the first step; ``z = P + Q``. A ``pulse`` (an initial state
    ``l z_0``) is a ``Q`` channel of its own. The gates come from a first-step channel ``F`` (channel
    0 of every temporal half): the conv of a constant with taps ``+1, -1`` is 1 at the first step
    and exactly 0 after; ``sigmoid(+-1024)`` is exactly 1 or 0.

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
  product's pair ``gelu(+-G q) (+-p / G)`` two such units, charged together: ``gelu~(G q^) - gelu~(-G q^)``
  is within ``e_q + 2 * 0.171 / G`` of ``G q`` (``relu(y) - relu(-y) = y``) and the two products' roundings
  within ``U (|q^| + e)(|p^| + e)``, so the pair is one ``product_error`` with that gate error,
  ``_unit_parts``; a phase product's gate is an exact 0 / 1).
- *Recurrent channels*: the conv (taps ``c_k``) adds ``sum |c_k| e_x + gamma_(K+1) sum |c_k| (X + e_x)``
  (exact for one tap 1, or on a grid); ``a = 0`` channels copy it (``m = 1``, ``i = 1`` exactly:
  ``sigmoid(+-1024)`` and ``exp(-8192)`` are exact 1 / 0); decay channels scale their drive by ``m``
  (exact for the unit decay, ``m = 2**-12``; one rounding for a genuine decay), round it to float32
  (one more ``U``) and scan it: ``lsrl.hf.rounding.scan_error`` with ``a^`` the float32 decay (the same in
  every lane: the lanes, below) and ``delta = |a^ - l| + 2**-53`` (``l`` as written is the program's decay
  rounded to float64, within ``DECAY_ROUNDING``: ``lsrl.hf.lowering``); where the slot is one scan of a
  non-negative drive, ``0 <= P <= P + Q`` is bounded by the slot's own ``M_s / |w|``
  (``Slot.scan_state``), taken where smaller than ``R D``. A
  ``Q`` channel (a pulse's, a scan's first step) is driven at the first step only (``i = 0`` after:
  its input is an exact 0), so ``|h| <= D`` and it carries ``lsrl.hf.rounding.pulse_error`` (for the
  unit decay, ``1 * h + 0`` is exact: the first step's error alone). A unit-decay ``P`` channel adds no
  error at a step where its input is dead (an exact 0, ``lsrl.hf.rounding.Activity``: ``1 * h + 0 = h``),
  so ``scan_error`` counts only the ``K`` steps after the first where the input may live. Each channel
  is bounded against the program's ``l`` on its own, so ``P`` and ``Q`` need not compute the same ``a``. The reset at
  ``position_ids == 0`` and the first-step gates are exact (``F`` is exactly 1 then 0). ``y =
  gelu_tanh(8) = 8`` exactly, so ``h y`` is exact; ``linear_out`` writes the slot (``written``).
  Griffin's attention halves add an exact 0 (``o_proj = 0``).
- *Output*: ``lm_head`` is a projection row; the soft-cap is the identity (``Output``);
  ``tolerance = max_j e_j + U (M_j + e_j)``; 0 where every output is on a grid (exact: the
  ``lm_head`` sum, the soft-cap's powers of two and ``tanh(y) == y`` for ``|y| <= 2**-27``, assumed of
  torch and tested), so that every token decision is exact.

The step counter (integer partial sums below ``2**24``) and the thresholds of its long division are
exact on grid 0, so the phase indicators, and the emulations resting on them, carry no error of their
own. Every computed value lies within ``M_s + E_s``; ``LsrlError`` naming the node where an ``E_s``
exceeds ``2**20 (M_s + 1)`` or a scan is too long for its rounding (``2 U R >= 1/2``). A tolerance as
large as the outputs' bound proves nothing: ``ToleranceWarning``.

**The lanes (proved, for the running torch's CPU kernels).** The RG-LRU computes its gates and decays
elementwise on ``(batch, T, lru_width)`` tensors (``softplus`` on the ``lru_width`` parameters), and torch's
CPU elementwise kernels compute an element by one of two code paths: the vectorised body, or the scalar
loop that runs a tensor's tail (the elements after the last whole vectors) and strided inputs; for the
ops that buffer strided inputs (``exp``, ``sqrt``) the tail is a partial vector. Each path computes an
element from its value alone (SIMD lanes do not interact), but the two paths round differently
(``benchmarks/activation_identities.py``; here ``softplus``: its vectorised and scalar results differ on
about one parameter in ten). Which path a channel's lane takes depends on its position in the flattened
tensor, so one channel may take both at different steps. The construction therefore rests only on the
*values* the lanes compute: every op of the stock code between the parameters and ``(a, m)`` is either an
IEEE operation (the products ``-8 r s``, ``2 log a``, ``1 - a**2``, the casts: correctly rounded, the same
on every path) or an elementwise function of one value (``sigmoid``, ``softplus``, ``exp``, ``sqrt``) whose
inputs are fixed numbers: the gate pre-activations are exactly ``+-1024`` (a bias plus a row of zero
weights, or ``-+2048`` times the exact first-step channel ``F``), ``recurrent_param`` is a constant per
channel. ``on_every_path`` evaluates a function of one value on both paths (a contiguous run of copies, a
strided copy, a lone element), and ``rglru_lanes`` follows every combination of paths through the chain to
the set of ``(a, m)`` any lane can compute. The builder writes only parameters whose set has one element:
``check_saturated_lanes`` (the gates ``sigmoid(+-1024)`` = 1 / 0, a ``"pass"`` channel's ``a = 0``, ``m =
1``, the output branch ``gelu_tanh(8) = 8``), ``unit_decay`` (``a = 1``, ``m = 2**-12`` / ``2**-13``) and
``decay_param`` (a genuine decay: the solved parameter, or the nearest neighbouring float on which the
paths agree). So every lane computes the ``a^`` and ``m`` the tolerance uses, bit for bit. What this rests
on: torch's dispatch picks one kernel per op for the process (the CPU capability,
``torch.backends.cpu.get_cpu_capability()``; another machine's AVX512 kernels are checked when a model is
built there, and the unit decay and saturated gates again, as facts of ``lsrl.targets.facts``, the first time
a model runs on a new device or dtype through lsrl), and an elementwise op has no third path.

**Not proved** (stated precisely):

- *Tightness*: the bounds ``M_s`` are ``lsrl.lang.relational_bounds`` (sound, never looser than the
  intervals of ``value_bounds``, whose 4.4e14 on the robust Listing 2's outputs at ``max_len = 256``
  made its tolerance 3.3e10): the robust Listing 2 (n = 2, 3) is on the grid throughout, stated exact
  (tolerance 0). Where a program is off the grid the errors are bounded slot by slot, uniformly over
  the steps: a ramp of slope ``mu`` multiplies its input's error by ``mu`` at every step, as on prompts
  that put the query on a cell's ramp at every token (Listing 1: stated 0.27 at 65 steps, 1.1 at 256;
  measured 9e-4 and 3.5e-3 on such prompts, 2e-5 on a regular grid of cells).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lsrl.errors import LsrlError
from lsrl.hf.lowering import DECAY_ROUNDING, Channel, Form, Lowered, constant, declared, lower
from lsrl.hf.mamba import finished, output_tolerance, stream_bounds
from lsrl.hf.rounding import (
    U, Activity, factor, form_error, form_grid, gamma, on_grid, product_error, pulse_error, reach, scan_error, written,
)
from lsrl.hf.stream import Stream, plan_stream

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from lsrl.model.compiled import CompiledProgram

GATE_GAIN = 2.0 ** 40  # G: gelu_tanh(G x) / G == relu(x) once |G x| >= 8
GELU_EXACT = 8.0  # gelu_tanh(y) == relu(y) for |y| >= 8, in float32 and float64
GELU_GAP = 0.171  # |fl(gelu_tanh(y)) - relu(y)| for |y| < 8: 0.1700 plus the rounding of gelu
SATURATE = 1024.0  # sigmoid(+-SATURATE) is exactly 1 / 0; exp(-8 * SATURATE) is exactly 0
Y_GAIN = 8.0  # the gate branch y = gelu_tanh(8) == 8 exactly
WEIGHT_LIMIT = 2.0 ** 120  # every weight and pre-activation below this (float32 overflows at 2**128)
GRIFFIN_PATTERN = ("recurrent", "recurrent", "attention")
PARAM_TRIES = 64  # recurrent_param candidates tried for a genuine decay (decay_param)


# ---- the RG-LRU's decays, on every code path of the running torch (module doc: the lanes) --------------


def on_every_path(function: Callable[[torch.Tensor], torch.Tensor], value: torch.Tensor) -> set[float]:
    """``function(value)`` for a 0-d ``value`` as each code path of torch's CPU elementwise kernels computes it
    in a lane (``lsrl.targets.facts.on_every_path``: the vectorised body, the scalar loop of a strided input, also
    what a tensor's tail runs, and a lone element). One value: every lane holding ``value`` gets it."""
    from lsrl.targets.facts import on_every_path as every_path

    return {float(result[0]) for result in every_path(function, value.reshape(1))}


@functools.lru_cache(maxsize=None)
def rglru_lanes(recurrent_param: float, dtype: torch.dtype) -> frozenset[tuple[float, float]]:
    """Every ``(a, m)`` a lane of the stock RG-LRU can compute for ``recurrent_param`` with a saturated
    recurrence gate (``sigmoid(SATURATE)``): ``a = exp(-8 r softplus(L))`` as the float32 scan reads it and
    ``m = sqrt(1 - exp(2 log a))`` in ``dtype``, taking every path of each elementwise op (the products and
    ``1 - x`` are IEEE operations, correctly rounded on every path)."""
    import torch
    import torch.nn.functional as F

    def number(value: float) -> torch.Tensor:
        return torch.tensor(value, dtype=dtype)

    pairs = set()
    for gate in on_every_path(torch.sigmoid, number(SATURATE)):
        for softplus in on_every_path(F.softplus, number(recurrent_param)):
            log_a = -8.0 * number(gate) * number(softplus)  # the stock code's order
            for a in on_every_path(torch.exp, log_a):
                for square in on_every_path(torch.exp, 2 * log_a):
                    for m in on_every_path(torch.sqrt, 1 - number(square)):
                        pairs.add((float(number(a).to(torch.float32)), m))
    return frozenset(pairs)


def _rglru_decay(recurrent_param: float, dtype: torch.dtype) -> tuple[float, float] | None:
    """``(a, m)`` as every lane of the stock RG-LRU computes them with a saturated recurrence gate (``a`` as
    the float32 scan uses it, ``m = sqrt(1 - a**2)`` in ``dtype``), or None where the code paths disagree."""
    pairs = rglru_lanes(recurrent_param, dtype)
    return next(iter(pairs)) if len(pairs) == 1 else None


def unit_decay(dtype: torch.dtype) -> tuple[float, float]:
    """``(recurrent_param, m)`` for ``a = 1`` by the rounding trick (module doc): the scan's ``a``
    is exactly 1.0 and ``m`` is ``2**-12`` (float32) or ``2**-13`` (float64) in every lane, checked here."""
    import torch

    if dtype == torch.float32:
        softplus, m = 1.5 * 2.0 ** -29, 2.0 ** -12  # a**2 = 1 - 0.75 * 2**-24 rounds to 1 - 2**-24
    else:
        softplus, m = -math.log1p(-(2.0 ** -26)) / 16, 2.0 ** -13  # a**2 = 1 - 2**-26 exactly
    param = float(torch.tensor(math.log(math.expm1(softplus)), dtype=dtype))
    if _rglru_decay(param, dtype) != (1.0, m):
        raise LsrlError(f"hawk: this torch's exp / softplus do not round the RG-LRU's unit decay as the "
                        f"construction needs (a = 1.0, m = {m}) in {dtype} on all its code paths; the counters "
                        "cannot be exact here")
    return param, m


@functools.lru_cache(maxsize=None)
def decay_param(eigenvalue: float, dtype: torch.dtype) -> tuple[float, float]:
    """``(recurrent_param, m)`` for a genuine decay ``a ~ eigenvalue`` in (0, 1): the parameter nearest the
    solution, or among its ``PARAM_TRIES`` nearest neighbours the first, on which every lane computes the
    same ``a`` and ``m`` (``rglru_lanes``; torch's vectorised softplus differs from its scalar one on about one
    parameter in ten)."""
    import numpy as np
    import torch

    kind = np.float32 if dtype == torch.float32 else np.float64
    nearest = kind(math.log(math.expm1(-math.log(eigenvalue) / 8)))
    up = down = nearest
    for step in range(PARAM_TRIES):  # alternately the next float above and below
        if step % 2:
            up = np.nextafter(up, kind(math.inf))
        else:
            down = np.nextafter(down, kind(-math.inf)) if step else nearest
        found = _rglru_decay(float(up if step % 2 else down), dtype)
        if found is not None:
            return float(up if step % 2 else down), found[1]
    raise LsrlError(f"hawk: the RG-LRU's lanes compute different decays for every parameter near the decay "
                    f"{eigenvalue:g} in {dtype} (torch's vectorised and scalar kernels disagree); it cannot be "
                    "written exactly")


def check_saturated_lanes(dtype: torch.dtype) -> None:
    """The constants every lane must compute exactly (module doc), on every code path: ``sigmoid(+-SATURATE)``
    is 1 / 0 (the gates), a ``"pass"`` channel (``recurrent_param = SATURATE``) has ``a = 0`` and ``m = 1``,
    and ``gelu_tanh(Y_GAIN) = Y_GAIN`` (the output branch); ``LsrlError`` otherwise."""
    import torch
    import torch.nn.functional as F

    def number(value: float) -> torch.Tensor:
        return torch.tensor(value, dtype=dtype)

    found = (on_every_path(torch.sigmoid, number(SATURATE)), on_every_path(torch.sigmoid, number(-SATURATE)),
             rglru_lanes(SATURATE, dtype), on_every_path(lambda x: F.gelu(x, approximate="tanh"), number(Y_GAIN)))
    if found != ({1.0}, {0.0}, frozenset({(0.0, 1.0)}), {Y_GAIN}):
        raise LsrlError(f"hawk: this torch's saturated gates are not exact on all its code paths in {dtype} "
                        f"(sigmoid(+-{SATURATE:g}), exp(-{8 * SATURATE:g}), gelu_tanh({Y_GAIN:g})); the RG-LRU "
                        "channels cannot be exact here")


# ---- the lowering's channels as MLP units and RG-LRU channels --------------------------------------


@dataclass
class Unit:
    """One MLP unit: ``gelu(gate) * up`` added to ``slot`` times ``weight`` (``gate`` holds the gain)."""

    gate: Form
    up: Form
    slot: int
    weight: float
    whole: Channel | None = None  # the product whose sign of ``gate`` it takes (its errors are charged once)


@dataclass
class Recurrent:
    """One RG-LRU channel: input ``x``, conv taps ``{lag: weight}``, decay (``"pass"``: a = 0;
    ``"unit"``: a = 1; a float: a genuine decay), input gate (``"always"``, ``"later"``: off at the
    first step, ``"first"``: only then), and what it adds to which slot."""

    x: Form
    taps: dict[int, float]
    decay: str | float = "pass"
    gate: str = "always"
    slot: int | None = None
    weight: float = 0.0


@dataclass
class Op:
    """What one half of a residual block computes: ``"temporal"`` (channels) or ``"mlp"`` (units)."""

    kind: str
    channels: list[Recurrent] = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)


def _first_step_channel() -> Recurrent:
    """``F``: 1 at the first step, exactly 0 after (a constant's conv with taps +1, -1)."""
    return Recurrent(constant(1.0), {0: 1.0, 1: -1.0})


def _units(slot: int, channel: Channel) -> list[Unit]:
    if channel.kind == "relu":
        return [Unit(channel.form.scaled(GATE_GAIN), constant(1.0 / GATE_GAIN), slot, channel.weight)]
    gate: Form = channel.gate  # type: ignore[assignment]  # a product
    return [Unit(gate.scaled(sign * GATE_GAIN), channel.form.scaled(sign / GATE_GAIN), slot, channel.weight, channel)
            for sign in (1.0, -1.0) if gate.scaled(sign).high > 0]


def _recurrent(slot: int, channel: Channel, dtype: Any) -> list[Recurrent]:
    if channel.kind == "delay":
        taps = {channel.lag: 1.0, channel.lag + 1: -1.0} if channel.impulse else {channel.lag: 1.0}
        return [Recurrent(channel.form, taps, slot=slot, weight=channel.weight)]
    decay: str | float = "unit" if channel.decay == 1 else float(channel.decay)
    first = Recurrent(channel.form, {0: 1.0}, decay, "first", slot, channel.weight)
    if channel.kind == "pulse":
        return [first]
    m = unit_decay(dtype)[1] if decay == "unit" else decay_param(float(channel.decay), dtype)[1]
    return [Recurrent(channel.form.scaled(1.0 / m), {0: 1.0}, decay, "later", slot, channel.weight), first]


def plan_ops(lowered: Lowered, dtype: Any) -> list[Op]:
    """Per level of slots, its temporal half (``F`` first) and its MLP half, where it has them."""
    ops = []
    for level in range(1, lowered.depth + 1):
        temporal, mlp = Op("temporal", [_first_step_channel()]), Op("mlp")
        for index, slot in enumerate(lowered.slots):
            for channel in slot.channels if slot.level == level else []:
                if channel.kind in ("relu", "product"):
                    mlp.units += _units(index, channel)
                else:
                    temporal.channels += _recurrent(index, channel, dtype)
        ops += [op for op in (temporal, mlp) if op.units or len(op.channels) > 1]
    return ops


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


def _stream(slots: int, where: str, bounds: list[float], beta: float | None = None) -> Stream:
    """``lsrl.hf.stream``'s stream, widened to a power of 4 channels with one anchor, so that the
    stock embedding factor ``bf16(sqrt(hidden_size))`` is a power of two (an exact scaling)."""
    size = 4 ** math.ceil(math.log(slots + 1, 4) - 1e-12) if slots else 4
    size = max(size, 16)
    return plan_stream(bounds, where, beta, extra_width=size - 1 - slots)


def _row(form: Form, stream: Stream) -> np.ndarray:
    """The weights reading ``form``'s slots from the normed stream (its constant is the bias)."""
    row = np.zeros(stream.hidden_size)
    for slot, c in form.coef:
        row[stream.payload[slot]] = c / stream.beta
    return row


def _recurrent_weights(op: Op | None, stream: Stream, lru: int, kernel: int, dtype: Any) -> dict:
    hidden = stream.hidden_size
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
        w["linear_x.weight"][index], w["linear_x.bias"][index] = _row(channel.x, stream), channel.x.const
        for lag, tap in channel.taps.items():
            w["conv_1d.weight"][index, 0, kernel - 1 - lag] = tap
        if channel.decay == "pass":
            w["rg_lru.recurrent_param"][index] = SATURATE  # a = exp(-8 * 1024) = 0, m = 1
        elif channel.decay == "unit":
            w["rg_lru.recurrent_param"][index] = unit_decay(dtype)[0]
        else:
            w["rg_lru.recurrent_param"][index] = decay_param(float(channel.decay), dtype)[0]
        w["rg_lru.recurrent_gate_bias"][0, index] = SATURATE  # r = 1
        sign = gate_sign[channel.gate]  # i = sigmoid(1024 - 2048 F) (later) or sigmoid(2048 F - 1024) (first)
        w["rg_lru.input_gate_bias"][0, index] = SATURATE * (1.0 if sign <= 0 else -1.0)
        w["rg_lru.input_gate_weight"][0, first, index] = 2 * SATURATE * sign
        if channel.slot is not None:
            w["linear_y.bias"][index] = Y_GAIN
            w["linear_out.weight"][stream.payload[channel.slot], index] = channel.weight * stream.beta / Y_GAIN
    return w


def _mlp_weights(op: Op | None, stream: Stream, inner: int) -> dict:
    hidden = stream.hidden_size
    w = {"gate_proj.weight": np.zeros((inner, hidden)), "gate_proj.bias": np.zeros(inner),
         "up_proj.weight": np.zeros((inner, hidden)), "up_proj.bias": np.zeros(inner),
         "down_proj.weight": np.zeros((hidden, inner)), "down_proj.bias": np.zeros(hidden)}
    for index, unit in enumerate(op.units if op is not None else []):
        w["gate_proj.weight"][index], w["gate_proj.bias"][index] = _row(unit.gate, stream), unit.gate.const
        w["up_proj.weight"][index], w["up_proj.bias"][index] = _row(unit.up, stream), unit.up.const
        w["down_proj.weight"][stream.payload[unit.slot], index] = unit.weight * stream.beta
    return w


def _check_sizes(lowered: Lowered, ops: list[Op], weights: dict, where: str) -> None:
    """Overflow, checked before anything is written: every value, weight and MLP gate pre-activation
    below ``WEIGHT_LIMIT``."""
    for slot in lowered.slots:
        if not slot.bound < WEIGHT_LIMIT:
            raise LsrlError(f"{slot.name} may reach {slot.bound:.3g} at max_len (relational_bounds), too large for the "
                            "residual stream beside its anchors; lower max_len or the Input bounds")
    for name, value in weights.items():
        largest = float(np.max(np.abs(value))) if np.size(value) else 0.0
        if not largest < WEIGHT_LIMIT:
            raise LsrlError(f"{where}: weight {name} would reach {largest:.3g}, beyond float32's range; lower "
                            "max_len or the Input bounds")
    for op in ops:
        for unit in op.units:
            if not unit.gate.bound < WEIGHT_LIMIT:
                raise LsrlError(f"{where}: an MLP gate would reach {unit.gate.bound:.3g}, beyond float32's range")


# ---- the tolerance (module doc) -------------------------------------------------------------------


def _unit_part(unit: Unit, bounds: list[float], errors: list[float], grids: list, pieces: int = 1
               ) -> tuple[float, float, float, Any]:
    """``(weight, error, bound, grid)`` of an MLP unit ``gelu(G f) * (b / G)`` (module doc, MLP); with ``pieces``
    units of one product (the signs of its gate), the error of their sum: one GeLU gap per piece."""
    gate, up = unit.gate.scaled(1 / GATE_GAIN), unit.up.scaled(GATE_GAIN)
    e_a, grid_a = factor(gate, GATE_GAIN, GELU_EXACT, GELU_GAP, bounds, errors, grids)
    e_a += (pieces - 1) * GELU_GAP / GATE_GAIN if grid_a is None else 0.0
    grid_b = form_grid(up, bounds, grids)
    e_b = 0.0 if grid_b is not None else form_error(up, bounds, errors)
    a, b = gate.bound, up.bound
    grid = on_grid([(1.0, grid_a + grid_b, a * b)]) if grid_a is not None and grid_b is not None else None
    return unit.weight, (0.0 if grid is not None else product_error(a, e_a, b, e_b)), a * b, grid


def _unit_parts(units: list[Unit], bounds: list[float], errors: list[float], grids: list) -> list:
    """The parts of the units of one product (module doc, MLP: the sign split charged once) or of a ReLU."""
    first = _unit_part(units[0], bounds, errors, grids, len(units))
    return [first] + [(w, 0.0 if first[1] else e, b, g) for w, e, b, g in
                      (_unit_part(unit, bounds, errors, grids) for unit in units[1:])]


def _channel_part(channel: Recurrent, bounds: list[float], errors: list[float], grids: list, max_len: int,
                  dtype: Any, state: float | None = None, live: int | None = None) -> tuple[float, float, float, Any]:
    """``(weight, error, bound, grid)`` of an RG-LRU channel (module doc, recurrent blocks); ``state``, where
    known, bounds the scan's state (``lsrl.hf.lowering.Slot.scan_state``); ``live``, the steps its input may
    be non-zero (``lsrl.hf.rounding.Activity``)."""
    x = channel.x
    x_grid = form_grid(x, bounds, grids)
    e_x = 0.0 if x_grid is not None else form_error(x, bounds, errors)
    size = x.bound
    taps = [float(tap) for tap in channel.taps.values()]
    grid = on_grid([(tap, x_grid, size) for tap in taps]) if x_grid is not None else None
    conv_error = sum(map(abs, taps)) * e_x if taps == [1.0] else (
        sum(map(abs, taps)) * (e_x + gamma(len(taps) + 1) * (size + e_x)))
    conv_bound = sum(map(abs, taps)) * size
    if channel.decay == "pass":  # h = x exactly (a = 0, m = 1, i = 1)
        return channel.weight, (0.0 if grid is not None else conv_error), conv_bound, grid
    m = 1.0 if channel.gate == "first" else (
        unit_decay(dtype)[1] if channel.decay == "unit" else decay_param(float(channel.decay), dtype)[1])
    drive, drive_error = conv_bound * m, conv_error * m
    drive_error += U * (drive + drive_error) * (1 if channel.decay == "unit" else 2)  # x m; float32 scan input
    if channel.decay == "unit":
        decay, computed, delta = 1.0, 1.0, 0.0
    else:
        decay = float(channel.decay)
        lanes = [a for a, _ in rglru_lanes(decay_param(decay, dtype)[0], dtype)]  # one a (decay_param)
        computed = max(lanes)
        delta = max(abs(a - decay) for a in lanes) * (1 + 2.0 ** -52) + DECAY_ROUNDING  # and the lowering's rounding
    if channel.gate == "first":  # i = 0 after the first step: the drive is an exact 0 there, |h| <= drive
        bound = drive
        error = pulse_error(drive, drive_error, decay, computed, delta, max_len)
    else:
        bound = drive * reach(decay, max_len) if state is None else min(drive * reach(decay, max_len), state)
        error = scan_error(drive, drive_error, decay, computed, delta, max_len, state=state, live=live)
    grid = on_grid([(1.0, grid, bound)]) if decay == 1 and grid is not None else None
    return channel.weight, (0.0 if grid is not None else error), bound, grid


def plan_errors(lowered: Lowered, ops: list[Op], dtype: Any) -> tuple[list[float], list]:
    """``E_s`` and the grid per slot (module doc, tolerance), op by op in the order the blocks run them."""
    bounds = [slot.bound for slot in lowered.slots]
    inputs = lowered.input_dim
    errors = [0.0 if lowered.integer_input else 2.0 ** -53 * bound for bound in bounds[:inputs]]
    errors += [0.0] * (len(bounds) - len(errors))
    grids: list = [0 if lowered.integer_input and i < inputs else None for i in range(len(bounds))]
    activity = Activity(lowered.slots, lowered.max_len, grids)
    for op in ops:
        parts: dict[int, list] = {}
        products: dict[int, list[Unit]] = {}
        for unit in op.units:
            products.setdefault(id(unit.whole or unit), []).append(unit)
        for units in products.values():
            parts.setdefault(units[0].slot, []).extend(_unit_parts(units, bounds, errors, grids))
        for channel in op.channels:
            if channel.slot is not None:
                live = activity.count(channel.x, after_first=channel.gate == "later")  # gated off at step 1
                parts.setdefault(channel.slot, []).append(_channel_part(
                    channel, bounds, errors, grids, lowered.max_len, dtype, lowered.slots[channel.slot].scan_state,
                    live))
        for slot, slot_parts in parts.items():
            errors[slot], grids[slot] = written(slot_parts)
            activity.record(slot)
    return errors, grids


def build(model: CompiledProgram, max_len: int, dtype: torch.dtype, arch: str, beta: float | None = None
          ) -> PreTrainedModel:
    """``model`` in a stock ``RecurrentGemmaForCausalLM`` (``arch``: "hawk" or "griffin"); ``beta``
    overrides the stream's payload scale (for the tests of its bound)."""
    from transformers import RecurrentGemmaConfig, RecurrentGemmaForCausalLM

    pattern = ("recurrent",) if arch == "hawk" else GRIFFIN_PATTERN
    where = f"{arch}: {model.name}"
    check_saturated_lanes(dtype)
    lowered = lower(model, max_len)
    ops = plan_ops(lowered, dtype)
    blocks = place(ops, pattern)
    errors, grids = plan_errors(lowered, ops, dtype)
    stream = _stream(len(lowered.slots), where, stream_bounds(lowered, errors), beta)
    tolerance = output_tolerance(model, lowered, errors, grids)
    lru = max([len(b["temporal"].channels) for b in blocks if b["temporal"]] + [1])
    inner = max([len(b["mlp"].units) for b in blocks if b["mlp"]] + [1])
    kernel = max([2] + [max(c.taps) + 1 for b in blocks if b["temporal"] for c in b["temporal"].channels])
    spec = declared(model)
    vocab = spec.vocabulary(len(lowered.outputs))
    out_bound = max((form.bound for form in lowered.outputs), default=1.0)
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
            for name, value in _recurrent_weights(block["temporal"], stream, lru, kernel, dtype).items():
                weights[prefix + "temporal_block." + name] = value
        for name, value in _mlp_weights(block["mlp"], stream, inner).items():
            weights[prefix + "mlp_block." + name] = value
    scale = math.sqrt(stream.hidden_size)  # the stock embedding factor, a power of two here
    embed = weights["model.embed_tokens.weight"]
    if spec.token:
        embed[:, stream.anchor] = stream.alpha / scale
        embed[:, stream.payload[0]] = stream.beta * (spec.token_low + np.arange(vocab)) / scale
    for j, form in enumerate(lowered.outputs):  # lm_head has no bias: the constant from the anchor
        weights["lm_head.weight"][j] = _row(form, stream)
        weights["lm_head.weight"][j, stream.anchor] += form.const / stream.alpha
    _check_sizes(lowered, ops, weights, where)
    record = {"arch": arch, "max_len": max_len, "tolerance": tolerance, "outputs": len(lowered.outputs),
              "embed_factor": scale}
    return finished(hf, weights, model, stream, dtype, record)


def build_hawk(model: CompiledProgram, max_len: int, dtype: torch.dtype) -> PreTrainedModel:
    """``model`` in a stock Hawk (``RecurrentGemmaForCausalLM``, ``block_types=("recurrent",)``)."""
    return build(model, max_len, dtype, "hawk")


def build_griffin(model: CompiledProgram, max_len: int, dtype: torch.dtype) -> PreTrainedModel:
    """``model`` in a stock Griffin (recurrent, recurrent, local attention; the attention adds 0)."""
    return build(model, max_len, dtype, "griffin")
