"""The stock construction (docs/stock.md): ``Builder`` walks the compiled layers and builds one layer of the core
per non-``Linear`` layer, small-signal units (``Layers``, ``Error bound``) or exact units where those are refused
(``lsrl.targets.stock.exact_units``); ``build_stock_lstm`` / ``build_stock_gru`` check the result and build the
module."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lsrl.kinds import Kind
from lsrl.errors import InternalError, LsrlError, whole_number
from lsrl.lang import relational_bounds
from lsrl.targets.blocks import input_width
from lsrl.targets.stock.cells import CellLayer
from lsrl.targets.stock.exact_units import ExactUnits
from lsrl.targets.stock.lattices import CompiledLayer, value_lattices
from lsrl.targets.stock.module import StockRNNModel
from lsrl.targets.stock.plan import unit_plan
from lsrl.targets.stock.scales import (
    DTYPES, HEADROOM, MARGIN, RELU_KNEE, SATURATION, Scales, advice, checked_scales, power_sum,
)

if TYPE_CHECKING:
    from lsrl.model.compiled import CompiledProgram

class Builder(ExactUnits):
    """Walks the compiled layers, building one ``CellLayer`` per non-Linear layer and its error bound: exact units
    where ``thresholds`` asks for them and they fit, else small-signal units (docs/stock.md, "Layers")."""

    def walk(self) -> None:
        layer: CompiledLayer
        for index, layer in enumerate(self.model.layers):
            if layer.kind is Kind.LINEAR:
                A, b = layer.A.to_numpy(), layer.b.to_numpy()
                self.W, self.c = A @ self.W, A @ self.c + b
                continue
            M_out = self.bounds(layer)
            self.source = (index, M_out)
            if self.thresholds and self.exact_layer(index, layer, M_out):
                continue
            if layer.kind is Kind.LINSTATE:
                self.state(layer, M_out, relu=False)
            elif layer.kind is Kind.RELUSTATE:
                self.state(layer, M_out, relu=True)
            elif layer.kind is Kind.RELU:
                self.relu(layer, M_out)
            elif layer.kind is Kind.MULTI:
                self.product(layer, M_out)
            else:  # pragma: no cover - the compiler makes no other layer
                raise InternalError(f"{self.name}: a compiled path holds a {layer.kind} layer")
        if not self.layers:  # a program of Linear layers only: one layer of value units carries the input
            self.carry()

    def carry(self) -> None:
        """The input as a state ``s_t = x_t`` (``A = 0``), for a program without other layers."""
        n = len(self.payload.M)
        M, pending = self.payload.M, (self.W, self.c)
        self.state_units(self.model.input, np.zeros((n, n)), np.eye(n), np.zeros(n), np.zeros(n), M, False, M)
        self.W, self.c = pending  # the readout computes the Linear layers from the carried input

    def state(self, layer: CompiledLayer, M_out: np.ndarray, relu: bool) -> None:
        A, B, b = layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy()
        # the ReLU's input A s_{t-1} + B y_t + b, with y the layer's input
        M_w = np.abs(A) @ M_out + np.abs(B) @ self.bounds(layer.inputs[0]) + np.abs(b) if relu else M_out
        self.state_units(layer, A, B @ self.W, B @ self.c + b, layer.init_state.to_numpy(), M_out, relu, M_w)

    def state_units(self, node: CompiledLayer, A: np.ndarray, W: np.ndarray, c: np.ndarray, s0: np.ndarray,
                    M: np.ndarray, relu: bool, M_w: np.ndarray) -> None:
        """A (ReLU) state ``s_t = [ReLU](A s_{t-1} + W v_t + c)``, or with ``A = 0`` a ReLU / a carried value;
        ``M`` bounds ``|s|``, ``M_w`` the ReLU's input (``M`` without one)."""
        scales, lstm = self.scales, self.arch == "lstm"
        n = len(M)
        Wd, c, magnitude, count, propagated = self.input_terms(W, c)
        count = count + np.count_nonzero(A, axis=1)
        powers = np.abs(power_sum(np.abs(A) if relu else A, self.max_len))
        if not np.isfinite(powers).all():
            raise LsrlError(f"{self.name}: the errors of {node.describe()} grow beyond {DTYPES[scales.dtype]}'s range "
                            f"over max_len={self.max_len} steps (sum of |A|^k); "
                            f"{advice(scales.dtype, 'a smaller max_len')}")
        # errors that reach this layer whatever it does: the decoded values may exceed the bounds by them
        slack = 16.0 * powers @ (propagated + self.rounding(magnitude + np.abs(A) @ (MARGIN * M), count))
        M, M_w = M + slack, M_w + slack
        eps = scales.eps(np.maximum(M, M_w))
        self.check_scale(node, eps)
        K = scales.relu_gain(M_w)
        layer = self.begin()
        pairs = relu and not lstm
        h_bound = eps * MARGIN * np.maximum(M_w, M)
        units = [layer.new_unit(h_bound[j]) for j in range(n)]
        partners = [layer.new_unit(h_bound[j]) for j in range(n)] if pairs else []
        D_own = np.zeros((n, layer.units))  # the state decoded from this layer's h
        for j in range(n):
            D_own[j, units[j]] = 1.0 / eps[j]
            if pairs:
                D_own[j, partners[j]] = -1.0 / eps[j]
        recurrent = A @ D_own
        value_gate = "g" if lstm else "n"
        for j in range(n):
            hh = {k: eps[j] * recurrent[j, k] for k in np.flatnonzero(recurrent[j])}
            layer.gate(value_gate, units[j], ih=eps[j] * Wd[j], bias=eps[j] * c[j], hh=hh)
            if relu:
                decision = {k: -K[j] * recurrent[j, k] for k in np.flatnonzero(recurrent[j])}
                if lstm:  # o = sigma(K w)
                    layer.gate("o", units[j], ih=K[j] * Wd[j], bias=K[j] * c[j],
                               hh={k: -w for k, w in decision.items()})
                else:  # a: z = sigma(-K w); c: r = sigma(-K w) (identical rows), n = tanh(r a_{t-1})
                    layer.gate("z", units[j], ih=-K[j] * Wd[j], bias=-K[j] * c[j], hh=decision)
                    layer.gate("r", partners[j], ih=-K[j] * Wd[j], bias=-K[j] * c[j], hh=decision)
                    layer.gate("n", partners[j], hh={units[j]: 1.0})
            if s0[j]:
                layer.h0[units[j]] = eps[j] * s0[j]
        recurrent_magnitude = np.abs(A) @ (MARGIN * M)
        pre = magnitude + recurrent_magnitude
        layer.magnitudes.append((float(np.max(np.maximum(K if relu else 0.0, eps) * pre, initial=0.0)), node))
        u, psi = scales.u, scales.psi
        top = MARGIN * np.maximum(M_w, M)
        local = self.rounding(pre, count) + 4 * math.exp(-SATURATION) * (pre + top)
        if lstm:
            local += 2.0 / 3.0 * (eps * top) ** 2 * top + (2 * psi + 1 + (psi if relu else 0.0)) * u * top
        else:
            local += 1.0 / 3.0 * (eps * top) ** 2 * top + (psi + 2) * u * top
        if relu:
            local += np.minimum(RELU_KNEE / K, top / 2.0)
            if pairs:
                local += 1.0 / 3.0 * (eps * top) ** 2 * top + (2 * psi + 4) * u * top
        local += u * np.abs(s0)
        E = powers @ (propagated + local)
        if A.any():  # the recurrence reads |s^| <= phi M (M inflated): the induction's hypothesis
            self.check_margin(node, M, E)
        self.finish(layer, D_own, M, E)

    def relu(self, layer: CompiledLayer, M_out: np.ndarray) -> None:
        n = len(M_out)
        self.state_units(layer, np.zeros((n, n)), self.W, self.c, np.zeros(n), M_out, True,
                         self.bounds(layer.inputs[0]))

    def product(self, node: CompiledLayer, M_out: np.ndarray) -> None:
        """``Multi``: first half (Q, the gate) times second half (P, the small signal)."""
        scales, lstm = self.scales, self.arch == "lstm"
        m = node.dim
        M_y = self.bounds(node.inputs[0])
        Wd, c, magnitude, count, propagated = self.input_terms(self.W, self.c)
        e = self.rounding(magnitude, count) + propagated
        M_y = M_y + 16.0 * e  # the decoded factors may exceed their bounds by their errors
        M_Q, M_P, e_Q, e_P = M_y[:m], M_y[m:], e[:m], e[m:]
        eps, eta = scales.eps(M_P), scales.eta(M_Q)
        self.check_scale(node, eps)
        self.check_scale(node, eta)
        layer = self.begin()
        D = np.zeros((m, 0))
        decode = 2.0 / (eta * eps)
        columns = []
        for j in range(m):
            h_bound = eps[j] * MARGIN * M_P[j]
            q, p = j, m + j
            entries = []
            for sign in (1.0, -1.0):
                a = layer.new_unit(h_bound)
                value = "g" if lstm else "n"
                layer.gate(value, a, ih=eps[j] * Wd[p], bias=eps[j] * c[p])
                if lstm:  # o = sigma(±eta Q)
                    layer.gate("o", a, ih=sign * eta[j] * Wd[q], bias=sign * eta[j] * c[q])
                    entries.append((a, sign))
                else:  # 1 - z = sigma(±eta Q); the partner cancels z a_{t-1}
                    partner = layer.new_unit(h_bound)
                    layer.gate("z", a, ih=-sign * eta[j] * Wd[q], bias=-sign * eta[j] * c[q])
                    layer.gate("r", partner, ih=-sign * eta[j] * Wd[q], bias=-sign * eta[j] * c[q])
                    layer.gate("n", partner, hh={a: 1.0})
                    entries += [(a, sign), (partner, -sign)]
            columns.append(entries)
        D = np.zeros((m, layer.units))  # product j: sum of sign * decode_j * h over its units
        for j, entries in enumerate(columns):
            for unit, sign in entries:
                D[j, unit] = sign * decode[j]
        layer.magnitudes.append((float(np.max(np.concatenate([eps * magnitude[m:], eta * magnitude[:m]]))), node))
        u, psi = scales.u, scales.psi
        P, Q = MARGIN * M_P, MARGIN * M_Q
        E = MARGIN * (M_P * e_Q + M_Q * e_P)
        if lstm:
            E += P * Q * ((eta * Q) ** 2 / 12 + 2.0 / 3.0 * (eps * P) ** 2) + 2 * (3 * psi + 1) * u * P / eta
        else:
            E += (P * Q * ((eta * Q) ** 2 / 12 + 1.0 / 3.0 * (eps * P) ** 2) + 4.0 / 3.0 * (eps * P) ** 2 * P / eta
                  + 8 * (2 * psi + 4) * u * P / eta)
        E += 8 * math.exp(-SATURATION) * P * Q
        self.finish(layer, D, M_out, E)

    def readout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The readout's weights (over the last layer's ``h``, padded to the widest layer) and bias, and
        the output error bound."""
        Wd, bias, magnitude, count, propagated = self.input_terms(self.W, self.c)
        hidden = max(layer.units for layer in self.layers)
        weight = np.zeros((Wd.shape[0], hidden))
        weight[:, :Wd.shape[1]] = Wd
        rounding = np.where(self.exact_sums(Wd, bias), 0.0, self.rounding(magnitude, count))
        return weight, bias, propagated + rounding


def _check_informative(name: str, model: CompiledProgram, builder: Builder, tolerances: np.ndarray) -> None:
    """Refuse a module whose tolerance is as large as every output's own bound: it would say nothing."""
    last = model.layers[-1] if model.layers else model.input
    largest = float(np.max(builder.bounds(last), initial=0.0))
    if tolerances.size and float(np.max(tolerances)) >= max(largest, float(np.finfo(np.float64).tiny)):
        raise LsrlError(
            f"{name}: the error bound of the outputs ({float(np.max(tolerances)):.3g}) is as large as their value "
            f"bound ({largest:.3g}) in {DTYPES[builder.scales.dtype]} at max_len={builder.max_len}"
            f"{builder.steepest_growth()}: the outputs would carry nothing; "
            f"{advice(builder.scales.dtype, 'a smaller max_len or tighter Input bounds')}")


def _check_overflow(name: str, layers: list[CellLayer], readout: np.ndarray, dtype: torch.dtype) -> None:
    """Every weight and every pre-activation bound below ``finfo(dtype).max / HEADROOM``."""
    largest = float(torch.finfo(dtype).max) / HEADROOM
    for layer in layers:
        for bound, node in layer.magnitudes:
            if not bound <= largest:
                raise LsrlError(f"{name}: the gates reading {node.describe()} reach {bound:.3g}, beyond "
                                f"{DTYPES[dtype]}'s range; {advice(dtype, 'tighter Input bounds')}")
        for ih, hh, bias, hh_bias in layer.gate_rows.values():
            weights = [abs(bias), abs(hh_bias)] + [abs(w) for w in hh.values()] + (
                [float(np.max(np.abs(ih)))] if ih is not None and ih.size else [])
            if not max(weights) <= largest:
                raise LsrlError(f"{name}: a weight reaches {max(weights):.3g}, beyond {DTYPES[dtype]}'s range; "
                                f"{advice(dtype, 'tighter Input bounds')}")
    if readout.size and not np.max(np.abs(readout)) <= largest:
        raise LsrlError(f"{name}: a readout weight reaches {np.max(np.abs(readout)):.3g}, beyond {DTYPES[dtype]}'s "
                        f"range; {advice(dtype, 'tighter Input bounds')}")


def _build(arch: str, model: CompiledProgram, max_len: Any, dtype: Any, amplitude: float | None,
           gate_amplitude: float | None, gain: float, runtime: Any) -> StockRNNModel:
    name = f"stock_{arch}"
    if whole_number(max_len) is None or max_len < 1:
        raise LsrlError(f"{name}: max_len must be a positive integer (the longest sequence the module runs), "
                        f"got {max_len!r}; the scales come from the value bounds at that length")
    max_len = int(max_len)
    scales = checked_scales(dtype, amplitude, gate_amplitude, gain, name, runtime)
    relational_bounds(model.layers[-1] if model.layers else model.input, max_len)  # every layer's, in one run
    built: tuple | None = None
    refused = LsrlError(f"{name}: not built")  # replaced by the plain construction's refusal where it raises one
    try:
        built = _built(arch, model, max_len, scales, thresholds=False)
    except LsrlError as error:
        refused = error
    if built is None or not _decides(model, built[3]):  # threshold units where the lattices allow
        try:
            exact = _built(arch, model, max_len, scales, thresholds=True)
            if built is None or np.max(exact[3], initial=0.0) < np.max(built[3], initial=0.0):
                built = exact
        except _NoThresholds:
            pass
        except LsrlError:
            if built is None:
                raise
    if built is None:
        raise refused from None
    builder, weight, bias, tolerances = built
    plan = unit_plan(model, builder.layers, weight.shape[1], tolerances)
    return StockRNNModel(arch, input_width(model), builder.layers, weight, bias, tolerances, max_len, scales, plan)


def _decides(model: CompiledProgram, tolerances: np.ndarray) -> bool:
    """Whether ``tolerances`` prove every token decision: below half its lattice's step for every output whose
    values lie on a lattice (real-valued outputs have none, and nothing to decide)."""
    lattices = value_lattices(model)[-1]
    return all(lattice is None or not lattice[1] or tolerance < float(lattice[1]) / 2
               for lattice, tolerance in zip(lattices, tolerances))


class _NoThresholds(Exception):
    """The construction with threshold units failed where none could be built: the plain refusal stands."""


def _built(arch: str, model: CompiledProgram, max_len: int, scales: Scales, thresholds: bool
           ) -> tuple[Builder, np.ndarray, np.ndarray, np.ndarray]:
    """``(builder, readout weight, readout bias, tolerances)``, checked (overflow, an informative bound)."""
    builder = Builder(arch, model, max_len, scales, thresholds)
    try:
        builder.walk()
        if thresholds:
            builder.snap()
        weight, bias, tolerances = builder.readout()
        _check_overflow(f"stock_{arch}", builder.layers, weight, scales.dtype)
        _check_informative(f"stock_{arch}", model, builder, tolerances)
    except LsrlError:
        if thresholds and not builder.thresholded:
            raise _NoThresholds from None
        raise
    return builder, weight, bias, tolerances


def build_stock_lstm(model: CompiledProgram, max_len: int | None = None, dtype: torch.dtype = torch.float32,
                     amplitude: float | None = None, gate_amplitude: float | None = None,
                     gain: float = 1.0, runtime: str = "torch") -> StockRNNModel:
    """``model`` (a CompiledProgram) in one stock ``torch.nn.LSTM`` (docs/stock.md); ``max_len`` required.
    ``runtime="onnxruntime"`` (float32): ``net.tolerance`` holds in onnxruntime too (``export_stock_onnx``)."""
    return _build("lstm", model, max_len, dtype, amplitude, gate_amplitude, gain, runtime)


def build_stock_gru(model: CompiledProgram, max_len: int | None = None, dtype: torch.dtype = torch.float32,
                    amplitude: float | None = None, gate_amplitude: float | None = None,
                    gain: float = 1.0, runtime: str = "torch") -> StockRNNModel:
    """``model`` (a CompiledProgram) in one stock ``torch.nn.GRU`` (docs/stock.md); ``max_len`` required.
    ``runtime="onnxruntime"`` (float32): ``net.tolerance`` holds in onnxruntime too (``export_stock_onnx``)."""
    return _build("gru", model, max_len, dtype, amplitude, gate_amplitude, gain, runtime)
