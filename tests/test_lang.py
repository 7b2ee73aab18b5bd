from fractions import Fraction

import numpy as np

import lsrl
from conftest import as_fractions


def test_interpreter_follows_the_equations_of_each_node():
    x = lsrl.Input(2, name="x")
    lin = lsrl.Linear(x, [[1, -1], [2, 0]], b=[0.5, -1])
    state = lsrl.LinState(lin, A=[[0.5, 0], [1, 1]], B=[[1, 0], [0, 1]], b=[0, 1], init_state=[1, 0])
    gate = lsrl.Multi(lsrl.Concat([lsrl.ReLU(state), lin]))
    program = lsrl.ForEach(gate)
    xs = np.array([[1.0, 2.0], [-3.0, 0.5], [0.25, 0.25]])
    # the same recurrence written out with numpy
    s = np.array([1.0, 0.0])
    expected = []
    for xt in xs:
        h = np.array([[1, -1], [2, 0]]) @ xt + [0.5, -1]
        s = np.array([[0.5, 0], [1, 1]]) @ s + h + [0, 1]
        expected.append(np.maximum(s, 0) * h)
    np.testing.assert_allclose(program(xs), np.array(expected), rtol=0, atol=1e-12)
    exact = program(xs, exact=True)
    assert as_fractions(exact)[2][0] == Fraction(str(expected[2][0]))


def test_batches_give_the_same_as_single_sequences():
    x = lsrl.Input(1)
    program = lsrl.ForEach(lsrl.LinState(x, [[1]], [[1]]))
    batch = np.array([[[1], [2]], [[3], [4]]])
    out = program(batch)
    assert out.shape == (2, 2, 1)
    np.testing.assert_array_equal(out[1], program(batch[1]))


def test_operator_sugar_builds_linear_nodes():
    x = lsrl.Input(3, name="x")
    y = x[0:2] + 2 * x[1:3] - 1
    z = -(y / 4)
    program = lsrl.ForEach(lsrl.Concat([z, x[2]]))
    xs = np.array([[1, 2, 3]])
    expected = [-(1 + 4 - 1) / 4, -(2 + 6 - 1) / 4, 3]
    np.testing.assert_allclose(program(xs)[0], expected)
    assert isinstance(y, lsrl.Linear)


def test_value_bounds_follow_declared_input_bounds():
    x = lsrl.Input(2, bounds=(0, 1))
    relu = lsrl.ReLU(lsrl.Linear(x, [[1, -1]], b=[-2]))
    counter = lsrl.LinState(lsrl.f_constant(x, 1), [[1]], [[1]])
    low, high = lsrl.value_bounds(relu)
    assert low == [0] and high == [0]
    low, high = lsrl.value_bounds(counter)
    assert low[0] == 1 and high[0] == float("inf")
    decaying = lsrl.LinState(x[0], [[Fraction(1, 2)]], [[1]])
    low, high = lsrl.value_bounds(decaying)
    assert low[0] == 0 and high[0] > 1


def test_exact_outputs_convert_to_fractions():
    x = lsrl.Input(1)
    program = lsrl.ForEach(x / 3)
    out = program([[1], [Fraction(1, 2)]], exact=True)
    assert as_fractions(out) == [[Fraction(1, 3)], [Fraction(1, 6)]]
