"""Unit labels for ``labels.json``: the compiled model's (``lsrl.ir.labels``), or an
automaton network's transition units. Checking them: ``model.label_violations(program, xs)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsrl.errors import LsrlError

if TYPE_CHECKING:
    from torch import nn

    from lsrl.automata.machines import DFA
    from lsrl.automata.networks import AutomatonNetwork
    from lsrl.model import CompiledProgram

LayerLabels = list[list[str | int]]  # one [node, index, role] per unit of a layer


def unit_labels(model: CompiledProgram | nn.Module) -> list[LayerLabels] | dict[str, LayerLabels] | None:
    """``[node, index, role]`` per unit: per layer for a compiled model (``model.labels``), per torch
    sub-module name for a torch target (``net.labels``); ``None`` where the model carries none."""
    labels = getattr(model, "labels", None)
    if labels is None:
        return None

    def listed(layer):
        return [[str(node), int(index), str(role)] for node, index, role in layer]

    if isinstance(labels, dict):
        return {key: listed(layer) for key, layer in labels.items()}
    return [listed(layer) for layer in labels]


def automaton_labels(machine: DFA, network: AutomatonNetwork) -> list[LayerLabels]:
    """The automaton networks' units: the core's transition units ``(state, symbol index, "transition")``
    (the start unit: ``("start", -1, "start")``), then the readout's ``("accept", 0, "value")``."""
    from lsrl.automata.units import transition_units

    units = transition_units(machine)
    core = [[str(machine.states[p]), int(a), "transition"] if p >= 0 else ["start", -1, "start"]
            for p, a in zip(units.source.tolist(), units.symbol.tolist())]
    if network.core.hidden_size != len(core):
        raise LsrlError(f"automaton network has {network.core.hidden_size} units, the automaton {len(core)}")
    return [core, [["accept", 0, "value"]]]
