"""Errors raised for bad programs and bad inputs. Every message names the node involved."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable
from typing import Any, SupportsIndex, TypeVar, cast

Function = TypeVar("Function", bound=Callable[..., Any])

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


class ProgramError(LsrlError):
    """The user's own code failed while lsrl ran it (a program file of ``lsrl compile``: a syntax error, an
    exception, ``sys.exit``). The message says so in one line; ``user_traceback`` is the traceback of the
    user's frames, which the command line prints above it."""

    def __init__(self, message: str, user_traceback: str) -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


class CallError(LsrlError, TypeError):
    """A public function called with arguments its signature does not take (an unknown keyword, a missing or
    surplus argument); the message names the function, the argument and the ones it accepts. Also a
    ``TypeError``, as Python's own error for such a call is."""


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
        return operator.index(cast(SupportsIndex, value))  # what has no __index__ raises TypeError
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
    """``repr(value)`` on one line (a numpy array's spans several), cut to 60 characters; only the line breaks
    and the indentation after them are joined, so that the spaces inside a string stay as they are."""
    text = re.sub(r"\s*\n\s*", " ", repr(value))
    return text if len(text) <= 60 else text[:57] + "..."


def checked_call(function: Function) -> Function:
    """``function`` (or a class's ``__init__``), raising ``CallError`` where Python would raise its ``TypeError``
    for arguments that do not fit the signature."""
    import inspect  # here: ``import lsrl.errors`` stays quick for the command line

    signature = inspect.signature(function)
    where = function.__qualname__.removesuffix(".__init__")

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:
            raise CallError(_call_mistake(where, signature, kwargs, error)) from None
        return function(*args, **kwargs)

    return checked  # type: ignore[return-value]  # the same signature, by functools.wraps


def _call_mistake(where: str, signature: Any, keywords: dict[str, Any], error: TypeError) -> str:
    """What is wrong with a call of ``where`` that ``signature.bind`` refused with ``error``."""
    parameters = [parameter for name, parameter in signature.parameters.items() if name != "self"]
    if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        accepted = [parameter.name for parameter in parameters
                    if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)]
        unknown = [name for name in keywords if name not in accepted]
        if unknown:
            return (f"{where}: unknown keyword argument {unknown[0]!r}; it accepts "
                    f"{', '.join(accepted) or 'no keyword arguments'}")
    bare = signature.replace(parameters=[parameter.replace(annotation=parameter.empty) for parameter in parameters],
                             return_annotation=signature.empty)
    return f"{where}: {error}; it is called as {where}{bare}"
