"""A stock module as an ONNX model: one standard ``LSTM`` / ``GRU`` operator per layer of the core, then the
readout (docs/stock.md, "onnxruntime")."""

from __future__ import annotations

from typing import Any

import numpy as np

from lsrl.errors import LsrlError
from lsrl.targets.onnx_graph import ONNX_GATE_ORDER, OnnxGraph, reorder_gates, to_numpy
from lsrl.targets.stock.module import StockRNNModel
from lsrl.targets.stock.scales import DTYPES

_ONNX_OPERATORS = {  # ONNX operator, PyTorch gate blocks in ONNX order, attributes (as lsrl.automata.export)
    "stock_lstm": ("LSTM", ONNX_GATE_ORDER["lstm"], {}),
    "stock_gru": ("GRU", ONNX_GATE_ORDER["gru"], {"linear_before_reset": 1}),
}


def export_stock_onnx(net: StockRNNModel, path: Any) -> Any:
    """Write ``net`` (a ``stock_lstm`` / ``stock_gru`` module) as an ONNX model to ``path``: one standard
    ``LSTM`` / ``GRU`` operator per layer of the core (its default activations: sigmoid, tanh, tanh; the
    GRU with ``linear_before_reset=1``, PyTorch's formula), then ``MatMul`` + ``Add`` for the readout, in the
    module's dtype. ``x``: ``(batch, time, d_in)``, ``y``: ``(batch, time, d_out)``. Returns the path.

    onnxruntime runs these operators in float32 only (see ``lsrl.targets.onnx_export``), and its kernels compute
    other activations than torch's (``benchmarks/rnn_activations.py``: tanh within 10.1 u, never the
    identity, ``tanh(64) = 1 + 2^-21`` in the GRU, whose reset gate is ``-2^-22`` / ``1 + 2^-22`` at ``-+1024``).
    ``net.tolerance`` holds there for a module built with ``runtime="onnxruntime"`` (docs/stock.md,
    "onnxruntime"); for one built for torch it does not: identity units are off by the tanh's error (robust
    Listing 2, ``max_len = 256``: about 1e-2), and the file's doc string says which."""
    if getattr(net, "architecture", None) not in _ONNX_OPERATORS:
        raise LsrlError(f"export_stock_onnx: needs a module of {tuple(_ONNX_OPERATORS)}, got "
                        f"{getattr(net, 'architecture', type(net).__name__)!r}")
    g, out = _onnx_graph(net)
    doc = (f"lsrl {net.architecture}: a compiled program in stock {net.core.__class__.__name__} operators; "
           f"outputs within {net.tolerance:.3g} of the program's for T <= {net.max_len} (runtime {net.scales.runtime}"
           f"{'' if net.scales.runtime == 'onnxruntime' else ': onnxruntime computes other activations'})")
    try:
        return g.write(out, path, f"lsrl_{net.architecture}", net.d_in, net.readout.out_features, doc)
    except OSError as error:
        raise LsrlError(f"export_stock_onnx: cannot write {str(path)!r}: {error.strerror or error}") from None


def _onnx_graph(net: StockRNNModel) -> tuple[OnnxGraph, str]:
    op_type, order, attributes = _ONNX_OPERATORS[net.architecture]
    core = net.core
    g = OnnxGraph(DTYPES[net.scales.dtype])
    seq, _, batch_prefix = g.read_input()
    hidden = core.hidden_size
    for k in range(core.num_layers):
        W, R = (reorder_gates(to_numpy(getattr(core, f"{name}_l{k}")), hidden, order)
                for name in ("weight_ih", "weight_hh"))
        B = np.concatenate([reorder_gates(to_numpy(getattr(core, f"{name}_l{k}")), hidden, order)
                            for name in ("bias_ih", "bias_hh")])
        initial = [to_numpy(net.h0[k])] + ([to_numpy(net.c0[k])] if op_type == "LSTM" else [])
        seq = g.recurrence(op_type, seq, W, R, B, hidden, initial, batch_prefix, [], f"{net.architecture}{k}",
                           **attributes)
    return g, g.linear(seq, to_numpy(net.readout.weight), to_numpy(net.readout.bias), hint="readout")
