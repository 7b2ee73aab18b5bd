"""What the fuzz suites (tests/test_fuzz_api.py, tests/test_fuzz_cli.py) throw at lsrl, and how they judge it.

A hostile value is drawn from ``junk()`` (any type: None, text, NaN, inf, negatives, zero, huge numbers,
empty and nested containers, numpy scalars and arrays of odd dtypes, masked arrays, torch tensors, ...) or
from ``bad_sequence(d)`` (array-likes of wrong shape, dtype or contents for an input of width d). A call
given one either answers (and the caller checks the answer against the exact interpreter or an
independent computation) or raises an ``LsrlError`` whose message is one line and names the argument:
``user_error_or_answer`` is that judgement.
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import strategies as st

from lsrl.errors import LsrlError

HUGE = 10**400  # beyond float64


@pytest.fixture(autouse=True)
def in_a_scratch_folder(tmp_path, monkeypatch):
    """Fuzzed text is taken for relative paths (a model saved to "abc", a suite built in "1"): the suites
    run in a scratch folder, so that what an accepted call writes lands there and not in the checkout."""
    monkeypatch.chdir(tmp_path)
SECONDS_PER_CALL = 20  # a call still running after this is a hang


class Accepted:
    """The value a call returned, for the caller to check."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _masked() -> np.ma.MaskedArray:
    return np.ma.masked_array([[1.0, 2.0]], mask=[[True, False]])


# values of every kind a careless or hostile caller passes; functions so that mutable ones are fresh
ODD_VALUES: list[Callable[[], Any]] = [
    lambda: None, lambda: "", lambda: "abc", lambda: "1", lambda: b"1", lambda: math.nan, lambda: math.inf,
    lambda: -math.inf, lambda: -1, lambda: 0, lambda: -0.0, lambda: 0.5, lambda: HUGE, lambda: -HUGE,
    lambda: 1e308, lambda: 5e-324, lambda: True, lambda: False, lambda: 1 + 2j, lambda: Fraction(1, 3),
    lambda: Decimal("1.5"), lambda: Decimal("NaN"), lambda: np.float16(1.5), lambda: np.int8(-3),
    lambda: np.uint8(200), lambda: np.bool_(True), lambda: np.complex64(1j), lambda: np.float64("nan"),
    lambda: np.datetime64("2020-01-01"), lambda: np.timedelta64(1, "D"), lambda: np.array(3.0),
    lambda: np.array([]), lambda: np.zeros((0, 0)), lambda: np.array(["1", "2"]), lambda: np.array([1, 2], dtype=object),
    lambda: np.array([[None, 1.0]], dtype=object), _masked, lambda: torch.tensor(1.0), lambda: torch.tensor([[1.0, 2.0]]),
    lambda: torch.tensor([1], dtype=torch.int8), lambda: [], lambda: [1], lambda: [[1]], lambda: [[1, 2], [3]],
    lambda: [[None]], lambda: [["a"]], lambda: [[[1.0]]], lambda: (), lambda: {}, lambda: {1: 2}, lambda: {"x": None},
    lambda: set(), lambda: object(), lambda: range(3), lambda: slice(1), lambda: float, lambda: (lambda: 1),
    lambda: 2**63, lambda: -(2**63) - 1, lambda: 10**6,
]


def junk() -> st.SearchStrategy[Any]:
    """Any hostile value: the odd values above, and numbers and text hypothesis varies."""
    return st.one_of(
        st.sampled_from(ODD_VALUES).map(lambda make: make()),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=4),
    )


ODD_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8, np.bool_, object, np.complex128,
              "datetime64[D]", "timedelta64[s]", "<U3", "S3"]
EXTREME_FLOATS = st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 1e308, -1e308, 5e-324, math.nan, math.inf, -math.inf,
                                  65504.0, 1e5, 3.0])


@st.composite
def bad_sequence(draw: st.DrawFn, d: int, steps: int = 3) -> Any:
    """An input for a width-d program that is wrong or odd: a shape, dtype, container or value it should
    refuse, or an unusual but valid one (then the caller checks the answer)."""
    shape = draw(st.sampled_from([(), (0,), (steps,), (steps, d), (steps, d + 1), (steps, max(d - 1, 0)), (2, steps, d),
                                  (0, d), (2, 0, d), (1, 1, 1, d), (steps, d, 1), (d,)]))
    kind = draw(st.sampled_from(["numpy", "masked", "torch", "list", "ragged", "odd-entry"]))
    values = draw(st.lists(st.one_of(EXTREME_FLOATS, st.floats(-4, 4)), min_size=int(np.prod(shape)),
                           max_size=int(np.prod(shape))))
    array = np.array(values, dtype=np.float64).reshape(shape)
    if kind == "numpy":
        dtype = draw(st.sampled_from(ODD_DTYPES))
        with np.errstate(all="ignore"):
            return array.astype(dtype) if dtype not in ("<U3", "S3") else array.astype(str).astype(dtype)
    if kind == "masked":
        return np.ma.masked_array(array, mask=draw(st.booleans()))
    if kind == "torch":
        dtype = draw(st.sampled_from([torch.float64, torch.float32, torch.float16, torch.int64, torch.bool,
                                      torch.complex64]))
        return torch.tensor(array).to(dtype)
    if kind == "list":
        return array.tolist()
    if kind == "ragged":
        return [[1.0] * d, [1.0] * (d + 1)]
    odd = draw(st.sampled_from([None, "x", "1", [1.0], HUGE, Fraction(1, 3), 1 + 1j, np.datetime64("2020")]))
    rows = array.reshape(-1, d).tolist() if array.size and array.size % d == 0 else [[0.0] * d]
    rows[0][0] = odd
    return rows


class Hang(Exception):
    """A call still running after its deadline (not a ``TimeoutError``: that is an ``OSError``, which code
    that writes files may catch and report as a failed write)."""


@contextmanager
def deadline(seconds: int = SECONDS_PER_CALL):
    """Fail (instead of hanging the suite) if the block runs longer than ``seconds``."""
    def expired(*_):
        raise Hang(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def timed_example(name: str, arguments: dict) -> Any:
    """With ``LSRL_FUZZ_TIMES=file``, append one line per example to ``file``: its seconds (call and check),
    the boundary and the drawn arguments (shortened), to find what is slow; otherwise nothing."""
    log = os.environ.get("LSRL_FUZZ_TIMES")
    start = time.perf_counter()
    try:
        yield
    finally:
        if log:
            drawn = ", ".join(f"{key}={_short(value)}" for key, value in arguments.items())
            with open(log, "a") as file:
                file.write(f"{time.perf_counter() - start:8.3f}\t{name}\t{drawn}\n")


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as error:  # a hostile value's own repr may fail: say so instead
        text = f"<repr failed: {type(error).__name__}>"
    return text.replace("\n", " ")[:80]


def names_one_of(message: str, words: Iterable[str]) -> bool:
    """Whether ``message`` holds one of ``words`` as a word of its own (``A`` in "A has", not in "Array")."""
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", message) for word in words)


def user_error_or_answer(call: Callable[[], Any], words: Iterable[str]) -> Accepted | None:
    """Run ``call``: ``None`` if it raised an ``LsrlError`` with a one-line message naming one of ``words``
    (the argument); ``Accepted(result)`` if it returned. Anything else (another exception, a message on
    several lines or naming none of them, a hang) fails the test."""
    words = tuple(words)
    try:
        with deadline():
            result = call()
    except LsrlError as error:
        message = str(error)
        assert message and "\n" not in message, f"not one line: {message!r}"
        assert names_one_of(message, words), f"names none of {words}: {message!r}"
        return None
    return Accepted(result)


def finite_floats(result: Any) -> np.ndarray:
    """``result`` as float64, asserted free of NaN and inf."""
    values = np.asarray(result.detach().numpy() if isinstance(result, torch.Tensor) else result, dtype=np.float64)
    assert np.isfinite(values).all(), f"a non-finite output: {values}"
    return values
