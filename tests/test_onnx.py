"""ONNX export of the RNN, GRU and LSTM targets, run in onnxruntime (float32).

onnx and onnxruntime are required: a missing one fails these tests (no skips).
"""

import random
from functools import lru_cache

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

import lsrl
from conftest import random_map
from lsrl.programs import continuous_approximator, discrete_approximator, discrete_prompt, more_ones_than_zeros
from lsrl.targets.blocks import to_blocks
from lsrl.targets.gru_lstm import build_gru, build_lstm
from lsrl.targets.onnx_export import export_onnx
from lsrl.targets.recurrent import BlockModel, ClassicRNNBlock

ARCHS = ("rnn", "gru", "lstm")
RECURRENT_OP = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM"}
PROGRAMS = {
    "more_ones": more_ones_than_zeros,
    "discrete_multiplicative": lambda: discrete_approximator(3, ifelse="multiplicative"),
    "discrete_multiplicative_optimized": lambda: discrete_approximator(3, ifelse="multiplicative_optimized"),
    "continuous_multiplicative": lambda: continuous_approximator(2, 2, ifelse="multiplicative"),
}


@lru_cache(maxsize=None)
def compiled(name):
    program = PROGRAMS[name]()
    return program, to_blocks(lsrl.compile(program))


def module_for(arch, stack):
    if arch == "rnn":
        return BlockModel(stack, ClassicRNNBlock, "rnn")
    return (build_gru if arch == "gru" else build_lstm)(stack)


@lru_cache(maxsize=None)
def exported(arch, name, tmp_root):
    _, stack = compiled(name)
    module = module_for(arch, stack)
    path = export_onnx(module, f"{tmp_root}/{name}_{arch}.onnx", arch)
    return module, path, onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("onnx"))


def run_onnx(session, xs):
    return session.run(["y"], {"x": np.asarray(xs, dtype=np.float32)})[0]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_graph_uses_standard_recurrent_ops_with_relu(arch, tmp_root):
    _, path, _ = exported(arch, "discrete_multiplicative", tmp_root)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    recurrent = [node for node in model.graph.node if node.op_type == RECURRENT_OP[arch]]
    assert recurrent
    for node in recurrent:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attributes["activations"] == [b"Relu"] * {"rnn": 1, "gru": 2, "lstm": 3}[arch]
        assert attributes["direction"] == b"forward"
        if arch == "gru":
            assert attributes["linear_before_reset"] == 1
        initial = node.input[5]  # initial_h, broadcast from an initializer over the batch
        assert any(n.op_type == "Expand" and n.output[0] == initial for n in model.graph.node)
    assert {node.op_type for node in model.graph.node} <= {
        "RNN", "GRU", "LSTM", "MatMul", "Add", "Relu", "Mul", "Transpose", "Squeeze", "Shape", "Slice", "Concat",
        "Expand",
    } | ({"Gather", "Sub", "Sqrt", "ReduceSum"} if arch == "gru" else set())  # the GRU's gate_bound check
    (x,), (y,) = model.graph.input, model.graph.output
    assert x.name == "x" and y.name == "y"
    dims = [d.dim_param or d.dim_value for d in x.type.tensor_type.shape.dim]
    assert dims == ["batch", "time", 1]


@pytest.mark.parametrize("arch", ARCHS)
def test_more_ones_than_zeros(arch, tmp_root):
    program, _ = compiled("more_ones")
    _, _, session = exported(arch, "more_ones", tmp_root)
    rng = random.Random(1)
    for count, length in ((3, 25), (1, 40)):  # dynamic batch and time
        bits = np.array([[[rng.randint(0, 1)] for _ in range(length)] for _ in range(count)], dtype=float)
        np.testing.assert_array_equal(run_onnx(session, bits), program(bits))


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["multiplicative", "multiplicative_optimized"])
@pytest.mark.parametrize("arch", ARCHS)
def test_discrete_approximator_every_token_right(arch, variant, tmp_root):
    name = f"discrete_{variant}"
    program, _ = compiled(name)
    module, _, session = exported(arch, name, tmp_root)
    mapping = random_map(random.Random(7), 3, pairs=10)
    prompts = np.stack([discrete_prompt(mapping, query=key) for key in mapping]).astype(float)
    out = run_onnx(session, prompts)
    assert np.array_equal(np.round(out[:, -3:, 0]), np.array(list(mapping.values()), dtype=float))
    with torch.no_grad():
        reference = module(torch.as_tensor(prompts)).numpy()
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-3)
    np.testing.assert_allclose(out, program(prompts), rtol=0, atol=1e-3)


@pytest.mark.parametrize("arch", ARCHS)
def test_continuous_approximator_to_1e_3(arch, tmp_root):
    """float32 inference: |onnx - interpreter| <= 1e-3 (the GRU's gate scaling 1/1024 costs 10 bits)."""
    program, _ = compiled("continuous_multiplicative")
    _, _, session = exported(arch, "continuous_multiplicative", tmp_root)
    xs = np.random.default_rng(2).random((4, 30, 5))
    xs[:, 1::2, 0] = 1 / 8
    np.testing.assert_allclose(run_onnx(session, xs), program(xs), rtol=0, atol=1e-3)


@pytest.mark.parametrize("arch", ARCHS)
def test_float64_export_is_valid_onnx(arch, tmp_path):
    """onnxruntime has no double kernels for RNN / GRU / LSTM; the file itself is valid ONNX."""
    _, stack = compiled("more_ones")
    path = export_onnx(module_for(arch, stack), tmp_path / "model.onnx", arch, dtype="float64")
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    assert all(init.data_type in (onnx.TensorProto.DOUBLE, onnx.TensorProto.INT64) for init in model.graph.initializer)


def test_wrong_architecture_is_an_lsrl_error(tmp_path):
    _, stack = compiled("more_ones")
    with pytest.raises(lsrl.LsrlError, match="architecture"):
        export_onnx(build_lstm(stack), tmp_path / "m.onnx", "hawk")
    with pytest.raises(lsrl.LsrlError, match="build_gru"):
        export_onnx(build_lstm(stack), tmp_path / "m.onnx", "gru")
