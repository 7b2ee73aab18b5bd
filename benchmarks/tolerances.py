"""How far each execution path is from the exact interpreter: the largest absolute error of every
path, on the library's programs and their own prompts, against ``program(xs, exact=True)``.

    python benchmarks/tolerances.py [--batch 4] [--length 300] [--seed 0] [--csv DIR]   # DIR/tolerances.csv

Paths: the interpreter in float64 (``program(xs)``), the exact runner (``model(xs, exact=True)``),
the float runner of the exact-compiled model (``model(xs)``) and of the float-compiled one
(``compile(program, backend="float")``), every torch target (``model.to_torch(arch)``) in float64
and in float32, and the float32 ONNX file of every target that exports one (run by onnxruntime). A
path that refuses the program says why (printed; "refused" in the CSV). One torch thread.
"""

import argparse
import string
import tempfile
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

import lsrl
from lsrl.errors import LsrlError
from lsrl.programs import (continuous_approximator, continuous_prompt, continuous_query, discrete_approximator,
                           discrete_prompt, more_ones_than_zeros)
from lsrl.targets import ARCHITECTURES
from lsrl.targets.onnx_export import ARCHS as ONNX_ARCHS
from lsrl.targets.onnx_export import export_onnx
from results import add_csv_option, write_csv

CONTINUOUS_VARIANTS = ("original", "step", "multiplicative")
DISCRETE_VARIANTS = ("original", "multiplicative")


def programs(generator: np.random.Generator, batch: int, length: int) -> list:
    """(program, inputs (batch, T, d_in) as exact Python numbers) for Fig. 1 and Listings 1 and 2."""
    bits = generator.integers(0, 2, size=(batch, length, 1)).astype(object)
    cases = [(more_ones_than_zeros(), bits)]
    prompt = continuous_prompt(lambda q: [np.sin(3 * q[0]) * q[1], q[0] ** 2 - q[1]], 2, 2, 8, exact=True)
    queries = [[Fraction(int(v), 1000) for v in generator.integers(0, 1000, 2)] for _ in range(batch)]
    continuous = np.stack([np.vstack([continuous_query(q, 2), prompt]) for q in queries])
    cases += [(continuous_approximator(2, 2, ifelse=variant), continuous) for variant in CONTINUOUS_VARIANTS]
    letters = [ord(c) - ord("A") + 1 for c in string.ascii_uppercase]  # tokens 1 .. 26, as the demo's words
    keys = {tuple(int(v) for v in generator.choice(letters, 3)) for _ in range(40)}
    mapping = {key: tuple(int(v) for v in generator.choice(letters, 3)) for key in keys}
    chosen = [list(mapping)[int(i)] for i in generator.integers(0, len(mapping), batch)]
    discrete = np.stack([discrete_prompt(mapping, query=key).astype(object) for key in chosen])
    cases += [(discrete_approximator(3, ifelse=variant), discrete) for variant in DISCRETE_VARIANTS]
    return cases


def exact_outputs(program, xs) -> np.ndarray:
    return np.stack([np.asarray(program(x, exact=True), dtype=object) for x in xs]).astype(np.float64)


def error(outputs, truth: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(outputs, dtype=np.float64) - truth)))


def torch_outputs(module, xs: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the float32 precision warning: measured here instead
        return module.to(dtype)(torch.as_tensor(xs, dtype=dtype)).double().numpy()


def onnx_outputs(module, arch: str, xs: np.ndarray, folder: Path) -> np.ndarray:
    import onnxruntime

    path = folder / f"{arch}.onnx"
    export_onnx(module, path, arch, "float32", allow_inexact=True)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: xs.astype(np.float32)}
    return session.run(None, feed)[0].astype(np.float64)


def measured_paths(program, xs: np.ndarray, folder: Path):
    """(path, dtype, callable giving outputs) for every path of ``program``."""
    model = lsrl.compile(program)
    floats = xs.astype(np.float64)
    yield "interpreter", "float64", lambda: np.stack([program(x) for x in floats])
    yield "exact runner", "exact", lambda: np.stack([np.asarray(model(x, exact=True), dtype=object) for x in xs])
    yield "float runner", "float64", lambda: model(floats)
    yield "float backend", "float64", lambda: lsrl.compile(program, backend="float")(floats)
    for arch in ARCHITECTURES:
        for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
            yield f"torch {arch}", name, lambda arch=arch, dtype=dtype: torch_outputs(model.to_torch(arch), floats,
                                                                                       dtype)
        if arch in ONNX_ARCHS:
            yield f"onnx {arch}", "float32", lambda arch=arch: onnx_outputs(model.to_torch(arch), arch, floats, folder)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4, help="prompts per program")
    parser.add_argument("--length", type=int, default=300, help="length of Fig. 1's bit strings")
    parser.add_argument("--seed", type=int, default=0)
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    print(f"{'program':46} {'path':26} {'dtype':8} {'max |error|':>12}")
    with tempfile.TemporaryDirectory() as folder:
        for program, xs in programs(np.random.default_rng(args.seed), args.batch, args.length):
            truth = exact_outputs(program, xs)
            for path, dtype, outputs in measured_paths(program, xs, Path(folder)):
                try:
                    shown = measured = f"{error(outputs(), truth):.3g}"
                except LsrlError as refusal:  # the target cannot hold the program: it says why
                    measured, shown = "refused", str(refusal)
                rows.append({"program": program.name, "path": path, "dtype": dtype, "max_abs_error": measured})
                print(f"{program.name:46} {path:26} {dtype:8} {shown:>12}", flush=True)
    write_csv(args.csv, "tolerances", rows)


if __name__ == "__main__":
    main()
