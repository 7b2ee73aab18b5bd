"""Tokens per second of compiled programs (float64), median of several runs, against the targets.

    python benchmarks/run.py [--lengths 1000 20000] [--batches 1 256] [--repeats 5] [--csv DIR]   # DIR/run.csv

Each model is run once untimed first: that call compiles the numba kernels (or loads them from
numba's disk cache), which is not part of running a program.
"""

import argparse
import os
import statistics
import time

import numpy as np

import lsrl
from lsrl.programs import continuous_approximator, discrete_approximator
from results import add_csv_option, write_csv

TARGETS = {1: 100_000, 256: 1_000_000}  # tokens/s the issue asks for, by batch size


def tokens_per_second(model, xs, repeats):
    model(xs[:, :10])  # warm-up: kernels compiled or loaded, plan built
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model(xs)
        times.append(time.perf_counter() - start)
    return xs.shape[0] * xs.shape[1] / statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 20000])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--repeats", type=int, default=5)
    add_csv_option(parser)
    args = parser.parse_args()
    generator = np.random.default_rng(0)
    programs = [discrete_approximator(3, ifelse="multiplicative"),
                continuous_approximator(2, 2, ifelse="multiplicative")]
    print(f"{os.cpu_count()} cores, median of {args.repeats} runs")
    print(f"{'program':46} {'batch':>5} {'length':>7} {'tokens/s':>12} {'target':>10}  met")
    missed, rows = 0, []
    for program in programs:
        model = lsrl.compile(program, backend="float", progress=False)
        for batch in args.batches:
            for length in args.lengths:
                if program.input.dim == 1:
                    xs = generator.integers(0, 11, size=(batch, length, 1)).astype(np.float64)
                else:
                    xs = generator.random((batch, length, program.input.dim))
                speed = tokens_per_second(model, xs, args.repeats)
                target = TARGETS.get(batch)
                met = "-" if target is None else "yes" if speed >= target else "NO"
                missed += met == "NO"
                print(f"{program.name:46} {batch:5d} {length:7d} {speed:12,.0f} {target or 0:10,}  {met}", flush=True)
                rows.append({"program": program.name, "batch": batch, "length": length, "tokens/s": round(speed),
                             "target": target or "", "met": met})
    print("all targets met" if not missed else f"{missed} target(s) missed")
    write_csv(args.csv, "run", rows)


if __name__ == "__main__":
    main()
