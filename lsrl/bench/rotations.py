"""``rotations.json``: the exact change of basis of a rotated tier's folder, per hook of that folder, so that its
subspace ground truth is recoverable from the folder alone.

The rotated tier (``lsrl.bench.tiers.rotate``) outputs ``Q_i h_i`` at a rotated path layer ``i``, where ``h_i``
holds the units the labels name (the labels of the model before the change of basis) and ``Q_i`` is a rational
orthogonal matrix. A path folder's hook ``layers.{i}`` is that layer; a torch target fuses layers and splits
values into ReLU parts, so one of its hooks holds a rotated layer's coordinates ``r = Q_i h_i`` whole (``r_k``, a
linear layer or state) or as sign parts (``[ReLU(r_k), ReLU(-r_k)]``, the ``[s+; s-]`` of a stock RNN, GRU or LSTM
layer and of the gates that equal it), possibly several layers' or several copies side by side. For every hook
holding rotated coordinates the file gives::

    {"format": "lsrl.bench.rotations", "version": 2, "rule": "...",
     "hooks": {"rnn.l1": {"size": 3, "entries": [[0, 0, "3/5"], [0, 2, "-4/5"], ...],
                          "units": [0, 1, 2], "negative": [3, 4, 5]}}}

``units[k]`` is the hook unit holding coordinate ``k`` (its positive part where ``negative[k]`` is not null, that
unit holding the negative part), ``entries`` the non-zero entries of the ``size x size`` orthogonal ``Q`` (block
diagonal over the layers and copies the hook holds) as exact fractions: ``r = Q h`` for the coordinates ``r``
(``values[units] - values[negative]``) and the labelled values ``h``, so ``h = Q^T r``; un-rotated, ``units[k]``
holds ``h_k`` (or ``ReLU(h_k)`` and ``negative[k]`` ``ReLU(-h_k)``): the values of the model before the change of
basis (``HookRotation.unrotate``). Variable ``v``'s subspace at the hook is spanned by the columns ``Q[:, k]`` of
the coordinates whose unit ``labels.json`` labels with ``v``. Units not listed are not rotated (the gates'
constants among them: they hold no variable, and one may differ from the un-rotated model's, where the rotation
changed which units read their past). Hooks not listed are not rotated.

Which hook unit holds which layer's coordinate is read off the target itself: it is built once more from the
rotated model with every layer's units labelled by their own layer and index (``_layer_tagged``), and the labels
the target gives its units (``copy_of``, ``positive_part``, ``negative_part`` ...) say what each holds.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lsrl.bench import standalone
from lsrl.bench.labels import unit_labels
from lsrl.errors import InternalError, ModelFileError, shown
from lsrl.ir.labels import UnitLabel
from lsrl.model.writing import as_path

if TYPE_CHECKING:
    from lsrl.model import CompiledProgram
    from lsrl.numbers import Matrix

FILE = "rotations.json"
FORMAT = "lsrl.bench.rotations"
VERSION = 2
RULE = ("at a listed hook, coordinate k is r_k = values[units[k]] - values[negative[k]] (values[units[k]] where "
        "negative[k] is null; else the two units hold ReLU(r_k) and ReLU(-r_k)); r = Q @ h, where h holds what "
        "labels.json names for units[k] (before the change of basis) and Q is orthogonal: h = Q^T @ r; variable v "
        "spans the columns Q[:, k] of the coordinates labelled with v; units and hooks not listed are not rotated")
TAG = "\x00layer."  # the node name of a unit tagged with its path layer (no program node is named so)


@dataclass(frozen=True)
class HookRotation:
    """One hook's change of basis (module docstring): ``Q`` ``(k, k)`` of ``fractions.Fraction``; ``units[k]``
    the hook unit holding coordinate ``k`` (its positive part where ``negative[k]`` is not None)."""

    Q: np.ndarray
    units: tuple[int, ...]
    negative: tuple[int | None, ...]

    @property
    def negative_units(self) -> list[int]:
        """The units holding negative parts, in the order of their coordinates."""
        return [unit for unit in self.negative if unit is not None]

    def mixing(self, width: int) -> np.ndarray:
        """``(width, width)`` bool: ``[u, v]`` where hook unit ``u``, as the model holds it, depends on what unit
        ``v`` holds before the change of basis (``r_k = sum_j Q[k, j] h_j``; a coordinate's two sign parts both
        hold it, and both halves of ``h_j`` make it); the identity at the units not listed."""
        mixes = np.eye(width, dtype=bool)

        def parts(k: int) -> list[int]:
            negative = self.negative[k]
            return [self.units[k]] if negative is None else [self.units[k], negative]

        for k in range(len(self.units)):
            mixes[parts(k)] = False
            for j in np.flatnonzero(self.Q[k] != 0):
                mixes[np.ix_(parts(k), parts(int(j)))] = True
        return mixes

    def coordinates(self, values: np.ndarray) -> np.ndarray:
        """The rotated coordinates ``r`` ``(..., k)`` of the hook's ``values`` ``(..., width)``."""
        values = np.asarray(values, dtype=np.float64)
        signed = values[..., list(self.units)].copy()
        split = [k for k, unit in enumerate(self.negative) if unit is not None]
        signed[..., split] -= values[..., self.negative_units]
        return signed

    def unrotate(self, values: np.ndarray) -> np.ndarray:
        """The hook's ``values`` ``(..., width)`` (float) before the change of basis: every listed unit set to
        what it holds of ``h = Q^T r`` (``values @ Q`` in rows), the others as they are."""
        held = self.coordinates(values) @ self.Q.astype(np.float64)
        out = np.array(values, dtype=np.float64)
        whole = [k for k, unit in enumerate(self.negative) if unit is None]
        split = [k for k, unit in enumerate(self.negative) if unit is not None]
        out[..., [self.units[k] for k in whole]] = held[..., whole]
        out[..., [self.units[k] for k in split]] = np.maximum(held[..., split], 0.0)
        out[..., self.negative_units] = np.maximum(-held[..., split], 0.0)
        return out


def _fractions(basis: Matrix) -> np.ndarray:
    """An exact ``Matrix`` as a square array of ``Fraction``."""
    size = basis.shape2d[0]
    matrix = np.full((size, size), Fraction(0), dtype=object)
    for i, j, value in basis.entries():
        matrix[i, j] = Fraction(str(value))
    return matrix


def _layer_tagged(model: CompiledProgram) -> CompiledProgram:
    """``model`` with every layer's unit ``k`` of layer ``i`` labelled ``(TAG + i, k, "value")``."""
    from lsrl.model import CompiledProgram

    labels = [[UnitLabel(f"{TAG}{i}", k, "value") for k in range(layer.dim)]
              for i, layer in enumerate(model.layers)]
    tagged = CompiledProgram(model.input, model.layers, model.backend, model.stats, model.name, labels)
    tagged.entangled = model.entangled
    return tagged


WHOLE, SPLIT = ("value", "copy"), ("pos", "neg")  # how a hook unit holds a coordinate r_k: r_k; ReLU(±r_k)


def hook_rotations(model: CompiledProgram, bases: tuple[Matrix | None, ...], arch: str) -> dict[str, HookRotation]:
    """``{hook: HookRotation}`` of the folder of architecture ``arch`` (``"path"`` or a torch target) of a rotated
    ``model`` whose layer ``i`` is rotated by ``bases[i]`` (``lsrl.bench.tiers.rotate``)."""
    tagged = _layer_tagged(model)
    hooks = unit_labels(tagged if arch == "path" else tagged.to_torch(arch))
    if hooks is None:
        raise InternalError(f"bench: the layer-tagged {arch} model of {model.name!r} carries no unit labels")
    return {hook: rotation for hook, units in hooks.items()
            if (rotation := _hook_rotation(units, bases, f"{arch} hook {hook!r}")) is not None}


def _hook_rotation(units: list, bases: tuple[Matrix | None, ...], where: str) -> HookRotation | None:
    """The rotation of one hook whose unit ``u`` holds ``units[u]`` (a layer-tagged label), or None."""
    sites: dict[tuple, dict[int, list]] = {}  # (layer, whole or split, copy) -> {coordinate: [unit, negative]}
    seen: Counter = Counter()
    for unit, (node, index, role) in enumerate(units):
        layer = int(node[len(TAG):]) if node.startswith(TAG) else None
        if layer is None or bases[layer] is None or role == "constant":  # not rotated; a gate's constant
            continue
        if role not in WHOLE + SPLIT:
            raise InternalError(f"bench rotations: {where} unit {unit} holds a rotated coordinate as {role!r}")
        part = int(role == "neg")
        form = "whole" if role in WHOLE else "split"
        copy = seen[layer, form, index, part]
        seen[layer, form, index, part] += 1
        sites.setdefault((layer, form, copy), {}).setdefault(index, [None, None])[part] = unit
    if not sites:
        return None
    blocks, held, negative = [], [], []
    for (layer, form, _), coordinates in sites.items():
        size = bases[layer].shape2d[0]
        complete = sorted(coordinates) == list(range(size)) and all(
            (pair[1] is None) == (form == "whole") and pair[0] is not None for pair in coordinates.values())
        if not complete:
            raise InternalError(f"bench rotations: {where} holds part of rotated layer {layer}'s coordinates")
        blocks.append(_fractions(bases[layer]))
        held += [coordinates[k][0] for k in range(size)]
        negative += [coordinates[k][1] for k in range(size)]
    Q = np.full((len(held), len(held)), Fraction(0), dtype=object)
    start = 0
    for block in blocks:
        Q[start:start + len(block), start:start + len(block)] = block
        start += len(block)
    return HookRotation(Q, tuple(held), tuple(negative))


def rotations_json(rotations: dict[str, HookRotation]) -> str:
    """The text of ``rotations.json`` (sorted entries: the same bytes on every build)."""
    def entries(Q: np.ndarray) -> list[list[int | str]]:
        return sorted([int(i), int(j), str(Q[i, j])] for i, j in zip(*np.nonzero(Q != 0)))

    hooks = {hook: {"size": len(rotation.units), "entries": entries(rotation.Q), "units": list(rotation.units),
                    "negative": list(rotation.negative)}
             for hook, rotation in sorted(rotations.items())}
    return json.dumps({"format": FORMAT, "version": VERSION, "rule": RULE, "hooks": hooks})


def read_rotations(folder: str | Path) -> dict[str, HookRotation]:
    """``{hook: HookRotation}`` of a suite folder's ``rotations.json`` (checked against its manifest): each ``Q`` a
    square array of ``fractions.Fraction`` (exact; ``.astype(float)`` for torch), with the units holding its
    coordinates; ``{}`` where the folder has none (``ModelFileError`` on a changed or malformed file)."""
    folder = as_path(folder, "read_rotations")
    if not (folder / "config.json").is_file():
        raise ModelFileError(f"read_rotations: {str(folder)!r} is not a suite folder (no config.json)")
    if not (folder / FILE).is_file():
        return {}
    try:
        standalone.verify_checksums(folder, (FILE,))
        stored = json.loads((folder / FILE).read_text(encoding="utf-8"))
        if stored["format"] != FORMAT or stored["version"] != VERSION:
            raise ValueError(f"fields 'format' and 'version' must be {FORMAT!r} and {VERSION} (rebuild the folder)")
        rotations = {}
        for hook, basis in stored["hooks"].items():
            matrix = np.full((basis["size"], basis["size"]), Fraction(0), dtype=object)
            for i, j, value in basis["entries"]:
                matrix[i, j] = Fraction(value)
            units, negative = tuple(basis["units"]), tuple(basis["negative"])
            if not len(units) == len(negative) == basis["size"]:
                raise ValueError(f"hook {hook!r}: 'units' and 'negative' must list {basis['size']} units each")
            rotations[hook] = HookRotation(matrix, units, negative)
    except standalone.SuiteFileError as error:
        raise ModelFileError(str(error)) from None
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError) as error:
        raise ModelFileError(f"{str(folder / FILE)!r}: malformed ({shown(error)})") from None
    return rotations
