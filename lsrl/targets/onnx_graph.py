"""An ONNX graph built node by node: ``OnnxGraph``, what the target export (``lsrl.targets.onnx_export``)
and the automaton export (``lsrl.automata.export``) write their files with.

A file reads ``x`` of shape ``(batch, time, d_in)`` and writes ``y`` of shape ``(batch, time, d_out)``,
batch and time dynamic; in between, the graph runs time-major (``(T, B, d)``), the layout of ONNX's
``RNN`` / ``GRU`` / ``LSTM`` operators. ``OnnxGraph.read_input`` and ``OnnxGraph.write`` are the two
ends; ``recurrence`` is one of those operators over weights in PyTorch's layout, gates reordered by
``reorder_gates``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

OPSET = 17
IR_VERSION = 8
DTYPES = {"float32": np.float32, "float64": np.float64}


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's values as a float64 numpy array (detached, on the CPU)."""
    return tensor.detach().cpu().double().numpy()


# PyTorch's gate blocks in ONNX's order: LSTM i f g o -> i o f c; GRU r z n -> z r h
ONNX_GATE_ORDER = {"lstm": (0, 3, 1, 2), "gru": (1, 0, 2)}


def reorder_gates(matrix: np.ndarray, hidden: int, order: Sequence[int]) -> np.ndarray:
    """Rows in PyTorch gate blocks -> rows in ONNX gate blocks (``order`` lists PyTorch block indices)."""
    blocks = [matrix[i * hidden:(i + 1) * hidden] for i in range(len(order))]
    return np.concatenate([blocks[i] for i in order], axis=0)


class OnnxGraph:
    """Nodes and initializers of one ONNX graph in ``dtype`` ("float32" or "float64"), with fresh names."""

    def __init__(self, dtype: str) -> None:
        import onnx
        from onnx import helper, numpy_helper

        self.onnx, self.helper, self.numpy_helper = onnx, helper, numpy_helper
        self.dtype = dtype
        self.np_dtype = DTYPES[dtype]
        self.elem_type = onnx.TensorProto.FLOAT if dtype == "float32" else onnx.TensorProto.DOUBLE
        self.nodes: list = []
        self.initializers: list = []
        self.count = 0

    def name(self, hint: str) -> str:
        """A name no other node or initializer of this graph has."""
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, array: Any, hint: str, integer: bool = False) -> str:
        """An initializer holding ``array`` (int64 if ``integer``, else the graph's dtype); returns its name."""
        array = np.asarray(array, dtype=np.int64 if integer else self.np_dtype)
        name = self.name(hint)
        self.initializers.append(self.numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], hint: str | None = None, outputs: int = 1,
           **attrs: Any) -> Any:
        """A node of ``op_type``; returns its output's name (a list of ``outputs`` names when more than one)."""
        names = [self.name(hint or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), names, name=self.name(op_type), **attrs))
        return names[0] if outputs == 1 else names

    def linear(self, v: str, W: np.ndarray, b: np.ndarray | None = None, relu: bool = False,
               hint: str = "linear") -> str:
        """``v @ W.T + b`` (then ReLU) on a ``(T, B, d)`` tensor."""
        out = self.op("MatMul", [v, self.const(np.asarray(W).T, f"{hint}_W")], hint)
        if b is not None and np.any(b):
            out = self.op("Add", [out, self.const(b, f"{hint}_b")], hint)
        return self.op("Relu", [out], hint) if relu else out

    def initial(self, state: np.ndarray, batch_shape_prefix: str, hint: str) -> str:
        """A ``(1, B, H)`` initial state: the ``(H,)`` vector broadcast over the batch."""
        state = np.asarray(state)
        shape = self.op("Concat", [batch_shape_prefix, self.const([state.shape[0]], f"{hint}_H", integer=True)], axis=0)
        return self.op("Expand", [self.const(state.reshape(1, 1, -1), hint), shape], hint)

    def recurrence(self, op_type: str, seq: str, W: np.ndarray, R: np.ndarray, B: np.ndarray, hidden: int,
                   inits: Sequence[np.ndarray], batch_prefix: str, activations: Sequence[str], hint: str,
                   **attrs: Any) -> str:
        """One ONNX ``RNN`` / ``GRU`` / ``LSTM`` over ``seq`` ``(T, B, in)`` from the initial states ``inits``
        (``h0``, and ``c0`` for the LSTM); returns ``(T, B, hidden)``. ``W``, ``R``, ``B`` in ONNX's gate order;
        empty ``activations``: the operator's defaults (sigmoid and tanh)."""
        states = [self.initial(state, batch_prefix, f"{hint}_init") for state in inits]
        weights = [self.const(W[None], f"{hint}_W"), self.const(R[None], f"{hint}_R"), self.const(B[None], f"{hint}_B")]
        outputs = self.op(
            op_type, [seq, *weights, ""] + states, hint, outputs=2 if op_type != "LSTM" else 3,
            hidden_size=int(hidden), direction="forward", **({"activations": list(activations)} if activations else {}),
            **attrs,
        )
        return self.op("Squeeze", [outputs[0], self.const([1], f"{hint}_axis", integer=True)], hint)

    def read_input(self) -> tuple[str, str, str]:
        """The input ``x`` time-major ``(T, B, d)``, its batch size ``[B]`` and the shape prefix ``[1, B]``
        of an initial state."""
        seq = self.op("Transpose", ["x"], "time_major", perm=[1, 0, 2])
        batch = self.op("Slice", [
            self.op("Shape", ["x"], "shape"), self.const([0], "start", integer=True),
            self.const([1], "end", integer=True),
        ], "batch")
        batch_prefix = self.op("Concat", [self.const([1], "one", integer=True), batch], "batch_prefix", axis=0)
        return seq, batch, batch_prefix

    def write(self, seq: str, path: str | Path, graph_name: str, d_in: int, d_out: int, doc: str) -> Path:
        """Make ``seq`` (time-major ``(T, B, d_out)``) the output ``y``, check the model (``full_check``) and
        save it to ``path``; returns the path."""
        helper = self.helper
        self.op("Transpose", [seq], "batch_major", perm=[1, 0, 2])
        self.nodes[-1].output[0] = "y"
        graph = helper.make_graph(
            self.nodes, graph_name,
            [helper.make_tensor_value_info("x", self.elem_type, ["batch", "time", d_in])],
            [helper.make_tensor_value_info("y", self.elem_type, ["batch", "time", d_out])],
            initializer=self.initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="lsrl", ir_version=IR_VERSION,
        )
        model.doc_string = doc
        self.onnx.checker.check_model(model, full_check=True)
        path = Path(path)
        self.onnx.save(model, str(path))
        return path


__all__ = ["DTYPES", "IR_VERSION", "ONNX_GATE_ORDER", "OPSET", "OnnxGraph", "reorder_gates", "to_numpy"]
