"""A model as the layer list of ``config.json`` and the tensors of ``model.safetensors``
(the format ``lsrl/bench/standalone.py`` reads; its docstring lists the layer ops).

Torch targets keep their own ``state_dict`` names; the path model (``CompiledProgram``) gets
``layers.{i}.{weight}`` names, one op per path layer. Every labelled site gets a hook (a layer's ``"hook"``
field, or a ``hook`` op) named as the model's unit labels name it: ``net.labels``'s keys for a torch
target (``blocks.{i}.state``, ``rnn.l{k}`` ...), ``layers.{i}`` for a path layer, ``core`` and ``readout``
for an automaton network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from lsrl.kinds import NODE_WEIGHTS, Kind
from lsrl.model.compiled import CompiledProgram

if TYPE_CHECKING:
    from lsrl.automata.networks import AutomatonNetwork
    from lsrl.bench.training.torch_rnn import TrainedModel
    from lsrl.targets.gru_lstm import CellModel
    from lsrl.targets.recurrent import DenseStack, LinearRNNBlock

Spec = dict[str, Any]  # one layer of config.json
Tensors = dict[str, torch.Tensor]  # model.safetensors' tensors by name


def export(model: CompiledProgram | nn.Module | TrainedModel) -> tuple[list[Spec], Tensors]:
    """``(layers, tensors)`` of a ``CompiledProgram``, a compiled torch target or an automaton network."""
    from lsrl.automata.networks import AutomatonNetwork
    from lsrl.bench.training.torch_rnn import TrainedModel
    from lsrl.targets.gru_lstm import CellModel
    from lsrl.targets.recurrent import BlockModel

    if isinstance(model, CompiledProgram):
        return _path(model)
    if isinstance(model, TrainedModel):
        return _trained(model)
    tensors = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    if isinstance(model, BlockModel):
        return [_block(f"blocks.{i}", cast("LinearRNNBlock", block)) for i, block in enumerate(model.blocks)], tensors
    if isinstance(model, CellModel):
        return _cells(model), tensors
    if isinstance(model, AutomatonNetwork):
        return _automaton(model), tensors
    raise TypeError(f"the benchmark suite cannot export a {type(model).__name__}")


def _path(model: CompiledProgram) -> tuple[list[Spec], Tensors]:
    layers: list[Spec] = []
    tensors: Tensors = {}
    for i, layer in enumerate(model.layers):
        names = NODE_WEIGHTS[layer.kind] if layer.kind in (Kind.LINEAR, Kind.LINSTATE) else ()
        keys = {name: f"layers.{i}.{name}" for name in names}
        for name, key in keys.items():
            tensors[key] = torch.as_tensor(getattr(layer, name).to_numpy().astype(np.float64).reshape(
                (-1,) if name in ("b", "init_state") else getattr(layer, name).shape2d))
        if layer.kind is Kind.LINEAR:
            spec = {"op": "linear", "weight": keys["A"], "bias": keys["b"]}
        elif layer.kind is Kind.LINSTATE:
            spec = {"op": "linear_recurrence", "A": keys["A"], "B": keys["B"], "b": keys["b"], "s0": keys["init_state"]}
        else:
            spec = {"op": "relu" if layer.kind is Kind.RELU else "multiply_halves"}
        layers.append({**spec, "hook": f"layers.{i}"})
    return layers, tensors


def _dense(prefix: str, stack: DenseStack) -> list[Spec]:
    """A ``DenseStack``: hooks after each ``nn.Linear`` (``prefix.layers.j``, before its ReLU) and at the end
    (``prefix``, its output)."""
    layers = []
    for j, relu in enumerate(stack.relu):
        layers.append({"op": "linear", "weight": f"{prefix}.layers.{j}.weight", "bias": f"{prefix}.layers.{j}.bias",
                       "hook": f"{prefix}.layers.{j}"})
        if relu:
            layers.append({"op": "relu"})
    return layers + [{"op": "hook", "name": prefix}]


def _block(prefix: str, block: LinearRNNBlock) -> Spec:
    from lsrl.targets.recurrent import ClassicRNNBlock

    if isinstance(block, ClassicRNNBlock):  # stock ReLU RNN on [s+; s-], merged back to s (Eq. 11)
        state = [_stock(f"{prefix}.rnn", block.rnn, f"{prefix}.h0", None, hook=f"{prefix}.rnn"),
                 {"op": "linear", "weight": f"{prefix}.merge", "bias": None, "hook": f"{prefix}.state"}]
    else:
        state = [{"op": "linear_recurrence", **{name: f"{prefix}.{name}" for name in ("A", "B", "b", "s0")},
                  "hook": f"{prefix}.state"}]
    gamma = _dense(f"{prefix}.gamma", block.gamma) if block.gamma is not None else None
    return {"op": "block", "state": state, "phi": _dense(f"{prefix}.phi", block.phi), "gamma": gamma, "hook": prefix}


def _stock(prefix: str, core: nn.RNNBase, h0: str, c0: str | None, hook: str) -> Spec:
    kind = type(core).__name__
    kwargs: dict[str, Any] = {"input_size": core.input_size, "hidden_size": core.hidden_size}
    if kind == "RNN":
        kwargs["nonlinearity"] = core.nonlinearity
    names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
    return {"op": f"torch.nn.{kind}", "kwargs": kwargs, "parameters": {n: f"{prefix}.{n}" for n in names},
            "h0": h0, "c0": c0, "hook": hook}


def _cells(model: CellModel) -> list[Spec]:
    layers = []
    for k in range(model.rnn.num_layers):
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        layers.append({
            "op": f"relu_{model.architecture}", "hidden_size": model.rnn.hidden_sizes[k],
            "parameters": {name: f"rnn.{name}_l{k}" for name in names},
            "h0": f"rnn.h0_l{k}", "c0": f"rnn.c0_l{k}" if model.architecture == "lstm" else None, "hook": f"rnn.l{k}",
        })
    return layers + [{"op": "linear", "weight": "readout.weight", "bias": "readout.bias", "hook": "readout"}]


def _core_readout(core: nn.RNNBase) -> list:
    """A stock recurrent ``core`` from the initial states ``h0`` (and ``c0``), then a linear ``readout``."""
    c0 = "c0" if isinstance(core, nn.LSTM) else None
    return [_stock("core", core, "h0", c0, hook="core"),
            {"op": "linear", "weight": "readout.weight", "bias": "readout.bias", "hook": "readout"}]


def _automaton(model: AutomatonNetwork) -> list[Spec]:
    return _core_readout(cast(nn.RNNBase, model.core)) + [{"op": "positive"}]


def _trained(model: TrainedModel) -> tuple[list[Spec], Tensors]:
    """A trained tier's recurrent layers, each the single-layer stock module it is (``TrainedModel.stock``), from
    zero states, hooked ``core.lK`` (the states a multi-layer stock module passes up), then the readout."""
    layers: list[Spec] = []
    tensors: Tensors = {}
    for k, hook in enumerate(model.hooks):
        core = model.stock(k)
        zeros = torch.zeros(core.hidden_size, dtype=next(core.parameters()).dtype)
        lstm = isinstance(core, nn.LSTM)
        layers.append(_stock(hook, core, f"{hook}.h0", f"{hook}.c0" if lstm else None, hook=hook))
        tensors.update({f"{hook}.{name}": tensor.detach().contiguous() for name, tensor in core.state_dict().items()})
        tensors.update({f"{hook}.h0": zeros, **({f"{hook}.c0": zeros.clone()} if lstm else {})})
    tensors.update({f"readout.{name}": tensor.detach().contiguous()
                    for name, tensor in model.readout.state_dict().items()})
    return layers + [{"op": "linear", "weight": "readout.weight", "bias": "readout.bias", "hook": "readout"}], tensors
