"""How compile time and working-graph size grow with the program (median of 3 process-CPU timings).

    python benchmarks/compile.py                     # Listing 2 (multiplicative) at n = 3 ... 300
    python benchmarks/compile.py --sizes 3 10 --variants   # every f_ifelse variant and Listing 1
    python benchmarks/compile.py --csv docs/results/benchmarks   # the table also as compile.csv

The scaling table gives, per size: program nodes, the peak non-zero weights the working graph held
while compiling, the final model's non-zeros and layers, and the exact and float compile times; the
last line fits ``time ~ n^k`` by least squares on the logarithms.
"""

import argparse
import math
import statistics
import time

import lsrl
from results import add_csv_option, write_csv
from lsrl.programs import continuous_approximator, discrete_approximator


def median_seconds(program, backend, repeats):
    times, model = [], None
    for _ in range(repeats):
        start = time.process_time()
        model = lsrl.compile(program, backend=backend, progress=False)
        times.append(time.process_time() - start)
    return statistics.median(times), model


def exponent(sizes, seconds) -> float:
    xs, ys = [math.log(n) for n in sizes], [math.log(s) for s in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def scaling(sizes, repeats) -> list[dict]:
    header = (f"{'discrete_approximator(n)':26} {'nodes':>6} {'peak nnz':>9} {'final nnz':>9} {'peak/final':>10} "
              f"{'layers':>6} {'exact s':>8} {'float s':>8}")
    print(header)
    print("-" * len(header))
    exact_times, rows = [], []
    for n in sizes:
        program = discrete_approximator(n, ifelse="multiplicative")
        exact_seconds, model = median_seconds(program, "exact", repeats)
        float_seconds, _ = median_seconds(program, "float", repeats)
        exact_times.append(exact_seconds)
        peak, final = model.stats["peak_nonzeros"], model.parameter_count
        print(f"{'n=' + str(n):26} {len(program.nodes):6d} {peak:9d} {final:9d} {peak / final:10.2f} "
              f"{len(model.layers):6d} {exact_seconds:8.2f} {float_seconds:8.2f}", flush=True)
        rows.append({"n": n, "nodes": len(program.nodes), "peak_nonzeros": peak, "final_nonzeros": final,
                     "peak_per_final": round(peak / final, 2), "layers": len(model.layers),
                     "exact_seconds": round(exact_seconds, 2), "float_seconds": round(float_seconds, 2)})
    if len(sizes) > 1:
        print(f"exact compile time ~ n^{exponent(sizes, exact_times):.2f}")
    return rows


def variants(sizes, repeats) -> list[dict]:
    cases = [(f"discrete_approximator({n})", variant, lambda n=n, v=variant: discrete_approximator(n, ifelse=v))
             for n in sizes for variant in lsrl.IFELSE_VARIANTS]
    cases += [("continuous_approximator(2, 2)", variant, lambda v=variant: continuous_approximator(2, 2, ifelse=v))
              for variant in lsrl.IFELSE_VARIANTS]
    header = (f"{'program':30} {'ifelse':25} {'nodes':>6} {'exact s':>8} {'float s':>8} {'layers':>6} {'widest':>6} "
              f"{'state':>6} {'nonzeros':>8}")
    print(header)
    print("-" * len(header))
    rows = []
    for label, variant, build in cases:
        program = build()
        exact_seconds, model = median_seconds(program, "exact", repeats)
        float_seconds, _ = median_seconds(program, "float", repeats)
        print(f"{label:30} {variant:25} {len(program.nodes):6d} {exact_seconds:8.3f} {float_seconds:8.3f} "
              f"{len(model.layers):6d} {model.widest_layer:6d} {model.state_size:6d} {model.parameter_count:8d}",
              flush=True)
        rows.append({"program": label, "ifelse": variant, "nodes": len(program.nodes),
                     "exact_seconds": round(exact_seconds, 3), "float_seconds": round(float_seconds, 3),
                     "layers": len(model.layers), "widest": model.widest_layer, "state": model.state_size,
                     "nonzeros": model.parameter_count})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 10, 30, 60, 100, 300])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", action="store_true", help="every f_ifelse variant and Listing 1 instead")
    add_csv_option(parser)
    args = parser.parse_args()
    if args.variants:
        write_csv(args.csv, "compile_variants", variants(args.sizes, args.repeats))
    else:
        write_csv(args.csv, "compile", scaling(args.sizes, args.repeats))


if __name__ == "__main__":
    main()
