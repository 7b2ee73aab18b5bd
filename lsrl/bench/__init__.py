"""The benchmark suite: compiled recurrent models with known circuits, as folders usable without lsrl.

``lsrl bench build DIR`` (``build_suite``) writes ``DIR/<task>/<arch>/`` for every task of
``TASKS`` (``lsrl.bench.tasks``) and architecture; ``load(name)`` reads one back.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from lsrl.bench.build import build_suite
from lsrl.bench.tasks import TASKS
from lsrl.errors import LsrlError

if TYPE_CHECKING:
    from torch import nn

DEFAULT_ROOT = Path(os.environ.get("LSRL_BENCH", Path.home() / ".cache" / "lsrl" / "bench"))


def load(name: str, root: str | Path | None = None
         ) -> tuple[nn.Module, list[list[tuple[str, int, str]]] | None, dict[str, np.ndarray]]:
    """``(model, labels, data)`` of the suite folder ``name`` (``"task/arch"``; ``"task"`` alone is its
    ``path`` model, or its first architecture) under ``root`` (default ``$LSRL_BENCH`` or
    ``~/.cache/lsrl/bench``; a task missing there is built first).

    ``model``: a ``torch.nn.Module`` built by the suite's ``load_model.py`` (plain torch layers),
    ``(B, T, d_in) -> (B, T, d_out)``. ``labels``: a list per layer of ``(node, index, role)`` tuples,
    or ``None`` if the folder has no unit labels. ``data``: a dict of numpy arrays (``task_data``:
    ``train_inputs``, ``train_outputs``, ``train_lengths``, and the same for ``test``).
    """
    root = Path(root) if root is not None else DEFAULT_ROOT
    task, _, arch = name.partition("/")
    if task not in TASKS:
        raise LsrlError(f"unknown benchmark task {task!r}; the tasks are {sorted(TASKS)}")
    arch = arch or ("path" if "path" in TASKS[task].archs else TASKS[task].archs[0])
    if arch not in TASKS[task].archs:
        raise LsrlError(f"benchmark task {task!r} has no architecture {arch!r}; it has {TASKS[task].archs}")
    folder = root / task / arch
    if not (folder / "config.json").is_file():
        build_suite(root, [task], progress=False)
    model = _standalone(root).load_folder(folder)
    layers = json.loads((folder / "labels.json").read_text())["layers"]
    labels = None if layers is None else [[tuple(unit) for unit in layer] for layer in layers]
    with np.load(folder / "data.npz") as stored:
        data = dict(stored)
    return model, labels, data


def _standalone(root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("lsrl_bench_load_model", root / "load_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


__all__ = ["TASKS", "build_suite", "load"]
