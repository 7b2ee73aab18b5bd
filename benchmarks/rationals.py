"""Which exact-rational type to build the exact backend on: time per operation (median of 5).

    python benchmarks/rationals.py [--csv DIR]   # DIR/rationals.csv
"""

import argparse
import statistics
import timeit
from fractions import Fraction

import gmpy2
from results import add_csv_option, write_csv

try:
    import flint
except ImportError:  # python-flint is optional: only this benchmark uses it
    flint = None


def per_operation(statement, repeats=5, number=100_000):
    return statistics.median(timeit.repeat(statement, number=number, repeat=repeats)) / number * 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_csv_option(parser)
    args = parser.parse_args()
    rows = []
    types = [("fractions.Fraction", Fraction), ("gmpy2.mpq", gmpy2.mpq)]
    if flint is not None:
        types.append(("flint.fmpq", flint.fmpq))
    print(f"{'type':20} {'a*b+c (ns)':>11} {'construct (ns)':>15} {'compare (ns)':>13} {'dot 64 (us)':>12}")
    for name, kind in types:
        a, b, c, zero = kind(3, 7), kind(-5, 11), kind(1000), kind(0)
        row = [kind(i, 7 + i) for i in range(64)]
        column = [kind(-i, 3 + i) for i in range(64)]
        # the lambdas are timed at once, in this iteration
        arithmetic = per_operation(lambda: a * b + c)  # noqa: B023
        construct = per_operation(lambda: kind(12345, 1000))  # noqa: B023
        compare = per_operation(lambda: a > zero)  # noqa: B023
        dot = per_operation(lambda: sum((p * q for p, q in zip(row, column)), zero), number=2_000) / 1000  # noqa: B023
        print(f"{name:20} {arithmetic:11.0f} {construct:15.0f} {compare:13.0f} {dot:12.1f}")
        rows.append({"type": name, "a*b+c ns": round(arithmetic), "construct ns": round(construct),
                     "compare ns": round(compare), "dot 64 us": round(dot, 1)})
    write_csv(args.csv, "rationals", rows)


if __name__ == "__main__":
    main()
