"""Reading a suite folder back: ``load`` (``lsrl.bench.load``), its model, unit labels, data and circuit, every file
checked against the folder's manifest; a folder missing is built first (``lsrl.bench.build``).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from lsrl.bench import hf_loader, standalone
from lsrl.bench.build import TRAINED_ARCHS, build_suite, tier_folder
from lsrl.bench.circuit import Circuit
from lsrl.bench.hf_loader import RECORD, SteppedModel
from lsrl.bench.records import read_training
from lsrl.bench.tasks import TASKS
from lsrl.bench.tiers import FOLDER_TIERS, has_tier
from lsrl.errors import LsrlError, ModelFileError, shown
from lsrl.ir.labels import UnitLabel
from lsrl.model.writing import as_path

if TYPE_CHECKING:
    from torch import nn

DEFAULT_ROOT = Path(os.environ.get("LSRL_BENCH", Path.home() / ".cache" / "lsrl" / "bench"))


class _Parts(NamedTuple):
    model: nn.Module
    labels: dict[str, list[UnitLabel]] | None
    data: dict[str, np.ndarray]
    circuit: Circuit


class Folder(_Parts):
    """What ``load`` returns: a suite folder's model, unit labels, data and circuit (it unpacks as these four), and
    ``training``: a trained folder's record (``lsrl.bench.records.training_record``: the measured task and
    per-variable interchange-intervention accuracies, the ``"lengths"`` they were measured and are scored on,
    ``"aim"`` and ``"meets_aim"``: whether the labels count as faithful), ``None`` in the other tiers."""

    training: dict[str, Any] | None

    def __new__(cls, model: nn.Module, labels: dict[str, list[UnitLabel]] | None, data: dict[str, np.ndarray],
                circuit: Circuit, training: dict[str, Any] | None = None) -> Folder:
        folder = super().__new__(cls, model, labels, data, circuit)
        folder.training = training
        return folder


def load(name: str, root: str | Path | None = None, tier: str = "compiled") -> Folder:
    """``(model, labels, data, circuit)`` of the suite folder ``name`` (``"task/arch"``; ``"task"`` alone is its
    ``path`` model, or its first architecture) of tier ``tier`` (``lsrl.bench.tiers.FOLDER_TIERS``) under ``root``
    (default ``$LSRL_BENCH`` or ``~/.cache/lsrl/bench``; a task missing there is built first: for the trained tier,
    its ``lstm`` and ``gru``, or the stock ``transformers`` arch asked for (``mamba``, ``mamba2``, ``hawk``,
    ``griffin``), trained for ``lsrl.bench.training.loop.STEPS`` steps; such a folder's model is
    ``lsrl.bench.hf_loader.SteppedModel``).

    ``model``: a ``torch.nn.Module`` built by the folder's ``load_model.py`` (``lsrl.bench.standalone``; plain
    torch layers), ``(B, T, d_in) -> (B, T, d_out)``, with ``model.run_with_cache(xs, patch=...)`` and one hook
    per labelled site (``model.hook_names``). ``labels``: ``{hook name: [UnitLabel per unit]}`` (the keys are
    exactly the hook names), or ``None`` if the folder has no unit labels. ``data``: a dict of numpy arrays
    (``data.npz``). ``circuit``: the ``lsrl.bench.circuit.Circuit`` of ``circuit.json``. ``training`` (an
    attribute, not unpacked): a trained folder's record, with ``"meets_aim"``: whether its measured task and
    interchange-intervention accuracies all reach the aim (0.95), i.e. whether its labels count as faithful.

    Every file read is checked against the folder's ``manifest.json`` (sha256) and every field of it; a
    folder changed after its build, corrupt or inconsistent is a ``ModelFileError`` naming the file and field.
    """
    if not isinstance(name, str):
        raise LsrlError(f"bench.load: name must be 'task' or 'task/arch', got {shown(name)}")
    root = as_path(root, "bench.load: root") if root is not None else DEFAULT_ROOT
    task, _, arch = name.partition("/")
    if task not in TASKS:
        raise LsrlError(f"unknown benchmark task {task!r}; the tasks are {sorted(TASKS)}")
    if tier not in FOLDER_TIERS or not has_tier(task, tier):
        raise LsrlError(f"benchmark task {task!r} has no tier {tier!r}; the tiers are {FOLDER_TIERS} (only token "
                        f"programs have the distractor and rotated ones, tasks with named circuit variables the "
                        f"trained one)")
    from lsrl.bench.training.hf import HF_ARCHS

    archs = (*TRAINED_ARCHS, *HF_ARCHS) if tier == "trained" else TASKS[task].archs
    arch = arch or ("path" if "path" in archs else archs[0])
    if arch not in archs:
        raise LsrlError(f"benchmark task {task!r} has no architecture {arch!r} in tier {tier!r}; it has {archs}")
    folder = tier_folder(root, task, arch, tier)
    if not (folder / "config.json").is_file():
        build_suite(root, [task], progress=False, tiers=[tier],
                    trained_archs=[arch] if arch in HF_ARCHS else TRAINED_ARCHS)
    model: standalone.Layers | SteppedModel
    try:
        if arch in HF_ARCHS:
            model, circuit = load_hf_folder(folder)
        else:
            model = standalone.load_folder(folder)
            standalone.verify_checksums(folder, ("labels.json", "data.npz", "circuit.json"))
            circuit = Circuit.from_json(_json_object(folder / "circuit.json"))
        labels = _read_labels(folder / "labels.json", model.hook_names)
        data = _read_data(folder / "data.npz")
        training = read_training(folder) if tier == "trained" else None  # checked by the loaders against the manifest
    except (standalone.SuiteFileError, ValueError, KeyError, TypeError) as error:
        raise ModelFileError(f"{folder}: {error}" if not isinstance(error, standalone.SuiteFileError)
                             else str(error)) from None
    return Folder(model, labels, data, circuit, training)


_SPLIT_ARRAYS = tuple(f"{split}_{kind}" for split in ("train", "test") for kind in ("inputs", "outputs", "lengths"))


def _read_labels(path: Path, hooks: list[str]) -> dict[str, list[UnitLabel]] | None:
    """``labels.json``'s unit labels as ``UnitLabel``s, each checked to be ``[node, index, role]``, one entry per
    hook of the model."""
    stored = _json_object(path)
    if set(stored) != {"available", "hooks"} or not isinstance(stored["available"], bool):
        raise standalone.SuiteFileError(f"{path}: must hold exactly the fields 'available' (true or false) and "
                                        f"'hooks'")
    layers = stored["hooks"]
    if (layers is None) != (not stored["available"]):
        raise standalone.SuiteFileError(f"{path}: field 'hooks' must be null exactly when 'available' is false")
    if layers is None:
        return None
    if not isinstance(layers, dict) or sorted(layers) != sorted(hooks):
        raise standalone.SuiteFileError(f"{path}: field 'hooks' must map exactly the model's hook names to units")

    def units(layer: object, where: str) -> list[UnitLabel]:
        if not isinstance(layer, list):
            raise standalone.SuiteFileError(f"{path}: {where} must be a list of [node, index, role] units")
        for i, unit in enumerate(layer):
            if not (isinstance(unit, list) and len(unit) == 3 and isinstance(unit[0], str)
                    and isinstance(unit[1], int) and not isinstance(unit[1], bool) and isinstance(unit[2], str)):
                raise standalone.SuiteFileError(f"{path}: {where}[{i}] must be [node, index, role], got {unit!r}"[:200])
        return [UnitLabel(*unit) for unit in layer]

    return {key: units(layer, f"hooks[{key!r}]") for key, layer in layers.items()}


def _json_object(path: Path) -> dict:
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise standalone.SuiteFileError(f"{path}: cannot be read as JSON ({str(error).splitlines()[0]})") from None
    if not isinstance(stored, dict):
        raise standalone.SuiteFileError(f"{path}: must be a JSON object")
    return stored


def _read_data(path: Path) -> dict[str, np.ndarray]:
    """``data.npz``'s arrays (no pickled objects), with the six arrays of the two splits."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            data = dict(stored)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise standalone.SuiteFileError(f"{path}: not a readable .npz file ({str(error).splitlines()[0]})") from None
    missing = [key for key in _SPLIT_ARRAYS if key not in data]
    if missing:
        raise standalone.SuiteFileError(f"{path}: missing array {missing[0]!r}")
    return data


def is_hf_folder(folder: str | Path) -> bool:
    """Whether a suite folder holds a stock ``transformers`` model (its ``config.json`` has the record)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and isinstance(config.get(RECORD), dict)


def load_hf_folder(folder: Path) -> tuple[SteppedModel, Circuit]:
    """The folder's ``SteppedModel`` (``from_pretrained``) and ``Circuit``; ``ModelFileError`` naming the file when
    a file differs from the manifest or is malformed."""
    try:
        net = hf_loader.load_folder(folder)
        standalone.verify_checksums(folder, ("labels.json", "data.npz", "circuit.json", "load_model.py"))
        circuit = Circuit.from_json(json.loads((folder / "circuit.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ModelFileError(f"{folder}: {' '.join(str(error).split())}"[:300]) from None
    return net, circuit
