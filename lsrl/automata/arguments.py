"""Checks of the arguments that enter ``lsrl.automata``: each bad value becomes one ``LsrlError`` (by default an
``AutomatonError``) whose one-line message names the function, the argument, what was given and what is allowed."""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable
from typing import Any

import numpy as np

from lsrl.errors import AutomatonError, LsrlError, shown
from lsrl.errors import whole_number as integer_value


def whole_number(value: Any, name: str, where: str, minimum: int = 0, maximum: int | None = None,
                 error: type[LsrlError] = AutomatonError) -> int:
    """``value`` as an ``int`` in ``minimum..maximum``: a Python or numpy integer (not a bool), or ``error``."""
    number = integer_value(value)
    if number is None:
        raise error(f"{where}: {name} must be an integer, got {shown(value)} ({type(value).__name__})")
    value = number
    if value < minimum or (maximum is not None and value > maximum):
        allowed = f"at least {minimum}" if maximum is None else f"in {minimum}..{maximum:,}"
        raise error(f"{where}: {name} must be {allowed}, got {value:,}")
    return value


def positive_real(value: Any, name: str, where: str, error: type[LsrlError] = LsrlError) -> float:
    """``value`` as a finite positive ``float`` (a Python or numpy real, not a bool), or ``error``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(f"{where}: {name} must be a positive real number, got {shown(value)} ({type(value).__name__})")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise error(f"{where}: {name} must be a finite positive number, got {value}")
    return value


def generator(rng: Any, where: str) -> np.random.Generator:
    """A ``numpy.random.Generator``, or a non-negative integer seed (``numpy.random.default_rng(seed)``)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if integer_value(rng) is not None:
        return np.random.default_rng(whole_number(rng, "the seed rng", where))
    raise AutomatonError(f"{where}: rng must be a numpy.random.Generator or a non-negative integer seed, got "
                         f"{shown(rng)} ({type(rng).__name__})")


def items(values: Any, what: str, where: str = "") -> tuple:
    """``values`` (an iterable of hashable items) as a tuple, or an ``AutomatonError`` naming ``what``."""
    prefix = f"{where}: " if where else ""
    if isinstance(values, (bytes, bytearray)) or not hasattr(values, "__iter__"):
        raise AutomatonError(f"{prefix}{what} must be an iterable of hashable items, got {shown(values)} "
                             f"({type(values).__name__})")
    values = tuple(values)
    for value in values:
        if not isinstance(value, Hashable):
            raise AutomatonError(f"{prefix}every item of {what} must be hashable (a name, a number, a tuple), got "
                                 f"{shown(value)}")
        if not is_hashable(value):  # a tuple holding a list
            raise AutomatonError(f"{prefix}every item of {what} must be hashable (a name, a number, a tuple), got "
                                 f"{shown(value)}")
    return values


def is_hashable(value: Any) -> bool:
    """Whether ``value`` can be a state or symbol name (a dict key)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True
