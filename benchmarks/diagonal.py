"""Cost of ``model.diagonal()``: layers, widest layer, state size and non-zero weights before and
after, for Listings 1 and 2 and the random programs of tests/test_random_programs.py.

    python benchmarks/diagonal.py [--seeds 300] [--csv DIR]   # DIR/diagonal.csv, DIR/diagonal_random.csv
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import lsrl
from lsrl.programs import continuous_approximator, discrete_approximator
from results import add_csv_option, write_csv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_random_programs import _generated  # noqa: E402  the random program generator


def cost(model) -> tuple:
    return len(model.layers), model.widest_layer, model.state_size, model.parameter_count


NAMES = ("layers", "width", "state", "nnz")


def row(name, before, after, seconds) -> dict:
    print(f"{name:44} {'/'.join(map(str, before)):>20} {'/'.join(map(str, after)):>20} {seconds:8.3f}")
    return {"program": name, **{f"{k}_before": v for k, v in zip(NAMES, before)},
            **{f"{k}_after": v for k, v in zip(NAMES, after)}, "seconds": round(seconds, 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=300)
    add_csv_option(parser)
    args = parser.parse_args()
    listings = []
    print(f"{'program':44} {'layers/width/state/nnz':>20} {'after diagonal()':>20} {'seconds':>8}")
    for program in (continuous_approximator(2, 2), discrete_approximator(3)):
        model = lsrl.compile(program, progress=False)
        start = time.process_time()
        diagonal = model.diagonal()
        listings.append(row(program.name, cost(model), cost(diagonal), time.process_time() - start))
    ratios, changed, refused, seconds = [[], [], [], []], 0, 0, []
    for seed in range(args.seeds):
        try:
            model = lsrl.compile(_generated(seed).program, progress=False)
        except lsrl.LsrlError:
            continue
        start = time.process_time()
        try:
            diagonal = model.diagonal()
        except lsrl.LsrlError:
            refused += 1
            continue
        seconds.append(time.process_time() - start)
        before, after = cost(model), cost(diagonal)
        changed += before != after
        for k in range(4):
            if before[k]:  # programs without a state have nothing to compare
                ratios[k].append(after[k] / before[k])
    print(f"\nrandom programs: {len(seconds)} diagonalised ({changed} changed in cost), {refused} refused "
          f"(irrational eigenvalues); diagonal() median {statistics.median(seconds):.4f} s, max {max(seconds):.3f} s")
    random = {"programs": args.seeds, "diagonalised": len(seconds), "changed_in_cost": changed, "refused": refused,
              "median_seconds": round(statistics.median(seconds), 4), "max_seconds": round(max(seconds), 3)}
    for name, values in zip(NAMES, ratios):
        print(f"  {name:7} after/before: median {statistics.median(values):.2f}, mean {statistics.mean(values):.2f}, "
              f"max {max(values):.2f}")
        random |= {f"{name}_ratio_median": round(statistics.median(values), 2),
                   f"{name}_ratio_mean": round(statistics.mean(values), 2), f"{name}_ratio_max": round(max(values), 2)}
    write_csv(args.csv, "diagonal", listings)
    write_csv(args.csv, "diagonal_random", [random])


if __name__ == "__main__":
    main()
