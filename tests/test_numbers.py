from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

import lsrl
from lsrl.numbers import EXACT, FLOAT, to_rational


def test_floats_are_read_as_their_shortest_decimal():
    assert Fraction(str(to_rational(0.1))) == Fraction(1, 10)
    assert Fraction(str(to_rational(1e-5))) == Fraction(1, 100000)
    assert Fraction(str(to_rational(np.float64(2.5)))) == Fraction(5, 2)
    assert Fraction(str(to_rational(Fraction(-7, 3)))) == Fraction(-7, 3)


@pytest.mark.parametrize("given", [
    [[1, 0.5], [Fraction(1, 3), -2]],
    np.array([[1, 0.5], [1 / 3, -2]]),
    sp.csr_matrix(np.array([[1, 0.5], [0, -2]])),
])
def test_matrix_inputs_of_every_kind(given):
    matrix = EXACT.matrix(given)
    dense = given.toarray() if sp.issparse(given) else np.array(given, dtype=float)
    assert matrix.shape == (2, 2)
    np.testing.assert_array_equal(matrix.to_numpy(), dense)
    assert matrix.to_fractions()[0][1] == Fraction(1, 2)


def test_scalar_matrix_and_vector_shapes():
    assert EXACT.matrix(3).shape == (1, 1)
    vector = EXACT.vector([1, 2, 3], 3)
    assert vector.shape == (3,)
    assert vector.to_fractions() == [1, 2, 3]


def test_algebra_matches_numpy_in_both_backends():
    generator = np.random.default_rng(0)
    left = generator.integers(-3, 4, size=(4, 5)) * (generator.random((4, 5)) < 0.5)
    right = generator.integers(-3, 4, size=(5, 3))
    for backend in (EXACT, FLOAT):
        a, b = backend.matrix(left), backend.matrix(right)
        np.testing.assert_array_equal((a @ b).to_numpy(), left @ right)
        np.testing.assert_array_equal((a + a.scale(2)).to_numpy(), 3 * left)
        np.testing.assert_array_equal(backend.vstack([a, a]).to_numpy(), np.vstack([left, left]))
        np.testing.assert_array_equal(backend.hstack([a, a]).to_numpy(), np.hstack([left, left]))
        assert a.nnz == np.count_nonzero(left)


def test_exact_arithmetic_stays_exact():
    third = EXACT.matrix([[Fraction(1, 3)]])
    product = third @ third @ EXACT.matrix([[9]])
    assert product.to_fractions() == [[Fraction(1)]]


def test_float_matrices_refuse_to_pretend_to_be_exact():
    with pytest.raises(lsrl.BackendError):
        FLOAT.matrix([[1]]).to_fractions()


def test_non_finite_weights_are_rejected():
    with pytest.raises(lsrl.DimensionError):
        EXACT.matrix([[float("nan")]])
