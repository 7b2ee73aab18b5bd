"""What the recurrent kernels that have their own sigmoid and tanh compute in float32, against the exact functions:
onnxruntime's ``GRU`` and ``LSTM`` operators (the facts ``lsrl.targets.stock``'s ``runtime="onnxruntime"``
construction rests on: ``ONNX_ACTIVATION_ULPS``, ``ONNX_FLAG_ERROR``; ``export_stock_onnx``; onnxruntime runs
these operators in float32 only), and torch's float32 ``nn.LSTM`` on the CPU, which runs oneDNN's kernel
(``aten::mkldnn_rnn_layer``), not ``torch.sigmoid`` / ``torch.tanh`` (``activation_identities.py`` enumerates
those; ``nn.GRU`` and float64 use them).

    python benchmarks/rnn_activations.py [--samples 4194304] [--csv DIR]   # DIR/rnn_activations.csv

Each activation is read through a one-unit operator whose other gates are saturated at ±1024 (exactly 0 or 1
there: a row below): GRU tanh ``h = n = tanh(x)`` (``z = 0``, ``r = 1``); GRU sigmoid ``h = z h0`` (``n = tanh(0)``,
``h0 = 1``); LSTM tanh ``h = tanh(c0)`` (``i = 0``, ``f = 1``, ``o = 1``, ``c0 = x``); LSTM sigmoid
``h = o tanh(64)`` (``o = sigmoid(x)``, ``tanh(64) = 1``: a row below); onnxruntime's GRU reset gate has a sigmoid
of its own, read as ``tanh(r 2^-12) 2^12`` (so within the tanh's few units of error). Sampled, not exhaustive:
``--samples`` log-uniform magnitudes in ``[2^-40, 2^11]`` of each sign, plus every float32 in ``[8, 10.5]`` (where
the tanh kernels round to 1) and the values the construction uses. The errors are in units of ``u = 2^-24``,
against float64; ``identity_up_to``: the largest sampled ``|x|`` below which every sample has ``tanh(x) == x``;
``exact_beyond``: the smallest ``|x|`` beyond which every sample is exactly 0 / ±1. One thread.
"""

import argparse
import platform
import time

import numpy as np

from results import add_csv_option, write_csv

U = 2.0 ** -24
READ_SCALE = 2.0 ** -12
SATURATED = 1024.0


def session(op, W, R, B):
    """An onnxruntime session of one ``op`` (``GRU`` with ``linear_before_reset=1`` or ``LSTM``), one unit, one input,
    reading ``x`` ``(T, B, 1)``, ``h0`` and for the LSTM ``c0`` ``(1, B, 1)``."""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    lstm = op == "LSTM"
    names = ("W", "R", "B")
    inits = [numpy_helper.from_array(np.asarray(a, dtype=np.float32)[None], n) for a, n in zip((W, R, B), names)]
    states = ["h0", "c0"] if lstm else ["h0"]
    node = helper.make_node(op, ["x", *names, "", *states], ["y"], hidden_size=1,
                            **({} if lstm else {"linear_before_reset": 1}))
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in
              [("x", ["T", "B", 1])] + [(state, [1, "B", 1]) for state in states]]
    graph = helper.make_graph([node], op, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(op, W, R, B, x, h0=0.0, c0=None):
    x = np.asarray(x, dtype=np.float32).reshape(1, -1, 1)
    feed = {"x": x, "h0": np.full((1, x.shape[1], 1), h0, dtype=np.float32)}
    if op == "LSTM":
        feed["c0"] = np.broadcast_to(np.asarray(c0, dtype=np.float32).reshape(1, -1, 1), x.shape).copy()
    return session(op, W, R, B).run(None, feed)[0].ravel().astype(np.float64)


# ONNX gate orders: GRU z r h (biases Wb then Rb), LSTM i o f c
def gru_tanh(x):
    return run("GRU", [[0.0], [0.0], [1.0]], np.zeros((3, 1)), [-SATURATED, SATURATED, 0, 0, 0, 0], x)


def gru_sigmoid(x):
    return run("GRU", [[1.0], [0.0], [0.0]], np.zeros((3, 1)), [0, SATURATED, 0, 0, 0, 0], x, h0=1.0)


def gru_reset_sigmoid(x):
    """The reset gate ``r = sigmoid(x)`` (a sigmoid of its own in onnxruntime's GRU: its tails are not 0 and 1),
    read as ``tanh(r 2^-12) 2^12`` (``z = 0``): within onnxruntime's tanh error of ``r`` there."""
    return run("GRU", [[0.0], [1.0], [0.0]], np.zeros((3, 1)), [-SATURATED, 0, 0, 0, 0, READ_SCALE], x) / READ_SCALE


def torch_lstm(x, weight_ih, bias_ih, c0):
    """torch's float32 ``nn.LSTM`` (one unit, gates i f g o) on ``x`` as a batch of one-step sequences from ``c0``."""
    import torch

    lstm = torch.nn.LSTM(1, 1, batch_first=True)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.tensor(weight_ih).reshape(4, 1))
        lstm.weight_hh_l0.zero_()
        lstm.bias_ih_l0.copy_(torch.tensor(bias_ih))
        lstm.bias_hh_l0.zero_()
        xs = torch.as_tensor(x, dtype=torch.float32).reshape(-1, 1, 1)
        cells = torch.as_tensor(np.broadcast_to(c0, len(x)).copy(), dtype=torch.float32).reshape(1, -1, 1)
        return lstm(xs, (torch.zeros_like(cells), cells))[0].double().numpy().ravel()


def torch_lstm_tanh(x):
    return torch_lstm(np.zeros_like(x), [0.0] * 4, [-SATURATED, SATURATED, 0, SATURATED], x)


def torch_lstm_sigmoid(x):
    return torch_lstm(x, [0.0, 0.0, 0.0, 1.0], [-SATURATED, SATURATED, 0, 0], 64.0)


def lstm_tanh(x):
    return run("LSTM", np.zeros((4, 1)), np.zeros((4, 1)), [-SATURATED, SATURATED, SATURATED, 0, 0, 0, 0, 0],
               np.zeros_like(x), c0=x)


def lstm_sigmoid(x):
    return run("LSTM", [[0.0], [1.0], [0.0], [0.0]], np.zeros((4, 1)), [-SATURATED, 0, SATURATED, 0, 0, 0, 0, 0],
               x, c0=np.full(len(x), 64.0))


def samples(count, rng):
    magnitudes = np.exp2(rng.uniform(-40, 11, count))
    window = np.arange(np.float32(8).view(np.int32), np.float32(10.5).view(np.int32), dtype=np.int32).view(np.float32)
    x = np.concatenate([magnitudes, -magnitudes, window, -window, [0.0, 64.0, -64.0, 128.0, -128.0, 1024.0, -1024.0]])
    return np.unique(x.astype(np.float32)).astype(np.float64)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1 << 22)
    add_csv_option(parser)
    args = parser.parse_args()
    import onnxruntime
    import torch

    torch.set_num_threads(1)
    x = samples(args.samples, np.random.default_rng(0))
    small = np.exp(-np.abs(x))
    exact = {"tanh": np.tanh(x), "sigmoid": np.where(x >= 0, 1.0 / (1.0 + small), small / (1.0 + small))}
    kernels = {("onnxruntime", "GRU", "tanh"): gru_tanh, ("onnxruntime", "GRU", "sigmoid"): gru_sigmoid,
               ("onnxruntime", "GRU r", "sigmoid"): gru_reset_sigmoid, ("onnxruntime", "LSTM", "tanh"): lstm_tanh,
               ("onnxruntime", "LSTM", "sigmoid"): lstm_sigmoid, ("torch", "LSTM (oneDNN)", "tanh"): torch_lstm_tanh,
               ("torch", "LSTM (oneDNN)", "sigmoid"): torch_lstm_sigmoid}
    versions = {"onnxruntime": f"onnxruntime {onnxruntime.__version__}", "torch": f"torch {torch.__version__}"}
    rows = []
    print(f"{'runtime':11} {'kernel':13} {'function':8} {'max rel err (u)':>15} {'at':>12} {'abs (u)':>8} {'rel, |f|>=1/4':>13} "
          f"{'f(0)':>6} {'f(64)':>12} {'f(±1024)':>14} {'exact 0/1 beyond':>17} {'seconds':>8}")
    for (runtime, op, name), kernel in kernels.items():
        start = time.process_time()
        got = kernel(x)
        seconds = time.process_time() - start
        reference = exact[name]
        relative = np.abs(got - reference) / np.maximum(np.abs(reference), np.finfo(np.float64).tiny)
        worst = int(np.argmax(relative))
        value = dict(zip(x, got))
        saturated = np.abs(got - np.where(x > 0, 1.0, -1.0 if name == "tanh" else 0.0)) == 0
        # the smallest sampled |x| from which every larger sample of that sign saturates exactly
        beyond = []
        for sign in (1, -1):
            side = np.flatnonzero(np.sign(x) == sign)
            ordered = side[np.argsort(np.abs(x[side]))]
            failing = np.flatnonzero(~saturated[ordered])
            last = failing[-1] if len(failing) else -1
            beyond.append(float(np.abs(x[ordered[last + 1]])) if last + 1 < len(ordered) else np.inf)
        absolute = np.abs(got - reference)
        unsaturated = np.abs(reference) >= 0.25
        ordered = np.argsort(np.abs(x))
        not_identity = np.flatnonzero(got[ordered] != x[ordered])
        identity = float(np.abs(x[ordered[not_identity[0] - 1]])) if len(not_identity) and not_identity[0] else 0.0
        row = dict(runtime=runtime, kernel=op, function=name, max_relative_error_u=f"{relative[worst] / U:.3g}", at=f"{x[worst]:.6g}",
                   max_absolute_error_u=f"{absolute.max() / U:.3g}",
                   max_relative_error_u_where_at_least_quarter=f"{relative[unsaturated].max() / U:.3g}",
                   at_zero=f"{value[0.0]:.9g}", at_64=f"{value[64.0]:.9g}", at_1024=f"{value[1024.0]:.9g}",
                   at_minus_1024=f"{value[-1024.0]:.9g}", exact_beyond=f"{max(beyond):.6g}",
                   identity_up_to=f"{identity:.6g}" if name == "tanh" else "", samples=len(x), method="sampled",
                   version=f"{versions[runtime]}, {platform.machine()}", seconds=round(seconds, 1))
        rows.append(row)
        print(f"{runtime:11} {op:13} {name:8} {row['max_relative_error_u']:>15} {row['at']:>12} {row['max_absolute_error_u']:>8} "
              f"{row['max_relative_error_u_where_at_least_quarter']:>13} {row['at_zero']:>6} "
              f"{row['at_64']:>12} {row['at_1024'] + ' ' + row['at_minus_1024']:>14} {row['exact_beyond']:>17} "
              f"{seconds:8.1f}", flush=True)
    write_csv(args.csv, "rnn_activations", rows)


if __name__ == "__main__":
    main()
