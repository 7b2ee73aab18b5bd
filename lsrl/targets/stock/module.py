"""The stock module: a compiled program in one stock ``nn.LSTM`` / ``nn.GRU`` (``core``) and a ``nn.Linear``
``readout`` (``StockRNNModel``; how its weights are built: docs/stock.md), its patched runs and its cache."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lsrl.errors import LsrlError
from lsrl.ir.labels import UnitLabel, units_holding
from lsrl.lang.evaluate import patch_items, patch_key_name
from lsrl.targets.cache import CachedRun, Patch
from lsrl.targets.cell_steps import run_steps
from lsrl.targets.checks import checked_input, module_placement
from lsrl.targets.facts import ensure_facts
from lsrl.targets.hook_points import STEP_HOOKS, Layer, Recurrence, sub_name
from lsrl.targets.patch import StatePatch, check_patchable, values_array, overwriting
from lsrl.targets.promises import BuiltForOneDtype, CoreState, StockState, continued_state
from lsrl.targets.stock.cells import CellLayer
from lsrl.targets.stock.plan import UnitPlan
from lsrl.targets.stock.scales import DTYPES, Scales


def held_patches(net: StockRNNModel, patch: Any, count: int, steps: int) -> dict:
    """``{core layer k or "readout": StatePatch}``: every unit holding a patched node set so that its layer
    decodes the patched value (``D h = v``: the component's units set to ``v D[j] / |D[j]|^2``, so a value
    unit holds ``eps v``, a GRU pair ``(eps v / 2, -eps v / 2)``, a product pair ``(eta eps v / 4, -eta eps v / 4)``).
    The values must lie within the value bounds the construction scaled them by (``net.tolerance`` rests on them)."""
    arrays = {}
    for key, values in patch_items(patch, net.architecture):
        name = patch_key_name(key)
        check_patchable(net, name)  # refuses every node when the module has no labels (no unit_plan)
        array = values_array(net, name, values, count, steps)
        arrays[name] = (array.shape[-1], array)
    plan = net.unit_plan
    if plan is None:
        return {}
    holders: list[tuple[Any, tuple[Any, list]]] = list(enumerate(zip(plan.layers, plan.source_labels)))
    if plan.readout_patched:
        holders.append(("readout", (None, plan.output_labels)))
    patches = {}
    for key, (layer, components) in holders:
        if layer is not None and layer.thresholded:  # only its outputs are patched (unit_plan), at the readout
            continue
        where = f"core.l{key}" if layer is not None else "readout"
        units, columns = [], []
        for j, held in units_holding(enumerate(components), arrays, where):
            if layer is None:
                units.append(j)
                columns.append(held)
                continue
            _check_patch_bound(net, components[j], held, float(layer.bound[j]))
            row = layer.decode[j]
            for unit in np.flatnonzero(row):
                units.append(int(unit))
                columns.append(held * (row[unit] / float(row @ row)))
        if units:
            dtype, device = module_placement(net)
            patches[key] = StatePatch(torch.tensor(units, dtype=torch.long, device=device),
                                      torch.as_tensor(np.stack(columns, axis=-1), dtype=dtype, device=device))
    return patches


def _check_patch_bound(net: StockRNNModel, label: UnitLabel, held: np.ndarray, bound: float) -> None:
    largest = float(np.max(np.abs(held), initial=0.0))
    if largest > bound:
        raise LsrlError(f"{net.architecture}: patch values for {label.node!r} reach {largest:.6g} in component "
                        f"{label.index}, beyond its value bound {bound:.6g} at max_len={net.max_len}: the construction "
                        "scales every value by its bound, and net.tolerance holds for values within it")


class StockRNNModel(BuiltForOneDtype, CachedRun, Recurrence, nn.Module):
    """A compiled program in one stock ``nn.LSTM`` / ``nn.GRU`` (``core``) and a ``nn.Linear`` ``readout``.

    ``net(x)``: ``(B, T, d_in) -> (B, T, d_out)``; ``net.run(x, state)`` also returns where it stopped, a
    ``StockState`` (the core's final state, ``h`` or ``(h, c)`` in PyTorch's layout, and the steps run so far)
    and takes one to continue from (step-by-step decoding).
    ``net.tolerance`` bounds every output's distance from the exact interpreter (docs/stock.md,
    "Error bound") for ``T <= net.max_len`` and inputs within the declared bounds: longer
    sequences, a continued run past ``max_len`` steps and a dtype change (``lsrl.targets.promises``) are
    refused.

    ``net.labels``: ``core.l{k}`` (layer ``k``'s ``h``; an LSTM's cell ``core.l{k}.c``) and ``readout``, one
    ``UnitLabel`` per unit; a labelled
    unit of the core holds ``net.unit_scales[key][u]`` times what its label says (a power of two, the
    small-signal scale ``eps``), within ``net.unit_tolerances[key][u]`` (that times the component's error
    bound). ``net(x, patch={node: values})`` sets the units that hold the node (``held_patches``) inside
    the recurrence: the layers it touches run one step at a time (the stock layer on one step, its state
    patched before it is carried); ``run_with_cache`` records every layer's ``h`` and gates per step.

    Both stay within ``net.tolerance`` of the program's patched run (``program(xs, patch=...)``) for patch
    values within the nodes' value bounds (others are refused): a patched unit is written as the value times
    a power of two, rounded once (relative error ``u``, below the component's own bound ``E >= u M``), and the
    value bounds of every later layer still hold, since they follow from the patched node's bound; so the
    induction of docs/stock.md ("Error bound") goes through unchanged.
    """

    architecture: str
    max_len: int
    core: nn.RNNBase  # an nn.LSTM or nn.GRU
    records_steps = True  # run_with_cache records the core's layers at their steps' hook points
    stepped_modules = ("core",)  # whose own output is no hook: its layers' are
    h0: torch.Tensor  # per layer, the initial h (a buffer)
    c0: torch.Tensor  # per layer, an LSTM's initial cell (a buffer; 0 in a GRU)

    def __init__(self, arch: str, d_in: int, layers: list[CellLayer], readout_weight: np.ndarray,
                 readout_bias: np.ndarray, tolerances: np.ndarray, max_len: int, scales: Scales,
                 plan: UnitPlan | None = None) -> None:
        super().__init__()
        self.architecture = f"stock_{arch}"
        self.d_in = d_in
        self.max_len = max_len  # the longest sequence checked_input and run accept
        self.max_len_reason = "the length its scales and stated tolerance come from"
        self.scales = scales
        self.tolerances = np.asarray(tolerances, dtype=np.float64)
        self.tolerance = float(np.max(self.tolerances, initial=0.0))
        self.unit_plan = plan
        self.labels = None if plan is None else plan.labels
        self.unit_scales = None if plan is None else plan.unit_scales
        self.unit_tolerances = None if plan is None else plan.unit_tolerances
        dtype = scales.dtype
        hidden = max(layer.units for layer in layers)
        core = (nn.LSTM if arch == "lstm" else nn.GRU)(d_in, hidden, num_layers=len(layers), batch_first=True,
                                                       dtype=dtype)
        h0, c0 = np.zeros((len(layers), hidden)), np.zeros((len(layers), hidden))
        with torch.no_grad():
            for k, layer in enumerate(layers):
                arrays = layer.arrays(hidden, d_in if k == 0 else hidden)
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(core, f"{name}_l{k}").copy_(torch.as_tensor(arrays[name]))
                h0[k], c0[k] = arrays["h0"], arrays["c0"]
        self.core = core
        self.register_buffer("h0", torch.as_tensor(h0, dtype=dtype))
        self.register_buffer("c0", torch.as_tensor(c0, dtype=dtype))  # the LSTM's initial cell (0 in a GRU)
        self.readout = nn.Linear(hidden, readout_weight.shape[0], dtype=dtype)
        with torch.no_grad():
            self.readout.weight.copy_(torch.as_tensor(readout_weight))
            self.readout.bias.copy_(torch.as_tensor(readout_bias))
        ensure_facts(self.architecture, self.h0)  # the floating-point facts of the units, where it is built

    def __call__(self, x: Any, *args: Any, patch: Any = None, **kwargs: Any) -> Any:
        """``forward``; ``patch={node: values}`` patches program nodes of ``net.patchable`` (class docstring), the
        patched layers run through the stock layer one step at a time; a patch that names a hook
        (``hook_names()``) runs the core as ``run_with_cache`` does (``lsrl.targets.cache.CachedRun``)."""
        items = patch_items(patch, self.architecture)
        hooks = set(self.hook_names())
        if any(isinstance(key, str) and key in hooks for key, _ in items):
            return super().__call__(x, *args, patch=patch, **kwargs)
        if not items:
            return nn.Module.__call__(self, x, *args, **kwargs)
        checked = checked_input(self, x, check_bounds=False)  # the shape of the patch values; forward checks bounds
        with self.node_patches(patch, checked.shape[0], checked.shape[1]):
            return nn.Module.__call__(self, x, *args, **kwargs)

    @contextmanager
    def node_patches(self, patch: Patch, count: int, steps: int) -> Iterator[None]:
        """While the block runs, the units that hold the program nodes of ``patch`` are set (``held_patches``): a
        core layer's before its ``h`` is carried (``state_patches``), the readout's outputs by a forward hook."""
        patches = held_patches(self, patch, count, steps)
        readout = patches.pop("readout", None)
        handle = None if readout is None else self.readout.register_forward_hook(overwriting(readout))
        self.state_patches = patches if patch_items(patch, self.architecture) else None
        try:
            yield
        finally:
            self.state_patches = None
            if handle is not None:
                handle.remove()

    def initial_state(self, batch: int) -> CoreState:
        """The core's initial state for ``batch`` sequences (``h0``, and ``c0`` for the LSTM)."""
        h0 = self.h0[:, None, :].expand(-1, batch, -1).contiguous()
        c0 = self.c0[:, None, :].expand(-1, batch, -1).contiguous()
        return (h0, c0) if isinstance(self.core, nn.LSTM) else h0

    def run(self, x: Any, state: StockState | None = None, check_bounds: bool = True
            ) -> tuple[torch.Tensor, StockState]:
        """``(outputs, final state)``; ``state``: the ``StockState`` of an earlier call to continue from (None: the
        initial one). A run that would pass ``max_len`` steps in all is refused (``continued_state``)."""
        x = checked_input(self, x, check_bounds)
        ensure_facts(self.architecture, self.h0)  # on a device or dtype not checked before
        start, initial = continued_state(self, state, x)
        hidden, final = self.core(x, initial)
        return self.readout(hidden), StockState(final, start + x.shape[1])

    def forward(self, x: torch.Tensor, check_bounds: bool = True) -> torch.Tensor:
        if self.state_patches is None and not self.step_points:
            return self.run(x, check_bounds=check_bounds)[0]
        x = checked_input(self, x, check_bounds)
        ensure_facts(self.architecture, self.h0)
        return self.readout(self._stepped_core(x) if self.step_points else self._patched_core(x))

    def carried_states(self, name: str) -> dict[str, Layer]:
        """Layer ``k`` of the core carries ``core.l{k}`` (its ``h``)."""
        return {sub_name(name, f"core.l{k}"): k for k in range(self.core.num_layers)}

    def step_hooks(self, layer: Layer) -> tuple[str, ...]:
        return STEP_HOOKS[self._kind]

    @property
    def _kind(self) -> str:
        return "lstm" if isinstance(self.core, nn.LSTM) else "gru"

    def layer_view(self, k: int) -> nn.RNNBase:
        """Layer ``k`` of the core as a one-layer stock ``nn.LSTM`` / ``nn.GRU`` sharing its parameters."""
        core = self.core
        kind: type[nn.LSTM] | type[nn.GRU] = nn.LSTM if isinstance(core, nn.LSTM) else nn.GRU
        view = kind(self.d_in if k == 0 else core.hidden_size, core.hidden_size, batch_first=True,
                    dtype=self.h0.dtype, device=self.h0.device)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            setattr(view, f"{name}_l0", getattr(core, f"{name}_l{k}"))
        return view

    def _patched_core(self, x: torch.Tensor) -> torch.Tensor:
        """The core layer by layer; a patched layer one step at a time (the stock layer on sequences of one
        step, carrying ``(h, c)``), its ``h`` patched before it is carried and read by the next layer."""
        lstm = isinstance(self.core, nn.LSTM)
        for k in range(self.core.num_layers):
            view = self.layer_view(k)
            h = self.h0[k][None, None, :].expand(1, x.shape[0], -1).contiguous()
            state = (h, self.c0[k][None, None, :].expand(1, x.shape[0], -1).contiguous()) if lstm else h
            hook = self.state_hook(k)
            if hook is None:  # the fused stock layer
                x = view(x, state)[0]
                continue
            steps = []
            for t in range(x.shape[1]):
                state = view(x[:, t:t + 1], state)[1]
                h = hook(state[0][0] if lstm else state[0], t)
                state = (h[None], state[1]) if lstm else h[None]
                steps.append(h)
            x = torch.stack(steps, dim=1)
        return x

    def _stepped_core(self, x: torch.Tensor) -> torch.Tensor:
        """The core layer by layer, one step at a time with PyTorch's equations (``lsrl.targets.cell_steps``), each
        step through the hook points of its layer (``run_with_cache``: ``lsrl.targets.cache``)."""
        kind = self._kind
        for k in range(self.core.num_layers):
            w_ih, w_hh, b_ih, b_hh = (getattr(self.core, f"{name}_l{k}")
                                      for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            h = self.h0[k].expand(x.shape[0], -1)
            c = self.c0[k].expand(x.shape[0], -1) if kind == "lstm" else None
            x = run_steps(kind, self.points(k), F.linear(x, w_ih, b_ih), h, c, w_hh, b_hh, torch.sigmoid,
                          torch.tanh)[0]
        return x

    def hook_names(self) -> list[str]:
        """The names ``run_with_cache`` records, in the order it first reaches them (a step's gates, then ``h``)."""
        return [name for k in range(self.core.num_layers) for name in
                [f"core.l{k}.{gate}" for gate in STEP_HOOKS[self._kind]] + [f"core.l{k}"]] + ["readout"]

    def extra_repr(self) -> str:
        return (f"max_len={self.max_len}, dtype={DTYPES[self.scales.dtype]}, runtime={self.scales.runtime}, "
                f"tolerance={self.tolerance:.3g}, "
                f"amplitude={self.scales.amplitude:g}, gate_amplitude={self.scales.gate_amplitude:g}")


def layer_report(module: StockRNNModel) -> list[dict]:
    """One row per layer of the core (``hidden``: its width, ``nonzeros``: its non-zero weights), then the readout."""
    core = module.core
    rows = []
    for k in range(core.num_layers):
        tensors = [getattr(core, f"{name}_l{k}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        nonzeros = sum(int(torch.count_nonzero(t)) for t in tensors) + int(torch.count_nonzero(module.h0[k])) + int(
            torch.count_nonzero(module.c0[k]))
        rows.append(dict(layer=k, kind=module.architecture, hidden=core.hidden_size, nonzeros=nonzeros))
    readout = module.readout
    rows.append(dict(layer=max(core.num_layers - 1, 0), kind="readout", hidden=readout.out_features,
                     nonzeros=int(torch.count_nonzero(readout.weight)) + int(torch.count_nonzero(readout.bias))))
    return rows
