"""Compile-time and size table for the library programs (median of 3 compilations per backend).

    python benchmarks/compile.py [--sizes 3 5 10] [--repeats 3]
"""

import argparse
import statistics
import time

import lsrl
from lsrl.programs import continuous_approximator, discrete_approximator


def median_seconds(program, backend, repeats):
    times, model = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        model = lsrl.compile(program, backend=backend, progress=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times), model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cases = [(f"discrete_approximator({n})", variant, lambda n=n, v=variant: discrete_approximator(n, ifelse=v))
             for n in args.sizes for variant in lsrl.IFELSE_VARIANTS]
    cases += [("continuous_approximator(2, 2)", variant, lambda v=variant: continuous_approximator(2, 2, ifelse=v))
              for variant in lsrl.IFELSE_VARIANTS]
    header = f"{'program':30} {'ifelse':25} {'nodes':>6} {'exact s':>8} {'float s':>8} {'layers':>6} {'widest':>6} {'state':>6} {'nonzeros':>8}"
    print(header)
    print("-" * len(header))
    for label, variant, build in cases:
        program = build()
        exact_seconds, model = median_seconds(program, "exact", args.repeats)
        float_seconds, _ = median_seconds(program, "float", args.repeats)
        print(f"{label:30} {variant:25} {len(program.nodes):6d} {exact_seconds:8.3f} {float_seconds:8.3f} "
              f"{len(model.layers):6d} {model.widest_layer:6d} {model.state_size:6d} {model.parameter_count:8d}",
              flush=True)


if __name__ == "__main__":
    main()
