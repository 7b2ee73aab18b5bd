"""The language's part: sugar parameters against their meaning and the declared bounds,
matrix and sequence entries that are not numbers, prompt builders against repeated keys, value_bounds'
max_length, and fusions whose products leave float64's range. Each reported example is a test that
failed before the fix; the parametrised ones cover the class."""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from fractions import Fraction

import numpy as np
import pytest

import lsrl
from lsrl.lang import bounds as B
from lsrl.programs import (
    check_discrete_prompt, continuous_approximator, continuous_prompt, continuous_query, discrete_approximator,
    discrete_prompt,
)


def _one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------- sugar
def test_an_explicit_lambda_below_the_declared_bounds_is_refused():
    x = lsrl.Input(2, name="x", bounds=(0, 100))
    with pytest.raises(lsrl.LsrlError, match="lambda_=10 is below the branches' declared bounds") as caught:
        lsrl.f_ifelse(x[0], x[1], x[1] * 0, lambda_=10)
    _one_line(caught.value)
    lsrl.f_ifelse(x[0], x[1], x[1] * 0, lambda_=100)  # lambda_ = max |t| is enough
    lsrl.f_ifelse(x[0], x[1], x[1] * 0, variant="multiplicative", lambda_=10)  # no lambda_ in Eq. (10)


@pytest.mark.parametrize("variant", ["original", "optimized", "step", "step_optimized"])
@pytest.mark.parametrize("lam", [0, -1, -1e10, float("nan"), float("inf"), "big", None, True, 1j])
def test_lambda_must_be_a_positive_number(variant, lam):
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.LsrlError, match="lambda_") as caught:
        lsrl.f_ifelse(x[0], x[1], x[1] * 0, variant=variant, lambda_=lam)
    _one_line(caught.value)


@pytest.mark.parametrize("variant", ["step", "step_optimized"])
def test_the_step_conditionals_refuse_a_mu_whose_step_does_not_reach_1(variant):
    """Found by the fuzzer: with mu = 1, f_step(cond - 1/2) is 1/2, not 1, and every answer was 0."""
    x = lsrl.Input(3, name="x", bounds=(-5, 5))
    cond = lsrl.ReLU(x[0])
    with pytest.raises(lsrl.LsrlError, match=r"need mu >= 2.*got mu=1") as caught:
        lsrl.f_ifelse(cond, x[1], x[2], variant=variant, mu=1)
    _one_line(caught.value)
    xs = np.array([[1, 3, -2], [0, 3, -2], [1, -4, 5], [0, -4, 5]], dtype=object)
    selected = lsrl.ForEach(lsrl.f_ifelse(cond, x[1], x[2], variant=variant, lambda_=100, mu=2))(xs, exact=True)
    assert [row[0] for row in selected] == [3, -2, -4, 5]  # t where cond = 1, f where it is 0


@pytest.mark.parametrize("mu", [0, -1000, float("nan"), float("inf"), "1000", None])
def test_mu_must_be_a_positive_number(mu):
    x = lsrl.Input(1, name="x")
    for build in (lambda: lsrl.f_step(x, mu), lambda: lsrl.f_larger(x, 1, mu), lambda: lsrl.f_bump(x, 0, 1, mu),
                  lambda: lsrl.f_ifelse(x, x, x * 0, mu=mu)):
        with pytest.raises(lsrl.LsrlError, match="mu"):
            build()


@pytest.mark.parametrize("lb,ub", [(1, 0), (2, 2), ([0, 3], [1, 2]), (5, -5)])
def test_f_bump_with_its_lower_edge_at_or_above_its_upper_edge_is_refused(lb, ub):
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.LsrlError, match="lb must lie below ub") as caught:
        lsrl.f_bump(x, lb, ub)
    _one_line(caught.value)


def test_f_bump_edges_that_are_nodes_are_checked_by_their_declared_bounds():
    edges = lsrl.Input(2, name="edges", bounds=([5, 0], [9, 4]))  # lb in [5, 9], ub in [0, 4]: never below
    with pytest.raises(lsrl.LsrlError, match="lb must lie below ub"):
        lsrl.f_bump(edges[0], edges[0], edges[1])
    overlapping = lsrl.Input(2, name="overlapping", bounds=([0, 1], [3, 4]))
    lsrl.f_bump(overlapping[0], overlapping[0], overlapping[1])  # may lie below: accepted


def test_a_valid_bump_keeps_its_values():
    x = lsrl.Input(1, name="x")
    prog = lsrl.ForEach(lsrl.f_bump(x, 1, 3))
    assert prog([[0], [2], [3], [4]], exact=True).reshape(-1).tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize("tolerance", [-1, 0, -0.5, float("nan"), "0.5", None, 0.0005])
def test_f_eq_tolerance_must_be_positive_and_at_least_the_step_width(tolerance):
    x = lsrl.Input(1, name="x")
    with pytest.raises(lsrl.LsrlError, match="tolerance") as caught:
        lsrl.f_eq(x, 1, tolerance=tolerance)
    _one_line(caught.value)


def test_f_eq_with_a_valid_tolerance_is_unchanged():
    x = lsrl.Input(1, name="x")
    prog = lsrl.ForEach(lsrl.f_eq(x, 2, tolerance=0.001))  # exactly 1/mu
    assert prog([[1], [2], [3]], exact=True).reshape(-1).tolist() == [0, 1, 0]


# ---------------------------------------------------------------------- matrices
@pytest.mark.parametrize("bad", [None, "", "1", b"1", datetime.date(2020, 1, 1), object(), {}])
def test_a_matrix_entry_that_is_no_number_is_refused_not_read_as_zero(bad):
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.DimensionError, match="expected a number|rectangular") as caught:
        lsrl.Linear(x, [[1, bad]])
    _one_line(caught.value)
    with pytest.raises(lsrl.DimensionError):
        lsrl.Linear(x, [[1, 0]], b=[bad])
    with pytest.raises(lsrl.DimensionError):
        lsrl.LinState(x, [[1]], [[1, 0]], init_state=[bad])


@pytest.mark.parametrize("array", [
    np.array([["", "1"]]), np.array([[b"0", b"1"]]), np.array([["2020-01-01", "1970-01-01"]], dtype="datetime64[D]"),
    np.ma.masked_array([[1.0, 2.0]], mask=[[0, 1]]),
])
def test_a_matrix_array_of_text_dates_or_with_a_mask_is_refused(array):
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.DimensionError):
        lsrl.Linear(x, array)


def test_valid_matrices_keep_their_exact_entries():
    x = lsrl.Input(3, name="x")
    node = lsrl.Linear(x, np.array([[0.1, Fraction(1, 3), 2]], dtype=object), b=[np.float32(0.5)])
    assert node.A.to_fractions() == [[Fraction(1, 10), Fraction(1, 3), 2]] and node.b.to_fractions() == [Fraction(1, 2)]
    assert lsrl.Linear(x, np.array([[True, False, True]])).A.to_fractions() == [[1, 0, 1]]


# ---------------------------------------------------------------------- sequences
def _program():
    x = lsrl.Input(1, name="x")
    return lsrl.ForEach(x * 2)


NOT_NUMBERS = [
    ("masked", np.ma.masked_array([[1.0], [2.0]], mask=[[0], [1]])),
    ("datetime", np.array([["2020-01-01"]], dtype="datetime64[D]")),
    ("timedelta", np.array([[5]], dtype="timedelta64[s]")),
    ("text", [["1.5"]]),
    ("text array", np.array([["1.5"]])),
    ("bytes", np.array([[b"1"]])),
    ("None", [[None]]),
    ("objects", np.array([[object()]], dtype=object)),
    ("dates in a list", [[datetime.date(2020, 1, 1)]]),
]


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("label,xs", NOT_NUMBERS, ids=[n[0] for n in NOT_NUMBERS])
def test_a_sequence_of_non_numbers_is_refused(label, xs, exact):
    prog = _program()
    model = lsrl.compile(prog, backend="exact" if exact else "float")
    for run in (prog, model):
        with pytest.raises(lsrl.SequenceError) as caught:
            run(xs, exact=exact)
        _one_line(caught.value)


def test_a_huge_python_int_is_refused_in_float_and_exact_in_exact_mode():
    prog = _program()
    with pytest.raises(lsrl.SequenceError, match="beyond float64's range") as caught:
        prog([[10**400]])
    _one_line(caught.value)
    with pytest.raises(lsrl.SequenceError):
        lsrl.compile(prog)([[-(10**400)], [1]])
    assert prog([[10**400]], exact=True)[0, 0] == 2 * 10**400
    assert lsrl.compile(prog)([[10**400]], exact=True)[0, 0] == 2 * 10**400
    assert prog([[10**300]])[0, 0] == 2e300  # within float64's range: read as before


def test_valid_sequences_read_as_before():
    prog = _program()
    assert prog([[1], [2.5]]).tolist() == [[2.0], [5.0]]
    assert prog(np.array([[True], [False]])).tolist() == [[2.0], [0.0]]
    assert prog(np.array([[Fraction(1, 3)]], dtype=object), exact=True)[0, 0] == Fraction(2, 3)
    assert prog(np.array([[3]], dtype=np.int8)).tolist() == [[6.0]]


# ---------------------------------------------------------------------- prompts
def test_a_prompt_with_a_repeated_key_is_refused():
    """The reported example: query (1, 2), then (1, 2) -> (3, 4) and (1, 2) -> (5, 6): the network
    answers (8, 10), the sum."""
    prompt = [[1], [2], [1], [2], [3], [4], [1], [2], [5], [6]]
    with pytest.raises(lsrl.LsrlError, match=r"the key \[1, 2\] appears more than once") as caught:
        check_discrete_prompt(prompt, 2, vocabulary=9)
    _one_line(caught.value)
    with pytest.raises(lsrl.LsrlError, match="more than once"):
        check_discrete_prompt(np.array([prompt, prompt]), 2)
    check_discrete_prompt([[1], [2], [1], [2], [3], [4], [2], [1], [5], [6]], 2, vocabulary=9)


class _Pairs(Mapping):
    """A mapping whose items repeat a key (a multidict)."""

    def __init__(self, pairs):
        self.pairs = pairs

    def __getitem__(self, key):
        return dict(self.pairs)[key]

    def __iter__(self):
        return iter(k for k, _ in self.pairs)

    def __len__(self):
        return len(self.pairs)

    def items(self):
        return list(self.pairs)


@pytest.mark.parametrize("pairs", [
    [((1, 2), (3, 4)), ((1, 2), (5, 6))],
    [((1, 2), (3, 4)), ((1.0, 2.0), (5, 6))],
    [((0,), (1,)), ((np.int64(0),), (2,))],
])
def test_discrete_prompt_refuses_a_repeated_key_naming_it(pairs):
    with pytest.raises(lsrl.LsrlError, match="appears more than once") as caught:
        discrete_prompt(_Pairs(pairs))
    assert str(tuple(int(t) for t in pairs[0][0])) in _one_line(caught.value)


@pytest.mark.parametrize("mapping,match", [
    ({}, "empty"), ({(): ()}, "empty"), ({(1,): (None,)}, "non-negative integers"), ({(1,): ("2",)}, "non-negative"),
    ({(-1,): (2,)}, "non-negative"), ({(1.5,): (2,)}, "non-negative"), ({(1,): 2}, "sequence of tokens"),
    ([((1,), (2,))], "dict"), ({(1,): (2, 3)}, "one length"),
])
def test_discrete_prompt_refuses_bad_mappings(mapping, match):
    with pytest.raises(lsrl.LsrlError, match=match) as caught:
        discrete_prompt(mapping)
    _one_line(caught.value)


def test_discrete_prompt_keeps_its_output():
    assert discrete_prompt({(1, 2): (3, 4), (2, 1): (5, 6)}, query=(2, 1)).reshape(-1).tolist() == [
        2, 1, 1, 2, 3, 4, 2, 1, 5, 6]


@pytest.mark.parametrize("cells", [0, -1, 1.5, float("nan"), None, "3", True])
def test_continuous_prompt_refuses_a_bad_cells_per_dim(cells):
    with pytest.raises(lsrl.LsrlError, match="cells_per_dim") as caught:
        continuous_prompt(lambda c: [0.0], 1, 1, cells)
    _one_line(caught.value)


@pytest.mark.parametrize("name,call", [
    ("d_in", lambda: continuous_prompt(lambda c: [0.0], 0, 1, 2)),
    ("d_out", lambda: continuous_prompt(lambda c: [0.0], 1, -1, 2)),
    ("d_in", lambda: continuous_prompt(lambda c: [0.0], 2.0, 1, 2)),
    ("f", lambda: continuous_prompt(None, 1, 1, 2)),
    ("values", lambda: continuous_prompt(lambda c: [0.0, 1.0], 1, 1, 2)),
    ("not finite", lambda: continuous_prompt(lambda c: [float("nan")], 1, 1, 2)),
    ("cells", lambda: continuous_prompt(lambda c: [0.0], 8, 1, 10)),
    ("d_out", lambda: continuous_query([0.5], 0)),
    ("d_in", lambda: continuous_approximator(0, 1)),
    ("d_out", lambda: continuous_approximator(1, float("nan"))),
    ("ifelse", lambda: continuous_approximator(1, 1, ifelse="nope")),
    ("value_bound", lambda: continuous_approximator(1, 1, "original", robust=True, value_bound=float("nan"))),
    ("value_bound", lambda: continuous_approximator(1, 1, "original", robust=True, value_bound=-2)),
    ("n", lambda: discrete_approximator(0)),
    ("n", lambda: discrete_approximator(-2)),
    ("n", lambda: discrete_approximator(1.5)),
    ("vocabulary", lambda: discrete_approximator(2, robust=True, vocabulary=-1)),
    ("vocabulary", lambda: discrete_approximator(2, robust=True, vocabulary=float("nan"))),
    ("counter", lambda: discrete_approximator(2, counter="nope")),
    ("ifelse", lambda: discrete_approximator(2, ifelse="nope")),
    ("n", lambda: check_discrete_prompt([[1], [1], [2]], 0)),
    ("vocabulary", lambda: check_discrete_prompt([[1], [1], [2]], 1, vocabulary=-3)),
])
def test_prompt_builders_and_programs_refuse_bad_parameters(name, call):
    with pytest.raises(lsrl.LsrlError, match=name) as caught:
        call()
    _one_line(caught.value)


# ---------------------------------------------------------------------- value_bounds
def _counter():
    x = lsrl.Input(1, name="x", bounds=(0, 1))
    return lsrl.LinState(lsrl.f_constant(x, 1), [[1]], [[1]], name="counter")


@pytest.mark.parametrize("length", [0, -1, 2.5, float("nan"), "10", True, 1e7])
def test_value_bounds_refuses_a_max_length_that_is_no_positive_integer(length):
    with pytest.raises(lsrl.LsrlError, match="max_length") as caught:
        lsrl.value_bounds(_counter(), max_length=length)
    _one_line(caught.value)


def test_value_bounds_of_a_long_declared_length_is_closed_form():
    """10^7 steps took 9 s, 10^100 never returned: the rising tail is one power by squaring."""
    counter = _counter()
    start = time.perf_counter()
    assert lsrl.value_bounds(counter, max_length=10**7).high == [10**7]
    assert lsrl.value_bounds(counter, max_length=10**100).high == [10**100]
    x = lsrl.Input(1, name="x", bounds=(0, 1))
    triangle = lsrl.LinState(x, [[1, 0], [1, 1]], [[1], [0]], name="triangle")  # polynomial growth
    assert lsrl.value_bounds(triangle, max_length=10**100).finite
    doubling = lsrl.LinState(x, [[2]], [[1]], init_state=[1], name="doubling")
    assert lsrl.value_bounds(doubling, max_length=200).high == [2**201 - 1]  # s_t in [2^t, 2^(t+1) - 1]
    assert lsrl.value_bounds(doubling, max_length=10**100).high == [float("inf")]  # more than 2^20 bits
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("length", [1, 2, 3, 10, 57])
def test_value_bounds_with_short_lengths_are_the_hull_iteration(length):
    """The closed form gives exactly the hull iterated step by step (as before) on a mixed-sign state."""
    x = lsrl.Input(1, name="x", bounds=(-1, 2))
    state = lsrl.LinState(x, [[1, 0.5], [-1, 1]], [[1], [2]], b=[1, 0], init_state=[3, -1])
    low, high = lsrl.value_bounds(state, max_length=length)
    rows = B._interval_matrix(state.A, 2)
    u_low, u_high = B._affine(state.B, state.b, *lsrl.value_bounds(x))
    c = {0: u_high[0], 1: u_high[1], 2: -u_low[0], 3: -u_low[1]}
    init = [B.to_rational(v) for v in state.init_state.values()]
    hull = B._step(rows, rows, {0: init[0], 1: init[1], 2: -init[0], 3: -init[1]}, c)  # the first output
    for _ in range(length - 1):
        hull = {i: max(hull[i], v) for i, v in B._step(rows, rows, hull, c).items()}
    assert high == [hull[0], hull[1]] and low == [-hull[2], -hull[3]]


# ---------------------------------------------------------------------- fusion
def test_fusing_extreme_constants_keeps_the_interpreters_answer():
    """Linear(Linear(x, 1e200), 1e200) at 1e-300: the interpreter gives 1e100; fused, the float backend
    gave inf and the exact one a raw OverflowError."""
    x = lsrl.Input(1, name="x")
    prog = lsrl.ForEach(lsrl.Linear(lsrl.Linear(x, [[1e200]]), [[1e200]]))
    assert prog([[1e-300]])[0, 0] == pytest.approx(1e100, rel=1e-12)
    for backend in ("exact", "float"):
        model = lsrl.compile(prog, backend=backend)
        assert model([[1e-300]])[0, 0] == pytest.approx(1e100, rel=1e-12)
        assert np.isfinite(model.layers[-1].A.to_numpy()).all()
    assert lsrl.compile(prog)([[1e-300]], exact=True)[0, 0] == 10**100


@pytest.mark.parametrize("first,second,xs", [
    (1e200, 1e200, 1e-300), (1e-200, 1e-200, 1e300), (1e300, 1e10, 1e-300), (-1e200, 1e200, 1e-300),
])
def test_fusions_that_leave_float64s_range_are_skipped(first, second, xs):
    x = lsrl.Input(1, name="x")
    for wrap in (lambda node: node, lambda node: lsrl.LinState(node, [[0.5]], [[1]])):
        prog = lsrl.ForEach(wrap(lsrl.Linear(lsrl.Linear(x, [[first]]), [[second]])))
        reference = prog([[xs]])
        assert np.isfinite(reference).all() and reference[0, 0] != 0
        for backend in ("exact", "float"):
            out = lsrl.compile(prog, backend=backend)([[xs]])
            np.testing.assert_allclose(out, reference, rtol=1e-12)


def test_a_state_reading_an_extreme_linear_keeps_its_answer():
    x = lsrl.Input(1, name="x")
    prog = lsrl.ForEach(lsrl.LinState(lsrl.Linear(x, [[1e200]]), [[1]], [[1e200]]))
    for backend in ("exact", "float"):
        np.testing.assert_allclose(lsrl.compile(prog, backend=backend)([[1e-300], [1e-300]]), [[1e100], [2e100]])


def test_ordinary_fusions_still_happen():
    x = lsrl.Input(2, name="x")
    prog = lsrl.ForEach(lsrl.Linear(lsrl.Linear(x, [[1, 2], [3, 4]], [1, 1]), [[0.5, 0.25]]))
    for backend in ("exact", "float"):
        assert len(lsrl.compile(prog, backend=backend).layers) == 1


def test_an_exact_weight_beyond_float64_raises_a_clear_error_on_a_float_run():
    x = lsrl.Input(1, name="x")
    prog = lsrl.ForEach(lsrl.Linear(x, [[10**400]]))
    model = lsrl.compile(prog)
    assert model([[1]], exact=True)[0, 0] == 10**400
    with pytest.raises(lsrl.BackendError, match="beyond float64's range") as caught:
        model([[1]])
    _one_line(caught.value)
    with pytest.raises(lsrl.LsrlError, match="beyond float64's range"):
        lsrl.compile(prog, backend="float")
