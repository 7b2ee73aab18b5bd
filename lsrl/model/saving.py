"""Writing a compiled program in its file format (``lsrl.model.fileformat`` documents it and reads it back):
``model.json``, ``weights.safetensors`` and ``manifest.json``, written as a unit by ``lsrl.model.folders``.

The model imports this module (``model.save``); it knows the model only by its attributes, so that the reader,
which builds models, is the only side that imports ``lsrl.model.compiled``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from safetensors.numpy import save_file

from lsrl.kinds import NODE_WEIGHTS
from lsrl.model.folders import replaced_folder
from lsrl.model.writing import as_path
from lsrl.numbers import EXACT

if TYPE_CHECKING:
    from lsrl.ir.labels import UnitLabel
    from lsrl.lang.nodes import Input, Node
    from lsrl.model.layers import Eigenbases
    from lsrl.numbers import Matrix

Tensors = dict[str, np.ndarray]  # weights.safetensors' arrays by name (a type, for the reader too)

FORMAT = "lsrl.compiled"
FORMAT_VERSION = 1
FILES = ("model.json", "weights.safetensors")  # besides manifest.json


class SavedModel(Protocol):
    """What is written of a model (a ``CompiledProgram``, which imports this module; a model.diagonal() also has
    ``eigenbases``)."""

    name: str
    backend: str
    input: Input
    layers: list[Node]
    labels: list[list[UnitLabel]] | None
    stats: dict
    entangled: frozenset[str]
    node_widths: dict[str, int] | None


def save(model: SavedModel, path: str | Path) -> Path:
    """Write ``model`` as ``path/model.json``, ``path/weights.safetensors`` and ``path/manifest.json``;
    returns the folder.

    The folder is written as a unit (``lsrl.model.folders``): an earlier model there is replaced whole,
    never mixed with this one. A path that cannot be a folder or cannot be written raises
    ``ModelFileError`` naming it, and leaves nothing behind.
    """
    folder = as_path(path, "save")
    with replaced_folder(folder, "save") as staging:
        write_files(model, staging)
    return folder


def write_files(model: SavedModel, folder: Path) -> None:
    """``model.json`` and ``weights.safetensors`` of ``model`` into the existing ``folder`` (no manifest:
    ``replaced_folder`` writes it over everything the folder holds)."""
    structure, tensors = _encoded(model)
    (folder / "model.json").write_text(json.dumps(structure, indent=1))
    save_file(tensors, str(folder / "weights.safetensors"))


def _encoded(model: SavedModel) -> tuple[dict, Tensors]:
    """``(model.json's structure, weights.safetensors' tensors)`` of ``model``."""
    tensors: Tensors = {}
    layers: list[dict] = []
    for index, layer in enumerate(model.layers):
        weights: dict[str, str] = {}
        for weight in NODE_WEIGHTS[layer.kind]:
            key = f"layers.{index}.{weight}"
            tensors.update(_encode_matrix(key, getattr(layer, weight)))
            weights[weight] = key
        spec: dict[str, object] = {"kind": layer.kind, "name": layer.name, "dim": layer.dim, "weights": weights}
        if model.labels is not None:
            spec["labels"] = [list(label) for label in model.labels[index]]
        layers.append(spec)
    structure: dict[str, object] = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "name": model.name,
        "backend": model.backend,
        "input": {"name": model.input.name, "dim": model.input.dim, "bounds": _encode_bounds(model.input.bounds),
                  "integer": model.input.integer},
        "layers": layers,
        "stats": model.stats,
    }
    if model.labels is not None:
        structure["entangled"] = sorted(model.entangled)
    if model.node_widths is not None:
        structure["node_widths"] = model.node_widths
    if hasattr(model, "eigenbases"):  # a model.diagonal(): eigen_trace needs them
        structure["eigenbases"] = _encode_eigenbases(model.eigenbases, tensors)
    return structure, tensors


def _encode_eigenbases(eigenbases: Eigenbases, tensors: Tensors) -> list[dict]:
    """``diagonal.eigenbases`` as model.json entries; their matrices are added to ``tensors``."""
    entries = []
    for k, (name, (index, V_inv, drive)) in enumerate(eigenbases.items()):
        keys = {"V_inv": f"eigenbases.{k}.V_inv", "drive": f"eigenbases.{k}.drive"}
        tensors.update(_encode_matrix(keys["V_inv"], V_inv))
        tensors.update(_encode_matrix(keys["drive"], drive))  # V^-1 B: computed in V^-1's backend
        entries.append({"layer": name, "index": index, "backend": V_inv.backend.name, **keys})
    return entries


def _encode_bounds(bounds: tuple[list, ...]) -> list[list[str]]:
    return [[str(v) if not math.isinf(v) else ("inf" if v > 0 else "-inf") for v in side] for side in bounds]


def _encode_ints(key: str, values: list[int]) -> Tensors:
    if all(-(2**63) <= v < 2**63 for v in values):
        return {key: np.array(values, dtype=np.int64)}
    chunks = [v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True) for v in values]
    offsets = np.cumsum([0] + [len(c) for c in chunks]).astype(np.int64)
    return {f"{key}.bytes": np.frombuffer(b"".join(chunks), dtype=np.uint8).copy(), f"{key}.offsets": offsets}


def _encode_matrix(key: str, matrix: Matrix) -> Tensors:
    entries = list(matrix.entries())
    rows, cols, shape = matrix.shape2d[0], matrix.shape2d[1], 1 if matrix.is_vector else 0
    tensors = {
        f"{key}.shape": np.array([rows, cols, shape], dtype=np.int64),
        f"{key}.rows": np.array([e[0] for e in entries], dtype=np.int64),
        f"{key}.cols": np.array([e[1] for e in entries], dtype=np.int64),
        f"{key}.values": np.array([float(e[2]) for e in entries], dtype=np.float64),
    }
    if matrix.backend is EXACT:
        fractions = [e[2] for e in entries if not isinstance(e[2], float)]  # all of them: the exact backend's mpq
        tensors.update(_encode_ints(f"{key}.num", [int(v.numerator) for v in fractions]))
        tensors.update(_encode_ints(f"{key}.den", [int(v.denominator) for v in fractions]))
    return tensors
