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
by an explicit ε* on a log grid of 4,000 points) for which such an ε* exists. ``L`` decreases in G, so
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

import numpy as np
import torch
from scipy.special import expit
from torch import nn

from lsrl.automata.networks import AutomatonNetwork, half_threshold_readout, set_weights
from lsrl.automata.units import TransitionUnits
from lsrl.errors import LsrlError

UNIT_ROUNDOFF = 2.0 ** -24
GATE_SLACK = 2.0 ** -16  # δ of the module docstring
CELL_DRIVE = 16.0  # tanh(16) = 1 in float32: the LSTM's cell input
_GRID_POINTS = 4000


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


def _deviation_grid(architecture: str, in_degree: int, readout_size: int) -> np.ndarray:
    widest = max(in_degree, readout_size)
    largest = (0.5 - rounding_slack(architecture, in_degree, readout_size)) / widest
    return np.geomspace(GATE_SLACK, largest, _GRID_POINTS, endpoint=False)


def certified_deviation(architecture: str, gain: float, in_degree: int, readout_size: int) -> float | None:
    """The smallest grid ε* with ``L(G, ε*) ≤ ε*`` (the units then stay within ε* of 0/1 forever), or None."""
    _check_architecture(architecture)
    grid = _deviation_grid(architecture, in_degree, readout_size)
    certified = grid[leak(architecture, gain, grid, in_degree, readout_size) <= grid]
    return float(certified[0]) if len(certified) else None


def gain_bound(architecture: str, in_degree: int, readout_size: int) -> float:
    """The smallest certified gain (module docstring) for an ``"lstm"`` or ``"gru"`` with these widths."""
    _check_architecture(architecture)

    def certified(gain):
        return certified_deviation(architecture, gain, in_degree, readout_size) is not None

    low, high = 0.0, 1.0
    while not certified(high):
        low, high = high, 2.0 * high
    while high - low > 1e-6 * high:
        middle = 0.5 * (low + high)
        low, high = (low, middle) if certified(middle) else (middle, high)
    return high


def _check_architecture(architecture: str) -> None:
    if architecture not in ("lstm", "gru"):
        raise LsrlError(f"the gain bound is for 'lstm' and 'gru', got {architecture!r}")


def build(architecture: str, units: TransitionUnits, gain: float | None, dtype: torch.dtype) -> AutomatonNetwork:
    """The saturated LSTM or GRU of ``units``; ``gain`` defaults to ``gain_bound``."""
    if gain is None:
        gain = gain_bound(architecture, units.in_degree, units.readout_size)
    if not gain > 0:
        raise LsrlError(f"the gain of a saturated {architecture} must be positive, got {gain}")
    return (_lstm if architecture == "lstm" else _gru)(units, float(gain), dtype)


def _blocks(*blocks) -> np.ndarray:
    return np.concatenate([np.asarray(block, dtype=np.float64) for block in blocks], axis=0)


def _lstm(units: TransitionUnits, gain: float, dtype) -> AutomatonNetwork:
    m, k = units.size, units.n_symbols
    h_scale = float(torch.tanh(torch.tensor(1.0, dtype=dtype)))  # T = tanh(c) with c = 1
    zeros_in, zeros_h, zeros = np.zeros((m, k)), np.zeros((m, m)), np.zeros(m)
    core = set_weights(
        nn.LSTM(k, m, batch_first=True, dtype=dtype),
        weight_ih=_blocks(zeros_in, zeros_in, zeros_in, gain * units.input()),
        weight_hh=_blocks(zeros_h, zeros_h, zeros_h, gain / h_scale * units.recurrent()),
        bias_ih=_blocks(zeros, zeros, np.full(m, CELL_DRIVE), np.full(m, -1.5 * gain)),
        bias_hh=np.zeros(4 * m),
    )
    h0 = torch.as_tensor(h_scale * units.initial_on(), dtype=dtype)
    readout = half_threshold_readout(units, 1.0 / h_scale, 0.0, dtype)
    return AutomatonNetwork("lstm", core, readout, h0, c0=torch.ones(m, dtype=dtype), gain=gain)


def _gru(units: TransitionUnits, gain: float, dtype) -> AutomatonNetwork:
    m, k = units.size, units.n_symbols
    recurrent = units.recurrent()
    zeros_in, zeros_h, zeros = np.zeros((m, k)), np.zeros((m, m)), np.zeros(m)
    core = set_weights(
        nn.GRU(k, m, batch_first=True, dtype=dtype),
        weight_ih=_blocks(zeros_in, zeros_in, gain * units.input()),
        weight_hh=_blocks(zeros_h, zeros_h, gain * recurrent),
        bias_ih=_blocks(zeros, np.full(m, -2.0 * gain), np.full(m, -1.5 * gain)),
        bias_hh=_blocks(zeros, zeros, gain * recurrent.sum(axis=1)),
    )
    h0 = torch.as_tensor(2 * units.initial_on() - 1, dtype=dtype)
    readout = half_threshold_readout(units, 0.5, 0.5, dtype)
    return AutomatonNetwork("gru", core, readout, h0, gain=gain)
