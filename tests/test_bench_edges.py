"""Every unit edge in a folder's circuit (``circuit.json``: both ends in the circuit, no gate holding it shut)
moves the outputs on the folder's own data when it alone is cut, or is of the one kind docs/bench.md names that
the truth keeps although it moves nothing alone (``passes_nothing_through_a_relu``). A cut: the receiver reads a
constant ``k`` in place of the sender through that edge (0, or the least or greatest value the sender takes on
the test data), every other edge, the sender's other readers included, left as it was. Run by
``standalone.Layers``, the code of the folder's ``load_model.py``, on its ``config.json`` and tensors.

How an edge is cut: through a weight ``w`` (a linear layer's, a recurrence's ``A`` / ``B``, a cell's
``weight_ih`` / ``weight_hh``), ``w`` set to 0 and ``w k`` added to the receiver's bias; into a unit that is a
function ``g`` of its sender alone (a ReLU, a hook op, a block's output), the receiver set to ``g(k)``; from a
cell's gate read in one product only, the gate set to ``k``; an LSTM's ``f c_{t-1}`` and ``o act(c)`` and a GRU's
``z h_{t-1}`` (a state with several readers, inside a product) recomputed with ``k`` at every step by forward
hooks on the cell's hook points.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import pytest
import torch

import lsrl.bench
from lsrl.bench import standalone
from lsrl.bench.circuit import INPUT, Circuit, read_circuit
from lsrl.bench.eval.hooked import HookedSubject
from bench_builds import cell_part

TASKS = ("parity", "majority", "balanced_parens")
ARCHS = ("path", "linear_rnn", "rnn", "lstm", "gru")
CHANGED = 1e-6  # an output change above this is a change (float64 noise of the exact targets is ~1e-15)
HALVES = ("pos", "neg")  # the roles of the halves of a value split for a ReLU network (Eq. 11)

Edge = tuple[str, int, str, int, int]


@functools.lru_cache(maxsize=None)
def _suite() -> Path:
    root = Path(tempfile.mkdtemp())
    lsrl.bench.build_suite(root, list(TASKS), tiers=["compiled", "distractors"], progress=False)
    return root


class Weight(NamedTuple):
    """Unit ``u`` of a hook reads its senders through row ``first + u`` of tensor ``name`` (column: the sender's
    unit) and adds that row of tensor ``bias``."""

    name: str
    bias: str
    first: int


def _weights_into(specs: list[dict[str, Any]], tensors: dict[str, torch.Tensor]) -> dict[tuple[str, int], Weight]:
    """``{(receiver hook, delay): Weight}`` of every weighted layer: delay 0 reads the layer's input, delay 1 its
    own previous state. A linear layer without bias gets a zero one (in ``specs`` and ``tensors``)."""
    found: dict[tuple[str, int], Weight] = {}
    for spec in specs:
        op, hook = spec["op"], spec.get("hook")
        if op == "block":
            for part in ("state", "phi", "gamma"):
                found.update(_weights_into(spec[part] or [], tensors))
        elif op == "linear":
            if spec["bias"] is None:
                spec["bias"] = f"{spec['weight']}.zero_bias"
                tensors[spec["bias"]] = torch.zeros(tensors[spec["weight"]].shape[0], dtype=torch.float64)
            found[(hook, 0)] = Weight(spec["weight"], spec["bias"], 0)
        elif op == "linear_recurrence":
            found[(hook, 0)], found[(hook, 1)] = Weight(spec["B"], spec["b"], 0), Weight(spec["A"], spec["b"], 0)
        elif op in standalone.STOCK or op in standalone.RELU_CELLS:
            named = {key.removesuffix("_l0"): name for key, name in spec["parameters"].items()}
            hidden = tensors[named["weight_hh"]].shape[1]
            gates = [gate for gate in standalone.GATES.get(op, ()) if gate != "c"]
            for k, target in enumerate([f"{hook}.{gate}" for gate in gates] or [hook]):
                found[(target, 0)] = Weight(named["weight_ih"], named["bias_ih"], k * hidden)
                found[(target, 1)] = Weight(named["weight_hh"], named["bias_hh"], k * hidden)
    return found


def _elementwise(specs: list[dict[str, Any]]) -> dict[str, Callable[[float], float]]:
    """``{hook: g}`` for every hook whose unit ``u`` is ``g`` of unit ``u`` of the hook before it (a ReLU, a hook
    op, a block's output)."""
    found: dict[str, Callable[[float], float]] = {}
    pending: Callable[[float], float] | None = float
    for spec in specs:
        op = spec["op"]
        if op == "block":
            found.update(_elementwise(spec["state"]) | _elementwise(spec["phi"]))
            pending = float if spec["gamma"] is None else None  # times gamma: a product, not elementwise
        elif op == "relu":
            pending = lambda value: max(value, 0.0)  # noqa: E731
        elif op != "hook":
            pending = None
        name = standalone.hook_name(spec)
        if name is not None:
            if pending is not None:
                found[name] = pending
            pending = float
    return found


class Folder:
    """A folder's model, ready to run with one edge cut (module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.config = json.loads((folder / "config.json").read_text())
        self.tensors = {name: tensor.double() for name, tensor in standalone.read_tensors(folder).items()}
        self.weights = _weights_into(self.config["layers"], self.tensors)
        self.elementwise = _elementwise(self.config["layers"])
        self.circuit: Circuit = read_circuit(folder / "circuit.json")
        self.readers = Counter(edge[:2] for edge in self.circuit.unit_edges)
        self.widths = {hook["name"]: hook["width"] for hook in self.circuit.hooks}

    def net(self, tensors: dict[str, torch.Tensor] | None = None) -> standalone.Layers:
        return standalone.Layers(self.config["layers"], tensors or self.tensors).eval()

    def outputs(self, edge: Edge, value: float, xs: np.ndarray) -> np.ndarray:
        """The outputs on ``xs`` with ``edge`` cut, its receiver reading ``value`` for the sender."""
        source, sender, target, receiver, delay = edge
        (layer, sender_part), (other, receiver_part) = cell_part(source), cell_part(target)
        if self.weight_of(edge) is not None:
            with torch.no_grad():
                return self.weight_cut(edge, value).run_with_cache(xs)[0].double().numpy()
        if target in self.elementwise and delay == 0:  # the receiver reads this sender only
            assert sender == receiver, edge
            return self._set(target, receiver, self.elementwise[target](value), xs)
        if self.readers[(source, sender)] == 1 and delay == 0:  # a gate read in one product only
            assert sender_part and receiver_part != sender_part, edge
            return self._set(source, sender, value, xs)
        assert layer == other and sender == receiver, edge  # a state read in a product of its own cell
        return self._product_cut(layer, (sender_part, receiver_part, delay), receiver, value, xs)

    def _set(self, hook: str, unit: int, value: float, xs: np.ndarray) -> np.ndarray:
        """The outputs with ``unit`` of ``hook`` set to ``value`` at every step."""
        patch = np.full((*xs.shape[:2], self.widths[hook]), np.nan)
        patch[..., unit] = value
        with torch.no_grad():
            return self.net().run_with_cache(xs, {hook: patch})[0].double().numpy()

    def weight_of(self, edge: Edge) -> Weight | None:
        """The weight carrying ``edge`` (None: it passes through no weight)."""
        source, _, target, _, delay = edge
        weight = self.weights.get((target, delay))
        return weight if weight is not None and (delay == 0 or cell_part(source)[0] == cell_part(target)[0]) \
            else None

    def weight_cut(self, edge: Edge, value: float) -> standalone.Layers:
        """The model with ``edge``'s weight ``w`` set to 0 and ``w value`` added to its receiver's bias."""
        name, bias, first = self.weight_of(edge)
        _, sender, _, receiver, _ = edge
        tensors = dict(self.tensors)
        tensors[name], tensors[bias] = tensors[name].clone(), tensors[bias].clone()
        entry = tensors[name][first + receiver, sender].item()
        assert entry != 0, (name, first + receiver, sender)  # the weight carries the edge
        tensors[name][first + receiver, sender] = 0.0
        tensors[bias][first + receiver] += entry * value
        return self.net(tensors)

    def _product_cut(self, layer: str, parts: tuple[str, str, int], unit: int, value: float, xs: np.ndarray
                     ) -> np.ndarray:
        """An LSTM's ``c_t = f c_{t-1} + i g`` or ``h = o act(c)``, a GRU's ``h_t = (1 - z) n + z h_{t-1}``, with
        ``value`` for ``c_{t-1}``, ``c`` or ``h_{t-1}`` of ``unit``."""
        net = self.net()
        cell = next(module for module in net.modules()
                    if isinstance(module, standalone.Cell) and module.points and module.points["h"].name == layer)
        candidate = standalone.ACTIVATIONS[cell.activations[1]]
        held = {"h": cell.h0.expand(len(xs), -1), "c": cell.c0.expand(len(xs), -1) if cell.c0 is not None else None}

        def keep(part: str) -> Callable:
            def hook(module: Any, args: tuple, out: torch.Tensor) -> None:
                held[part] = out
            return hook

        def recompute(part: str, new: Callable[[torch.Tensor], torch.Tensor]) -> Callable:
            def hook(module: Any, args: tuple, out: torch.Tensor) -> torch.Tensor:
                out = out.clone()
                out[:, unit] = new(out[:, unit])
                held[part] = out
                return out
            return hook

        rules = {  # the part recomputed, from its value and those held
            ("c", "c", 1): ("c", lambda c: c - held["f"][:, unit] * (held["c"][:, unit] - value)),
            ("c", "", 0): ("h", lambda h: held["o"][:, unit] * candidate(torch.tensor(value, dtype=h.dtype))),
            ("", "", 1): ("h", lambda h: h - held["z"][:, unit] * (held["h"][:, unit] - value)),
        }
        part, new = rules[parts]
        gates = [gate for gate in ("f", "o", "z") if gate in cell.points]
        handles = [cell.points[gate].register_forward_hook(keep(gate)) for gate in gates]
        handles.append(cell.points[part].register_forward_hook(recompute(part, new)))
        try:
            with torch.no_grad():
                return net(torch.as_tensor(xs)).double().numpy()
        finally:
            for handle in handles:
                handle.remove()


def circuit_edges(circuit: Circuit) -> list[Edge]:
    """The circuit's edges: both ends in it (the input counts as in it), not shut."""
    inside, shut = circuit.in_circuit(), set(circuit.shut_edges)
    return [edge for edge in circuit.unit_edges
            if (edge[0] == INPUT or edge[:2] in inside) and edge[2:4] in inside and edge not in shut]


def _covering_rows(cache: dict[str, np.ndarray], units: set, real: np.ndarray) -> np.ndarray:
    """The test sequences on which some unit of ``units`` takes its least or greatest value."""
    rows = set()
    for hook, unit in units:
        values = np.where(real, cache[hook][..., unit], np.nan)
        rows.update(int(np.unravel_index(pick(values), values.shape)[0]) for pick in (np.nanargmin, np.nanargmax))
    return np.array(sorted(rows))


def _moved(model: Folder, edges: list[Edge], xs: np.ndarray, real: np.ndarray, cache: dict[str, np.ndarray]
           ) -> list[bool]:
    """Per edge, whether a cut (the sender read as 0, or as its least or greatest value) moves an output of
    ``xs`` at a real step."""
    with torch.no_grad():
        outputs = model.net()(torch.as_tensor(xs)).double().numpy()
    moved = []
    for edge in edges:
        held = cache[edge[0]][..., edge[1]][real]
        moved.append(any((np.abs(model.outputs(edge, value, xs) - outputs) * real[..., None]).max() > CHANGED
                         for value in dict.fromkeys((0.0, float(held.min()), float(held.max())))))
    return moved


def folder_data(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """``data.npz``'s test inputs and which of their steps are real ``(N, T)``."""
    data = np.load(folder / "data.npz")
    xs, lengths = data["test_inputs"], data["test_lengths"]
    return xs, np.arange(xs.shape[1])[None] < lengths[:, None]


def inert_edges(model: Folder, xs: np.ndarray, real: np.ndarray) -> tuple[list[Edge], int]:
    """``(the circuit's edges that no cut moves an output of, the circuit's edge count)``: tried first on the
    test sequences where some unit in the circuit takes its least or greatest value, then on all of them."""
    edges = circuit_edges(model.circuit)
    with torch.no_grad():
        _, cache = model.net().run_with_cache(xs)
    cache = {hook: values.double().numpy() for hook, values in cache.items()} | {INPUT: xs}
    rows = _covering_rows(cache, model.circuit.in_circuit(), real)
    moved = _moved(model, edges, xs[rows], real[rows], {hook: values[rows] for hook, values in cache.items()})
    edges = [edge for edge, edge_moved in zip(edges, moved) if not edge_moved]
    return [edge for edge, edge_moved in zip(edges, _moved(model, edges, xs, real, cache)) if not edge_moved], \
        len(moved)


def passes_nothing_through_a_relu(model: Folder, edge: Edge, xs: np.ndarray, real: np.ndarray) -> bool:
    """Whether ``edge`` is of the kind the truth keeps although it moves no output alone (docs/bench.md): through a
    weight, a half (``pos`` / ``neg``) of a split value at one end, and the receiver unchanged at every real step
    when it reads 0 for the sender (its ReLU shut wherever the sender is non-zero)."""
    roles = {(unit["hook"], unit["unit"]): unit["role"] for unit in model.circuit.units}
    if model.weight_of(edge) is None or not {roles.get(edge[:2]), roles.get(edge[2:4])} & set(HALVES):
        return False
    hook, unit = edge[2:4]
    with torch.no_grad():
        held, cut = (net.run_with_cache(xs)[1][hook][..., unit].double().numpy()[real]
                     for net in (model.net(), model.weight_cut(edge, 0.0)))
    return bool(np.array_equal(held, cut))


@pytest.mark.slow
@pytest.mark.parametrize("tier", ["compiled", "distractors"])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("task", TASKS)
def test_every_edge_in_the_circuit_moves_the_outputs_when_cut_or_passes_nothing_through_a_relu(task, tier, arch):
    folder = _suite() / (task if tier == "compiled" else f"{tier}/{task}") / arch
    model, (xs, real) = Folder(folder), folder_data(folder)
    inert, count = inert_edges(model, xs, real)
    assert count
    unexplained = [edge for edge in inert if not passes_nothing_through_a_relu(model, edge, xs, real)]
    assert not unexplained, f"{folder}: edges in the circuit that no cut moves an output of: {unexplained[:8]}"


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_a_cut_of_an_edge_through_a_gate_held_shut_moves_nothing(arch):
    """The other side of the cuts: an edge ``shut_edges`` holds shut passes nothing on the data, so the receiver
    reading any constant through it leaves the outputs as they were (a cut that touched more than its edge would
    move them)."""
    folder = _suite() / "distractors" / "parity" / arch
    model, (xs, real) = Folder(folder), folder_data(folder)
    shut = model.circuit.shut_edges
    assert shut
    with torch.no_grad():
        outputs, cache = model.net().run_with_cache(xs)
    held = {hook: values.double().numpy() for hook, values in cache.items()}
    for edge in shut:
        values = held[edge[0]][..., edge[1]][real]
        for value in (0.0, float(values.min()), float(values.max())):
            change = np.abs(model.outputs(edge, value, xs) - outputs.double().numpy())[real].max()
            assert change <= CHANGED, (edge, value)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["path", "lstm"])
def test_a_folders_subject_carries_the_variables_its_truth_marks_not_interchangeable(arch):
    folder = _suite() / "distractors" / "parity" / arch
    marked = {node["name"] for node in read_circuit(folder / "circuit.json").nodes if not node["interchangeable"]}
    assert marked
    assert HookedSubject.from_folder(folder).not_interchangeable == marked
