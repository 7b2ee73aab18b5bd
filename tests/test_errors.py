"""Errors are for people: every bad program / bad sequence raises an ``lsrl.LsrlError`` subclass
whose message names the offending node by its name.  Also: ``lsrl.compile`` never mutates the
user's program."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse

import lsrl


def _eye(n):
    return [[int(i == j) for j in range(n)] for i in range(n)]


def _assert_names(excinfo, *names):
    msg = str(excinfo.value)
    for name in names:
        assert name in msg, f"message {msg!r} does not name {name!r}"


# ---------------------------------------------------------------------- hierarchy
def test_error_classes_form_a_hierarchy():
    assert issubclass(lsrl.LsrlError, Exception)
    for cls in (lsrl.DimensionError, lsrl.GraphError, lsrl.SequenceError):
        assert issubclass(cls, lsrl.LsrlError)
    assert not issubclass(lsrl.DimensionError, lsrl.GraphError)
    assert not issubclass(lsrl.GraphError, lsrl.SequenceError)


# ---------------------------------------------------------------------- Linear
@pytest.mark.parametrize("fmt", ["list", "fractions", "numpy", "numpy_object", "sparse"])
def test_linear_wrong_number_of_columns(fmt):
    x = lsrl.Input(3, name="x")
    A = [[1, 2], [3, 4]]                       # 2 columns, input has 3
    if fmt == "fractions":
        A = [[Fraction(v, 3) for v in row] for row in A]
    elif fmt == "numpy":
        A = np.array(A, dtype=np.float64)
    elif fmt == "numpy_object":
        A = np.array([[Fraction(v) for v in row] for row in A], dtype=object)
    elif fmt == "sparse":
        A = scipy.sparse.csr_matrix(np.array(A, dtype=np.float64))
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.Linear(x, A, name="bad")
    _assert_names(e, "bad")


def test_linear_wrong_bias_length():
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.Linear(x, [[1, 0], [0, 1]], b=[1, 2, 3], name="bad_bias")
    _assert_names(e, "bad_bias")


def test_linear_ragged_matrix():
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.LsrlError) as e:
        lsrl.Linear(x, [[1, 0], [1]], name="ragged")
    _assert_names(e, "ragged")


def test_linear_after_concat_dimension_mismatch():
    x = lsrl.Input(3, name="x")
    y = lsrl.ReLU(x, name="y")
    z = lsrl.Linear(x, [[1, 1, 1], [1, -1, 0]], name="z")
    c = lsrl.Concat([y, z], name="cat")          # dim 3 + 2 = 5
    assert c.dim == 5
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.Linear(c, [[1, 2, 3, 4]], name="after_cat")
    _assert_names(e, "after_cat")


def test_sugar_add_of_different_dims():
    left = lsrl.Linear(lsrl.Input(3, name="x"), _eye(3), name="left_op")
    right = left[0:2]
    right_named = lsrl.ReLU(right, name="right_op")
    with pytest.raises(lsrl.DimensionError) as e:
        left + right_named
    msg = str(e.value)
    assert "left_op" in msg or "right_op" in msg, msg


# ---------------------------------------------------------------------- LinState
def test_linstate_non_square_A():
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.LinState(x, [[1, 0, 0], [0, 1, 0]], [[1, 0], [0, 1]], name="state_a")
    _assert_names(e, "state_a")


def test_linstate_B_wrong_columns():
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.LinState(x, _eye(2), [[1, 0, 0], [0, 1, 0]], name="state_b_cols")
    _assert_names(e, "state_b_cols")


def test_linstate_B_wrong_rows():
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.LinState(x, _eye(2), [[1, 0], [0, 1], [1, 1]], name="state_b_rows")
    _assert_names(e, "state_b_rows")


def test_linstate_wrong_bias():
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.LinState(x, _eye(2), _eye(2), b=[1, 2, 3], name="state_bias")
    _assert_names(e, "state_bias")


@pytest.mark.parametrize("init", [[1, 2, 3], [[1], [2], [3]], np.zeros(3), np.zeros((2, 2)), [1]])
def test_linstate_wrong_init_state(init):
    x = lsrl.Input(2, name="x")
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.LinState(x, _eye(2), _eye(2), init_state=init, name="state_init")
    _assert_names(e, "state_init")


def test_a_number_is_broadcast_to_a_vector():
    x = lsrl.Input(2, name="x")
    state = lsrl.LinState(x, _eye(2), _eye(2), init_state=3)
    assert state.init_state.to_fractions() == [3, 3]


# ---------------------------------------------------------------------- Multi / Concat
def test_multi_odd_length():
    x = lsrl.Input(3, name="x")
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.Multi(x, name="gate")
    _assert_names(e, "gate")


def test_multi_odd_length_after_concat():
    x = lsrl.Input(2, name="x")
    c = lsrl.Concat([x, x[0]], name="three")
    assert c.dim == 3
    with pytest.raises(lsrl.DimensionError) as e:
        lsrl.Multi(c, name="odd_gate")
    _assert_names(e, "odd_gate")


def test_concat_of_empty_list():
    with pytest.raises(lsrl.LsrlError) as e:
        lsrl.Concat([], name="empty_cat")
    _assert_names(e, "empty_cat")


# ---------------------------------------------------------------------- non-node inputs
_NOT_A_NODE = [np.ones(3), [1.0, 2.0, 3.0], "x", 3, None]


@pytest.mark.parametrize("thing", _NOT_A_NODE, ids=["ndarray", "list", "str", "int", "None"])
@pytest.mark.parametrize("kind", ["Linear", "ReLU", "LinState", "Multi", "Concat"])
def test_non_node_input(kind, thing):
    x = lsrl.Input(3, name="x")
    name = f"takes_{kind.lower()}"
    with pytest.raises(lsrl.LsrlError) as e:
        if kind == "Linear":
            lsrl.Linear(thing, _eye(3), name=name)
        elif kind == "ReLU":
            lsrl.ReLU(thing, name=name)
        elif kind == "LinState":
            lsrl.LinState(thing, _eye(3), _eye(3), name=name)
        elif kind == "Multi":
            lsrl.Multi(thing, name=name)
        else:
            lsrl.Concat([x, thing], name=name)
    _assert_names(e, name)


@pytest.mark.parametrize("thing", [np.ones(3), "out", 42, None], ids=["ndarray", "str", "int", "None"])
def test_foreach_of_non_node(thing):
    with pytest.raises(lsrl.LsrlError):
        lsrl.ForEach(thing)


# ---------------------------------------------------------------------- graph errors
def test_second_input():
    a = lsrl.Input(2, name="first_input")
    b = lsrl.Input(2, name="second_input")
    h = lsrl.Linear(a, _eye(2), name="h")
    g = lsrl.ReLU(b, name="g")
    c = lsrl.Concat([h, g], name="both")        # building it is fine; ForEach rejects it
    out = lsrl.Linear(c, [[1, 0, 1, 0]], name="out")
    with pytest.raises(lsrl.GraphError) as e:
        lsrl.ForEach(out)
    _assert_names(e, "first_input", "second_input")


def test_second_input_via_sugar():
    a = lsrl.Input(2, name="in_a")
    b = lsrl.Input(2, name="in_b")
    out = lsrl.ReLU(a + b, name="out")
    with pytest.raises(lsrl.GraphError) as e:
        lsrl.ForEach(out)
    _assert_names(e, "in_a", "in_b")


def test_cycle_through_concat():
    x = lsrl.Input(2, name="x")
    seed = lsrl.Linear(x, _eye(2), name="seed_lin")
    cat = lsrl.Concat([x, seed], name="cyc_cat")
    lin = lsrl.Linear(cat, [[1, 0, 1, 0], [0, 1, 0, 1]], name="cyc_lin")
    relu = lsrl.ReLU(lin, name="cyc_relu")
    out = lsrl.Linear(relu, [[1, 1]], name="out")
    lsrl.ForEach(out)                            # fine before the rewiring
    cat.replace_input(seed, relu)                # cyc_cat -> cyc_lin -> cyc_relu -> cyc_cat
    assert cat.inputs[1] is relu and cat.inputs[0] is x
    with pytest.raises(lsrl.GraphError) as e:
        lsrl.ForEach(out)
    msg = str(e.value)
    assert any(n in msg for n in ("cyc_cat", "cyc_lin", "cyc_relu")), msg


def test_cycle_through_linstate():
    # a LinState may not depend on its own output through the graph (paper, Sec. 3)
    x = lsrl.Input(1, name="x")
    state = lsrl.LinState(x, [[1]], [[1]], name="cyc_state")
    sq = lsrl.Multi(lsrl.Concat([state, state], name="cyc_pair"), name="cyc_square")
    out = lsrl.Concat([sq, x], name="out")       # the Input stays reachable after the rewiring
    lsrl.ForEach(out)
    state.replace_input(x, sq)                   # cyc_state -> cyc_pair -> cyc_square -> cyc_state
    with pytest.raises(lsrl.GraphError) as e:
        lsrl.ForEach(out)
    msg = str(e.value)
    assert any(n in msg for n in ("cyc_state", "cyc_pair", "cyc_square")), msg


def test_self_loop():
    x = lsrl.Input(2, name="x")
    a = lsrl.Linear(x, _eye(2), name="self_loop")
    out = lsrl.Concat([lsrl.ReLU(a, name="r"), x], name="out")
    a.replace_input(x, a)
    with pytest.raises(lsrl.GraphError) as e:
        lsrl.ForEach(out)
    _assert_names(e, "self_loop")


# ---------------------------------------------------------------------- sequence errors
def _small_program():
    x = lsrl.Input(3, name="tokens")
    count = lsrl.LinState(x, [[1]], [[1, 0, 0]], name="count")
    r = lsrl.ReLU(x - 1, name="r")
    g = lsrl.Multi(lsrl.Concat([count, x[1]], name="pair"), name="g")
    out = lsrl.Concat([r, g, count], name="out")
    return lsrl.ForEach(out)


@pytest.fixture(scope="module")
def runners():
    prog = _small_program()
    return {
        "program": prog,
        "exact_model": lsrl.compile(prog, backend="exact"),
        "float_model": lsrl.compile(prog, backend="float"),
    }


RUNNERS = ["program", "exact_model", "float_model"]
# exact=True is asked of the interpreter and of the exact-backend model only
RUN_MODES = [("program", False), ("program", True), ("exact_model", False), ("exact_model", True),
             ("float_model", False)]


@pytest.mark.slow
@pytest.mark.parametrize("runner,exact", RUN_MODES)
def test_good_sequences_run(runners, runner, exact):
    f = runners[runner]
    xs = np.array([[1, 2, 0], [0, 1, 1], [3, 0, 2], [1, 1, 1]], dtype=np.float64)
    assert np.asarray(f(xs, exact=exact)).shape == (4, 5)
    assert np.asarray(f(np.stack([xs, xs]), exact=exact)).shape == (2, 4, 5)


@pytest.mark.parametrize("runner,exact", RUN_MODES)
@pytest.mark.parametrize("shape", [(4, 5), (4, 2), (2, 4, 5), (4, 1)])
def test_wrong_last_dim(runners, runner, shape, exact):
    with pytest.raises(lsrl.SequenceError) as e:
        runners[runner](np.zeros(shape), exact=exact)
    _assert_names(e, "tokens", "3")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("shape", [(1, 2, 4, 3), ()], ids=["4d", "scalar"])
def test_wrong_rank(runners, runner, shape):
    with pytest.raises(lsrl.SequenceError) as e:
        runners[runner](np.zeros(shape))
    _assert_names(e, "tokens")


@pytest.mark.parametrize("runner,exact", RUN_MODES)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("batched", [False, True])
def test_non_finite_values(runners, runner, bad, exact, batched):
    xs = np.ones((4, 3))
    xs[2, 1] = bad
    if batched:
        xs = np.stack([np.zeros((4, 3)), xs])
    with pytest.raises(lsrl.SequenceError) as e:
        runners[runner](xs, exact=exact)
    _assert_names(e, "tokens")


@pytest.mark.parametrize("runner", ["program", "exact_model"])
def test_nan_inside_an_exact_object_array(runners, runner):
    xs = np.array([[Fraction(1, 2), 0, 1], [1, float("nan"), Fraction(2, 3)]], dtype=object)
    with pytest.raises(lsrl.SequenceError) as e:
        runners[runner](xs, exact=True)
    _assert_names(e, "tokens")


# ---------------------------------------------------------------------- compile is pure
def _weights(node):
    def fr(m):
        return None if m is None else m.to_fractions()

    if isinstance(node, lsrl.LinState):
        return ("LinState", fr(node.A), fr(node.B), fr(node.b), fr(node.init_state))
    if isinstance(node, lsrl.Linear):
        return ("Linear", fr(node.A), fr(node.b))
    return (type(node).__name__,)


def _snapshot(output):
    nodes, seen = [], set()
    stack = [output]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        nodes.append(n)
        stack.extend(n.inputs)
    return [(n, tuple(n.inputs), n.dim, n.name, _weights(n)) for n in nodes]


def _branchy_program():
    x = lsrl.Input(2, name="x")
    h = lsrl.Linear(x, [[1, Fraction(-1, 2)], [2, 1], [0, 1], [1, 1]], b=[0, 1, Fraction(1, 3), -1], name="h")
    r1 = lsrl.ReLU(h, name="r1")
    r2 = lsrl.ReLU(h, name="r2")
    s1 = lsrl.LinState(h, [[Fraction(1, 2), 0], [0, 1]], [[1, 0, 0, 0], [0, 0, 1, 1]],
                       b=[1, 0], init_state=[0, Fraction(1, 2)], name="s1")
    s2 = lsrl.LinState(h[0:2], _eye(2), _eye(2), name="s2")
    m1 = lsrl.Multi(h, name="m1")
    m2 = lsrl.Multi(h, name="m2")
    c1 = lsrl.Concat([h, r1], name="c1")
    c2 = lsrl.Concat([c1, h, h[3]], name="c2")
    l1 = lsrl.Linear(r1, [[1, 1, 1, 1]], name="l1")
    l2 = lsrl.Linear(l1, [[2], [-1]], name="l2")
    rr = lsrl.ReLU(lsrl.ReLU(r2, name="rr_inner"), name="rr")
    same = lsrl.Concat([s1, s1], name="same")
    out = lsrl.Concat([r2, s1, s2, m1, m2, c2, l2, rr, same, 2 * x - 1], name="out")
    return lsrl.ForEach(out), out


@pytest.mark.parametrize("backend", ["exact", "float"])
def test_compile_does_not_mutate_the_program(backend):
    prog, out = _branchy_program()
    xs = np.array([[Fraction(1, 2), -1], [2, Fraction(1, 3)], [0, 0], [-3, 1]], dtype=object)
    before_out = [Fraction(str(v)) for v in np.asarray(prog(xs, exact=True), dtype=object).ravel()]
    before = _snapshot(out)
    model = lsrl.compile(prog, backend=backend)
    lsrl.compile(prog, backend=backend)          # twice: still untouched
    after = _snapshot(out)
    assert len(after) == len(before)
    for (n0, ins0, d0, name0, w0), (n1, ins1, d1, name1, w1) in zip(before, after):
        assert n0 is n1
        assert len(ins0) == len(ins1) and all(a is b for a, b in zip(ins0, ins1)), f"inputs of {name0} changed"
        assert (d0, name0) == (d1, name1)
        assert w0 == w1, f"weights of {name0} changed"
    assert [Fraction(str(v)) for v in np.asarray(prog(xs, exact=True), dtype=object).ravel()] == before_out
    if backend == "exact":
        got = [Fraction(str(v)) for v in np.asarray(model(xs, exact=True), dtype=object).ravel()]
        assert got == before_out


def test_exact_run_of_float_weights_names_the_node():
    x = lsrl.Input(1, name="x")
    float_weights = lsrl.numbers.FLOAT.matrix([[2.0]])
    program = lsrl.ForEach(lsrl.Linear(x, float_weights, name="float_layer"))
    with pytest.raises(lsrl.BackendError) as e:
        program([[1]], exact=True)
    _assert_names(e, "float_layer")
    assert program([[1.0]])[0, 0] == 2.0
