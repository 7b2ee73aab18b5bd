"""The public Python boundary, fuzzed: every public callable is called with hostile values
(tests/fuzz_strategies.py) in one or two of its arguments, the others valid. Each call ends either in an
``LsrlError`` whose one-line message names the spoiled argument, or in an answer that is checked against
the exact interpreter (``prog(xs, exact=True)``) or an independent computation. Nothing else may escape.

``BOUNDARIES`` lists what is fuzzed and how; ``test_every_public_callable_is_fuzzed`` fails when a public
name appears that it does not cover. Time: the "ci" hypothesis profile (tests/conftest.py);
``HYPOTHESIS_PROFILE=deep`` fuzzes longer.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import lsrl
import lsrl.bench
import lsrl.llrnn as llrnn
from fuzz_strategies import (  # noqa: F401 (in_a_scratch_folder: autouse)
    bad_sequence, finite_floats, in_a_scratch_folder, junk, timed_example, user_error_or_answer,
)
from lsrl import automata, programs
from lsrl.llrnn import logic
from lsrl.llrnn.checks import LlrnnArgumentError
from lsrl.llrnn import tasks as llrnn_tasks
from lsrl.llrnn import train as llrnn_train
from lsrl.llrnn.explicit import Ring, rotation_moves

SMALL = st.floats(-3, 3, allow_nan=False).map(lambda v: round(v, 3))
XS = np.array([[0.5, -1.0], [2.0, 0.25], [-3.0, 1.5]])  # a valid (T, 2) sequence


def matrix(rows: int, cols: int) -> st.SearchStrategy:
    return st.lists(st.lists(SMALL, min_size=cols, max_size=cols), min_size=rows, max_size=rows)


def vector(n: int) -> st.SearchStrategy:
    return st.lists(SMALL, min_size=n, max_size=n)


def as_matrix(value: Any, rows: int, cols: int) -> np.ndarray:
    """An accepted matrix argument as float64 (rows, cols); a scalar as that multiple of the identity."""
    array = np.asarray(value, dtype=np.float64)
    return array * np.eye(rows, cols) if array.ndim == 0 else array.reshape(rows, cols)


def as_vector(value: Any, n: int) -> np.ndarray:
    return np.zeros(n) if value is None else np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)).copy()


def x_input() -> lsrl.Input:
    return lsrl.Input(2, name="x")


def close(got: Any, expected: Any, tolerance: float = 1e-9) -> None:
    got, expected = finite_floats(got), np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert np.allclose(got, expected, rtol=tolerance, atol=tolerance), (got, expected)


def exact_equal(got: Any, expected: Any) -> None:
    assert [[Fraction(str(v)) for v in row] for row in np.asarray(got, dtype=object)] == \
        [[Fraction(v) for v in row] for row in np.asarray(expected, dtype=object)], (got, expected)


@dataclass(frozen=True)
class Boundary:
    """One public callable as the fuzzer calls it.

    ``call(**arguments)``; ``valid``: per argument, values it accepts; ``check(result, arguments)``: asserts
    an accepted call's answer is right; ``words``: besides the argument's own name, words an error about it
    may use to name it (the node it builds, the option it is passed as); ``odd``: argument-specific hostile
    values, besides ``junk()``."""

    name: str
    call: Callable[..., Any]
    valid: dict[str, st.SearchStrategy]
    check: Callable[[Any, dict], None]
    words: dict[str, tuple[str, ...]] = field(default_factory=dict)
    odd: dict[str, st.SearchStrategy] = field(default_factory=dict)
    fixed: tuple[str, ...] = ()  # arguments of the fuzzer's own (which operation, which task), never spoiled
    prepare: Callable[[], Any] | None = None  # run before the timed call: a slow first import, not a hang
    # the drawn arguments that start work long by design (documented, with a progress bar), and its reason:
    # not run here (it is no hang); a test of its own checks what the reason claims
    long: Callable[[dict], str | None] = lambda arguments: None


# ---------------------------------------------------------------- the language: nodes and programs


def _beyond_float64(node: lsrl.Node) -> bool:
    """Whether a weight of ``node`` (a Linear) has no float64 form (``to_numpy`` refuses it)."""
    try:
        node.A.to_numpy(), node.b.to_numpy()
    except lsrl.BackendError:
        return True
    return False


def check_linear(node: lsrl.Linear, args: dict) -> None:
    try:
        A, b = as_matrix(args["A"], node.dim, 2), as_vector(args["b"], node.dim)
    except OverflowError:  # a weight beyond float64: the exact backend holds it, a float run refuses it
        with pytest.raises(lsrl.BackendError):
            lsrl.ForEach(node)(XS)
        return
    close(lsrl.ForEach(node)(XS), XS @ A.T + b)


def check_state(node: lsrl.Node, args: dict, relu: bool) -> None:
    try:
        A, B = as_matrix(args["A"], node.dim, node.dim), as_matrix(args["B"], node.dim, 2)
        b, state = as_vector(args["b"], node.dim), as_vector(args["init_state"], node.dim)
    except OverflowError:  # a weight beyond float64: the exact backend holds it, a float run refuses it
        with pytest.raises(lsrl.BackendError):
            lsrl.ForEach(node)(XS)
        return
    expected = []
    for x in XS:
        state = A @ state + B @ x + b
        state = np.maximum(state, 0) if relu else state
        expected.append(state)
    if not np.isfinite(expected).all():  # the exact value leaves float64's range: a float run refuses it
        with pytest.raises(lsrl.BackendError, match="leaves float64's range"):
            lsrl.ForEach(node)(XS)
        return
    close(lsrl.ForEach(node)(XS), expected, 1e-7)


def check_input(node: lsrl.Input, args: dict) -> None:
    assert node.dim == args["dim"] and isinstance(node.dim, int)
    xs = np.zeros((2, node.dim))
    close(lsrl.ForEach(node)(xs), xs)


def check_concat(node: lsrl.Concat, args: dict) -> None:
    close(lsrl.ForEach(node)(XS), np.concatenate([XS] * len(args["xs"]), axis=1))


def check_program(prog: lsrl.ForEach, args: dict) -> None:
    assert isinstance(prog, lsrl.ForEach) and prog.output is args["output"]


def check_run(result: Any, args: dict) -> None:
    """``prog(xs)`` of ``PROGRAM`` (a running sum of x0 - x1, and relu(x0)) against numpy."""
    xs = np.asarray(args["xs"], dtype=np.float64)
    difference = xs[..., :1] - xs[..., 1:]
    expected = np.concatenate([np.cumsum(difference, axis=-2), np.maximum(xs[..., :1], 0)], axis=-1)
    close(result, expected)


def _program() -> lsrl.ForEach:
    x = lsrl.Input(2, name="x", bounds=(-4, 4))
    total = lsrl.LinState(x[0:1] - x[1:2], [[1]], [[1]], name="total")
    return lsrl.ForEach(lsrl.Concat([total, lsrl.ReLU(x[0:1], name="positive")]), name="sums")


PROGRAM = _program()
SEQUENCES = st.integers(1, 4).flatmap(lambda T: st.lists(vector(2), min_size=T, max_size=T))
SEQUENCES3 = st.lists(vector(2), min_size=3, max_size=3)
PATCHES3 = st.one_of(st.none(), st.fixed_dictionaries({"total": st.lists(vector(1), min_size=3, max_size=3)}))
PATCH_KEYS = st.one_of(junk().filter(lambda key: isinstance(key, Hashable)), st.sampled_from(["total", "positive", "x"]))
HOSTILE_PATCHES = st.one_of(st.dictionaries(PATCH_KEYS, junk(),
                                            max_size=2),
                            st.fixed_dictionaries({"total": bad_sequence(1)}))
NODE_OPERATIONS = {
    "getitem": lambda x, operand: x[operand], "add": lambda x, operand: x + operand,
    "rsub": lambda x, operand: operand - x, "mul": lambda x, operand: x * operand,
    "rmul": lambda x, operand: operand * x, "div": lambda x, operand: x / operand,
}


def operate(operation: str, operand: Any) -> lsrl.Node:
    return NODE_OPERATIONS[operation](x_input(), operand)


def check_operation(node: lsrl.Node, args: dict) -> None:
    operand = args["operand"]
    if _beyond_float64(node):  # exact weights a float run refuses
        with pytest.raises(lsrl.BackendError):
            lsrl.ForEach(node)(XS)
        return
    if args["operation"] == "getitem":
        expected = XS[:, operand]
    else:
        try:
            number = np.asarray(operand, dtype=np.float64)
        except OverflowError:  # an int beyond float64, exact in the node: as float, an infinity
            number = np.float64(np.inf if operand > 0 else -np.inf)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            expected = NODE_OPERATIONS[args["operation"]](XS, number)
    if not np.isfinite(expected).all():  # the exact value leaves float64's range: a float run refuses it
        with pytest.raises(lsrl.BackendError, match="leaves float64's range"):
            lsrl.ForEach(node)(XS)
        return
    close(lsrl.ForEach(node)(XS), expected.reshape(len(XS), -1))


def check_bounds_sound(bounds: Any, args: dict) -> None:
    """The bounds hold on every prefix of sequences no longer than max_length with inputs inside the
    declared bounds (corners and random points)."""
    prog = lsrl.ForEach(args["node"])
    length = min(args["max_length"] or 6, 6)
    rng = np.random.default_rng(0)
    xs = rng.uniform(-4, 4, size=(8, length, 2))
    xs[0], xs[1] = 4, -4
    out = prog(xs, exact=True)
    low, high = bounds
    for unit, (lo, hi) in enumerate(zip(low, high)):
        values = [Fraction(str(v)) for v in out[..., unit].ravel()]
        assert all(lo <= v <= hi for v in values), (unit, lo, hi)


# a state's weights fix its width together: a wrong A shows as a B that does not fit, and so on
STATE_WEIGHTS = ("A", "B", "b", "init_state")
LANGUAGE = [
    Boundary("lsrl.Input", lsrl.Input, {"dim": st.integers(1, 4), "name": st.sampled_from([None, "x"]),
                                        "bounds": st.sampled_from([None, (-1, 1), (0, 5)]), "integer": st.booleans()},
             check_input, words={"dim": ("Input",)}),
    Boundary("lsrl.Linear", lambda A, b, name: lsrl.Linear(x_input(), A, b, name=name),
             {"A": matrix(3, 2), "b": st.one_of(st.none(), vector(3)), "name": st.sampled_from([None, "h"])},
             check_linear, words={"A": ("b", "Linear"), "b": ("Linear",)},  # A fixes the width b must have
             odd={"A": bad_sequence(2), "b": bad_sequence(3)}),
    Boundary("lsrl.LinState",
             lambda A, B, b, init_state: lsrl.LinState(x_input(), A, B, b, init_state),
             {"A": matrix(2, 2), "B": matrix(2, 2), "b": st.one_of(st.none(), vector(2)),
              "init_state": st.one_of(st.none(), vector(2))},
             functools.partial(check_state, relu=False), words=dict.fromkeys(STATE_WEIGHTS, STATE_WEIGHTS),
             odd={"A": bad_sequence(2), "B": bad_sequence(2)}),
    Boundary("lsrl.ReLUState",
             lambda A, B, b, init_state: lsrl.ReLUState(x_input(), A, B, b, init_state),
             {"A": matrix(2, 2), "B": matrix(2, 2), "b": st.one_of(st.none(), vector(2)),
              "init_state": st.one_of(st.none(), vector(2))},
             functools.partial(check_state, relu=True), words=dict.fromkeys(STATE_WEIGHTS, STATE_WEIGHTS),
             odd={"A": bad_sequence(2), "B": bad_sequence(2)}),
    Boundary("lsrl.ReLU", lambda x: lsrl.ReLU(x), {"x": st.just(PROGRAM.input)},
             lambda node, args: close(lsrl.ForEach(node)(XS), np.maximum(XS, 0)), words={"x": ("ReLU",)}),
    Boundary("lsrl.Multi", lambda x: lsrl.Multi(x), {"x": st.just(PROGRAM.input)},
             lambda node, args: close(lsrl.ForEach(node)(XS), XS[:, :1] * XS[:, 1:]), words={"x": ("Multi",)}),
    Boundary("lsrl.Concat", lambda xs, name: lsrl.Concat(xs, name=name),
             {"xs": st.integers(1, 3).map(lambda n: [PROGRAM.input] * n), "name": st.sampled_from([None, "c"])},
             check_concat, words={"xs": ("Concat",)}),
    Boundary("lsrl.Node", operate,
             {"operation": st.sampled_from(sorted(NODE_OPERATIONS)), "operand": st.sampled_from([0, 1, 2.5, -1])},
             check_operation, fixed=("operation",), words={"operand": ("index", "key", "slice", "operand", "scalar", "divisor", "factor",
                                                 "constant", "number", "Linear", "x")}),
    Boundary("lsrl.ForEach", lambda output, name: lsrl.ForEach(output, name=name),
             {"output": st.just(PROGRAM.output), "name": st.sampled_from(["program", "p"])}, check_program),
    Boundary("lsrl.ForEach.__call__", lambda xs, exact: PROGRAM(xs, exact=exact),
             {"xs": SEQUENCES, "exact": st.booleans()}, check_run,
             words={"xs": ("input", "sequence", "x", "sums"), "exact": ("sums",)}, odd={"xs": bad_sequence(2)}),
    Boundary("lsrl.ForEach.__call__(patch=)", lambda xs, patch: PROGRAM(xs, patch=patch),
             {"xs": SEQUENCES3, "patch": PATCHES3}, lambda result, args: close(result, reference(args["xs"], args["patch"])),
             words={"xs": ("input", "sequence", "x", "sums"), "patch": ("patch", "total", "positive", "x")},
             odd={"patch": HOSTILE_PATCHES}),
    Boundary("lsrl.value_bounds", lsrl.value_bounds,
             {"node": st.just(PROGRAM.output), "max_length": st.one_of(st.none(), st.integers(1, 10**30))},
             check_bounds_sound),
]

# ---------------------------------------------------------------- sugar


def bit_input() -> lsrl.Input:
    return lsrl.Input(1, name="b", bounds=(0, 1), integer=True)


def one_input() -> lsrl.Input:
    return lsrl.Input(1, name="v", bounds=(-8, 8))


def outputs(node: lsrl.Node, column: list) -> list:
    return [row[0] for row in lsrl.ForEach(node)(np.array(column, dtype=object).reshape(-1, 1), exact=True)]


def as_fraction(value: Any) -> Fraction:
    """An accepted number (an int, Fraction, float, Decimal, numpy or 0-d torch scalar) exactly as a Fraction."""
    return Fraction(value.item() if hasattr(value, "item") else value)  # numpy's uint8 arithmetic would wrap


def check_step(node: lsrl.Node, args: dict) -> None:
    """0 at and below 0, 1 from 1/mu on (the edge between is left out), at points within the declared bounds."""
    edge = 1 / as_fraction(args["mu"])
    points = [(v, int(v > 0)) for v in (Fraction(-1), Fraction(0), 2 * edge, Fraction(5))
              if -8 <= v <= 8 and not 0 < v < edge]
    assert outputs(node, [v for v, _ in points]) == [step for _, step in points], points


def check_constant(node: lsrl.Node, args: dict) -> None:
    try:
        value = np.ravel(np.asarray(args["value"], dtype=np.float64))
    except OverflowError:  # beyond float64: the exact backend holds it, a float run refuses it
        with pytest.raises(lsrl.BackendError):
            lsrl.ForEach(node)(np.zeros((2, 1)))
        return
    close(lsrl.ForEach(node)(np.zeros((2, 1))), [value] * 2)


def check_bump(node: lsrl.Node, args: dict) -> None:
    mu, lb, ub = (as_fraction(args[key]) for key in ("mu", "lb", "ub"))
    inside = [(lb + ub) / 2] if ub - lb > 4 / mu and -8 <= (lb + ub) / 2 <= 8 else []
    outside = [v for v in (lb - 1, ub + 1 / mu + 1) if -8 <= v <= 8]  # each edge is 1/mu wide
    got = outputs(node, inside + outside)
    assert got == [1] * len(inside) + [0] * len(outside), (got, inside, outside)


def check_compare(node: lsrl.Node, args: dict, larger: bool) -> None:
    y, width = Fraction(str(args["y"])), 1 / Fraction(str(args["mu"]))  # the step's edge
    points = [v for v in (y - width - 1, y + width + 1) if -8 <= v <= 8]
    expected = [int((v > y) == larger) for v in points]
    assert outputs(node, points) == expected


def check_eq(node: lsrl.Node, args: dict) -> None:
    y, tolerance = Fraction(str(args["y"])), Fraction(str(args["tolerance"]))
    if not -8 <= y <= 8:  # no input within the declared bounds equals y
        return
    points = [v for v in (y, y + 2 * tolerance + 1, y - 2 * tolerance - 1) if -8 <= v <= 8]
    assert outputs(node, points) == [1] + [0] * (len(points) - 1)


def check_ifelse(node: lsrl.Node, args: dict) -> None:
    xs = np.array([[1, 3, -2], [0, 3, -2], [1, -4, 5], [0, -4, 5]], dtype=object)
    got = [row[0] for row in lsrl.ForEach(node)(xs, exact=True)]
    assert got == [3, -2, -4, 5], got


def ifelse(variant: str, lambda_: Any, mu: Any) -> lsrl.Node:
    inputs = lsrl.Input(3, name="ctf", bounds=(-5, 5))
    cond = lsrl.ReLU(inputs[0:1], name="cond")  # 0 or 1 on the checked rows
    return lsrl.f_ifelse(cond, inputs[1:2], inputs[2:3], variant=variant, lambda_=lambda_, mu=mu)


def check_counter(node: lsrl.Node, args: dict) -> None:
    got = outputs(node, [0] * 7)
    assert got == [t % args["divisor"] for t in range(7)], got


def check_logic(node: lsrl.Node, args: dict, table: Callable[[int, int], int]) -> None:
    pairs = [(0, 0), (0, 1), (1, 0), (1, 1)]
    got = [row[0] for row in lsrl.ForEach(node)(np.array(pairs, dtype=object), exact=True)]
    assert got == [table(a, b) for a, b in pairs], got


def two_bits() -> tuple[lsrl.Node, lsrl.Node]:
    bits = lsrl.Input(2, name="bits", bounds=(0, 1), integer=True)
    return bits[0:1], bits[1:2]


MUS = st.sampled_from([1, 10, 1000, 0.5, 10**6])
LOGIC_MUS = st.sampled_from([1, 10, 1000, 10**6])  # f_and and f_or read 0 / 1 operands: mu >= 1
SUGAR = [
    Boundary("lsrl.f_constant", lambda value: lsrl.f_constant(one_input(), value), {"value": vector(2)},
             check_constant),
    Boundary("lsrl.f_step", lambda mu, saturating: lsrl.f_step(one_input(), mu=mu, saturating=saturating),
             {"mu": MUS, "saturating": st.booleans()}, check_step),
    Boundary("lsrl.f_bump", lambda lb, ub, mu: lsrl.f_bump(one_input(), lb, ub, mu=mu),
             {"lb": st.sampled_from([-2, 0, 1.5]), "ub": st.sampled_from([3, 4.5]), "mu": MUS}, check_bump),
    Boundary("lsrl.f_not", lambda x: lsrl.f_not(x), {"x": st.just(bit_input())},
             lambda node, args: close(outputs(node, [0, 1]), [1, 0]), words={"x": ("f_not",)}),
    Boundary("lsrl.f_and", lambda mu: lsrl.f_and(*two_bits(), mu=mu), {"mu": LOGIC_MUS},
             functools.partial(check_logic, table=lambda a, b: a & b)),
    Boundary("lsrl.f_or", lambda mu: lsrl.f_or(*two_bits(), mu=mu), {"mu": LOGIC_MUS},
             functools.partial(check_logic, table=lambda a, b: a | b)),
    Boundary("lsrl.f_larger", lambda y, mu: lsrl.f_larger(one_input(), y, mu=mu),
             {"y": st.sampled_from([0, 1.5, -2]), "mu": MUS}, functools.partial(check_compare, larger=True)),
    Boundary("lsrl.f_smaller", lambda y, mu: lsrl.f_smaller(one_input(), y, mu=mu),
             {"y": st.sampled_from([0, 1.5, -2]), "mu": MUS}, functools.partial(check_compare, larger=False)),
    Boundary("lsrl.f_eq", lambda y, tolerance, mu: lsrl.f_eq(one_input(), y, tolerance=tolerance, mu=mu),
             {"y": st.sampled_from([0, 2, -3]), "tolerance": st.sampled_from([0.5, 0.25]),
              "mu": st.sampled_from([10, 1000])}, check_eq, words={"mu": ("tolerance",), "tolerance": ("mu",)}),
    Boundary("lsrl.f_ifelse", ifelse,
             {"variant": st.sampled_from(lsrl.IFELSE_VARIANTS), "lambda_": st.sampled_from([10**10, 100, "auto"]),
              "mu": st.sampled_from([2, 1000])},  # the step variants need mu >= 2
             check_ifelse),
    Boundary("lsrl.f_modulo_counter",
             lambda divisor, method, mu: lsrl.f_modulo_counter(one_input(), divisor, method=method, mu=mu),
             {"divisor": st.integers(1, 5), "method": st.sampled_from(["permutation", "rotation"]),
              "mu": st.sampled_from([1000])}, check_counter),
    Boundary("lsrl.f_relu_identity", lambda x: lsrl.f_relu_identity(x), {"x": st.just(one_input())},
             lambda node, args: close(outputs(node, [-2, 3]), [-2, 3]), words={"x": ("f_relu_identity",)}),
]

# ---------------------------------------------------------------- compile, the compiled model, the targets


@functools.cache
def compiled(backend: str = "exact") -> lsrl.CompiledProgram:
    return lsrl.compile(PROGRAM, backend=backend, progress=False)


def reference(xs: Any, patch: dict | None = None) -> np.ndarray:
    """The exact interpreter's answer on ``xs`` (read as float64, as the runners read it)."""
    return PROGRAM(np.asarray(xs, dtype=np.float64), exact=True, patch=patch)


def check_compiled(model: lsrl.CompiledProgram, args: dict) -> None:
    xs = np.asarray(XS)
    if model.backend == "exact":
        exact_equal(model(xs, exact=True), reference(xs))
    close(model(xs), reference(xs))


def check_model_call(result: Any, args: dict) -> None:
    expected = reference(args["xs"], args.get("patch"))
    close(result, expected)
    if args.get("exact"):
        exact_equal(np.asarray(result).reshape(-1, expected.shape[-1]), expected.reshape(-1, expected.shape[-1]))


def check_trace(result: Any, args: dict) -> None:
    check_model_call(result[-1], args)


MODEL_WORDS = {"xs": ("input", "sequence", "x", "sums"), "patch": ("patch", "total", "positive", "x")}

ARCHITECTURES = lsrl.targets.ARCHITECTURES
TARGET_OPTIONS = {  # valid values of each option a target takes (lsrl.targets.OPTIONS)
    "gate_bound": st.sampled_from([10.0**3, 10.0**6]), "max_len": st.integers(4, 8),
    "construction": st.sampled_from(["diagonal"]), "window": st.integers(1, 4), "heads": st.sampled_from([1]),
    "dtype": st.sampled_from([torch.float32, torch.float64]), "amplitude": st.sampled_from([None, 2.0**-6]),
    "gate_amplitude": st.sampled_from([None, 2.0**-8]), "gain": st.sampled_from([1.0, 2.0]),
    "runtime": st.sampled_from(["torch"]),  # "onnxruntime" needs float32 (tests/test_targets_stock_rnn.py)
}
STOCK = ("stock_lstm", "stock_gru")  # they need max_len, state their own tolerance and take no patch=
STOCK_OPTIONS = {"max_len": 8, "dtype": torch.float64}
assert set(TARGET_OPTIONS) == {option for options in lsrl.targets.OPTIONS.values() for option in options}, \
    "a target option the fuzzer does not know: add its valid values to TARGET_OPTIONS"


@functools.cache
def network(arch: str) -> torch.nn.Module:
    return compiled().to_torch(arch, **(STOCK_OPTIONS if arch in STOCK else {}))


def torch_input(xs: Any) -> Any:
    """A valid sequence (a list of T rows of d floats) as the (1, T, d) float64 tensor a target takes;
    anything else as it is."""
    try:
        return torch.tensor(xs, dtype=torch.float64)[None] if isinstance(xs, list) else xs
    except (TypeError, ValueError, RuntimeError, OverflowError):  # ragged, text, beyond float64: to refuse
        return xs


def check_network(result: Any, args: dict) -> None:
    xs = torch.as_tensor(args["xs"]).double() if isinstance(args["xs"], torch.Tensor) else torch_input(args["xs"])
    expected = reference(xs.numpy(), args.get("patch"))
    output = result[0] if isinstance(result, tuple) else result
    close(output.detach().numpy(), expected, 1e-6)


def check_target(module: torch.nn.Module, args: dict) -> None:
    xs = torch.tensor(XS, dtype=args.get("dtype", torch.float64))[None]
    with torch.no_grad():
        output = module(xs).double().numpy()
    if isinstance(module.tolerance, float):  # a stock target: its proved bound for these lengths and inputs
        assert np.abs(output - reference(XS[None])).max() <= module.tolerance
    else:
        close(output, reference(XS[None]), 1e-6)


def target_boundary(arch: str) -> list[Boundary]:
    options = {option: TARGET_OPTIONS[option] for option in lsrl.targets.OPTIONS.get(arch, ())}
    words = {"xs": ("input", "x", arch, "sequence", "batch"), "patch": ("patch", "total", "positive", "x", arch)}
    return [
        Boundary(f"to_torch[{arch}]", lambda **kwargs: compiled().to_torch(arch, **kwargs), options, check_target,
                 words={option: (arch, "to_torch") for option in options}),
        Boundary(f"net[{arch}]", lambda xs: network(arch)(torch_input(xs)), {"xs": SEQUENCES},
                 check_network, words=words, odd={"xs": bad_sequence(2)}),
    ] + ([] if arch in STOCK else [
        Boundary(f"net[{arch}](patch=)", lambda xs, patch: network(arch)(torch_input(xs), patch=patch),
                 {"xs": SEQUENCES3, "patch": PATCHES3}, check_network, words=words, odd={"patch": HOSTILE_PATCHES}),
        Boundary(f"run_with_cache[{arch}]", lambda xs, patch: network(arch).run_with_cache(torch_input(xs), patch=patch),
                 {"xs": SEQUENCES3, "patch": PATCHES3}, check_network, words=words,
                 odd={"xs": bad_sequence(2), "patch": HOSTILE_PATCHES}),
    ])


def export(module: Any, path: Any, arch: Any, dtype: Any, allow_inexact: Any) -> Any:
    from lsrl.targets.onnx_export import export_onnx

    return export_onnx(module, path, arch, dtype, allow_inexact)


def check_export(path: Any, args: dict) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path))
    dtype = np.float32 if args["dtype"] == "float32" else np.float64
    feed = {session.get_inputs()[0].name: XS[None].astype(dtype)}
    close(session.run(None, feed)[0], reference(XS[None]), 1e-4)


def fresh_path(name: str) -> str:
    """A path ``name`` in a new temporary folder."""
    import tempfile

    return f"{tempfile.mkdtemp(prefix='lsrl-fuzz-')}/{name}"


def tmp_file(name: str) -> st.SearchStrategy:
    return st.builds(functools.partial(fresh_path, name))


MODEL = [
    Boundary("lsrl.compile", lambda program, backend, progress: lsrl.compile(program, backend=backend,
                                                                              progress=progress),
             {"program": st.just(PROGRAM), "backend": st.sampled_from(["exact", "float"]), "progress": st.just(False)},
             check_compiled),
    Boundary("lsrl.CompiledProgram.__call__", lambda xs: compiled()(xs), {"xs": SEQUENCES}, check_model_call,
             words=MODEL_WORDS, odd={"xs": bad_sequence(2)}),
    Boundary("lsrl.CompiledProgram.__call__(patch=)", lambda xs, patch: compiled()(xs, patch=patch),
             {"xs": SEQUENCES3, "patch": PATCHES3}, check_model_call, words=MODEL_WORDS, odd={"patch": HOSTILE_PATCHES}),
    Boundary("lsrl.CompiledProgram.__call__(exact=)", lambda xs, exact: compiled()(xs, exact=exact),
             {"xs": st.just(XS.tolist()), "exact": st.booleans()}, check_model_call, words={"exact": ("exact",)}, fixed=("xs",)),
    Boundary("lsrl.CompiledProgram.trace", lambda xs, patch: compiled("float").trace(xs, patch=patch),
             {"xs": SEQUENCES3, "patch": PATCHES3}, check_trace, words=MODEL_WORDS,
             odd={"xs": bad_sequence(2), "patch": HOSTILE_PATCHES}),
    Boundary("lsrl.CompiledProgram.save", lambda path: compiled().save(path), {"path": tmp_file("model")},
             lambda path, args: check_compiled(lsrl.load(path), args), words={"path": ("path",)}),
    Boundary("lsrl.load", lsrl.load, {"path": st.builds(lambda: compiled().save(fresh_path("m")))},
             lambda model, args: check_compiled(model, args), words={"path": ("path", "model")}),
    Boundary("lsrl.targets.to_torch", lambda arch: lsrl.targets.to_torch(compiled(), arch),
             {"arch": st.sampled_from(["linear_rnn", "rnn"])}, check_target, words={"arch": ("arch", "architecture")}),
    Boundary("lsrl.targets.layer_report", lsrl.targets.layer_report,
             {"module": st.sampled_from(["rnn", "gru"]).map(network)},
             lambda rows, args: [row["nonzeros"] for row in rows] and None, words={"module": ("layer_report",)}),
    Boundary("lsrl.targets.inspect", lambda model, archs, max_len: lsrl.targets.inspect(model, archs, max_len),
             {"model": st.builds(compiled), "archs": st.just(("rnn",)), "max_len": st.one_of(st.none(), st.integers(1, 5))},
             lambda text, args: None if "rnn:" in text else pytest.fail(text), words={"archs": ("arch", "architecture")}),
    Boundary("export_onnx", export,
             {"module": st.builds(network, st.just("rnn")), "path": tmp_file("m.onnx"), "arch": st.just("rnn"),
              "dtype": st.sampled_from(["float32", "float64"]), "allow_inexact": st.booleans()},
             check_export, words={"module": ("export_onnx",), "arch": ("architecture",)}),
    *[boundary for arch in ARCHITECTURES for boundary in target_boundary(arch)],
]

# ---------------------------------------------------------------- the stock transformers models (lsrl.hf)

HF_ARCH = "mamba"  # the one whose model the I/O functions are fuzzed on (they read only config.lsrl_io)


@functools.cache
def hf_network(arch: str = HF_ARCH) -> Any:
    return compiled().to_hf(arch, max_len=8, dtype=torch.float64)


def hf_answer(hf_model: Any, xs: Any) -> np.ndarray:
    with torch.no_grad():
        return lsrl.hf.outputs(hf_model, hf_model(**lsrl.hf.inputs(hf_model, xs))).double().numpy()


def check_hf_model(hf_model: Any, args: dict) -> None:
    xs = XS[:hf_model.config.lsrl_io["max_len"]]  # a hostile but valid max_len may be shorter than XS
    assert np.abs(hf_answer(hf_model, xs) - reference(xs[None])).max() <= hf_model.config.lsrl_io["tolerance"]


def check_hf_inputs(kwargs: dict, args: dict) -> None:
    net = hf_network()
    with torch.no_grad():
        answer = lsrl.hf.outputs(net, net(**kwargs)).double().numpy()
    assert np.abs(answer - reference(np.asarray(args["xs"], dtype=np.float64))).max() <= net.config.lsrl_io["tolerance"]


def check_hf_outputs(outputs: torch.Tensor, args: dict) -> None:
    assert np.abs(outputs.double().numpy() - reference(XS[None])).max() <= hf_network().config.lsrl_io["tolerance"]


def check_hf_save(folder: Any, args: dict) -> None:
    from transformers import AutoModelForCausalLM

    assert np.array_equal(hf_answer(AutoModelForCausalLM.from_pretrained(folder), XS), hf_answer(hf_network(), XS))


def hf_forward() -> Any:
    with torch.no_grad():
        return hf_network()(**lsrl.hf.inputs(hf_network(), XS))


HF_WORDS = {"hf_model": ("lsrl_io", "to_hf"), "xs": ("xs",), "result": ("result",), "path": ("path",)}
HF = [
    *[Boundary(f"to_hf[{arch}]", lambda max_len, dtype, arch=arch: compiled().to_hf(arch, max_len=max_len, dtype=dtype),
               {"max_len": st.integers(3, 8), "dtype": st.sampled_from([None, torch.float32, torch.float64, "float64"])},
               check_hf_model, words={"max_len": ("max_len",), "dtype": ("dtype",)}, prepare=hf_network)
      for arch in lsrl.hf.ARCHITECTURES],
    Boundary("lsrl.hf.inputs", lambda hf_model, xs: lsrl.hf.inputs(hf_model, xs),
             {"hf_model": st.builds(hf_network), "xs": SEQUENCES}, check_hf_inputs, words=HF_WORDS,
             odd={"xs": bad_sequence(2)}),
    Boundary("lsrl.hf.outputs", lambda hf_model, result: lsrl.hf.outputs(hf_model, result),
             {"hf_model": st.builds(hf_network), "result": st.builds(hf_forward)}, check_hf_outputs, words=HF_WORDS),
    Boundary("lsrl.hf.model_card", lambda hf_model: lsrl.hf.model_card(hf_model), {"hf_model": st.builds(hf_network)},
             lambda card, args: None if "sums" in card else pytest.fail(card), words=HF_WORDS),
    Boundary("lsrl.hf.save", lambda hf_model, path: lsrl.hf.save(hf_model, path),
             {"hf_model": st.builds(hf_network), "path": tmp_file("hf")}, check_hf_save, words=HF_WORDS),
    Boundary("lsrl.hf.load", lambda path: lsrl.hf.load(path),
             {"path": st.builds(lambda: lsrl.hf.save(hf_network(), fresh_path("hf")))},
             lambda loaded, args: None if np.array_equal(hf_answer(loaded, XS), hf_answer(hf_network(), XS))
             else pytest.fail("lsrl.hf.load answers otherwise than the saved model"), words=HF_WORDS),
]

# ---------------------------------------------------------------- the program library (Listings 1 and 2)


def check_continuous(prog: lsrl.ForEach, args: dict) -> None:
    d_in, d_out = args["d_in"], args["d_out"]
    assert prog.input.dim == 1 + d_in + d_out and prog.output.dim == d_out
    if (d_in, d_out) == (1, 1):  # the answer is f at the centre of the query's cell
        prompt = programs.continuous_prompt(lambda x: [3 * x[0]], 1, 1, 2, exact=True)
        xs = np.vstack([programs.continuous_query([Fraction(1, 10)], 1), prompt])
        assert Fraction(str(prog(xs, exact=True)[-1][0])) == Fraction(repr(0.75))


def check_discrete(prog: lsrl.ForEach, args: dict) -> None:
    n = args["n"]
    mapping = {tuple([1] * n): tuple([2] * n), tuple([3] * n): tuple([4] * n)}
    xs = programs.discrete_prompt(mapping, query=tuple([3] * n))
    assert [Fraction(str(v)) for v in prog(xs, exact=True)[-n:, 0]] == [4] * n


def check_prompt(prompt: np.ndarray, args: dict) -> None:
    d_in, d_out, cells = args["d_in"], args["d_out"], args["cells_per_dim"]
    assert prompt.shape == (cells**d_in, 1 + d_in + d_out)
    finite_floats(prompt.astype(np.float64))


def check_discrete_tokens(tokens: np.ndarray, args: dict) -> None:
    flat = [int(v) for v in np.asarray(tokens).ravel()]
    expected = list(args["query"] or ()) + [t for key, value in args["mapping"].items() for t in (*key, *value)]
    assert flat == expected, (flat, expected)


def check_prompt_check(result: None, args: dict) -> None:
    """An accepted prompt really is n query tokens and key / value pairs of integer tokens, the query a key."""
    tokens = [Fraction(str(v)) for v in np.asarray(args["prompts"], dtype=object).ravel()]
    n = args["n"]
    assert all(t.denominator == 1 and t >= 0 for t in tokens) and len(tokens) % (2 * n) == n
    keys = [tuple(tokens[i:i + n]) for i in range(n, len(tokens), 2 * n)]
    assert tuple(tokens[:n]) in keys and len(set(keys)) == len(keys)


def check_more_ones(prog: lsrl.ForEach, args: dict) -> None:
    bits = np.array([[1], [0], [0], [1], [1]])
    counts = np.cumsum(np.where(bits[:, 0] == 1, 1, -1))
    close(np.asarray(prog(bits)).ravel(), (counts > 0).astype(float))


def check_parity(prog: lsrl.ForEach, args: dict) -> None:
    bits = np.array([[1], [0], [1], [1]])
    close(np.asarray(prog(bits)).ravel(), np.cumsum(bits[:, 0]) % 2)


def check_reset(prog: lsrl.ForEach, args: dict) -> None:
    if abs(as_fraction(args["threshold"])) > 1e308:  # exact weights with no float64 form: a float run refuses them
        with pytest.raises(lsrl.BackendError):
            prog(np.ones((2, 1)))
        return
    increments, total, expected = [1, 2, 3, 0, 4], 0, []
    for x in increments:
        total += x
        total = 0 if total > args["threshold"] else total
        expected.append(total)
    close(np.asarray(prog(np.array(increments)[:, None])).ravel(), expected)


def check_squaring(prog: lsrl.ForEach, args: dict) -> None:
    values, state, expected = sorted(set(args["values"])), 0, []
    for bit in (1, 1, 0, 1):
        state = (state + 1) ** 2 if bit else 0
        expected.append(state)
    if all(v in values for v in expected):  # the declared set holds every state
        close(np.asarray(prog(np.array([[1], [1], [0], [1]]))).ravel(), expected)


def check_feature_state(node: lsrl.Node, args: dict) -> None:
    w, c = np.array(args["readout"], float), np.array(args["reads_value"], float)
    B, b = np.array(args["B"], float), np.array(args["b"], float)
    s, expected = 0.0, []
    for x in XS:
        h = np.maximum(c * s + B @ x + b, 0)
        s = float(w @ h)
        expected.append([s])
    close(lsrl.ForEach(node)(XS), expected, 1e-7)


PROGRAMS = [
    Boundary("lsrl.programs.continuous_approximator", programs.continuous_approximator,
             {"d_in": st.integers(1, 2), "d_out": st.integers(1, 2), "ifelse": st.sampled_from(lsrl.IFELSE_VARIANTS),
              # lambda_="auto" is no valid value: f_ifelse refuses it on the unbounded f values (one line, naming it)
              "mu": st.just(1000), "lambda_": st.just(10**10), "robust": st.just(False)},
             check_continuous, words={"robust": ("value_bound",)}),
    Boundary("lsrl.programs.discrete_approximator", programs.discrete_approximator,
             {"n": st.integers(1, 2), "ifelse": st.sampled_from(lsrl.IFELSE_VARIANTS),
              # lambda_="auto" is no valid value without a vocabulary: the token Input is unbounded (refused, naming it)
              "counter": st.just("permutation"), "mu": st.just(1000), "lambda_": st.just(10**10),
              "robust": st.just(False)}, check_discrete, words={"robust": ("vocabulary",)}),
    Boundary("lsrl.programs.continuous_prompt", programs.continuous_prompt,
             {"f": st.just(lambda x: [float(x.sum())]), "d_in": st.integers(1, 2), "d_out": st.just(1),
              "cells_per_dim": st.integers(1, 3), "exact": st.booleans()}, check_prompt,
             odd={"f": st.sampled_from([lambda x: [np.nan], lambda x: "a", lambda x: [1, 2], lambda x: None])}),
    Boundary("lsrl.programs.continuous_query", programs.continuous_query,
             {"q": vector(2), "d_out": st.integers(1, 2)},
             lambda query, args: close(query.astype(float),  # a scalar q is a query of one component
                                       [[*np.asarray(args["q"], dtype=float).reshape(-1), *[0] * (args["d_out"] + 1)]])),
    Boundary("lsrl.programs.discrete_prompt", programs.discrete_prompt,
             {"mapping": st.just({(1, 2): (3, 4), (5, 6): (7, 8)}), "query": st.sampled_from([None, (1, 2), (5, 6)])},
             check_discrete_tokens, words={"mapping": ("key", "value"), "query": ("key",)}),
    Boundary("lsrl.programs.check_discrete_prompt", programs.check_discrete_prompt,
             {"prompts": st.just([[1], [2], [1], [2], [3], [4]]), "n": st.just(2), "vocabulary": st.sampled_from([None, 9])},
             check_prompt_check, words={"prompts": ("prompt", "prompts", "token", "query", "key", "tokens")}),
    Boundary("lsrl.programs.more_ones_than_zeros", programs.more_ones_than_zeros, {}, check_more_ones),
    Boundary("lsrl.programs.parity", programs.parity, {}, check_parity),
    Boundary("lsrl.programs.conditional_reset", programs.conditional_reset, {"threshold": st.integers(1, 6)},
             check_reset),
    Boundary("lsrl.programs.squaring", programs.squaring,
             {"values": st.sampled_from([range(26), [0, 1, 4, 25], [0, 1]])}, check_squaring),
    Boundary("lsrl.programs.feature_state",
             lambda readout, reads_value, B, b, name: programs.feature_state(x_input(), readout, reads_value, B, b, name),
             {"readout": st.just([1, -2]), "reads_value": st.just([1, 1]), "B": st.just([[1, 0], [1, 0]]),
              "b": st.just([0, -1]), "name": st.just("f")}, check_feature_state,
             words={"readout": ("f_features", "A"), "reads_value": ("f_features", "A"), "B": ("f_features",),
                    "b": ("f_features",), "name": ("f_features",)}),
]

# ---------------------------------------------------------------- finite automata


ALPHABET = ("a", "b")


def check_dfa(dfa: automata.DFA, args: dict) -> None:
    for word in ["", "a", "ab", "bba", "abab"]:
        state = args["start"]
        for symbol in word:
            state = args["transitions"][state][symbol]
        assert dfa.accepts(word) == (state in set(args["accepting"])), word


def check_regex(dfa: automata.DFA, args: dict) -> None:
    import re

    for word in ["", "a", "b", "ab", "ba", "aab", "abab"]:
        assert dfa.accepts(word) == bool(re.fullmatch(args["pattern"], word)), word


def network_words(x: Any) -> Any:
    return x


@functools.cache
def automaton_network(arch: str) -> torch.nn.Module:
    return automata.to_torch(automata.tomita(3), arch)


def check_automaton_output(result: torch.Tensor, args: dict) -> None:
    x = np.asarray(torch.as_tensor(args["x"]).double())
    indices = x.argmax(-1)
    expected = automata.tomita(3).reference(indices)
    if expected.size == 0:  # no steps (T = 0): no outputs
        assert result.numel() == 0, result
        return
    assert np.array_equal(result.numpy().reshape(expected.shape[:2] + (-1,))[..., 0], expected.reshape(expected.shape[:2])), \
        (result, expected)


def one_hot_words() -> st.SearchStrategy:
    return st.integers(0, 4).flatmap(
        lambda T: st.lists(st.lists(st.integers(0, 1), min_size=T, max_size=T), min_size=1, max_size=2)).map(
        lambda words: np.eye(2)[np.array(words, dtype=int)].reshape(len(words), len(words[0]), 2).tolist())


def check_machine_network(net: torch.nn.Module, args: dict) -> None:
    x = torch.eye(2)[torch.tensor([[0, 1, 1, 0, 0, 0, 1]])]
    check_automaton_output(net(x), {"x": x})


AUTOMATA = [
    Boundary("lsrl.automata.DFA", automata.DFA,
             {"states": st.just([0, 1]), "alphabet": st.just(list(ALPHABET)),
              "transitions": st.just({0: {"a": 1, "b": 0}, 1: {"a": 0, "b": 1}}), "start": st.just(0),
              "accepting": st.sampled_from([[0], [1], []])}, check_dfa,
             words={"transitions": ("state", "symbol", "transition"), "accepting": ("accepting", "state"),
                    "start": ("state",), "states": ("state",), "alphabet": ("symbol",)}),
    Boundary("lsrl.automata.Mealy",
             lambda outputs, transitions: automata.Mealy([0, 1], ALPHABET, outputs, transitions, 0),
             {"outputs": st.just(["x", "y"]),
              "transitions": st.just({0: {"a": (1, "x"), "b": (0, "y")}, 1: {"a": (0, "y"), "b": (1, "x")}})},
             lambda machine, args: None, words={"transitions": ("state", "symbol", "transition", "output"),
                                                "outputs": ("output", "outputs")}),
    Boundary("lsrl.automata.from_regex", automata.from_regex,
             {"pattern": st.sampled_from(["a*b", "(ab)*", "a|b", "b*"]), "alphabet": st.just(list(ALPHABET)),
              "max_states": st.sampled_from([None, 100])}, check_regex,
             words={"pattern": ("regex", "regular"), "alphabet": ("symbol", "symbols", "alphabet")}),
    Boundary("lsrl.automata.random_dfa", automata.random_dfa,
             {"n_states": st.integers(1, 5), "n_symbols": st.integers(1, 3), "rng": st.integers(0, 100)},
             lambda dfa, args: None if len(dfa.alphabet) == args["n_symbols"] else pytest.fail(str(dfa))),
    Boundary("lsrl.automata.tomita", automata.tomita, {"number": st.integers(1, 7)},
             lambda dfa, args: None if isinstance(dfa, automata.DFA) else pytest.fail(repr(dfa))),
    Boundary("lsrl.automata.to_torch",
             lambda architecture, gain, dtype, max_parameters: automata.to_torch(
                 automata.tomita(3), architecture, gain=gain, dtype=dtype, max_parameters=max_parameters),
             {"architecture": st.sampled_from(["rnn", "second_order", "lstm", "gru"]), "gain": st.none(),
              "dtype": st.sampled_from([torch.float32, torch.float64]), "max_parameters": st.sampled_from([None, 10**6])},
             check_machine_network, words={"architecture": ("architecture",)}),
    Boundary("lsrl.automata.AutomatonNetwork", lambda arch, x: automaton_network(arch)(x),
             {"arch": st.sampled_from(["rnn", "second_order", "lstm", "gru"]), "x": one_hot_words()},
             check_automaton_output, fixed=("arch",),
             words={"x": ("input", "one-hot", "symbols", "rnn", "second_order", "lstm", "gru")},
             odd={"x": bad_sequence(2)}),
    Boundary("lsrl.automata.network_size",
             lambda architecture, dtype: automata.network_size(automata.tomita(3), architecture, dtype),
             {"architecture": st.sampled_from(["rnn", "second_order", "lstm", "gru"]),
              "dtype": st.sampled_from([torch.float32, torch.float64])},
             lambda size, args: None if size.parameters == sum(
                 p.numel() for p in automata.to_torch(automata.tomita(3), args["architecture"],
                                                      dtype=args["dtype"]).parameters()) else pytest.fail(str(size))),
    Boundary("lsrl.automata.gain_bound", automata.gain_bound,
             {"architecture": st.sampled_from(["lstm", "gru"]), "in_degree": st.integers(1, 4),
              "readout_size": st.integers(1, 4)},
             lambda gain, args: None if gain > 0 and np.isfinite(gain) else pytest.fail(repr(gain)),
             words={"in_degree": ("in-degree",), "readout_size": ("readout",)}),
    Boundary("lsrl.automata.certified_deviation", automata.certified_deviation,
             {"architecture": st.sampled_from(["lstm", "gru"]), "gain": st.sampled_from([20.0, 60.0]),
              "in_degree": st.integers(1, 4), "readout_size": st.integers(1, 4)},
             lambda deviation, args: None if deviation is None or 0 <= deviation < 0.5 else pytest.fail(repr(deviation)),
             words={"in_degree": ("in-degree",), "readout_size": ("readout",)}),
    Boundary("lsrl.automata.export_onnx", lambda network, path: automata.export_onnx(network, path),
             {"network": st.just(None).map(lambda _: automaton_network("rnn")), "path": tmp_file("a.onnx")},
             lambda path, args: None, words={"network": ("network", "AutomatonNetwork")}),
    Boundary("lsrl.automata.learn_back",
             lambda alphabet, words, length, seed: automata.learn_back(automaton_network("rnn"), alphabet,
                                                                       words=words, length=length, seed=seed),
             {"alphabet": st.just([0, 1]), "words": st.integers(1, 50), "length": st.integers(1, 8),
              "seed": st.integers(0, 5)},
             lambda dfa, args: None if len(dfa.alphabet) == 2 else pytest.fail(str(dfa)),
             words={"alphabet": ("symbol", "symbols")}),
    Boundary("lsrl.automata.check",
             lambda architectures, strings, max_length, batch, seed: automata.check(
                 [automata.tomita(1)], architectures, strings=strings, max_length=max_length, batch=batch, seed=seed),
             {"architectures": st.just(("rnn",)), "strings": st.integers(1, 30), "max_length": st.integers(1, 8),
              "batch": st.integers(1, 30), "seed": st.integers(0, 5)},
             lambda results, args: None if all(r.errors == 0 for r in results) else pytest.fail(str(results)),
             words={"architectures": ("architecture",)}),
]

# ---------------------------------------------------------------- the benchmark suite


@functools.cache
def bench_root() -> str:
    """A suite folder holding the parity task (built once)."""
    root = fresh_path("bench")
    lsrl.bench.build_suite(root, ["parity"], progress=False)
    return root


def check_bench(loaded: lsrl.bench.Folder, args: dict) -> None:
    """The folder's model reproduces its own test outputs (the interpreter's, written at build)."""
    model, data = loaded.model, loaded.data
    with torch.no_grad():
        got = model(torch.as_tensor(data["test_inputs"], dtype=torch.float64)).numpy()
    for sequence, length in enumerate(data["test_lengths"]):
        close(got[sequence, :length], data["test_outputs"][sequence, :length], 1e-6)


def check_circuit(circuit: lsrl.bench.Circuit, args: dict) -> None:
    """The circuit names only units of the folder's labels (its hooks are the label keys)."""
    hooks = json.loads((Path(args["path"]).parent / "labels.json").read_text())["hooks"]
    assert circuit.task == "parity" and circuit.units
    assert all(unit["hook"] in hooks for unit in circuit.units)


@functools.cache
def rotated_folder() -> str:
    """The rotated tier's path folder of the parity task (built once)."""
    root = fresh_path("bench-rotated")
    lsrl.bench.build_suite(root, ["parity"], progress=False, tiers=["rotated"])
    return str(Path(root) / "rotated" / "parity" / "path")


def check_rotations(rotations: dict, args: dict) -> None:
    """Every stored Q is exactly orthogonal (Fractions: Q Q^T = I)."""
    assert rotations
    for Q in (rotation.Q for rotation in rotations.values()):
        assert (Q.dot(Q.T) == np.eye(len(Q), dtype=int)).all()


def unit_scores(root: str, seed: int) -> dict:
    """Random scores for every unit of every hook of the parity/rnn folder (a valid submission)."""
    hooks = json.loads((Path(root) / "parity" / "rnn" / "circuit.json").read_text())["hooks"]
    rng = np.random.default_rng(seed)
    return {"units": {hook["name"]: rng.random(hook["width"]).tolist() for hook in hooks}}


def check_score(metrics: dict, args: dict) -> None:
    """Every AUROC is a rate, the faithfulness of the whole model is 1 (every unit kept: the clean run)."""
    assert 0.0 <= metrics["unit_auroc"] <= 1.0 and metrics["faithfulness@1"] == 1.0


def whole_suite(args: dict) -> str | None:
    """Why ``build_suite(root, tasks=None)`` with a usable root is not run by the fuzzer."""
    usable = isinstance(args["root"], str) and args["root"] and "\x00" not in args["root"]
    return "tasks=None builds the whole suite: minutes, by design" if args["tasks"] is None and usable else None


BENCH = [
    Boundary("lsrl.bench.read_rotations", lsrl.bench.read_rotations, {"folder": st.builds(rotated_folder)},
             check_rotations, words={"folder": ("read_rotations", "folder", "rotations")}),
    Boundary("lsrl.bench.read_circuit", lsrl.bench.read_circuit,
             {"path": st.builds(lambda: str(Path(bench_root()) / "parity" / "rnn" / "circuit.json"))}, check_circuit,
             words={"path": ("read_circuit", "circuit")}),
    Boundary("lsrl.bench.load", lambda name, root: lsrl.bench.load(name, root),
             {"name": st.sampled_from(["parity", "parity/rnn"]), "root": st.builds(bench_root)},
             check_bench, words={"name": ("task", "benchmark", "name"), "root": ("root",)}),
    Boundary("lsrl.bench.score", lsrl.bench.score,
             {"scores": st.integers(0, 2**16).map(lambda seed: unit_scores(bench_root(), seed)),
              "folder": st.builds(lambda: str(Path(bench_root()) / "parity" / "rnn"))},
             check_score, words={"scores": ("units", "hook", "scores", "field", "edges", "nodes", "threshold",
                                            "an object"), "folder": ("folder", "suite", "circuit", "path")}),
    Boundary("lsrl.bench.build_suite", lambda root, tasks: lsrl.bench.build_suite(root, tasks, progress=False),
             {"root": tmp_file("bench"), "tasks": st.just([])},
             lambda folders, args: None if folders == [] else pytest.fail(str(folders)),
             words={"tasks": ("task", "tasks"), "root": ("root",)},
             long=whole_suite),
]


def test_the_whole_suite_build_shows_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture) -> None:
    """``build_suite(root)`` (tasks=None) builds every task, minutes by design (docs/bench.md says "long"): the
    fuzzer does not run it, and this test checks the claim instead: every task is built, under a progress bar
    that counts them (the per-task work stubbed out, so that the loop itself runs in a second)."""
    import lsrl.bench.build as build
    from lsrl.bench.tasks import TASKS

    built = []
    monkeypatch.setattr(build, "task_data", lambda task, sequences, tier: built.append(task.name) or {})
    monkeypatch.setattr(build, "npz_bytes", lambda data: b"")
    monkeypatch.setattr(build, "tier_models", lambda task, tier, *steps_and_archs: ({}, None, None))
    assert build.build_suite(tmp_path / "suite") == []
    assert built == list(TASKS)
    bar = capsys.readouterr().err
    assert "lsrl bench: 100%" in bar and f"{len(TASKS)}/{len(TASKS)}" in bar, bar


# ---------------------------------------------------------------- LLRNN: models, ring operators, tasks, training


def llrnn_input(model: torch.nn.Module, steps: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.rand(2, steps, model.input_dim, generator=generator, dtype=model_dtype(model))


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    return next(iter(model.parameters())).dtype


def check_llrnn_model(model: torch.nn.Module, args: dict) -> None:
    """The explicit equations agree with the model's LLRNN form (the denotation of its master term). A form
    too large or slow to build (a reference for small rings: ``llrnn_form``'s stated caps) is refused in one
    line; the model then still runs, finite and of its state's shape."""
    xs = llrnn_input(model)
    try:
        form = llrnn.llrnn_form(model)
    except LlrnnArgumentError as error:
        assert str(error).startswith("llrnn_form: ") and "\n" not in str(error), error
        assert finite_floats(model(xs)).shape == (*xs.shape[:2], model.state_dim)
        return
    close(model(xs).detach().numpy(), form(xs).detach().numpy(), 1e-5)


SIZES = st.integers(1, 4)
LLRNN_MODELS = {
    "NTM": ({"input_dim": SIZES, "controller_dim": SIZES, "slots": st.integers(2, 5),
             "powers": st.sampled_from([None, (0, 1), (0, 1, -1)]), "memory_width": st.sampled_from([None, 2])}, {}),
    "DihedralNTM": ({"input_dim": SIZES, "controller_dim": SIZES, "slots": st.integers(2, 5),
                     "words": st.sampled_from([None, ["0", "1"], ["01", "1"]]), "memory_width": st.sampled_from([None, 2])},
                    {"words": ("word",)}),
    "PatternNTM": ({"input_dim": SIZES, "controller_dim": SIZES, "slots": st.integers(2, 5), "symbol_dim": SIZES,
                    "pattern_powers": st.sampled_from([(0, 1), (0, 1, 2)])}, {}),
    "MultiplePatternNTM": ({"input_dim": SIZES, "controller_dim": SIZES, "symbol_dim": SIZES,
                            "slots": st.sampled_from([(4, 2, 2, 2), (3, 2, 2, 2)]),
                            "pattern_powers": st.sampled_from([(0, 1)])}, {}),
    "PolynomialStepNTM": ({"input_dim": SIZES, "controller_dim": SIZES, "slots": st.integers(2, 5),
                           "symbol_dim": SIZES, "pattern_powers": st.sampled_from([(0, 1), (0, 1, 2)])}, {}),
    "DihedralPolynomialStepNTM": ({"input_dim": SIZES, "controller_dim": SIZES, "slots": st.integers(2, 5),
                                   "symbol_dim": SIZES, "pattern_words": st.sampled_from([("0", "1"), ("0", "1", "01")])},
                                  {"pattern_words": ("word",)}),
    "SecondOrderRNN": ({"input_dim": SIZES, "hidden_dim": SIZES}, {}),
    "HigherOrderRNN": ({"input_dim": SIZES, "hidden_dim": SIZES, "max_power": st.integers(1, 3)}, {}),
    "MultiplicativeRNN": ({"input_dim": SIZES, "hidden_dim": SIZES, "aux_dim": SIZES}, {}),
}


def model_boundary(name: str) -> Boundary:
    valid, words = LLRNN_MODELS[name]
    return Boundary(f"lsrl.llrnn.{name}", getattr(llrnn, name), valid, check_llrnn_model,
                    words={key: (name, *words.get(key, ())) for key in valid})


@functools.cache
def small_ntm() -> torch.nn.Module:
    torch.manual_seed(0)
    return llrnn.NTM(3, 4, 5)


def check_ntm_forward(result: torch.Tensor, args: dict) -> None:
    xs = args["xs"]
    close(result.detach().numpy(), llrnn.llrnn_form(small_ntm())(xs).detach().numpy(), 1e-9)


def check_matrix_power(matrix: torch.Tensor, args: dict, order: Callable[[int], int]) -> None:
    N = args["N"]
    assert matrix.shape == (N, N)
    identity = torch.eye(N, dtype=matrix.dtype)
    assert torch.equal(torch.linalg.matrix_power(matrix, order(N)), identity)
    assert torch.equal(matrix.sum(0), torch.ones(N, dtype=matrix.dtype))  # a permutation


def check_apply_powers(result: torch.Tensor, args: dict) -> None:
    p, v, N = args["p"], args["v"], args["v"].shape[-1]
    expected = sum(p[..., k:k + 1] * torch.roll(v, power, dims=-1) for k, power in enumerate(args["powers"]))
    close(result.numpy(), expected.numpy())


def check_word_operator(result: torch.Tensor, args: dict) -> None:
    alpha, beta = llrnn.rotation(4), llrnn.reflection(4)
    expected = torch.eye(4, dtype=torch.float64)
    for letter in args["word"]:
        expected = (alpha if letter == "0" else beta) @ expected
    assert torch.equal(result, expected)


WORDS = st.text(alphabet="01", max_size=5)
RING = [
    Boundary("lsrl.llrnn.rotation", llrnn.rotation,
             {"N": st.integers(1, 6), "dtype": st.sampled_from([torch.float64, torch.float32]), "device": st.none()},
             functools.partial(check_matrix_power, order=lambda N: N)),
    Boundary("lsrl.llrnn.reflection", llrnn.reflection,
             {"N": st.integers(1, 6), "dtype": st.sampled_from([torch.float64, torch.float32]), "device": st.none()},
             functools.partial(check_matrix_power, order=lambda N: 2)),
    Boundary("lsrl.llrnn.apply_powers", llrnn.apply_powers,
             {"p": st.just(torch.tensor([[0.25, 0.75]], dtype=torch.float64)),
              "v": st.just(torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)),
              "powers": st.sampled_from([(0, 1), (1, -1), (2, 0)])}, check_apply_powers),
    Boundary("lsrl.llrnn.word_counts", llrnn.word_counts, {"word": WORDS},
             lambda counts, args: None if counts == (args["word"].count("0"), args["word"].count("1"))
             else pytest.fail(str(counts))),
    Boundary("lsrl.llrnn.word_operator", lambda word, alpha, beta: llrnn.word_operator(word, alpha, beta),
             {"word": WORDS, "alpha": st.just(llrnn.rotation(4)), "beta": st.just(llrnn.reflection(4))},
             check_word_operator),
    Boundary("lsrl.llrnn.word_transform", llrnn.word_transform,
             {"name": st.sampled_from(["id", "repeat"]), "word": WORDS},
             lambda word, args: None if set(word) <= {"0", "1"} and args["word"] in word else pytest.fail(word),
             words={"name": ("transform",)}),
    Boundary("lsrl.llrnn.llrnn_form", llrnn.llrnn_form, {"model": st.builds(small_ntm)},
             lambda form, args: check_ntm_forward(small_ntm()(llrnn_input(small_ntm())),
                                                  {"xs": llrnn_input(small_ntm())}),
             words={"model": ("llrnn_form", "model")}),
    Boundary("lsrl.llrnn.RecurrentModel.__call__", lambda xs: small_ntm()(xs),
             {"xs": st.integers(1, 4).map(lambda T: llrnn_input(small_ntm(), T))}, check_ntm_forward,
             words={"xs": ("NTM", "input", "xs")}, odd={"xs": bad_sequence(3)}),
    *[model_boundary(name) for name in LLRNN_MODELS],
]


# ---------------------------------------------------------------- LLRNN: the generic cell, its records, RingMachine

STATE_ATOM, CELL_DIM, CELL_WORDS = logic.Atom("A"), 3, ("", "0", "01", "110")
ACTIVATION_FUNCTIONS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "identity": lambda z: z}


def word_master() -> Any:
    """``Z = Σ_k p_k ⟦S_k⟧(c, b)``: binary words (a command) over the input's operator ``c = W^c x`` and a
    data operator ``b`` (tests/test_llrnn_forms.py's user-written master)."""
    n, b, c = "n", "b", "c"
    operator = logic.Bang(logic.endo(STATE_ATOM))
    return logic.lam((n, logic.Bang(logic.bint_type(STATE_ATOM))), (b, operator), (c, operator),
                     logic.Derelict(logic.Var(n))(logic.Var(c), logic.Var(b)))


def cell_state() -> llrnn.StateSpace:
    return llrnn.StateSpace({"h": llrnn.Space(logic.Atom("H"), (CELL_DIM,))}, STATE_ATOM)


def operator_space() -> llrnn.Space:
    return llrnn.Space(logic.endo(STATE_ATOM), (CELL_DIM, CELL_DIM))


def word_basis() -> tuple:
    return tuple(logic.binary(word, STATE_ATOM) for word in CELL_WORDS)


def word_commands(name: str = "words") -> llrnn.Commands:
    return llrnn.Commands(name, logic.bint_type(STATE_ATOM), word_basis())


def operator_data(name: str = "b", activation: str = "relu") -> llrnn.Data:
    return llrnn.Data(name, logic.endo(STATE_ATOM), operator_space(), activation=activation)


def word_cell(commands: Any = None, data: Any = None, **options: Any) -> llrnn.LLRNN:
    torch.manual_seed(0)
    commands = [word_commands()] if commands is None else commands
    data = [operator_data()] if data is None else data
    return llrnn.LLRNN(cell_state(), options.pop("input_dim", 2), master_in=word_master(), commands=commands,
                       data=data, input_space=operator_space(), **options)


def check_word_cell(cell: llrnn.LLRNN, args: dict) -> None:
    """One step of the word cell computed by hand: ``h' = act(Σ_k p_k Π_letters (c or b) h + H h + U x + B)``."""
    dtype, d, batch = cell.H.dtype, CELL_DIM, 4
    generator = torch.Generator().manual_seed(1)
    h = torch.rand(batch, d, generator=generator, dtype=dtype)
    x = torch.randn(batch, cell.input_dim, generator=generator, dtype=dtype)
    with torch.no_grad():
        if cell.masters["in"] is not None:  # without a master the cell is an Elman RNN: Z = 0
            command, data = cell.commands[0].name, cell.data[0]
            p = torch.softmax(h @ cell.W_p[command].T + cell.B_p[command], dim=-1)
            beta = ACTIVATION_FUNCTIONS[data.activation](h @ cell.W_b[data.name].T + cell.B_b[data.name])
            beta, alpha = beta.reshape(-1, d, d), (x @ cell.W_c.T).reshape(-1, d, d)
        expected = []
        for i in range(batch):
            Z = torch.zeros(d, d, dtype=dtype)
            for k, word in enumerate(CELL_WORDS if cell.masters["in"] is not None else ()):
                product = torch.eye(d, dtype=dtype)
                for letter in word:
                    product = (alpha[i] if letter == "0" else beta[i]) @ product
                Z = Z + p[i, k] * product
            drive = Z @ h[i] + cell.H @ h[i] + cell.U @ x[i] + cell.B
            expected.append(ACTIVATION_FUNCTIONS[args.get("activation", "relu")](drive))
        close(cell.step(h, x).numpy(), torch.stack(expected).numpy(), 1e-5 if dtype == torch.float32 else 1e-9)


def check_space(space: llrnn.Space, args: dict) -> None:
    shape = tuple(args["shape"])
    assert space.dim == (shape[0] if args["diagonal"] else int(np.prod(shape))), space
    coordinates = torch.arange(1.0, space.dim + 1, dtype=torch.float64)
    expected = np.diag(coordinates.numpy()) if args["diagonal"] else coordinates.numpy().reshape(shape)
    assert np.array_equal(space.value(coordinates).matrix.numpy(), expected)


def check_state_space(state: llrnn.StateSpace, args: dict) -> None:
    widths = [space.shape[0] for space in args["components"].values()]
    h, offset = torch.arange(float(sum(widths))), 0
    assert state.dim == sum(widths)
    for name, width in zip(args["components"], widths):
        assert torch.equal(state.flat(h, name), h[offset:offset + width]), name
        offset += width


def check_commands(commands: llrnn.Commands, args: dict) -> None:
    assert (commands.name, commands.type, tuple(commands.basis)) == (args["name"], args["type"], tuple(args["basis"]))
    check_word_cell(word_cell(commands=[commands]), {})


def check_data(data: llrnn.Data, args: dict) -> None:
    assert (data.name, data.type, data.space, data.activation) == (args["name"], args["type"], args["space"],
                                                                  args["activation"])
    check_word_cell(word_cell(data=[data]), {})


def ntm_ring(slots: int) -> Any:
    moves = rotation_moves(slots, (0, 1))
    return [Ring("", 3, moves, moves)]


def check_ring_machine(machine: llrnn.RingMachine, args: dict) -> None:
    """The machine of one ring moved by R^0 and R^1 is the NTM of those powers: with the NTM's weights it
    runs as the NTM does (whose LLRNN form tests/test_llrnn_forms.py checks)."""
    ntm = llrnn.NTM(args["input_dim"], 3, machine.rings[0].slots, (0, 1))
    ntm.load_state_dict(machine.state_dict())
    xs = llrnn_input(machine)
    assert torch.equal(machine(xs), ntm(xs))


CELL_WORDS_OF = ("LLRNN", "master", "master^in")
CELL = [
    Boundary("lsrl.llrnn.LLRNN",
             lambda state, input_dim, master_in, commands, data, input_space, reads_state, activation, dtype:
             llrnn.LLRNN(state, input_dim, master_in=master_in, commands=commands, data=data, input_space=input_space,
                         reads_state=reads_state, activation=activation, dtype=dtype),
             {"state": st.builds(cell_state), "input_dim": SIZES, "master_in": st.builds(word_master),
              "commands": st.builds(lambda: [word_commands()]), "data": st.builds(lambda: [operator_data()]),
              "input_space": st.builds(operator_space), "reads_state": st.just(False),
              "activation": st.sampled_from(sorted(ACTIVATION_FUNCTIONS)),
              "dtype": st.sampled_from([torch.float64, torch.float32])},
             check_word_cell, words={name: CELL_WORDS_OF for name in ("state", "input_dim", "master_in", "commands",
                                                                      "data", "input_space", "reads_state",
                                                                      "activation", "dtype")}),
    Boundary("lsrl.llrnn.Space", llrnn.Space,
             {"type": st.just(logic.endo(STATE_ATOM)), "shape": st.sampled_from([(1, 1), (2, 2), (3, 3), (2, 4)]),
              "diagonal": st.just(False)}, check_space, words=dict.fromkeys(("type", "shape", "diagonal"), ("Space",))),
    Boundary("lsrl.llrnn.StateSpace", llrnn.StateSpace,
             {"components": st.lists(SIZES, min_size=1, max_size=3).map(
                 lambda widths: {f"h{i}": llrnn.Space(logic.Atom(f"H{i}"), (w,)) for i, w in enumerate(widths)}),
              "atom": st.just(STATE_ATOM)}, check_state_space,
             words={"components": ("StateSpace",), "atom": ("StateSpace",)}),
    Boundary("lsrl.llrnn.Commands", llrnn.Commands,
             {"name": st.sampled_from(["words", "p"]), "type": st.just(logic.bint_type(STATE_ATOM)),
              "basis": st.builds(word_basis), "dirac_of_sum": st.just(False)}, check_commands,
             words=dict.fromkeys(("name", "type", "basis", "dirac_of_sum"), ("Commands",))),
    Boundary("lsrl.llrnn.Data", llrnn.Data,
             {"name": st.sampled_from(["b", "beta"]), "type": st.just(logic.endo(STATE_ATOM)),
              "space": st.builds(operator_space), "fixed": st.none(),
              "activation": st.sampled_from(sorted(ACTIVATION_FUNCTIONS))}, check_data,
             words=dict.fromkeys(("name", "type", "space", "fixed", "activation"), ("Data",))),
    Boundary("lsrl.llrnn.RingMachine",
             lambda input_dim, controller_dim, rings, symbol_dim, drivers, pattern_moves: llrnn.RingMachine(
                 input_dim, controller_dim, rings, symbol_dim, drivers, pattern_moves, dtype=torch.float64,
                 device=None),
             {"input_dim": SIZES, "controller_dim": st.just(3), "rings": st.integers(2, 5).map(ntm_ring),
              "symbol_dim": st.none(), "drivers": st.just(()), "pattern_moves": st.none()},
             check_ring_machine,
             words=dict.fromkeys(("input_dim", "controller_dim", "rings", "symbol_dim", "drivers", "pattern_moves"),
                                 ("RingMachine",))),
]


def check_batch(batch: Any, args: dict) -> None:
    assert batch.inputs.shape[0] == args["batch_size"] and torch.isfinite(batch.inputs).all()
    assert batch.targets.shape == batch.mask.shape and batch.mask.any()


def task_batch(task: str, batch_size: Any, length: Any) -> Any:
    return llrnn_tasks.TASKS[task]().batch(batch_size, length, torch.Generator().manual_seed(0))


def check_training(result: dict, args: dict) -> None:
    """The report of an accepted training: the steps asked for, error rates that are rates."""
    assert result["steps"] == args["config"].steps, result
    rates = [result["train_symbol_error"], result["test_symbol_error"], *result["test_errors"].values()]
    assert all(0 <= rate <= 1 for rate in rates), result


def first_step() -> None:
    """An optimiser step (its first one imports sympy, slowly) before the training boundary is timed."""
    weight = torch.zeros(1, requires_grad=True)
    weight.sum().backward()
    torch.optim.Adam([weight]).step()


def train_small(config: Any, folder: Any, checkpoint_every: Any) -> dict:
    return llrnn_train.train(config, folder, progress=False, checkpoint_every=checkpoint_every)


TRAIN_FIELDS = {"steps": st.integers(1, 2), "batch_size": st.integers(1, 2), "controller_dim": st.integers(1, 3),
                "max_length": st.integers(2, 3), "learning_rate": st.sampled_from([1e-3, 0.1]),
                "clip": st.sampled_from([1.0, 10.0]), "error_threshold": st.sampled_from([0.05, 0.5]),
                "erase_init": st.sampled_from([0.0, 0.5])}
TRAINING = [
    Boundary("lsrl.llrnn.tasks.TASKS[...].batch", task_batch,
             {"task": st.sampled_from(sorted(llrnn_tasks.TASKS)), "batch_size": st.integers(1, 3),
              "length": st.integers(1, 4)}, check_batch, fixed=("task",), words={"task": ("task",), "batch_size": ("batch",),
                                                                "length": ("length", "len")}),
    Boundary("lsrl.llrnn.train.TrainConfig", llrnn_train.TrainConfig, TRAIN_FIELDS,
             lambda config, args: llrnn_train.check_config(config)),
    Boundary("lsrl.llrnn.train.preset", lambda name, model, task: llrnn_train.preset(name, model, task),
             {"name": st.sampled_from(sorted(llrnn_train.PRESETS)), "model": st.sampled_from(["ntm", "lstm"]),
              "task": st.sampled_from(["copy", "tf_copy"])},
             lambda config, args: llrnn_train.check_config(config), words={"name": ("preset",)}),
    Boundary("lsrl.llrnn.train.train", train_small,
             {"config": st.fixed_dictionaries(TRAIN_FIELDS).map(lambda fields: llrnn_train.TrainConfig(**fields)),
              "folder": tmp_file("run"), "checkpoint_every": st.integers(1, 3)},
             check_training, words={"config": ("config", "TrainConfig"), "folder": ("folder",)}, prepare=first_step),
]

BOUNDARIES = [*LANGUAGE, *SUGAR, *MODEL, *HF, *PROGRAMS, *AUTOMATA, *BENCH, *RING, *CELL, *TRAINING]


ESCAPES_IN_MODEL_AND_TARGETS = {  # one call per escape the fuzzer found in lsrl/model and lsrl/targets: each is now a one-line LsrlError
    "save(None)": lambda: compiled().save(None),
    "load(None)": lambda: lsrl.load(None),
    "model(xs, exact=np.zeros((0, 0)))": lambda: compiled()(XS, exact=np.zeros((0, 0))),
    "model(xs, patch=5)": lambda: compiled()(XS, patch=5),
    "model.trace(xs, patch={1.5: 0})": lambda: compiled("float").trace(XS, patch={1.5: 0}),
    "export_onnx(dtype=[])": lambda: export(network("rnn"), fresh_path("m.onnx"), "rnn", [], False),
    "to_torch('gru', gate_bound='x')": lambda: compiled().to_torch("gru", gate_bound="x"),
    "net(xs, patch=5)": lambda: network("rnn")(torch.tensor(XS)[None], patch=5),
    "net(xs, patch={7: 0})": lambda: network("gru")(torch.tensor(XS)[None], patch={7: 0}),
    "run_with_cache(xs, patch=5)": lambda: network("rnn").run_with_cache(torch.tensor(XS)[None], patch=5),
}


@pytest.mark.parametrize("call", ESCAPES_IN_MODEL_AND_TARGETS.values(), ids=ESCAPES_IN_MODEL_AND_TARGETS)
def test_escapes_found_in_model_and_targets_are_refused_in_one_line(call: Callable[[], Any]) -> None:
    with pytest.raises(lsrl.LsrlError) as error:
        call()
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("boundary", BOUNDARIES, ids=[boundary.name for boundary in BOUNDARIES])
@given(data=st.data())
@pytest.mark.slow
def test_a_hostile_argument_is_refused_in_one_line_or_answered_right(boundary: Boundary, data: st.DataObject) -> None:
    arguments = {name: data.draw(strategy, label=name) for name, strategy in boundary.valid.items()}
    spoilable = sorted(set(arguments) - set(boundary.fixed))
    spoiled = data.draw(st.lists(st.sampled_from(spoilable), min_size=1, max_size=2, unique=True),
                        label="spoiled") if spoilable else []
    for name in spoiled:
        hostile = st.one_of(junk(), boundary.odd[name]) if name in boundary.odd else junk()
        arguments[name] = data.draw(hostile, label=f"hostile {name}")
    words = [word for name in spoiled for word in (name, *boundary.words.get(name, ()))]
    if boundary.long(arguments):
        return  # long by design, and checked by the test the reason names
    if boundary.prepare is not None:
        boundary.prepare()
    with timed_example(boundary.name, arguments):
        outcome = user_error_or_answer(lambda: boundary.call(**arguments), words)
        if outcome is not None:
            boundary.check(outcome.value, arguments)


# ---------------------------------------------------------------- the boundary stays fuzzed

PUBLIC_MODULES = ("lsrl", "lsrl.hf", "lsrl.programs", "lsrl.automata", "lsrl.targets", "lsrl.bench", "lsrl.llrnn")
PUBLIC_CLASSES = (lsrl.ForEach, lsrl.CompiledProgram)  # their public methods are entry points too
COVERED_AS = {  # public names fuzzed under another boundary's name
    "lsrl.CompiledProgram.to_torch": "to_torch[",
    "lsrl.targets.to_torch": "to_torch[",
    "lsrl.CompiledProgram.to_hf": "to_hf[",
    "lsrl.hf.to_hf": "to_hf[",
    "lsrl.automata.AutomatonNetwork": "lsrl.automata.AutomatonNetwork",
    "lsrl.ForEach.__call__": "lsrl.ForEach.__call__",
}
NOT_FUZZED = {  # public callables that are no boundary a user's value crosses, with the reason
    "lsrl.Matrix": "built by lsrl.numbers from a node's weights; users pass lists or arrays, fuzzed at the nodes",
    "lsrl.CompiledProgram": "built by compile() and load(), both fuzzed; its methods are listed on their own",
    "lsrl.UnitLabel": "a named tuple the compiler writes; read, not built, by users",
    "lsrl.targets.Target": "a registry record lsrl's catalog declares (lsrl/targets/catalog.py), not user input",
    "lsrl.hf.HfArchitecture": "a registry record lsrl.hf declares for its four stock models; to_hf's arguments "
                              "reach its build, which the to_hf boundaries fuzz",
    "lsrl.targets.register": "adds a Target to the registry; called by lsrl's catalog only",
    "lsrl.targets.BlockStack": "the intermediate form to_torch builds from; its input is a compiled model",
    "lsrl.targets.to_blocks": "the intermediate form to_torch builds from; its input is a compiled model",
    "lsrl.automata.NetworkSize": "a named tuple network_size returns",
    "lsrl.llrnn.RecurrentModel": "the base class of the models below (its __call__ is fuzzed on an NTM)",
    "lsrl.bench.Folder": "the named tuple lsrl.bench.load returns (load is fuzzed)",
    "lsrl.bench.Circuit": "the record lsrl.bench.load and read_circuit return, built by build_suite",
    "lsrl.ForEach.trace": "the interpreter's trace: the same reading of xs and patch as __call__, which is fuzzed",
    "lsrl.CompiledProgram.diagonal": "takes no argument; its answer is checked by tests/test_diagonal.py",
    "lsrl.CompiledProgram.summary": "takes no argument",
    "lsrl.CompiledProgram.label_violations": "a checking tool for the compiler's labels (tests/test_labels.py)",
    "lsrl.CompiledProgram.require_float64_weights": "the float paths' own check, reached through model(xs) and "
                                                    "to_torch, both fuzzed",
    "lsrl.CompiledProgram.patch_width": "read by the patch checks of model(xs, patch=) and the targets, fuzzed there",
    "lsrl.CompiledProgram.check_patchable": "the patch checks' own refusal, reached through patch=, fuzzed there",
}


def public_callables() -> set[str]:
    """Every public callable of the public modules (``__all__``) and of the public classes' methods, less
    error classes (raised, not called) and modules."""
    names = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if callable(value) and not inspect.ismodule(value) and not (
                    inspect.isclass(value) and issubclass(value, BaseException)):
                names.add(f"{module_name}.{name}")
    for cls in PUBLIC_CLASSES:
        for name, member in vars(cls).items():
            if (not name.startswith("_") or name == "__call__") and inspect.isfunction(member):
                names.add(f"lsrl.{cls.__name__}.{name}")
    return names


def test_every_public_callable_is_fuzzed() -> None:
    fuzzed = [boundary.name for boundary in BOUNDARIES]
    unfuzzed = sorted(name for name in public_callables() - set(NOT_FUZZED)
                      if not any(other.startswith(COVERED_AS.get(name, name)) for other in fuzzed))
    assert not unfuzzed, f"public callables the fuzz suite does not cover (add a Boundary): {unfuzzed}"
    stale = sorted(set(NOT_FUZZED) - public_callables())
    assert not stale, f"NOT_FUZZED names that are no longer public: {stale}"


def test_every_target_is_fuzzed() -> None:
    fuzzed = {boundary.name for boundary in BOUNDARIES}
    assert all(f"to_torch[{arch}]" in fuzzed and f"net[{arch}]" in fuzzed for arch in ARCHITECTURES)
    assert all(f"net[{arch}](patch=)" in fuzzed for arch in ARCHITECTURES if arch not in STOCK)


# ---------------------------------------------------------------- each escape the fuzzer found, pinned

REGRESSIONS = {  # a call that escaped (a raw exception, a hang, a wrong answer), and the words its error names
    "x + None": (lambda: x_input() + None, ("operand",)),
    "x[1.5]": (lambda: x_input()[1.5], ("index",)),
    "x['a':]": (lambda: x_input()["a":], ("slice",)),
    "f_constant(x, None)": (lambda: lsrl.f_constant(x_input(), None), ("value",)),
    "f_bump(lb=None)": (lambda: lsrl.f_bump(one_input(), None, 3), ("lb",)),
    "f_larger(y=1j)": (lambda: lsrl.f_larger(one_input(), 1j), ("y",)),
    "f_smaller(y='a')": (lambda: lsrl.f_smaller(one_input(), "a"), ("y",)),
    "f_eq(y=nan)": (lambda: lsrl.f_eq(one_input(), float("nan")), ("y",)),
    "f_or(mu=0.5)": (lambda: lsrl.f_or(*two_bits(), mu=0.5), ("mu",)),
    "f_modulo_counter(divisor=10**30)": (lambda: lsrl.f_modulo_counter(one_input(), 10**30), ("divisor",)),
    "ForEach(patch=5)": (lambda: PROGRAM(XS, patch=5), ("patch",)),
    "check_discrete_prompt(scalar)": (lambda: programs.check_discrete_prompt(-7, 2), ("prompts",)),
    "check_discrete_prompt(ragged)": (lambda: programs.check_discrete_prompt([[1], [1, 2]], 1), ("prompts",)),
    "feature_state(reads_value=71)": (lambda: programs.feature_state(x_input(), [1], 71, [[1, 0]], [0], "f"),
                                      ("reads_value",)),
    "squaring(None)": (lambda: programs.squaring(None), ("values",)),
    "discrete_approximator(n=10**14)": (lambda: programs.discrete_approximator(10**14), ("n",)),
    "continuous_approximator(d_in=10**9)": (lambda: programs.continuous_approximator(10**9, 1), ("d_in",)),
    "targets.inspect(archs=None)": (lambda: lsrl.targets.inspect(compiled(), None), ("archs",)),
    "run_with_cache(xs='text')": (lambda: network("rnn").run_with_cache("text"), ("xs",)),
    "run_with_cache(complex xs)": (lambda: network("rnn").run_with_cache(XS + 1j), ("xs",)),
    "tomita(None)": (lambda: automata.tomita(None), ("number",)),
    "gain_bound(architecture=None)": (lambda: automata.gain_bound(None, 1, 1), ("architecture",)),
    "certified_deviation(gain=None)": (lambda: automata.certified_deviation("gru", None, 1, 1), ("gain",)),
    "learn_back(length=10**20)": (lambda: automata.learn_back(automaton_network("rnn"), [0, 1], length=10**20),
                                  ("length",)),
    "learn_back(seed=masked)": (lambda: automata.learn_back(automaton_network("rnn"), [0, 1],
                                                            seed=np.ma.masked_array([[1.0, 2.0]], mask=[[1, 0]])),
                                ("seed",)),
    "check(architectures=None)": (lambda: automata.check([automata.tomita(1)], None), ("architectures",)),
    "check(seed=timedelta)": (lambda: automata.check([automata.tomita(1)], seed=np.timedelta64(1, "D")), ("seed",)),
    "bench.load(root=1574)": (lambda: lsrl.bench.load("parity", 1574), ("root",)),
    "bench.load(root='\\x00')": (lambda: lsrl.bench.load("parity", "\x00"), ("root",)),
    "bench.build_suite(tasks=1.5)": (lambda: lsrl.bench.build_suite(fresh_path("b"), 1.5, progress=False), ("tasks",)),
    "rotation(None)": (lambda: llrnn.rotation(None), ("N",)),
    "reflection(10**6)": (lambda: llrnn.reflection(10**6), ("N",)),
    "word_counts(None)": (lambda: llrnn.word_counts(None), ("word",)),
    "word_transform('id', 7)": (lambda: llrnn.word_transform("id", 7), ("word",)),
    "word_operator(alpha=None)": (lambda: llrnn.word_operator("01", None, llrnn.reflection(3)), ("alpha",)),
    "apply_powers(p=None)": (lambda: llrnn.apply_powers(None, torch.zeros(1, 3), (0,)), ("p",)),
    "MultiplicativeRNN(hidden_dim=83017)": (lambda: llrnn.MultiplicativeRNN(2, 83017, 2), ("MultiplicativeRNN",)),
    "task batch(batch_size=None)": (lambda: llrnn_tasks.Copy().batch(None, 3), ("batch_size",)),
    "task batch(length='a')": (lambda: llrnn_tasks.Copy().batch(2, "a"), ("length",)),
    "preset(name=masked)": (lambda: llrnn_train.preset(np.ma.masked_array([1.0], mask=[1])), ("preset",)),
    "train(config='x')": (lambda: llrnn_train.train("x", fresh_path("t"), progress=False), ("config", "TrainConfig")),
    "train(folder=7)": (lambda: llrnn_train.train(llrnn_train.TrainConfig(steps=1), 7, progress=False), ("folder",)),
    "TapeVariablePattern(entries=(0,))": (lambda: llrnn_tasks.TapeVariablePattern(entries=(0,)), ("entries",)),
    # found by HYPOTHESIS_PROFILE=deep (raw exceptions, hangs, memory blow-ups, messages on several lines)
    "Input(dim=10**12)": (lambda: lsrl.Input(10**12), ("dim",)),
    "Input(bounds='00')": (lambda: lsrl.Input(1, bounds="00"), ("bounds",)),
    "Input(name=[])": (lambda: lsrl.Input(2, name=[]), ("name",)),
    "x[np.array(3.0)]": (lambda: x_input()[np.array(3.0)], ("index",)),
    "x[{1: 2}]": (lambda: x_input()[{1: 2}], ("index",)),
    "x[np.timedelta64]": (lambda: x_input()[np.timedelta64(1, "D")], ("index",)),
    "np.array([]) - x": (lambda: np.array([]) - x_input(), ("operand",)),
    "Concat(0-d tensor)": (lambda: lsrl.Concat(torch.tensor(1.0)), ("Concat",)),
    "Linear(A with no rows)": (lambda: lsrl.Linear(x_input(), np.zeros((0, 2))), ("A",)),
    "value_bounds(max_length=timedelta64)": (lambda: lsrl.value_bounds(PROGRAM.output, np.timedelta64(1, "D")),
                                             ("max_length",)),
    "f_step(saturating=array)": (lambda: lsrl.f_step(one_input(), saturating=np.array([])), ("saturating",)),
    "f_modulo_counter(method=array)": (lambda: lsrl.f_modulo_counter(one_input(), 3, method=np.array([1, 2])),
                                       ("method",)),
    "f_modulo_counter(divisor=10**6)": (lambda: lsrl.f_modulo_counter(one_input(), 10**6), ("divisor",)),
    "f_bump(lb of width 3)": (lambda: lsrl.f_bump(one_input(), [1, 2, 3], 4), ("lb",)),
    "compile(backend=[])": (lambda: lsrl.compile(PROGRAM, backend=[], progress=False), ("backend",)),
    "model(xs, exact=masked)": (lambda: compiled()(XS, exact=np.ma.masked_array([[1.0, 2.0]], mask=[[1, 0]])),
                                ("exact",)),
    "to_torch([])": (lambda: compiled().to_torch([]), ("architecture",)),
    "to_torch('gru', gate_bound=10**400)": (lambda: compiled().to_torch("gru", gate_bound=10**400), ("gate_bound",)),
    "to_torch('hawk', construction=array)": (lambda: compiled().to_torch("hawk", construction=np.array([])),
                                             ("construction",)),
    "to_torch('stock_lstm', gain=None)": (lambda: compiled().to_torch("stock_lstm", max_len=4, gain=None), ("gain",)),
    "targets.inspect(archs=0-d tensor)": (lambda: lsrl.targets.inspect(compiled(), torch.tensor(1.0)), ("archs",)),
    "continuous_prompt(d_in=10**30)": (lambda: programs.continuous_prompt(lambda x: [0.0], 10**30, 1, 1), ("d_in",)),
    "conditional_reset(True)": (lambda: programs.conditional_reset(True), ("threshold",)),
    "automata.export_onnx(path with NUL)": (lambda: automata.export_onnx(automaton_network("rnn"), "a\x00b"), ("path",)),
    "rotation(device=10**30)": (lambda: llrnn.rotation(3, device=10**30), ("device",)),
    "HigherOrderRNN(max_power=10**6)": (lambda: llrnn.HigherOrderRNN(2, 2, 10**6), ("max_power",)),
    "NTM(slots=10**4)": (lambda: llrnn.NTM(2, 3, 10**4), ("slots",)),
    # round two (deep profile over the NTM family): sizes that took minutes or gigabytes, now refused first
    "NTM(memory_width=2593059)": (lambda: llrnn.NTM(1, 1, 2, memory_width=2593059), ("memory_width",)),
    "MultiplicativeRNN(aux_dim=10**6)": (lambda: llrnn.MultiplicativeRNN(1, 1, 10**6), ("aux_dim",)),
    "NTM(a state of 4 * 10**8 numbers)": (lambda: llrnn.NTM(1, 1, 10**5, (0, 1), memory_width=4096), ("state",)),
    "NTM(xs returning 3 * 10**8 state numbers)": (
        lambda: llrnn.NTM(1, 1, 10**4, (0, 1), memory_width=100)(torch.zeros(1, 300, 1, dtype=torch.float64)),
        ("inputs",)),
    "llrnn_form(NTM(slots=np.uint8(200)))": (lambda: llrnn.llrnn_form(llrnn.NTM(1, 1, np.uint8(200))), ("powers",)),
    "DihedralPolynomialStepNTM(slots=2738)": (lambda: llrnn.DihedralPolynomialStepNTM(1, 1, 2738, 4), ("slots",)),
    "NTM(slots=2000)(a batch of 100)": (lambda: llrnn.NTM(1, 1, 2000)(torch.zeros(100, 1, 1, dtype=torch.float64)),
                                        ("inputs",)),
    "MultiplePatternNTM(pattern_powers=np.array(3.0))": (
        lambda: llrnn.MultiplePatternNTM(1, 1, 1, slots=(4, 2, 2, 2), pattern_powers=np.array(3.0)), ("pattern_powers",)),
    "RingMachine(rings=np.array(3.0))": (lambda: llrnn.RingMachine(1, 3, np.array(3.0), dtype=torch.float64, device=None),
                                         ("rings",)),
    "continuous_approximator(ifelse=np.array([]))": (lambda: programs.continuous_approximator(1, 1, np.array([])),
                                                     ("ifelse",)),
    "discrete_approximator(counter=np.array([]))": (lambda: programs.discrete_approximator(1, counter=np.array([])),
                                                    ("counter",)),
    "f_constant(x, [])": (lambda: lsrl.f_constant(one_input(), []), ("value",)),
    "f_bump(lb=True)": (lambda: lsrl.f_bump(one_input(), True, 3), ("lb",)),
    "f_ifelse(variant=np.array([]))": (lambda: ifelse(np.array([]), 10**10, 2), ("variant",)),
    "f_modulo_counter(2, 'rotation', mu=1)": (lambda: lsrl.f_modulo_counter(one_input(), 2, "rotation", mu=1), ("mu",)),
    "f_modulo_counter(100, 'rotation')": (lambda: lsrl.f_modulo_counter(one_input(), 100, "rotation"), ("mu",)),
    # found by the ci profile's new examples after round two's edits
    "f_or(mu=Fraction(1, 3))": (lambda: lsrl.f_or(*two_bits(), mu=Fraction(1, 3)), ("mu",)),
    "continuous_approximator(robust={})": (lambda: programs.continuous_approximator(2, 1, "step", lambda_="auto",
                                                                                   robust={}), ("robust",)),
    "discrete_approximator(robust='no')": (lambda: programs.discrete_approximator(1, robust="no"), ("robust",)),
    "train(checkpoint_every='ë')": (lambda: llrnn_train.train(llrnn_train.TrainConfig(steps=1), fresh_path("t"),
                                                              progress=False, checkpoint_every="ë"),
                                    ("checkpoint_every",)),
}


def test_f_eq_with_a_numpy_integer_tolerance_is_exact() -> None:
    """Deep fuzzing: ``y - tolerance`` with a numpy uint8 tolerance wrapped around (0 - 1 = 255), and
    ``f_eq(x, 0)`` was 0 at x = 0."""
    x = lsrl.Input(1, name="v", bounds=(-8, 8))
    node = lsrl.f_eq(x, 0, tolerance=np.uint8(1), mu=10)
    assert [row[0] for row in lsrl.ForEach(node)(np.array([[0], [3]], dtype=object), exact=True)] == [1, 0]


def test_a_one_element_tensor_index_selects_its_component() -> None:
    """Deep fuzzing: ``x[torch.tensor([1], dtype=torch.int8)]`` (a whole number) put the tensor itself into the
    selection matrix and raised scipy's raw ValueError; it selects component 1, as ``XS[:, [1]]`` does."""
    node = x_input()[torch.tensor([1], dtype=torch.int8)]
    close(lsrl.ForEach(node)(XS), XS[:, [1]])


def test_a_numpy_scalar_operand_still_builds_a_node() -> None:
    """``__array_ufunc__ = None`` hands numpy's operators to the node, whose answer is the interpreter's."""
    node = np.float64(2.0) - x_input()
    assert isinstance(node, lsrl.Node)
    close(lsrl.ForEach(node)(XS), 2.0 - XS)


@pytest.mark.slow
@pytest.mark.parametrize("call, words", REGRESSIONS.values(), ids=REGRESSIONS)
def test_an_escape_the_fuzzer_found_is_a_one_line_error(call: Callable[[], Any], words: tuple[str, ...]) -> None:
    assert user_error_or_answer(call, words) is None, "accepted"


def test_certified_deviation_of_a_gain_beyond_float64_certifies_nothing() -> None:
    assert automata.certified_deviation("gru", 10**400, 2, 1) is None


@pytest.mark.parametrize("word", ["", "0", "1", "0110", "1101001"])
def test_word_index_composes_the_dense_operators(word: str) -> None:
    """The gather index built letter by letter equals the dense word operator's permutation."""
    from lsrl.llrnn.ring import word_index

    for N in (1, 5, 8):
        dense = llrnn.word_operator(word, llrnn.rotation(N), llrnn.reflection(N))
        v = torch.arange(N, dtype=torch.float64)
        assert torch.equal(v[word_index(N, word)], dense @ v)


def test_training_refuses_a_folder_it_cannot_make_before_training(tmp_path: Any) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(lsrl.LsrlError, match="folder") as error:
        llrnn_train.train(llrnn_train.TrainConfig(steps=10**6), tmp_path / "file" / "run", progress=False)
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------- every patch path refuses bad patch values alike

BAD_PATCH_VALUES = {  # for PROGRAM's node "total" (width 1) on a 3-step XS
    "wider than the node": (np.ones((3, 2)), lsrl.DimensionError),
    "NaN": (np.full((3, 1), np.nan), lsrl.SequenceError),
    "infinity": (np.full((3, 1), np.inf), lsrl.SequenceError),
    "complex": (np.full((3, 1), 1 + 2j), lsrl.SequenceError),
    "complex tensor": (torch.full((3, 1), 1 + 2j), lsrl.SequenceError),
    "complex entry": ([[1.0], [2j], [3.0]], lsrl.SequenceError),
}
PATCH_PATHS = {
    "ForEach(xs, patch=)": lambda patch: PROGRAM(XS, patch=patch),
    "model(xs, patch=)": lambda patch: compiled()(XS, patch=patch),
    "model(xs, exact=True, patch=)": lambda patch: compiled()(XS.astype(object), exact=True, patch=patch),
    **{f"net[{arch}](xs, patch=)": functools.partial(lambda patch, arch: network(arch)(torch.tensor(XS)[None],
                                                                                       patch=patch), arch=arch)
       for arch in ARCHITECTURES if arch not in STOCK},
    **{f"run_with_cache[{arch}]": functools.partial(lambda patch, arch: network(arch).run_with_cache(
        torch.tensor(XS)[None], patch=patch), arch=arch) for arch in ARCHITECTURES if arch not in STOCK},
}


@pytest.mark.parametrize("path", PATCH_PATHS)
@pytest.mark.parametrize("bad", BAD_PATCH_VALUES)
def test_every_patch_path_refuses_bad_values_in_one_line(path: str, bad: str) -> None:
    """Patches wider than the node were truncated by the compiled model, net(..., patch=) and
    run_with_cache, and the torch targets accepted NaN / infinite values; complex values are refused too."""
    values, error = BAD_PATCH_VALUES[bad]
    with pytest.raises(error) as raised:
        PATCH_PATHS[path]({"total": values})
    assert "\n" not in str(raised.value) and "total" in str(raised.value)
