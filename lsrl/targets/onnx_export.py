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
``gate_bound`` of 1024, see ``lsrl.targets.gru_lstm``), about 1e-5 relative.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lsrl.errors import LsrlError

OPSET = 17
IR_VERSION = 8
ARCHS = ("rnn", "gated_rnn", "gru", "lstm")
_DTYPES = {"float32": np.float32, "float64": np.float64}


class _Graph:
    """Nodes and initializers with fresh names."""

    def __init__(self, dtype):
        import onnx
        from onnx import helper, numpy_helper

        self.onnx, self.helper, self.numpy_helper = onnx, helper, numpy_helper
        self.np_dtype = _DTYPES[dtype]
        self.elem_type = onnx.TensorProto.FLOAT if dtype == "float32" else onnx.TensorProto.DOUBLE
        self.nodes, self.initializers, self.count = [], [], 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, array, hint, integer=False):
        array = np.asarray(array, dtype=np.int64 if integer else self.np_dtype)
        name = self.name(hint)
        self.initializers.append(self.numpy_helper.from_array(array, name))
        return name

    def op(self, op_type, inputs, hint=None, outputs=1, **attrs):
        names = [self.name(hint or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), names, name=self.name(op_type), **attrs))
        return names[0] if outputs == 1 else names

    def linear(self, v, W, b=None, relu=False, hint="linear"):
        """``v @ W.T + b`` (then ReLU) on a ``(T, B, d)`` tensor."""
        out = self.op("MatMul", [v, self.const(np.asarray(W).T, f"{hint}_W")], hint)
        if b is not None and np.any(b):
            out = self.op("Add", [out, self.const(b, f"{hint}_b")], hint)
        return self.op("Relu", [out], hint) if relu else out

    def initial(self, state, batch_shape_prefix, hint):
        """A ``(1, B, H)`` initial state: the ``(H,)`` vector broadcast over the batch."""
        state = np.asarray(state)
        shape = self.op("Concat", [batch_shape_prefix, self.const([state.shape[0]], f"{hint}_H", integer=True)], axis=0)
        return self.op("Expand", [self.const(state.reshape(1, 1, -1), hint), shape], hint)


def _numpy(tensor):
    return tensor.detach().cpu().double().numpy()


def _recurrence(g, op_type, seq, W, R, B, hidden, inits, batch_prefix, activations, hint, **attrs):
    """One ONNX RNN / GRU / LSTM over ``seq`` ``(T, B, in)``; returns ``(T, B, hidden)``. Empty
    ``activations``: the operator's defaults (sigmoid and tanh)."""
    states = [g.initial(state, batch_prefix, f"{hint}_init") for state in inits]
    outputs = g.op(
        op_type,
        [seq, g.const(W[None], f"{hint}_W"), g.const(R[None], f"{hint}_R"), g.const(B[None], f"{hint}_B"), ""] + states,
        hint, outputs=2 if op_type != "LSTM" else 3,
        hidden_size=int(hidden), direction="forward", **({"activations": list(activations)} if activations else {}),
        **attrs,
    )
    return g.op("Squeeze", [outputs[0], g.const([1], f"{hint}_axis", integer=True)], hint)


def _reorder(matrix, hidden, order):
    """Rows in PyTorch gate blocks -> rows in ONNX gate blocks (``order`` lists PyTorch block indices)."""
    blocks = [matrix[i * hidden:(i + 1) * hidden] for i in range(len(order))]
    return np.concatenate([blocks[i] for i in order], axis=0)


def _dense_stack(g, stack, v, hint):
    for linear, relu in zip(stack.layers, stack.relu):
        v = g.linear(v, _numpy(linear.weight), _numpy(linear.bias), relu=relu, hint=hint)
    return v


def _rnn_blocks(g, module, seq, batch_prefix):
    """``BlockModel`` of ``ClassicRNNBlock``: stock ``torch.nn.RNN(relu)`` + merge + phi, gamma gate."""
    for index, block in enumerate(module.blocks):
        rnn = block.rnn
        if rnn.num_layers != 1 or rnn.bidirectional or rnn.nonlinearity != "relu":
            raise LsrlError(f"export_onnx: block {index} must hold a one-layer forward ReLU torch.nn.RNN")
        W, R = _numpy(rnn.weight_ih_l0), _numpy(rnn.weight_hh_l0)
        B = np.concatenate([_numpy(rnn.bias_ih_l0), _numpy(rnn.bias_hh_l0)])
        split = _recurrence(
            g, "RNN", seq, W, R, B, rnn.hidden_size, [_numpy(block.h0)], batch_prefix, ["Relu"], f"block{index}_rnn"
        )
        states = g.linear(split, _numpy(block.merge), hint=f"block{index}_merge")
        out = _dense_stack(g, block.phi, states, f"block{index}_phi")
        if block.gamma is not None:
            out = g.op("Mul", [_dense_stack(g, block.gamma, seq, f"block{index}_gamma"), out], f"block{index}_gate")
        seq = out
    return seq


def _cell_layers(g, module, seq, batch_prefix):
    """``CellModel`` (``lsrl.targets.gru_lstm``): ReLU GRU / LSTM layers and the linear readout."""
    cells = module.rnn
    gru = cells.kind == "gru"
    for k, hidden in enumerate(cells.hidden_sizes):
        t = {name: _numpy(value) for name, value in cells.layer_tensors(k).items()}
        order = (1, 0, 2) if gru else (0, 3, 1, 2)  # ONNX gates: GRU z r h, LSTM i o f c
        W, R = _reorder(t["weight_ih"], hidden, order), _reorder(t["weight_hh"], hidden, order)
        B = np.concatenate([_reorder(t["bias_ih"], hidden, order), _reorder(t["bias_hh"], hidden, order)])
        if gru:
            seq = _recurrence(
                g, "GRU", seq, W, R, B, hidden, [t["h0"]], batch_prefix, ["Relu", "Relu"], f"gru{k}",
                linear_before_reset=1,
            )
        else:
            seq = _recurrence(
                g, "LSTM", seq, W, R, B, hidden, [t["h0"], t["c0"]], batch_prefix, ["Relu", "Relu", "Relu"], f"lstm{k}"
            )
    return g.linear(seq, _numpy(module.readout.weight), _numpy(module.readout.bias), hint="readout")


def export_onnx(module, path, arch=None, dtype="float32"):
    """Write ``module`` (architecture ``arch``: "rnn", "gru" or "lstm") as an ONNX model to ``path``.

    ``arch`` defaults to ``module.architecture``. Returns the path written.
    """
    import onnx

    arch = arch or getattr(module, "architecture", None)
    if arch not in ARCHS:
        raise LsrlError(f"export_onnx: architecture must be one of {ARCHS}, got {arch!r}")
    if dtype not in _DTYPES:
        raise LsrlError(f"export_onnx: dtype must be one of {tuple(_DTYPES)}, got {dtype!r}")
    g = _Graph(dtype)
    if arch in ("rnn", "gated_rnn"):
        if not hasattr(module, "blocks"):
            raise LsrlError(f"export_onnx: {arch!r} expects a BlockModel of ClassicRNNBlock blocks")
        if not len(module.blocks):
            raise LsrlError("export_onnx: the module has no blocks (an empty program); nothing to export")
        d_in = module.blocks[0].rnn.input_size
    else:
        if getattr(module, "architecture", arch) != arch or not hasattr(module, "rnn"):
            raise LsrlError(f"export_onnx: {arch!r} expects a module built by build_{arch}")
        d_in = module.rnn.input_size
    seq = g.op("Transpose", ["x"], "time_major", perm=[1, 0, 2])  # (T, B, d)
    batch = g.op("Slice", [
        g.op("Shape", ["x"], "shape"), g.const([0], "start", integer=True), g.const([1], "end", integer=True)
    ], "batch")
    batch_prefix = g.op("Concat", [g.const([1], "one", integer=True), batch], "batch_prefix", axis=0)  # [1, B]
    if arch in ("rnn", "gated_rnn"):
        seq = _rnn_blocks(g, module, seq, batch_prefix)
    else:
        seq = _cell_layers(g, module, seq, batch_prefix)
    g.op("Transpose", [seq], "batch_major", perm=[1, 0, 2])
    g.nodes[-1].output[0] = "y"
    d_out = _output_dim(module, arch, d_in)
    graph = g.helper.make_graph(
        g.nodes, f"lsrl_{arch}",
        [g.helper.make_tensor_value_info("x", g.elem_type, ["batch", "time", d_in])],
        [g.helper.make_tensor_value_info("y", g.elem_type, ["batch", "time", d_out])],
        initializer=g.initializers,
    )
    model = g.helper.make_model(
        graph, opset_imports=[g.helper.make_opsetid("", OPSET)], producer_name="lsrl", ir_version=IR_VERSION,
    )
    model.doc_string = f"lsrl {arch} model; recurrent activations: Relu in place of sigmoid and tanh"
    onnx.checker.check_model(model, full_check=True)
    path = Path(path)
    onnx.save(model, str(path))
    return path


def _output_dim(module, arch, d_in):
    if arch in ("gru", "lstm"):
        return module.readout.out_features
    if not len(module.blocks):
        return d_in
    last = module.blocks[-1]
    return last.phi.layers[-1].out_features if len(last.phi.layers) else last.rnn.hidden_size // 2


__all__ = ["export_onnx"]
