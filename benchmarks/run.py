"""Tokens per second of compiled programs (float64), median of 3.

    python benchmarks/run.py [--lengths 1000 20000] [--batches 1 256]
"""

import argparse
import statistics
import time

import numpy as np

import lsrl
from lsrl.programs import continuous_approximator, discrete_approximator


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 20000])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    generator = np.random.default_rng(0)
    programs = [discrete_approximator(3, ifelse="multiplicative"), continuous_approximator(2, 2, ifelse="multiplicative")]
    print(f"{'program':46} {'batch':>5} {'length':>7} {'seconds':>8} {'tokens/s':>12}")
    for program in programs:
        model = lsrl.compile(program, backend="float", progress=False)
        for batch in args.batches:
            for length in args.lengths:
                if program.input.dim == 1:
                    xs = generator.integers(0, 11, size=(batch, length, 1)).astype(np.float64)
                else:
                    xs = generator.random((batch, length, program.input.dim))
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    model(xs)
                    times.append(time.perf_counter() - start)
                seconds = statistics.median(times)
                print(f"{program.name:46} {batch:5d} {length:7d} {seconds:8.3f} {batch * length / seconds:12,.0f}",
                      flush=True)


if __name__ == "__main__":
    main()
