"""Hook points inside a recurrence, as an interface: what the shared patch and cache code (``lsrl.targets.patch``,
``lsrl.targets.cache``) needs of a recurrent module, so that it knows no concrete one.

A ``Recurrence`` carries states from step to step (``carried_states``: their hook names, as in ``net.labels``),
and passes each step's values through hook points (``points``: ``{name: hook(value, step)}``, as
``lsrl.targets.cell_steps`` reads them): ``"h"``, the state it carries, and the names of ``step_hooks``, the values
inside a step (a GRU's gates, an LSTM's gates and cell). While a call runs, the shared code sets

* ``state_patches`` (``lsrl.targets.patch``): per layer, a program node's patch of the carried state, applied
  before the state is carried, so that the next step reads it;
* ``step_points`` (``lsrl.targets.cache``): per layer, ``run_with_cache``'s hooks, which record and patch the
  values by hook name.

``points(layer)`` gives a step both, the node patch first, so that the hooks see the state that is carried.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Optional

import torch
from torch import nn

StepHook = Callable[[torch.Tensor, int], torch.Tensor]  # (value, step) -> the value used on
StepPoints = dict[str, StepHook]
Layer = Optional[int]  # a layer of a stacked recurrence, None for a recurrence of one layer

# the hooks inside one step of a stock torch.nn.RNN / GRU / LSTM layer (and of lsrl's ReLU GRU / LSTM layers)
STEP_HOOKS = {"rnn": (), "gru": ("r", "z", "n"), "lstm": ("i", "f", "g", "o", "c")}


def then(first: StepHook | None, second: StepHook | None) -> StepHook | None:
    """``second`` after ``first`` (either may be None)."""
    if first is None or second is None:
        return first or second
    return lambda value, t: second(first(value, t), t)


def sub_name(name: str, child: str) -> str:
    """The name of sub-module ``child`` of the module named ``name`` (``""``: the model itself)."""
    return f"{name}.{child}" if name else child


class Recurrence(ABC):
    """Mixin of a recurrent ``nn.Module`` (module docstring): its carried states and the hook points of its steps.

    ``records_steps``: whether ``run_with_cache`` records its carried states at its step points (else the output
    of a sub-module holds them and is recorded as one); ``stepped_modules``: its sub-modules whose outputs are no
    hooks, because its steps' hook points record what they compute."""

    state_patches: dict[Layer, StepHook] | None = None
    step_points: dict[Layer, StepPoints] | None = None
    records_steps = False
    stepped_modules: tuple[str, ...] = ()

    @abstractmethod
    def carried_states(self, name: str) -> dict[str, Layer]:
        """``{hook name: layer}`` of the states this module, named ``name`` in its model, carries."""

    def step_hooks(self, layer: Layer) -> tuple[str, ...]:
        """The hooks inside a step of ``layer`` besides its state (none by default)."""
        return ()

    def points(self, layer: Layer = None) -> StepPoints:
        """The hook points of ``layer``'s steps: ``step_points``, with the node patch of the state before them."""
        points = dict((self.step_points or {}).get(layer, {}))
        patched = then((self.state_patches or {}).get(layer), points.get("h"))
        if patched is not None:
            points["h"] = patched
        return points

    def state_hook(self, layer: Layer = None) -> StepHook | None:
        """What a step of ``layer`` passes its new state through before carrying it, or None (no hook)."""
        return self.points(layer).get("h")


def recurrences(net: nn.Module) -> dict[str, tuple[Recurrence, Layer]]:
    """``{hook name: (module, layer)}`` of every state that a recurrence of ``net`` carries."""
    return {key: (module, layer) for name, module in net.named_modules() if isinstance(module, Recurrence)
            for key, layer in module.carried_states(name).items()}
