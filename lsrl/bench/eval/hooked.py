"""Subjects run by the suite's own hooked loader (``lsrl.bench.standalone.Layers``): any architecture of
a tier model, or a suite folder, patched through ``run_with_cache(xs, patch=...)`` inside the recurrence.

Its layers are the hooks (``net.hook_names``, gates included); its truth is the circuit's
(``lsrl.bench.circuit``): a unit is in the circuit when it is live (not always 0, and read by the output
through non-zero weights) and holds a variable that reaches the output. Interventions of any kind (units or a
subspace set, a delta added, with gradients) act at the hooks (``changed_run``), so every method runs on it but
``path_patching`` and ``acdc``, which patch a path model's weights; its edges (``edge_attribution``'s) are
``circuit.json``'s unit edges. A rotated tier's model is scored in its own coordinates, the values its hooks hold
(``rotated``): its truth is the circuit's, in the labelled coordinates, mapped onto them through ``rotations.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lsrl.bench import standalone
from lsrl.bench.circuit import INPUT, Circuit, UnitEdge
from lsrl.bench.eval.subject import (ZERO, Edge, Intervention, Layer, PathSubject, Subject, circuit_live, frozen,
                                    not_interchangeable, unit_candidates)
from lsrl.bench.export import export
from lsrl.bench.hf_loader import SteppedModel
from lsrl.bench.rotations import HookRotation, hook_rotations, read_rotations
from lsrl.bench.tasks import TASKS, program_widths, task_program
from lsrl.bench.tiers import TierModel, distractor_program, unrotated_model
from lsrl.bench.truth import default_data, tier_circuit
from lsrl.errors import InternalError, LsrlError, ModelFileError
from lsrl.kinds import Kind
from lsrl.lang.program import ForEach
from lsrl.targets.cell_steps import Run


@dataclass
class HookedSubject(Subject):
    """A model of the suite's hooked loader; its layers are ``hooks``."""

    net: standalone.Layers | SteppedModel | None = None  # the suite's loader, or a stock transformers model
    hooks: list[str] = field(default_factory=list)
    rotations: dict[str, HookRotation] = field(default_factory=dict)  # the rotated tier: its hooks' change of basis
    unit_edges: list[UnitEdge] = field(default_factory=list)  # circuit.json's (a rotated model's: raw_edges)
    shut_edges: set[UnitEdge] = field(default_factory=set)  # circuit.json's: not in circuit

    @classmethod
    def from_tier(cls, tier: TierModel, arch: str = "lstm") -> HookedSubject:
        """The torch target ``arch`` of a tier model, loaded from its exported layers; its truth is its folder's
        (``lsrl.bench.truth.tier_circuit``, on the task's ``data.npz``); a rotated tier's is its distractor model's,
        mapped onto its own coordinates (``rotated``)."""
        target = tier.model.to_torch(arch)
        net = standalone.Layers(*export(target))
        if tier.tier == "rotated":
            return rotated(cls.from_tier(unrotated_model(tier.task), arch), net,
                           hook_rotations(tier.model, tier.bases, arch), default_data(tier.task))
        return cls.from_circuit(tier.task, tier.tier, net, tier_circuit(tier, arch), tier.program, tier.output_dim)

    @classmethod
    def from_folder(cls, folder: str | Path, tier: str | None = None, arch: str | None = None) -> Subject:
        """A suite folder (``lsrl bench build``), read by ``lsrl.bench.load``: a path model as a ``PathSubject``
        (every method runs), any other as a ``HookedSubject``; the truth is its ``circuit.json``. Its tier and
        architecture are ``config.json``'s ``"tier"`` and ``"architecture"``; ``tier`` or ``arch`` given must be
        those (an ``LsrlError`` otherwise: the folder cannot be scored as another)."""
        from lsrl.bench.loading import is_hf_folder, load, load_hf_folder

        folder = Path(folder)
        if is_hf_folder(folder):  # a stock transformers model of the trained tier: patched through its loader
            net, circuit = load_hf_folder(folder)
            program = task_program(circuit.task)
            return cls.from_circuit(circuit.task, "trained", net, circuit, program, program_widths(program)[1])
        try:
            config = standalone.read_config(folder)
        except standalone.SuiteFileError as error:  # no suite folder, or a corrupt one: lsrl.bench.load's refusal
            raise ModelFileError(str(error)) from None
        task, arch_held, tier_held = config["task"], config["architecture"], config["tier"]
        for option, asked, held in (("tier", tier, tier_held), ("arch", arch, arch_held)):
            if asked is not None and asked != held:
                raise LsrlError(f"{folder}: {option} {asked!r} given, but the folder's config.json says {option} "
                                f"{held!r} (a folder is scored as what it holds: leave --{option} out)")
        arch, tier = arch_held, tier_held
        root = folder.parent.parent if tier == "compiled" else folder.parent.parent.parent
        loaded = load(f"{task}/{arch}", root=root, tier=tier)
        build = TASKS[task].build
        if loaded.labels is None or build is None:
            raise LsrlError(f"{folder}: the folder has no unit labels or no program (an automaton), so there are no "
                            "variables to score methods against")
        # the program it runs
        program = distractor_program(task, leak=tier == "distractors") if tier in ("distractors", "rotated") \
            else build()
        subject = cls.from_circuit(task, tier, loaded.model, loaded.circuit, program, config["output_size"])
        if tier == "rotated" and arch != "path":  # its circuit.json: the truth in the labelled coordinates
            return rotated(subject, loaded.model, read_rotations(folder), loaded.data)
        if arch != "path":
            return subject
        tensors = standalone.read_tensors(folder)
        layers = [path_layer(spec, tensors) for spec in config["layers"]]
        bases = path_bases(read_rotations(folder), subject.hooks, subject.widths)
        return PathSubject(subject.task, subject.tier, arch, subject.labels, bases, subject.program,
                           subject.output_dim, unit_candidates(subject.labels, bases, subject.live), subject.live,
                           layers, not_interchangeable=subject.not_interchangeable)

    @classmethod
    def from_circuit(cls, task: str, tier: str, net: Any, circuit: Circuit, program: ForEach,
                     output_dim: int) -> HookedSubject:
        hooks = list(net.hook_names)
        labels = circuit.labels(truth=True)
        layer_labels = [labels[hook] for hook in hooks]
        live = circuit_live(circuit, hooks)
        bases: list[np.ndarray | None] = [None] * len(hooks)
        candidates = unit_candidates(layer_labels, bases, live)
        return cls(task, tier, circuit.architecture, layer_labels, bases, program, output_dim, candidates, live,
                   net, hooks, unit_edges=list(circuit.unit_edges), shut_edges=set(circuit.shut_edges),
                   not_interchangeable=not_interchangeable(circuit))

    def edges(self) -> list[Edge]:
        """``circuit.json``'s unit edges as ``Edge``s (the model's input: layer -1)."""
        layer = {hook: index for index, hook in enumerate(self.hooks)}
        layer[INPUT] = -1
        return [Edge(layer[receiver], "recurrent" if delay else "input", sender, unit, float("nan"), layer[source],
                     (source, sender, receiver, unit, delay) in self.shut_edges)
                for source, sender, receiver, unit, delay in self.unit_edges]

    def run(self, xs: torch.Tensor | np.ndarray, interventions: dict[int, Intervention] | None = None
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """As ``Subject.run`` (``changed_run``), with gradients only where an intervention has them (``frozen``)."""
        if self.net is None:
            raise InternalError("a HookedSubject is built by HookedSubject.from_tier, from_folder or from_circuit")
        changes = {self.hooks[index]: intervention for index, intervention in (interventions or {}).items()}
        with frozen(self.net):
            outputs, cache = changed_run(self.net, xs, changes)
        return outputs[..., : self.output_dim].double(), [cache[hook].double() for hook in self.hooks]


def tier_subject(tier: TierModel, arch: str = "path") -> Subject:
    """The subject of a ``lsrl.bench.tiers.TierModel``: its path model (a ``PathSubject``), or the torch target
    ``arch`` of it loaded by the suite's hooked loader (a ``HookedSubject``)."""
    if arch == "path":
        return PathSubject.from_tier(tier)
    return HookedSubject.from_tier(tier, arch)


class _ChangedRun(Run):
    """A ``run_with_cache`` run whose hooks' values ``changes`` changes (``Intervention``s: units or a subspace set, a
    delta added) at every step."""

    def __init__(self, changes: Mapping[str, Intervention], steps: int) -> None:
        super().__init__({}, steps)
        self.changes = changes

    def patched(self, name: str, value: torch.Tensor, step: int | None) -> torch.Tensor:
        change = self.changes.get(name)
        return value if change is None else change.apply(value, step)


def changed_run(net: Any, xs: torch.Tensor | np.ndarray, changes: Mapping[str, Intervention]
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(outputs, {hook: values (B, T, width)})`` of a hooked model ``net`` on ``xs`` with ``changes`` (``{hook:
    Intervention}``) applied at every step inside the recurrence, with gradients where the caller has them on:
    through the suite's hook points (``hooked_forward``), or a stock ``transformers`` model's stepped run
    (``SteppedModel.run_steps``)."""
    if isinstance(net, SteppedModel):
        def patched(name: str, step: int, values: torch.Tensor) -> torch.Tensor:
            change = changes.get(name)
            return values if change is None else change.apply(values, step)

        return net.run_steps(xs, patched)
    run = _ChangedRun(changes, np.shape(xs)[1])
    outputs = hooked_forward(net, xs, run)
    return outputs, run.finished()


def _dtype(net: Any) -> torch.dtype:
    return next(t.dtype for t in [*net.parameters(), *net.buffers()] if t.is_floating_point())


def hooked_forward(net: Any, xs: torch.Tensor | np.ndarray, run: Run) -> torch.Tensor:
    """``net``'s outputs on ``xs`` with its hook points recording and patching through ``run`` (a ``Run``; with
    gradients where the caller has them on)."""
    x = torch.as_tensor(xs).to(_dtype(net))
    points = [module for module in net.modules() if isinstance(module, standalone.HookPoint)]
    for point in points:
        point.run = run
    try:
        return net(x)
    finally:
        for point in points:
            point.run = None



def rotated(labelled: HookedSubject, net: Any, rotations: dict[str, HookRotation], data: Mapping[str, np.ndarray]
            ) -> HookedSubject:
    """The rotated tier's hooked model ``net`` (its hooks changed in basis by ``rotations``) scored in its own
    coordinates: the methods see and set the values its hooks hold. Its truth is that of ``labelled``, the distractor
    tier's model (same hooks and labels: the circuit in the labelled coordinates), mapped onto them: a unit of a rotated
    hook mixes the labelled units of ``HookRotation.mixing`` and holds their variables (``unit_candidates``); it is in
    the circuit when one of them is and it takes more than one value over the real steps of ``data``'s test
    sequences by more than ``ZERO`` (the rotated weights' float64 rounding moves a constant by ~1e-16), as a live unit
    does (a sign part ``ReLU(-r_k)`` of a coordinate that stays positive is 0 throughout: no interchange moves it);
    its edges are ``raw_edges``."""
    if list(net.hook_names) != labelled.hooks:
        raise InternalError(f"bench eval: the rotated {labelled.task}/{labelled.arch} has other hooks than its "
                            "distractor model")
    xs = data["test_inputs"]
    with torch.no_grad():
        _, cache = net.run_with_cache(xs)
    labelled = _widened(labelled, [cache[hook].shape[-1] for hook in labelled.hooks])
    mixes = [rotations[hook].mixing(width) if hook in rotations else None
             for hook, width in zip(labelled.hooks, labelled.widths)]
    real = np.arange(xs.shape[1])[None] < data["test_lengths"][:, None]
    spread = {hook: np.ptp(values.double().numpy()[real], axis=0) for hook, values in cache.items()}
    candidates = [replace(c, truth=c.truth and bool(spread[labelled.hooks[c.layer]][c.unit] > ZERO))
                  for c in unit_candidates(labelled.labels, mixes, labelled.live)]
    rotated_subject = replace(labelled, tier="rotated", net=net, rotations=rotations, candidates=candidates)
    rotated_subject.unit_edges, rotated_subject.shut_edges = raw_edges(labelled, dict(zip(labelled.hooks, mixes)))
    return rotated_subject


def _widened(labelled: HookedSubject, widths: list[int]) -> HookedSubject:
    """``labelled`` with each layer of ``widths`` units: a rotated hook holds as ``[ReLU(r_k); ReLU(-r_k)]`` what the
    distractor model, whose value never goes negative, holds whole (``h_k``): the units it lacks (``ReLU(-h_k)``,
    0 throughout) hold no variable and are not in the circuit."""
    extra = [width - len(labels) for labels, width in zip(labelled.labels, widths)]
    if any(count < 0 for count in extra):
        raise InternalError(f"bench eval: a hook of the rotated {labelled.task}/{labelled.arch} is narrower than its "
                            "distractor model's")
    labels = [layer_labels + [None] * count for layer_labels, count in zip(labelled.labels, extra)]
    live = [np.concatenate([held, np.zeros(count, dtype=bool)]) for held, count in zip(labelled.live, extra)]
    return replace(labelled, labels=labels, live=live)


def raw_edges(labelled: HookedSubject, mixes: dict[str, np.ndarray | None]) -> tuple[list[UnitEdge], set[UnitEdge]]:
    """``labelled``'s unit edges (between labelled units) as edges between the units of hooks that mix them
    (``mixes``: per hook, ``HookRotation.mixing`` or None): ``a -> b`` wherever a labelled edge ``i -> j`` has ``a``
    mixing ``i`` and ``b`` mixing ``j``; and those of them that carry no labelled edge of the circuit (one outside
    ``shut_edges`` between units in the circuit), which are not in it."""
    live = dict(zip(labelled.hooks, labelled.live))
    mixing: dict[str, list[list[int]]] = {hook: [np.flatnonzero(mixed[:, unit]).tolist() for unit in range(len(mixed))]
                                          for hook, mixed in mixes.items() if mixed is not None}

    def holders(hook: str, unit: int) -> list[int]:
        return mixing[hook][unit] if hook in mixing else [unit]

    carries: dict[UnitEdge, bool] = {}  # a raw edge: whether it carries a labelled edge of the circuit
    for edge in labelled.unit_edges:
        source, sender, target, receiver, delay = edge
        used = (edge not in labelled.shut_edges and (source == INPUT or bool(live[source][sender]))
                and bool(live[target][receiver]))
        for a in holders(source, sender):
            for b in holders(target, receiver):
                key = (source, a, target, b, delay)
                carries[key] = carries.get(key, False) or used
    return list(carries), {edge for edge, used in carries.items() if not used}


def path_bases(rotations: dict[str, HookRotation], hooks: list[str], widths: list[int]) -> list[np.ndarray | None]:
    """Per hook of a path folder, the change of basis ``B`` its ``rotations.json`` gives (the layer outputs ``B h``
    for the labelled values ``h``: ``B[units[j], units[k]] = Q[j, k]``), None where it is not rotated."""
    bases: list[np.ndarray | None] = []
    for hook, width in zip(hooks, widths):
        rotation = rotations.get(hook)
        if rotation is None:
            bases.append(None)
            continue
        basis = np.eye(width)
        units = list(rotation.units)
        basis[np.ix_(units, units)] = rotation.Q.astype(np.float64)
        bases.append(basis)
    return bases


PATH_OPS = {"linear": Kind.LINEAR, "relu": Kind.RELU, "multiply_halves": Kind.MULTI, "linear_recurrence": Kind.LINSTATE}


def path_layer(spec: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Layer:
    """A path folder's config layer as a ``Layer``."""
    kind = PATH_OPS[spec["op"]]
    if kind is Kind.LINEAR:
        weight = tensors[spec["weight"]].double()
        bias = tensors[spec["bias"]].double() if spec["bias"] is not None else weight.new_zeros(weight.shape[0])
        return Layer(kind, {"A": weight, "b": bias})
    if kind is Kind.LINSTATE:
        return Layer(kind, {name: tensors[spec[name]].double() for name in ("A", "B", "b", "s0")})
    return Layer(kind)
