import itertools
from fractions import Fraction

import numpy as np
import pytest

import lsrl
from conftest import as_fractions


def run_exact(output, rows):
    return as_fractions(lsrl.ForEach(output)(rows, exact=True))


def step_reference(x, mu):
    return max(0, mu * x) - max(0, mu * x - 1)


@pytest.mark.parametrize("mu", [1, 10, 1000])
def test_f_step_is_the_ramp_of_the_paper(mu):
    x = lsrl.Input(1)
    values = [Fraction(v, 4000) for v in range(-8000, 8000, 37)]
    out = run_exact(lsrl.f_step(x, mu), [[v] for v in values])
    assert [o[0] for o in out] == [step_reference(v, mu) for v in values]


def test_logic_on_booleans():
    x = lsrl.Input(2)
    a, b = x[0], x[1]
    outputs = lsrl.Concat([lsrl.f_and(a, b), lsrl.f_or(a, b), lsrl.f_not(a), lsrl.f_eq(a, b)])
    rows = [[p, q] for p, q in itertools.product([0, 1], repeat=2)]
    out = run_exact(outputs, rows)
    assert out == [[p & q, p | q, 1 - p, int(p == q)] for p, q in rows]


def test_comparisons_and_bump():
    x = lsrl.Input(1)
    outputs = lsrl.Concat([lsrl.f_larger(x, 2), lsrl.f_smaller(x, 2), lsrl.f_bump(x, 1, 3)])
    values = [Fraction(v, 2) for v in range(-2, 10)]
    out = run_exact(outputs, [[v] for v in values])
    assert out == [[int(v > 2), int(v < 2), int(1 < v <= 3)] for v in values]


def test_relu_identity_is_the_identity():
    x = lsrl.Input(3)
    rows = [[Fraction(-5, 3), 0, Fraction(7, 2)], [1, -1, 0]]
    assert run_exact(lsrl.f_relu_identity(x), rows) == [[Fraction(v) for v in r] for r in rows]


@pytest.mark.parametrize("divisor", [1, 2, 5, 7])
def test_permutation_modulo_counter_is_exact(divisor):
    x = lsrl.Input(1)
    out = run_exact(lsrl.f_modulo_counter(x, divisor), [[0]] * (3 * divisor + 2))
    assert [o[0] for o in out] == [t % divisor for t in range(3 * divisor + 2)]


@pytest.mark.parametrize("divisor", [3, 6, 20])
def test_rotation_modulo_counter_in_float(divisor):
    x = lsrl.Input(1)
    program = lsrl.ForEach(lsrl.f_modulo_counter(x, divisor, method="rotation"))
    out = program(np.zeros((2000, 1)))[:, 0]
    np.testing.assert_allclose(out, np.arange(2000) % divisor, atol=1e-9)


@pytest.mark.parametrize("variant", lsrl.IFELSE_VARIANTS)
def test_ifelse_selects_in_every_variant(variant):
    x = lsrl.Input(5, name="x")
    cond, t, f = x[0], x[1:3], x[3:5]
    out = run_exact(lsrl.f_ifelse(cond, t, f, variant=variant), [
        [1, Fraction(-7, 2), 4, 9, -1],
        [0, Fraction(-7, 2), 4, 9, -1],
        [1, 0, Fraction(1, 3), -2, 2],
        [0, 0, Fraction(1, 3), -2, 2],
    ])
    assert out == [[Fraction(-7, 2), 4], [9, -1], [0, Fraction(1, 3)], [-2, 2]]


def _relu_units(node):
    return sum(n.dim for n in lsrl.ForEach(node).nodes if isinstance(n, lsrl.ReLU))


def test_optimized_variants_use_the_value_range_analysis():
    x = lsrl.Input(2, bounds=([0, 0], [1, None]))  # cond in [0, 1], t >= 0
    cond, t = x[0], x[1]
    zero = t * 0
    for plain, optimized in [("original", "optimized"), ("step", "step_optimized")]:
        full = _relu_units(lsrl.f_ifelse(cond, t, zero, variant=plain))
        lean = _relu_units(lsrl.f_ifelse(cond, t, zero, variant=optimized))
        assert full - lean == 3  # f == 0 drops two terms, t >= 0 drops one
    full = lsrl.ForEach(lsrl.f_ifelse(cond, t, zero, variant="multiplicative")).output
    lean = lsrl.ForEach(lsrl.f_ifelse(cond, t, zero, variant="multiplicative_optimized")).output
    assert full.inputs[0].dim == 2 and lean.inputs[0].dim == 1  # one product instead of two
    # an unbounded t keeps its negative term
    free = lsrl.Input(2)
    assert _relu_units(lsrl.f_ifelse(free[0], free[1], free[1] * 0, variant="optimized")) == 2


def test_scalar_condition_is_broadcast():
    x = lsrl.Input(4)
    out = run_exact(lsrl.f_ifelse(x[0], x[1:4], x[1:4] * 0, variant="step"), [[1, 1, 2, 3], [0, 1, 2, 3]])
    assert out == [[1, 2, 3], [0, 0, 0]]


def test_auto_lambda_comes_from_the_value_range_analysis():
    x = lsrl.Input(3, bounds=([0, -5, 0], [1, 5, 2]))
    out = run_exact(lsrl.f_ifelse(x[0], x[1], x[2], variant="original", lambda_="auto"), [[1, -5, 2], [0, 5, 2]])
    assert out == [[-5], [2]]
    unbounded = lsrl.Input(2)
    with pytest.raises(lsrl.LsrlError, match="unbounded"):
        lsrl.f_ifelse(unbounded[0], unbounded[1], unbounded[1] * 0, lambda_="auto")
