"""Suite builds shared by the benchmark's test modules and by pytest-xdist's workers: each is built once per test
session, by the first test that asks for it, into the session's common temporary folder; the others wait for it
and read it (the builds are deterministic: the same files whoever builds them). A worker starts with the part its
number points at, so that two workers asking for the same parts build them side by side. Also ``cell_part``, how
the modules read a gated cell's hook names."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from filelock import FileLock

from lsrl.bench import TASKS, build_suite
from lsrl.bench.standalone import GRU_GATES, LSTM_GATES

Build = Callable[[Path], Iterable[Path]]
CELL_PARTS = GRU_GATES + LSTM_GATES  # a cell's hooks besides its state (c: the LSTM's cell)


def cell_part(hook: str) -> tuple[str, str]:
    """``rnn.l2.z`` -> (``rnn.l2``, ``z``); ``rnn.l2`` -> (``rnn.l2``, ``""``)."""
    layer, _, part = hook.rpartition(".")
    return (layer, part) if part in CELL_PARTS else (hook, "")


def built_once(tmp_path_factory, parts: list[tuple[str, Build]]) -> list[tuple[Path, list[Path]]]:
    """Per ``(name, build)`` of ``parts``: ``(root, folders)``, the folder ``root`` (``bench-NAME``, shared by the
    parts of one name) that ``build(root)`` wrote into, once per session, and the folders it returned. The same
    part must be asked for at the same position by every caller (its lock and record are numbered)."""
    common = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        common = common.parent  # the workers' temporary folders share this parent
    start = int(worker.removeprefix("gw")) if worker and worker.removeprefix("gw").isdigit() else 0
    records = [common / f"bench-{name}-{position}.json" for position, (name, _) in enumerate(parts)]
    for position in [(start + k) % len(parts) for k in range(len(parts))]:
        name, build = parts[position]
        root = common / f"bench-{name}"
        with FileLock(f"{records[position]}.lock"):
            if records[position].is_file():
                continue
            root.mkdir(exist_ok=True)
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # the builds' determinism is claimed on one CPU thread
            try:
                folders = [str(Path(folder).relative_to(root)) for folder in build(root)]
            finally:
                torch.set_num_threads(threads)
            records[position].write_text(json.dumps(folders))
    return [(common / f"bench-{name}", [common / f"bench-{name}" / folder for folder in json.loads(record.read_text())])
            for (name, _), record in zip(parts, records)]


def whole_suite(tmp_path_factory) -> tuple[Path, list[Path]]:
    """Every task at a short test split, in one folder (two parts: two workers build it side by side)."""
    names = list(TASKS)
    halves = [("suite", lambda root, half=half: build_suite(root, half, progress=False, test_sequences=40))
              for half in (names[0::2], names[1::2])]
    (root, first), (_, second) = built_once(tmp_path_factory, halves)
    return root, first + second


def parity_tiers_and_an_automaton(root: Path) -> list[Path]:
    """parity and tomita_3 at the published size, and parity's distractor and rotated tiers (a short test split:
    quicker); the root cards list every folder."""
    return [*build_suite(root, ("parity", "tomita_3"), progress=False),
            *build_suite(root, ["parity"], progress=False, tiers=("distractors", "rotated"), test_sequences=40)]


def parity_builds(tmp_path_factory) -> tuple[Path, Path]:
    """Two independent builds of ``parity_tiers_and_an_automaton`` (the first: tests/test_bench_tiers.py's too)."""
    (first, _), (second, _) = built_once(tmp_path_factory, [("parity-first", parity_tiers_and_an_automaton),
                                                            ("parity-second", parity_tiers_and_an_automaton)])
    return first, second
