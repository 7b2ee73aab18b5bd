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

from lsrl.errors import LsrlError
from lsrl.targets.onnx_export import IR_VERSION, OPSET, _Graph, _numpy, _recurrence, _reorder

# per architecture: ONNX operator, PyTorch gate blocks in ONNX order, activations, extra attributes
_OPERATORS = {
    "rnn": ("RNN", (0,), ["Relu"], {}),
    "lstm": ("LSTM", (0, 3, 1, 2), [], {}),  # ONNX gates i o f c; PyTorch i f g o
    "gru": ("GRU", (1, 0, 2), [], {"linear_before_reset": 1}),  # ONNX z r h; PyTorch r z n
}


def export_onnx(network, path) -> Path:
    """Write ``network`` (from ``lsrl.automata.to_torch``, float32) as an ONNX model to ``path``; returns the path."""
    import onnx

    if getattr(network, "architecture", None) not in _OPERATORS:
        raise LsrlError(f"export_onnx: needs an automaton network of architecture {tuple(_OPERATORS)}, got "
                        f"{getattr(network, 'architecture', type(network).__name__)!r}")
    op_type, order, activations, attributes = _OPERATORS[network.architecture]
    core: nn.RNNBase = network.core
    hidden = core.hidden_size
    g = _Graph("float32")
    seq = g.op("Transpose", ["x"], "time_major", perm=[1, 0, 2])
    batch = g.op("Slice", [g.op("Shape", ["x"], "shape"), g.const([0], "start", integer=True),
                           g.const([1], "end", integer=True)], "batch")
    batch_prefix = g.op("Concat", [g.const([1], "one", integer=True), batch], "batch_prefix", axis=0)
    W, R = (_reorder(_numpy(getattr(core, name)), hidden, order) for name in ("weight_ih_l0", "weight_hh_l0"))
    B = np.concatenate([_reorder(_numpy(getattr(core, name)), hidden, order) for name in ("bias_ih_l0", "bias_hh_l0")])
    initial = [_numpy(network.h0)] + ([_numpy(network.c0)] if network.c0 is not None else [])
    states = _recurrence(g, op_type, seq, W, R, B, hidden, initial, batch_prefix, activations, network.architecture,
                         **attributes)
    scores = g.linear(states, _numpy(network.readout.weight), _numpy(network.readout.bias), hint="readout")
    on = g.op("Cast", [g.op("Greater", [scores, g.const(np.zeros(1), "zero")], "on")], "on", to=onnx.TensorProto.FLOAT)
    g.op("Transpose", [on], "batch_major", perm=[1, 0, 2])
    g.nodes[-1].output[0] = "y"
    graph = g.helper.make_graph(
        g.nodes, f"lsrl_automaton_{network.architecture}",
        [g.helper.make_tensor_value_info("x", g.elem_type, ["batch", "time", core.input_size])],
        [g.helper.make_tensor_value_info("y", g.elem_type, ["batch", "time", network.readout.out_features])],
        initializer=g.initializers,
    )
    model = g.helper.make_model(graph, opset_imports=[g.helper.make_opsetid("", OPSET)], producer_name="lsrl",
                                ir_version=IR_VERSION)
    model.doc_string = f"lsrl finite automaton as a {op_type}; output 1.0 where a readout channel is on"
    onnx.checker.check_model(model, full_check=True)
    path = Path(path)
    onnx.save(model, str(path))
    return path
