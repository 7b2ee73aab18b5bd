"""Build time of the stock targets against ``max_len``: per program, target and ``max_len``, the CPU seconds
of the first build of a freshly compiled model (its value bounds at ``max_len`` included: the relational
analysis of ``lsrl.lang.relational_bounds``, for ``to_hf`` on the compiled layers and on the exact diagonal
form) and of a second build of the same model (the bounds reused), each the median of ``--repeats``; and the
first build's time over its time at the smallest length.

    python benchmarks/build_time.py [--lengths 64,256,1024,4096] [--repeats 3] [--targets mamba,stock_lstm]
                                    [--csv DIR]   # DIR/build_time.csv

The transformers import is paid before the first row (a tiny build), not by it.
"""

import argparse
import statistics
import time

import lsrl
from lsrl.programs import discrete_approximator, parity
from results import add_csv_option, write_csv

PROGRAMS = {"listing2 (robust, n=2, tokens <= 9)": lambda: discrete_approximator(2, robust=True, vocabulary=9),
            "parity": parity}
HF = ("mamba", "mamba2", "hawk", "griffin")
TARGETS = ("mamba", "mamba2", "hawk", "stock_lstm", "stock_gru")


def build(model, target: str, max_len: int):
    return model.to_hf(target, max_len) if target in HF else model.to_torch(target, max_len=max_len)


def seconds(make, target: str, max_len: int, repeats: int) -> tuple[float, float] | None:
    """Median CPU seconds of the first build of a fresh model and of a second build of the same model; None
    where the target refuses the program."""
    first, again = [], []
    for _ in range(repeats):
        model = lsrl.compile(make(), progress=False)
        for times in (first, again):
            start = time.process_time()
            try:
                build(model, target, max_len)
            except lsrl.LsrlError:
                return None
            times.append(time.process_time() - start)
    return statistics.median(first), statistics.median(again)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="64,256,1024,4096")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--targets", default=",".join(TARGETS))
    add_csv_option(parser)
    args = parser.parse_args()
    lengths = [int(v) for v in args.lengths.split(",")]
    build(lsrl.compile(parity(), progress=False), "stock_lstm", 2)  # imports torch
    build(lsrl.compile(PROGRAMS[next(iter(PROGRAMS))](), progress=False), "mamba", 2)  # imports transformers
    header = ("program", "target", "max_len", "first build s", "again s", "first / first at shortest")
    print(f"{header[0]:36} {header[1]:11} {header[2]:>7} {header[3]:>14} {header[4]:>8} {header[5]:>25}")
    rows = []
    for name, make in PROGRAMS.items():
        for target in args.targets.split(","):
            shortest = None
            for max_len in lengths:
                measured = seconds(make, target, max_len, args.repeats)
                if measured is None:
                    print(f"{name:36} {target:11} {max_len:>7} refused")
                    continue
                first, again = measured
                shortest = shortest or first
                rows.append((name, target, max_len, round(first, 3), round(again, 3), round(first / shortest, 2)))
                print(f"{name:36} {target:11} {max_len:>7} {first:>14.2f} {again:>8.2f} {first / shortest:>25.1f}",
                      flush=True)
    write_csv(args.csv, "build_time", [dict(zip(header, row)) for row in rows])


if __name__ == "__main__":
    main()
