"""Unit labels for ``labels.json``, keyed by hook name: the compiled model's (``lsrl.ir.labels``), or an
automaton network's transition units. Checking them: ``model.label_violations(program, xs)``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from lsrl.errors import InternalError, LsrlError

if TYPE_CHECKING:
    from torch import nn

    from lsrl.automata.machines import DFA
    from lsrl.automata.networks import AutomatonNetwork
    from lsrl.bench.training.torch_rnn import TrainedModel
    from lsrl.model import CompiledProgram

LayerLabels = list[list[str | int]]  # one [node, index, role] per unit of a hook


def unit_labels(model: CompiledProgram | nn.Module | TrainedModel) -> dict[str, LayerLabels] | None:
    """``{hook name: [node, index, role] per unit}``: ``layers.{i}`` per layer of a compiled model
    (``model.labels``), the keys of ``net.labels`` for a torch target or a trained model; ``None`` where the model
    carries none."""
    labels = getattr(model, "labels", None)
    if labels is None:
        return None

    def listed(layer: Iterable[tuple[Any, Any, Any]]) -> LayerLabels:
        return [[str(node), int(index), str(role)] for node, index, role in layer]

    if isinstance(labels, dict):
        return {key: listed(layer) for key, layer in labels.items()}
    return {f"layers.{i}": listed(layer) for i, layer in enumerate(labels)}


def automaton_labels(machine: DFA, network: AutomatonNetwork) -> dict[str, LayerLabels]:
    """The automaton networks' hooks: ``core``, the transition units ``(state, symbol index, "transition")``
    (the start unit: ``("start", -1, "start")``); its gates (``core.z`` ...), helpers of their unit; and
    ``readout``, ``("accept", 0, "value")``."""
    from lsrl.automata.units import transition_units
    from lsrl.bench.standalone import GATES

    units = transition_units(machine)
    core: LayerLabels = [[str(machine.states[p]), int(a), "transition"] if p >= 0 else ["start", -1, "start"]
                         for p, a in zip(units.source.tolist(), units.symbol.tolist())]
    if network.core.hidden_size != len(core):
        raise LsrlError(f"automaton network has {network.core.hidden_size} units, the automaton {len(core)}")
    gates = GATES.get(f"torch.nn.{type(network.core).__name__}", ())
    helpers: LayerLabels = [[node, index, "helper"] for node, index, _ in core]  # a gate serves its unit's transition
    return {"core": core, **{f"core.{gate}": helpers for gate in gates}, "readout": [["accept", 0, "value"]]}


def check_hooks(labels: dict[str, LayerLabels] | None, hooks: list[str], where: str) -> None:
    """``labels`` (if any) has exactly one entry per hook name."""
    if labels is not None and sorted(labels) != sorted(hooks):
        missing, extra = sorted(set(hooks) - set(labels)), sorted(set(labels) - set(hooks))
        raise InternalError(f"bench {where}: the unit labels do not name the hooks exactly (hooks without labels: "
                            f"{missing[:5]}; labels of no hook: {extra[:5]})")
