"""Hook points: identity modules that every stepped run calls once per step with the value they name.

A hook point is an ``nn.Module`` (as TransformerLens's ``HookPoint``): a plain ``register_forward_hook`` on it
fires at every step of a plain forward, and a hook that returns a tensor replaces the value, so that the
replacement is what the rest of the step and every later step read. ``Recorder`` is the pair of forward hooks
``run_with_cache`` puts on every point for one run: it applies the patch, then keeps what the run read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from lsrl.errors import LsrlError

# a patch of one hook point: values (B, T, width) with NaN where the run keeps its own, or a function
# ``(values (B, width), step) -> values`` called at every step
Patch = torch.Tensor | Callable[[torch.Tensor, int], torch.Tensor]


class HookError(LsrlError):
    """A hook name, a patch or an argument a hooked model cannot take."""


class HookPoint(nn.Module):
    """The identity on one named value; the step it is called at is kept in ``step`` while the call runs."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.step = -1

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        return values

    def at(self, values: torch.Tensor, step: int) -> torch.Tensor:
        """``values`` (B, width) at ``step`` through the module's hooks (what the run reads from then on)."""
        self.step = step
        return self(values)


class HookPoints(nn.Module):
    """The named hook points of one model, in the order a step reaches them."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.names = list(names)
        # a ModuleDict key may hold no dot: the points are registered under their names with "__" for "."
        self.points = nn.ModuleDict({name.replace(".", "__"): HookPoint(name) for name in self.names})

    def __getitem__(self, name: str) -> HookPoint:
        key = name.replace(".", "__")
        if name not in self.names:
            raise HookError(f"no hook point named {name!r}; the model's hook points are hook_names "
                            f"({', '.join(self.names[:6])}{', ...' if len(self.names) > 6 else ''})")
        point = self.points[key]
        assert isinstance(point, HookPoint)
        return point

    def at(self, name: str, values: torch.Tensor, step: int) -> torch.Tensor:
        return self[name].at(values, step)


class Recorder:
    """Forward hooks on every point for one run: the patch first, then a copy of what the run reads."""

    def __init__(self, points: HookPoints, patch: dict[str, Patch] | None, count: int, steps: int,
                 keep: bool = True) -> None:
        self.points, self.count, self.steps, self.keep = points, count, steps, keep
        self.patch = {name: _checked_patch(name, given, count, steps) for name, given in (patch or {}).items()}
        for name in self.patch:
            points[name]  # an unknown name is refused before the run
        self.seen: dict[str, list[torch.Tensor]] = {name: [] for name in points.names}
        self.handles: list[Any] = []

    def __enter__(self) -> Recorder:
        for name in self.points.names:
            self.handles.append(self.points[name].register_forward_hook(self._hook(name)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()

    def _hook(self, name: str) -> Callable[[nn.Module, Any, torch.Tensor], torch.Tensor]:
        def hook(module: nn.Module, args: Any, values: torch.Tensor) -> torch.Tensor:
            assert isinstance(module, HookPoint), "the recorder hooks hook points only"
            step = module.step
            given = self.patch.get(name)
            if callable(given):
                values = _same_shape(name, given(values, step), values)
            elif given is not None:
                setting = given[:, step].to(dtype=values.dtype, device=values.device)
                if setting.shape != values.shape:
                    raise HookError(f"patch of {name!r}: width {setting.shape[-1]} given, the hook point holds "
                                    f"{values.shape[-1]} values per step")
                values = torch.where(torch.isnan(setting), values, setting)
            if self.keep:
                self.seen[name].append(values)
            return values
        return hook

    def cache(self) -> dict[str, torch.Tensor]:
        """``{hook: values (B, T, width)}`` of the points the run reached at every step."""
        return {name: torch.stack(values, dim=1) for name, values in self.seen.items() if values}


def _checked_patch(name: str, given: Any, count: int, steps: int) -> Patch:
    if callable(given) and not isinstance(given, torch.Tensor):
        return given
    try:
        values = torch.as_tensor(given)
    except (TypeError, ValueError, RuntimeError) as error:
        raise HookError(f"patch of {name!r}: values (batch, steps, width) or a function (values, step) -> values "
                        f"expected, got {type(given).__name__} ({error})") from None
    if values.dim() != 3 or values.shape[0] != count or values.shape[1] != steps:
        raise HookError(f"patch of {name!r}: shape (batch={count}, steps={steps}, width) expected, "
                        f"got {tuple(values.shape)}")
    if not values.is_floating_point():
        values = values.double()
    return values


def _same_shape(name: str, replaced: Any, values: torch.Tensor) -> torch.Tensor:
    if not isinstance(replaced, torch.Tensor) or replaced.shape != values.shape:
        shape = tuple(replaced.shape) if isinstance(replaced, torch.Tensor) else type(replaced).__name__
        raise HookError(f"patch function of {name!r} returned {shape}; a tensor of shape {tuple(values.shape)} "
                        f"(batch, width) expected")
    return replaced.to(values.dtype)
