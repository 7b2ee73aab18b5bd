"""``HookedModel``: a stock recurrent model run step by step, every step's states, gates and inputs at hook points.

Each architecture supplies a ``Stepper`` (``lsrl.hooks.torch_rnn``, ``lsrl.hooks.mamba``,
``lsrl.hooks.recurrentgemma``): it names its hook points and runs the model one step at a time, passing each
named value through its point. ``HookedModel.forward`` is a plain forward of that stepped run (so a plain
``register_forward_hook`` on a point fires at every step), and ``run_with_cache`` caches and patches it.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from lsrl.hooks.points import HookPoint, HookPoints, Patch, Recorder


class Stepper(Protocol):
    """What ``HookedModel`` asks of an architecture."""

    hook_names: list[str]
    tolerance: str  # how the stepped run may differ from the model's own forward

    def shape(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        """``(batch, steps)`` of the run these arguments ask for (an ``HookError`` for arguments it cannot take)."""
        ...

    def run(self, points: HookPoints, *args: Any, **kwargs: Any) -> Any:
        """The model's output for these arguments, every named value passed through ``points`` at every step."""
        ...


class HookedModel(nn.Module):
    """``model`` run step by step with a hook point on each state, gate and input of every layer.

    ``hook_names`` lists the points in the order a step reaches them; ``hook_point(name)`` is the ``HookPoint``
    module (identity: ``register_forward_hook`` on it fires at every step of a plain forward, and a returned
    tensor replaces the value). ``run_with_cache(*args, patch=None, grad=False, **kwargs)`` returns
    ``(outputs, {hook: values (batch, steps, width)})``: ``outputs`` of the kind the model's own forward returns
    for the same arguments, ``patch`` ``{hook: values (batch, steps, width), NaN where the run keeps its own,
    or a function (values (batch, width), step) -> values}`` set inside the recurrence, so every later step
    reads the patched value; ``grad`` keeps the autograd graph (off: the run is under ``no_grad``).
    """

    def __init__(self, model: nn.Module, stepper: Stepper) -> None:
        super().__init__()
        self.model = model
        self.stepper = stepper
        self.points = HookPoints(stepper.hook_names)

    @property
    def hook_names(self) -> list[str]:
        return list(self.points.names)

    @property
    def tolerance(self) -> str:
        """How far the unpatched stepped run may be from the model's own forward."""
        return self.stepper.tolerance

    def hook_point(self, name: str) -> HookPoint:
        return self.points[name]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.stepper.run(self.points, *args, **kwargs)

    def run_with_cache(self, *args: Any, patch: dict[str, Patch] | None = None, grad: bool = False,
                       **kwargs: Any) -> tuple[Any, dict[str, torch.Tensor]]:
        count, steps = self.stepper.shape(*args, **kwargs)
        with Recorder(self.points, patch, count, steps) as recorder, torch.set_grad_enabled(grad):
            outputs = self.stepper.run(self.points, *args, **kwargs)
        return outputs, recorder.cache()
