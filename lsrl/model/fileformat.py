"""The file format of a compiled program: a folder with ``model.json``, ``weights.safetensors`` and
``manifest.json`` (their sha256; the folder is written and read as a unit by ``lsrl.model.folders``).

``model.json`` holds the structure (input, layers, labels, stats); ``weights.safetensors`` the
weights as sparse COO: ``rows``, ``cols``, float64 ``values``; the exact backend adds numerators
and denominators, as int64 or, when they do not fit, as big-endian bytes with offsets. A
``model.diagonal()`` adds its ``eigenbases``: entries in model.json, matrices ``eigenbases.<k>.*``.
Every field is checked on loading; a bad file raises ``ModelFileError`` naming the layer and field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file

from lsrl.errors import BackendError, LsrlError, ModelFileError
from lsrl.ir.labels import ROLES, UnitLabel
from lsrl.kinds import NODE_WEIGHTS, Kind
from lsrl.lang.nodes import Input, Linear, LinState, Multi, Node, ReLU, ReLUState
from lsrl.model.compiled import CompiledProgram
from lsrl.model.layers import Eigenbases
from lsrl.model.folders import read_bound
from lsrl.model.saving import FILES, FORMAT, FORMAT_VERSION, Tensors
from lsrl.numbers import EXACT, Backend, Matrix, get_backend, mpq

_STATE_LAYERS = {Kind.LINSTATE: LinState, Kind.RELUSTATE: ReLUState}
_STATELESS_LAYERS = {Kind.RELU: ReLU, Kind.MULTI: Multi}


def load(path: str | Path) -> CompiledProgram:
    """Read a folder written by ``CompiledProgram.save``.

    ``manifest.json`` must list both files with their sha256 (any edit, and a folder of two saves, is
    refused; ``lsrl.model.folders``). Every field is checked before use (structure, array dtypes and
    lengths, index ranges, denominators, shapes against the layer before, labels against
    ``node_widths``); a bad file raises ``ModelFileError`` naming the layer and the field.
    """
    return read_bound(path, "lsrl.load", FILES, _read_model)


def _read_model(folder: Path) -> CompiledProgram:
    """The model of ``folder``, its manifest already checked."""
    structure = _read_structure(folder)
    tensors = _read_tensors(folder)
    where = f"{folder}/model.json"
    if structure.get("format") != FORMAT or structure.get("version") != FORMAT_VERSION:
        raise ModelFileError(f"{folder}: not an lsrl compiled program of format version {FORMAT_VERSION}")
    try:
        backend = get_backend(_field(structure, "backend", str, where))
    except BackendError as error:
        raise ModelFileError(f"{where}: {error}") from None
    node = _decode_input(_field(structure, "input", dict, where), f"{where}: input")
    layers: list[Node] = []
    labels: list[list[UnitLabel] | None] = []
    for index, spec in enumerate(_field(structure, "layers", list, where)):
        previous = layers[-1] if layers else node
        layers.append(_decode_layer(spec, index, previous, tensors, backend, f"{folder}: layer {index}"))
        labels.append(_decode_labels(spec, layers[-1], f"{folder}: layer {index} ({layers[-1].name})"))
    stats = _field(structure, "stats", dict, where, default={})
    name = _field(structure, "name", str, where, default="program")
    labelled = [layer_labels for layer_labels in labels if layer_labels is not None]
    model = CompiledProgram(node, layers, backend, stats, name, labelled if len(labelled) == len(labels) else None)
    entangled = _field(structure, "entangled", list, where, default=[])
    if not all(isinstance(n, str) for n in entangled):
        raise ModelFileError(f"{where}: field 'entangled' must list node names, got {entangled!r}")
    model.entangled = frozenset(entangled)
    model.node_widths = _decode_node_widths(structure, where)
    _check_names(model, where)
    if "eigenbases" in structure:  # absent in a model that is not a model.diagonal(), and in older files
        model.eigenbases = _decode_eigenbases(_field(structure, "eigenbases", list, where), model, tensors, where)
    return model


def _decode_node_widths(structure: dict, where: str) -> dict[str, int] | None:
    """The field ``node_widths`` (program node name -> width), None where absent (a file from before it)."""
    widths = _field(structure, "node_widths", dict, where, default=None)
    if widths is not None and not all(
            isinstance(width, int) and not isinstance(width, bool) and width >= 1 for width in widths.values()):
        raise ModelFileError(f"{where}: field 'node_widths' must map node names to positive integers, got {widths!r}")
    return widths


def _check_names(model: CompiledProgram, where: str) -> None:
    """What the layers' labels, ``entangled`` and ``node_widths`` must agree on: a label names one unit of a
    program node of ``node_widths`` (or of a layer: a diagonal form's new states), once per layer; an empty
    layer list (the model echoes its input) is the compiled form only of a program whose output is its
    Input, whose ``node_widths`` name nothing else."""
    widths = model.node_widths
    if not model.layers and (widths is None or set(widths) != {model.input.name}):
        raise ModelFileError(f"{where}: field 'layers' is empty, but the program computes more than its input "
                             f"(node_widths: {sorted(widths or {})})")
    if widths is None:
        return
    if not model.entangled <= set(widths):
        raise ModelFileError(f"{where}: field 'entangled' names nodes not in 'node_widths': "
                             f"{sorted(model.entangled - set(widths))}")
    widths = {**widths, **{layer.name: layer.dim for layer in model.layers}}  # a diagonal form's new states
    for index, layer_labels in enumerate(model.labels or []):
        at = f"{where}: layer {index} ({model.layers[index].name})"
        if len(set(layer_labels)) != len(layer_labels):
            raise ModelFileError(f"{at}: two units carry one label")
        for unit, label in enumerate(layer_labels):
            if not 0 <= label.index < widths.get(label.node, 0):
                raise ModelFileError(f"{at}: label of unit {unit} names {label.node}[{label.index}], not a unit of "
                                     "a node in 'node_widths' or a layer")


def _decode_eigenbases(entries: list, model: CompiledProgram, tensors: Tensors, where: str) -> Eigenbases:
    """``{layer name: (index, V^-1, V^-1 B)}`` from model.json's eigenbases entries, every field checked."""
    eigenbases: Eigenbases = {}
    names = {layer.name for layer in model.layers}
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ModelFileError(f"{where}: eigenbases entry {k} must be a JSON object, got {entry!r}")
        name = _field(entry, "layer", str, f"{where}: eigenbases entry {k}")
        at = f"{where}: eigenbases entry {k} (layer '{name}')"
        # a rewritten LinState keeps its name, or becomes the cascade name.level0, name.level1, ...
        if name in eigenbases or not {name, f"{name}.level0"} & names:
            raise ModelFileError(f"{at}: field 'layer' must name a rewritten LinState of the model once, "
                                 f"got {name!r}")
        index = _field(entry, "index", int, at)
        if not 0 <= index < len(model.layers):  # the original model has no more layers than its diagonal form
            raise ModelFileError(f"{at}: field 'index' must be in 0..{len(model.layers) - 1}, got {index}")
        try:
            backend = get_backend(_field(entry, "backend", str, at))
        except BackendError as error:
            raise ModelFileError(f"{at}: field 'backend': {error}") from None
        V_inv, drive = (_decode_matrix(_field(entry, field, str, at), tensors, backend, f"{at}: {field}")
                        for field in ("V_inv", "drive"))
        if V_inv.shape2d[0] != V_inv.shape2d[1] or drive.shape2d[0] != V_inv.shape2d[0]:
            raise ModelFileError(f"{at}: V_inv must be square and drive have its rows, got shapes "
                                 f"{V_inv.shape2d} and {drive.shape2d}")
        if index == 0 and drive.shape2d[1] != model.input.dim:  # the first layer's drive reads the input
            raise ModelFileError(f"{at}: drive has {drive.shape2d[1]} columns for an input of {model.input.dim}")
        eigenbases[name] = (index, V_inv, drive)
    return eigenbases


def _decode_labels(spec: dict, layer: Node, where: str) -> list[UnitLabel] | None:
    """The layer's unit labels (None for files written before labels existed)."""
    if "labels" not in spec:
        return None
    labels = _field(spec, "labels", list, where)
    if len(labels) != layer.dim:
        raise ModelFileError(f"{where}: {len(labels)} labels for {layer.dim} units")
    decoded = []
    for unit, label in enumerate(labels):
        if not (isinstance(label, list) and len(label) == 3 and isinstance(label[0], str)
                and isinstance(label[1], int) and label[2] in ROLES):
            raise ModelFileError(f"{where}: label of unit {unit} must be [node, index, role] with a role "
                                 f"in {ROLES}, got {label!r}")
        decoded.append(UnitLabel(*label))
    return decoded


def _read_structure(folder: Path) -> dict:
    try:
        structure = json.loads((folder / "model.json").read_text())
    except RecursionError:
        raise ModelFileError(f"{folder}/model.json: nested too deeply to be an lsrl model") from None
    except (OSError, ValueError) as error:
        raise ModelFileError(f"cannot load a compiled program from {str(folder)!r}: {error}") from None
    if not isinstance(structure, dict):
        raise ModelFileError(f"{folder}/model.json: expected a JSON object, got {type(structure).__name__}")
    return structure


def _read_tensors(folder: Path) -> Tensors:
    try:
        return load_file(str(folder / "weights.safetensors"))
    except OSError as error:
        raise ModelFileError(f"cannot load a compiled program from {str(folder)!r}: {error}") from None
    except Exception as error:  # safetensors raises its own SafetensorError on a corrupt file
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ModelFileError(f"{folder}/weights.safetensors: not a readable safetensors file ({message})") from None


_MISSING = object()


def _field(mapping: dict, key: str, kind: type, where: str, default: Any = _MISSING) -> Any:
    """``mapping[key]``, checked to be of type ``kind`` (bool is not an int here)."""
    if key not in mapping:
        if default is not _MISSING:
            return default
        raise ModelFileError(f"{where}: missing field {key!r}")
    value = mapping[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ModelFileError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _decode_input(spec: dict, where: str) -> Input:
    dim = _field(spec, "dim", int, where)
    bounds = _field(spec, "bounds", list, where)
    integer = _field(spec, "integer", bool, where, default=False)  # files of older versions lack it
    try:
        return Input(dim, name=_field(spec, "name", str, where), bounds=_decode_bounds(bounds), integer=integer)
    except (LsrlError, ValueError, TypeError, ArithmeticError) as error:  # a bound that is no number
        raise ModelFileError(f"{where}: {error}") from None


def _decode_layer(spec: object, index: int, previous: Node, tensors: Tensors, backend: Backend, where: str) -> Node:
    """One layer of ``model.json`` with its weights, built on ``previous``."""
    if not isinstance(spec, dict):
        raise ModelFileError(f"{where}: expected a JSON object, got {spec!r}")
    text = _field(spec, "kind", str, where)
    if text not in NODE_WEIGHTS:
        raise ModelFileError(f"{where}: unknown layer kind {text!r}")
    kind = Kind(text)
    name = _field(spec, "name", str, where)
    where = f"{where} ({kind} '{name}')"
    keys = _field(spec, "weights", dict, where)
    if sorted(keys) != sorted(NODE_WEIGHTS[kind]):
        raise ModelFileError(f"{where}: weights must be {list(NODE_WEIGHTS[kind])}, got {sorted(keys)}")
    weights = {w: _decode_matrix(_field(keys, w, str, where), tensors, backend, f"{where}: {w}") for w in keys}
    built: Node
    try:
        if kind is Kind.LINEAR:
            built = Linear(previous, weights["A"], weights["b"], name=name)
        elif kind in _STATE_LAYERS:
            built = _STATE_LAYERS[kind](
                previous, weights["A"], weights["B"], weights["b"], weights["init_state"], name=name
            )
        else:
            built = _STATELESS_LAYERS[kind](previous, name=name)
            built.check()
    except LsrlError as error:
        raise ModelFileError(f"{where}: {error}") from None
    if _field(spec, "dim", int, where) != built.dim:
        raise ModelFileError(f"{where}: field 'dim' says {spec['dim']}, its weights give {built.dim}")
    return built


def _decode_bounds(bounds: list[list]) -> Any:  # (low, high) lists, checked by Input
    return tuple([None if v in ("inf", "-inf") else mpq(v) for v in side] for side in bounds)


def _decode_ints(tensors: Tensors, key: str, field: str, where: str) -> list[int]:
    if f"{key}.{field}" in tensors:
        return [int(v) for v in _array(tensors, key, field, np.int64, where)]
    raw = _array(tensors, key, f"{field}.bytes", np.uint8, where).tobytes()
    offsets = _array(tensors, key, f"{field}.offsets", np.int64, where)
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(raw) or np.any(np.diff(offsets) < 1):
        raise ModelFileError(f"{where}: field '{field}.offsets' does not split its {len(raw)} bytes into numbers")
    return [int.from_bytes(raw[a:b], "big", signed=True) for a, b in zip(offsets[:-1], offsets[1:])]


def _array(tensors: Tensors, key: str, field: str, dtype: type, where: str) -> np.ndarray:
    """The 1-D array ``tensors["key.field"]`` of ``dtype``, or ModelFileError naming the field."""
    name = f"{key}.{field}"
    if name not in tensors:
        raise ModelFileError(f"{where}: field {field!r} ({name}) is missing from weights.safetensors")
    array = tensors[name]
    if array.dtype != dtype or array.ndim != 1:
        raise ModelFileError(
            f"{where}: field {field!r} must be a 1-D {np.dtype(dtype).name} array, got {array.dtype} of shape "
            f"{array.shape}"
        )
    return array


def _decode_matrix(key: str, tensors: Tensors, backend: Backend, where: str) -> Matrix:
    """A COO matrix, every array checked: lengths, dtypes, index ranges, denominators, finiteness."""
    shape = _array(tensors, key, "shape", np.int64, where)
    if len(shape) != 3 or shape[0] < 0 or shape[1] < 0 or shape[2] not in (0, 1) or (shape[2] and shape[1] != 1):
        raise ModelFileError(f"{where}: field 'shape' must be [rows, cols, is_vector], got {shape.tolist()}")
    rows, cols, is_vector = (int(v) for v in shape)
    row_index = _array(tensors, key, "rows", np.int64, where)
    col_index = _array(tensors, key, "cols", np.int64, where)
    floats = _array(tensors, key, "values", np.float64, where)
    lengths = {"rows": len(row_index), "cols": len(col_index), "values": len(floats)}
    if backend is EXACT:
        numerators, denominators = (_decode_ints(tensors, key, field, where) for field in ("num", "den"))
        lengths.update(num=len(numerators), den=len(denominators))
    if len(set(lengths.values())) != 1:
        raise ModelFileError(f"{where}: fields must have one length (the non-zero count), got {lengths}")
    for field, index, limit in (("rows", row_index, rows), ("cols", col_index, cols)):
        if len(index) and (index.min() < 0 or index.max() >= limit):
            raise ModelFileError(f"{where}: field {field!r} holds an index outside 0..{limit - 1}")
    if len(np.unique(row_index * max(cols, 1) + col_index)) != len(row_index):
        raise ModelFileError(f"{where}: fields 'rows', 'cols' name one entry twice")
    if not np.all(np.isfinite(floats)):
        raise ModelFileError(f"{where}: field 'values' holds NaN or infinite numbers")
    if backend is EXACT:
        if any(d <= 0 for d in denominators):
            raise ModelFileError(f"{where}: field 'den' holds a zero or negative denominator")
        values = [mpq(n, d) for n, d in zip(numerators, denominators)]
        if any(float(v) != f for v, f in zip(values, floats.tolist())):
            raise ModelFileError(f"{where}: field 'values' disagrees with 'num' / 'den'")
    else:
        values = floats.tolist()
    entries = zip(row_index.tolist(), col_index.tolist(), values)
    return backend.from_entries(entries, (rows, cols), is_vector=bool(is_vector))
