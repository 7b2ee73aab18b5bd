"""Linear logic: types, the type checker, and denotations against independent computations."""

import itertools
import random
from fractions import Fraction

import pytest
import torch

from lsrl.llrnn.logic import (
    ONE, Atom, Bang, Combination, Const, Copy, Derelict, Discard, IllTypedTerm, Lam, LinearityError, Lolli,
    OperatorPolynomial, Pair, Promote, Sum, Var, binary, bint_type, denote, dirac, dual, endo, eval_term, feed,
    higher_order_master, int_type, lam, newfeed, nl, numeral, operator_polynomial, paper_feed, polynomial, psi,
    repeat, show, to_matrix, type_of,
)
from lsrl.llrnn.logic.types import Tensor

A = Atom("A")
W = Atom("W")


def random_matrix(n=4, seed=0):
    return torch.randn(n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def rotation(n):
    return torch.eye(n, dtype=torch.float64).roll(1, dims=0)


def power(matrix, n):
    return torch.linalg.matrix_power(matrix, n)


def word_product(word, alpha, beta):
    """``⟦S⟧(α, β)`` computed directly: the first letter acts first."""
    result = torch.eye(alpha.shape[0], dtype=alpha.dtype)
    for letter in word:
        result = (alpha if letter == "0" else beta) @ result
    return result


# ---- types ---------------------------------------------------------------------------------------


def test_types_print_as_in_the_paper():
    assert str(int_type(A)) == "!(A ⊸ A) ⊸ A ⊸ A"
    assert str(bint_type(A)) == "!(A ⊸ A) ⊸ !(A ⊸ A) ⊸ A ⊸ A"
    assert str(dual(W)) == "W ⊸ 1"
    assert str(Lolli(Lolli(A, A), A)) == "(A ⊸ A) ⊸ A"
    assert str(Tensor(dual(W), A)) == "(W ⊸ 1) ⊗ A"


def test_numeral_two_is_eq_2_12_and_001_is_example_2_4():
    # the paper prints "(λq.(copy q as q',q'' in (λz.(derelict(q'') (derelict(q') z)))))"
    assert show(numeral(2, A)) == "(λq.(copy q as q', q'' in (λz.(derelict(q'') (derelict(q') z)))))"
    assert type_of(numeral(2, A)) == int_type(A)
    # the paper's 001 names the copies r, s where we write q', q''
    assert show(binary("001", A)) == "(λq.(λp.(copy q as q', q'' in (λz.(derelict(p) (derelict(q'') (derelict(q') z)))))))"


@pytest.mark.parametrize("n", range(7))
def test_numerals_denote_powers(n):
    alpha = random_matrix(seed=n)
    assert type_of(numeral(n, A)) == int_type(A)
    assert torch.allclose(to_matrix(nl(numeral(n, A), alpha), 4), power(alpha, n), atol=1e-10)
    assert operator_polynomial(numeral(n, A), "α") == OperatorPolynomial({("α",) * n: 1})


def test_001_denotes_beta_alpha_alpha():
    assert operator_polynomial(binary("001", A), "α", "β") == OperatorPolynomial({("β", "α", "α"): 1})
    assert repr(operator_polynomial(binary("001", A), "α", "β")) == "β·α·α"
    alpha, beta = random_matrix(seed=1), random_matrix(seed=2)
    assert torch.allclose(to_matrix(nl(binary("001", A), alpha, beta), 4), beta @ alpha @ alpha)


def test_random_binary_words():
    rng = random.Random(3)
    alpha, beta = random_matrix(seed=3), random_matrix(seed=4)
    for _ in range(12):
        word = "".join(rng.choice("01") for _ in range(rng.randrange(0, 7)))
        assert type_of(binary(word, A)) == bint_type(A)
        expected = word_product(word, alpha, beta)
        assert torch.allclose(to_matrix(nl(binary(word, A), alpha, beta), 4), expected, atol=1e-9), word
        assert operator_polynomial(binary(word, A), "0", "1") == OperatorPolynomial({tuple(reversed(word)): 1})


# ---- the programs of Sec. 4 ----------------------------------------------------------------------


def test_eval_is_linear_in_a_combination_of_numerals():
    powers = [0, 2, 3]
    lam_ = torch.rand(5, 3, dtype=torch.float64)  # a batch of 5 coefficient vectors
    alpha = random_matrix(seed=5)
    value = nl(eval_term(A), Combination(lam_, [numeral(n, A) for n in powers]), alpha)
    expected = sum(lam_[:, i, None, None] * power(alpha, n) for i, n in enumerate(powers))
    assert torch.allclose(to_matrix(value, 4), expected)
    symbolic = operator_polynomial(eval_term(A), "α", arguments=(Combination([2, 3], [numeral(1, A), numeral(2, A)]),))
    assert symbolic == OperatorPolynomial({("α",): 2, ("α", "α"): 3})


def feed_arguments(lam_, mu, kappa, words, pattern=range(3)):
    return (Combination(lam_, [numeral(i, W) for i in pattern]), Combination(mu, [numeral(j, W) for j in pattern]),
            Combination(kappa, [binary(word, W) for word in words]))


def test_feed_gives_the_formula_of_sec_4_2():
    words = ["0", "1", "01", "001", "11"]
    generator = torch.Generator().manual_seed(6)
    lam_, mu, kappa = (torch.rand(n, dtype=torch.float64, generator=generator) for n in (3, 3, len(words)))
    R = rotation(7)
    value = nl(feed(W), *feed_arguments(lam_, mu, kappa, words), R)
    expected = sum(lam_[i] * mu[j] * kappa[k] * power(R, word.count("0") * i + word.count("1") * j)
                   for i, j, (k, word) in itertools.product(range(3), range(3), enumerate(words)))
    assert torch.allclose(to_matrix(value, 7), expected)


def test_feed_on_basis_programs_is_one_word():
    for i, j, word in [(1, 2, "001"), (2, 0, "10"), (0, 1, "11"), (2, 2, "")]:
        arguments = (dirac(denote(numeral(i, W))), dirac(denote(numeral(j, W))), denote(binary(word, W)))
        a, b = word.count("0"), word.count("1")
        assert operator_polynomial(feed(W), "R", arguments=arguments) == OperatorPolynomial({("R",) * (a * i + b * j): 1})


def test_feed_with_a_dirac_of_the_sum_gives_the_unpolished_remark():
    words = ["001", "1"]
    lam_, mu, kappa = torch.tensor([0.2, 0.5, 0.3]), torch.tensor([0.6, 0.1, 0.3]), torch.tensor([0.7, 0.3])
    lam_, mu, kappa = (t.double() for t in (lam_, mu, kappa))
    R = rotation(5)
    value = nl(feed(W), *feed_arguments(lam_, mu, kappa, words), R, dirac_of_sum=True)
    P = sum(lam_[i] * power(R, i) for i in range(3))
    Q = sum(mu[j] * power(R, j) for j in range(3))
    expected = sum(kappa[k] * power(Q, w.count("1")) @ power(P, w.count("0")) for k, w in enumerate(words))
    assert torch.allclose(to_matrix(value, 5), expected)


def test_repeat_001_is_001001():
    assert type_of(repeat(A)) == Lolli(Bang(bint_type(A)), bint_type(A))
    repeated = operator_polynomial(repeat(A), "α", "β", arguments=(denote(binary("001", A)),))
    assert repeated == operator_polynomial(binary("001001", A), "α", "β")
    alpha, beta = random_matrix(seed=7), random_matrix(seed=8)
    value = nl(repeat(A), denote(binary("001", A)), alpha, beta)
    assert torch.allclose(to_matrix(value, 4), word_product("001001", alpha, beta))


@pytest.mark.parametrize("coefficients", [(0, 1), (0, 0, 1), (1, 2, 1), (2,), (0, 0, 0, 1), ()])
def test_polynomials_map_n_to_a_of_n(coefficients):
    assert type_of(polynomial(coefficients, W)) == Lolli(Bang(int_type(W)), int_type(W))
    for n in range(4):
        a_n = sum(c * n**k for k, c in enumerate(coefficients))
        value = operator_polynomial(polynomial(coefficients, W), "f", arguments=(dirac(denote(numeral(n, W))),))
        assert value == OperatorPolynomial({("f",) * a_n: 1})


def test_newfeed_squares_steps_multilinearly():
    pattern, polys = [0, 1, 2], [(0, 1), (0, 0, 1)]
    lam_ = torch.tensor([0.1, 0.3, 0.6], dtype=torch.float64)
    mu = torch.tensor([0.25, 0.75], dtype=torch.float64)
    R = rotation(7)
    value = nl(newfeed(W), Combination(lam_, [numeral(p, W) for p in pattern]),
               Combination(mu, [polynomial(a, W) for a in polys]), R)
    expected = sum(mu[j] * lam_[i] * power(R, sum(c * p**k for k, c in enumerate(a)))
                   for j, a in enumerate(polys) for i, p in enumerate(pattern))
    assert torch.allclose(to_matrix(value, 7), expected)


def test_psi_writes_a_at_the_address():
    V = Atom("V")
    phi = torch.tensor([[0.0, 2.0, 0.0]], dtype=torch.float64)  # 2 e_1^*
    a = torch.tensor([1.0, -1.0], dtype=torch.float64)
    pair = denote(Pair(Const("phi", dual(W)), Const("a", V)), {"phi": phi, "a": a})
    written = to_matrix(denote(psi(W, V))(pair), 3)
    assert torch.equal(written, torch.tensor([[0.0, 2.0, 0.0], [0.0, -2.0, 0.0]], dtype=torch.float64))


def test_higher_order_master():
    p = torch.tensor([0.5, 0.2, 0.3], dtype=torch.float64)
    alpha = random_matrix(seed=9)
    value = nl(higher_order_master(A), Combination(p, [numeral(n, A) for n in range(3)]), alpha)
    assert torch.allclose(to_matrix(value, 4), sum(p[n] * power(alpha, n) for n in range(3)))


def test_discarding_a_combination_scales_by_its_mass():
    value = nl(numeral(0, A), Combination([2, 3], [Lam("z", A, Var("z")), Lam("y", A, Var("y"))]))
    assert torch.equal(to_matrix(value, 3), 5 * torch.eye(3, dtype=torch.float64))


def test_fraction_multiples_scale_tensor_values_and_matrices():
    # torch cannot multiply a tensor by a Fraction, so exact coefficients reach tensors as floats
    matrix, vector = random_matrix(seed=12), torch.arange(4, dtype=torch.float64)
    scaled_map = nl(Fraction(1, 2) * Const("M", endo(A)), constants={"M": matrix})
    assert torch.equal(to_matrix(scaled_map, 4), matrix / 2)
    assert torch.equal(nl(Lam("x", A, Fraction(1, 4) * Var("x")), vector), vector / 4)


def test_denotations_are_differentiable():
    lam_ = torch.tensor([0.3, 0.7], dtype=torch.float64, requires_grad=True)
    alpha = random_matrix(seed=10).requires_grad_(True)
    value = nl(eval_term(A), Combination(lam_, [numeral(1, A), numeral(3, A)]), alpha)
    to_matrix(value, 4).sum().backward()
    assert torch.allclose(lam_.grad, torch.stack([alpha.detach().sum(), power(alpha.detach(), 3).sum()]))
    assert torch.autograd.gradcheck(
        lambda m: to_matrix(nl(numeral(3, A), m), 3), (random_matrix(3, seed=11).requires_grad_(True),))


# ---- ill-typed and non-linear terms ----------------------------------------------------------------


def test_variable_used_twice_is_rejected():
    f, z = Var("f"), Var("z")
    term = lam(("f", Bang(endo(A))), ("z", A), Derelict(f)(Derelict(f)(z)))
    with pytest.raises(LinearityError, match=r"variable f is used 2 times in .*copy or discard"):
        type_of(term)


def test_unused_variable_is_rejected():
    with pytest.raises(LinearityError, match="variable y is never used in"):
        type_of(lam(("x", A), ("y", A), Var("x")))


def test_only_bang_terms_are_copied_derelicted_discarded_promoted():
    with pytest.raises(IllTypedTerm, match=r"only !-typed terms can be copied: x has type A"):
        type_of(Lam("x", A, Copy(Var("x"), "a", "b", Pair(Var("a"), Var("b")))))
    with pytest.raises(IllTypedTerm, match=r"only !-typed terms can be derelicted: x has type A"):
        type_of(Lam("x", A, Derelict(Var("x"))))
    with pytest.raises(IllTypedTerm, match=r"only !-typed terms can be discarded"):
        type_of(lam(("x", A), ("y", A), Discard(Var("x"), Var("y"))))
    with pytest.raises(IllTypedTerm, match=r"only !-typed terms can be promoted"):
        type_of(Lam("x", A, Promote((Var("x"),), ("y",), Var("y"))))


def test_wrong_argument_type_names_the_application():
    term = numeral(2, A)(Const("alpha", endo(A)))
    with pytest.raises(IllTypedTerm, match=r"the argument alpha has type A ⊸ A, but .* expects !\(A ⊸ A\)"):
        type_of(term)
    with pytest.raises(IllTypedTerm, match="not a function type"):
        type_of(Lam("x", A, Var("x")(Var("x"))))


def test_the_printed_feed_is_rejected():
    with pytest.raises(LinearityError, match=r"promote a' for x in \(p x\).*uses p"):
        type_of(paper_feed(W))


def test_summands_must_use_the_same_variables():
    term = lam(("x", Bang(A)), ("y", Bang(A)), Sum((Derelict(Var("x")), Derelict(Var("y")))))
    with pytest.raises(LinearityError, match="every summand must use the same linear variables"):
        type_of(term)


def test_unbound_and_shadowed_variables():
    with pytest.raises(IllTypedTerm, match="unbound variable q"):
        type_of(Var("q"))
    with pytest.raises(IllTypedTerm, match="variable x is bound twice"):
        type_of(lam(("x", A), ("x", A), Var("x")))


def test_unit_and_tensor_rules():
    assert type_of(lam(("u", ONE), ("a", A), Pair(Var("u"), Var("a")))) == Lolli(ONE, Lolli(A, Tensor(ONE, A)))
    assert type_of(psi(W, A)) == Lolli(Tensor(dual(W), A), Lolli(W, A))
