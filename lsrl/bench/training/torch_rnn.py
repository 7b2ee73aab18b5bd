"""The trained tier as a stock ``torch.nn.LSTM`` / ``GRU``, trained by interchange intervention training (the
losses: ``lsrl.bench.training.loop``).

Each variable of the task's circuit (``Task.circuit``: named program nodes) is aligned with its own block of
``UNITS_PER_COMPONENT`` hidden units per component (the cell state too, for an LSTM) in the recurrent layer of its
level (``layout``: a variable computed from another in the same step sits a layer above it; the model has as many
layers as levels, a stock multi-layer module); the other units are free, trained to be inert.

``train(task, arch)`` returns a ``TrainedModel`` with its task accuracy and interchange-intervention accuracy
(outputs rounded to integers, per step) on the fixed pairs of its folder's ``data.npz``. The cells run step by step
with the weights of a stock ``torch.nn.LSTM`` / ``GRU`` (``TrainedModel.stock()`` gives that module).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import nn

from lsrl.bench.records import Measured, measured
from lsrl.bench.tasks import TASKS, program_widths, task_program
from lsrl.bench.training.loop import STEPS, Recipe, Units, fit, variable_levels
from lsrl.errors import LsrlError
from lsrl.lang.program import ForEach

UNITS_PER_COMPONENT = 4
FREE_UNITS = 8
BATCH = 64
LR = 2e-2  # 1e-2 left count_token_2 as a GRU at an interchange accuracy of 0.95 after 600 steps; 2e-2: 0.996
RELAY = "input_relay"  # the pseudo-variable of the units that pass the input to the layer above
Carried = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # a layer's state: h, or (h, c) for an LSTM


def layer_hook(layer: int) -> str:
    """The hook (and ``state_dict`` prefix) of the trained model's recurrent layer ``layer``."""
    return f"core.l{layer}"


@dataclass
class TrainedModel(Measured):
    """Trained cells (one per layer, stacked as a stock multi-layer module stacks them) and a readout of the last;
    ``alignment``: variable -> ``(hook, units)`` of its layer (``layer_hook``); ``free``: hook -> the free units;
    ``relay``: hook -> the units that pass the input to the layer above (``layout``); the accuracies measured."""

    task: str
    arch: str
    cells: nn.ModuleList
    readout: nn.Linear
    alignment: dict[str, tuple[str, list[int]]]
    free: dict[str, list[int]]
    relay: dict[str, list[int]]

    @property
    def hidden_size(self) -> int:
        """Units per layer (every layer has as many, as in one stock module)."""
        return self.readout.in_features

    @property
    def hooks(self) -> list[str]:
        """The recurrent layers' hooks, bottom first."""
        return [layer_hook(k) for k in range(len(self.cells))]

    def unit_labels(self) -> dict[str, list[tuple[str, int, str]]]:
        """Per recurrent layer's hook: a unit aligned with a variable ``(variable, component, "value")``, a free
        one ``("free", unit, "value")``, a relay of the input ``("input_relay", component, "helper")`` (not scored:
        the input passed up, no variable of the program)."""
        labels = {hook: [("free", unit, "value") for unit in range(self.hidden_size)] for hook in self.hooks}
        blocks = [*self.alignment.items(), *((RELAY, (hook, units)) for hook, units in self.relay.items())]
        for variable, (hook, units) in blocks:
            for position, unit in enumerate(units):
                labels[hook][unit] = (variable, position // UNITS_PER_COMPONENT,
                                      "helper" if variable == RELAY else "value")
        return labels

    @property
    def labels(self) -> dict[str, list[tuple[str, int, str]]]:
        """The unit labels per hook of its suite folder (``lsrl.bench.export``): each layer's ``core.lK`` (and the
        LSTM's cell ``core.lK.c``) as ``unit_labels`` (a free unit: a pseudo-variable of no program node, trained
        to be inert: never in the circuit, a true negative); the gates ``(..., "helper")`` of their unit;
        ``readout`` the program's output."""
        from lsrl.bench.standalone import GATES

        labels = {}
        for hook, state in self.unit_labels().items():
            helpers = [(node, index, "helper") for node, index, _ in state]
            labels[hook] = state
            labels.update({f"{hook}.{gate}": state if gate == "c" else helpers
                           for gate in GATES[f"torch.nn.{self.arch.upper()}"]})
        program = task_program(self.task)
        output = program.names[program.output]
        return {**labels, "readout": [(output, k, "value") for k in range(self.readout.out_features)]}

    def card(self) -> str:
        """What the model card says of its training and its measured accuracies."""
        hooks = ", ".join(f"`{hook}`" + (f", `{hook}.c`" if self.arch == "lstm" else "") for hook in self.hooks)
        blocks = [*self.alignment.items(), *((RELAY, block) for block in self.relay.items())]
        where = ", ".join(f"`{variable}` → `{hook}[{units[0]}:{units[-1] + 1}]`" for variable, (hook, units) in blocks)
        relay = "; `input_relay` units pass the input to the layer above" if self.relay else ""
        return (f" **Tier `trained`**: a stock `torch.nn.{self.arch.upper()}` of {len(self.cells)} layer(s) trained "
                f"by interchange intervention training ({self.steps} Adam steps, seed {self.seed}; "
                f"`lsrl.bench.training`), each circuit variable aligned with its own block of hidden units in "
                f"the layer of its depth within a step ({where}; labels {hooks}; `free` units are trained to be "
                f"inert{relay}). {measured(self.accuracy, self.interchange_accuracy, self.lengths)}")

    def run(self, xs: torch.Tensor, units: tuple[str, list[int]] | dict[str, list[int]] | None = None,
            source: list | None = None) -> tuple[torch.Tensor, list]:
        """``(outputs (B, T, d_out), states per step: per layer its state)``; ``units`` (``(hook, units)`` of
        ``alignment`` or ``{hook: units}``) set, at every step, to their values in ``source`` (the states of
        another run) before anything reads them (the layer above, the next step)."""
        chosen = dict([units]) if isinstance(units, tuple) else units or {}
        sources = source or []
        count = xs.shape[0]
        state = [self.initial_state(xs, count) for _ in self.cells]
        states, outputs = [], []
        for t in range(xs.shape[1]):
            below, step = xs[:, t], []
            for k, (hook, cell) in enumerate(zip(self.hooks, self.cells)):
                layer = cell(below, state[k])
                if hook in chosen:
                    layer = set_units(layer, chosen[hook], sources[t][k])
                step.append(layer)
                below = layer[0] if self.arch == "lstm" else layer
            state = step
            states.append(step)
            outputs.append(self.readout(below))
        return torch.stack(outputs, dim=1), states

    def parameters(self) -> list[nn.Parameter]:
        """The cells' parameters, then the readout's: what training changes."""
        return [*self.cells.parameters(), *self.readout.parameters()]

    def set_training(self, on: bool) -> None:
        """The cells and readout in training mode (``on``) or not (the same maths: no dropout)."""
        self.cells.train(on)
        self.readout.train(on)

    def paired(self, base: np.ndarray, source: np.ndarray, units: Units) -> torch.Tensor:
        """The outputs on ``base`` with ``units`` set at every step to their values on ``source`` (run first), with
        the autograd graph of both runs (training); with no units, the outputs on ``base`` alone."""
        if not units:
            return self.run(torch.as_tensor(base))[0]
        _, states = self.run(torch.as_tensor(source))
        return self.run(torch.as_tensor(base), units, states)[0]

    def initial_state(self, xs: torch.Tensor, count: int) -> Carried:
        """A layer's state before the first step (zeros) for ``count`` sequences, in ``xs``'s dtype."""
        zeros = xs.new_zeros(count, self.hidden_size)
        return (zeros, zeros.clone()) if self.arch == "lstm" else zeros

    def stock(self, layer: int | None = None) -> nn.LSTM | nn.GRU:
        """The stock ``torch.nn.LSTM`` / ``GRU`` (batch first) with the cells' weights: all of them (``num_layers``
        the cells), or only recurrent layer ``layer``'s."""
        cells = list(self.cells) if layer is None else [self.cells[layer]]
        first = cells[0]
        module = (nn.LSTM if self.arch == "lstm" else nn.GRU)(first.input_size, self.hidden_size, len(cells),
                                                             batch_first=True, dtype=first.weight_ih.dtype)
        with torch.no_grad():
            for k, cell in enumerate(cells):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(module, f"{name}_l{k}").copy_(getattr(cell, name))
        return module


def set_units(state: Carried, units: list[int], source: Carried) -> Carried:
    """``state`` with ``units`` (of h, and of c for an LSTM) set to their values in ``source``."""
    def setting(mine: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
        mine = mine.clone()
        mine[:, units] = theirs[:, units]
        return mine

    if isinstance(state, tuple):  # an LSTM's (h, c), and the source's
        (h, c), (source_h, source_c) = state, cast(tuple[torch.Tensor, torch.Tensor], source)
        return setting(h, source_h), setting(c, source_c)
    return setting(state, cast(torch.Tensor, source))


def reads_input_above(program: ForEach, levels: dict[str, int]) -> bool:
    """Whether a circuit variable above the first layer (``levels``) reads the program's input within the step
    other than through a circuit variable (``first_token_1``'s ``first``: the count and the current token)."""
    by_name = {program.names[node]: node for node in program.nodes if node in program.names}
    for name, level in levels.items():
        stack, seen = list(by_name[name].inputs), set()
        while stack and level > 0:  # each node of the program at most once (seen)
            other = stack.pop()
            if id(other) in seen or program.names.get(other) in levels:
                continue
            seen.add(id(other))
            if other is program.input:
                return True
            stack += list(other.inputs)
    return False


def layout(program: ForEach, variables: list[tuple[str, int]]
           ) -> tuple[dict[str, tuple[str, list[int]]], dict[str, list[int]], dict[str, list[int]], int]:
    """``(alignment, free, relay, hidden size)``: each variable's block of ``UNITS_PER_COMPONENT`` units per
    component in the layer of its level (``lsrl.bench.training.loop.variable_levels``: how many circuit variables it
    reads within one step); below the last layer, where a variable above reads the input (``reads_input_above``),
    a ``relay`` block that passes the input up (a stock layer reads only the one below); every layer as wide as the
    widest one's blocks plus ``FREE_UNITS``, the other units ``free`` (per layer's hook). A variable computed from
    another one in the same step sits a layer above it: in one layer it could read the other only one step late,
    and no weights could follow both interchanges (``count_token_2``'s ``is_2`` and ``count``: interchange accuracy
    0.75 in one layer)."""
    levels = variable_levels(program, variables)
    top = max(levels.values())
    alignment, taken = {}, {layer_hook(k): 0 for k in range(top + 1)}
    for variable, dim in variables:
        hook = layer_hook(levels[variable])
        alignment[variable] = (hook, list(range(taken[hook], taken[hook] + dim * UNITS_PER_COMPONENT)))
        taken[hook] += dim * UNITS_PER_COMPONENT
    relay = {}
    if reads_input_above(program, levels):
        for hook in map(layer_hook, range(top)):
            relay[hook] = list(range(taken[hook], taken[hook] + program_widths(program)[0] * UNITS_PER_COMPONENT))
            taken[hook] += len(relay[hook])
    hidden = max(taken.values()) + FREE_UNITS
    return alignment, {hook: list(range(first, hidden)) for hook, first in taken.items()}, relay, hidden


def torch_model(name: str, arch: str, seed: int = 0) -> TrainedModel:
    """The untrained model ``train`` trains: the stock ``arch`` (``"lstm"`` or ``"gru"``) for task ``name`` in the
    ``layout`` of its circuit variables, its initial weights drawn from ``seed``."""
    task = TASKS.get(name)
    variables = task.circuit_nodes() if task is not None else []
    if task is None or not variables or arch not in ("lstm", "gru"):
        raise LsrlError(f"train: needs a program task with named circuit variables and arch 'lstm' or 'gru', got "
                        f"{name!r}, {arch!r}")
    torch.manual_seed(seed)
    program = task_program(name)
    alignment, free, relay, hidden = layout(program, variables)
    given, output = program_widths(program)
    cell = nn.LSTMCell if arch == "lstm" else nn.GRUCell
    cells = nn.ModuleList([cell(given if k == 0 else hidden, hidden).double() for k in range(len(free))])
    return TrainedModel(name, arch, cells, nn.Linear(hidden, output).double(), alignment, free, relay)


def train(name: str, arch: str, steps: int = STEPS, seed: int = 0, batch: int = BATCH, lr: float = LR
          ) -> TrainedModel:
    """Train the trained tier of task ``name`` as a stock ``arch`` (``"lstm"`` or ``"gru"``; ``torch_model``):
    ``steps`` Adam steps (learning rate ``lr``) of ``batch`` sequences, each step one of the three losses of
    ``lsrl.bench.training.loop`` in turn."""
    model = torch_model(name, arch, seed)
    fit(model, Recipe(batch, lr), steps, seed)
    return model
