"""Denotations as operator polynomials: non-commutative polynomials in named operators.

``⟦001⟧_nl(α, β)`` evaluated on symbols is the word ``β·α·α``: a word lists operators left to
right and acts right to left, as a product of matrices does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

import torch

from lsrl.llrnn.logic.check import LogicError
from lsrl.llrnn.logic.semantics import Function, Given, Value, as_map, nl
from lsrl.llrnn.logic.terms import Scalar, Term


class OperatorPolynomial:
    """``Σ_w c_w w`` over words ``w`` (tuples of operator names) with exact coefficients."""

    def __init__(self, terms: Mapping[tuple[str, ...], Scalar] | None = None) -> None:
        self.terms = {tuple(word): Fraction(c) for word, c in dict(terms or {}).items() if c != 0}

    @classmethod
    def identity(cls) -> "OperatorPolynomial":
        return cls({(): 1})

    def __add__(self, other: "OperatorPolynomial") -> "OperatorPolynomial":
        terms = dict(self.terms)
        for word, c in other.terms.items():
            terms[word] = terms.get(word, 0) + c
        return OperatorPolynomial(terms)

    def __mul__(self, coefficient: Scalar) -> "OperatorPolynomial":
        coefficient = Fraction(coefficient)
        return OperatorPolynomial({word: c * coefficient for word, c in self.terms.items()})

    __rmul__ = __mul__

    def after(self, name: str) -> "OperatorPolynomial":
        """``name ∘ self``."""
        return OperatorPolynomial({(name, *word): c for word, c in self.terms.items()})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OperatorPolynomial) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def __repr__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for word, c in sorted(self.terms.items(), key=lambda item: (len(item[0]), item[0])):
            monomial = "·".join(word) if word else "1"
            parts.append(monomial if c == 1 else f"{c}·{monomial}")
        return " + ".join(parts)

    def matrix(self, operators: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The polynomial evaluated on square matrices ``operators[name]``."""
        some = next(iter(operators.values()))
        identity = torch.eye(some.shape[-1], dtype=some.dtype, device=some.device)
        result = torch.zeros_like(identity)
        for word, c in self.terms.items():
            product = identity
            for name in word:
                product = product @ operators[name]
            result = result + float(c) * product
        return result


def symbol(name: str) -> Function:
    """The operator ``name`` acting on operator polynomials by composition on the left."""
    return Function(lambda polynomial: as_polynomial(polynomial).after(name))


def as_polynomial(value: Value) -> OperatorPolynomial:
    """``value`` as an operator polynomial (a value of an atom evaluated on symbols)."""
    if isinstance(value, OperatorPolynomial):
        return value
    raise LogicError(f"expected an operator polynomial, got {type(value).__name__}")


def operator_polynomial(term: Term, *operator_names: str, arguments: Sequence[Given] = ()) -> OperatorPolynomial:
    """``⟦term⟧_nl(arguments…, α, β, …)`` as a polynomial in the named operators.

    ``term`` must end in the type ``!(A ⊸ A) ⊸ … ⊸ (A ⊸ A)`` after its ``arguments``.
    """
    value = nl(term, *arguments, *(symbol(name) for name in operator_names))
    return as_polynomial(as_map(value)(OperatorPolynomial.identity()))
