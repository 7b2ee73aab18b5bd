"""The stock LSTM / GRU targets at long ``max_len``: robust Listing 2 (``n = 3``, tokens up to 10) and ``parity``, per
architecture, dtype and ``max_len``: the tolerance stated, layers, width, parameters, build time (process CPU seconds,
median of ``--repeats`` builds, each of a freshly compiled program: the value bounds at ``max_len`` included), and
whether every output equals the interpreter's on sequences that reach the value bounds (a prompt repeating the
query's key with the largest value, so the output registers reach their bound), prompts of a token map, and random
tokens. float32 rows add onnxruntime's largest error on the exported file (``export_stock_onnx``) and, built with
``runtime="onnxruntime"``, the tolerance that holds there.

    python benchmarks/stock_long.py [--lengths 256,1000,4096] [--repeats 3] [--csv DIR]   # DIR/stock_long.csv
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import lsrl
from lsrl.programs import discrete_approximator, discrete_prompt, parity
from lsrl.targets import STOCK
from lsrl.targets.stock import export_stock_onnx
from results import add_csv_option, write_csv

PROGRAMS = {"listing2 (robust, n=3, tokens <= 10)": lambda: discrete_approximator(3, robust=True, vocabulary=10),
            "parity": parity}


def listing2_inputs(length, rng):
    """Two prompts that repeat the query's key with the largest values (the registers reach their bound), two
    prompts of a random token map, two random token sequences."""
    n, largest = 3, 10
    query = [1] * n
    repeated = np.array((query + (query + [largest] * n) * length)[:length], dtype=float)
    zeros = np.array(([0] * n + ([0] * n + [largest] * n) * length)[:length], dtype=float)
    keys = {tuple(int(t) for t in rng.integers(0, largest + 1, n)) for _ in range(length // (2 * n))}
    mapping = {key: tuple(int(t) for t in rng.integers(0, largest + 1, n)) for key in sorted(keys)}
    prompts = [np.resize(discrete_prompt(mapping, query)[:, 0], length) for query in list(mapping)[:2]]
    return np.stack([repeated, zeros, *prompts, *rng.integers(0, largest + 1, size=(2, length))])[..., None]


def inputs(name, length, rng):
    if name == "parity":
        bits = rng.integers(0, 2, size=(6, length, 1)).astype(float)
        bits[0] = 1.0  # the features' largest values
        return bits
    return listing2_inputs(length, rng)


def build_seconds(make, arch, options, repeats):
    """Median CPU seconds of ``to_torch`` on a freshly compiled program (its value bounds included), and the module."""
    times = []
    for _ in range(repeats):
        model = lsrl.compile(make(), progress=False)
        start = time.process_time()
        net = model.to_torch(arch, **options)
        times.append(time.process_time() - start)
    return statistics.median(times), net


def onnx_error(net, xs, reference):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    with tempfile.TemporaryDirectory() as folder:
        path = export_stock_onnx(net, Path(folder) / "net.onnx")
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        got = session.run(None, {"x": xs.astype(np.float32)})[0].astype(np.float64)
    return float(np.max(np.abs(got - reference)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="256,1000,4096")
    parser.add_argument("--repeats", type=int, default=3)
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'program':38} {'target':10} {'runtime':11} {'dtype':7} {'max_len':>7} {'layers':>6} {'hidden':>6} "
          f"{'params':>8} {'build s':>7} {'tolerance':>9} {'exact':>5} {'onnx err':>9}")
    for name, make in PROGRAMS.items():
        model = lsrl.compile(make(), progress=False)
        for length in (int(text) for text in args.lengths.split(",")):
            xs = inputs(name, length, rng)
            reference = np.array(model(xs, exact=True), dtype=np.float64)
            for arch in STOCK:
                for dtype, runtime in ((torch.float32, "torch"), (torch.float64, "torch"),
                                       (torch.float32, "onnxruntime")):
                    options = dict(max_len=length, dtype=dtype, runtime=runtime)
                    try:
                        seconds, net = build_seconds(make, arch, options, args.repeats)
                    except lsrl.LsrlError as error:  # e.g. parity for onnxruntime: no identity units there
                        print(f"{name:38} {arch:10} {runtime:11} {str(dtype)[6:]:7} {length:7d} refused: {error}")
                        rows.append(dict(program=name, target=arch, runtime=runtime, dtype=str(dtype)[6:],
                                         max_len=length, refused=str(error)))
                        continue
                    with torch.no_grad():
                        out = net(torch.as_tensor(xs, dtype=dtype)).double().numpy()
                    error = float(np.max(np.abs(out - reference)))
                    onnx = onnx_error(net, xs, reference) if dtype == torch.float32 else None
                    row = dict(program=name, target=arch, runtime=runtime, dtype=str(dtype)[6:], max_len=length,
                               layers=net.core.num_layers, hidden=net.core.hidden_size,
                               params=sum(p.numel() for p in net.parameters()), build_cpu_s=round(seconds, 2),
                               tolerance=f"{net.tolerance:.3g}", largest_output=float(np.abs(reference).max()),
                               sequences=len(xs), max_error=f"{error:.3g}", exact=error == 0.0,
                               onnx_max_error="" if onnx is None else f"{onnx:.3g}", refused="")
                    rows.append(row)
                    assert error <= net.tolerance, row
                    print(f"{name:38} {arch:10} {runtime:11} {row['dtype']:7} {length:7d} {row['layers']:6d} "
                          f"{row['hidden']:6d} {row['params']:8d} {seconds:7.2f} {row['tolerance']:>9} "
                          f"{str(row['exact']):>5} {row['onnx_max_error']:>9}", flush=True)
    write_csv(args.csv, "stock_long", rows)


if __name__ == "__main__":
    main()
