"""The model a method is scored on: a compiled path model run in torch (float64), with interventions
inside the recurrence, and the ground truth of its units.

``Subject.run(xs, interventions)`` runs the layers step by step; an ``Intervention`` on layer ``i``
sets some of its output directions to given values (units by a mask, or a subspace by a projector)
and adds ``delta`` (for gradients, or an edge's contribution), every step, *before* a state layer
carries its state to the next step, as the program's ``patch=`` does. A candidate of discovery is a
unit (an output coordinate of a layer); its truth is True when it holds a variable of the task's
circuit, False when it holds only distractor variables, None when its label names no variable's
value (constants, helpers; not scored). In a rotated layer a coordinate holds the variables of the
units it mixes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from torch import nn

from lsrl.bench.circuit import Circuit
from lsrl.bench.tiers import TierModel
from lsrl.bench.truth import tier_circuit
from lsrl.bench.tasks import TASKS
from lsrl.errors import InternalError
from lsrl.ir.labels import PATCHABLE_ROLES, UnitLabel
from lsrl.kinds import NODE_WEIGHTS, STATE_KINDS, Kind
from lsrl.lang.nodes import Node
from lsrl.lang.program import ForEach

ZERO = 1e-9  # float64 values (of exact rationals up to rounding) below this are 0


class CleanRuns(Protocol):
    """What ``Subject.patched`` reads of a method's pairs (``lsrl.bench.eval.pairs.Pairs``): the clean inputs and
    the subject's layers' outputs on them."""

    clean: np.ndarray
    clean_layers: list[torch.Tensor]


@dataclass
class Intervention:
    """What to do to one layer's outputs ``(N, T, width)``: ``out + (values - out) * mask`` (``mask``:
    ``(N, width)``, 1 where a unit is set) or ``out + (values - out) @ projector`` (an orthogonal
    projector ``(width, width)``), then ``+ delta``."""

    values: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    projector: torch.Tensor | None = None
    delta: torch.Tensor | None = None

    def apply(self, out: torch.Tensor, t: int | None = None) -> torch.Tensor:
        """``out`` (at step ``t``, or the whole sequence when ``t`` is None) after the intervention, in ``out``'s
        dtype (a float32 model's hook takes float64 values)."""
        def at(tensor: torch.Tensor) -> torch.Tensor:
            return (tensor if t is None else tensor[:, t]).to(out.dtype)

        if self.values is not None:
            change = at(self.values) - out
            if self.mask is not None:
                out = out + change * (self.mask if t is not None else self.mask[:, None]).to(out.dtype)
            if self.projector is not None:
                out = out + change @ self.projector.to(out.dtype)
        return out + at(self.delta) if self.delta is not None else out


@contextmanager
def frozen(*modules: nn.Module) -> Iterator[None]:
    """The ``modules``' parameters asking for no gradients while a subject runs, as they asked after: a subject is
    scored, not trained, so a method's gradients (attribution's, ``das``'s) flow only into what it intervenes with, and
    a run with no such intervention keeps no graph."""
    parameters = [parameter for module in modules for parameter in module.parameters()]
    asked = [parameter.requires_grad for parameter in parameters]
    for parameter in parameters:
        parameter.requires_grad_(False)
    try:
        yield
    finally:
        for parameter, wanted in zip(parameters, asked):
            parameter.requires_grad_(wanted)


@dataclass
class Layer:
    """One path layer's kind and weights (float64 tensors; ``A``, ``b`` of a Linear, ``A``, ``B``, ``b``,
    ``s0`` of a state layer)."""

    kind: Kind
    weights: dict[str, torch.Tensor] = field(default_factory=dict)

    def run(self, x: torch.Tensor, intervention: Intervention | None) -> torch.Tensor:
        if self.kind in STATE_KINDS:
            return self._run_state(x, intervention)
        if self.kind is Kind.LINEAR:
            out = x @ self.weights["A"].T + self.weights["b"]
        elif self.kind is Kind.RELU:
            out = torch.relu(x)
        else:  # Multi: first half times second half
            half = x.shape[-1] // 2
            out = x[..., :half] * x[..., half:]
        return intervention.apply(out) if intervention is not None else out

    def _run_state(self, x: torch.Tensor, intervention: Intervention | None) -> torch.Tensor:
        A, B, b, s0 = (self.weights[k] for k in ("A", "B", "b", "s0"))
        drive = x @ B.T + b
        state = s0.expand(x.shape[0], -1)
        states = []
        for t in range(x.shape[1]):
            state = state @ A.T + drive[:, t]
            if self.kind is Kind.RELUSTATE:
                state = torch.relu(state)
            if intervention is not None:
                state = intervention.apply(state, t)
            states.append(state)
        return torch.stack(states, dim=1)


@dataclass(frozen=True)
class Edge:
    """Weight ``weight`` by which unit ``receiver`` of layer ``layer`` reads unit ``sender`` of layer ``source``
    (-1: the model's input): in a path model the layer below (``kind`` "input") or its own previous state
    ("recurrent"); in a hooked model any hook it reads with no hook between them (``circuit.json``'s unit edges:
    "recurrent" when it reads the previous step's value), through weights and gates (``weight`` NaN)."""

    layer: int
    kind: str
    sender: int
    receiver: int
    weight: float
    source: int
    shut: bool = False  # nothing of the circuit passes (not in it): through a gate held shut at every real step of
    # the data, or, between a rotated hook's raw coordinates, carrying no labelled edge of the circuit (raw_edges)


@dataclass
class Candidate:
    """A unit of discovery: output coordinate ``unit`` of layer ``layer``; ``nodes``: the variables it
    holds; ``truth``: in the circuit (True), only distractors (False)."""

    layer: int
    unit: int
    nodes: tuple[str, ...]
    truth: bool


@dataclass
class Subject:
    """A tier model of a task in one architecture, ready for the methods (module docstring). Layers are
    indexed as the methods see them: the path model's layers, or a hooked model's hooks in order."""

    task: str
    tier: str
    arch: str
    labels: list[list]  # per layer, a UnitLabel (or None) per unit
    bases: list[np.ndarray | None]  # per layer, Q: the layer outputs Q h for the labelled units h
    program: ForEach
    output_dim: int
    candidates: list[Candidate]
    live: list[np.ndarray]  # per layer, in the labels' basis: the units in the circuit
    # variables whose interchange the truth marks unreliable (circuit.json's nodes not interchangeable: patching
    # their units does not give the program's interchange); interchange accuracy leaves them out
    not_interchangeable: frozenset[str] = field(default=frozenset(), kw_only=True)

    def run(self, xs: torch.Tensor | np.ndarray, interventions: dict[int, Intervention] | None = None
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(task outputs, every layer's outputs)`` on ``xs`` ``(N, T, d_in)`` with ``interventions``
        ``{layer index: Intervention}``."""
        raise NotImplementedError

    def patched(self, pairs: CleanRuns, layer: int, intervention: Intervention, repeats: int) -> torch.Tensor:
        """The task outputs on ``repeats`` copies of the clean inputs with ``intervention`` on ``layer``."""
        return self.run(torch.as_tensor(pairs.clean).repeat(repeats, 1, 1), {layer: intervention})[0]

    def edges(self) -> list[Edge]:
        """The unit edges known of the model (none: a trained model reads every unit through non-zero weights)."""
        return []

    @property
    def widths(self) -> list[int]:
        """Every layer's number of units."""
        return [len(labels) for labels in self.labels]

    def sample(self, rng: np.random.Generator, count: int, length: int) -> np.ndarray:
        """``count`` input sequences of the task, of ``length`` steps."""
        sample = TASKS[self.task].sample
        return np.stack([sample(rng, length) for _ in range(count)]).astype(np.float64)

    @property
    def nodes(self) -> dict[str, bool]:
        """``{variable: in the circuit}`` for every variable a unit holds: in the circuit when one of its
        units is live (``live``)."""
        truth: dict[str, bool] = {}
        for layer_labels, live in zip(self.labels, self.live):
            for label, unit_live in zip(layer_labels, live):
                if holds(label):
                    truth[label.node] = truth.get(label.node, False) or bool(unit_live)
        return truth


@dataclass
class PathSubject(Subject):
    """A compiled path model run by ``Layer``s: every method can run on it, ``path_patching`` and ``acdc`` (which
    patch its weights, the edges between units) only on it."""

    layers: list[Layer] = field(default_factory=list)

    @classmethod
    def from_tier(cls, tier: TierModel, arch: str = "path") -> PathSubject:
        """The path model of a ``lsrl.bench.tiers.TierModel`` (``arch`` "path")."""
        if arch != "path" or tier.model.labels is None:
            raise InternalError(f"PathSubject.from_tier: a tier's labelled path model, got arch {arch!r}")
        bases = [None if basis is None else basis.to_numpy() for basis in tier.bases]
        circuit, hooks = tier_circuit(tier, "path"), [f"layers.{i}" for i in range(len(tier.model.layers))]
        held = circuit.labels(truth=True)
        subject = cls(tier.task, tier.tier, "path", [held[hook] for hook in hooks], bases, tier.program,
                      tier.output_dim, [], circuit_live(circuit, hooks),
                      [Layer(layer.kind, _weights(layer)) for layer in tier.model.layers],
                      not_interchangeable=not_interchangeable(circuit))
        subject.candidates = unit_candidates(subject.labels, bases, subject.live)
        return subject

    def run(self, xs: torch.Tensor | np.ndarray, interventions: dict[int, Intervention] | None = None,
            start: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(task outputs, the outputs of layers start, start + 1, ...)`` on ``xs``: the model's inputs
        ``(N, T, d_in)``, or for ``start > 0`` the outputs of layer ``start - 1``; ``interventions``:
        ``{layer index: Intervention}``."""
        x = torch.as_tensor(np.asarray(xs, dtype=np.float64)) if not isinstance(xs, torch.Tensor) else xs
        interventions = interventions or {}
        outputs = []
        for index in range(start, len(self.layers)):
            x = self.layers[index].run(x, interventions.get(index))
            outputs.append(x)
        return x[..., : self.output_dim], outputs

    def patched(self, pairs: CleanRuns, layer: int, intervention: Intervention, repeats: int) -> torch.Tensor:
        """As ``Subject.patched``; the layers below ``layer`` are not run again."""
        below = torch.as_tensor(pairs.clean) if layer == 0 else pairs.clean_layers[layer - 1]
        return self.run(below.repeat(repeats, 1, 1), {layer: intervention}, start=layer)[0]

    def edges(self) -> list[Edge]:
        """Every non-zero weight of a Linear or state layer, as an ``Edge``."""
        edges = []
        for index, layer in enumerate(self.layers):
            for kind, name in (("input", "A" if layer.kind is Kind.LINEAR else "B"), ("recurrent", "A")):
                if name not in layer.weights or (kind == "recurrent") != (layer.kind in STATE_KINDS):
                    continue
                weight = layer.weights[name]
                source = index if kind == "recurrent" else index - 1
                for receiver, sender in torch.nonzero(weight).tolist():
                    edges.append(Edge(index, kind, sender, receiver, float(weight[receiver, sender]), source))
        return edges


def circuit_live(circuit: Circuit, hooks: list[str]) -> list[np.ndarray]:
    """Per hook of ``hooks``, which of its units ``circuit`` has in the circuit."""
    widths = {hook["name"]: hook["width"] for hook in circuit.hooks}
    live = {hook: np.zeros(widths[hook], dtype=bool) for hook in hooks}
    for unit in circuit.units:
        if unit["hook"] in live:
            live[unit["hook"]][unit["unit"]] = unit["in_circuit"]
    return [live[hook] for hook in hooks]


def not_interchangeable(circuit: Circuit) -> frozenset[str]:
    """The program nodes ``circuit`` marks not interchangeable (a node without the mark counts as
    interchangeable)."""
    return frozenset(node["name"] for node in circuit.nodes if not node.get("interchangeable", True))


def holds(label: UnitLabel | None) -> bool:
    """Whether a unit of ``label`` holds its variable's value (a role of ``PATCHABLE_ROLES``)."""
    return label is not None and label.role in PATCHABLE_ROLES and bool(label.node)


def _weights(layer: Node) -> dict[str, torch.Tensor]:
    return {("s0" if name == "init_state" else name): torch.as_tensor(getattr(layer, name).to_numpy(),
                                                                      dtype=torch.float64)
            for name in NODE_WEIGHTS[layer.kind]}


def unit_candidates(labels: list[list], mixes: list[np.ndarray | None], live: list[np.ndarray]) -> list[Candidate]:
    """The scored units of every layer: those that hold a variable's value (a role of ``PATCHABLE_ROLES``), or in a
    rotated layer the coordinates that mix such units (``mixes``: per layer, None where a unit is itself, else a
    matrix whose row ``u`` is non-zero at the labelled units coordinate ``u`` mixes: a path layer's change of basis,
    a hook's ``HookRotation.mixing``); in the circuit when live (``live``: per layer, in the labels' basis): a unit
    labelled with a distractor that the output reads holds a value the task uses too (the compiler shares one unit
    between equal values)."""
    candidates = []
    for index, (layer_labels, mixed) in enumerate(zip(labels, mixes)):
        held = [(label.node,) if holds(label) else () for label in layer_labels]
        for unit in range(len(layer_labels)):
            loads = [unit] if mixed is None else np.flatnonzero(mixed[unit]).tolist()
            nodes = tuple(sorted({node for u in loads for node in held[u]}))
            if nodes:  # a coordinate is in the circuit when a unit it mixes is (patching it moves them all)
                truth = bool(live[index][loads].any())
                candidates.append(Candidate(index, unit, nodes, truth))
    return candidates
