"""Load a model of the lsrl benchmark suite with PyTorch and safetensors only (no lsrl needed).

    from load_model import load_folder
    net = load_folder("SUITE/parity/rnn")            # a torch.nn.Module
    outputs = net(torch.as_tensor(inputs))            # (B, T, d_in) -> (B, T, d_out)

``config.json`` lists the model's layers (``"layers"``), applied in order. Each names its tensors in
``model.safetensors`` and is one of:

- ``linear``: ``torch.nn.Linear`` (``weight``, ``bias`` or null);  ``relu``: ``torch.nn.ReLU``;
- ``multiply_halves``: the first half of the features times the second half (a gate);
- ``linear_recurrence``: ``s_t = A s_{t-1} + B x_t + b`` from ``s_0 = s0``, outputs ``s_t``;
- ``torch.nn.RNN`` / ``torch.nn.GRU`` / ``torch.nn.LSTM``: the stock module built from ``kwargs``
  (batch first) with its layer-0 ``parameters``, run from the initial state ``h0`` (and ``c0``);
  outputs its hidden states;
- ``relu_gru`` / ``relu_lstm``: ``torch.nn.GRU`` / ``torch.nn.LSTM``'s equations and parameter
  layout (gate orders r, z, n and i, f, g, o) with ReLU in place of every sigmoid and tanh (the
  cells of the LSRL paper's Apps. C and D);
- ``block``: ``phi(state(x))``, times ``gamma(x)`` when ``gamma`` is given (each a list of layers);
- ``positive``: 1.0 where the input is > 0, else 0.0 (an automaton's accept readout).

``load_folder`` first checks the folder against ``manifest.json`` (the sha256 of every file, written by
``lsrl bench build``): a ``config.json`` or ``model.safetensors`` changed after the build is refused, since
an edit can load silently and change the outputs (a layer removed, another ``nonlinearity``). Then it
checks every field of ``config.json`` (types, allowed values, no unknown fields) and every layer against
the tensors (names, shapes, dtype, finite values, widths from layer to layer, every tensor used). Each
problem is one ``SuiteFileError`` (a ``ValueError``) whose one-line message names the file and the field.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

FORMAT = "lsrl.bench"
VERSION = 2  # version 1 folders (no manifest.json) are refused: rebuild them with ``lsrl bench build``
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "lsrl.bench.manifest"
MODEL_FILES = ("config.json", "model.safetensors")  # the files load_folder reads, checked against the manifest
DTYPES = ("float32", "float64")
CONFIG_FIELDS = ("format", "version", "task", "architecture", "dtype", "input_size", "output_size", "layers", "loader")
STOCK = {"torch.nn.RNN": 1, "torch.nn.GRU": 3, "torch.nn.LSTM": 4}  # op -> gate blocks
RELU_CELLS = {"relu_gru": 3, "relu_lstm": 4}
FIELDS = {  # op -> its fields (all required; "bias", "c0" and "gamma" may be null)
    "linear": ("op", "weight", "bias"), "relu": ("op",), "multiply_halves": ("op",), "positive": ("op",),
    "linear_recurrence": ("op", "A", "B", "b", "s0"), "block": ("op", "state", "phi", "gamma"),
    **{op: ("op", "kwargs", "parameters", "h0", "c0") for op in STOCK},
    **{op: ("op", "hidden_size", "parameters", "h0", "c0") for op in RELU_CELLS},
}
_CHUNK = 1 << 20


class SuiteFileError(ValueError):
    """A suite folder that is missing, corrupt, changed after its build or inconsistent: the one-line message names
    the file and the field."""


def load_folder(folder: str | Path) -> nn.Module:
    """The model of a suite folder (``config.json`` + ``model.safetensors``), in eval mode, after the checks of the
    module docstring (``SuiteFileError`` on the first problem)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SuiteFileError(f"{folder}: no such folder of the benchmark suite")
    verify_checksums(folder, MODEL_FILES)
    config = read_config(folder)
    tensors = read_tensors(folder)
    check_layers(config, tensors, folder)
    return Layers(config["layers"], tensors).eval()


# ---- checksums ----------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: Path) -> dict[str, str]:
    """``{file name: sha256}`` from the folder's ``manifest.json``."""
    path = folder / MANIFEST
    if not path.is_file():
        raise SuiteFileError(f"{path}: missing; the folder was not written by `lsrl bench build` (or by an older "
                             f"version without checksums): rebuild it")
    manifest = _json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise SuiteFileError(f"{path}: field 'format' must be {MANIFEST_FORMAT!r}")
    files = manifest.get("sha256")
    if not (isinstance(files, dict) and all(isinstance(k, str) and isinstance(v, str) and len(v) == 64
                                            for k, v in files.items())):
        raise SuiteFileError(f"{path}: field 'sha256' must map file names to 64-digit hex digests")
    return files


def verify_checksums(folder: Path, names: tuple[str, ...]) -> None:
    """Each named file exists and has the sha256 that ``manifest.json`` records for it."""
    files = read_manifest(folder)
    for name in names:
        if name not in files:
            raise SuiteFileError(f"{folder / MANIFEST}: field 'sha256' has no checksum of {name}")
        path = folder / name
        if not path.is_file():
            raise SuiteFileError(f"{path}: missing")
        if sha256(path) != files[name]:
            raise SuiteFileError(f"{path}: its sha256 differs from the one in {MANIFEST}: the file was changed after "
                                 f"`lsrl bench build` wrote it; rebuild the folder")


# ---- config.json ---------------------------------------------------------------------------------------


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SuiteFileError(f"{path}: cannot be read ({error.strerror or error})") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise SuiteFileError(f"{path}: not valid JSON ({str(error).splitlines()[0]})") from None


def _field(mapping: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str,
           nullable: bool = False) -> Any:
    """``mapping[key]`` of type ``kind`` (a bool is no int here), or a ``SuiteFileError`` naming the field."""
    if key not in mapping:
        raise SuiteFileError(f"{where}: missing field {key!r}")
    value = mapping[key]
    if value is None and nullable:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds) + (" or null" if nullable else "")
        raise SuiteFileError(f"{where}: field {key!r} must be {names}, got {json.dumps(value)[:60]}")
    return value


def _count(mapping: dict[str, Any], key: str, where: str) -> int:
    value = _field(mapping, key, int, where)
    if value < 1:
        raise SuiteFileError(f"{where}: field {key!r} must be at least 1, got {value}")
    return value


def _only(mapping: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise SuiteFileError(f"{where}: unknown field {unknown[0]!r}; the fields are {list(allowed)}")


def read_config(folder: Path) -> dict[str, Any]:
    """``config.json``, its top-level fields checked (the layers are checked against the tensors)."""
    path = folder / "config.json"
    config = _json(path)
    where = str(path)
    if not isinstance(config, dict):
        raise SuiteFileError(f"{where}: must be a JSON object, got {type(config).__name__}")
    _only(config, CONFIG_FIELDS, where)
    if _field(config, "format", str, where) != FORMAT:
        raise SuiteFileError(f"{where}: field 'format' must be {FORMAT!r}, got {config['format']!r}")
    if _field(config, "version", int, where) != VERSION:
        raise SuiteFileError(f"{where}: field 'version' must be {VERSION}, got {config['version']} (rebuild the "
                             f"folder with this version of `lsrl bench build`)")
    for key in ("task", "architecture", "loader"):
        _field(config, key, str, where)
    if _field(config, "dtype", str, where) not in DTYPES:
        raise SuiteFileError(f"{where}: field 'dtype' must be one of {list(DTYPES)}, got {config['dtype']!r}")
    _count(config, "input_size", where)
    _count(config, "output_size", where)
    if not _field(config, "layers", list, where):
        raise SuiteFileError(f"{where}: field 'layers' must list at least one layer")
    return config


def read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    path = folder / "model.safetensors"
    try:
        return load_file(str(path))
    except OSError as error:
        raise SuiteFileError(f"{path}: cannot be read ({error.strerror or error})") from None
    except Exception as error:  # safetensors raises its own SafetensorError on a corrupt file
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise SuiteFileError(f"{path}: not a readable safetensors file ({message})") from None


# ---- the layers, against the tensors -----------------------------------------------------------------------


class _LayerCheck:
    """Walks the layers with the width of the features between them; records the tensors used."""

    def __init__(self, tensors: dict[str, torch.Tensor], dtype: torch.dtype, config_path: str,
                 weights_path: str) -> None:
        self.tensors, self.dtype, self.used = tensors, dtype, set()
        self.config_path, self.weights_path = config_path, weights_path

    def at(self, where: str) -> str:
        return f"{self.config_path}: {where}"

    def fail(self, where: str, message: str) -> None:
        raise SuiteFileError(f"{self.at(where)}: {message}")

    def size(self, name: Any, where: str, dim: int, axis: int = 0) -> int:
        """The length along ``axis`` of the ``dim``-dimensional tensor ``name`` (its shape is checked by ``tensor``)."""
        tensor = self.named(name, where)
        if tensor.dim() != dim:
            self.fail(where, f"tensor {name!r} has shape {tuple(tensor.shape)}, the layer needs {dim} dimensions")
        return tensor.shape[axis]

    def named(self, name: Any, where: str) -> torch.Tensor:
        if not isinstance(name, str) or name not in self.tensors:
            self.fail(where, f"must name a tensor of {self.weights_path}, got {json.dumps(name)[:60]}")
        return self.tensors[name]

    def tensor(self, name: Any, where: str, shape: tuple[int, ...]) -> None:
        """``name`` names a tensor of the file, of ``shape``, of the config's dtype, finite."""
        tensor = self.named(name, where)
        if tuple(tensor.shape) != shape:
            self.fail(where, f"tensor {name!r} has shape {tuple(tensor.shape)}, the layer needs {shape}")
        if tensor.dtype != self.dtype:
            self.fail(where, f"tensor {name!r} is {tensor.dtype}, the config's dtype is {self.dtype}")
        if not bool(torch.isfinite(tensor).all()):
            self.fail(where, f"tensor {name!r} holds NaN or infinite values")
        self.used.add(name)

    def layers(self, specs: Any, width: int, where: str) -> int:
        if not isinstance(specs, list):
            self.fail(where, f"must be a list of layers, got {json.dumps(specs)[:60]}")
        for i, spec in enumerate(specs):
            width = self.layer(spec, width, f"{where}[{i}]")
        return width

    def layer(self, spec: Any, width: int, where: str) -> int:
        """The output width of one layer on ``width`` input features."""
        if not isinstance(spec, dict):
            self.fail(where, f"must be an object, got {json.dumps(spec)[:60]}")
        op = spec.get("op")
        if op not in FIELDS:
            self.fail(where, f"field 'op' must be one of {sorted(FIELDS)}, got {json.dumps(op)[:60]}")
        fields = FIELDS[op]
        _only(spec, fields, self.at(where))
        missing = [key for key in fields if key not in spec]
        if missing:
            self.fail(where, f"missing field {missing[0]!r} for op {op!r}")
        if op in ("relu", "positive"):
            return width
        if op == "multiply_halves":
            if width % 2:
                self.fail(where, f"multiply_halves needs an even number of features, gets {width}")
            return width // 2
        if op == "linear":
            out = self.size(spec["weight"], f"{where}.weight", 2)
            self.tensor(spec["weight"], f"{where}.weight", (out, width))
            if spec["bias"] is not None:
                self.tensor(spec["bias"], f"{where}.bias", (out,))
            return out
        if op == "linear_recurrence":
            size = self.size(spec["s0"], f"{where}.s0", 1)
            for key, shape in (("A", (size, size)), ("B", (size, width)), ("b", (size,)), ("s0", (size,))):
                self.tensor(spec[key], f"{where}.{key}", shape)
            return size
        if op == "block":
            if not isinstance(spec["state"], list) or not spec["state"]:
                self.fail(f"{where}.state", "must list at least one layer")
            state = self.layers(spec["state"], width, f"{where}.state")
            out = self.layers(spec["phi"], state, f"{where}.phi")
            if spec["gamma"] is not None:
                gate = self.layers(spec["gamma"], width, f"{where}.gamma")
                if gate != out:
                    self.fail(f"{where}.gamma", f"outputs {gate} features, phi outputs {out}")
            return out
        return self.recurrent(op, spec, width, where)

    def recurrent(self, op: str, spec: dict[str, Any], width: int, where: str) -> int:
        if op in STOCK:
            gates, names = STOCK[op], ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
            kwargs, at = spec["kwargs"], f"{where}.kwargs"
            if not isinstance(kwargs, dict):
                self.fail(at, f"must be an object, got {json.dumps(kwargs)[:60]}")
            allowed = ("input_size", "hidden_size") + (("nonlinearity",) if op == "torch.nn.RNN" else ())
            _only(kwargs, allowed, self.at(at))
            hidden = _count(kwargs, "hidden_size", self.at(at))
            if _count(kwargs, "input_size", self.at(at)) != width:
                self.fail(at, f"field 'input_size' is {kwargs['input_size']}, the layer gets {width} features")
            if op == "torch.nn.RNN" and _field(kwargs, "nonlinearity", str, self.at(at)) not in ("tanh", "relu"):
                self.fail(at, f"field 'nonlinearity' must be 'tanh' or 'relu', got {kwargs['nonlinearity']!r}")
        else:
            gates, names = RELU_CELLS[op], ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
            hidden = _count(spec, "hidden_size", self.at(where))
        parameters = spec["parameters"]
        if not isinstance(parameters, dict) or sorted(parameters) != sorted(names):
            self.fail(f"{where}.parameters", f"must map exactly {list(names)} to tensor names, got "
                                             f"{json.dumps(parameters)[:80]}")
        for name, shape in zip(names, ((gates * hidden, width), (gates * hidden, hidden), (gates * hidden,),
                                       (gates * hidden,))):
            self.tensor(parameters[name], f"{where}.parameters.{name}", shape)
        self.tensor(spec["h0"], f"{where}.h0", (hidden,))
        if op in ("torch.nn.LSTM", "relu_lstm"):
            self.tensor(spec["c0"], f"{where}.c0", (hidden,))
        elif spec["c0"] is not None:
            self.fail(f"{where}.c0", f"must be null for {op!r} (only an LSTM has a cell state)")
        return hidden


def check_layers(config: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> None:
    """Every layer of ``config`` against ``tensors``: fields, tensor names, shapes, dtype, finite values, the widths
    from ``input_size`` to ``output_size``, and every tensor used by some layer."""
    check = _LayerCheck(tensors, getattr(torch, config["dtype"]), str(folder / "config.json"),
                        str(folder / "model.safetensors"))
    width = check.layers(config["layers"], config["input_size"], "layers")
    if width != config["output_size"]:
        check.fail("layers", f"the last layer outputs {width} features, field 'output_size' says "
                             f"{config['output_size']}")
    unused = sorted(set(tensors) - check.used)
    if unused:
        raise SuiteFileError(f"{folder / 'model.safetensors'}: tensor {unused[0]!r} is used by no layer of "
                             f"config.json (was a layer removed?)")



class Layers(nn.Module):
    """The layers of a config list, applied one after the other."""

    def __init__(self, specs: list[dict[str, Any]], tensors: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(build_layer(spec, tensors) for spec in specs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def build_layer(spec: dict[str, Any], tensors: dict[str, torch.Tensor]) -> nn.Module:
    kind = spec["op"]
    if kind == "linear":
        weight = tensors[spec["weight"]]
        layer = nn.Linear(weight.shape[1], weight.shape[0], bias=spec["bias"] is not None, dtype=weight.dtype)
        with torch.no_grad():
            layer.weight.copy_(weight)
            if spec["bias"] is not None:
                layer.bias.copy_(tensors[spec["bias"]])
        return layer
    if kind == "relu":
        return nn.ReLU()
    if kind == "block":
        gamma = spec.get("gamma")
        return Block(Layers(spec["state"], tensors), Layers(spec["phi"], tensors),
                     Layers(gamma, tensors) if gamma is not None else None)
    simple = {"multiply_halves": MultiplyHalves, "positive": Positive}
    if kind in simple:
        return simple[kind]()
    if kind == "linear_recurrence":
        return LinearRecurrence(*(tensors[spec[name]] for name in ("A", "B", "b", "s0")))
    if kind in ("torch.nn.RNN", "torch.nn.GRU", "torch.nn.LSTM"):
        return Stock(kind, spec, tensors)
    if kind in ("relu_gru", "relu_lstm"):
        return ReluCell(kind, spec, tensors)
    raise ValueError(f"unknown layer op {kind!r}")


class Block(nn.Module):
    def __init__(self, state: Layers, phi: Layers, gamma: Layers | None) -> None:
        super().__init__()
        self.state, self.phi, self.gamma = state, phi, gamma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.phi(self.state(x))
        return y if self.gamma is None else self.gamma(x) * y


class MultiplyHalves(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x[..., :half] * x[..., half:]


class Positive(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x > 0).to(x.dtype)


class LinearRecurrence(nn.Module):
    def __init__(self, A: torch.Tensor, B: torch.Tensor, b: torch.Tensor, s0: torch.Tensor) -> None:
        super().__init__()
        self.A, self.B, self.b, self.s0 = (nn.Parameter(t.clone()) for t in (A, B, b, s0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        drive = x @ self.B.T + self.b
        state, states = self.s0.expand(x.shape[0], -1), []
        for t in range(x.shape[1]):
            state = state @ self.A.T + drive[:, t]
            states.append(state)
        return torch.stack(states, dim=1)


class Stock(nn.Module):
    """A stock one-layer recurrent module run from stored initial states."""

    def __init__(self, kind: str, spec: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        super().__init__()
        parameters = {name: tensors[key] for name, key in spec["parameters"].items()}
        dtype = parameters["weight_ih_l0"].dtype
        self.core = getattr(nn, kind.rsplit(".", 1)[1])(batch_first=True, dtype=dtype, **spec["kwargs"])
        with torch.no_grad():
            for name, value in parameters.items():
                getattr(self.core, name).copy_(value)
        self.register_buffer("h0", tensors[spec["h0"]].clone())
        self.register_buffer("c0", tensors[spec["c0"]].clone() if spec.get("c0") else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = self.h0.expand(1, x.shape[0], -1).contiguous()
        state = (h0, self.c0.expand(1, x.shape[0], -1).contiguous()) if self.c0 is not None else h0
        return self.core(x.to(self.h0.dtype), state)[0]


class ReluCell(nn.Module):
    """One GRU or LSTM layer in PyTorch's layout with ReLU for sigmoid and tanh."""

    def __init__(self, kind: str, spec: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.kind = kind
        for name, key in spec["parameters"].items():
            self.register_buffer(name, tensors[key].clone())
        self.register_buffer("h0", tensors[spec["h0"]].clone())
        self.register_buffer("c0", tensors[spec["c0"]].clone() if spec.get("c0") else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.h0.shape[0]
        inputs = x @ self.weight_ih.T + self.bias_ih
        h, c, outputs = self.h0.expand(x.shape[0], -1), None, []
        if self.c0 is not None:
            c = self.c0.expand(x.shape[0], -1)
        for t in range(x.shape[1]):
            recurrent = h @ self.weight_hh.T + self.bias_hh
            if self.kind == "relu_gru":
                i_r, i_z, i_n = inputs[:, t].split(hidden, dim=-1)
                h_r, h_z, h_n = recurrent.split(hidden, dim=-1)
                r, z = torch.relu(i_r + h_r), torch.relu(i_z + h_z)
                h = (1 - z) * torch.relu(i_n + r * h_n) + z * h
            else:
                i, f, g, o = (inputs[:, t] + recurrent).split(hidden, dim=-1)
                c = torch.relu(f) * c + torch.relu(i) * torch.relu(g)
                h = torch.relu(o) * torch.relu(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1)
