"""Seconds per forward pass of the LLRNN models: explicit equations vs the LLRNN form (master terms
run by the generic cell), float64, median of several runs.

    python benchmarks/llrnn.py [--batch 16] [--length 64] [--repeats 3] [--csv DIR]   # DIR/llrnn.csv
"""

import argparse
import statistics
import time

import torch

from lsrl.llrnn import explicit
from lsrl.llrnn.forms import llrnn_form
from results import add_csv_option, write_csv

MODELS = {
    "SecondOrderRNN(8, 32)": lambda: explicit.SecondOrderRNN(8, 32),
    "HigherOrderRNN(8, 32, L=3)": lambda: explicit.HigherOrderRNN(8, 32, 3),
    "NTM(8, 32, N=32)": lambda: explicit.NTM(8, 32, 32, powers=(0, 1, 31)),
    "DihedralNTM(8, 32, N=32)": lambda: explicit.DihedralNTM(8, 32, 32),
    "PatternNTM(8, 32, N=32)": lambda: explicit.PatternNTM(8, 32, 32, 8, head_powers=(0, 1, 31)),
    "PatternNTM(8, 32, N=32), TF stabilisers": lambda: explicit.PatternNTM(8, 32, 32, 8, head_powers=(0, 1, 31),
                                                                           **explicit.ALL_STABILISERS),
    "MultiplePatternNTM(8, 32, N=32,2,2,2)": lambda: explicit.MultiplePatternNTM(8, 32, 8, slots=(32, 2, 2, 2)),
    "PolynomialStepNTM(8, 32, N=32)": lambda: explicit.PolynomialStepNTM(8, 32, 32, 8, head_powers=(0, 1, 31)),
}


def median_seconds(run, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        with torch.no_grad():
            run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    add_csv_option(parser)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    print(f"{'model':40} {'state':>6} {'explicit s':>11} {'LLRNN form s':>13} {'ratio':>7}")
    for name, build in MODELS.items():
        model = build()
        cell = llrnn_form(model)
        xs = torch.randn(args.batch, args.length, model.input_dim, dtype=torch.float64)
        fast = median_seconds(lambda: model(xs), args.repeats)  # noqa: B023  (called in this iteration)
        slow = median_seconds(lambda: cell(xs), args.repeats)  # noqa: B023
        print(f"{name:40} {model.state_dim:6d} {fast:11.3f} {slow:13.3f} {slow / fast:7.1f}", flush=True)
        rows.append({"model": name, "state": model.state_dim, "explicit s": round(fast, 3),
                     "LLRNN form s": round(slow, 3), "ratio": round(slow / fast, 1)})
    write_csv(args.csv, "llrnn", rows)


if __name__ == "__main__":
    main()
