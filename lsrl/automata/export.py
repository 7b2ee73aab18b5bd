"""ONNX export of an automaton network: the standard ``RNN`` / ``LSTM`` / ``GRU`` operator, then the readout.

The ReLU RNN sets ``activations=["Relu"]`` (the operator's default is tanh); the LSTM and the GRU keep
the operators' default activations (sigmoid, tanh, tanh), and the GRU sets ``linear_before_reset=1``,
PyTorch's formula. The readout is ``MatMul``, ``Add``, ``Greater`` than 0 and ``Cast`` to float: the
file reads ``x`` ``(batch, time, |alphabet|)`` and writes ``y`` ``(batch, time, C)`` in 0.0 / 1.0, batch
and time dynamic. The second-order RNN has no standard ONNX operator and is refused.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

import numpy as np
from torch import nn

from lsrl.errors import LsrlError
from lsrl.targets.onnx_graph import ONNX_GATE_ORDER, OnnxGraph, reorder_gates, to_numpy

# per architecture: ONNX operator, PyTorch gate blocks in ONNX order, activations, extra attributes
_OPERATORS = {
    "rnn": ("RNN", (0,), ["Relu"], {}),
    "lstm": ("LSTM", ONNX_GATE_ORDER["lstm"], [], {}),
    "gru": ("GRU", ONNX_GATE_ORDER["gru"], [], {"linear_before_reset": 1}),
}


def export_onnx(network: nn.Module, path: str | Path) -> Path:
    """Write ``network`` (from ``lsrl.automata.to_torch``, float32) as an ONNX model to ``path``; returns the path."""
    if getattr(network, "architecture", None) not in _OPERATORS:
        raise LsrlError(f"export_onnx: needs an automaton network of architecture {tuple(_OPERATORS)}, got "
                        f"{getattr(network, 'architecture', type(network).__name__)!r}")
    path = _writable(path)
    op_type, order, activations, attributes = _OPERATORS[network.architecture]
    core: nn.RNNBase = network.core
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
    try:
        return g.write(on, path, f"lsrl_automaton_{network.architecture}", core.input_size,
                       network.readout.out_features, doc)
    except OSError as error:
        raise LsrlError(f"export_onnx: cannot write {str(path)!r}: {error.strerror or error}") from None


def _writable(path: str | Path) -> Path:
    """``path`` as a ``Path`` whose folder exists and which is no folder itself, or an ``LsrlError``."""
    if not isinstance(path, (str, PathLike)) or not str(path) or "\x00" in str(path):  # NUL: no OS takes it
        raise LsrlError(f"export_onnx: path must be a file name (str or Path), got {path!r}")
    path = Path(path)
    if path.is_dir():
        raise LsrlError(f"export_onnx: path {str(path)!r} is a folder; give a file name such as "
                        f"{str(path / 'automaton.onnx')!r}")
    if not path.parent.is_dir():
        raise LsrlError(f"export_onnx: cannot write {str(path)!r}: the folder {str(path.parent)!r} does not exist")
    return path
