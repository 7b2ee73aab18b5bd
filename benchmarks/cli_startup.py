"""How long ``lsrl --version`` and every ``--help`` take, against ``python -c 'import numpy'``, median of several runs.

    python benchmarks/cli_startup.py [--repeats 7] [--csv DIR]   # DIR/cli_startup.csv

Each row runs the command in a fresh interpreter, as the ``lsrl`` script does, and measures the child's CPU
seconds (user + system, ``resource.getrusage(RUSAGE_CHILDREN)``) and its wall seconds; ``ratio`` is its
median CPU time over the reference row's. The aim: every ``--version`` / ``--help`` within twice the
reference (``within 2x``).
"""

import argparse
import resource
import statistics
import subprocess
import sys
import time

import click

from lsrl.cli import LazyGroup, main as lsrl_main
from results import add_csv_option, print_rows, write_csv

LSRL = "import sys; from lsrl.cli import main; sys.argv[0] = 'lsrl'; sys.exit(main())"  # what the script runs
REFERENCE = "python -c 'import numpy'"
AIM = 2.0  # the most a --help may take, in multiples of the reference


def help_commands(group: click.Group, path: tuple[str, ...] = ()) -> list[list[str]]:
    """``--help`` of ``group`` and of every command under it (a lazy group's commands from its listing)."""
    commands = [[*path, "--help"]]
    for name in group.list_commands(click.Context(group)):
        if isinstance(group, LazyGroup):  # listed without importing the module behind it
            commands.append([*path, name, "--help"])
            continue
        command = group.get_command(click.Context(group), name)
        commands += (help_commands(command, (*path, name)) if isinstance(command, click.Group)
                     else [[*path, name, "--help"]])
    return commands


def child_seconds(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``argv`` in a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def medians(argv: list[str], repeats: int) -> tuple[float, float]:
    runs = [child_seconds(argv) for _ in range(repeats)]
    return statistics.median(cpu for cpu, _ in runs), statistics.median(wall for _, wall in runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    add_csv_option(parser)
    args = parser.parse_args()
    commands = {REFERENCE: [sys.executable, "-c", "import numpy"],
                "python -c 'import click'": [sys.executable, "-c", "import click"],
                "lsrl --version": [sys.executable, "-c", LSRL, "--version"]}
    commands |= {"lsrl " + " ".join(words): [sys.executable, "-c", LSRL, *words] for words in help_commands(lsrl_main)}
    print(f"median of {args.repeats} runs; ratio: CPU seconds over {REFERENCE}'s; aim: within {AIM:g}x")
    rows, reference = [], None
    for name, argv in commands.items():
        cpu, wall = medians(argv, args.repeats)
        reference = reference or cpu
        rows.append({"command": name, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                     "ratio": round(cpu / reference, 2), f"within_{AIM:g}x": cpu <= AIM * reference})
    print_rows(rows, width=12)
    write_csv(args.csv, "cli_startup", rows)


if __name__ == "__main__":
    main()
