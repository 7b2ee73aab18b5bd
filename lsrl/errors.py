"""Errors raised for bad programs and bad inputs. Every message names the node involved."""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable

REPORT_REQUEST = ("This is a bug in lsrl, not in your program: please report it with the traceback and the program "
                  "that triggered it.")


class LsrlError(Exception):
    """Base class of every error lsrl raises on purpose. Its message is one line: a value shown in it whose
    repr spans several (a numpy or masked array's) is folded onto one."""

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], str) and "\n" in args[0]:
            args = (re.sub(r"\s*\n\s*", " ", args[0]),)
        super().__init__(*args)


class DimensionError(LsrlError):
    """A matrix, vector or input has a shape that does not fit the node it is given to."""


class GraphError(LsrlError):
    """The program's graph is not a valid LSRL program (second Input, cycle, foreign object)."""


class SequenceError(LsrlError):
    """An input sequence has the wrong shape or holds values that are not finite numbers."""


class BackendError(LsrlError):
    """A request that the chosen number backend cannot honour (e.g. exact output from float weights)."""


class ModelFileError(LsrlError):
    """A saved model (``model.json``, ``weights.safetensors``, a checkpoint) is missing, corrupt or tampered with,
    or a model file cannot be written where asked (``lsrl.model.writing``)."""


class AutomatonError(LsrlError):
    """A finite automaton or Mealy table that is not deterministic, complete and reachable, or a symbol
    outside its alphabet; the message names the state and the symbol."""


class FactError(LsrlError):
    """A floating-point fact a construction rests on (``lsrl.targets.facts``: an activation that must be exactly
    0, 1, the identity or ReLU on the values it is fed) fails on the device, dtype and CPU capability the model is
    built or run on; the message names the fact, the device and the capability."""


class InternalError(Exception):
    """A broken invariant inside lsrl: a bug, not a mistake in the user's program or input.

    Deliberately not an ``LsrlError``: callers that catch user errors must not swallow a bug. The
    message says what broke and asks for a report; the CLI prints its traceback.
    """

    def __init__(self, message: str) -> None:
        super().__init__(f"{message}\n{REPORT_REQUEST}")


def whole_number(value: object) -> int | None:
    """``value`` as an ``int`` if it is a whole number (a Python or numpy integer), else None: the one test of
    every integer argument. A bool is no count, and a numpy ``timedelta64`` (which ``numbers.Integral``
    accepts) is a duration; ``operator.index`` refuses floats, strings and timedelta64."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def listed(values: object) -> list | None:
    """``values`` as a list where it is a sequence of items, else None: a string or bytes (one item, not its
    characters), anything not iterable, and an ``Iterable`` that cannot be iterated (a 0-d numpy array or
    tensor, whose ``__iter__`` raises) -- the one test of every argument that takes several items."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        return None
    try:
        return list(values)
    except TypeError:
        return None


def shown(value: object) -> str:
    """``repr(value)`` on one line (a numpy array's spans several), cut to 60 characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."
