"""The ground truth of a suite model: its ``circuit.json`` (``lsrl.bench.circuit``), computed once from the
model and the task's data (``data.npz``: the folder's own test sequences and fixed pairs), the one truth every
score uses, for a folder and for the same model in memory alike.

* ``folder_circuit``: the circuit of a model's exported layers on the test data, each program node marked
  ``interchangeable`` where patching its units reproduces ``data.npz``'s interchange of it (``interchange_notes``).
* ``model_circuit``: the same for a model as built (a compiled path model, a torch target).
* ``tier_circuit``: the truth of a tier's model in one architecture; a rotated model's is its distractor model's,
  the truth in the labelled coordinates (``lsrl.bench.rotations`` maps them).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lsrl.bench import standalone
from lsrl.bench.circuit import Circuit, build_circuit
from lsrl.bench.data import TEST_SEQUENCES, held, task_data
from lsrl.bench.export import export
from lsrl.bench.labels import LayerLabels, unit_labels
from lsrl.bench.tasks import TASKS, Task
from lsrl.bench.tiers import TierModel, task_output, unrotated_model

if TYPE_CHECKING:
    from torch import nn

    from lsrl.lang.program import ForEach
    from lsrl.model import CompiledProgram

OUTPUT_TOLERANCE = 1e-6  # float64 outputs of the exact targets differ from the interpreter's by ~1e-15


@lru_cache(maxsize=4)
def default_data(name: str) -> dict[str, np.ndarray]:
    """Task ``name``'s ``data.npz`` arrays as the suite writes them (``TEST_SEQUENCES`` test sequences)."""
    return task_data(TASKS[name], TEST_SEQUENCES)


def folder_circuit(task: Task, config: dict[str, Any], tensors: dict[str, torch.Tensor],
                   labels: dict[str, LayerLabels] | None, data: dict[str, np.ndarray],
                   program: ForEach | None = None) -> Circuit:
    """The folder's ``Circuit`` (``lsrl.bench.circuit``), its liveness and equivalences read on the test data and
    its nodes' interchangeability on the fixed pairs; ``program``: the one the model runs (default: the task's; a
    program with distractors: the task's output is the one that counts)."""
    net = standalone.Layers(config["layers"], tensors)
    xs = data["test_inputs"]
    _, cache = net.run_with_cache(xs)
    real = np.arange(xs.shape[1])[None] < data["test_lengths"][:, None]
    program = program if program is not None else task.build() if task.build else None
    trace = program.trace(xs, check_bounds=False) if program is not None else None
    output = task_output(program) if program is not None else None
    circuit = build_circuit(task.name, config["architecture"], config, tensors, labels, cache, real, program, trace,
                            output)
    notes = interchange_notes(net, circuit, data)
    for node in circuit.nodes:
        node["interchangeable"], node["interchange_note"] = notes.get(node["name"], (False, "no unit holds it"))
    return circuit


def model_circuit(task: Task, arch: str, model: CompiledProgram | nn.Module, data: dict[str, np.ndarray],
                  program: ForEach | None = None) -> Circuit:
    """``folder_circuit`` of a model as built (exported as its folder's ``config.json`` and tensors are)."""
    layers, tensors = export(model)
    config = {"architecture": arch, "input_size": data["test_inputs"].shape[-1], "layers": layers}
    return folder_circuit(task, config, tensors, unit_labels(model), data, program)


def tier_circuit(tier: TierModel, arch: str, data: dict[str, np.ndarray] | None = None) -> Circuit:
    """The truth of ``tier``'s model in ``arch`` (``"path"`` or a torch target) on ``data`` (default: the task's
    ``data.npz``): what its folder's ``circuit.json`` holds. A rotated tier's is its distractor tier's (the same
    hooks and labels, the values before the change of basis)."""
    if tier.tier == "rotated":
        tier = unrotated_model(tier.task)
    model = tier.model if arch == "path" else tier.model.to_torch(arch)
    data = data if data is not None else default_data(tier.task)
    return model_circuit(TASKS[tier.task], arch, model, data, tier.program)


def interchange_notes(net: standalone.Layers, circuit: Circuit, data: dict[str, np.ndarray]
                      ) -> dict[str, tuple[bool, str | None]]:
    """Per program node a unit holds (``circuit.variables``): ``(interchangeable, why not)``. Interchangeable
    when setting every unit that holds one of its components, at every step, to its value in the corrupted run
    of each of ``data``'s fixed pairs (a shorter run's last value held) gives the clean outputs of ``data``'s
    ``interchange.NODE`` at every real step."""
    holders: dict[str, list[tuple[str, int]]] = {}
    for variable in circuit.variables:
        holders.setdefault(variable["node"], []).extend((hook, unit) for hook, unit in variable["units"])
    dims = {node["name"]: node["dim"] for node in circuit.nodes}
    components = {(variable["node"], variable["index"]) for variable in circuit.variables}
    notes: dict[str, tuple[bool, str | None]] = {}
    testable = []
    for node in sorted(holders):
        if f"interchange.{node}" in data:
            testable.append(node)
        else:
            notes[node] = (False, "data.npz has no interchange of it (the input, or a node of the distractor "
                                  "program, which the task's own lacks)")
    if not testable:
        return notes
    clean, lengths = data["pairs_clean_inputs"], data["pairs_clean_lengths"]
    steps = clean.shape[1]
    corrupted = np.zeros((len(clean), max(steps, data["pairs_corrupted_inputs"].shape[1]), clean.shape[-1]))
    corrupted[:, :data["pairs_corrupted_inputs"].shape[1]] = data["pairs_corrupted_inputs"]
    with torch.no_grad():
        _, donors = net.run_with_cache(corrupted)
    donor = {hook: held(values.double().numpy(), data["pairs_corrupted_lengths"], steps)
             for hook, values in donors.items()}
    patch = {hook: np.full((len(testable) * len(clean), *values.shape[1:]), np.nan) for hook, values in donor.items()}
    for k, node in enumerate(testable):
        rows = slice(k * len(clean), (k + 1) * len(clean))
        for hook, unit in holders[node]:
            patch[hook][rows, :, unit] = donor[hook][:, :, unit]
    with torch.no_grad():
        patched, _ = net.run_with_cache(np.tile(clean, (len(testable), 1, 1)), patch)
    outputs = patched.double().numpy().reshape(len(testable), len(clean), steps, -1)
    real = np.arange(steps)[None] < lengths[:, None]
    for k, node in enumerate(testable):
        expected = data[f"interchange.{node}"][:, :steps]
        wrong = ~np.isclose(outputs[k], expected, rtol=0, atol=OUTPUT_TOLERANCE).all(axis=-1) & real
        pairs = int(wrong.any(axis=1).sum())
        missing = [index for index in range(dims[node]) if (node, index) not in components]
        why = f": components {missing} have no unit of their own{held_elsewhere(node, missing, circuit)}" \
            if missing else ""
        notes[node] = (True, None) if not pairs else (
            False, f"setting its units to their corrupted values gives other outputs than the program's "
                   f"interchange on {pairs} of {len(clean)} pairs{why}")
    return notes


def held_elsewhere(node: str, missing: list[int], circuit: Circuit) -> str:
    """Where the units hold the ``missing`` components of ``node`` under another name (an equal component with
    units of its own, ``circuit.equivalent``): `` (0 as linear_16[0])``, or nothing."""
    held = {(variable["node"], variable["index"]) for variable in circuit.variables if variable["units"]}
    names = []
    for index in missing:
        group = next((group for group in circuit.equivalent if (node, index) in group), [])
        other = next((member for member in group if member in held), None)
        if other is not None:
            names.append(f"{index} as {other[0]}[{other[1]}]")
    return f" ({', '.join(names)})" if names else ""
