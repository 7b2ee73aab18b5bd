"""Load a model of the lsrl benchmark suite with PyTorch and safetensors only (no lsrl needed).

    from load_model import load_folder
    net = load_folder("SUITE/parity/rnn")            # a torch.nn.Module
    outputs = net(torch.as_tensor(inputs))            # (B, T, d_in) -> (B, T, d_out)

``config.json`` says which model of the task it is (``"task"``, ``"architecture"``, and ``"tier"``: ``"compiled"``,
``"distractors"``, ``"rotated"`` or ``"trained"``) and lists its layers (``"layers"``), applied in order. Each
names its tensors in ``model.safetensors`` and is one of:

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
- ``positive``: 1.0 where the input is > 0, else 0.0 (an automaton's accept readout);
- ``hook``: the identity, a named site (``name``) where no layer ends (a block's empty ``phi``).

Hooks. Every layer may name its output with an optional ``"hook"`` field; the ``labels.json`` of the folder
has exactly one entry per hook name. A recurrent layer's hook is its state at every step, *inside* the
recurrence (the value carried to the next step), and its gates are hooks too: ``NAME.r``, ``NAME.z``,
``NAME.n`` (GRU), ``NAME.i``, ``NAME.f``, ``NAME.g``, ``NAME.o`` and the cell ``NAME.c`` (LSTM), each after
its activation. ``net.hook_names`` lists them;
``outputs, cache = net.run_with_cache(xs, patch={name: values})`` returns every hook's values ``(B, T, width)``
and replaces the hooks of ``patch`` by ``values`` (``(B, T, width)``; NaN entries keep the model's own value,
so single units can be patched) at every step before anything reads them: a patched state is the one the
next step reads; ``run_with_cache(xs, patch, grad=True)`` keeps the autograd graph. Every hook is a
``HookPoint`` module (the identity), reached at every step: a plain ``register_forward_hook`` on one fires at
each step of ``net(xs)`` (its arguments are the value and the step), and a value it returns is the one the run
goes on with (tools that wrap modules, such as nnsight, reach them the same way). A stock module with hooks
therefore runs step by step, in ``net(xs)`` as in ``run_with_cache``, with the equations written out in
``rnn_step``, ``gru_step`` and ``lstm_step`` (the same values as the fused module to float rounding); one
without hooks runs fused.

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
from typing import Any, Mapping, cast

import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F

from lsrl.targets.cell_steps import Run, at_step, run_steps  # INLINED: load_model.py holds the code

FORMAT = "lsrl.bench"
VERSION = 4  # older folders (1: no manifest.json; 2: no hooks, labels per module; 3: no tier) are refused: rebuild
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "lsrl.bench.manifest"
MODEL_FILES = ("config.json", "model.safetensors")  # the files load_folder reads, checked against the manifest
DTYPES = ("float32", "float64")
CONFIG_FIELDS = ("format", "version", "task", "architecture", "tier", "dtype", "input_size", "output_size", "layers",
                 "loader", "training")  # "training": the trained tier's only (and required there)
TRAINING_FIELDS = ("steps", "seed", "task_accuracy", "interchange_accuracy", "lengths", "aim", "meets_aim")
TIERS = ("compiled", "distractors", "rotated", "trained")  # what a folder's model is (docs: the suite's tiers)
STOCK = {"torch.nn.RNN": 1, "torch.nn.GRU": 3, "torch.nn.LSTM": 4}  # op -> gate blocks
RELU_CELLS = {"relu_gru": 3, "relu_lstm": 4}
GRU_GATES, LSTM_GATES = ("r", "z", "n"), ("i", "f", "g", "o", "c")  # the hooks inside a cell (c: the LSTM's cell)
GATES = {"torch.nn.GRU": GRU_GATES, "relu_gru": GRU_GATES, "torch.nn.LSTM": LSTM_GATES, "relu_lstm": LSTM_GATES}
FIELDS = {  # op -> its fields (all required; "bias", "c0" and "gamma" may be null)
    "linear": ("op", "weight", "bias"), "relu": ("op",), "multiply_halves": ("op",), "positive": ("op",),
    "linear_recurrence": ("op", "A", "B", "b", "s0"), "block": ("op", "state", "phi", "gamma"),
    **{op: ("op", "kwargs", "parameters", "h0", "c0") for op in STOCK},
    **{op: ("op", "hidden_size", "parameters", "h0", "c0") for op in RELU_CELLS},
    "hook": ("op", "name"),
}
OPTIONAL = ("hook",)  # every op but "hook" may name its output
_CHUNK = 1 << 20


class SuiteFileError(ValueError):
    """A suite folder that is missing, corrupt, changed after its build or inconsistent: the one-line message names
    the file and the field."""


def load_folder(folder: str | Path) -> Layers:
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
    if _field(config, "tier", str, where) not in TIERS:
        raise SuiteFileError(f"{where}: field 'tier' must be one of {list(TIERS)}, got {config['tier']!r}")
    if _field(config, "dtype", str, where) not in DTYPES:
        raise SuiteFileError(f"{where}: field 'dtype' must be one of {list(DTYPES)}, got {config['dtype']!r}")
    _count(config, "input_size", where)
    _count(config, "output_size", where)
    if ("training" in config) != (config["tier"] == "trained"):
        raise SuiteFileError(f"{where}: field 'training' must be given exactly for tier 'trained' (rebuild the folder "
                             f"with this version of `lsrl bench build`)")
    if "training" in config:
        _training(config["training"], f"{where}: field 'training'")
    if not _field(config, "layers", list, where):
        raise SuiteFileError(f"{where}: field 'layers' must list at least one layer")
    return config


def _training(record: Any, where: str) -> None:
    """A trained model's record: its steps and seed, the measured accuracies and the lengths (shortest, longest)
    they were measured on, the aim and whether it meets it."""
    if not isinstance(record, dict):
        raise SuiteFileError(f"{where} must be a JSON object")
    _only(record, TRAINING_FIELDS, where)
    _count(record, "steps", where)
    _field(record, "seed", int, where)
    lengths = _field(record, "lengths", list, where)
    if len(lengths) != 2 or not all(type(length) is int and length >= 1 for length in lengths) \
            or lengths[0] > lengths[1]:
        raise SuiteFileError(f"{where}: field 'lengths' must be [shortest, longest], whole numbers from 1, got "
                             f"{lengths!r}"[:200])
    accuracies = [_field(record, key, (int, float), where) for key in ("task_accuracy", "aim")]
    interchange = _field(record, "interchange_accuracy", dict, where)
    meets = _field(record, "meets_aim", bool, where)
    numbers = [isinstance(v, (int, float)) and not isinstance(v, bool) for v in interchange.values()]
    if not interchange or not all(numbers):
        raise SuiteFileError(f"{where}: field 'interchange_accuracy' must map each variable to a number")
    if meets != (accuracies[0] >= accuracies[1] and min(interchange.values()) >= accuracies[1]):
        raise SuiteFileError(f"{where}: field 'meets_aim' must say whether 'task_accuracy' and every "
                             f"'interchange_accuracy' reach 'aim'")


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
        self.tensors, self.dtype = tensors, dtype
        self.used: set[str] = set()
        self.hooks: list[str] = []
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

    def hook(self, name: Any, op: str, where: str) -> None:
        """A layer's hook name (or its gates' names) is a string no other hook has."""
        if name is None and op != "hook":
            return
        if not isinstance(name, str) or not name:
            self.fail(where, f"field {'name' if op == 'hook' else 'hook'!r} must be a non-empty string, got "
                             f"{json.dumps(name)[:60]}")
        names = [name] + [f"{name}.{gate}" for gate in GATES.get(op, ())]
        for taken in names:
            if taken in self.hooks:
                self.fail(where, f"hook name {taken!r} is used twice")
            self.hooks.append(taken)

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
        _only(spec, fields + (OPTIONAL if op != "hook" else ()), self.at(where))
        self.hook(spec.get("name") if op == "hook" else spec.get("hook"), op, where)
        missing = [key for key in fields if key not in spec]
        if missing:
            self.fail(where, f"missing field {missing[0]!r} for op {op!r}")
        if op in ("relu", "positive", "hook"):
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


def check_layers(config: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> list[str]:
    """Every layer of ``config`` against ``tensors``: fields, tensor names, shapes, dtype, finite values, the widths
    from ``input_size`` to ``output_size``, every tensor used by some layer, hook names unique; returns the hook
    names."""
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
    return check.hooks


# ---- the modules -----------------------------------------------------------------------------------------------


class HookPoint(nn.Module):
    """The identity at a named site; while ``run_with_cache`` runs, it records and patches the site's values."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.run: Run | None = None

    def forward(self, x: torch.Tensor, step: int | None = None) -> torch.Tensor:
        return x if self.run is None else self.run.visit(self.name, x, step)


INSIDE = ("linear_recurrence", *STOCK, *RELU_CELLS)  # ops whose hook is their state inside the recurrence


def hook_name(spec: dict[str, Any]) -> str | None:
    """The name of a config layer's hook (None: the layer has none)."""
    return spec.get("name") if spec["op"] == "hook" else spec.get("hook")


class Layers(nn.Module):
    """The layers of a config list, applied one after the other; ``run_with_cache`` (module docstring)."""

    def __init__(self, specs: list[dict[str, Any]], tensors: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.layers = nn.ModuleList()
        for spec in specs:
            self.layers.append(build_layer(spec, tensors))
            name = hook_name(spec)
            if spec["op"] not in INSIDE and name is not None:  # a recurrence hooks its own steps
                self.layers.append(HookPoint(name))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    @property
    def hook_names(self) -> list[str]:
        """Every hook's name, in the order of ``config.json`` (a recurrence's state before its gates)."""
        return [module.name for module in self.modules() if isinstance(module, HookPoint)]

    def run_with_cache(self, xs: Any, patch: dict[str, Any] | None = None, grad: bool = False
                       ) -> tuple[torch.Tensor, dict]:
        """``(outputs, {hook name: values (B, T, width)})`` of ``xs`` ``(B, T, d_in)``; ``patch`` (module
        docstring) replaces hooks' values inside the run; ``grad`` keeps the autograd graph."""
        dtype = next(t.dtype for t in list(self.parameters()) + list(self.buffers()) if t.is_floating_point())
        x = torch.as_tensor(xs).to(dtype)
        unknown = sorted(set(patch or {}) - set(self.hook_names))
        if unknown:
            raise ValueError(f"run_with_cache: no hook named {unknown[0]!r}; the hooks are net.hook_names")
        run = Run({name: torch.as_tensor(values).to(dtype) for name, values in (patch or {}).items()}, x.shape[1])
        points = [module for module in self.modules() if isinstance(module, HookPoint)]
        for point in points:
            point.run = run
        try:
            with torch.set_grad_enabled(grad):
                outputs = self(x)
        finally:
            for point in points:
                point.run = None
        return outputs, run.finished()


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
    if kind in ("relu", "hook"):
        return nn.ReLU() if kind == "relu" else nn.Identity()  # a hook op's HookPoint follows it
    if kind == "block":
        gamma = spec.get("gamma")
        return Block(Layers(spec["state"], tensors), Layers(spec["phi"], tensors),
                     Layers(gamma, tensors) if gamma is not None else None)
    simple = {"multiply_halves": MultiplyHalves, "positive": Positive}
    if kind in simple:
        return simple[kind]()
    if kind == "linear_recurrence":
        A, B, b, s0 = (tensors[spec[name]] for name in ("A", "B", "b", "s0"))
        return LinearRecurrence(A, B, b, s0, hook=spec.get("hook"))
    if kind in STOCK:
        return Stock(kind, spec, tensors)
    if kind in RELU_CELLS:
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


Points = Mapping[str, Any]  # a recurrence's hook points by name (a ModuleDict, read as a mapping)


def _hook_points(name: str | None, gates: tuple[str, ...]) -> nn.ModuleDict:
    """The hooks of a recurrence: ``"h"`` (its state, named ``name``) and one per gate (``name.gate``)."""
    if name is None:
        return nn.ModuleDict()
    return nn.ModuleDict({"h": HookPoint(name), **{gate: HookPoint(f"{name}.{gate}") for gate in gates}})


class LinearRecurrence(nn.Module):
    def __init__(self, A: torch.Tensor, B: torch.Tensor, b: torch.Tensor, s0: torch.Tensor,
                 hook: str | None = None) -> None:
        super().__init__()
        self.A, self.B, self.b, self.s0 = (nn.Parameter(t.clone()) for t in (A, B, b, s0))
        self.points = _hook_points(hook, ())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        drive = x @ self.B.T + self.b
        state, states = self.s0.expand(x.shape[0], -1), []
        for t in range(x.shape[1]):
            state = at_step(cast(Points, self.points), "h", state @ self.A.T + drive[:, t], t)
            states.append(state)
        return torch.stack(states, dim=1)


ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


class Cell(nn.Module):
    """One recurrent layer in PyTorch's parameter layout, run step by step: ``kind`` ``"rnn"``, ``"gru"`` or
    ``"lstm"`` with the activations ``(gate, candidate)``."""

    weight_ih: torch.Tensor  # buffers, registered from ``parameters``
    weight_hh: torch.Tensor
    bias_ih: torch.Tensor
    bias_hh: torch.Tensor
    h0: torch.Tensor
    c0: torch.Tensor | None

    def __init__(self, kind: str, activations: tuple[str, str], parameters: dict[str, torch.Tensor],
                 h0: torch.Tensor, c0: torch.Tensor | None, hook: str | None) -> None:
        super().__init__()
        self.kind, self.activations = kind, activations
        for name, value in parameters.items():
            self.register_buffer(name, value.clone())
        self.register_buffer("h0", h0.clone())
        self.register_buffer("c0", c0.clone() if c0 is not None else None)
        self.points = _hook_points(hook, {"rnn": (), "gru": GRU_GATES, "lstm": LSTM_GATES}[kind])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, candidate = (ACTIVATIONS[name] for name in self.activations)
        gi = F.linear(x.to(self.h0.dtype), self.weight_ih, self.bias_ih)  # every step at once
        c0 = self.c0.expand(x.shape[0], -1) if self.c0 is not None else None
        return run_steps(self.kind, cast(Points, self.points), gi, self.h0.expand(x.shape[0], -1), c0, self.weight_hh,
                         self.bias_hh, gate, candidate)[0]

    def hooked(self) -> bool:
        """Whether the layer has hook points (it then runs step by step, so that they see every step)."""
        return len(self.points) > 0


class Stock(nn.Module):
    """A stock one-layer recurrent module run from stored initial states: step by step (``Cell``, the same
    parameters) where it has hook points, so that they are reached at every step; fused by ``torch.nn`` where not."""

    h0: torch.Tensor  # buffers
    c0: torch.Tensor | None

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
        cell = kind.rsplit(".", 1)[1].lower()
        activations = ("sigmoid", spec["kwargs"].get("nonlinearity", "tanh"))
        self.steps = Cell(cell, activations, {name[:-3]: value for name, value in parameters.items()},
                          self.h0, self.c0, spec.get("hook"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.steps.hooked():
            return self.steps(x)
        h0 = self.h0.expand(1, x.shape[0], -1).contiguous()
        state = (h0, self.c0.expand(1, x.shape[0], -1).contiguous()) if self.c0 is not None else h0
        return self.core(x.to(self.h0.dtype), state)[0]


class ReluCell(Cell):
    """One GRU or LSTM layer in PyTorch's layout with ReLU for sigmoid and tanh (``relu_gru``, ``relu_lstm``)."""

    def __init__(self, kind: str, spec: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        super().__init__(kind.removeprefix("relu_"), ("relu", "relu"),
                         {name: tensors[key] for name, key in spec["parameters"].items()},
                         tensors[spec["h0"]], tensors[spec["c0"]] if spec.get("c0") else None, spec.get("hook"))
