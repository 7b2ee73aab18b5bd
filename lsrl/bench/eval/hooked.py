"""Subjects run by the suite's own hooked loader (``lsrl.bench.standalone.Layers``): any architecture of
a tier model, or a suite folder, patched through ``run_with_cache(xs, patch=...)`` inside the recurrence.

Its layers are the hooks (``net.hook_names``, gates included); its truth is the circuit's
(``lsrl.bench.circuit``): a unit is in the circuit when it is live (not always 0, and read by the output
through non-zero weights) and holds a variable that reaches the output. Interventions of any kind (units or a
subspace set, a delta added, with gradients) act at the hooks (``changed_run``), so every method runs on it but
``path_patching`` and ``acdc``, which patch a path model's weights; its edges (``edge_attribution``'s) are
``circuit.json``'s unit edges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lsrl.bench import standalone
from lsrl.bench.circuit import INPUT, Circuit
from lsrl.bench.eval.subject import (Edge, Intervention, Layer, PathSubject, Subject, circuit_live, frozen,
                                    not_interchangeable, unit_candidates)
from lsrl.bench.export import export
from lsrl.bench.hf_loader import SteppedModel
from lsrl.bench.rotations import HookRotation, hook_rotations, read_rotations
from lsrl.bench.tasks import TASKS, program_widths, task_program
from lsrl.bench.tiers import TierModel, distractor_program, tier_model
from lsrl.bench.truth import tier_circuit
from lsrl.errors import InternalError, LsrlError, ModelFileError
from lsrl.kinds import Kind
from lsrl.lang.program import ForEach
from lsrl.targets.cell_steps import Run

ROTATED_DECIMALS = 12  # a rotated target's outputs (rationals of small denominators) rounded to this: ~1e-15 is noise


@dataclass
class HookedSubject(Subject):
    """A model of the suite's hooked loader; its layers are ``hooks``."""

    net: standalone.Layers | SteppedModel | None = None  # the suite's loader, or a stock transformers model
    hooks: list[str] = field(default_factory=list)
    rotations: dict[str, HookRotation] = field(default_factory=dict)  # the rotated tier: its hooks' change of basis
    unit_edges: list[tuple[str, int, str, int, int]] = field(default_factory=list)  # circuit.json's
    shut_edges: set[tuple[str, int, str, int, int]] = field(default_factory=set)  # circuit.json's: not in circuit

    @classmethod
    def from_tier(cls, tier: TierModel, arch: str = "lstm") -> HookedSubject:
        """The torch target ``arch`` of a tier model, loaded from its exported layers; its truth is its folder's
        (``lsrl.bench.truth.tier_circuit``, on the task's ``data.npz``). A rotated tier's subject is seen before
        the change of basis (``rotated``)."""
        target = tier.model.to_torch(arch)
        net = standalone.Layers(*export(target))
        if tier.tier == "rotated":
            return rotated(cls.from_tier(tier_model(tier.task, "distractors"), arch), net,
                           hook_rotations(tier.model, tier.bases, arch))
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
        program = distractor_program(task) if tier in ("distractors", "rotated") else build()
        subject = cls.from_circuit(task, tier, loaded.model, loaded.circuit, program, config["output_size"])
        if tier == "rotated" and arch != "path":  # its circuit.json: the truth in the labelled coordinates
            return rotated(subject, loaded.model, read_rotations(folder))
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
            outputs, cache = changed_run(self.net, xs, changes, self.rotations)
        outputs = outputs[..., : self.output_dim].double()
        if self.rotations and not outputs.requires_grad:  # the change of basis and back leaves float64 noise: a patch
            outputs = torch.round(outputs, decimals=ROTATED_DECIMALS)  # changing nothing scores 0
        return outputs, [cache[hook].double() for hook in self.hooks]


def tier_subject(tier: TierModel, arch: str = "path") -> Subject:
    """The subject of a ``lsrl.bench.tiers.TierModel``: its path model (a ``PathSubject``), or the torch target
    ``arch`` of it loaded by the suite's hooked loader (a ``HookedSubject``)."""
    if arch == "path":
        return PathSubject.from_tier(tier)
    return HookedSubject.from_tier(tier, arch)


def change_basis(values: torch.Tensor, rotation: HookRotation, unrotate: bool) -> torch.Tensor:
    """A rotated hook's ``values`` ``(..., width)`` before the change of basis (``unrotate``:
    ``HookRotation.unrotate``) or, from values before it, after it: ``h = Q^T r``, ``r = Q h``."""
    Q = torch.as_tensor(rotation.Q.astype(np.float64), dtype=values.dtype)
    units = list(rotation.units)
    split = [k for k, unit in enumerate(rotation.negative) if unit is not None]
    negative = [rotation.negative[k] for k in split]
    signed = values[..., units].clone()
    signed[..., split] -= values[..., negative]
    turned = signed @ Q if unrotate else signed @ Q.T
    out = values.clone()
    out[..., units] = turned
    out[..., [units[k] for k in split]] = torch.relu(turned[..., split])
    out[..., negative] = torch.relu(-turned[..., split])
    return out


class _ChangedRun(Run):
    """A ``run_with_cache`` run whose hooks' values ``changes`` changes (``Intervention``s: units or a subspace set, a
    delta added) at every step; at the ``rotations``' hooks seen before the change of basis: their changes act on, and
    their cache holds, the values of the model before the rotation, and the model carries on with the rotated ones."""

    def __init__(self, changes: Mapping[str, Intervention], steps: int, rotations: dict[str, HookRotation]) -> None:
        super().__init__({}, steps)
        self.changes, self.rotations = changes, rotations

    def patched(self, name: str, value: torch.Tensor, step: int | None) -> torch.Tensor:
        change, rotation = self.changes.get(name), self.rotations.get(name)
        if change is None:
            return value
        if rotation is None:
            return change.apply(value, step)
        return change_basis(change.apply(change_basis(value, rotation, unrotate=True), step), rotation, unrotate=False)

    def finished(self) -> dict[str, torch.Tensor]:
        return {name: change_basis(values, self.rotations[name], unrotate=True) if name in self.rotations else values
                for name, values in super().finished().items()}


def changed_run(net: Any, xs: torch.Tensor | np.ndarray, changes: Mapping[str, Intervention],
                rotations: dict[str, HookRotation] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(outputs, {hook: values (B, T, width)})`` of a hooked model ``net`` on ``xs`` with ``changes`` (``{hook:
    Intervention}``) applied at every step inside the recurrence, with gradients where the caller has them on:
    through the suite's hook points (``hooked_forward``; ``rotations``: ``_ChangedRun``), or a stock ``transformers``
    model's stepped run (``SteppedModel.run_steps``)."""
    if isinstance(net, SteppedModel):
        if rotations:
            raise InternalError("a stock transformers model of the suite has no rotated tier")

        def patched(name: str, step: int, values: torch.Tensor) -> torch.Tensor:
            change = changes.get(name)
            return values if change is None else change.apply(values, step)

        return net.run_steps(xs, patched)
    run = _ChangedRun(changes, np.shape(xs)[1], rotations or {})
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



def rotated(unrotated: HookedSubject, net: Any, rotations: dict[str, HookRotation]) -> HookedSubject:
    """The rotated tier's hooked model ``net`` (its hooks changed in basis by ``rotations``) seen before the change
    of basis: its layers are the labelled coordinates (``HookRotation.unrotate``), which hold the values of the
    distractor tier's model ``unrotated`` (same hooks and labels), whose circuit is therefore the truth (the
    rotated model's own weights would make every coordinate reach the output)."""
    if list(net.hook_names) != unrotated.hooks:
        raise InternalError(f"bench eval: the rotated {unrotated.task}/{unrotated.arch} has other hooks than its "
                            "distractor model")
    return replace(unrotated, tier="rotated", net=net, rotations=rotations)


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
