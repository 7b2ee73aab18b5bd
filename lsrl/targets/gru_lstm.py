"""GRU (App. C) and LSTM (App. D) models for a compiled program: exact, the LSTM on every input.

Every ``Block`` of the ``BlockStack`` (one Gated Linear RNN layer, Eq. (4)) becomes

    1 state layer     s_t = A s_{t-1} + B x_t + b, carried as [s+; s-] (Eq. (11)), and x_t for gamma
    k MLP layers      layer i computes the i-th Dense of phi and of gamma side by side (C.2, D.2)
    1 product layer   gamma(x_t) * phi(s_t) (C.3, D.3), only when the block has a gate

so ``L_block = k + 2`` layers with ``k = max(len(phi), len(gamma))``; a block without gamma has no
product layer (``k + 1``). The shorter MLP's result is passed on unchanged through the remaining
MLP layers (Eq. (30)). A final ``torch.nn.Linear`` readout (float64) recombines the last layer's
sign-split units into the program's output.

Activations. As the paper assumes (App. C, D), every sigmoid and tanh of the cells is replaced by a
ReLU; the cells are otherwise PyTorch's, with its parameter names, shapes and gate orders
(``weight_ih_l{k}`` is ``(3H, in)`` with gates r, z, n for the GRU, ``(4H, in)`` with i, f, g, o for
the LSTM) and its equations::

    GRU   r = act(W_ir x + b_ir + W_hr h + b_hr)        LSTM  i = act(W_ii x + b_ii + W_hi h + b_hi)
          z = act(W_iz x + b_iz + W_hz h + b_hz)              f = act(W_if x + b_if + W_hf h + b_hf)
          n = act(W_in x + b_in + r * (W_hn h + b_hn))        g = act(W_ig x + b_ig + W_hg h + b_hg)
          h' = (1 - z) * n + z * h                            o = act(W_io x + b_io + W_ho h + b_ho)
                                                              c' = f * c + i * g,  h' = o * act(c')

Negative values. Layer outputs of these cells are non-negative (every gate is a ReLU), so a value
``v`` that may be negative is carried as ``[v+; v-] = [ReLU(v); ReLU(-v)]`` and recombined with
``[I, -I]`` inside the next layer's input weights (the trick of Eq. (11), used everywhere: the state,
gamma's input x_t, and phi / gamma outputs of a Dense without ReLU). This replaces the lower bound
``k_lb`` that Apps. C.1 and D.1 subtract from x_t: no bound on the inputs is needed. Values known to
be non-negative (ReLU outputs, a state with non-negative dynamics) are carried once.
A product of possibly negative ``P`` and ``Q`` is the signed sum of the non-negative products
``P+ Q+ - P+ Q- - P- Q+ + P- Q-``; a factor known to be non-negative has no minus part.

The product layer.
* LSTM (D.3): one unit per non-negative product: ``f = 0, i = ReLU(Q), g = ReLU(P), o = 1`` gives
  ``c = Q P`` and ``h = ReLU(c) = Q P`` exactly, for every value.
* GRU: App. C.3 as printed drops the ``(1 - z) h_{t-1}`` term, which is not zero. With ReLU gates
  a GRU unit's only product of two current inputs is ``(1 - z) * n``, and the unit always also
  carries ``z * h_{t-1}``. Since ``1 - z = 1 - ReLU(.) <= 1``, a product ``+Q P`` needs
  ``z = 1 - sigma Q >= 0``, i.e. a bound on ``Q``; the unbounded form ``z = 1 + Q`` (giving
  ``-Q P``) multiplies the carried state by ``1 + Q >= 1`` at every step, so the state grows
  geometrically and the cancellation loses all precision. We therefore build the product from
  three units, with ``sigma = 1 / gate_bound``:
      u: z = ReLU(1 - sigma Q), n = ReLU(P)          -> u_t = sigma Q P + (1 - sigma Q) u_{t-1}
      d: z = 0, r = 1,  n = ReLU(u_{t-1})             -> d_t = u_{t-1}
      m: z = 0, r = ReLU(Q), n = ReLU(r * u_{t-1})    -> m_t = Q u_{t-1}
  and ``Q P = (u_t - d_t) / sigma + m_t`` (read linearly by the next layer). ``u`` is a convex
  combination of past ``P`` values, so every unit stays bounded. This needs ``0 <= Q <= gate_bound``
  for the gate factor ``Q`` (gamma's output parts); the torch module checks it on every call and
  raises ``SequenceError`` otherwise (an exported ONNX graph outputs NaN there). ``gate_bound`` is rounded
  up to a power of two so that the scaling is exact; each doubling costs one bit of precision in the
  products (float64: 2^-42 relative at the default 1024).

Precision of the product (``p`` significand bits: 53 in float64, 24 in float32). ``sigma Q`` is exact
(a power-of-two scaling), but ``z = 1 - sigma Q`` is rounded to the spacing ``2^-p`` of numbers near
1, so ``1 - z = sigma Q + e`` with ``|e| <= 2^-p``; the next layer forms ``(u_t - d_t) / sigma``,
which multiplies ``e P`` (and the roundings of ``u``, at most ``|P|``-sized) by ``gate_bound``. A
product therefore errs by about ``c * gate_bound * 2^-p * max |P|`` with a small constant ``c``
(measured: ``0.5 * gate_bound * 2^-53`` for factors in [0, 1]: 5e-14 at 1024, 5e-5 at 1e12, 7e-3 at
1e14, and from ``gate_bound = 2^p`` on ``1 - sigma Q`` rounds to 1 for ``Q < 1``: products are 0).
``gate_bound`` must satisfy ``gate_bound * 2^-p <= 2^-12`` (the error budget of
``lsrl.targets.precision``), i.e. ``gate_bound <= 2^(p - 12)``: ``2^41 ~ 2.2e12`` in float64 and
``4096`` in float32 (``lsrl.targets.precision.gate_bound_range``). A larger one is refused with an
``LsrlError`` when the GRU is built (float64) and when it runs in a dtype whose range excludes it.

A ReLUState block's state layer is its update itself: ``relu_units`` with the state's ``A`` as
recurrent weights (GRU: ``z = 0, r = 1`` so ``h = n``; LSTM: ``f = 0, i = g = 1`` so ``h = o``).

Initial states are buffers ``h0_l{k}`` (and ``c0_l{k}`` for the LSTM), broadcast over the batch.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lsrl.ir.labels import (
    PATCHABLE_ROLES, Label, constant_for, copy_of, helper_for, negative_part, positive_part,
)
from lsrl.errors import LsrlError, SequenceError
from lsrl.targets.blocks import Block, BlockStack, Dense
from lsrl.targets.cache import CachedRun
from lsrl.targets.cell_steps import run_steps
from lsrl.targets.checks import checked_input
from lsrl.targets.hook_points import STEP_HOOKS, Layer, Recurrence
from lsrl.targets.promises import KeptPromises
from lsrl.targets.precision import ERROR_BUDGET, SIGNIFICAND_BITS, gate_bound_range

GATES = {"gru": ("r", "z", "n"), "lstm": ("i", "f", "g", "o")}
ACTIVATIONS = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}
DEFAULT_GATE_BOUND = 1024.0
Terms = list[tuple[int, float]]  # [(unit, coefficient)]: a value as a sum over a layer's units
Labels = Sequence[Label] | None  # per component (None: unlabelled)


# ---- the cells: PyTorch's equations, activations by name ---------------------------------------


class _CellStack(Recurrence, nn.Module):
    """Stacked cells with PyTorch's parameter layout; per-layer hidden sizes may differ. Layer ``k`` of the stack
    named ``name`` carries the hook ``{name}.l{k}``, its steps' gates (and an LSTM's cell) ``{name}.l{k}.{gate}``:
    its steps pass them through ``points(k)`` (``lsrl.targets.hook_points``)."""

    kind = ""
    records_steps = True

    def __init__(self, input_size: int, hidden_sizes: Sequence[int],
                 activations: tuple[str, str] = ("relu", "relu")) -> None:
        super().__init__()
        self.input_size = int(input_size)
        self.hidden_sizes = [int(h) for h in hidden_sizes]
        self.num_layers = len(self.hidden_sizes)
        if any(name not in ACTIVATIONS for name in activations):
            raise LsrlError(f"{self.kind}: activations must be among {tuple(ACTIVATIONS)}, got {activations}")
        self.activations = tuple(activations)  # (gates, candidate / cell output)
        gates = len(GATES[self.kind])
        width = self.input_size
        for k, hidden in enumerate(self.hidden_sizes):
            for name, shape in (
                (f"weight_ih_l{k}", (gates * hidden, width)),
                (f"weight_hh_l{k}", (gates * hidden, hidden)),
                (f"bias_ih_l{k}", (gates * hidden,)),
                (f"bias_hh_l{k}", (gates * hidden,)),
            ):
                self.register_parameter(name, nn.Parameter(torch.zeros(shape, dtype=torch.float64)))
            self.register_buffer(f"h0_l{k}", torch.zeros(hidden, dtype=torch.float64))
            if self.kind == "lstm":
                self.register_buffer(f"c0_l{k}", torch.zeros(hidden, dtype=torch.float64))
            width = hidden

    @property
    def output_size(self) -> int:
        return self.hidden_sizes[-1] if self.hidden_sizes else self.input_size

    def layer_tensors(self, k: int) -> dict:
        names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh", "h0"] + (["c0"] if self.kind == "lstm" else [])
        return {name: getattr(self, f"{name}_l{k}") for name in names}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, input_size) -> (B, T, hidden_sizes[-1])``."""
        for k in range(self.num_layers):
            x = self.layer(k, x)
        return x

    def layer(self, k: int, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def carried_states(self, name: str) -> dict[str, Layer]:
        return {f"{name}.l{k}": k for k in range(self.num_layers)}

    def step_hooks(self, layer: Layer) -> tuple[str, ...]:
        return STEP_HOOKS[self.kind]


class ReluGRU(_CellStack):
    """Stacked GRU layers: ``torch.nn.GRU``'s equations and parameters, with ReLU in place of both
    sigmoid (gates r, z) and tanh (candidate n). ``activation`` names it; ``activations`` can swap
    the functions back (e.g. ``("sigmoid", "tanh")``) to compare against ``torch.nn.GRU``."""

    kind = "gru"
    activation = "relu"  # replaces sigmoid (r, z) and tanh (n)

    def layer(self, k: int, x: torch.Tensor) -> torch.Tensor:
        gate, candidate = (ACTIVATIONS[name] for name in self.activations)
        w_ih, w_hh, b_ih, b_hh, h0 = (
            getattr(self, f"{n}_l{k}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "h0")
        )
        hidden = h0.shape[0]
        gi = F.linear(x, w_ih, b_ih)  # all time steps at once
        points = self.points(k)
        if not points and not torch.any(w_hh):  # no recurrent weights: r, z and W_hn h + b_hn are known for all t
            i_r, i_z, i_n = gi.split(hidden, dim=-1)
            h_r, h_z, h_n = b_hh.split(hidden)
            z = gate(i_z + h_z)
            if not torch.any(z):  # h' = (1 - 0) * n + 0 * h = n at every step
                return candidate(i_n + gate(i_r + h_r) * h_n)
        return run_steps("gru", points, gi, h0.expand(x.shape[0], hidden), None, w_hh, b_hh, gate, candidate)[0]


class ReluLSTM(_CellStack):
    """Stacked LSTM layers: ``torch.nn.LSTM``'s equations and parameters (gates i, f, g, o), with
    ReLU in place of sigmoid (i, f, o) and of both tanh (g and the cell output)."""

    kind = "lstm"
    activation = "relu"  # replaces sigmoid (i, f, o) and tanh (g, cell output)

    def layer(self, k: int, x: torch.Tensor) -> torch.Tensor:
        gate, candidate = (ACTIVATIONS[name] for name in self.activations)
        w_ih, w_hh, b_ih, b_hh, h0, c0 = (
            getattr(self, f"{n}_l{k}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "h0", "c0")
        )
        hidden = h0.shape[0]
        gi = F.linear(x, w_ih, b_ih)
        points = self.points(k)
        if not points and not torch.any(w_hh):  # gates known for all t
            i, f, g, o = (gi + b_hh).split(hidden, dim=-1)
            f = gate(f)
            if not torch.any(f):  # c' = 0 * c + i * g at every step
                return gate(o) * candidate(gate(i) * candidate(g))
        h, c = h0.expand(x.shape[0], hidden), c0.expand(x.shape[0], hidden)
        return run_steps("lstm", points, gi, h, c, w_hh, b_hh, gate, candidate)[0]


class CellModel(KeptPromises, CachedRun, nn.Module):
    """A compiled program as stacked ReLU GRU / LSTM layers (``.rnn``) and a linear ``.readout``.

    ``(B, T, d_in) -> (B, T, d_out)``, float64. ``roles[k]`` says what layer ``k`` does:
    ``(block, "state" | "mlp" | "product")``.
    """

    activation = "relu"  # in place of sigmoid and tanh, as in Apps. C and D

    def __init__(self, arch: str, input_size: int, layers: list, readout_weight: np.ndarray, readout_bias: np.ndarray,
                 gate_bound: float | None = None, output_labels: Labels = None) -> None:
        super().__init__()
        self.architecture = arch
        self.d_in = input_size
        self.rnn = (ReluGRU if arch == "gru" else ReluLSTM)(input_size, [layer.hidden for layer in layers])
        self.roles = [(layer.block, layer.role) for layer in layers]
        self.gate_bound = gate_bound
        with torch.no_grad():
            for k, layer in enumerate(layers):
                for name, array in layer.arrays.items():
                    getattr(self.rnn, f"{name}_l{k}").copy_(torch.as_tensor(array))
        self.gate_columns = {}  # layer -> input columns that drive a GRU z gate (must stay <= gate_bound)
        self.gate_names = {k: layer.gate_name for k, layer in enumerate(layers) if layer.gate_columns}
        for k, layer in enumerate(layers):
            if layer.gate_columns:
                self.register_buffer(f"gate_columns_l{k}", torch.as_tensor(sorted(set(layer.gate_columns))))
                self.gate_columns[k] = f"gate_columns_l{k}"
        d_out, width = readout_weight.shape
        self.readout = nn.Linear(width, d_out, dtype=torch.float64)
        with torch.no_grad():
            self.readout.weight.copy_(torch.as_tensor(readout_weight))
            self.readout.bias.copy_(torch.as_tensor(readout_bias))
        self.labels = _cell_labels(layers, output_labels)
        self.unpatchable = {node: why for layer in layers for node, why in (layer.unpatchable or {}).items()}
        # a unit labelled with a ReLU node also holds ReLU of its input node, which has no unit (lsrl.targets.patch)
        self.patch_aliases = {f"rnn.l{k}": layer.aliases for k, layer in enumerate(layers) if layer.aliases}

    def forward(self, x: torch.Tensor, check_bounds: bool = True) -> torch.Tensor:
        x = checked_input(self, x, check_bounds)
        if self.gate_bound is not None:
            checked_gate_bound(self.gate_bound, str(x.dtype).removeprefix("torch."))
        for k in range(self.rnn.num_layers):
            if k in self.gate_columns and self.gate_bound is not None:  # a GRU's product layer
                self._check_gates(k, x, self.gate_bound)
            x = self.rnn.layer(k, x)
        return self.readout(x)

    def require_dtype(self, dtype: str) -> None:
        """A GRU's ``gate_bound`` must lie in ``dtype``'s range (``checked_gate_bound``)."""
        if self.gate_bound is not None:
            checked_gate_bound(self.gate_bound, dtype)

    def _check_gates(self, k: int, x: torch.Tensor, gate_bound: float) -> None:
        factors = x[..., getattr(self, self.gate_columns[k])]
        if factors.numel() and torch.max(factors) > gate_bound:
            block, _ = self.roles[k]
            source = f"Multi '{self.gate_names[k]}'" if self.gate_names.get(k) else f"block {block}"
            raise SequenceError(
                f"GRU product layer {k} ({source}): a gate factor reached {torch.max(factors).item():g}, "
                f"above gate_bound={gate_bound:g}; build the GRU with a larger gate_bound"
            )


# ---- construction ---------------------------------------------------------------------------


def _cell_labels(layers: list[_Layer], output_labels: Labels) -> dict | None:
    """``net.labels`` of a ``CellModel``: ``rnn.l{k}`` (layer k's h), its gates after their activation
    and the LSTM cell (``rnn.l{k}.r`` / ``.z`` / ``.n``, ``rnn.l{k}.i`` / ``.f`` / ``.g`` / ``.o`` / ``.c``)
    and ``readout`` (the keys of ``run_with_cache``)."""
    if output_labels is None:
        return None
    labels: dict[str, Labels] = {}
    for k, layer in enumerate(layers):
        labels[f"rnn.l{k}"] = layer.labels
        for gate, gate_labels in (layer.gate_labels or {}).items():  # every layer's, in a labelled model
            labels[f"rnn.l{k}.{gate}"] = gate_labels
    labels["readout"] = output_labels
    return labels


@dataclass
class _Value:
    """A vector ``v = R a + c`` over the previous layer's output ``a`` (non-negative unless raw input),
    its components labelled ``labels`` (None: unlabelled)."""

    R: np.ndarray
    c: np.ndarray
    hidden: bool  # a is a layer output (>= 0); False for the model input
    labels: Labels = None

    @property
    def dim(self) -> int:
        return self.R.shape[0]

    @property
    def nonnegative(self) -> bool:
        return self.hidden and bool(np.all(self.R >= 0)) and bool(np.all(self.c >= 0))

    def terms(self, j: int) -> Terms:
        """Component ``j`` as ``[(column, coefficient)]``; needs ``c[j] == 0``."""
        assert self.c[j] == 0 and self.hidden
        return [(int(col), float(self.R[j, col])) for col in np.flatnonzero(self.R[j])]


@dataclass
class _Layer:
    hidden: int
    arrays: dict
    block: int
    role: str
    gate_columns: list
    gate_name: str | None = None
    labels: list | None = None  # per unit of h
    gate_labels: dict | None = None  # gate (and "c") -> per unit, after its activation
    unpatchable: dict | None = None  # program node -> why no unit of this layer holds it (lsrl.targets.patch)
    aliases: dict | None = None  # unit -> a second label it holds (lsrl.targets.patch)


class _LayerBuilder:
    """Collects units of one layer as sparse entries; outputs refer to units by index."""

    def __init__(self, arch: str, d_in: int, block: int, role: str, sigma: float | None = None,
                 below: Labels = None) -> None:
        self.arch, self.d_in, self.block, self.role, self.sigma = arch, d_in, block, role, sigma
        self.count = 0
        self.below = below  # labels of the layer's input units (None: unlabelled)
        self.labels: list[Label] = []  # per unit
        self.products: set[int] = set()  # the units made by product()
        self.unpatchable: dict[str, str] = {}  # program nodes whose products no unit holds (lsrl.targets.patch)
        self.aliases: dict[int, Label] = {}  # unit -> ReLU of what its gate computes, where labelled otherwise
        self.ih: list[tuple[str, int, int, float]] = []  # (gate, unit, input column, weight)
        self.hh: list[tuple[str, int, int, float]] = []  # (gate, unit, recurrent column, weight)
        self.bias: list[tuple[str, int, float]] = []  # (gate, unit, bias)
        self.h0: dict[int, float] = {}
        self.gate_columns: list[int] = []
        self.value_gate = "n" if arch == "gru" else "o"

    def _new(self, n: int, labels: Labels = None) -> list[int]:
        start = self.count
        self.count += n
        self.labels += list(labels) if labels is not None else [None] * n
        return list(range(start, start + n))

    def relu_units(self, W: np.ndarray, beta: np.ndarray, U: np.ndarray | None = None, h0: np.ndarray | None = None,
                   labels: Labels = None) -> list[int]:
        """Units ``h_t = ReLU(W a_t + beta + U h_{t-1})`` (``U`` among the new units), labelled
        ``labels``. C.1/C.2, D.1/D.2."""
        units = self._new(W.shape[0], labels)
        for i, j in zip(*np.nonzero(W)):
            self.ih.append((self.value_gate, units[i], int(j), W[i, j]))
        for i in np.flatnonzero(beta):
            self.bias.append((self.value_gate, units[i], beta[i]))
        if U is not None:
            for i, j in zip(*np.nonzero(U)):
                self.hh.append((self.value_gate, units[i], units[j], U[i, j]))
        for unit, row in zip(units, range(W.shape[0])):
            if self.arch == "gru":  # z = 0 (h' = n); r = 1 where the unit reads its past
                if U is not None and np.any(U[row]):
                    self.bias.append(("r", unit, 1.0))
            else:  # f = 0, i = g = 1: c = 1, h = o
                self.bias.append(("i", unit, 1.0))
                self.bias.append(("g", unit, 1.0))
        if h0 is not None:
            for unit, value in zip(units, h0):
                if value:
                    self.h0[unit] = value
        return units

    def product(self, p_col: int, q_col: int, label: Label = None, whole: bool = False) -> Terms:
        """``[(unit, coefficient)]`` whose sum is ``a[p_col] * a[q_col]`` (both inputs >= 0), for the
        product labelled ``label`` (``whole``: this product is all of it, not one of its terms)."""
        if label is not None and label.role in PATCHABLE_ROLES and (self.arch == "gru" or not whole):
            self.unpatchable[label.node] = (
                f"no unit of the {self.arch.upper()} holds component {label.index}: the product is the signed sum of "
                + ("three units ((u - d) / sigma + m, u a running convex combination of past factors) that the "
                   "next layer reads" if self.arch == "gru" else "the products of the factors' sign parts "
                   "(P+ Q+ - P+ Q- - ...), one unit each, that the next layer reads")
                + ", so no labelled unit can be set to it")
        if self.arch == "lstm":  # D.3: f = 0, i = Q, g = P, o = 1
            (u,) = self._new(1, [label if whole else helper_for(label)])
            self.products.add(u)
            self.ih += [("i", u, q_col, 1.0), ("g", u, p_col, 1.0)]
            self.bias.append(("o", u, 1.0))
            return [(u, 1.0)]
        sigma = self.sigma
        assert sigma is not None  # a GRU's builder has its gate scale
        u, d, m = self._new(3, [helper_for(label)] * 3)  # u, d, m hold no function of the product alone
        self.products.update((u, d, m))
        self.ih += [("z", u, q_col, -sigma), ("n", u, p_col, 1.0), ("r", m, q_col, 1.0)]
        self.bias += [("z", u, 1.0), ("r", d, 1.0)]
        self.hh += [("n", d, u, 1.0), ("n", m, u, 1.0)]
        self.gate_columns.append(q_col)
        return [(u, 1.0 / sigma), (d, -1.0 / sigma), (m, 1.0)]

    def finish(self) -> _Layer:
        H, gates = self.count, GATES[self.arch]
        G = len(gates)
        arrays = {
            "weight_ih": np.zeros((G * H, self.d_in)),
            "weight_hh": np.zeros((G * H, H)),
            "bias_ih": np.zeros(G * H),
            "bias_hh": np.zeros(G * H),
            "h0": np.zeros(H),
        }
        if self.arch == "lstm":
            arrays["c0"] = np.zeros(H)
        for gate, unit, col, value in self.ih:
            arrays["weight_ih"][gates.index(gate) * H + unit, col] += value
        for gate, unit, col, value in self.hh:
            arrays["weight_hh"][gates.index(gate) * H + unit, col] += value
        for gate, unit, value in self.bias:
            arrays["bias_ih"][gates.index(gate) * H + unit] += value
        for unit, value in self.h0.items():
            arrays["h0"][unit] = value
        gate_labels = self._gate_labels(self.below) if self.below is not None else None
        return _Layer(H, arrays, self.block, self.role, self.gate_columns, labels=self.labels, gate_labels=gate_labels,
                      unpatchable=self.unpatchable, aliases=self.aliases)

    def _gate_labels(self, below: Sequence[Label]) -> dict:
        """Per gate (and the LSTM cell ``c``), the label of every unit's gate value, read off the
        entries: a gate with no input is a constant, one that reads one input unit with weight 1
        is ``ReLU`` of it, the value gate of a unit made by ``relu_units`` is the unit itself;
        any other gate is a helper of what its unit serves."""
        inputs: dict[tuple[str, int], list[tuple[int, float]]] = {}  # (gate, unit) -> its input entries
        for gate, unit, col, value in self.ih:
            inputs.setdefault((gate, unit), []).append((col, value))
        recurrent = {(gate, unit) for gate, unit, _, _ in self.hh}
        others = recurrent | {(gate, unit) for gate, unit, _ in self.bias}  # read h or a bias

        def label(gate: str, unit: int) -> Label:
            own, read = self.labels[unit], inputs.get((gate, unit), [])
            if gate == self.value_gate and unit not in self.products:
                return own
            if not read and (gate, unit) not in recurrent:
                return constant_for(own)
            if len(read) == 1 and read[0][1] == 1.0 and (gate, unit) not in others:
                return positive_part(below[read[0][0]])
            return helper_for(own)

        labels = {gate: [label(gate, unit) for unit in range(self.count)] for gate in GATES[self.arch]}
        if self.arch == "lstm":  # c = 1 for a value unit (i = g = 1, f = 0), c = i g = h for a product
            labels["c"] = [own if unit in self.products else constant_for(own) for unit, own in enumerate(self.labels)]
        return labels


def _value(builder_terms: list[Terms], width: int, labels: Labels = None) -> _Value:
    """The ``_Value`` of rows given as ``[(unit, coefficient)]`` lists over a layer of ``width`` units."""
    R = np.zeros((len(builder_terms), width))
    for j, terms in enumerate(builder_terms):
        for unit, coef in terms:
            R[j, unit] += coef
    return _Value(R, np.zeros(len(builder_terms)), True, labels)


def _mapped(function: Callable[[Label], Label], labels: Labels) -> list[Label] | None:
    return None if labels is None else [function(label) for label in labels]


def _emit(builder: _LayerBuilder, W: np.ndarray, beta: np.ndarray, nonnegative: bool, relu: bool = False,
          labels: Labels = None, relu_labels: Labels = None) -> list[Terms]:
    """Units holding ``ReLU(W a + beta)`` if ``relu`` else ``W a + beta`` (split unless non-negative);
    ``labels``: of ``W a + beta``'s rows, ``relu_labels``: of their ReLU (default: read off ``labels``)."""
    if relu:
        units = builder.relu_units(W, beta, labels=relu_labels or _mapped(positive_part, labels))
        if relu_labels and labels:  # W a + beta is computed inside the unit's gate, not held by a unit
            builder.aliases.update((unit, positive_part(label)) for unit, label in zip(units, labels))
        return [[(u, 1.0)] for u in units]
    if nonnegative:
        return [[(u, 1.0)] for u in builder.relu_units(W, beta, labels=labels)]
    plus = builder.relu_units(W, beta, labels=_mapped(positive_part, labels))
    minus = builder.relu_units(-W, -beta, labels=_mapped(negative_part, labels))
    return [[(p, 1.0), (q, -1.0)] for p, q in zip(plus, minus)]


def _carry(builder: _LayerBuilder, value: _Value) -> list[Terms]:
    return _emit(builder, value.R, value.c, value.nonnegative, labels=_mapped(copy_of, value.labels))


def _dense(builder: _LayerBuilder, dense: Dense, value: _Value) -> list[Terms]:
    W = dense.W @ value.R
    beta = dense.W @ value.c + dense.c
    nonnegative = value.hidden and bool(np.all(W >= 0)) and bool(np.all(beta >= 0))
    return _emit(builder, W, beta, nonnegative, relu=dense.relu, labels=dense.labels, relu_labels=dense.relu_labels)


def _state_layer(builder: _LayerBuilder, block: Block, x: _Value) -> list[Terms]:
    """C.1 / D.1 with the split of Eq. (11): ``[s+; s-] = ReLU(±(A (s+ - s-) + B x + b))``."""
    A, s0 = block.A, block.s0
    W = block.B @ x.R
    beta = block.B @ x.c + block.b
    d, labels = block.d_state, block.state_labels
    if block.relu_state is not None:  # a ReLUState: the ReLU units' own step (z = 0 / f = 0), no split
        return [[(u, 1.0)] for u in builder.relu_units(W, beta, U=A, h0=s0, labels=labels)]
    if x.hidden and all(np.all(m >= 0) for m in (A, W, beta, s0)):  # s_t >= 0 for every input
        return [[(u, 1.0)] for u in builder.relu_units(W, beta, U=A, h0=s0, labels=labels)]
    split = None if labels is None else [positive_part(label) for label in labels] + [
        negative_part(label) for label in labels]
    units = builder.relu_units(
        np.vstack([W, -W]), np.concatenate([beta, -beta]), U=np.block([[A, -A], [-A, A]]),
        h0=np.concatenate([np.maximum(s0, 0), np.maximum(-s0, 0)]), labels=split,
    )
    return [[(units[i], 1.0), (units[d + i], -1.0)] for i in range(d)]


def _block_layers(arch: str, index: int, block: Block, x: _Value, sigma: float | None
                  ) -> tuple[list[_Layer], _Value]:
    """The ``k + 2`` (gated) or ``k + 1`` layers of one block, and the block's output value."""
    layers: list[_Layer] = []

    def finish(builder: _LayerBuilder, outputs: list[list[Terms]], labels: Sequence[Labels]) -> list[_Value]:
        layer = builder.finish()
        layers.append(layer)
        return [_value(rows, layer.hidden, value_labels) for rows, value_labels in zip(outputs, labels)]

    def new_builder(role: str, width: int) -> _LayerBuilder:
        return _LayerBuilder(arch, width, index, role, sigma, layers[-1].labels if layers else x.labels)

    builder = new_builder("state", x.R.shape[1])
    outputs, labels = [_state_layer(builder, block, x)], [block.state_labels]
    if block.gamma is not None:
        outputs.append(_carry(builder, x))
        labels.append(_mapped(copy_of, x.labels))
    values = finish(builder, outputs, labels)  # [s] or [s, x]
    branches = [block.phi] + ([block.gamma] if block.gamma is not None else [])
    for depth in range(max(len(branch) for branch in branches)):
        builder = new_builder("mlp", layers[-1].hidden)
        outputs = [
            _dense(builder, branch[depth], value) if depth < len(branch) else _carry(builder, value)
            for branch, value in zip(branches, values)
        ]
        labels = [
            branch[depth].out_labels if depth < len(branch) else _mapped(copy_of, value.labels)
            for branch, value in zip(branches, values)
        ]
        values = finish(builder, outputs, labels)
    if block.gamma is None:
        return layers, values[0]
    phi, gamma = values
    builder = new_builder("product", layers[-1].hidden)
    rows, gate_labels = [], block.gate_labels or [None] * phi.dim
    for j in range(phi.dim):
        row, p_terms, q_terms = [], phi.terms(j), gamma.terms(j)
        whole = _single(p_terms) and _single(q_terms)  # one product unit, equal to gamma_j * phi_j
        for p_col, p_coef in p_terms:
            for q_col, q_coef in q_terms:
                row += [(u, p_coef * q_coef * c) for u, c in builder.product(p_col, q_col, gate_labels[j], whole)]
        rows.append(row)
    (out,) = finish(builder, [rows], [block.gate_labels])
    layers[-1].gate_name = block.gate_name
    return layers, out


def _single(terms: Terms) -> bool:
    """Whether a value's ``terms`` are one unit with coefficient 1."""
    return len(terms) == 1 and terms[0][1] == 1.0


def checked_gate_bound(gate_bound: object, dtype: str = "float64") -> float:
    """``gate_bound`` rounded up to a power of two, or an ``LsrlError`` naming it, ``dtype`` and the range
    ``lsrl.targets.precision.gate_bound_range(dtype)`` where its products keep their precision (module
    docstring: a product errs by about ``gate_bound * 2^-p`` times its factor)."""
    if isinstance(gate_bound, bool) or not isinstance(gate_bound, numbers.Real):
        raise LsrlError(f"gru: gate_bound must be a positive real number, got {type(gate_bound).__name__} "
                        f"{gate_bound!r}")
    if dtype not in SIGNIFICAND_BITS:
        raise LsrlError(f"gru: no GRU product layer in dtype {dtype!r} (known: {', '.join(SIGNIFICAND_BITS)})")
    low, high = gate_bound_range(dtype)
    try:
        value = float(gate_bound)
    except OverflowError:  # an int beyond float64: outside the range below
        value = math.inf
    if not low <= value <= high:  # NaN included
        raise LsrlError(
            f"gru: gate_bound={gate_bound!r} is outside [{low:.3g}, {high:.6g}] = [2^{math.log2(low):.0f}, "
            f"2^{math.log2(high):.0f}], where {dtype} keeps the GRU's products within {ERROR_BUDGET:.3g} of the exact "
            f"ones (a product errs by about gate_bound * 2^-{SIGNIFICAND_BITS[dtype]} times its factor)"
            + ("; run the GRU in float64 or use the LSTM, which needs no gate_bound" if dtype != "float64" else "")
        )
    return 2.0 ** math.ceil(math.log2(value))


def _build(stack: BlockStack, arch: str, gate_bound: float | None = None) -> CellModel:
    sigma = None
    if arch == "gru":
        gate_bound = checked_gate_bound(DEFAULT_GATE_BOUND if gate_bound is None else gate_bound)
        sigma = 1.0 / gate_bound
    elif gate_bound is not None:
        raise LsrlError("lstm: gate_bound is a GRU option (the LSTM multiplies exactly without one)")
    value = _Value(np.eye(stack.d_in), np.zeros(stack.d_in), hidden=False, labels=stack.input_labels)
    layers = []
    for index, block in enumerate(stack.blocks):
        if block.d_in != value.dim:
            raise LsrlError(f"{arch}: block {index} reads {block.d_in} values, the previous block gives {value.dim}")
        block_layers, value = _block_layers(arch, index, block, value, sigma)
        layers += block_layers
    return CellModel(arch, stack.d_in, layers, value.R, value.c, gate_bound if arch == "gru" else None, value.labels)


def build_gru(stack: BlockStack, gate_bound: float | None = None) -> CellModel:
    """A ``BlockStack`` as ReLU-GRU layers (App. C with the exact product layer described above).

    ``gate_bound`` (default 1024, rounded up to a power of two) bounds gamma's outputs: every gate
    factor must stay in ``[-gate_bound, gate_bound]``. It must lie in
    ``lsrl.targets.precision.gate_bound_range("float64")`` (at most 2^41; module docstring).
    """
    return _build(stack, "gru", gate_bound)


def build_lstm(stack: BlockStack) -> CellModel:
    """A ``BlockStack`` as ReLU-LSTM layers (App. D); exact for every input, no bounds."""
    return _build(stack, "lstm")


def layer_report(module: CellModel) -> list:
    """One row per layer: ``layer, kind, hidden, nonzeros`` (weights, biases, initial states), plus
    ``block`` and ``role``; the readout is a last row with ``kind="readout"`` and the last layer's index."""
    rows = []
    for k, hidden in enumerate(module.rnn.hidden_sizes):
        nonzeros = sum(int(torch.count_nonzero(t)) for t in module.rnn.layer_tensors(k).values())
        block, role = module.roles[k]
        rows.append(dict(layer=k, kind=module.architecture, hidden=hidden, nonzeros=nonzeros, block=block, role=role))
    rows.append(dict(
        layer=max(module.rnn.num_layers - 1, 0), kind="readout", hidden=module.readout.out_features,
        nonzeros=int(torch.count_nonzero(module.readout.weight)) + int(torch.count_nonzero(module.readout.bias)),
        block=None, role="readout",
    ))
    return rows


__all__ = ["CellModel", "ReluGRU", "ReluLSTM", "build_gru", "build_lstm", "layer_report"]
