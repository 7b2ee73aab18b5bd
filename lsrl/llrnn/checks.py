"""Checks of the values that enter ``lsrl.llrnn``: sizes, lists of powers and words, hyper-parameters and
input sequences.

Each check raises an ``LlrnnArgumentError`` (an ``LsrlError``) whose one-line message names the owner
(a model or function), the argument, what was given and what is allowed. Booleans are not counts,
and NaN or infinite values are never numbers here.

Input sequences (``check_inputs``): a model of ``lsrl.llrnn`` reads a ``torch.Tensor`` of shape
``(B, T, input_dim)`` with ``B, T >= 1``, of the model's own floating dtype, on its device, with finite
values. Nothing is converted implicitly (as ``torch.nn`` modules do not): a numpy array, a list or a
float32 tensor given to a float64 model is refused with the conversion to write,
``torch.as_tensor(xs, dtype=..., device=...)``.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

from lsrl.errors import LsrlError, SequenceError, listed, shown, whole_number

if TYPE_CHECKING:
    import torch


class LlrnnArgumentError(LsrlError, ValueError):
    """An argument of an LLRNN model, task or training function outside its allowed values (also a
    ``ValueError``, which the ring operators raised before)."""


def count(owner: str, name: str, value: Any, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int in ``low .. high`` (``high`` None: no upper limit); a bool is not a count."""
    number = whole_number(value)
    if number is None:
        raise LlrnnArgumentError(f"{owner}: {name} must be an integer, got {shown(value)}")
    if number < low or high is not None and number > high:
        allowed = f"at least {low}" if high is None else f"in {low} .. {high}"
        raise LlrnnArgumentError(f"{owner}: {name} must be an integer {allowed}, got {number}")
    return number


def real(owner: str, name: str, value: Any, low: float | None = None, high: float | None = None,
         low_open: bool = False) -> float:
    """``value`` as a finite float with ``low <= value`` (``<`` if ``low_open``) and ``value <= high``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not _real_scalar(value):
        raise LlrnnArgumentError(f"{owner}: {name} must be a finite number, got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond float64
        number = math.inf if value > 0 else -math.inf
    too_low = low is not None and (number <= low if low_open else number < low)
    if not math.isfinite(number) or too_low or high is not None and number > high:
        bounds = [f"> {low}" if low_open else f">= {low}"] if low is not None else []
        bounds += [f"<= {high}"] if high is not None else []
        allowed = "finite" + (f" and {' and '.join(bounds)}" if bounds else "")
        raise LlrnnArgumentError(f"{owner}: {name} must be {allowed}, got {number!r}")
    return number


def _real_scalar(value: Any) -> bool:
    """A numpy or torch real scalar (``np.float64(0.1)``, a 0-d tensor)."""
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", None)
    if dtype is None or shape is None or tuple(shape) != ():
        return False
    torch = sys.modules.get("torch")  # a tensor exists only where torch is imported: checks load without it
    if torch is not None and isinstance(value, torch.Tensor):
        return value.dtype.is_floating_point or not value.dtype.is_complex and value.dtype != torch.bool
    return getattr(dtype, "kind", "") in "iuf"


def _items(owner: str, name: str, values: Any, nonempty: bool, kind: str, one: str) -> tuple:
    """``values`` (an iterable, not a string itself) as a tuple; empty refused if ``nonempty``."""
    given = listed(values)
    if given is None:
        raise LlrnnArgumentError(f"{owner}: {name} must be a sequence of {kind}, got {shown(values)}")
    items = tuple(given)
    if nonempty and not items:
        raise LlrnnArgumentError(f"{owner}: {name} must hold at least one {one}, got an empty sequence")
    return items


def integers(owner: str, name: str, values: Any, nonempty: bool = True) -> tuple[int, ...]:
    """``values`` (an iterable of integers, not a string) as a tuple; empty refused if ``nonempty``."""
    items = _items(owner, name, values, nonempty, "integers", "integer")
    wholes = tuple(whole_number(item) for item in items)
    for item, number in zip(items, wholes):
        if number is None:
            raise LlrnnArgumentError(f"{owner}: {name} must hold integers, got {shown(item)}")
    return wholes  # type: ignore[return-value]  # no None left


def strings(owner: str, name: str, values: Any, nonempty: bool = True) -> tuple[str, ...]:
    """``values`` (an iterable of strings, not a string itself) as a tuple; empty refused if ``nonempty``."""
    items = _items(owner, name, values, nonempty, "strings", "entry")
    for item in items:
        if not isinstance(item, str):
            raise LlrnnArgumentError(f"{owner}: {name} must hold strings, got {shown(item)}")
    return items


def check_inputs(owner: str, xs: Any, input_dim: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``xs`` if it is a finite ``torch.Tensor`` (B, T, input_dim), B, T >= 1, of ``dtype`` on ``device``."""
    import torch

    conversion = f"torch.as_tensor(xs, dtype={dtype}, device='{device}')"
    if not isinstance(xs, torch.Tensor):
        raise SequenceError(f"{owner}: inputs must be a torch.Tensor (B, T, {input_dim}), got a "
                            f"{type(xs).__name__}; convert it with {conversion}")
    if xs.dim() != 3 or xs.shape[-1] != input_dim:
        raise SequenceError(f"{owner}: inputs have shape {tuple(xs.shape)}, expected (B, T, {input_dim})")
    if xs.shape[0] == 0 or xs.shape[1] == 0:
        raise SequenceError(f"{owner}: inputs have shape {tuple(xs.shape)}: the batch B and the length T must be "
                            "at least 1")
    if xs.dtype != dtype:
        raise SequenceError(f"{owner}: inputs have dtype {xs.dtype}, the model computes in {dtype}; convert them "
                            f"with xs.to({dtype})")
    if xs.device.type != device.type or device.index is not None and xs.device.index != device.index:
        raise SequenceError(f"{owner}: inputs are on {xs.device}, the model on {device}; move them with "
                            f"xs.to('{device}')")
    if not bool(torch.isfinite(xs).all()):
        batch, step = (int(i) for i in (~torch.isfinite(xs)).any(-1).nonzero()[0])
        raise SequenceError(f"{owner}: inputs hold a value that is not finite (NaN or infinite) at batch {batch}, "
                            f"step {step}")
    return xs
