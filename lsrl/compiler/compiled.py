"""``CompiledProgram``: a path graph of layers, runnable (exactly, layer by layer; in float64 by
``lsrl.compiler.runner``), and its files on disk.

On disk a compiled program is a folder with ``model.json`` (structure) and ``weights.safetensors``
(weights as sparse COO: ``rows``, ``cols``, float64 ``values``; the exact backend adds numerators
and denominators, as int64 or, when they do not fit, as big-endian bytes with offsets). A
``model.diagonal()`` adds its ``eigenbases``: entries in model.json, matrices ``eigenbases.<k>.*``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from lsrl.compiler.diagonal import diagonalise, structured_blocks_note
from lsrl.compiler.labels import PATCHABLE_ROLES, ROLES, UnitLabel, label_violations, units_holding
from lsrl.errors import BackendError, LsrlError, ModelFileError
from lsrl.lang.evaluate import EXACT_MODE, mode_for, patch_array
from lsrl.lang.nodes import Input, Linear, LinState, Multi, ReLU, ReLUState
from lsrl.numbers import EXACT, get_backend, mpq

FORMAT = "lsrl.compiled"
FORMAT_VERSION = 1
_WEIGHT_NAMES = {"Linear": ("A", "b"), "LinState": ("A", "B", "b", "init_state"), "ReLU": (), "Multi": (),
                 "ReLUState": ("A", "B", "b", "init_state")}
_STATE_LAYERS = {"LinState": LinState, "ReLUState": ReLUState}


def _run_exact(layer, x, patched=()):
    """One layer over a batch given as a list (batch) of lists (time) of lists of mpq; ``patched``:
    ``(unit, values)`` pairs that overwrite units (``values[b][t]``), a state's before it is carried."""
    if layer.kind in _STATE_LAYERS:
        return _run_exact_state(layer, x, patched)
    if layer.kind == "ReLU":
        out = [EXACT_MODE.relu(sequence) for sequence in x]
    elif layer.kind == "Multi":
        out = [EXACT_MODE.multi(sequence) for sequence in x]
    else:
        out = [EXACT_MODE.linear(layer.A, layer.b, sequence) for sequence in x]
    for unit, values in patched:
        for sequence, sequence_values in zip(out, values):
            for vector, value in zip(sequence, sequence_values):
                vector[unit] = value
    return out


def _run_exact_state(layer, x, patched):
    """A LinState or ReLUState layer, step by step; patched units overwrite the state it carries."""
    out = []
    zero_bias = EXACT.zeros_vector(layer.dim)
    for b, sequence in enumerate(x):
        drive = EXACT_MODE.linear(layer.B, layer.b, sequence)
        state = EXACT_MODE.initial_state(layer, 1)
        states = []
        for t, step in enumerate(drive):
            state = EXACT_MODE.linear(layer.A, zero_bias, state)
            state = [[s + u for s, u in zip(state[0], step)]]
            if layer.kind == "ReLUState":
                state = EXACT_MODE.relu(state)
            for unit, values in patched:
                state[0][unit] = values[b][t]
            states.append(state[0])
        out.append(states)
    return out


def _run_float(layer, x, patched=()):
    """One layer over a ``(B, T, width)`` float64 batch, by the float runner (so a trace's last layer is
    bit for bit what ``model(xs)`` returns); ``patched`` as for ``_run_exact``, values ``(B, T)``."""
    from lsrl.compiler.runner import build_plan, run_plan

    if layer.kind in _STATE_LAYERS and patched:  # the patched state is the one carried: step by step
        A, B, b = layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy()
        state = np.tile(layer.init_state.to_numpy(), (x.shape[0], 1))
        out = np.empty(x.shape[:2] + (layer.dim,))
        for t in range(x.shape[1]):
            state = state @ A.T + x[:, t] @ B.T + b
            if layer.kind == "ReLUState":
                state = np.maximum(state, 0.0)
            for unit, values in patched:
                state[:, unit] = values[:, t]
            out[:, t] = state
        return out
    out = run_plan(build_plan(x.shape[-1], [layer]), x)
    for unit, values in patched:
        out[:, :, unit] = values
    return out


def _as_object_array(batch, steps, width):
    """An exact batch (lists of lists of lists of mpq) as a ``(B, steps, width)`` object array."""
    result = np.empty((len(batch), steps, width), dtype=object)
    for i, sequence in enumerate(batch):
        for t, vector in enumerate(sequence):
            result[i, t, :] = vector
    return result


class CompiledProgram:
    """A program after debranching: ``layers`` form a path from ``input``."""

    def __init__(self, input_node, layers, backend, stats=None, name="program", labels=None):
        self.input = input_node
        self.layers = list(layers)
        # per layer, a lsrl.UnitLabel per unit: what the unit holds (see lsrl.compiler.labels)
        self.labels = [list(layer) for layer in labels] if labels is not None else None
        self.entangled = frozenset()  # program nodes that cannot be patched by label (see ``patchable``)
        self.backend = get_backend(backend).name
        self.stats = dict(stats or {})
        self.name = name
        self._plan = None  # the float runner's plan (lsrl.compiler.runner), built on first use

    @property
    def output_dim(self) -> int:
        return self.layers[-1].dim if self.layers else self.input.dim

    @property
    def parameter_count(self) -> int:
        """Non-zero weights (A, B, b and initial states)."""
        return sum(getattr(layer, w).nnz for layer in self.layers for w in _WEIGHT_NAMES[layer.kind])

    @property
    def state_size(self) -> int:
        return sum(layer.dim for layer in self.layers if layer.kind in _STATE_LAYERS)

    @property
    def widest_layer(self) -> int:
        return max([layer.dim for layer in self.layers] + [self.input.dim])

    def summary(self) -> str:
        kinds = " -> ".join(f"{layer.kind}({layer.dim})" for layer in self.layers)
        return (
            f"{self.name}: {len(self.layers)} layers, widest {self.widest_layer}, state {self.state_size}, "
            f"{self.parameter_count} non-zero weights [{self.backend}]\n  Input({self.input.dim}) -> {kinds}"
        ) + structured_blocks_note(self.layers)

    def __repr__(self) -> str:
        return f"CompiledProgram({self.name!r}, layers={len(self.layers)}, backend={self.backend!r})"

    def __call__(self, xs, exact: bool = False, check_bounds: bool = True, patch=None):
        """Same contract as ``ForEach.__call__``; ``exact=True`` needs the exact backend.

        ``patch={name: values}`` patches a program node (``values`` as for ``ForEach.trace``): every
        unit labelled with that node is set to what its label says it holds, the program's
        interchange intervention carried out on the units.
        """
        if patch:
            return self.trace(xs, exact, check_bounds, patch)[-1]
        if exact and self.backend != "exact":
            raise LsrlError(f"{self.name}: exact=True needs a program compiled with backend='exact'")
        mode = mode_for(exact)
        batch, squeeze, steps = mode.read(xs, self.input, check_bounds)
        if exact:
            for layer in self.layers:
                batch = _run_exact(layer, batch)
            result = _as_object_array(batch, steps, self.output_dim)
        else:
            from lsrl.compiler.runner import build_plan, run_plan  # numba is imported only to run floats

            if self._plan is None:  # built once: the layers do not change after compiling
                self._plan = build_plan(self.input.dim, self.layers)
            result = run_plan(self._plan, batch)
        return result[0] if squeeze else result

    def trace(self, xs, exact: bool = False, check_bounds: bool = True, patch=None) -> list:
        """Every layer's output per step: one array per layer of ``layers``, ``(T, width)`` (``(B, T,
        width)`` for a batch), exact (needs the exact backend) or float64 as ``model(xs)`` computes it.
        ``patch``: as for ``__call__``."""
        if exact and self.backend != "exact":
            raise LsrlError(f"{self.name}: exact=True needs a program compiled with backend='exact'")
        mode = mode_for(exact)
        batch, squeeze, steps = mode.read(xs, self.input, check_bounds)
        patched = self._patched_units(patch or {}, mode, len(batch), steps)
        outputs = []
        for index, layer in enumerate(self.layers):
            units = patched.get(index, ())
            batch = _run_exact(layer, batch, units) if exact else _run_float(layer, batch, units)
            outputs.append(_as_object_array(batch, steps, layer.dim) if exact else batch)
        return [output[0] for output in outputs] if squeeze else outputs

    @property
    def patchable(self) -> list:
        """Program nodes that ``patch=`` can intervene on: they have units, and their value reaches
        the outputs only through them (not fused into a reader, not sharing a unit with a node that
        is not computed from them, not pruned as always 0)."""
        held = {label.node for layer in self.labels or [] for label in layer if label.role in PATCHABLE_ROLES}
        return sorted(held - self.entangled)

    def label_violations(self, program, xs, exact: bool = True, tolerance: float = 0.0) -> list:
        """Units whose values on ``xs`` break their label, checked against ``program.trace``: a list
        of ``(layer, unit, label, reason)``, empty when every label holds."""
        return label_violations(self.labels, self.trace(xs, exact), program.trace(xs, exact), tolerance)

    def _patched_units(self, patch: dict, mode, count: int, steps: int) -> dict:
        """``{layer index: [(unit, values)]}`` for the units labelled with the patched nodes."""
        if patch and self.labels is None:
            raise LsrlError(f"{self.name}: this model has no unit labels (a file from before labels), so it "
                            "cannot be patched by program node")
        patched = {}  # node name -> (width, values in the mode's batch form)
        for key, values in patch.items():
            name = key if isinstance(key, str) else key.name
            if name in self.entangled:
                raise LsrlError(
                    f"{self.name}: program node {name!r} cannot be patched in the compiled model: its value does "
                    "not reach the outputs only through units labelled with it (it was fused into a reader, "
                    "shares units with another node, or was pruned as always 0); see model.patchable"
                )
            if name not in self.patchable:
                raise LsrlError(
                    f"{self.name}: program node {name!r} has no unit in the compiled model (it was fused into "
                    "the layers that read it, or never existed); patch a node that model.labels names"
                )
            array = patch_array(values, count, steps, f"{self.name}: patch values for {name!r}")
            holder = Input(array.shape[-1], name=f"patch of {name}")
            read = mode.read(array if mode is EXACT_MODE else array.astype(np.float64), holder, False)[0]
            patched[name] = (array.shape[-1], read)
        units = {}
        for index, layer_labels in enumerate(self.labels):
            found = units_holding(enumerate(layer_labels), patched, f"layer {index}")
            if found:
                units[index] = found
        return units

    def diagonal(self) -> "CompiledProgram":
        """The same program with every LinState's ``A`` diagonal (see ``lsrl.compiler.diagonal``)."""
        return diagonalise(self)

    def to_torch(self, arch: str, **options):
        """This program as a ``torch.nn.Module`` of ``arch`` (see ``lsrl.targets.ARCHITECTURES``)."""
        from lsrl.targets import to_torch  # torch is imported only when a target is asked for

        return to_torch(self, arch, **options)

    # ---- files ------------------------------------------------------------------------------
    def save(self, path) -> Path:
        """Write ``path/model.json`` and ``path/weights.safetensors``; returns the folder."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        tensors, layers = {}, []
        for index, layer in enumerate(self.layers):
            weights = {}
            for weight in _WEIGHT_NAMES[layer.kind]:
                key = f"layers.{index}.{weight}"
                tensors.update(_encode_matrix(key, getattr(layer, weight)))
                weights[weight] = key
            spec = {"kind": layer.kind, "name": layer.name, "dim": layer.dim, "weights": weights}
            if self.labels is not None:
                spec["labels"] = [list(label) for label in self.labels[index]]
            layers.append(spec)
        structure = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "name": self.name,
            "backend": self.backend,
            "input": {"name": self.input.name, "dim": self.input.dim, "bounds": _encode_bounds(self.input.bounds),
                      "integer": self.input.integer},
            "layers": layers,
            "stats": self.stats,
        }
        if self.labels is not None:
            structure["entangled"] = sorted(self.entangled)
        if hasattr(self, "eigenbases"):  # a model.diagonal(): eigen_trace needs them
            structure["eigenbases"] = _encode_eigenbases(self.eigenbases, tensors)
        (folder / "model.json").write_text(json.dumps(structure, indent=1))
        save_file(tensors, str(folder / "weights.safetensors"))
        return folder


def load(path) -> CompiledProgram:
    """Read a folder written by ``CompiledProgram.save``.

    Every field is checked before use (structure, array dtypes and lengths, index ranges,
    denominators, shapes against the layer before); a bad file raises ``ModelFileError`` naming
    the layer and the field.
    """
    folder = Path(path)
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
    layers, labels = [], []
    for index, spec in enumerate(_field(structure, "layers", list, where)):
        previous = layers[-1] if layers else node
        layers.append(_decode_layer(spec, index, previous, tensors, backend, f"{folder}: layer {index}"))
        labels.append(_decode_labels(spec, layers[-1], f"{folder}: layer {index} ({layers[-1].name})"))
    stats = _field(structure, "stats", dict, where, default={})
    name = _field(structure, "name", str, where, default="program")
    model = CompiledProgram(node, layers, backend, stats, name, None if None in labels else labels)
    entangled = _field(structure, "entangled", list, where, default=[])
    if not all(isinstance(n, str) for n in entangled):
        raise ModelFileError(f"{where}: field 'entangled' must list node names, got {entangled!r}")
    model.entangled = frozenset(entangled)
    if "eigenbases" in structure:  # absent in a model that is not a model.diagonal(), and in older files
        model.eigenbases = _decode_eigenbases(_field(structure, "eigenbases", list, where), model, tensors, where)
    return model


def _encode_eigenbases(eigenbases, tensors) -> list:
    """``diagonal.eigenbases`` as model.json entries; their matrices are added to ``tensors``."""
    entries = []
    for k, (name, (index, V_inv, drive)) in enumerate(eigenbases.items()):
        keys = {"V_inv": f"eigenbases.{k}.V_inv", "drive": f"eigenbases.{k}.drive"}
        tensors.update(_encode_matrix(keys["V_inv"], V_inv))
        tensors.update(_encode_matrix(keys["drive"], drive))  # V^-1 B: computed in V^-1's backend
        entries.append({"layer": name, "index": index, "backend": V_inv.backend.name, **keys})
    return entries


def _decode_eigenbases(entries, model, tensors, where) -> dict:
    """``{layer name: (index, V^-1, V^-1 B)}`` from model.json's eigenbases entries, every field checked."""
    eigenbases = {}
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


def _decode_labels(spec, layer, where):
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


def _read_structure(folder) -> dict:
    try:
        structure = json.loads((folder / "model.json").read_text())
    except (OSError, ValueError) as error:
        raise ModelFileError(f"cannot load a compiled program from {folder}: {error}") from None
    if not isinstance(structure, dict):
        raise ModelFileError(f"{folder}/model.json: expected a JSON object, got {type(structure).__name__}")
    return structure


def _read_tensors(folder) -> dict:
    try:
        return load_file(str(folder / "weights.safetensors"))
    except OSError as error:
        raise ModelFileError(f"cannot load a compiled program from {folder}: {error}") from None
    except Exception as error:  # safetensors raises its own SafetensorError on a corrupt file
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ModelFileError(f"{folder}/weights.safetensors: not a readable safetensors file ({message})") from None


_MISSING = object()


def _field(mapping, key, kind, where, default=_MISSING):
    """``mapping[key]``, checked to be of type ``kind`` (bool is not an int here)."""
    if key not in mapping:
        if default is not _MISSING:
            return default
        raise ModelFileError(f"{where}: missing field {key!r}")
    value = mapping[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ModelFileError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _decode_input(spec, where) -> Input:
    dim = _field(spec, "dim", int, where)
    bounds = _field(spec, "bounds", list, where)
    integer = _field(spec, "integer", bool, where, default=False)  # files of older versions lack it
    try:
        return Input(dim, name=_field(spec, "name", str, where), bounds=_decode_bounds(bounds), integer=integer)
    except (LsrlError, ValueError, TypeError, ArithmeticError) as error:  # a bound that is no number
        raise ModelFileError(f"{where}: {error}") from None


def _decode_layer(spec, index, previous, tensors, backend, where):
    """One layer of ``model.json`` with its weights, built on ``previous``."""
    if not isinstance(spec, dict):
        raise ModelFileError(f"{where}: expected a JSON object, got {spec!r}")
    kind = _field(spec, "kind", str, where)
    if kind not in _WEIGHT_NAMES:
        raise ModelFileError(f"{where}: unknown layer kind {kind!r}")
    name = _field(spec, "name", str, where)
    where = f"{where} ({kind} '{name}')"
    keys = _field(spec, "weights", dict, where)
    if sorted(keys) != sorted(_WEIGHT_NAMES[kind]):
        raise ModelFileError(f"{where}: weights must be {list(_WEIGHT_NAMES[kind])}, got {sorted(keys)}")
    weights = {w: _decode_matrix(_field(keys, w, str, where), tensors, backend, f"{where}: {w}") for w in keys}
    try:
        if kind == "Linear":
            built = Linear(previous, weights["A"], weights["b"], name=name)
        elif kind in _STATE_LAYERS:
            built = _STATE_LAYERS[kind](
                previous, weights["A"], weights["B"], weights["b"], weights["init_state"], name=name
            )
        else:
            built = (ReLU if kind == "ReLU" else Multi)(previous, name=name)
            built.check()
    except LsrlError as error:
        raise ModelFileError(f"{where}: {error}") from None
    if _field(spec, "dim", int, where) != built.dim:
        raise ModelFileError(f"{where}: field 'dim' says {spec['dim']}, its weights give {built.dim}")
    return built


def _encode_bounds(bounds):
    return [[str(v) if not math.isinf(v) else ("inf" if v > 0 else "-inf") for v in side] for side in bounds]


def _decode_bounds(bounds):
    return tuple([None if v in ("inf", "-inf") else mpq(v) for v in side] for side in bounds)


def _encode_ints(key, values) -> dict:
    if all(-(2**63) <= v < 2**63 for v in values):
        return {key: np.array(values, dtype=np.int64)}
    chunks = [v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True) for v in values]
    offsets = np.cumsum([0] + [len(c) for c in chunks]).astype(np.int64)
    return {f"{key}.bytes": np.frombuffer(b"".join(chunks), dtype=np.uint8).copy(), f"{key}.offsets": offsets}


def _decode_ints(tensors, key, field, where) -> list:
    if f"{key}.{field}" in tensors:
        return [int(v) for v in _array(tensors, key, field, np.int64, where)]
    raw = _array(tensors, key, f"{field}.bytes", np.uint8, where).tobytes()
    offsets = _array(tensors, key, f"{field}.offsets", np.int64, where)
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(raw) or np.any(np.diff(offsets) < 1):
        raise ModelFileError(f"{where}: field '{field}.offsets' does not split its {len(raw)} bytes into numbers")
    return [int.from_bytes(raw[a:b], "big", signed=True) for a, b in zip(offsets[:-1], offsets[1:])]


def _encode_matrix(key, matrix) -> dict:
    entries = list(matrix.entries())
    rows, cols, shape = matrix.shape2d[0], matrix.shape2d[1], 1 if matrix.is_vector else 0
    tensors = {
        f"{key}.shape": np.array([rows, cols, shape], dtype=np.int64),
        f"{key}.rows": np.array([e[0] for e in entries], dtype=np.int64),
        f"{key}.cols": np.array([e[1] for e in entries], dtype=np.int64),
        f"{key}.values": np.array([float(e[2]) for e in entries], dtype=np.float64),
    }
    if matrix.backend is EXACT:
        tensors.update(_encode_ints(f"{key}.num", [int(e[2].numerator) for e in entries]))
        tensors.update(_encode_ints(f"{key}.den", [int(e[2].denominator) for e in entries]))
    return tensors


def _array(tensors, key, field, dtype, where) -> np.ndarray:
    """The 1-D array ``tensors["key.field"]`` of ``dtype``, or ModelFileError naming the field."""
    name = f"{key}.{field}"
    if name not in tensors:
        raise ModelFileError(f"{where}: field {field!r} ({name}) is missing from weights.safetensors")
    array = tensors[name]
    if array.dtype != dtype or array.ndim != 1:
        raise ModelFileError(
            f"{where}: field {field!r} must be a 1-D {np.dtype(dtype).name} array, got {array.dtype} of shape {array.shape}"
        )
    return array


def _decode_matrix(key, tensors, backend, where):
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
    return backend.from_entries(zip(row_index.tolist(), col_index.tolist(), values), (rows, cols), is_vector=bool(is_vector))
