"""Exact units: a compiled layer as identity units or threshold units, which hold its values exactly, so that no
error is carried through them (docs/stock.md, "Threshold units")."""

from __future__ import annotations

import math

import gmpy2
import numpy as np
import torch

from lsrl.kinds import Kind
from lsrl.errors import LsrlError
from lsrl.numbers import to_rational
from lsrl.targets.stock.bounds import BoundedWalk
from lsrl.targets.stock.cells import CellLayer
from lsrl.targets.stock.lattices import (
    CompiledLayer, affine_lattices, dyadic_grid, nonzero_weights, relu_gate, sums_exactly, threshold_plan, update_rows,
)
from lsrl.targets.stock.scales import EXACT_SATURATION, TANH_IDENTITY, power_ceil, power_floor

class ExactUnits(BoundedWalk):
    """The walk's exact units: a compiled layer as identity units or threshold units where its values' lattices
    and margins allow (docs/stock.md, "Threshold units"); each method returns False, building nothing, where they
    do not."""

    def exact_layer(self, index: int, layer: CompiledLayer, M_out: np.ndarray) -> bool:
        """Compiled layer ``index`` as exact units: identity units where they fit, else threshold units (module
        docstring); False (nothing built) where neither does."""
        if layer.kind is Kind.MULTI:
            return self.identity_product(index, layer) or self.threshold_product(index, layer)
        return self.identity_layer(index, layer, M_out) or self.threshold_layer(index, layer, M_out)

    def threshold_layer(self, index: int, layer: CompiledLayer, M_out: np.ndarray) -> bool:
        """Compiled layer ``index`` (a ``ReLU``, ``LinState`` or ``ReLUState``) as threshold units, when every
        component has a lattice and margins (docs/stock.md, "Threshold units"); False otherwise."""
        n = layer.dim
        inputs, own = self.lattices[index], self.lattices[index + 1]
        low, high = self.value_range(layer)
        if layer.kind is Kind.RELU:
            return self.threshold_units(layer, np.zeros((n, n)), self.W, self.c, np.zeros(n), True, inputs, low,
                                        high, M_out)
        A, B, b = layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy()
        s0 = layer.init_state.to_numpy()
        relu = layer.kind is Kind.RELUSTATE
        if relu:  # thresholds on the update y = A s + B x + b, before its relu; s0 must be a relu's value
            if np.any(s0 < 0):
                return False
            rows, bias = update_rows(layer)
            lattices = affine_lattices(rows, bias, own + inputs)
        else:  # the state's own values, s0 among them
            lattices = own
            low = [min(lo, to_rational(v)) for lo, v in zip(low, layer.init_state.values())]
            high = [max(hi, to_rational(v)) for hi, v in zip(high, layer.init_state.values())]
        return self.threshold_units(layer, A, B @ self.W, B @ self.c + b, s0, relu, lattices, low, high, M_out)

    def threshold_units(self, node: CompiledLayer, A: np.ndarray, W: np.ndarray, c: np.ndarray, s0: np.ndarray,
                        relu: bool, lattices: list, low: list, high: list, M: np.ndarray) -> bool:
        """``s_t = f(A s_{t-1} + W v_t + c)`` (``f`` relu or the identity; ``A = 0``: a memoryless layer) as
        threshold units, each ``[y > theta]`` for a threshold of ``threshold_plan``, read back exactly by the
        recurrence. False (nothing built) where a component has no lattice, too many thresholds, or a margin
        ``step / 2`` not above its input's error and rounding; ``LsrlError`` where ``gain`` leaves a gate short
        of ``EXACT_SATURATION``."""
        plans = [plan for lattice, lo, hi in zip(lattices, low, high)
                 if (plan := threshold_plan(lattice, lo, hi, relu)) is not None]
        if len(plans) < len(lattices):
            return False
        held = [offset + float(weights @ (value > thresholds)) for (offset, thresholds, weights), value in
                zip(plans, s0)]
        if not np.array_equal(held, s0):  # the initial state is no point of the thresholds' values
            return False
        Wd, c, magnitude, count, propagated = self.input_terms(W, c)
        n, sizes = len(plans), [len(thresholds) for _, thresholds, _ in plans]
        D_own, offset = np.zeros((n, sum(sizes))), np.array([plan[0] for plan in plans])
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        for j, (_, _, weights) in enumerate(plans):
            D_own[j, starts[j]:starts[j + 1]] = weights
        recurrent, bias = A @ D_own, c + A @ offset  # y = Wd h_in + recurrent h_own + bias
        widest = np.array([np.max(np.abs(bias[j] - thresholds), initial=0.0)
                           for j, (_, thresholds, _) in enumerate(plans)])
        terms = np.abs(Wd) @ self.payload.H + np.abs(recurrent).sum(axis=1) + widest
        count = count + np.count_nonzero(recurrent, axis=1)
        steps = np.array([float(lattice[1]) if size else math.inf for lattice, size in zip(lattices, sizes)])
        own_error = np.abs(recurrent).sum(axis=1) * self.flag_error  # its own flags read back
        margin = steps / 2 - propagated - own_error - self.rounding(terms * (1 + self.flag_error), count)
        if np.any(margin <= 0):
            return False
        K = self.threshold_gains(node, margin)
        layer = self.begin()
        for j, (_, thresholds, _) in enumerate(plans):
            hh = {u: K[j] * w for u, w in enumerate(recurrent[j]) if w}
            for theta in thresholds:
                layer.threshold_unit(K[j] * Wd[j], hh, K[j] * (bias[j] - theta), float(s0[j] > theta))
        layer.magnitudes.append((float(np.max(K * terms, initial=0.0)), node))
        self.finish_flags(layer, D_own, M, offset)
        return True

    def threshold_gains(self, node: CompiledLayer, margin: np.ndarray) -> np.ndarray:
        """Per component, ``K``: the smallest power of two with ``K margin >= EXACT_SATURATION`` (times ``gain``;
        1 where the margin is infinite: no units); ``LsrlError`` where ``gain`` leaves it short."""
        self.thresholded = True
        K, finite = np.ones(len(margin)), np.isfinite(margin)
        K[finite] = power_ceil(EXACT_SATURATION / margin[finite])
        K *= self.scales.gain
        short = np.flatnonzero(finite & (K * margin < EXACT_SATURATION))
        if len(short):
            j = int(short[0])
            raise LsrlError(f"{self.name}: gain={self.scales.gain:g} leaves the threshold units of {node.describe()} "
                            f"(component {j}) short of saturation: the gate's gain {K[j]:g} times the margin "
                            f"{margin[j]:.3g} is below {EXACT_SATURATION:g}; use gain >= 1")
        return K

    def threshold_product(self, index: int, node: CompiledLayer) -> bool:
        """``Multi`` as threshold units where, per component, one factor ``F`` takes only the values 0 and 1,
        and both factors are read exactly from threshold units (``F = f h + c_F``, ``G = g h + c_G``, ``h`` 0 or
        1): ``F G = c_G [F > 1/2] + sum_u g_u [h_u + F > 3/2]`` (``F h_u`` is an AND); margins 1/2. False
        (nothing built) otherwise."""
        Wd, c, _, count, propagated = self.input_terms(self.W, self.c)
        m, binary = node.dim, self.payload.binary
        exact = (propagated == 0) & ~np.any((Wd != 0) & ~binary[None, :], axis=1)
        pairs = self.flag_factors(index, node)
        if pairs is None or not all(exact[f] and exact[g] for f, g in pairs):
            return False
        rows, biases, thresholds, weights, owners = [], [], [], [], []
        for j, (f, g) in enumerate(pairs):
            units = [(None, c[g])] + [(u, Wd[g, u]) for u in np.flatnonzero(Wd[g])]
            for u, weight in units:
                row = Wd[f].copy()
                if u is not None:
                    row[u] += 1.0
                rows.append(row)
                biases.append(c[f])
                thresholds.append(0.5 if u is None else 1.5)
                weights.append(weight)
                owners.append(j)
        rows_, biases_, thresholds_ = np.array(rows), np.array(biases), np.array(thresholds)
        terms = np.abs(rows_) @ self.payload.H + np.abs(biases_ - thresholds_)
        margin = 0.5 - self.rounding(terms, np.count_nonzero(rows_, axis=1) + 1)
        if np.any(margin <= 0):
            return False
        K = self.threshold_gains(node, margin)
        layer = self.begin()
        D = np.zeros((m, len(rows)))
        for unit, (row, bias, theta, weight, j) in enumerate(zip(rows_, biases_, thresholds_, weights, owners)):
            layer.threshold_unit(K[unit] * row, {}, K[unit] * (bias - theta), 0.0)
            D[j, unit] = weight
        layer.magnitudes.append((float(np.max(K * terms, initial=0.0)), node))
        self.finish_flags(layer, D, self.source[1], np.zeros(m))
        return True

    def finish_flags(self, layer: CellLayer, D: np.ndarray, M: np.ndarray, offset: np.ndarray) -> None:
        """``finish`` a layer of threshold units: error 0, or where flags are within ``flag_error`` of 1
        (onnxruntime's GRU) ``|D| flag_error``, the flags then no exact units."""
        layer.thresholded = True
        if self.flag_error:
            layer.H = [1.0 + self.flag_error] * layer.units
            layer.grid = [0.0] * layer.units
        self.finish(layer, D, M, np.abs(D).sum(axis=1) * self.flag_error, offset)

    def flag_factors(self, index: int, node: CompiledLayer) -> list[tuple[int, int]] | None:
        """Per component of ``Multi`` ``index``, ``(f, g)``: the factor ``F`` (component ``f`` of its input) that takes
        only the values 0 and 1 (lattice in ``Z``, bounds in ``[0, 1]``) and the other; None where neither does."""
        m, lattices = node.dim, self.lattices[index]
        low, high = self.value_range(node.inputs[0])

        def exact_flag(k: int) -> bool:
            lattice = lattices[k]
            return (lattice is not None and lattice[0] == gmpy2.floor(lattice[0]) and lattice[1] in (0, 1)
                    and low[k] >= 0 and high[k] <= 1)

        pairs = []
        for j in range(m):
            flags = [(f, g) for f, g in ((j, m + j), (m + j, j)) if exact_flag(f)]
            if not flags:
                return None
            pairs.append(flags[0])
        return pairs

    def identity_layer(self, index: int, layer: CompiledLayer, M_out: np.ndarray) -> bool:
        """Compiled layer ``index`` (a ``ReLU``, ``LinState`` or ``ReLUState``) as identity units (docs/stock.md,
        "Identity units"), where its values lie on dyadic lattices and it reads exact units only; False otherwise."""
        n = layer.dim
        inputs, own = self.lattices[index], self.lattices[index + 1]
        if layer.kind is Kind.RELU:
            A, W, c, s0 = np.zeros((n, n)), self.W, self.c, np.zeros(n)
            lattices, M_pre = inputs, self.bounds(layer.inputs[0])
        else:
            A, B, b = layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy()
            W, c, s0 = B @ self.W, B @ self.c + b, layer.init_state.to_numpy()
            if layer.kind is Kind.RELUSTATE:  # the relu's input y = A s + B x + b
                rows, bias = update_rows(layer)
                lattices = affine_lattices(rows, bias, own + inputs)
                M_pre = np.abs(A) @ M_out + np.abs(B) @ self.bounds(layer.inputs[0]) + np.abs(b)
            else:
                lattices, M_pre = own, M_out
        relu = layer.kind is not Kind.LINSTATE
        gates = [relu_gate(lattice) if relu else None for lattice in lattices]
        return self.identity_units(layer, A, W, c, (W, c) if relu else None, gates, s0, lattices, M_pre, M_out)

    def identity_product(self, index: int, node: CompiledLayer) -> bool:
        """``Multi`` as identity units where, per component, one factor ``F`` takes only the values 0 and 1 and the
        other, ``G``, lies on a dyadic lattice, both read exactly: ``F G`` is ``G`` gated by ``[F > 1/2]``."""
        pairs = self.flag_factors(index, node)
        if pairs is None:
            return False
        f, g = (np.array(side) for side in zip(*pairs))
        m, lattices = node.dim, self.lattices[index]
        M_y = self.bounds(node.inputs[0])
        gates = [(0.5, 0.5)] * m  # threshold 1/2, margin 1/2
        return self.identity_units(node, np.zeros((m, m)), self.W[g], self.c[g], (self.W[f], self.c[f]), gates,
                                   np.zeros(m), [lattices[k] for k in g], M_y[g], self.source[1])

    def identity_units(self, node: CompiledLayer, A: np.ndarray, W: np.ndarray, c: np.ndarray,
                       gate: tuple[np.ndarray, np.ndarray] | None, gates: list, s0: np.ndarray, lattices: list,
                       M_pre: np.ndarray, M: np.ndarray) -> bool:
        """``s_t = [gate_t > theta] (A s_{t-1} + W v_t + c)`` (without ``gate``: ungated) as identity units: one per
        component (the GRU's gated ones a pair ``a, c``), ``h = eps s`` exactly, with ``eps`` the power of two that
        puts the pre-activation's bound ``M_pre`` within ``TANH_IDENTITY`` and the gate ``sigma(K (gate - theta))``
        exactly 0 or 1. False (nothing built) where a value's lattice is not dyadic, a sum is not exact
        (``sums_exactly``), a read value carries an error, or a gate's margin is not positive."""
        scales, lstm = self.scales, self.arch == "lstm"
        n, pairs = len(M), gate is not None and self.arch == "gru"
        if not self.identities:
            return False
        Wd, c, _, _, propagated = self.input_terms(W, c)
        grids = [dyadic_grid(lattice) for lattice in lattices]
        if propagated.any() or None in grids or (gate is not None and None in gates):
            return False
        eps = power_floor(TANH_IDENTITY[scales.dtype] / np.where(M_pre > 0, M_pre, 1.0))
        own_grid, H = eps * np.array(grids, dtype=float), eps * np.maximum(M_pre, np.abs(s0))
        # unit j holds component j (h = eps s); a GRU pair's partner n + j holds -what a latched (decoded a - c)
        units = np.arange(n)
        D_own = np.zeros((n, 2 * n if pairs else n))
        D_own[units, units] = 1.0 / eps
        if pairs:
            D_own[units, n + units] = -1.0 / eps
        unit_grid, unit_H = np.tile(own_grid, D_own.shape[1] // n), np.tile(H, D_own.shape[1] // n)
        recurrent = A @ D_own
        p = self.payload
        grid_all, H_all = np.concatenate([p.grid, unit_grid]), np.concatenate([p.H, unit_H])
        digits = 24 if scales.dtype == torch.float32 else 53
        value_rows = eps[:, None] * np.hstack([Wd, recurrent])
        held = eps * s0 / np.where(own_grid > 0, own_grid, 1.0)
        if not (sums_exactly(value_rows, eps * c, grid_all, H_all, scales.dtype).all()
                and np.all(2 * H <= 2.0 ** (digits - 1) * own_grid) and np.all(held == np.round(held))
                and np.all(own_grid >= float(torch.finfo(scales.dtype).tiny) / scales.u)
                and not (gate is not None and np.any(s0 < 0))):
            return False
        gated: tuple[np.ndarray, np.ndarray] | None = None  # the gate's rows over [input; own] and bias, times K
        if gate is not None:
            gate_Wd, gate_c, _, _, gate_error = self.input_terms(*gate)
            if gate_error.any():
                return False
            thetas, half_gaps = (np.array(side, dtype=float) for side in zip(*gates))
            gate_rows, gate_bias = np.hstack([gate_Wd, recurrent]), gate_c - thetas
            terms = np.abs(gate_rows) @ H_all + np.abs(gate_bias)
            margin = half_gaps - self.rounding(terms, np.count_nonzero(gate_rows, axis=1) + 1)
            if np.any(margin <= 0):
                return False
            K = self.threshold_gains(node, margin)
            gated = K[:, None] * gate_rows, K * gate_bias
        layer = self.begin()
        width = Wd.shape[1]
        for j in range(D_own.shape[1]):
            layer.new_unit(unit_H[j], unit_grid[j], EXACT_SATURATION)
        value = "g" if lstm else "n"
        for j in range(n):
            layer.gate(value, j, ih=value_rows[j, :width], bias=eps[j] * c[j],
                       hh=nonzero_weights(value_rows[j, width:]))
            if s0[j]:
                layer.h0[j] = eps[j] * s0[j]
            if gated is None:
                continue
            rows = dict(ih=gated[0][j, :width], bias=gated[1][j], hh=nonzero_weights(gated[0][j, width:]))
            if lstm:  # h = o tanh(tanh(eps y)), o = [gate > theta]
                layer.gate("o", j, **rows)
            else:  # a: 1 - z = [gate > theta], latched otherwise; c: r = z, n = tanh(r a_{t-1}): a - c = [.] eps y
                negated = dict(ih=-rows["ih"], bias=-rows["bias"], hh={k: -w for k, w in rows["hh"].items()})
                layer.gate("z", j, **negated)
                layer.gate("r", n + j, **negated)
                layer.gate("n", n + j, hh={j: 1.0})
        largest = np.abs(value_rows) @ H_all + np.abs(eps * c)
        if gated is not None:
            largest = np.maximum(largest, np.abs(gated[0]) @ H_all + np.abs(gated[1]))
        layer.magnitudes.append((float(np.max(largest, initial=0.0)), node))
        layer.thresholded = True
        self.finish(layer, D_own, M, np.zeros(n))
        return True

    def snap(self) -> None:
        """With thresholds, the outputs as threshold units where the readout would not be exact (a last
        ``Multi``, say): a memoryless layer of them, read by an exact readout (docs/stock.md)."""
        last: CompiledLayer = self.model.layers[-1] if self.model.layers else None
        if last is None:
            return
        Wd, bias, _, _, propagated = self.input_terms(self.W, self.c)
        if not propagated.any() and self.exact_sums(Wd, bias).all():
            return
        n = last.dim
        self.source = (len(self.model.layers) - 1, self.bounds(last))
        low, high = self.value_range(last)
        self.threshold_units(last, np.zeros((n, n)), self.W, self.c, np.zeros(n), False, self.lattices[-1], low,
                             high, self.source[1])
