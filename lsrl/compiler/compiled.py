"""``CompiledProgram``: a path graph of layers, runnable (exactly, layer by layer; in float64 by
``lsrl.compiler.runner``), and its files on disk.

On disk a compiled program is a folder with ``model.json`` (structure) and ``weights.safetensors``
(weights as sparse COO: ``rows``, ``cols``, float64 ``values``; the exact backend adds numerators
and denominators, as int64 or, when they do not fit, as big-endian bytes with offsets).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from lsrl.compiler.diagonal import diagonalise, structured_blocks_note
from lsrl.errors import LsrlError
from lsrl.lang.evaluate import EXACT_MODE, mode_for
from lsrl.lang.nodes import Input, Linear, LinState, Multi, ReLU
from lsrl.numbers import EXACT, get_backend, mpq

FORMAT = "lsrl.compiled"
FORMAT_VERSION = 1
_WEIGHT_NAMES = {"Linear": ("A", "b"), "LinState": ("A", "B", "b", "init_state"), "ReLU": (), "Multi": ()}


def _run_exact(layer, x):
    """One layer over a batch given as a list (batch) of lists (time) of lists of mpq."""
    if layer.kind == "ReLU":
        return [EXACT_MODE.relu(sequence) for sequence in x]
    if layer.kind == "Multi":
        return [EXACT_MODE.multi(sequence) for sequence in x]
    if layer.kind == "Linear":
        return [EXACT_MODE.linear(layer.A, layer.b, sequence) for sequence in x]
    out = []
    zero_bias = EXACT.zeros_vector(layer.dim)
    for sequence in x:
        drive = EXACT_MODE.linear(layer.B, layer.b, sequence)
        state = EXACT_MODE.initial_state(layer, 1)
        states = []
        for step in drive:
            state = EXACT_MODE.linear(layer.A, zero_bias, state)
            state = [[s + u for s, u in zip(state[0], step)]]
            states.append(state[0])
        out.append(states)
    return out


class CompiledProgram:
    """A program after debranching: ``layers`` form a path from ``input``."""

    def __init__(self, input_node, layers, backend, stats=None, name="program"):
        self.input = input_node
        self.layers = list(layers)
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
        return sum(layer.dim for layer in self.layers if layer.kind == "LinState")

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

    def __call__(self, xs, exact: bool = False):
        """Same contract as ``ForEach.__call__``; ``exact=True`` needs the exact backend."""
        if exact and self.backend != "exact":
            raise LsrlError(f"{self.name}: exact=True needs a program compiled with backend='exact'")
        mode = mode_for(exact)
        batch, squeeze = mode.read(xs, self.input)
        if exact:
            for layer in self.layers:
                batch = _run_exact(layer, batch)
            count = len(batch)
            steps = len(batch[0]) if count else 0
            result = np.empty((count, steps, self.output_dim), dtype=object)
            for i, sequence in enumerate(batch):
                for t, vector in enumerate(sequence):
                    result[i, t, :] = vector
        else:
            from lsrl.compiler.runner import build_plan, run_plan  # numba is imported only to run floats

            if self._plan is None:  # built once: the layers do not change after compiling
                self._plan = build_plan(self.input.dim, self.layers)
            result = run_plan(self._plan, batch)
        return result[0] if squeeze else result

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
            layers.append({"kind": layer.kind, "name": layer.name, "dim": layer.dim, "weights": weights})
        structure = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "name": self.name,
            "backend": self.backend,
            "input": {"name": self.input.name, "dim": self.input.dim, "bounds": _encode_bounds(self.input.bounds)},
            "layers": layers,
            "stats": self.stats,
        }
        (folder / "model.json").write_text(json.dumps(structure, indent=1))
        save_file(tensors, str(folder / "weights.safetensors"))
        return folder


def load(path) -> CompiledProgram:
    """Read a folder written by ``CompiledProgram.save``."""
    folder = Path(path)
    try:
        structure = json.loads((folder / "model.json").read_text())
        tensors = load_file(str(folder / "weights.safetensors"))
    except (OSError, ValueError) as error:
        raise LsrlError(f"cannot load a compiled program from {folder}: {error}") from None
    if structure.get("format") != FORMAT or structure.get("version") != FORMAT_VERSION:
        raise LsrlError(f"{folder}: not an lsrl compiled program of format version {FORMAT_VERSION}")
    backend = get_backend(structure["backend"])
    spec = structure["input"]
    node = Input(spec["dim"], name=spec["name"], bounds=_decode_bounds(spec["bounds"]))
    layers = []
    for layer in structure["layers"]:
        weights = {w: _decode_matrix(key, tensors, backend) for w, key in layer["weights"].items()}
        previous = layers[-1] if layers else node
        if layer["kind"] == "Linear":
            built = Linear(previous, weights["A"], weights["b"], name=layer["name"])
        elif layer["kind"] == "LinState":
            built = LinState(previous, weights["A"], weights["B"], weights["b"], weights["init_state"], name=layer["name"])
        elif layer["kind"] == "ReLU":
            built = ReLU(previous, name=layer["name"])
        elif layer["kind"] == "Multi":
            built = Multi(previous, name=layer["name"])
        else:
            raise LsrlError(f"{folder}: unknown layer kind {layer['kind']!r}")
        layers.append(built)
    return CompiledProgram(node, layers, backend, structure.get("stats"), structure.get("name", "program"))


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


def _decode_ints(key, tensors) -> list:
    if key in tensors:
        return [int(v) for v in tensors[key]]
    raw, offsets = tensors[f"{key}.bytes"].tobytes(), tensors[f"{key}.offsets"]
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


def _decode_matrix(key, tensors, backend):
    rows, cols, is_vector = (int(v) for v in tensors[f"{key}.shape"])
    row_index, col_index = tensors[f"{key}.rows"].tolist(), tensors[f"{key}.cols"].tolist()
    if backend is EXACT:
        values = [mpq(n, d) for n, d in zip(_decode_ints(f"{key}.num", tensors), _decode_ints(f"{key}.den", tensors))]
    else:
        values = tensors[f"{key}.values"].tolist()
    return backend.from_entries(zip(row_index, col_index, values), (rows, cols), is_vector=bool(is_vector))
