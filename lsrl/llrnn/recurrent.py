"""The state of every model of ``lsrl.llrnn.explicit``: a flat state split into named parts, run by ``step``.

Common interface: ``initial_state(batch)``, ``step(h, x)``, ``forward(xs, h=None)`` (batch first,
``(B, T, d)``, returns the states ``h^(1..T)``), ``parts(h)`` (named views of a flat state) and
``pack(**parts)`` (its inverse). ``layout`` maps each part's name to ``(offset, shape)`` in state order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypedDict

import torch
from torch import nn

from lsrl.errors import DimensionError, SequenceError
from lsrl.llrnn.checks import LlrnnArgumentError, check_inputs, count
from lsrl.llrnn.settings import MAX_WIDTH

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

MAX_PARAMETERS = 5 * 10**7  # a model larger than this (400 MB of float64) is refused before it is allocated
MAX_STATE = MAX_PARAMETERS  # numbers in a model's flat state, refused before its initial state is allocated
MAX_TRAJECTORY = 2.5 * 10**8  # numbers forward returns (B x T x the kept state: 2 GB of float64), checked first


class Factory(TypedDict):
    """Where a model's tensors are made: ``torch.zeros(..., **factory)``."""

    dtype: torch.dtype
    device: torch.device | str | None


def checked_width(owner: str, name: str, value: object) -> int:
    """A width (controller, hidden, memory, symbol, aux) in 1 .. ``MAX_WIDTH``."""
    return count(owner, name, value, high=MAX_WIDTH)


class RecurrentModel(nn.Module):
    """A flat state split into named parts, run by ``step``; subclasses give the layout and ``step``.

    Every constructor checks its arguments (sizes at least 1, non-empty lists of powers and words,
    a floating dtype) and ``forward`` its inputs (``lsrl.llrnn.checks.check_inputs``: a finite
    ``torch.Tensor`` (B, T, input_dim), B, T >= 1, of the model's dtype and device; nothing is converted
    implicitly), each with a one-line ``LsrlError`` that names the argument.
    """

    # the Elman controller's weights (add_controller) and the state buffers (set_layout), as registered
    H: torch.Tensor
    U: torch.Tensor
    B: torch.Tensor
    init_state: torch.Tensor | None
    default_state: torch.Tensor

    controller_dim_name = "controller_dim"  # the constructor's name for the controller size
    gathered_per_step = 0  # numbers a step gathers per batch element besides the state (the heads' B x K x N)

    def __init__(self, input_dim: int, controller_dim: int, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        input_dim = count(self.name, "input_dim", input_dim)
        controller_dim = checked_width(self.name, self.controller_dim_name, controller_dim)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise LlrnnArgumentError(f"{self.name}: dtype must be a floating torch.dtype (torch.float32, "
                                     f"torch.float64), got {dtype!r}")
        self.input_dim, self.controller_dim = input_dim, controller_dim
        self.factory: Factory = {"dtype": dtype, "device": device}
        self.register_buffer("init_state", None, persistent=False)

    @property
    def name(self) -> str:
        return type(self).__name__

    # -- construction helpers --------------------------------------------------------------------

    def add_weight(self, name: str, shape: tuple[int, ...], fan_in: int) -> None:
        """A parameter drawn uniformly from ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]``."""
        entries = math.prod(shape) + sum(parameter.numel() for parameter in self.parameters())
        if entries > MAX_PARAMETERS:  # refused before the memory is asked for
            raise LlrnnArgumentError(f"{self.name}: {entries:,} parameters (weight {name} {shape}) are more than "
                                     f"{MAX_PARAMETERS:,}; input_dim={self.input_dim}, "
                                     f"{self.controller_dim_name}={self.controller_dim}: choose smaller sizes")
        bound = 1 / math.sqrt(max(fan_in, 1))
        value = torch.empty(shape, **self.factory).uniform_(-bound, bound)
        self.register_parameter(name, nn.Parameter(value))

    def add_controller(self) -> None:
        """``H`` (d0, d0), ``U`` (d0, d_in), ``B`` (d0,) of the Elman evolution equation (Sec. 2.1)."""
        d0 = self.controller_dim
        self.add_weight("H", (d0, d0), d0)
        self.add_weight("U", (d0, self.input_dim), self.input_dim)
        self.add_weight("B", (d0,), d0)

    def set_layout(self, shapes: dict[str, tuple[int, ...]], addresses: tuple[str, ...] = (),
                   first_program: tuple[str, ...] = ()) -> None:
        """Lay the parts out in the order given; ``addresses`` start one-hot at position 0, and the
        memories ``first_program`` hold their first coefficient (1, 0, …) at every position."""
        self.layout, offset = {}, 0
        for name, shape in shapes.items():
            self.layout[name] = (offset, shape)
            offset += math.prod(shape)
        if offset > MAX_STATE:  # refused before the initial state is allocated
            raise LlrnnArgumentError(f"{self.name}: a state of {offset:,} numbers (memories width x slots) is more "
                                     f"than {MAX_STATE:,}: choose fewer slots or narrower memories")
        self.state_dim = offset
        default = torch.zeros(offset, **self.factory)
        for name in addresses:
            default[self.layout[name][0]] = 1
        for name in first_program:
            start, (_, slots) = self.layout[name]
            default[start : start + slots] = 1  # row 0 of a row-major (width, N) memory
        self.register_buffer("default_state", default, persistent=False)

    # -- the common interface --------------------------------------------------------------------

    def parts(self, h: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named views of ``h`` (..., state_dim): e.g. ``h0`` (..., d0), ``r`` (..., N), ``M`` (..., d, N)."""
        if h.shape[-1] != self.state_dim:
            raise DimensionError(f"{self.name}: state has size {h.shape[-1]}, expected {self.state_dim}")
        return {name: h[..., off : off + math.prod(shape)].unflatten(-1, shape)
                for name, (off, shape) in self.layout.items()}

    def pack(self, **parts: torch.Tensor) -> torch.Tensor:
        """The flat state (..., state_dim) holding ``parts``; missing parts take their initial value."""
        unknown = set(parts) - set(self.layout)
        if unknown:
            raise DimensionError(f"{self.name}: no state parts {sorted(unknown)}; its parts are {list(self.layout)}")
        defaults = self.parts(self.default_state)
        values = [self.checked_part(name, parts.get(name, defaults[name])) for name in self.layout]
        shapes = [shape for _, shape in self.layout.values()]
        lead = torch.broadcast_shapes(*(v.shape[: v.dim() - len(shape)] for v, shape in zip(values, shapes)))
        return torch.cat([v.expand(*lead, *shape).reshape(*lead, -1) for v, shape in zip(values, shapes)], dim=-1)

    def checked_part(self, name: str, value: torch.Tensor | ArrayLike) -> torch.Tensor:
        """``value`` as a tensor of the state's dtype and device, its trailing shape that of part ``name``."""
        value = torch.as_tensor(value, dtype=self.default_state.dtype, device=self.default_state.device)
        shape = self.layout[name][1]
        if tuple(value.shape[value.dim() - len(shape) :]) != shape:
            raise DimensionError(f"{self.name}: part {name!r} has shape {tuple(value.shape)}, expected (..., {shape})")
        return value

    def initial_state(self, batch: int) -> torch.Tensor:
        """``model.init_state`` if set, else h0 = 0, addresses one-hot at 0, memories 0 but for the
        pattern rings (``RingMachine``); (batch, state_dim)."""
        state = self.default_state if self.init_state is None else self.init_state
        return state.expand(batch, self.state_dim)

    def forward(self, xs: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        """The states ``h^(1..T)`` (B, T, state_dim) after reading ``xs`` (B, T, input_dim) from ``h``."""
        trajectory = self.trajectory(xs, h)
        return self.pack(**trajectory)

    def trajectory(self, xs: torch.Tensor, h: torch.Tensor | None = None, keep: Iterable[str] | None = None
                   ) -> dict[str, torch.Tensor]:
        """The parts named in ``keep`` (default all) of ``h^(1..T)``, each (B, T, *shape). The parts are
        carried from step to step as they are (no flat state): training keeps only ``h0``."""
        check_inputs(self.name, xs, self.input_dim, self.default_state.dtype, self.default_state.device)
        keep = tuple(self.layout) if keep is None else tuple(keep)
        per_step = sum(math.prod(self.layout[name][1]) for name in keep if name in self.layout)
        if xs.shape[0] * max(xs.shape[1] * per_step, self.gathered_per_step) > MAX_TRAJECTORY:  # checked first
            raise SequenceError(f"{self.name}: inputs of shape {tuple(xs.shape)} would return "
                                f"{xs.shape[0] * xs.shape[1] * per_step:,} state numbers and gather "
                                f"{xs.shape[0] * self.gathered_per_step:,} a step, more than {MAX_TRAJECTORY:,.0f}: "
                                "run shorter or smaller batches")
        parts = self.parts(self.initial_state(xs.shape[0]) if h is None else h)
        kept: dict[str, list[torch.Tensor]] = {name: [] for name in keep}
        for t in range(xs.shape[1]):
            parts = self.step_parts(parts, xs[:, t])
            for name in keep:
                kept[name].append(parts[name])
        return {name: torch.stack(values, dim=1) for name, values in kept.items()}

    def step(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``h^(t+1)`` (..., state_dim) from ``h^(t)`` and the input ``x^(t+1)``."""
        return self.pack(**self.step_parts(self.parts(h), x))

    def step_parts(self, parts: dict[str, torch.Tensor], x: torch.Tensor) -> dict[str, torch.Tensor]:
        """One step on the named parts (subclasses)."""
        raise NotImplementedError

    def elman(self, h0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``H h0 + U x + B``."""
        return h0 @ self.H.T + x @ self.U.T + self.B
