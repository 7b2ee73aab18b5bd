"""``rotations.json``: the exact change of basis of a rotated tier's folder, so that its subspace ground truth
is recoverable from the folder alone.

The rotated tier (``lsrl.bench.tiers.rotate``) outputs ``Q h`` at a rotated layer, where ``h`` holds the units
that ``labels.json`` names (the labels of the model before the change of basis) and ``Q`` is a rational
orthogonal matrix. For every rotated hook the file gives ``Q``'s non-zero entries as exact fractions::

    {"format": "lsrl.bench.rotations", "version": 1, "rule": "...",
     "hooks": {"layers.3": {"size": 12, "entries": [[0, 0, "3/5"], [0, 4, "-4/5"], ...]}}}

So ``h = Q^T values`` recovers the labelled units from the hook's values, and variable ``v``'s subspace at the
hook is spanned by the columns ``Q[:, units of v]``. Hooks not listed are not rotated (``Q`` = identity).
Written for the path model's folder, whose hooks are the rotated layers (``layers.{i}``); a torch target fuses
layers, and its folder has no ``rotations.json`` yet.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np

from lsrl.bench import standalone
from lsrl.errors import ModelFileError, shown
from lsrl.model.writing import as_path
from lsrl.numbers import Matrix

FILE = "rotations.json"
FORMAT = "lsrl.bench.rotations"
VERSION = 1
RULE = ("the values at a listed hook are Q @ h, where h holds the units labels.json names (before the change of "
        "basis) and Q is orthogonal: h = Q^T @ values; variable v spans the columns Q[:, units of v]; hooks not "
        "listed are not rotated")


def path_rotations(bases: tuple[Matrix | None, ...]) -> dict[str, Matrix]:
    """``{hook: Q}`` of a path model whose layer ``i`` (hook ``layers.{i}``) is rotated by ``bases[i]``."""
    return {f"layers.{i}": basis for i, basis in enumerate(bases) if basis is not None}


def rotations_json(rotations: dict[str, Matrix]) -> str:
    """The text of ``rotations.json`` (sorted entries: the same bytes on every build)."""
    hooks = {hook: {"size": basis.shape2d[0],
                    "entries": sorted([i, j, str(Fraction(str(value)))] for i, j, value in basis.entries())}
             for hook, basis in sorted(rotations.items())}
    return json.dumps({"format": FORMAT, "version": VERSION, "rule": RULE, "hooks": hooks})


def read_rotations(folder: str | Path) -> dict[str, np.ndarray]:
    """``{hook: Q}`` of a suite folder's ``rotations.json`` (checked against its manifest), each ``Q`` a square
    array of ``fractions.Fraction`` (exact; ``.astype(float)`` for torch); ``{}`` where the folder has none
    (``ModelFileError`` on a changed or malformed file)."""
    folder = as_path(folder, "read_rotations")
    if not (folder / "config.json").is_file():
        raise ModelFileError(f"read_rotations: {str(folder)!r} is not a suite folder (no config.json)")
    if not (folder / FILE).is_file():
        return {}
    try:
        standalone.verify_checksums(folder, (FILE,))
        stored = json.loads((folder / FILE).read_text(encoding="utf-8"))
        if stored["format"] != FORMAT or stored["version"] != VERSION:
            raise ValueError(f"fields 'format' and 'version' must be {FORMAT!r} and {VERSION}")
        rotations = {}
        for hook, basis in stored["hooks"].items():
            matrix = np.full((basis["size"], basis["size"]), Fraction(0), dtype=object)
            for i, j, value in basis["entries"]:
                matrix[i, j] = Fraction(value)
            rotations[hook] = matrix
    except standalone.SuiteFileError as error:
        raise ModelFileError(str(error)) from None
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError) as error:
        raise ModelFileError(f"{str(folder / FILE)!r}: malformed ({shown(error)})") from None
    return rotations
