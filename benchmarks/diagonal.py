"""Cost of ``model.diagonal()``: layers, widest layer, state size and non-zero weights before and
after, for Listings 1 and 2 and the random programs of tests/test_random_programs.py.

    python benchmarks/diagonal.py [--seeds 300]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import lsrl
from lsrl.programs import continuous_approximator, discrete_approximator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_random_programs import _generated  # noqa: E402  the random program generator


def cost(model) -> tuple:
    return len(model.layers), model.widest_layer, model.state_size, model.parameter_count


def row(name, before, after, seconds):
    print(f"{name:44} {'/'.join(map(str, before)):>20} {'/'.join(map(str, after)):>20} {seconds:8.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=300)
    args = parser.parse_args()
    print(f"{'program':44} {'layers/width/state/nnz':>20} {'after diagonal()':>20} {'seconds':>8}")
    for program in (continuous_approximator(2, 2), discrete_approximator(3)):
        model = lsrl.compile(program, progress=False)
        start = time.process_time()
        diagonal = model.diagonal()
        row(program.name, cost(model), cost(diagonal), time.process_time() - start)
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
    names = ("layers", "width", "state", "nnz")
    print(f"\nrandom programs: {len(seconds)} diagonalised ({changed} changed in cost), {refused} refused "
          f"(irrational eigenvalues); diagonal() median {statistics.median(seconds):.4f} s, max {max(seconds):.3f} s")
    for name, values in zip(names, ratios):
        print(f"  {name:7} after/before: median {statistics.median(values):.2f}, mean {statistics.mean(values):.2f}, "
              f"max {max(values):.2f}")


if __name__ == "__main__":
    main()
