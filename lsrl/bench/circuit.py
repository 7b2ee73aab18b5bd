"""The circuit of a suite folder as data (``circuit.json``): which unit of which hook holds which program
variable, the program's node graph, the unit-level graph read off the weights, value-equivalent variables,
and which units are in the circuit. Computed by ``lsrl bench build`` from the folder's model (``config.json``
and ``model.safetensors``: the weights), its unit labels (``labels.json``), the program and its data.

``circuit.json`` (format ``"lsrl.bench.circuit"``, version 2)::

    {
      "format": "lsrl.bench.circuit", "version": 2, "task": "parity", "architecture": "rnn",
      "output_hook": "blocks.1",            # the hook whose values are the model's output (before a final
                                            # "positive" of the automata)
      "hooks": [{"name": "blocks.0.rnn", "width": 2, "per_step": true}, ...],
                                            # every hook of load_model.py, in config order; per_step: set inside
                                            # the recurrence (a carried state or a gate)
      "units": [{"hook": "blocks.0.rnn", "unit": 0, "node": "token", "index": 0, "role": "pos",
                 "holds": ["token", 0], "live": true, "in_circuit": true}, ...],
                                            # every unit of every hook: its label (node, index, role: see
                                            # lsrl.ir.labels; null where the folder has no labels), the component
                                            # it holds in the truth (holds: below), live, in_circuit
      "nodes": [{"name": "count_1", "kind": "LinState", "dim": 1, "named": true, "reaches_output": true,
                 "in_circuit": true, "interchangeable": true, "interchange_note": null}, ...],
                                            # the program's nodes (empty for an automaton task); interchangeable:
                                            # lsrl.bench.truth.interchange_notes, the note says why not
      "edges": [["linear_4", "count_1"], ...],               # node graph: input -> reader
      "unit_edges": [["input", 0, "blocks.0.rnn", 0, 0], ...],
                                            # [from hook, unit, to hook, unit, delay]: the target reads the source
                                            # through a non-zero weight with no hook between them; delay 1: the
                                            # source's value of the previous step (a recurrent weight). "input":
                                            # the model's input features
      "shut_edges": [["rnn.l1", 0, "rnn.l1", 0, 1], ...],
                                            # the unit edges through a gate held shut (or a ReLU never positive)
                                            # at every real step of the test data: nothing passes
      "variables": [{"node": "count_1", "index": 0, "units": [["blocks.0.rnn", 0], ["blocks.0.rnn", 1]],
                     "in_circuit": true}, ...],
      "equivalent": [[["depth", 0], ["linear_7", 0]], ...],
                                            # components whose values are equal at every real step of the test
                                            # data (constants left out): one variable under several names
      "promotion": "..."                    # the rule below, in words
    }

Rules. A unit is **live** when it takes more than one value over the real steps of the test data (a constant,
which no interchange moves, is not) and a path of ``unit_edges`` outside ``shut_edges``, through such units,
leads from it to the output hook. A program node **reaches the output** when it is the program's output or a path
of ``edges`` leads from it to the task's output (the node the model outputs: in a distractor program the part of
its output the model keeps) through no node that the sound value analysis proves identically zero
(``lsrl.lang.bounds.is_zero``): such a node passes nothing on, so a distractor, which reaches the output only
through gates shut on every input (``lsrl.bench.tiers.leak_gates``), does not. A unit **holds** its label's
component, or, where it is live but its node does not reach the output and its component equals one of a node
that does (``equivalent``: the compiler shares one unit between equal values), the first such task component.
A unit is **in the circuit** when it is live and the node it holds reaches the output (for an automaton, or a
folder without labels: when it is live). **Promotion** (units to variables): a unit whose role is a function of
its component ``v`` (``value``, ``copy``, ``pos``, ``neg``, ``negated``, ``-pos``, ``-neg``) holds the variable
``v``; the ``pos`` / ``neg`` halves of one component (Eq. 11) and its copies are one variable, listed once with
all its units. ``helper`` and ``constant`` units serve a variable but hold none. A variable, and a node, is in the
circuit when one of its units is: causal relevance, never equal values alone. An **edge** is in the circuit when
both its ends are and it is not in ``shut_edges``; cut alone (the receiver reading a constant for the sender through
it) each moves the outputs on the test data, but one kind kept: an edge through a weight from or into a ``pos`` /
``neg`` half of a split value whose receiver's ReLU is shut wherever the sender is non-zero (no gate is shut on the
data as a whole; docs/bench.md).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from lsrl.errors import ModelFileError, shown
from lsrl.ir.labels import PATCHABLE_ROLES, UnitLabel
from lsrl.lang.bounds import is_zero
from lsrl.model.writing import as_path

if TYPE_CHECKING:
    import torch

    from lsrl.lang.nodes import Node
    from lsrl.lang.program import ForEach

FORMAT = "lsrl.bench.circuit"
VERSION = 2
INPUT = "input"  # the pseudo-hook of the model's input features in unit_edges
PROMOTION = ("a unit whose role is value, copy, pos, neg, negated, -pos or -neg holds the variable (node, index) "
             "of its 'holds'; the pos and neg halves and the copies of one component are one variable; helper and "
             "constant units hold none; a unit is in the circuit when it is live (more than one value on the test "
             "data, and a path of unit_edges outside shut_edges, through such units, leads from it to the output "
             "hook) and the node it holds reaches the task's output")

Unit = tuple[str, int]  # (hook, unit)
UnitEdge = tuple[str, int, str, int, int]  # (from hook, unit, to hook, unit, delay)


class Gate(NamedTuple):
    """The unit ``(hook, unit)`` that shuts an edge: a gate multiplying it, at its value ``shut`` (``z`` = 1 shuts a
    GRU's ``n``, 0 every other product), or (``shut`` None) the edge's sender itself, read through a ReLU that
    passes nothing where it is at most 0."""

    hook: str
    unit: int
    shut: float | None

    def holds_shut(self, values: np.ndarray) -> bool:
        """Whether the gate's ``values`` (every real step) shut the edge at every one."""
        return bool(np.all(values <= 0) if self.shut is None else np.all(values == self.shut))


class Circuit(NamedTuple):
    """A folder's ``circuit.json`` (module docstring) with ``UnitLabel``s."""

    task: str
    architecture: str
    output_hook: str
    hooks: list[dict[str, Any]]
    units: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    edges: list[tuple[str, str]]
    unit_edges: list[UnitEdge]
    shut_edges: list[UnitEdge]
    variables: list[dict[str, Any]]
    equivalent: list[list[tuple[str, int]]]

    def labels(self, truth: bool = False) -> dict[str, list[UnitLabel | None]]:
        """``{hook: [UnitLabel or None per unit]}``: ``labels.json``'s, or (``truth``) with the component each unit
        holds in the truth (``holds``: a unit shared with an equal task value holds the task's)."""
        labels: dict[str, list[UnitLabel | None]] = {hook["name"]: [None] * hook["width"] for hook in self.hooks}
        for unit in self.units:
            if unit["node"] is not None:
                node, index = unit["holds"] if truth else (unit["node"], unit["index"])
                labels[unit["hook"]][unit["unit"]] = UnitLabel(node, index, unit["role"])
        return labels

    def in_circuit(self) -> set[Unit]:
        """The ``(hook, unit)`` pairs in the circuit."""
        return {(unit["hook"], unit["unit"]) for unit in self.units if unit["in_circuit"]}

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, **self._asdict(), "promotion": PROMOTION}

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> Circuit:
        """A ``Circuit`` from ``circuit.json``'s object (``ValueError`` naming the field where it is malformed)."""
        if stored.get("format") != FORMAT or stored.get("version") != VERSION:
            raise ValueError(f"circuit.json: fields 'format' and 'version' must be {FORMAT!r} and {VERSION}")
        missing = [field for field in cls._fields if field not in stored]
        if missing:
            raise ValueError(f"circuit.json: missing field {missing[0]!r}")
        fields = {field: stored[field] for field in cls._fields}
        fields["edges"] = [tuple(edge) for edge in fields["edges"]]
        fields["unit_edges"] = [tuple(edge) for edge in fields["unit_edges"]]
        fields["shut_edges"] = [tuple(edge) for edge in fields["shut_edges"]]
        fields["equivalent"] = [[tuple(member) for member in group] for group in fields["equivalent"]]
        hooks = {hook["name"]: hook["width"] for hook in fields["hooks"]}
        for unit in fields["units"]:
            if unit["hook"] not in hooks or not 0 <= unit["unit"] < hooks[unit["hook"]]:
                raise ValueError(f"circuit.json: unit {unit['unit']} of hook {unit['hook']!r} does not exist")
        return cls(**fields)


def read_circuit(path: str | Path) -> Circuit:
    """The ``Circuit`` of a ``circuit.json`` file; ``ModelFileError`` naming the file where it cannot be read
    or is malformed."""
    file = as_path(path, "read_circuit")
    try:
        stored = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelFileError(f"read_circuit: cannot read {str(file)!r}: {' '.join(str(error).split())}") from None
    if not isinstance(stored, dict):
        raise ModelFileError(f"{str(file)!r}: expected a JSON object, got {type(stored).__name__}")
    try:
        return Circuit.from_json(stored)
    except (ValueError, KeyError, TypeError, IndexError) as error:  # a field of the wrong form
        raise ModelFileError(f"{str(file)!r}: not a circuit.json of this version ({shown(error)})") from None


# ---- unit edges, read off the config layers and the weights ---------------------------------------------------


class _Walk:
    """Walks config layers, each feature of the running tensor given as the hooked units it reads directly."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors
        self.edges: set[tuple[str, int, str, int, int]] = set()  # (sender's hook and unit, receiver's, delay)
        self.per_step: dict[str, tuple[int, bool]] = {}  # hook -> (width, per step)
        self.gated: dict[tuple[str, int, str, int, int], Gate] = {}  # an edge a gate multiplies, and that gate
        self.rectified: set[Unit] = set()  # hooked units that their readers read through a ReLU (not hooked)

    def gate(self, target: Unit, source: Unit, factor: Unit, shut: float, delay: int = 0) -> None:
        """The edge ``source -> target`` passes through a product with ``factor``, which shuts it at ``shut``."""
        self.read(target, [source], delay)
        self.gated[(*source, *target, delay)] = Gate(*factor, shut)

    def nonzero(self, name: str) -> np.ndarray:
        return self.tensors[name].detach().double().numpy() != 0

    def read(self, target: Unit, sources: Iterable[Unit], delay: int = 0) -> None:
        for source in sources:
            edge = (*source, *target, delay)
            self.edges.add(edge)
            if source in self.rectified:
                self.gated[edge] = Gate(*source, None)

    def layers(self, specs: list[dict[str, Any]], features: list[set[Unit]]) -> list[set[Unit]]:
        for spec in specs:
            features = self.layer(spec, features)
        return features

    def hooked(self, name: str | None, features: list[set[Unit]], per_step: bool = False) -> list[set[Unit]]:
        if name is None:
            return features
        self.per_step[name] = (len(features), per_step)
        for unit, sources in enumerate(features):
            self.read((name, unit), sources)
        return [{(name, unit)} for unit in range(len(features))]

    def layer(self, spec: dict[str, Any], features: list[set[Unit]]) -> list[set[Unit]]:
        op = spec["op"]
        if op == "hook":
            return self.hooked(spec["name"], features)
        if op == "linear":
            weight = self.nonzero(spec["weight"])
            out = [set().union(*(features[i] for i in np.flatnonzero(row))) for row in weight]
        elif op == "multiply_halves":
            half = len(features) // 2
            out = [features[i] | features[half + i] for i in range(half)]
        elif op == "block":
            state = self.layers(spec["state"], features)
            out = self.layers(spec["phi"], state)
            if spec["gamma"] is not None:
                out = [a | b for a, b in zip(out, self.layers(spec["gamma"], features))]
        elif op == "linear_recurrence":
            return self.recurrence(spec["hook"], features, self.nonzero(spec["B"]), self.nonzero(spec["A"]))
        elif op.startswith("torch.nn.") or op.startswith("relu_"):
            return self.cell(spec, features)
        else:  # relu, positive: unit by unit
            if op == "relu":
                self.rectified.update(unit for sources in features if len(sources) == 1 for unit in sources)
            out = features
        return self.hooked(spec.get("hook"), out)

    def recurrence(self, name: str, features: list[set[Unit]], drive: np.ndarray, carry: np.ndarray) -> list[set[Unit]]:
        self.per_step[name] = (drive.shape[0], True)
        for unit in range(drive.shape[0]):
            self.read((name, unit), set().union(*(features[i] for i in np.flatnonzero(drive[unit]))))
            self.read((name, unit), ((name, int(j)) for j in np.flatnonzero(carry[unit])), delay=1)
        return [{(name, unit)} for unit in range(drive.shape[0])]

    def cell(self, spec: dict[str, Any], features: list[set[Unit]]) -> list[set[Unit]]:
        from lsrl.bench.standalone import GATES

        name, parameters = spec["hook"], spec["parameters"]
        w_ih, w_hh = (self.nonzero(next(tensor for key, tensor in parameters.items() if key.startswith(prefix)))
                      for prefix in ("weight_ih", "weight_hh"))  # stock: weight_ih_l0, ReLU cells: weight_ih
        gates = GATES.get(spec["op"], ())
        hidden = w_hh.shape[1]
        self.per_step[name] = (hidden, True)
        blocks = [gate for gate in gates if gate != "c"] or ["h"]
        for k, gate in enumerate(blocks):  # each gate block reads the input and h_{t-1}
            target = name if gate == "h" else f"{name}.{gate}"
            self.per_step[target] = (hidden, True)
            for unit in range(hidden):
                row = k * hidden + unit
                self.read((target, unit), set().union(*(features[i] for i in np.flatnonzero(w_ih[row]))))
                for j in np.flatnonzero(w_hh[row]):
                    if gate == "n":  # n = act(W_in x + r * (W_hn h_{t-1} + b_hn)): h_{t-1} through r
                        self.gate((target, unit), (name, int(j)), (f"{name}.r", unit), 0.0, delay=1)
                    else:
                        self.read((target, unit), [(name, int(j))], delay=1)
        for unit in range(hidden):
            if "c" in gates:  # c = f c_{t-1} + i g, h = o act(c)
                cell, (i, f, g, o) = (f"{name}.c", unit), ((f"{name}.{gate}", unit) for gate in "ifgo")
                self.per_step[cell[0]] = (hidden, True)
                self.gate(cell, i, g, 0.0)
                self.gate(cell, g, i, 0.0)
                self.read(cell, [f])
                self.gate(cell, cell, f, 0.0, delay=1)
                self.gate((name, unit), o, cell, 0.0)  # act(c) is 0 where c is
                self.gate((name, unit), cell, o, 0.0)
            elif gates:  # n reads r; h = (1 - z) n + z h_{t-1}
                z = (f"{name}.z", unit)
                self.read((f"{name}.n", unit), [(f"{name}.r", unit)])
                self.read((name, unit), [z])
                self.gate((name, unit), (f"{name}.n", unit), z, 1.0)
                self.gate((name, unit), (name, unit), z, 0.0, delay=1)
        return [{(name, unit)} for unit in range(hidden)]


class UnitGraph(NamedTuple):
    """A model's unit edges (sorted), ``{hook: (width, per_step)}``, its output hook and the gate of each edge a
    gate multiplies."""

    edges: list[UnitEdge]
    hooks: dict[str, tuple[int, bool]]
    output: str
    gated: dict[UnitEdge, Gate]


def unit_graph(config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> UnitGraph:
    """The ``UnitGraph`` of a folder's config layers and tensors."""
    walk = _Walk(tensors)
    features = [{(INPUT, i)} for i in range(config["input_size"])]
    output = walk.layers(config["layers"], features)
    output_hooks = {hook for unit in output for hook, _ in unit}
    if len(output_hooks) != 1:
        raise ValueError(f"the model's output is not one hook's units: {sorted(output_hooks)}")
    return UnitGraph(sorted(walk.edges), walk.per_step, output_hooks.pop(), walk.gated)


# ---- the circuit ----------------------------------------------------------------------------------------------


def _reaching(targets: set, edges: Iterable[tuple]) -> set:
    """The vertices from which a path of ``edges`` ((source, target) pairs) leads into ``targets``."""
    readers = defaultdict(set)
    for source, target in edges:
        readers[target].add(source)
    found, frontier = set(targets), list(targets)
    while frontier:  # a vertex is pushed once, when first found: at most len(vertices) rounds
        for source in readers[frontier.pop()]:
            if source not in found:
                found.add(source)
                frontier.append(source)
    return found


def program_graph(program: ForEach | None, output: Node | None = None
                  ) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The program's nodes (``nodes`` entries, ``in_circuit`` as ``reaches_output``) and its edges; a node reaches
    the output when it is the program's output or a path of edges leads from it to ``output`` (default: the
    program's output; a tier with distractors gives its task's output, the part of its output the model keeps)
    through nodes not proven identically zero (``lsrl.lang.bounds.is_zero``): such a node passes nothing on."""
    if program is None:
        return [], []
    names = program.names
    edges = sorted({(names[source], names[node]) for node in program.nodes for source in node.inputs})
    silent = {names[node] for node in program.nodes if is_zero(node)}  # 0 on every input, whatever it reads
    passing = [(source, reader) for source, reader in edges if source not in silent]
    # the model's output node holds the task's output (and the distractors' outputs, which the model drops)
    reaching = _reaching({names[output if output is not None else program.output]}, passing) | {names[program.output]}
    nodes = [{"name": names[node], "kind": type(node).__name__, "dim": node.dim, "named": bool(node.named),
              "reaches_output": names[node] in reaching, "in_circuit": names[node] in reaching}
             for node in program.nodes]
    return nodes, edges


def equivalent_components(trace: dict[str, np.ndarray], real: np.ndarray) -> list[list[tuple[str, int]]]:
    """Groups of two or more ``(node, index)`` whose values agree at every real step (``real``: ``(B, T)``),
    constants left out."""
    groups = defaultdict(list)
    for node in sorted(trace):
        values = np.asarray(trace[node], dtype=np.float64)
        for index in range(values.shape[-1]):
            column = values[..., index][real]
            if column.size and not np.all(column == column[0]):
                groups[column.tobytes()].append((node, index))
    return sorted(group for group in groups.values() if len(group) > 1)


def task_values(equivalent: list[list[tuple[str, int]]], reaches: set[str]) -> dict[tuple[str, int], tuple[str, int]]:
    """``{component of a node outside the task's circuit: the first equal component of a node that reaches the
    task's output}``: a unit the compiler shares between equal values (a distractor's count and the task's) holds
    the task's value where the output reads it."""
    shared = {}
    for group in equivalent:
        task = [member for member in group if member[0] in reaches]
        shared.update({member: task[0] for member in group if task and member[0] not in reaches})
    return shared


def shut_edges(graph: UnitGraph, cache: dict[str, torch.Tensor], real: np.ndarray) -> list[UnitEdge]:
    """The edges of ``graph`` whose gate holds them shut at every real step (``real``: ``(B, T)``): nothing
    passes through them on the data (a GRU's carried state behind an update gate held at 0, a unit read through a
    ReLU that is never positive)."""
    shut = []
    for edge, gate in sorted(graph.gated.items()):
        if gate.holds_shut(cache[gate.hook][..., gate.unit].detach().double().numpy()[real]):
            shut.append(edge)
    return shut


def varying_units(cache: dict[str, torch.Tensor], real: np.ndarray) -> dict[str, np.ndarray]:
    """Per hook, which units take more than one value over the real steps (``real``: ``(B, T)``): a unit of one
    value is a constant, which no interchange of the inputs moves."""
    varying = {}
    for hook, values in cache.items():
        held = values.detach().double().numpy()[real]
        varying[hook] = (held != held[:1]).any(axis=0) if len(held) else np.zeros(held.shape[-1], dtype=bool)
    return varying


def build_circuit(task: str, architecture: str, config: dict[str, Any], tensors: dict[str, torch.Tensor],
                  labels: dict[str, list] | None, cache: dict[str, torch.Tensor], real: np.ndarray,
                  program: ForEach | None, trace: dict[str, np.ndarray] | None, output: Node | None = None
                  ) -> Circuit:
    """The ``Circuit`` of a model (module docstring): ``cache`` holds every hook's values on the test inputs
    (``run_with_cache``) whose real steps ``real`` ``(B, T)`` say which are not padding; ``trace`` is the
    program's trace on them (None for an automaton); ``output``: the program node whose values the model outputs
    (default: the program's output)."""
    graph = unit_graph(config, tensors)
    hooks, unit_edges = graph.hooks, graph.edges
    nodes, edges = program_graph(program, output)
    reaches = {node["name"] for node in nodes if node["reaches_output"]}
    shut = shut_edges(graph, cache, real)
    varying = varying_units(cache, real)
    closed = set(shut)
    passing = [edge for edge in unit_edges if edge not in closed and (edge[0] == INPUT or varying[edge[0]][edge[1]])]
    useful = _reaching({(graph.output, u) for u in range(hooks[graph.output][0])},
                       (((a, i), (b, j)) for a, i, b, j, _ in passing))
    equivalent = equivalent_components(trace, real) if trace is not None else []
    shared = task_values(equivalent, reaches)
    units, holders = [], defaultdict(list)
    for hook, (width, _) in hooks.items():
        for unit in range(width):
            node, index, role = labels[hook][unit] if labels is not None else (None, None, None)
            live = bool(varying[hook][unit]) and (hook, unit) in useful
            holds: tuple[Any, Any] = (node, index)
            if live and program is not None and node is not None and index is not None:
                holds = shared.get((node, index), holds)
            in_circuit = live and (program is None or holds[0] in reaches)
            units.append({"hook": hook, "unit": unit, "node": node, "index": index, "role": role,
                          "holds": list(holds), "live": live, "in_circuit": in_circuit})
            if role in PATCHABLE_ROLES:
                holders[holds].append([hook, unit])
    marked = {(unit["hook"], unit["unit"]) for unit in units if unit["in_circuit"]}
    variables = [{"node": node, "index": index, "units": holders[(node, index)],
                  "in_circuit": any((hook, unit) in marked for hook, unit in holders[(node, index)])}
                 for node, index in sorted(holders)]
    if program is not None:
        touched = {unit["node"] for unit in units if unit["in_circuit"]}
        for node in nodes:
            node["in_circuit"] = node["reaches_output"] and node["name"] in touched
    return Circuit(
        task=task, architecture=architecture, output_hook=graph.output,
        hooks=[{"name": name, "width": width, "per_step": per_step} for name, (width, per_step) in hooks.items()],
        units=units, nodes=nodes, edges=edges, unit_edges=unit_edges, shut_edges=shut, variables=variables,
        equivalent=equivalent,
    )
