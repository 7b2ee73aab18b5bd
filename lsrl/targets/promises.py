"""What a target module promises, kept when it is moved: ``.to`` / ``.float`` / ``.double`` / ``.half`` /
``.cuda`` either restate the promise for the new dtype or are refused, before anything moves.

Every move of a ``torch.nn.Module`` passes through ``Module._apply(fn)``; ``KeptPromises._apply`` first asks
``fn`` where a tensor of the module's dtype and device would go (an empty probe), then:

* another device keeps the promise (the arithmetic is the dtype's); the ``meta`` device, which holds no
  values, is refused: the module's weights are the construction;
* another dtype restates it where the construction allows (``retuned``): the targets built from blocks
  state a ``Tolerance`` that is a function of the dtype (``lsrl.targets.precision``), recomputed for
  float32 and float64; a GRU's ``gate_bound`` must lie in the new dtype's range. Half precision
  (float16: a range of 65504; bfloat16: an 8-bit significand) and every other dtype are refused: no
  tolerance is stated there. A stock LSTM / GRU is built for one dtype (its scales, saturations and
  tolerance come from it), so it refuses every dtype change: build it again with ``dtype=``.

``StockState`` is where a stock target's ``run`` stopped: the core's state and the steps run so far, so
that a continued run is refused past ``max_len`` (``continued_state``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Union

import torch
from torch import nn

from lsrl.errors import LsrlError, SequenceError, whole_number
from lsrl.targets.checks import HoldsTensors, module_placement
from lsrl.targets.precision import Tolerance

STATED_DTYPES = (torch.float32, torch.float64)  # the dtypes a stated tolerance covers
CoreState = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


class KeptPromises:
    """Mixin for the target modules (before ``nn.Module``): a move that would break the module's stated
    promise is refused with an ``LsrlError`` before any tensor moves; one that changes the dtype restates
    it (module docstring)."""

    tolerance: Tolerance | float | None  # a float module's Tolerance, a stock module's number

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:
        dtype, device = module_placement(self)  # type: ignore[arg-type]  # mixed into an nn.Module
        probe = fn(torch.empty(0, dtype=dtype, device=device))
        name = getattr(self, "architecture", type(self).__name__)
        if probe.device.type == "meta":
            raise LsrlError(f"{name}: cannot move to the meta device, which holds no values: the module's weights "
                            "are the construction")
        retune = self.retuned(probe.dtype) if probe.dtype != dtype else None
        moved = super()._apply(fn, recurse)  # type: ignore[misc]  # nn.Module's, later in the MRO
        if retune is not None:
            retune()
        return moved

    def retuned(self, dtype: torch.dtype) -> Callable[[], None]:
        """What to restate once the module runs in ``dtype`` (called before it moves); ``LsrlError`` where the
        construction states nothing in ``dtype``."""
        name = getattr(self, "architecture", type(self).__name__)
        if dtype not in STATED_DTYPES:
            raise LsrlError(f"{name}: cannot run in {dtype}: its stated tolerance (module.tolerance) covers float32 "
                            f"and float64 only{_why_not(dtype)}; use module.to(torch.float32) or torch.float64")
        self.require_dtype(dtype_name(dtype))
        tolerance = getattr(self, "tolerance", None)

        def restate() -> None:
            if isinstance(tolerance, Tolerance):
                self.tolerance = tolerance.in_dtype(dtype_name(dtype))
        return restate

    def require_dtype(self, dtype: str) -> None:
        """Refuse (``LsrlError``) a dtype in which this construction does not hold; every one of
        ``STATED_DTYPES`` by default."""


class BuiltForOneDtype(KeptPromises):
    """A ``KeptPromises`` module whose construction is made for the dtype it was built in (a stock target)."""

    def retuned(self, dtype: torch.dtype) -> Callable[[], None]:
        name = getattr(self, "architecture", type(self).__name__)
        built, _ = module_placement(self)  # type: ignore[arg-type]  # mixed into an nn.Module
        raise LsrlError(f"{name}: built for {built} (its scales, saturations and stated tolerance come from that "
                        f"dtype), cannot run in {dtype}; build it again with dtype={_shown_dtype(dtype)}")


def dtype_name(dtype: torch.dtype) -> str:
    """``"float32"`` for ``torch.float32``."""
    return str(dtype).removeprefix("torch.")


def _shown_dtype(dtype: torch.dtype) -> str:
    return str(dtype) if dtype in STATED_DTYPES else "torch.float32 or torch.float64"


def _why_not(dtype: torch.dtype) -> str:
    if dtype == torch.float16:
        return " (float16 overflows beyond 65504 and has an 11-bit significand: outputs become inf or NaN)"
    if dtype == torch.bfloat16:
        return " (bfloat16 has an 8-bit significand: the program's values are lost)"
    return ""


# ---- a stock target's run, continued ---------------------------------------------------------------------


@dataclass(frozen=True)
class StockState:
    """Where ``net.run`` of a stock LSTM / GRU stopped: ``core``, the core's final state in PyTorch's layout
    (``h``, or ``(h, c)`` for the LSTM: ``(num_layers, batch, hidden)`` each), and ``steps``, the steps run
    since the initial state. ``net.run(x, state)`` continues from it and refuses to run past ``max_len``."""

    core: CoreState
    steps: int


class SteppedModule(HoldsTensors, Protocol):
    """What ``continued_state`` reads of a stock module (``lsrl.targets.stock.StockRNNModel``)."""

    architecture: str
    max_len: int
    core: nn.RNNBase

    def initial_state(self, batch: int) -> CoreState: ...


def continued_state(net: SteppedModule, state: Any, x: torch.Tensor) -> tuple[int, CoreState]:
    """``(steps so far, core state)`` for ``net.run(x, state)``: the initial state for ``state=None``; else
    ``state`` checked (a ``StockState`` of this module's shape, dtype and device, within ``max_len`` with
    ``x``'s steps), or ``SequenceError`` naming what is wrong."""
    name, batch = net.architecture, x.shape[0]
    if state is None:
        start, core = 0, net.initial_state(batch)
    elif not isinstance(state, StockState):
        raise SequenceError(f"{name}.run: state must be the StockState an earlier run returned (or "
                            f"StockState(core, steps) for a core state after `steps` steps), got "
                            f"{type(state).__name__}")
    else:
        start, core = _checked_steps(name, state.steps), state.core
        _check_core(net, core, batch)
    if start + x.shape[1] > net.max_len:
        raise SequenceError(f"{name}.run: {start} steps run and {x.shape[1]} more make {start + x.shape[1]}, beyond "
                            f"max_len={net.max_len} (its scales and stated tolerance hold up to it); build the "
                            "module with a larger max_len")
    return start, core


def _checked_steps(name: str, steps: Any) -> int:
    count = whole_number(steps)
    if count is None or count < 0:
        raise SequenceError(f"{name}.run: state.steps must be a non-negative integer, got {steps!r}")
    return count


def _check_core(net: SteppedModule, core: Any, batch: int) -> None:
    """``core`` is ``h`` (GRU) or ``(h, c)`` (LSTM), each ``(num_layers, batch, hidden)`` in the module's dtype, on
    its device, finite."""
    name, lstm = net.architecture, isinstance(net.core, nn.LSTM)
    pair = isinstance(core, tuple) and len(core) == 2
    parts = core if lstm and pair else (core,)
    expected = "a pair (h, c) of tensors" if lstm else "a tensor h"
    if lstm and not pair or not all(isinstance(part, torch.Tensor) for part in parts):
        raise SequenceError(f"{name}.run: state.core must be {expected}, got {type(core).__name__}")
    shape = (net.core.num_layers, batch, net.core.hidden_size)
    dtype, device = module_placement(net)
    for part in parts:
        if tuple(part.shape) != shape:
            raise SequenceError(f"{name}.run: state.core holds a tensor of shape {tuple(part.shape)}, expected "
                                f"{shape} (layers, batch, hidden) for a batch of {batch}")
        if part.dtype != dtype or part.device != device:
            raise SequenceError(f"{name}.run: state.core holds a {part.dtype} tensor on {part.device}, the module "
                                f"runs in {dtype} on {device}")
        if not torch.isfinite(part).all():
            raise SequenceError(f"{name}.run: state.core holds NaN or infinite values")
