"""The input checks every torch target's ``forward`` starts with, so that a person gets one
``SequenceError`` (not a traceback from inside torch) and the module follows ``.to(dtype)``.

``to_torch`` records the program's ``Input`` on the module (``declared_input``): its bounds are
checked like the interpreter checks them, unless ``forward(x, check_bounds=False)``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Iterator, Protocol

import numpy as np
import torch

from lsrl.errors import LsrlError, SequenceError
from lsrl.lang.evaluate import float_bounds, not_integer
from lsrl.targets.precision import ToleranceWarning

if TYPE_CHECKING:
    from lsrl.lang.nodes import Input
    from lsrl.targets.blocks import BlockStack


class HoldsTensors(Protocol):
    """What ``module_placement`` reads: a module's parameters and buffers."""

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...

    def buffers(self, recurse: bool = True) -> Iterator[torch.Tensor]: ...


def module_placement(module: HoldsTensors) -> tuple[torch.dtype, torch.device]:
    """``(dtype, device)`` of the module's floating weights (float64 on the CPU unless ``.to`` moved them)."""
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype, tensor.device
    return torch.float64, torch.device("cpu")


def _as_tensor(x: Any, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    try:
        return torch.as_tensor(np.asarray(x))
    except (TypeError, ValueError, RuntimeError) as error:
        raise SequenceError(
            f"{name}: expected a tensor of shape (B, T, d_in), got {type(x).__name__} ({error})") from None


def checked_input(module: torch.nn.Module, x: Any, check_bounds: bool = True) -> torch.Tensor:
    """``x`` as a ``(B, T, module.d_in)`` tensor in the module's dtype and on its device, or ``SequenceError``.

    Accepted: a tensor or numpy array of that shape, floating in the module's dtype, or integer /
    bool (converted, exactly for tokens); an empty batch; a tensor that requires grad (the outputs carry
    gradients). Rejected: another rank or width, no time steps (``T = 0``: the interpreter returns
    ``(B, 0, d_out)``), more steps than the module's ``max_len`` (``check_length``), a tensor on the meta
    device, complex numbers, a floating dtype other than the module's (convert the input, or the module
    with ``.to``), NaN or infinity, and values outside the declared ``Input`` bounds (unless
    ``check_bounds=False``).
    """
    name = getattr(module, "architecture", type(module).__name__)
    x = _as_tensor(x, name)
    if x.is_meta:
        raise SequenceError(f"{name}: the input is on the meta device, which holds no values")
    if x.is_complex():
        raise SequenceError(f"{name}: the input holds complex numbers")
    if x.dim() != 3 or x.shape[-1] != module.d_in:
        raise SequenceError(
            f"{name}: expected a batch of sequences of shape (B, T, {module.d_in}), got {tuple(x.shape)}"
            + (" (add the batch axis: x[None])" if x.dim() == 2 and x.shape[-1] == module.d_in else "")
        )
    if x.shape[1] == 0:  # torch's recurrences and convolutions cannot run zero steps
        raise SequenceError(f"{name}: the sequences have no steps (shape {tuple(x.shape)}); a target needs T >= 1")
    check_length(module, x.shape[1])
    dtype, device = module_placement(module)
    if x.is_floating_point() and x.dtype != dtype:
        raise SequenceError(
            f"{name}: the module runs in {dtype} but the input is {x.dtype}; convert the input "
            f"(x.to({dtype})) or the module (module.to({x.dtype}))"
        )
    x = x.to(device=device, dtype=dtype)  # integer tokens become floats exactly
    if not torch.isfinite(x).all():
        raise SequenceError(f"{name}: the input holds NaN or infinite values")
    declared = getattr(module, "declared_input", None)
    if check_bounds and declared is not None:
        _check_bounds(declared, x.detach())
    _warn_if_inexact(module, dtype)
    _warn_if_unchecked(module, x.shape[1])
    return x


def check_length(module: torch.nn.Module, steps: int) -> None:
    """Refuse (``SequenceError``) a run of ``steps`` steps beyond the module's ``max_len``, where it has one: its
    construction holds up to it (``module.max_len_reason`` says how); a module without one runs any length."""
    max_len = getattr(module, "max_len", None)
    if max_len is not None and steps > max_len:
        name = getattr(module, "architecture", type(module).__name__)
        raise SequenceError(f"{name}: sequence length {steps} exceeds max_len={max_len}, "
                            f"{getattr(module, 'max_len_reason', 'the longest sequence it is built for')}; "
                            f"build the model with max_len >= {steps}")


def _check_bounds(declared: Input, x: torch.Tensor) -> None:
    for side, bounds in enumerate(declared.bounds):
        nearest, nearest_outside = float_bounds(bounds, below=side == 0)
        rounded = torch.tensor(nearest, dtype=torch.float64, device=x.device)
        rounded_outside = torch.tensor(nearest_outside, dtype=torch.bool, device=x.device)
        values = x.double()
        beyond = values < rounded if side == 0 else values > rounded
        outside = beyond | ((values == rounded) & rounded_outside)
        if outside.any():
            sequence, step, component = (int(i) for i in torch.nonzero(outside)[0])
            low, high = declared.bounds[0][component], declared.bounds[1][component]
            raise SequenceError(
                f"{declared.describe()}: component {component} is {values[sequence, step, component].item()} at "
                f"step {step} of sequence {sequence}, outside the declared bounds [{low}, {high}]; the model may "
                "rely on them (optimised f_ifelse variants); pass check_bounds=False to run anyway"
            )
    fractional = x != torch.round(x)
    if declared.integer and fractional.any():
        sequence, step, component = (int(i) for i in torch.nonzero(fractional)[0])
        raise not_integer(declared, (sequence, step), x[sequence, step, component].item(), component)


def _warn_if_inexact(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Warn once per module when its values outgrow the precision of ``dtype`` (see ``lsrl.targets.precision``)."""
    precision = getattr(module, "precision", None)
    if precision is None or dtype == torch.float64 or getattr(module, "_precision_warned", None) == dtype:
        return
    module._precision_warned = dtype  # type: ignore[assignment]  # a flag of the module's own, no sub-module
    problem = precision.problem(str(dtype).removeprefix("torch."))
    if problem:
        warnings.warn(f"{getattr(module, 'architecture', 'model')} in {dtype}: {problem}", RuntimeWarning, stacklevel=3)


def _warn_if_unchecked(module: torch.nn.Module, steps: int) -> None:
    """Warn once per module when a run is longer than its stated tolerance was checked for."""
    exceeded_by = getattr(getattr(module, "tolerance", None), "exceeded_by", None)  # a stock target's is a number
    problem = exceeded_by(steps) if exceeded_by is not None else None
    if problem and not getattr(module, "_tolerance_warned", False):
        module._tolerance_warned = True  # type: ignore[assignment]  # a flag of the module's own, no sub-module
        warnings.warn(f"{getattr(module, 'architecture', 'model')}: {problem}", ToleranceWarning, stacklevel=3)


MAX_HAWK_BYTES = 2 * 2**30


def check_hawk_size(stack: BlockStack, arch: str, max_len: int) -> None:
    """Refuse a Hawk / Griffin build whose convolution kernels alone would exceed ``MAX_HAWK_BYTES``.

    The state blocks' kernels span ``max_len`` steps (App. E.1): ``(H, H, max_len)`` float64 with
    ``H = d_state + d_in + 1``, held twice while building (numpy and torch). A lower bound.
    """
    widths = [block.d_state + block.d_in + 1 for block in stack.blocks]
    needed = 2 * 8 * max_len * sum(width * width for width in widths)
    if needed > MAX_HAWK_BYTES:
        raise LsrlError(
            f"{arch} with max_len={max_len} needs at least {needed / 2**30:.1f} GiB for its convolution kernels "
            f"(limit {MAX_HAWK_BYTES / 2**30:.0f} GiB); use a smaller max_len"
        )
