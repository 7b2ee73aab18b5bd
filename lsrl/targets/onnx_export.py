"""Export a classic-RNN, GRU or LSTM target module to an ONNX file, built node by node.

The recurrences are the standard ONNX ``RNN``, ``GRU`` and ``LSTM`` operators with every
activation set to ``Relu`` (the paper's assumption, App. C and D), ``direction="forward"``, the
initial states as initializers broadcast to the batch (``Expand``), and for the GRU
``linear_before_reset=1``, which is PyTorch's formula ``n = act(W_in x + b_in + r * (W_hn h + b_hn))``.
Everything else is plain ``MatMul`` / ``Add`` / ``Relu`` / ``Mul`` / ``Transpose`` / ``Squeeze``.

The graph reads ``x`` of shape ``(batch, time, d_in)`` and writes ``y`` of shape
``(batch, time, d_out)``; batch and time are dynamic. ``dtype="float32"`` (default) or
``"float64"``. A float64 file is valid ONNX, but onnxruntime (checked with 1.31, CPU) has no
double kernels for these operators: ``RNN`` has none registered ("Could not find an
implementation"), ``GRU`` and ``LSTM`` load but fail at run time ("does not support double yet").
Run float32 files in onnxruntime; a float32 GRU loses 10 more bits in its products (the default
``gate_bound`` of 1024, see ``lsrl.targets.gru_lstm``), about 1e-5 relative. The stock LSTM / GRU targets
write theirs with ``lsrl.targets.stock.export_stock_onnx`` (default activations): onnxruntime's kernels
approximate sigmoid and tanh (``benchmarks/rnn_activations.py``), so their ``net.tolerance`` holds there only
for a module built with ``runtime="onnxruntime"``, which charges those approximations.

Checks that the torch modules make at run time, carried into the file or done before writing it:

* **precision**: a module whose weights are too large for ``dtype`` (``lsrl.targets.precision``,
  e.g. the paper's ``f_ifelse`` with ``lambda_ = 1e10`` in float32) is refused unless
  ``allow_inexact=True``;
* **GRU gate_bound**: the GRU's exact products need every gate factor in ``[0, gate_bound]``
  (``lsrl.targets.gru_lstm``). ONNX has no assertion operator, so the graph computes
  ``0 * sqrt(gate_bound - factor)`` for every factor and adds it to ``y``: zero while the bound
  holds, NaN at each step where it does not (instead of a silently wrong number; the GRU's
  state recovers, so only those steps are affected).
The diagonal targets (``diagonal_linear_rnn``, ``hawk``, ``griffin`` of the default diagonal
construction) have no standard operator: their diagonal recurrence is an ONNX ``Scan`` whose body
computes ``h = a * h + c * h[partner] + u_t`` on the units that have a recurrence; delay lines are
``Pad`` + ``Slice`` + ``MatMul`` per lag; idle Griffin attention blocks are their residual
pass-through. These run in onnxruntime in float64 as well as float32.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lsrl.errors import LsrlError
from lsrl.model.writing import output_file, written
from lsrl.targets.onnx_graph import DTYPES, OnnxGraph, reorder_gates, to_numpy

if TYPE_CHECKING:
    from torch import nn

ARCHS = ("rnn", "gated_rnn", "gru", "lstm", "diagonal_linear_rnn", "hawk", "griffin")
DIAGONAL_ARCHS = ("diagonal_linear_rnn", "hawk", "griffin")
# a module built by to_torch(arch), read by its structure (its blocks, layers and weights, as arch has them)
Built = Any


def _dense_stack(g: OnnxGraph, stack: Built, v: str, hint: str) -> str:
    for linear, relu in zip(stack.layers, stack.relu):
        v = g.linear(v, to_numpy(linear.weight), to_numpy(linear.bias), relu=relu, hint=hint)
    return v


def _rnn_blocks(g: OnnxGraph, module: Built, seq: str, batch_prefix: str) -> str:
    """``BlockModel`` of ``ClassicRNNBlock``: stock ``torch.nn.RNN(relu)`` + merge + phi, gamma gate."""
    for index, block in enumerate(module.blocks):
        rnn = block.rnn
        if rnn.num_layers != 1 or rnn.bidirectional or rnn.nonlinearity != "relu":
            raise LsrlError(f"export_onnx: block {index} must hold a one-layer forward ReLU torch.nn.RNN")
        W, R = to_numpy(rnn.weight_ih_l0), to_numpy(rnn.weight_hh_l0)
        B = np.concatenate([to_numpy(rnn.bias_ih_l0), to_numpy(rnn.bias_hh_l0)])
        split = g.recurrence(
            "RNN", seq, W, R, B, rnn.hidden_size, [to_numpy(block.h0)], batch_prefix, ["Relu"], f"block{index}_rnn"
        )
        states = g.linear(split, to_numpy(block.merge), hint=f"block{index}_merge")
        out = _dense_stack(g, block.phi, states, f"block{index}_phi")
        if block.gamma is not None:
            out = g.op("Mul", [_dense_stack(g, block.gamma, seq, f"block{index}_gamma"), out], f"block{index}_gate")
        seq = out
    return seq


def _gate_bound_sentinel(g: OnnxGraph, module: Built, k: int, seq: str) -> str:
    """``(T, B, 1)``: 0 while layer ``k``'s GRU gate factors stay <= gate_bound, NaN where they do not."""
    columns = getattr(module, module.gate_columns[k]).cpu().numpy()
    factors = g.op("Gather", [seq, g.const(columns, f"gate{k}_columns", integer=True)], f"gate{k}", axis=2)
    room = g.op("Sub", [g.const(module.gate_bound, f"gate{k}_bound"), factors], f"gate{k}_room")
    flags = g.op("Mul", [g.op("Sqrt", [room], f"gate{k}_sqrt"), g.const(0.0, f"gate{k}_zero")], f"gate{k}_flags")
    return g.op("ReduceSum", [flags, g.const([2], f"gate{k}_axis", integer=True)], f"gate{k}_check", keepdims=1)


def _cell_layers(g: OnnxGraph, module: Built, seq: str, batch_prefix: str) -> str:
    """``CellModel`` (``lsrl.targets.gru_lstm``): ReLU GRU / LSTM layers and the linear readout."""
    cells = module.rnn
    gru = cells.kind == "gru"
    sentinels = []
    for k, hidden in enumerate(cells.hidden_sizes):
        if k in getattr(module, "gate_columns", {}):
            sentinels.append(_gate_bound_sentinel(g, module, k, seq))
        t = {name: to_numpy(value) for name, value in cells.layer_tensors(k).items()}
        order = (1, 0, 2) if gru else (0, 3, 1, 2)  # ONNX gates: GRU z r h, LSTM i o f c
        W, R = reorder_gates(t["weight_ih"], hidden, order), reorder_gates(t["weight_hh"], hidden, order)
        B = np.concatenate([reorder_gates(t["bias_ih"], hidden, order), reorder_gates(t["bias_hh"], hidden, order)])
        if gru:
            seq = g.recurrence(
                "GRU", seq, W, R, B, hidden, [t["h0"]], batch_prefix, ["Relu", "Relu"], f"gru{k}",
                linear_before_reset=1,
            )
        else:
            seq = g.recurrence(
                "LSTM", seq, W, R, B, hidden, [t["h0"], t["c0"]], batch_prefix, ["Relu", "Relu", "Relu"], f"lstm{k}"
            )
    out = g.linear(seq, to_numpy(module.readout.weight), to_numpy(module.readout.bias), hint="readout")
    for sentinel in sentinels:
        out = g.op("Add", [out, sentinel], "checked")
    return out


def check_precision(module: nn.Module, arch: str, dtype: str, allow_inexact: bool = False) -> None:
    """Refuse (``LsrlError``) a module built by ``to_torch`` whose weights are too large for ``dtype``, or a
    GRU whose ``gate_bound`` is outside ``dtype``'s range (``lsrl.targets.gru_lstm.checked_gate_bound``)."""
    from lsrl.targets.gru_lstm import checked_gate_bound

    precision = getattr(module, "precision", None)
    problem = precision.problem(dtype) if precision is not None else None
    if problem and not allow_inexact:
        raise LsrlError(f"{arch} in {dtype}: {problem}; or export anyway (allow_inexact=True, --allow-inexact)")
    if getattr(module, "gate_bound", None) is not None and not allow_inexact:
        checked_gate_bound(module.gate_bound, dtype)

def _time_steps(g: OnnxGraph, seq: str) -> str:
    """``[T]`` of a time-major ``(T, B, d)`` tensor."""
    return g.op("Slice", [g.op("Shape", [seq], "shape"), g.const([0], "start", integer=True),
                          g.const([1], "end", integer=True)], "steps")


def _gather(g: OnnxGraph, seq: str, indices: Any, hint: str) -> str:
    return g.op("Gather", [seq, g.const(indices, f"{hint}_index", integer=True)], hint, axis=2)


def _scan_recurrence(g: OnnxGraph, drive: str, rec: Built, batch: str, hint: str) -> str:
    """``h_t = a * h_{t-1} + c * h_{t-1}[partner] + drive_t`` (``drive``: ``(T, B, r)``) as a Scan."""
    helper, width = g.helper, int(rec.a.shape[0])
    body = OnnxGraph(g.dtype)
    decay = body.op("Mul", ["h_in", body.const(to_numpy(rec.a), "a")], "decay")
    partner = body.op("Gather", ["h_in", body.const(rec.partner.numpy(), "partner", integer=True)], "partner", axis=1)
    coupled = body.op("Mul", [partner, body.const(to_numpy(rec.c), "c")], "coupled")
    body.op("Add", [body.op("Add", [decay, coupled], "sum"), "u_t"], "h")
    body.nodes[-1].output[0] = "h_out"
    body.nodes.append(helper.make_node("Identity", ["h_out"], ["h_scan"], name="scan_output"))
    for initializer in body.initializers:  # Scan bodies see their constants as nodes
        body.nodes.insert(0, helper.make_node("Constant", [], [initializer.name], value=initializer))
    info = [helper.make_tensor_value_info(name, g.elem_type, ["batch", width]) for name in ("h_in", "u_t")]
    outputs = [helper.make_tensor_value_info(name, g.elem_type, ["batch", width]) for name in ("h_out", "h_scan")]
    graph = helper.make_graph(body.nodes, f"{hint}_body", info, outputs)
    shape = g.op("Concat", [batch, g.const([width], f"{hint}_width", integer=True)], axis=0)
    h0 = g.op("Expand", [g.const(to_numpy(rec.s0).reshape(1, -1), f"{hint}_s0"), shape], hint)
    _, states = g.op("Scan", [h0, drive], hint, outputs=2, body=graph, num_scan_inputs=1)
    return states


def _delay_lines(g: OnnxGraph, u: str, rec: Built, steps: str, hint: str) -> str:
    """Short causal convolutions ``sum_i N^i u_{t-i}`` plus the initial state's fading part."""
    out: str | None = None
    for lag, tap in enumerate(to_numpy(rec.taps)):
        shifted = u
        if lag:
            padded = g.op("Pad", [u, g.const([lag, 0, 0, 0, 0, 0], f"{hint}_pads", integer=True)], hint)
            shifted = g.op("Slice", [padded, g.const([0], f"{hint}_from", integer=True), steps,
                                     g.const([0], f"{hint}_axis", integer=True)], hint)
        term = g.linear(shifted, tap, hint=f"{hint}_tap{lag}")
        out = term if out is None else g.op("Add", [out, term], hint)
    assert out is not None  # the taps start with N^0 = I
    fading = to_numpy(rec.fading)
    if len(fading):
        shape = g.op("Concat", [steps, g.const([1, fading.shape[1]], f"{hint}_shape", integer=True)], axis=0)
        zeros = g.op("ConstantOfShape", [shape], hint, value=g.numpy_helper.from_array(np.zeros(1, g.np_dtype)))
        table = g.op("Concat", [g.const(fading[:, None, :], f"{hint}_fading"), zeros], hint, axis=0)
        table = g.op("Slice", [table, g.const([0], f"{hint}_from", integer=True), steps,
                               g.const([0], f"{hint}_axis", integer=True)], hint)
        out = g.op("Add", [out, table], hint)
    return out


def _diagonal_states(g: OnnxGraph, u: str, rec: Built, batch: str, hint: str) -> str:
    """``DiagonalRecurrence`` on a time-major drive ``u``: copies, delay lines and recurrences."""
    width = rec.width
    recurrent, delay = rec.recurrent.tolist(), rec.delay.tolist()
    copies = [i for i in range(width) if i not in recurrent and i not in delay]
    steps = _time_steps(g, u)
    parts, order = [], []
    if copies:
        parts.append(_gather(g, u, copies, f"{hint}_copies"))
        order += copies
    if delay:
        parts.append(_delay_lines(g, _gather(g, u, delay, f"{hint}_delay"), rec, steps, f"{hint}_delay"))
        order += delay
    if recurrent:
        parts.append(_scan_recurrence(g, _gather(g, u, recurrent, f"{hint}_drive"), rec, batch, f"{hint}_scan"))
        order += recurrent
    joined = parts[0] if len(parts) == 1 else g.op("Concat", parts, hint, axis=2)
    return _gather(g, joined, np.argsort(order), f"{hint}_order")


def _diagonal_blocks(g: OnnxGraph, module: Built, seq: str, batch: str) -> str:
    for index, block in enumerate(module.blocks):
        hint = f"block{index}"
        u = g.linear(seq, to_numpy(block.B), to_numpy(block.b), hint=f"{hint}_B")
        out = _dense_stack(g, block.phi, _diagonal_states(g, u, block.recurrence, batch, hint), f"{hint}_phi")
        if block.gamma is not None:
            out = g.op("Mul", [_dense_stack(g, block.gamma, seq, f"{hint}_gamma"), out], f"{hint}_gate")
        seq = out
    return seq


def _hawk_blocks(g: OnnxGraph, module: Built, seq: str, batch: str) -> str:
    from lsrl.targets.hawk import DiagonalRecurrentBlock, IdentityTemporal, LocalMQA

    seq = g.linear(seq, to_numpy(module.embedding.weight), to_numpy(module.embedding.bias), hint="embedding")
    for index, block in enumerate(module.blocks):
        hint, temporal = f"block{index}", block.temporal
        if isinstance(temporal, DiagonalRecurrentBlock):
            u = g.linear(seq, to_numpy(temporal.W_a.weight), hint=f"{hint}_W_a")
            seq = _diagonal_states(g, u, temporal.rg_lru, batch, hint)
        elif isinstance(temporal, LocalMQA) and temporal.residual and not np.any(to_numpy(temporal.W_v.weight)):
            seq = g.linear(seq, np.eye(temporal.W_o.out_features), to_numpy(temporal.W_o.bias), hint=f"{hint}_mqa")
        elif not isinstance(temporal, IdentityTemporal):
            raise LsrlError(f"export_onnx: residual block {index} has a {type(temporal).__name__} that only the "
                            f"App. E construction uses; export the default diagonal construction")
        mlp = block.mlp
        e = g.linear(seq, to_numpy(mlp.W_e.weight), to_numpy(mlp.W_e.bias), hint=f"{hint}_e")
        f = g.linear(seq, to_numpy(mlp.W_f.weight), to_numpy(mlp.W_f.bias), relu=True, hint=f"{hint}_f")
        seq = g.linear(g.op("Mul", [e, f], hint), to_numpy(mlp.W_m.weight), to_numpy(mlp.W_m.bias), hint=f"{hint}_m")
    return g.linear(seq, to_numpy(module.readout.weight), hint="readout")


def export_onnx(module: nn.Module, path: str | Path, arch: str | None = None, dtype: str = "float32",
                allow_inexact: bool = False) -> Path:
    """Write ``module`` (architecture ``arch``: one of ``ARCHS``) as an ONNX model to ``path`` in
    ``dtype`` ("float32" or "float64").

    ``arch`` defaults to ``module.architecture``. A module built by ``to_torch`` whose weights are
    too large for ``dtype`` is refused (``LsrlError`` naming the weight and the variant to use)
    unless ``allow_inexact=True``. Returns the path written. A path that cannot be written (a folder, a
    missing or read-only folder) raises ``ModelFileError`` naming it before anything is built; the
    file is written whole or not at all (``lsrl.model.writing``).
    """
    file = output_file(path, "export_onnx")
    built: Built = module  # read by its structure below, as arch has it
    arch = arch or getattr(module, "architecture", None)
    if arch not in ARCHS:
        raise LsrlError(f"export_onnx: architecture must be one of {ARCHS}, got {arch!r}")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise LsrlError(f"export_onnx: dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    check_precision(module, arch, dtype, allow_inexact)
    g = OnnxGraph(dtype)
    if arch in DIAGONAL_ARCHS:
        if getattr(module, "architecture", None) != arch:
            raise LsrlError(f"export_onnx: architecture {arch!r} expects a module built by to_torch({arch!r}), "
                            f"got a {type(module).__name__}")
        d_in = built.d_in
    elif arch in ("rnn", "gated_rnn"):
        if not hasattr(module, "blocks"):
            raise LsrlError(f"export_onnx: {arch!r} expects a BlockModel of ClassicRNNBlock blocks")
        if not len(built.blocks):
            raise LsrlError("export_onnx: the module has no blocks (an empty program); nothing to export")
        d_in = built.blocks[0].rnn.input_size
    else:
        if getattr(module, "architecture", arch) != arch or not hasattr(module, "rnn"):
            raise LsrlError(f"export_onnx: {arch!r} expects a module built by build_{arch}")
        d_in = built.rnn.input_size
    seq, batch, batch_prefix = g.read_input()
    if arch == "diagonal_linear_rnn":
        seq = _diagonal_blocks(g, built, seq, batch)
    elif arch in ("hawk", "griffin"):
        seq = _hawk_blocks(g, built, seq, batch)
    elif arch in ("rnn", "gated_rnn"):
        seq = _rnn_blocks(g, built, seq, batch_prefix)
    else:
        seq = _cell_layers(g, built, seq, batch_prefix)
    doc = f"lsrl {arch} model; recurrent activations: Relu in place of sigmoid and tanh"
    with written(file, "export_onnx") as partial:
        g.write(seq, partial, f"lsrl_{arch}", d_in, _output_dim(built, arch, d_in), doc)
    return file


def _output_dim(module: Built, arch: str, d_in: int) -> int:
    if arch in ("hawk", "griffin"):
        return module.d_out
    if arch == "diagonal_linear_rnn":
        last = module.blocks[-1]
        return last.phi.layers[-1].out_features if len(last.phi.layers) else last.B.shape[0]
    if arch in ("gru", "lstm"):
        return module.readout.out_features
    if not len(module.blocks):
        return d_in
    last = module.blocks[-1]
    return last.phi.layers[-1].out_features if len(last.phi.layers) else last.merge.shape[0]


__all__ = ["check_precision", "export_onnx"]
