"""Suite builds shared by the benchmark's test modules and by pytest-xdist's workers: each is built once per test
session, by the first test that asks for it, into the session's common temporary folder; the others wait for it
and read it (the builds are deterministic: the same files whoever builds them)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from filelock import FileLock  # a dependency of torch

from lsrl.bench import build_suite


def built_once(tmp_path_factory, name: str, build: Callable[[Path], Iterable[Path]]) -> tuple[Path, list[Path]]:
    """``(root, folders)``: the folder ``build(root)`` wrote under ``root`` (once per session, shared by the
    workers) and the folders it returned."""
    common = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        common = common.parent  # the workers' temporary folders share this parent
    root, written = common / f"bench-{name}", common / f"bench-{name}.json"
    with FileLock(str(root) + ".lock"):
        if not written.is_file():
            root.mkdir(exist_ok=True)
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # the builds' determinism is claimed on one CPU thread
            try:
                folders = [str(Path(folder).relative_to(root)) for folder in build(root)]
            finally:
                torch.set_num_threads(threads)
            written.write_text(json.dumps(folders))
    return root, [root / folder for folder in json.loads(written.read_text())]


def parity_tiers_and_an_automaton(root: Path) -> list[Path]:
    """parity and tomita_3 at the published size, and parity's distractor and rotated tiers (a short test split:
    quicker); the root cards list every folder."""
    return [*build_suite(root, ("parity", "tomita_3"), progress=False),
            *build_suite(root, ["parity"], progress=False, tiers=("distractors", "rotated"), test_sequences=40)]
