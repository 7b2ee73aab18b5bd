"""What the stock construction carries from layer to layer (``BoundedWalk``): the payload the next layer reads, the
pending ``Linear`` layers, the value bounds at ``max_len`` and the error bounds, and the checks on them (docs/stock.md,
"Error bound")."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from lsrl.errors import LsrlError
from lsrl.lang import relational_bounds
from lsrl.targets.blocks import input_width
from lsrl.targets.stock.cells import CellLayer, Payload
from lsrl.targets.stock.lattices import CompiledLayer, sums_exactly, value_lattices
from lsrl.targets.stock.scales import DTYPES, MARGIN, ONNX_FLAG_ERROR, Scales, advice, gamma

if TYPE_CHECKING:
    from lsrl.model.compiled import CompiledProgram

class BoundedWalk:
    """The state of a walk over the compiled layers: the core's layers so far, the payload the next one reads
    (``Payload``: its decode, value bounds ``M`` and error bounds ``E``), the ``Linear`` layers since the last
    cell layer (``W``, ``c``), and the checks a refusal names the node by."""

    def __init__(self, arch: str, model: CompiledProgram, max_len: int, scales: Scales,
                 thresholds: bool = False) -> None:
        self.arch, self.model, self.max_len, self.scales = arch, model, max_len, scales
        self.name = f"stock_{arch}"
        self.layers: list[CellLayer] = []
        # with thresholds: per compiled layer (the input first) the value lattices, and whether a layer of
        # threshold units was attempted (a refusal then names its own reason)
        self.thresholds = thresholds
        self.lattices = value_lattices(model) if thresholds else []
        # onnxruntime's GRU flags: 0 or within ONNX_FLAG_ERROR of 1 (docs/stock.md, "onnxruntime")
        self.flag_error = ONNX_FLAG_ERROR if scales.runtime == "onnxruntime" and arch == "gru" else 0.0
        self.identities = scales.runtime == "torch"  # onnxruntime's tanh is no identity anywhere
        self.thresholded = False
        d_in = input_width(model)
        M_in = self.bounds(model.input)
        # an integer input is held exactly (h = x, whole numbers): grid 1
        self.payload = Payload(np.eye(d_in), M_in, np.zeros(d_in), M_in, np.zeros(d_in), np.zeros(d_in, dtype=bool),
                               np.full(d_in, 1.0 if model.input.integer else 0.0))
        self.W, self.c = np.eye(d_in), np.zeros(d_in)  # the Linear layers since the last cell layer
        # the compiled layer being built (index, value bound): the input at first
        self.source: tuple[int | None, np.ndarray] = (None, M_in)

    # ---- bounds and errors
    def bounds(self, node: CompiledLayer) -> np.ndarray:
        """``max |v|`` per component of ``node`` at ``max_len``; ``LsrlError`` naming it when infinite."""
        low, high = relational_bounds(node, max_length=self.max_len)
        infinite = [i for i, (lo, hi) in enumerate(zip(low, high)) if math.isinf(lo) or math.isinf(hi)]
        if infinite:
            raise LsrlError(
                f"{self.name}: {node.describe()} has no finite bound on sequences of max_len={self.max_len} steps "
                f"(component {infinite[0]}); declare bounds on the Input (Input(..., bounds=(lo, hi))), or give a "
                "smaller max_len: the construction scales every value by its bound")
        return np.array([max(abs(float(lo)), abs(float(hi))) for lo, hi in zip(low, high)])

    def input_terms(self, W: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, ...]:
        """For ``y = W v + c`` over the current payload: weights over ``h`` (``W D``), the bias (``c`` and
        ``W`` times the payload's offset), the magnitude of the terms, their count, and the propagated
        error ``|W| E``."""
        p = self.payload
        Wd, bias = W @ p.D, c + W @ p.offset
        magnitude = np.abs(Wd) @ p.H + np.abs(bias)
        count = np.count_nonzero(Wd, axis=1) + 1
        return Wd, bias, magnitude, count, np.abs(W) @ p.E

    def rounding(self, magnitude: np.ndarray, count: np.ndarray) -> np.ndarray:
        return gamma(count + 4, self.scales.u) * magnitude

    def check_margin(self, node: CompiledLayer, M: np.ndarray, E: np.ndarray) -> None:
        """The induction's hypothesis ``|v^| <= phi M``: ``E <= (phi - 1) M`` (docs/stock.md)."""
        bad = np.flatnonzero(E > (MARGIN - 1.0) * M)
        if len(bad):
            j = int(bad[0])
            raise LsrlError(
                f"{self.name}: the error bound of {node.describe()} (component {j}: {E[j]:.3g}) exceeds "
                f"1/16 of its value bound {M[j]:.3g} in {DTYPES[self.scales.dtype]}{self.steepest_growth()}; "
                f"{advice(self.scales.dtype, 'a smaller max_len')}")

    def steepest_growth(self) -> str:
        """Where the error bound grew most so far (a layer's largest error over its input's), for refusals."""
        errors = [float(np.max(layer.error, initial=0.0)) for layer in self.layers if layer.error is not None]
        growths = [(after / before, index) for index, (before, after) in enumerate(zip(errors, errors[1:]), 1)
                   if before > 0]
        if not growths:
            return ""
        growth, index = max(growths)
        source = self.layers[index].source
        node = self.model.layers[source] if source is not None else self.model.input
        return f" (its bound grows most at {node.describe()}: {growth:.3g} times its input's)"

    def check_scale(self, node: CompiledLayer, eps: np.ndarray) -> None:
        tiny = float(torch.finfo(self.scales.dtype).tiny) / self.scales.u
        if np.any(eps < tiny):
            raise LsrlError(f"{self.name}: the values of {node.describe()} are too large for "
                            f"{DTYPES[self.scales.dtype]} (bound {1 / eps.min():.3g} times the amplitude)")

    def begin(self) -> CellLayer:
        layer = CellLayer(self.arch, self.payload.D.shape[1])
        self.layers.append(layer)
        return layer

    def finish(self, layer: CellLayer, D: np.ndarray, M: np.ndarray, E: np.ndarray,
               offset: np.ndarray | None = None) -> None:
        offset = np.zeros(len(M)) if offset is None else offset
        self.payload = Payload(D, M, E, np.array(layer.H), offset, np.array(layer.binary, dtype=bool),
                               np.array(layer.grid))
        layer.source, layer.bound = self.source
        layer.decode, layer.error, layer.offset = D, E, offset
        self.W, self.c = np.eye(len(M)), np.zeros(len(M))

    def value_range(self, node: CompiledLayer) -> tuple[list, list]:
        """``(low, high)`` per component of ``node`` at ``max_len`` (rationals)."""
        low, high = relational_bounds(node, max_length=self.max_len)
        return list(low), list(high)

    def exact_sums(self, Wd: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """Per row of ``Wd h + bias`` over the current payload: whether its float sum is exact (``sums_exactly``)."""
        p = self.payload
        return sums_exactly(Wd, bias, p.grid, p.H, self.scales.dtype)
