"""The ``--csv DIR`` option every benchmark script has: the tables it prints, also as CSV files in
DIR (the documentation renders its tables from them, see docs/results/README.md); and the ``--archs`` /
``--dtypes`` options of the scripts that build the stock Hugging Face targets."""

from __future__ import annotations

import argparse
import csv
import itertools
from pathlib import Path


def add_csv_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csv", type=Path, metavar="DIR", help="also write the tables as CSV files into DIR")


def add_hf_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--archs", default="mamba,mamba2,hawk,griffin")
    parser.add_argument("--dtypes", default="float32,float64")


def hf_variants(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Every ``(arch, dtype name)`` of the ``add_hf_options`` options, archs outermost."""
    return list(itertools.product(args.archs.split(","), args.dtypes.split(",")))


def write_csv(folder: Path | None, name: str, rows: list[dict]) -> None:
    """Write ``rows`` (one dict per printed row, same keys) to ``folder/name.csv``; nothing when ``folder`` is None."""
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)


def print_rows(rows: list[dict], width: int = 14) -> None:
    """Print ``rows`` (one dict per row, same keys) as a table of right-aligned columns under their keys."""
    keys = list(rows[0])
    print("  ".join(f"{key:>{width}}" for key in keys))
    for row in rows:
        print("  ".join(f"{str(row[key]):>{width}}" for key in keys))
