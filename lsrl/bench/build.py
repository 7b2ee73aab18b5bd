"""Writing the suite: one folder per (task, architecture) under ``DIR/<task>/<arch>/``; at the root the
dataset card ``README.md``, ``croissant.json`` (``lsrl.bench.cards``) and a copy of ``load_model.py``.

A folder holds ``model.safetensors`` and ``config.json`` (the layers, ``standalone.py``'s format),
``load_model.py`` (``lsrl/bench/standalone.py``, torch only), ``labels.json`` (the unit labels per hook),
``circuit.json`` (``lsrl.bench.circuit``), ``data.npz`` (``lsrl.bench.data``), ``program.py`` (the task's
program, runnable), ``README.md`` (the model card, from ``circuit.json``) and ``manifest.json``: the sha256 of
every other file, which the loaders check, so that a file changed after the build is refused instead of
loading silently. Each folder is loaded back once as it is written (``standalone.load_folder``, every check).
Two builds write the same bytes: fixed seeds, sorted entries, no times or random orders in any file.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from safetensors.torch import save_file

import lsrl
from lsrl.bench import standalone
from lsrl.bench.cards import model_card, write_root_cards
from lsrl.bench.data import TEST_SEQUENCES, npz_bytes, task_data
from lsrl.bench.export import export
from lsrl.bench.labels import automaton_labels, check_hooks, unit_labels
from lsrl.bench.rotations import FILE as ROTATIONS
from lsrl.bench.rotations import HookRotation, hook_rotations, rotations_json
from lsrl.bench.tasks import TASKS, Task, task_program
from lsrl.bench.tiers import FOLDER_TIERS, TASKS_TRAINED, has_tier, tier_model, unrotated_model
from lsrl.bench.training.torch_rnn import TrainedModel
from lsrl.bench.truth import OUTPUT_TOLERANCE, folder_circuit, tier_circuit
from lsrl.errors import InternalError, LsrlError, whole_number
from lsrl.grid import Run, run_grid
from lsrl.model.writing import as_path, cannot_write

if TYPE_CHECKING:
    import torch
    from torch import nn

    from lsrl.automata.networks import AutomatonNetwork
    from lsrl.bench.circuit import Circuit
    from lsrl.bench.training.hf import HFTrained
    from lsrl.lang.program import ForEach
    from lsrl.model import CompiledProgram

    FolderModel = CompiledProgram | nn.Module | TrainedModel  # what write_model writes
    Model = FolderModel | HFTrained

FORMAT = standalone.FORMAT
FORMAT_VERSION = standalone.VERSION


# ---- data --------------------------------------------------------------------------------------------


# ---- models ------------------------------------------------------------------------------------------


def task_models(task: Task) -> dict[str, CompiledProgram | nn.Module]:
    """``{arch: model}``: the exact path model (``"path"``), the torch targets or the automaton networks."""
    if task.automaton is not None:
        machine = task.automaton()
        return {arch: lsrl.automata.to_torch(machine, arch) for arch in task.archs}
    return _targets(lsrl.compile(task_program(task.name), backend="exact"), task.archs)


def _targets(compiled: CompiledProgram, archs: Iterable[str]) -> dict[str, CompiledProgram | nn.Module]:
    return {arch: compiled if arch == "path" else compiled.to_torch(arch) for arch in archs}


TRAINED_ARCHS = ("lstm", "gru")  # the trained tier's default architectures; HF_ARCHS (lsrl.bench.training.hf) too


def tier_models(task: Task, tier: str, train_steps: int | None = None, trained_archs: Iterable[str] = TRAINED_ARCHS
                ) -> tuple[Mapping[str, Model], ForEach | None, dict[str, dict[str, HookRotation]]]:
    """``({arch: model}, program, rotations)`` of ``task``'s tier ``tier``: ``task_models`` and the task's program
    for the compiled one; for the trained one a model per arch of ``trained_archs`` (``train_steps`` Adam steps
    each, default ``lsrl.bench.training.loop.STEPS``; seed 0): the ``TrainedModel`` of an LSTM / GRU, the
    ``lsrl.bench.training.hf.HFTrained`` of a stock ``transformers`` model; else the
    ``lsrl.bench.tiers.tier_model`` in the task's architectures and the program it runs (the task's outputs
    first, then the distractors'). ``rotations``: per architecture, its rotated hooks (``lsrl.bench.rotations``), empty
    but for the rotated tier."""
    if tier == "compiled":
        return task_models(task), None, {}
    if tier == "trained":
        from lsrl.bench.training.hf import HF_ARCHS, train_hf
        from lsrl.bench.training.loop import STEPS
        from lsrl.bench.training.torch_rnn import train

        return {arch: (train_hf if arch in HF_ARCHS else train)(task.name, arch, train_steps or STEPS)
                for arch in trained_archs}, None, {}
    model = tier_model(task.name, tier)
    rotations = {arch: hook_rotations(model.model, model.bases, arch) for arch in task.archs} if tier == "rotated" \
        else {}
    return _targets(model.model, task.archs), model.program, rotations


def tier_folder(root: Path, task: str, arch: str, tier: str = "compiled") -> Path:
    """Where the suite under ``root`` keeps a model: ``root/TASK/ARCH``, or ``root/TIER/TASK/ARCH`` for a tier
    beside the compiled one (each tier's folder a suite of its own, for ``lsrl.bench.load(..., root=...)``)."""
    return (root if tier == "compiled" else root / tier) / task / arch


# ---- folders -----------------------------------------------------------------------------------------


def write_model(folder: Path, task: Task, arch: str, model: FolderModel,
                data: dict[str, np.ndarray], data_bytes: bytes | None = None, tier: str = "compiled",
                program: ForEach | None = None, rotations: dict[str, HookRotation] | None = None,
                truth: Circuit | None = None) -> Path:
    """One suite folder for ``model`` (architecture ``arch`` of ``task``'s tier ``tier``, which runs ``program``:
    by default the task's own); ``data_bytes``: ``data`` as written (``npz_bytes``), when the caller has them
    already; ``rotations``: ``{hook: HookRotation}`` of a rotated model, written to ``rotations.json``; ``truth``:
    its ``circuit.json`` where it is not the model's own (``lsrl.bench.truth.tier_circuit``: a rotated model's)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / standalone.MANIFEST).unlink(missing_ok=True)  # no stale manifest while the files change
    layers, tensors = export(model)
    used = set(tensor_names(layers))
    tensors = {name: tensor for name, tensor in tensors.items() if name in used}  # not the targets' index buffers
    dtype = str(next(t for t in tensors.values() if t.is_floating_point()).dtype).replace("torch.", "")
    # one metadata key: safetensors writes several in a random order, and the build must give the same bytes
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": FORMAT})
    d_in, d_out = data["train_inputs"].shape[-1], data["train_outputs"].shape[-1]
    config = {
        "format": FORMAT, "version": FORMAT_VERSION, "task": task.name, "architecture": arch, "tier": tier,
        "dtype": dtype, "input_size": d_in, "output_size": d_out, "layers": layers,
        "loader": "load_model.py (torch and safetensors only): load_folder(this folder) builds the torch module",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    labels = automaton_labels(task.automaton(), cast("AutomatonNetwork", model)) if task.automaton else \
        unit_labels(model)
    check_hooks(labels, standalone.check_layers(config, tensors, folder), f"{task.name}/{arch}")
    (folder / "labels.json").write_text(json.dumps({"available": labels is not None, "hooks": labels}))
    circuit = truth if truth is not None else folder_circuit(task, config, tensors, labels, data, program)
    (folder / "circuit.json").write_text(json.dumps(circuit.to_json()))
    (folder / "load_model.py").write_text(loader_source())
    (folder / "data.npz").write_bytes(data_bytes if data_bytes is not None else npz_bytes(data))
    (folder / "program.py").write_text(program_source(task))
    (folder / ROTATIONS).unlink(missing_ok=True)
    if rotations:
        (folder / ROTATIONS).write_text(rotations_json(rotations))
    widths = ", ".join(describe_layer(layer, tensors) for layer in layers)
    note = model.card() if isinstance(model, TrainedModel) else None  # its training and measured accuracies
    (folder / "README.md").write_text(model_card(task, arch, widths, circuit, data, tier, note))
    if isinstance(model, TrainedModel):  # its measured accuracies and whether they meet the aim: config.json, card
        from lsrl.bench.records import record_training

        record_training(folder, model)
    write_manifest(folder)
    try:
        loaded = standalone.load_folder(folder)
    except standalone.SuiteFileError as error:
        raise InternalError(f"bench: the folder just written does not load back: {error}") from None
    if not isinstance(model, TrainedModel):  # a trained model approximates the program; the others compute it
        # the path model's float64 weights are its exact ones but where a rotation's (3/5) are rounded
        check_outputs(loaded, data, 0.0 if arch == "path" and not rotations else OUTPUT_TOLERANCE, folder)
    return folder


def check_outputs(net: nn.Module, data: dict[str, np.ndarray], tolerance: float, folder: Path) -> None:
    """``net`` gives ``data``'s expected test outputs (the program's interpreter's, or the automaton's) at every
    real step, to ``tolerance`` (0: bit-identical, as the exact path model does); an ``InternalError`` otherwise."""
    import torch

    expected = data["test_outputs"]
    with torch.no_grad():
        outputs = net(torch.as_tensor(data["test_inputs"])).double().numpy()
    real = ~np.isnan(expected)
    error = float(np.abs(outputs[real] - expected[real]).max(initial=0.0))
    if not error <= tolerance:
        raise InternalError(f"bench: the model of {folder} gives outputs {error:.3g} away from data.npz's test outputs "
                            f"(at most {tolerance:g} allowed)")


_RUN = '''

if __name__ == "__main__":  # the outputs on this folder's test data, against the expected ones of data.npz
    data = np.load(Path(__file__).with_name("data.npz"))
    xs, lengths, expected = data["test_inputs"], data["test_lengths"], data["test_outputs"]
    outputs = {run}
    for x, y, n in zip(xs[:5], outputs[:5], lengths[:5]):
        print({shown}, "->", y[:n, 0].tolist())
    real = ~np.isnan(expected)
    print(f"{{len(xs)}} test sequences; the outputs equal data.npz's test_outputs: "
          f"{{bool(np.array_equal(outputs[real], expected[real]))}}")
'''


STEPS_IMPORT = "from lsrl.targets.cell_steps import Run, at_step, run_steps"
STEPS_MARKER = "# ---- inlined into load_model.py from here on ----\n"


def write_hf_folder(folder: Path, model: HFTrained, data: dict[str, np.ndarray], data_bytes: bytes) -> Path:
    """The suite folder of ``model``: ``save_pretrained``'s ``config.json`` (with the ``lsrl_bench`` record) and
    ``model.safetensors``, and the suite's ``load_model.py`` (``lsrl.bench.hf_loader``), ``labels.json``,
    ``circuit.json``, ``data.npz``, ``program.py``, ``README.md`` and ``manifest.json``; loaded back once."""
    from lsrl.bench import hf_loader
    from lsrl.bench.records import record_training

    task = TASKS[model.task]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").unlink(missing_ok=True)
    model.net.hf.save_pretrained(folder)
    (folder / "generation_config.json").unlink(missing_ok=True)  # not read: the folder's files are the manifest's
    (folder / "labels.json").write_text(json.dumps({"available": True, "hooks": model.labels}))
    circuit = model.circuit(data)
    (folder / "circuit.json").write_text(json.dumps(circuit.to_json()))
    (folder / "load_model.py").write_text(Path(hf_loader.__file__).read_text(encoding="utf-8"))
    (folder / "data.npz").write_bytes(data_bytes)
    (folder / "program.py").write_text(program_source(task))
    widths = ", ".join(f"{hook['name']}({hook['width']})" for hook in model.hooks)
    (folder / "README.md").write_text(model_card(task, model.arch, widths, circuit, data, "trained", model.card()))
    record_training(folder, model)  # the accuracies and whether they meet the aim: config.json and the card
    write_manifest(folder)
    loaded = hf_loader.load_folder(folder)
    if loaded.hook_names != [hook["name"] for hook in model.hooks]:
        raise InternalError(f"bench: the folder {folder} just written does not load back with its hooks")
    return folder


def loader_source() -> str:
    """``load_model.py``: ``lsrl/bench/standalone.py`` with the cells' steps of ``lsrl/targets/cell_steps.py``
    written in place of their import, verbatim (the one copy of the gate maths; the file needs torch only)."""
    from lsrl.targets import cell_steps

    loader = Path(standalone.__file__).read_text(encoding="utf-8")
    steps = Path(cell_steps.__file__).read_text(encoding="utf-8").split(STEPS_MARKER, 1)[1]
    line = next(line for line in loader.splitlines(keepends=True) if line.startswith(STEPS_IMPORT))
    return loader.replace(line, "# ---- the cells' steps: lsrl/targets/cell_steps.py, verbatim ----\n\n" + steps, 1)


def program_source(task: Task) -> str:
    """``program.py``: the task's builder (its source, with the names it uses imported from ``lsrl.bench.tasks``
    and its closure's values written out), or its automaton; run, it prints the outputs on the test data."""
    head = f'"""{task.name}: {task.description}"""\n\nfrom pathlib import Path\n\nimport numpy as np\n\n'
    if task.build is None:
        return (head + f"from lsrl.bench.tasks import TASKS\n\nmachine = TASKS[{task.name!r}].automaton()\n"
                + _RUN.format(run="machine.reference(np.argmax(xs, axis=-1)).astype(np.float64)",
                              shown="np.argmax(x[:n], axis=-1).tolist()"))
    names = inspect.getclosurevars(task.build)
    lines = inspect.getsource(task.build).splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("def "))  # after the decorator
    source = textwrap.dedent("\n".join(lines[start:]))
    imported = ", ".join(sorted(names.globals))
    values = "".join(f"{key} = {value!r}\n" for key, value in sorted(names.nonlocals.items()))
    return (head + f"from lsrl.bench.tasks import {imported}\n\n{values}\n\n{source}\n"
            + _RUN.format(run=f"{task.build.__name__}()(xs, check_bounds=False)", shown="x[:n, 0].tolist()"))


MANIFEST_FILES = ("config.json", "model.safetensors", "labels.json", "circuit.json", "data.npz", "program.py",
                  "README.md", "load_model.py")


def write_manifest(folder: Path) -> None:
    """``manifest.json``: the sha256 of each file of ``MANIFEST_FILES`` as written (and of ``rotations.json``
    where the folder has one)."""
    names = [*MANIFEST_FILES, *([ROTATIONS] if (folder / ROTATIONS).is_file() else [])]
    digests = {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in names}
    manifest = {"format": standalone.MANIFEST_FORMAT, "sha256": digests,
                "note": "written by lsrl bench build; the loaders refuse a file whose sha256 differs"}
    (folder / standalone.MANIFEST).write_text(json.dumps(manifest, indent=1))


def tensor_names(layers: list[dict[str, Any]]) -> list[str]:
    """The names of the tensors the config layers use, in order."""
    names = []
    for spec in layers:
        names += [spec[key] for key in ("weight", "bias", "A", "B", "b", "s0", "h0", "c0")
                  if isinstance(spec.get(key), str)]
        names += list(spec.get("parameters", {}).values())
        for part in ("state", "phi", "gamma"):
            names += tensor_names(spec.get(part) or [])
    return names


def describe_layer(spec: dict[str, Any], tensors: dict[str, torch.Tensor]) -> str:
    """A config layer in a few words: its op and width, or its sub-layers."""
    if spec["op"] == "block":
        parts = [f"{part}: " + ", ".join(describe_layer(s, tensors) for s in spec[part])
                 for part in ("state", "phi", "gamma") if spec.get(part)]
        return f"block({'; '.join(parts)})"
    weight = spec.get("weight") or spec.get("B")
    width = spec.get("hidden_size") or spec.get("kwargs", {}).get("hidden_size") or (
        tensors[weight].shape[0] if weight else None)
    return f"{spec['op']}({width})" if width else spec["op"]


def build_suite(root: str | Path, tasks: Iterable[str] | None = None, progress: bool = True,
                tiers: Iterable[str] = ("compiled",), test_sequences: int = TEST_SEQUENCES,
                train_steps: int | None = None, trained_archs: Iterable[str] = TRAINED_ARCHS, workers: int = 1,
                ray_address: str | None = None) -> list[Path]:
    """Write every (task, architecture) folder of each tier of ``tiers`` (``lsrl.bench.tiers.FOLDER_TIERS``, or
    ``"all"``: every tier) under ``root`` (``tier_folder``); returns the folders. ``tasks``: a task name or names,
    default all (for the distractor and rotated tiers all that have them, for the trained one ``TASKS_TRAINED``);
    named tasks must have each tier named, and with ``"all"`` get the tiers they have. ``test_sequences`` below
    the default (1,000) writes a smaller test split, for quick checks of the build (the published suite has the
    default); ``train_steps``: Adam steps of each trained model (default ``lsrl.bench.training.loop.STEPS``);
    ``trained_archs``: the trained tier's architectures (``TRAINED_ARCHS``, and the stock ``transformers`` ones of
    ``lsrl.bench.training.hf.HF_ARCHS``, written by ``write_hf_folder``). A run per task and tier (``build_tier``);
    where the runs run: ``lsrl.grid.run_grid`` (``workers`` processes or the Ray cluster at ``ray_address``, whose
    nodes must all see ``root``); a ``GridError`` names the runs that failed, after the others are written."""
    from lsrl.bench.training.hf import HF_ARCHS

    root = as_path(root, "build_suite: root")
    if tasks is not None and not isinstance(tasks, Iterable):
        raise LsrlError(f"build_suite: tasks must be a task name or names, got {type(tasks).__name__}")
    names = list(TASKS) if tasks is None else [tasks] if isinstance(tasks, str) else list(tasks)
    unknown = [name for name in names if not isinstance(name, str) or name not in TASKS]
    if unknown:
        raise LsrlError(f"unknown benchmark task(s) {unknown}; the tasks are {sorted(TASKS)}")
    tiers = [tiers] if isinstance(tiers, str) else list(tiers) if isinstance(tiers, Iterable) else [tiers]
    every = "all" in tiers
    tiers = list(FOLDER_TIERS) if every else tiers
    if not tiers or any(tier not in FOLDER_TIERS for tier in tiers):
        raise LsrlError(f"build_suite: tiers must be among {FOLDER_TIERS} or 'all', got {tiers!r}")
    if whole_number(test_sequences) is None or test_sequences < 1:
        raise LsrlError(f"build_suite: test_sequences must be a whole number >= 1, got {test_sequences!r}")
    if train_steps is not None and (whole_number(train_steps) is None or train_steps < 1):
        raise LsrlError(f"build_suite: train_steps must be a whole number >= 1, got {train_steps!r}")
    trained_archs = [trained_archs] if isinstance(trained_archs, str) else list(trained_archs) \
        if isinstance(trained_archs, Iterable) else [trained_archs]
    if not trained_archs or any(arch not in (*TRAINED_ARCHS, *HF_ARCHS) for arch in trained_archs):
        raise LsrlError(f"build_suite: trained_archs must be among {(*TRAINED_ARCHS, *HF_ARCHS)}, got "
                        f"{trained_archs!r}"[:200])
    test_sequences = int(test_sequences)
    train_steps = None if train_steps is None else int(train_steps)
    jobs = [(name, tier) for tier in dict.fromkeys(tiers) for name in names
            if _builds(name, tier, named=tasks is not None, every=every)]
    lacking = [f"{name} ({tier})" for name, tier in jobs if not has_tier(name, tier)]
    if lacking:
        raise LsrlError(f"build_suite: only token programs (with two others on their tokens) have the distractor "
                        f"and rotated tiers, and program tasks with named circuit variables the trained one, "
                        f"not {lacking[0]}")
    try:
        root.mkdir(parents=True, exist_ok=True)
        (root / "load_model.py").write_text(loader_source())
    except OSError as error:
        raise cannot_write("build_suite: root", root, error) from None
    runs = [Run(f"{name} ({tier})", build_tier, (root, name, tier, test_sequences, train_steps, tuple(trained_archs)))
            for name, tier in jobs]
    outcome = run_grid("lsrl bench", runs, workers, ray_address, progress)
    try:
        write_root_cards(root)
    except OSError as error:
        raise cannot_write("build_suite: root", root, error) from None
    outcome.check()
    return [folder for folders in outcome.finished for folder in folders]


def build_tier(root: Path, name: str, tier: str, test_sequences: int = TEST_SEQUENCES, train_steps: int | None = None,
               trained_archs: tuple[str, ...] = TRAINED_ARCHS) -> list[Path]:
    """Write the folders of task ``name``'s tier ``tier`` under ``root`` (a run of ``build_suite``); returns them."""
    from lsrl.bench.training.hf import HFTrained

    task = TASKS[name]
    data = task_data(task, test_sequences, tier)
    data_bytes = npz_bytes(data)  # one data.npz for every architecture of the tier (its pairs: the tier's lengths)
    models, program, rotations = tier_models(task, tier, train_steps, dict.fromkeys(trained_archs))
    unrotated = unrotated_model(name) if tier == "rotated" else None  # the truth of the rotated models
    folders = []
    try:
        for arch, model in models.items():
            if isinstance(model, HFTrained):
                folders.append(write_hf_folder(tier_folder(root, name, arch, tier), model, data, data_bytes))
                continue
            truth = tier_circuit(unrotated, arch, data) if unrotated is not None else None
            folders.append(write_model(tier_folder(root, name, arch, tier), task, arch, model, data, data_bytes,
                                       tier, program, rotations.get(arch), truth))
    except OSError as error:
        raise cannot_write("build_suite: root", root, error) from None
    return folders


def _builds(name: str, tier: str, named: bool, every: bool) -> bool:
    """Whether ``build_suite`` writes task ``name``'s tier ``tier``: a named task each tier named (one it lacks is
    an error) or, with ``"all"``, each it has; by default, each it has (the trained tier: ``TASKS_TRAINED``)."""
    if named and not every:
        return True
    return has_tier(name, tier) and (named or tier != "trained" or name in TASKS_TRAINED)
