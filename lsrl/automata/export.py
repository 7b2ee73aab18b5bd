"""ONNX export of an automaton network: the standard ``RNN`` / ``LSTM`` / ``GRU`` operator, then the readout.

The ReLU RNN sets ``activations=["Relu"]`` (the operator's default is tanh); the LSTM and the GRU keep
the operators' default activations (sigmoid, tanh, tanh), and the GRU sets ``linear_before_reset=1``,
PyTorch's formula. The readout is ``MatMul``, ``Add``, ``Greater`` than 0 and ``Cast`` to float: the
file reads ``x`` ``(batch, time, |alphabet|)`` and writes ``y`` ``(batch, time, C)`` in 0.0 / 1.0, batch
and time dynamic. The second-order RNN has no standard ONNX operator and is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import nn

from lsrl.automata.networks import AutomatonNetwork
from lsrl.errors import LsrlError, checked_call
from lsrl.model.writing import output_file, written
from lsrl.targets.onnx_graph import ONNX_GATE_ORDER, OnnxGraph, reorder_gates, to_numpy

# per architecture: ONNX operator, PyTorch gate blocks in ONNX order, activations, extra attributes
_OPERATORS = {
    "rnn": ("RNN", (0,), ["Relu"], {}),
    "lstm": ("LSTM", ONNX_GATE_ORDER["lstm"], [], {}),
    "gru": ("GRU", ONNX_GATE_ORDER["gru"], [], {"linear_before_reset": 1}),
}


@checked_call
def export_onnx(network: nn.Module, path: str | Path) -> Path:
    """Write ``network`` (from ``lsrl.automata.to_torch``, float32) as an ONNX model to ``path``; returns the path."""
    if getattr(network, "architecture", None) not in _OPERATORS:
        raise LsrlError(f"export_onnx: needs an automaton network of architecture {tuple(_OPERATORS)}, got "
                        f"{getattr(network, 'architecture', type(network).__name__)!r}")
    if not isinstance(network, AutomatonNetwork) or not isinstance(network.core, nn.RNNBase):
        raise LsrlError(f"export_onnx: needs an automaton network (lsrl.automata.to_torch), got "
                        f"{type(network).__name__}")
    file = output_file(path, "export_onnx")
    op_type, order, activations, attributes = _OPERATORS[network.architecture]
    core = network.core
    hidden = core.hidden_size
    g = OnnxGraph("float32")
    seq, _, batch_prefix = g.read_input()
    W, R = (reorder_gates(to_numpy(getattr(core, name)), hidden, order) for name in ("weight_ih_l0", "weight_hh_l0"))
    B = np.concatenate([reorder_gates(to_numpy(getattr(core, name)), hidden, order)
                        for name in ("bias_ih_l0", "bias_hh_l0")])
    initial = [to_numpy(network.h0)] + ([to_numpy(network.c0)] if network.c0 is not None else [])
    states = g.recurrence(op_type, seq, W, R, B, hidden, initial, batch_prefix, activations, network.architecture,
                          **attributes)
    scores = g.linear(states, to_numpy(network.readout.weight), to_numpy(network.readout.bias), hint="readout")
    zero = g.const(np.zeros(1), "zero")
    on = g.op("Cast", [g.op("Greater", [scores, zero], "on")], "on", to=g.onnx.TensorProto.FLOAT)
    doc = f"lsrl finite automaton as a {op_type}; output 1.0 where a readout channel is on"
    with written(file, "export_onnx") as partial:  # whole or not at all; an OSError as a ModelFileError
        g.write(on, partial, f"lsrl_automaton_{network.architecture}", core.input_size,
                network.readout.out_features, doc)
    return file
