"""What the stock construction builds: the units of one layer of the core (``CellLayer``: per gate, its rows and
biases) and what a layer's units hold (``Payload``), docs/stock.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lsrl.targets.stock.scales import EXACT_SATURATION, GATES, SATURATION, TANH_ONE

@dataclass
class Payload:
    """Values held by a layer's units: decoded ``v^ = D h + offset``; ``|v| <= M``, ``|v^ - v| <= E``,
    ``|h| <= H``; ``binary``: the units whose ``h`` is exactly 0 or 1 (threshold units); ``grid``: per unit, a power
    of two that its ``h`` is always a whole multiple of, exactly (1 for threshold units, ``eps`` times the lattice's
    for identity units), 0 where ``h`` is not exact."""

    D: np.ndarray
    M: np.ndarray
    E: np.ndarray
    H: np.ndarray
    offset: np.ndarray
    binary: np.ndarray
    grid: np.ndarray


@dataclass
class CellLayer:
    """One layer of the core being built: per gate, input / recurrent rows and biases, per unit."""

    arch: str
    width_in: int
    gate_rows: dict = field(default_factory=dict)  # (gate, unit) -> (ih row, {unit: weight}, bias, bias_hh)
    h0: dict = field(default_factory=dict)
    H: list = field(default_factory=list)  # |h| bound per unit
    c0: dict = field(default_factory=dict)  # an LSTM unit's initial cell (threshold units: TANH_ONE)
    binary: list = field(default_factory=list)  # per unit: a threshold unit (h exactly 0 or 1)
    grid: list = field(default_factory=list)  # per unit: h is a whole multiple of it, exactly (0: not exact)
    magnitudes: list = field(default_factory=list)  # (gate pre-activation bound, where) for the overflow check
    # set by Builder.finish: the index of the compiled layer it computes (None: the carried input); D, with
    # component j of that layer's output sum_u D[j, u] h_u; per component the value bound at max_len and the
    # bound E on the decoded value's error
    source: int | None = None
    decode: Any = None
    bound: Any = None
    error: Any = None
    offset: Any = None  # per component: the decoded value is decode @ h + offset
    thresholded: bool = False  # built of threshold units

    @property
    def units(self) -> int:
        return len(self.H)

    def new_unit(self, h_bound: float, grid: float = 0.0, saturation: float = SATURATION) -> int:
        """A unit with its constant gates saturated (LSTM i = 1, f = 0, o = 1; GRU r = 1, z = 0) at ``saturation``
        (an identity unit: ``EXACT_SATURATION``, exactly 0 and 1, and ``grid``, what its ``h`` is a multiple of)."""
        unit = len(self.H)
        self.H.append(float(h_bound))
        self.binary.append(False)
        self.grid.append(float(grid))
        constants = {"i": saturation, "f": -saturation, "o": saturation} if self.arch == "lstm" else {
            "r": saturation, "z": -saturation}
        for gate, bias in constants.items():
            self.gate(gate, unit, bias=bias)
        return unit

    def threshold_unit(self, ih: np.ndarray, hh: dict, bias: float, h0: float) -> int:
        """A unit whose ``h`` is exactly ``[ih x + hh h + bias > 0]`` when that pre-activation is at least
        ``EXACT_SATURATION`` away from 0 (docs/stock.md, "Threshold units"): LSTM ``i = 0``, ``f = 1``,
        ``c0 = TANH_ONE`` (so ``c = TANH_ONE`` and ``tanh(c) = 1`` at every step), ``o`` the threshold;
        GRU ``z = 0``, ``r`` the threshold, ``n = tanh(r TANH_ONE)`` (``bias_hh`` of ``n``)."""
        unit = len(self.H)
        self.H.append(1.0)
        self.binary.append(True)
        self.grid.append(1.0)
        if self.arch == "lstm":
            self.gate("i", unit, bias=-EXACT_SATURATION)
            self.gate("f", unit, bias=EXACT_SATURATION)
            self.gate("o", unit, ih=ih, hh=hh, bias=bias)
            self.c0[unit] = TANH_ONE
        else:
            self.gate("z", unit, bias=-EXACT_SATURATION)
            self.gate("r", unit, ih=ih, hh=hh, bias=bias)
            self.gate("n", unit, hh_bias=TANH_ONE)
        if h0:
            self.h0[unit] = h0
        return unit

    def gate(self, gate: str, unit: int, ih: np.ndarray | None = None, bias: float = 0.0,
             hh: dict | None = None, hh_bias: float = 0.0) -> None:
        """Set ``gate`` of ``unit``: input row ``ih``, bias, recurrent weights ``hh`` ({unit: weight}), and the
        recurrent bias ``hh_bias`` (0 but in a GRU threshold unit's ``n``, where ``r`` multiplies it)."""
        self.gate_rows[(gate, unit)] = (ih, dict(hh or {}), float(bias), float(hh_bias))

    def arrays(self, hidden: int, width_in: int) -> dict:
        """PyTorch's ``weight_ih`` (``width_in`` columns: the previous layer padded), ``weight_hh``,
        ``bias_ih``, ``bias_hh`` for ``hidden`` units, ``h0`` and ``c0``."""
        gates = GATES[self.arch]
        G = len(gates)
        w_ih, w_hh = np.zeros((G * hidden, width_in)), np.zeros((G * hidden, hidden))
        b_ih, b_hh, h0, c0 = np.zeros(G * hidden), np.zeros(G * hidden), np.zeros(hidden), np.zeros(hidden)
        for (gate, unit), (ih, hh, bias, hh_bias) in self.gate_rows.items():
            row = gates.index(gate) * hidden + unit
            if ih is not None:
                w_ih[row, :len(ih)] = ih
            for column, weight in hh.items():
                w_hh[row, column] += weight
            b_ih[row], b_hh[row] = bias, hh_bias
        for unit, value in self.h0.items():
            h0[unit] = value
        for unit, value in self.c0.items():
            c0[unit] = value
        return {"weight_ih": w_ih, "weight_hh": w_hh, "bias_ih": b_ih, "bias_hh": b_hh, "h0": h0, "c0": c0}
