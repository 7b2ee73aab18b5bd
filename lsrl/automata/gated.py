"""Automata in a stock ``torch.nn.LSTM`` / ``torch.nn.GRU`` with their own sigmoid and tanh, for any length.

Both run the transition units of ``lsrl.automata.units``: the ideal units ``z_t ∈ {0, 1}^m`` have
exactly one unit on, and unit ``u = (p, a)`` is on iff its score

    s_t(u) = Σ_{v enters p} z_{t-1}(v) + x_t[a] - 3/2

is positive. Ideally ``s = +1/2`` for the unit that is on and ``s ≤ -1/2`` for every other unit (the
start unit's score is the constant -3/2). A gain ``G`` saturates the gates on these scores.

**LSTM** (PyTorch gate order i, f, g, o). ``i = f = σ(0) = 1/2`` and ``g = tanh(16)``, which is 1.0 in
float32 (and float64 to 1e-13), with ``c_0 = 1``: the cell stays ``c_t = 1/2 + 1/2 = 1``, so
``h_t = o_t · T`` with ``T = tanh(1)``. The output gate is the logic: ``o_t(u) = σ(G ŝ_t(u))`` where ``ŝ``
is the score computed from ``ẑ_{t-1} = h_{t-1} / T`` (recurrent weights ``G / T``, input weight ``G``,
bias ``-3G/2``). The network's units read as 0/1 quantities are ``ẑ_t = h_t / T = o_t``.

**GRU** (gate order r, z, n). ``r = σ(0) = 1/2``; the update gate is the constant ``υ = σ(-2G)``;
``n = tanh(G x[a] - 3G/2 + r (G Σ_{v enters p} h(v) + G |{v enters p}|)) = tanh(G ŝ)`` with
``ẑ = (h + 1)/2``, and ``h_t = (1 - υ) n_t + υ h_{t-1}``, so ``ẑ_t = (1 - υ) σ(2 G ŝ_t) + υ ẑ_{t-1}``.

**The bound.** Let ``ε_t = max_u |ẑ_t(u) - z_t(u)|``, D the largest number of units entering one state
(``TransitionUnits.in_degree``), R the largest number of units one output channel sums. Since
``|ŝ_t(u) - s_t(u)| ≤ D ε_{t-1}``, the score keeps its sign with margin ``1/2 - D ε_{t-1}``, hence

    LSTM:  ε_t ≤ L(G, ε_{t-1}),  L(G, ε) = σ(-G (1/2 - ρ - D ε)) + δ
    GRU:   ε_t ≤ L(G, ε_{t-1}),  L(G, ε) = σ(-2G (1/2 - ρ - D ε)) + σ(-2G) + δ

(GRU: ``|ẑ_t - z_t| ≤ (1 - υ) σ(-2G·margin) + υ |ẑ_{t-1} - z_t|`` and ``ẑ ∈ [0, 1]`` because h is a
convex combination of tanh values and ``h_0 = ±1``; in exact arithmetic ``ρ = δ = 0``.)

*Theorem.* If ``L(G, ε*) ≤ ε*`` for some ``ε*`` with ``max(D, R) ε* < 1/2 - ρ``, then for every input
string of any length, ``ε_t ≤ ε*`` at every step, and every readout is exactly right.
*Proof.* ``ε_0 = 0`` (``h_0`` holds the ideal units exactly: ``T·z_0``, ``2 z_0 - 1``). ``L`` is increasing
in ε, so ``ε_t ≤ ε*`` gives ``ε_{t+1} ≤ L(G, ε_t) ≤ L(G, ε*) ≤ ε*``; by induction ``ε_t ≤ ε*`` for all t
(the margin ``1/2 - ρ - D ε*`` stays positive). A readout channel sums at most R units: its sum is
within ``R ε* + ρ < 1/2`` of the ideal 0 or 1, and the readout thresholds it at 1/2. ∎

``gain_bound`` returns the smallest G (to 1e-6 relative, by bisection; each candidate is certified
by an explicit ε* on a log grid of 4,000 points) for which such an ε* exists. The search is bounded: it
doubles G from 1 at most 64 times (G ≤ 2^64) and then halves the bracket at most 64 times; a candidate
whose leak is NaN is not certified. No gain is certified when the grid is empty — the largest ε*
allowed, ``(1/2 - ρ) / max(D, R)``, is not above δ (the GRU's ρ grows as D², so this happens from
D ≈ 2,000 units entering one state, e.g. a sink state of a 400-symbol DFA) — and ``gain_bound`` says so
with an ``LsrlError`` instead of searching. ``L`` decreases in G, so
every larger gain is certified too. In exact arithmetic the bound is tight for the recursion: below
it, ``ε ↦ L(G, ε)`` has no fixed point under ``ε_max``, and iterating it from 0 leaves every margin —
whether a given automaton reaches that worst case (the scores of D off units all leaking into one
pre-activation, step after step) depends on the automaton and the string; the tests check that a
gain at the bound works on long strings and that a clearly smaller one fails.

**Float32.** ``ρ`` bounds the rounding of a score (in score units): a score is a float32 sum of at most
``D + 5`` non-zero terms whose magnitudes add to ``G·S`` (LSTM ``S = 4``; GRU ``S = D + 5/2``, the
terms ``G h(v)`` and ``G |{v enters p}|`` cancel), so its rounding is at most ``γ_{D+5} G S`` with
``γ_N = N u / (1 - N u)``, ``u = 2^-24``; we take ``ρ = 2 (K + 5) S u`` with ``K = max(D, R)`` (the factor 2
also covers the float32 rounding of the weight ``G / T``). ``δ = 2^-16`` bounds the rest: each gate and
each product (``σ``, ``tanh``, ``o·T``, ``(1 - υ) n + υ h``, ``h / T``) adds a relative rounding of at
most a few ``u`` to a value of size ≤ 1, and onnxruntime's vectorised sigmoid and tanh stay within
~1e-6 of the exact ones; ``δ`` is over 100 times the first and 10 times the second.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import torch
from scipy.special import expit
from torch import nn

from lsrl.automata.arguments import whole_number
from lsrl.errors import checked_call, shown
from lsrl.automata.networks import AutomatonNetwork, half_threshold_readout, set_weights
from lsrl.automata.units import TransitionUnits
from lsrl.errors import LsrlError

UNIT_ROUNDOFF = 2.0 ** -24
GATE_SLACK = 2.0 ** -16  # δ of the module docstring
CELL_DRIVE = 16.0  # tanh(16) = 1 in float32: the LSTM's cell input
_GRID_POINTS = 4000
MAX_DOUBLINGS = 64  # gain_bound: the search doubles G from 1 at most this often (G <= 2^64) ...
MAX_HALVINGS = 64  # ... and then halves the bracket at most this often (1e-6 relative takes about 20)


def rounding_slack(architecture: str, in_degree: int, readout_size: int) -> float:
    """``ρ``: the float32 rounding of a score, in score units (module docstring)."""
    widest = max(in_degree, readout_size)
    magnitude = 4.0 if architecture == "lstm" else in_degree + 2.5
    return 2.0 * (widest + 5) * magnitude * UNIT_ROUNDOFF


def leak(architecture: str, gain: float, deviation: float | np.ndarray, in_degree: int,
         readout_size: int) -> float | np.ndarray:
    """``L(G, ε)``: a bound on the next step's deviation of the units from 0/1, given this step's."""
    margin = 0.5 - rounding_slack(architecture, in_degree, readout_size) - in_degree * np.asarray(deviation)
    if architecture == "lstm":
        return expit(-gain * margin) + GATE_SLACK
    return expit(-2.0 * gain * margin) + expit(-2.0 * gain) + GATE_SLACK


def largest_deviation(architecture: str, in_degree: int, readout_size: int) -> float:
    """``(1/2 - ρ) / max(D, R)``: every ε* must lie below it (the margins stay positive, the readout right)."""
    widest = max(in_degree, readout_size)
    return (0.5 - rounding_slack(architecture, in_degree, readout_size)) / widest


def _deviation_grid(architecture: str, in_degree: int, readout_size: int) -> np.ndarray:
    """The candidate ε*: 4,000 points from δ up to ``largest_deviation`` (log spaced); empty when it is not above δ."""
    largest = largest_deviation(architecture, in_degree, readout_size)
    if not largest > GATE_SLACK:  # ρ ≥ 1/2 (negative) or too narrow a margin: no ε* can be certified
        return np.empty(0)
    return np.geomspace(GATE_SLACK, largest, _GRID_POINTS, endpoint=False)


@checked_call
def certified_deviation(architecture: str, gain: float, in_degree: int, readout_size: int) -> float | None:
    """The smallest grid ε* with ``L(G, ε*) ≤ ε*`` (the units then stay within ε* of 0/1 forever), or None
    (also for a NaN, infinite or non-positive ``gain``, which nothing certifies)."""
    in_degree, readout_size = _check_widths(architecture, in_degree, readout_size, "certified_deviation")
    if isinstance(gain, bool) or not isinstance(gain, numbers.Real):
        raise LsrlError(f"certified_deviation: gain must be a real number, got {shown(gain)} ({type(gain).__name__})")
    try:
        gain = float(gain)
    except OverflowError:  # an integer beyond float64: as infinite, nothing certifies it
        return None
    if not (math.isfinite(gain) and gain > 0):
        return None
    grid = _deviation_grid(architecture, in_degree, readout_size)
    with np.errstate(all="ignore"):
        certified = grid[leak(architecture, float(gain), grid, in_degree, readout_size) <= grid]  # NaN: not certified
    return float(certified[0]) if len(certified) else None


@checked_call
def gain_bound(architecture: str, in_degree: int, readout_size: int) -> float:
    """The smallest certified gain (module docstring) for an ``"lstm"`` or ``"gru"`` with these widths: ``in_degree``
    (D, at least 1) and ``readout_size`` (R, at least 0). The search is bounded (``MAX_DOUBLINGS``,
    ``MAX_HALVINGS``); an ``LsrlError`` when no gain up to 2^64 is certified."""
    in_degree, readout_size = _check_widths(architecture, in_degree, readout_size, "gain_bound")
    where = (f"gain_bound: a float32 {architecture} whose units sum up to D = {in_degree} (in-degree) and "
             f"R = {readout_size}")
    largest = largest_deviation(architecture, in_degree, readout_size)
    if not largest > GATE_SLACK:
        others = "'rnn' or 'second_order' (exact)" + (", or 'lstm'" if architecture == "gru" else "")
        raise LsrlError(f"{where} (readout) has no certified gain: the rounding of a score leaves no margin "
                        f"((1/2 - ρ) / max(D, R) = {largest:.3g}, must exceed δ = 2^-16); compile this automaton to "
                        f"{others}")

    def certified(gain: float) -> bool:
        return certified_deviation(architecture, gain, in_degree, readout_size) is not None

    low, high = 0.0, 1.0
    for _ in range(MAX_DOUBLINGS):
        if certified(high):
            break
        low, high = high, 2.0 * high
    else:
        raise LsrlError(f"{where} (readout) has no certified gain up to 2^{MAX_DOUBLINGS}; compile this automaton to "
                        "'rnn' or 'second_order' (exact)")
    for _ in range(MAX_HALVINGS):
        if not high - low > 1e-6 * high:
            break
        middle = 0.5 * (low + high)
        low, high = (low, middle) if certified(middle) else (middle, high)
    return high


def _check_architecture(architecture: str) -> None:
    if not isinstance(architecture, str) or architecture not in ("lstm", "gru"):
        raise LsrlError(f"the gain bound is for 'lstm' and 'gru': its architecture must be one of them, got "
                        f"{shown(architecture)}")


def _check_widths(architecture: str, in_degree: int, readout_size: int, where: str) -> tuple[int, int]:
    _check_architecture(architecture)
    return (whole_number(in_degree, "in_degree", where, minimum=1, error=LsrlError),
            whole_number(readout_size, "readout_size", where, minimum=0, error=LsrlError))


def build(architecture: str, units: TransitionUnits, gain: float | None, dtype: torch.dtype) -> AutomatonNetwork:
    """The saturated LSTM or GRU of ``units``; ``gain`` defaults to ``gain_bound``. A given gain must be finite and
    positive, and small enough that no pre-activation overflows ``dtype`` (``G (D + 5) · 2`` below its largest
    number); below the certified bound it is used with a ``RuntimeWarning``."""
    in_degree, readout_size = units.in_degree, units.readout_size
    if gain is None:
        return (_lstm if architecture == "lstm" else _gru)(units, gain_bound(architecture, in_degree, readout_size),
                                                          dtype)
    if not (isinstance(gain, (int, float)) and math.isfinite(gain) and gain > 0):
        raise LsrlError(f"the gain of a saturated {architecture} must be a finite positive number, got {gain}")
    largest = float(torch.finfo(dtype).max) / (2.0 * (in_degree + 5))
    if gain > largest:
        raise LsrlError(f"to_torch: gain {gain:g} overflows a {str(dtype).removeprefix('torch.')} {architecture} whose "
                        f"units sum up to {in_degree} others; the gain must be at most {largest:.3g}")
    try:
        bound = gain_bound(architecture, in_degree, readout_size)
    except LsrlError:
        bound = math.inf
    if gain < bound:
        certified = f"the certified bound {bound:g}" if math.isfinite(bound) else "every certified gain (there is none)"
        warnings.warn(f"to_torch: gain {gain:g} is below {certified} for this {architecture}: the network may err on "
                      "long strings", RuntimeWarning, stacklevel=3)
    return (_lstm if architecture == "lstm" else _gru)(units, float(gain), dtype)


def _blocks(*blocks: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(block, dtype=np.float64) for block in blocks], axis=0)


def _set_gate_blocks(core: nn.RNNBase, name: str, blocks: dict[int, np.ndarray]) -> None:
    """Layer-0 parameter ``name`` of ``core``: zero, but for the gate blocks ``{gate index: (m, ...) array}``.
    (Block by block, so that building a large network never holds a float64 copy of a whole weight.)"""
    parameter, m = getattr(core, f"{name}_l0"), core.hidden_size
    with torch.no_grad():
        parameter.zero_()
        for gate, block in blocks.items():
            parameter[gate * m:(gate + 1) * m].copy_(torch.as_tensor(np.asarray(block, dtype=np.float64)))


def _lstm(units: TransitionUnits, gain: float, dtype: torch.dtype) -> AutomatonNetwork:
    m, k = units.size, units.n_symbols
    h_scale = float(torch.tanh(torch.tensor(1.0, dtype=dtype)))  # T = tanh(c) with c = 1
    zeros = np.zeros(m)
    core = nn.LSTM(k, m, batch_first=True, dtype=dtype)
    _set_gate_blocks(core, "weight_ih", {3: gain * units.input()})
    _set_gate_blocks(core, "weight_hh", {3: gain / h_scale * units.recurrent()})
    core = set_weights(
        core,
        bias_ih=_blocks(zeros, zeros, np.full(m, CELL_DRIVE), np.full(m, -1.5 * gain)),
        bias_hh=np.zeros(4 * m),
    )
    h0 = torch.as_tensor(h_scale * units.initial_on(), dtype=dtype)
    readout = half_threshold_readout(units, 1.0 / h_scale, 0.0, dtype)
    return AutomatonNetwork("lstm", core, readout, h0, c0=torch.ones(m, dtype=dtype), gain=gain)


def _gru(units: TransitionUnits, gain: float, dtype: torch.dtype) -> AutomatonNetwork:
    m, k = units.size, units.n_symbols
    recurrent = units.recurrent()
    zeros = np.zeros(m)
    core = nn.GRU(k, m, batch_first=True, dtype=dtype)
    _set_gate_blocks(core, "weight_ih", {2: gain * units.input()})
    _set_gate_blocks(core, "weight_hh", {2: gain * recurrent})
    core = set_weights(
        core,
        bias_ih=_blocks(zeros, np.full(m, -2.0 * gain), np.full(m, -1.5 * gain)),
        bias_hh=_blocks(zeros, zeros, gain * recurrent.sum(axis=1)),
    )
    h0 = torch.as_tensor(2 * units.initial_on() - 1, dtype=dtype)
    readout = half_threshold_readout(units, 0.5, 0.5, dtype)
    return AutomatonNetwork("gru", core, readout, h0, gain=gain)
