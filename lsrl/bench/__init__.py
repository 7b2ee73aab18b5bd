"""The benchmark suite: compiled recurrent models with known circuits, as folders usable without lsrl.

``lsrl bench build DIR`` (``build_suite``) writes ``DIR/<task>/<arch>/`` for every task of
``TASKS`` (``lsrl.bench.tasks``) and architecture; ``load(name)`` reads one back, with its circuit
(``circuit.json``, ``lsrl.bench.circuit``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lsrl.bench.build import build_suite
from lsrl.bench.circuit import Circuit, read_circuit
from lsrl.bench.loading import Folder, load
from lsrl.bench.rotations import read_rotations
from lsrl.bench.tasks import TASKS


def score(scores: dict[str, Any], folder: str | Path) -> dict[str, float]:
    """A method's scores on one suite folder (``{"units": {hook: [score per unit, in unit order]}}``, optionally
    ``"edges"``, ``"nodes"``, ``"threshold"``) against the folder's ``circuit.json``: ``{"unit_auroc": ...,
    "node_auroc": ..., "edge_auroc": ..., TPR / FPR at the threshold and at each budget, the faithfulness curve
    and its areas "cpr" and "cmd", "interchange_accuracy"}`` (``lsrl.bench.eval.submission``); an ``LsrlError``
    naming an unknown hook, a wrong number of units or a score that is not a number."""
    from lsrl.bench.eval.submission import score as score_folder

    return score_folder(scores, folder)


__all__ = ["TASKS", "Circuit", "Folder", "build_suite", "load", "read_circuit", "read_rotations", "score"]
