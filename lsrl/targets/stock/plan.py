"""What the units of a stock module hold: ``net.labels``, ``net.unit_scales``, ``net.unit_tolerances`` and the nodes
a patch can set (docs/stock.md, "Labels and patches")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lsrl.kinds import Kind
from lsrl.ir.labels import PATCHABLE_ROLES, UnitLabel, helper_for
from lsrl.targets.stock.cells import CellLayer

if TYPE_CHECKING:
    from lsrl.model.compiled import CompiledProgram


@dataclass
class UnitPlan:
    """What the units of a stock module hold (``net.labels``, ``net.unit_scales``) and how a patch sets them.

    ``layers[k]``: core layer ``k``'s ``CellLayer`` (its ``source`` compiled layer, ``decode``, ``bound``);
    ``source_labels[k]``: the compiled model's labels of that layer's components; ``output_labels``: of the
    outputs, which the readout computes (patched there when the last compiled layer is a ``Linear``)."""

    layers: list
    source_labels: list
    output_labels: list
    readout_patched: bool
    labels: dict
    unit_scales: dict
    unit_tolerances: dict
    patchable: list
    unpatchable: dict


def unit_plan(model: CompiledProgram, layers: list[CellLayer], hidden: int, outputs: np.ndarray) -> UnitPlan | None:
    """``net.labels`` of a stock module and what its patches set (``UnitPlan``); None without model labels.

    A component held by one unit ``u`` (a value, state or LSTM ReLU unit: ``h_u = eps v``) labels it with the
    compiled label and ``unit_scales[key][u] = 1 / D[j, u] = eps``; the units of a sign pair (GRU ReLU ``a, c``)
    or of a product (``h+, h-``) hold it only together: each is a ``helper`` (scale NaN). Padding units: None.
    An LSTM layer's cell ``core.l{k}.c`` is labelled too: a state's unit has ``c = tanh(eps y)``, the same value
    as ``h = tanh(c)`` with one tanh less (its error is within the same bound); a ReLU's cell holds its input
    (``eps w``), a product's ``eps P``: helpers.
    ``unit_tolerances[key][u]``: how far a labelled unit may lie from its scale times what its label says
    (``eps E``; the readout: ``outputs``, the output tolerances). A module with threshold units holds their
    components only all together (helpers), and patches only its outputs, at the readout: the units' exactness
    rests on values on their lattices, which a patched value need not be.
    """
    if model.labels is None:
        return None
    source_labels = [model.labels[layer.source] if layer.source is not None else
                     [UnitLabel(model.input.name, j, "copy") for j in range(len(layer.bound))] for layer in layers]
    labels: dict[str, list] = {}
    scales: dict[str, np.ndarray] = {}
    tolerances: dict[str, np.ndarray] = {}
    for k, (layer, components) in enumerate(zip(layers, source_labels)):
        unit_labels: list = [None] * hidden
        unit_scales, unit_tolerances = np.full(hidden, np.nan), np.full(hidden, np.nan)
        for j, label in enumerate(components):
            units = np.flatnonzero(layer.decode[j])
            alone = len(units) == 1 and not layer.thresholded  # threshold units hold v only all together
            for unit in units:
                unit_labels[unit] = label if alone else helper_for(label)
                if alone:  # h = eps v^ exactly (a power of two), |v^ - v| <= E
                    unit_scales[unit] = 1.0 / layer.decode[j, unit]
                    unit_tolerances[unit] = unit_scales[unit] * layer.error[j]
        key = f"core.l{k}"
        labels[key], scales[key], tolerances[key] = unit_labels, unit_scales, unit_tolerances
        if layer.arch == "lstm":  # the cell c = tanh(eps y) of a state's unit holds what h does (one tanh less)
            states = layer.source is None or model.layers[layer.source].kind is Kind.LINSTATE
            labels[f"{key}.c"] = unit_labels if states else [helper_for(label) for label in unit_labels]
            scales[f"{key}.c"] = unit_scales if states else np.full(hidden, np.nan)
            tolerances[f"{key}.c"] = unit_tolerances if states else np.full(hidden, np.nan)
    output_labels = list(model.labels[-1]) if model.layers else source_labels[-1]
    labels["readout"], scales["readout"], tolerances["readout"] = output_labels, np.ones(len(output_labels)), outputs
    readout_patched = bool(model.layers) and model.layers[-1].kind is Kind.LINEAR
    folded = {label.node for index, layer in enumerate(model.layers[:-1]) if layer.kind is Kind.LINEAR
              for label in model.labels[index] if label is not None and label.role in PATCHABLE_ROLES}
    # threshold units hold values exactly because they lie on lattices; a patched value need not, so in a module
    # with threshold units only the outputs, which the readout overwrites, are patched
    outputs_patched = {label.node for label in output_labels if label is not None} if readout_patched else set()
    thresholds = any(layer.thresholded for layer in layers)
    unpatchable = {node: "the module holds values in exact units (identity and threshold units, of values on a "
                   "lattice), whose exactness a patched value off the lattice would break" for node in model.patchable
                   if thresholds and node not in outputs_patched}
    unpatchable.update({node: "it is held by a Linear layer that the stock construction folds into the next layer's "
                        "input weights, so no unit of the core holds it" for node in model.patchable if node in folded})
    patchable = sorted(set(model.patchable) - set(unpatchable))
    return UnitPlan(layers, source_labels, output_labels, readout_patched, labels, scales, tolerances, patchable,
                    unpatchable)
