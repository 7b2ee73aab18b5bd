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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn


def load_folder(folder: str | Path) -> nn.Module:
    """The model of a suite folder (``config.json`` + ``model.safetensors``), in eval mode."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    return Layers(config["layers"], tensors).eval()


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
