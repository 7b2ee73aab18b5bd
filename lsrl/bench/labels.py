"""Unit labels: reading them off a model for ``labels.json``, and checking them against a program trace.

A label ``(node, index, role)`` is a claim about a unit's value at every step: ``"value"`` is the
node's component ``index`` itself, ``"pos"`` / ``"neg"`` its ``ReLU(v)`` / ``ReLU(-v)`` (Eq. 11).
``check_labels`` tests these claims; other roles have no rule here and are reported as unchecked.
"""

from __future__ import annotations

import numpy as np

from lsrl.errors import LsrlError


def _relu(values):
    return np.vectorize(lambda v: v if v > 0 else v - v, otypes=[values.dtype])(values)


ROLE_RULES = {"value": lambda v: v, "pos": _relu, "neg": lambda v: _relu(-v)}


def unit_labels(model) -> list | None:
    """Per layer, one ``[node, index, role]`` per unit: ``model.labels`` (``net.labels`` on a torch
    target), ``None`` where the model carries no labels."""
    labels = getattr(model, "labels", None)
    return None if labels is None else [[[str(node), int(index), str(role)] for node, index, role in layer]
                                        for layer in labels]


def automaton_labels(machine, network) -> list:
    """The automaton networks' units: the core's transition units ``(state, symbol index, "transition")``
    (the start unit: ``("start", -1, "start")``), then the readout's ``("accept", 0, "value")``."""
    from lsrl.automata.units import transition_units

    units = transition_units(machine)
    core = [[str(machine.states[p]), int(a), "transition"] if p >= 0 else ["start", -1, "start"]
            for p, a in zip(units.source.tolist(), units.symbol.tolist())]
    if network.core.hidden_size != len(core):
        raise LsrlError(f"automaton network has {network.core.hidden_size} units, the automaton {len(core)}")
    return [core, [["accept", 0, "value"]]]


def check_labels(layer_values, labels, node_values, atol=0.0) -> tuple:
    """``(violations, unchecked)``: the labels that do not hold and the roles without a rule.

    ``layer_values``: one array ``(..., T, width)`` per layer (``model.trace(xs)``); ``labels``: one
    list of ``(node, index, role)`` per layer; ``node_values``: ``prog.trace(xs)`` on the same inputs.
    Exact traces compare exactly (``atol=0``); float ones to ``atol``. A violation names the layer,
    the unit, its label and the first step where it fails.
    """
    if len(layer_values) != len(labels):
        raise LsrlError(f"check_labels: {len(layer_values)} layers of values but {len(labels)} layers of labels")
    violations, unchecked = [], set()
    for k, (values, layer) in enumerate(zip(layer_values, labels)):
        if values.shape[-1] != len(layer):
            raise LsrlError(f"check_labels: layer {k} has {values.shape[-1]} units but {len(layer)} labels")
        for unit, (node, index, role) in enumerate(layer):
            if role not in ROLE_RULES or node not in node_values:
                unchecked.add(role if role not in ROLE_RULES else f"{role} of unknown node {node}")
                continue
            expected = ROLE_RULES[role](node_values[node][..., index])
            got = values[..., unit]
            wrong = np.abs((got - expected).astype(np.float64)) > atol
            if np.any(wrong):
                where = tuple(int(i) for i in np.argwhere(wrong)[0])
                violations.append(f"layer {k} unit {unit} labelled ({node}, {index}, {role}): {got[where]} at "
                                  f"{where}, expected {expected[where]}")
    return violations, sorted(unchecked)
