"""Subjects run by the suite's own hooked loader (``lsrl.bench.standalone.Layers``): any architecture of
a tier model, or a suite folder, patched through ``run_with_cache(xs, patch=...)`` inside the recurrence.

Its layers are the hooks (``net.hook_names``, gates included); its truth is the circuit's
(``lsrl.bench.circuit``): a unit is in the circuit when it is live (not always 0, and read by the output
through non-zero weights) and holds a variable that reaches the output. Only patching methods run on it
(the weight-reading methods need the path model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lsrl.bench import standalone
from lsrl.bench.circuit import Circuit, build_circuit
from lsrl.bench.eval.subject import Intervention, Layer, PathSubject, Subject, unit_candidates
from lsrl.bench.export import export
from lsrl.bench.labels import unit_labels
from lsrl.bench.tasks import TASKS
from lsrl.bench.tiers import TierModel, distractor_program
from lsrl.errors import InternalError, LsrlError
from lsrl.lang.program import ForEach

LIVENESS_SEQUENCES = 64


@dataclass
class HookedSubject(Subject):
    """A model of the suite's hooked loader; its layers are ``hooks``."""

    net: standalone.Layers | None = None
    hooks: list[str] = field(default_factory=list)

    @classmethod
    def from_tier(cls, tier: TierModel, arch: str) -> HookedSubject:
        """The torch target ``arch`` of a tier model, loaded from its exported layers; the circuit's truth is
        read on ``LIVENESS_SEQUENCES`` sequences of the longest training length."""
        target = tier.model.to_torch(arch)
        layers, tensors = export(target)
        config = {"architecture": arch, "input_size": tier.model.input.dim, "layers": layers}
        net = standalone.Layers(layers, tensors)
        labels = unit_labels(target)
        task = TASKS[tier.task]
        xs = np.stack([task.sample(np.random.default_rng(i), task.train_lengths[1])
                       for i in range(LIVENESS_SEQUENCES)]).astype(np.float64)
        _, cache = net.run_with_cache(xs)
        real = np.ones(xs.shape[:2], dtype=bool)
        circuit = build_circuit(tier.task, arch, config, tensors, labels, cache, real, None, None)
        return cls.from_circuit(tier.task, tier.tier, net, circuit, tier.program, tier.output_dim)

    @classmethod
    def from_folder(cls, folder: str | Path, tier: str | None = None, arch: str | None = None) -> Subject:
        """A suite folder (``lsrl bench build``), read by ``lsrl.bench.load``: a path model as a ``PathSubject``
        (every method runs), any other as a ``HookedSubject``; the truth is its ``circuit.json``. Its tier and
        architecture are ``config.json``'s ``"tier"`` and ``"architecture"``; ``tier`` or ``arch`` given must be
        those (an ``LsrlError`` otherwise: the folder cannot be scored as another)."""
        from lsrl.bench import load
        from lsrl.bench.hf_trained import folder_subject, is_hf_folder

        folder = Path(folder)
        if is_hf_folder(folder):  # a stock transformers model of the trained tier
            return folder_subject(folder)
        config = standalone.read_config(folder)
        task, arch_held, tier_held = config["task"], config["architecture"], config["tier"]
        for option, asked, held in (("tier", tier, tier_held), ("arch", arch, arch_held)):
            if asked is not None and asked != held:
                raise LsrlError(f"{folder}: {option} {asked!r} given, but the folder's config.json says {option} "
                                f"{held!r} (a folder is scored as what it holds: leave --{option} out)")
        arch, tier = arch_held, tier_held
        root = folder.parent.parent if tier == "compiled" else folder.parent.parent.parent
        loaded = load(f"{task}/{arch}", root=root, tier=tier)
        if loaded.labels is None or TASKS[task].build is None:
            raise LsrlError(f"{folder}: the folder has no unit labels or no program (an automaton), so there are no "
                            "variables to score methods against")
        # the program it runs
        program = distractor_program(task) if tier in ("distractors", "rotated") else TASKS[task].build()
        subject = cls.from_circuit(task, tier, loaded.model, loaded.circuit, program, config["output_size"])
        if arch != "path":
            return subject
        tensors = standalone.read_tensors(folder)
        layers = [path_layer(spec, tensors) for spec in config["layers"]]
        return PathSubject(subject.task, subject.tier, arch, subject.labels, subject.bases, subject.program,
                           subject.output_dim, subject.candidates, subject.live, layers)

    @classmethod
    def from_circuit(cls, task: str, tier: str, net: Any, circuit: Circuit, program: ForEach,
                     output_dim: int) -> HookedSubject:
        hooks = list(net.hook_names)
        labels = circuit.labels()
        layer_labels = [labels[hook] for hook in hooks]
        live = [np.zeros(len(units), dtype=bool) for units in layer_labels]
        position = {hook: i for i, hook in enumerate(hooks)}
        for unit in circuit.units:
            live[position[unit["hook"]]][unit["unit"]] = unit["in_circuit"]
        bases = [None] * len(hooks)
        candidates = unit_candidates(layer_labels, bases, live)
        return cls(task, tier, circuit.architecture, layer_labels, bases, program, output_dim, candidates, live,
                   net, hooks)

    def run(self, xs: torch.Tensor | np.ndarray, interventions: dict[int, Intervention] | None = None
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """As ``Subject.run``; an intervention must set units (a mask): NaN keeps a unit's own value."""
        patch = {}
        for index, intervention in (interventions or {}).items():
            if intervention.mask is None or intervention.projector is not None or intervention.delta is not None:
                raise InternalError("a hooked subject can only set units (an Intervention with a mask)")
            keep = torch.full_like(intervention.values, float("nan"))
            patch[self.hooks[index]] = torch.where(intervention.mask[:, None].bool(), intervention.values, keep)
        outputs, cache = self.net.run_with_cache(xs, patch)
        return outputs[..., : self.output_dim].double(), [cache[hook].double() for hook in self.hooks]



PATH_OPS = {"linear": "Linear", "relu": "ReLU", "multiply_halves": "Multi", "linear_recurrence": "LinState"}


def path_layer(spec: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Layer:
    """A path folder's config layer as a ``Layer``."""
    kind = PATH_OPS[spec["op"]]
    if kind == "Linear":
        weight = tensors[spec["weight"]].double()
        bias = tensors[spec["bias"]].double() if spec["bias"] is not None else weight.new_zeros(weight.shape[0])
        return Layer(kind, {"A": weight, "b": bias})
    if kind == "LinState":
        return Layer(kind, {name: tensors[spec[name]].double() for name in ("A", "B", "b", "s0")})
    return Layer(kind)
