"""Linear logic (Sec. 2.4): types, linear lambda terms, the type checker, denotations on tensors
and as operator polynomials, and the paper's library of terms."""

from __future__ import annotations

from lsrl.llrnn.logic.check import IllTypedTerm, LinearityError, LogicError, type_of
from lsrl.llrnn.logic.library import (
    binary, binary_identity, compose, discarding, eval_term, feed, fresh, higher_order_master, newfeed, numeral,
    paper_feed, polynomial, psi, repeat, second_order_master, share,
)
from lsrl.llrnn.logic.symbolic import OperatorPolynomial, operator_polynomial, symbol
from lsrl.llrnn.logic.semantics import (
    Combination, Diagonal, Distribution, Function, Matrix, Tensors, add, as_value, combine, coordinates, denote, dirac,
    nl, scale, to_matrix,
)
from lsrl.llrnn.logic.terms import (
    App, Const, Copy, Derelict, Discard, Lam, LetPair, LetUnit, Pair, Promote, Scale, Star, Sum, Term, Var, lam, show,
)
from lsrl.llrnn.logic.types import (
    ONE, Atom, Bang, Lolli, One, Tensor, Type, bint_type, dual, endo, int_type, lolli,
)

__all__ = [
    "add",
    "App",
    "as_value",
    "Atom",
    "Bang",
    "binary",
    "binary_identity",
    "bint_type",
    "Combination",
    "combine",
    "compose",
    "Const",
    "coordinates",
    "Copy",
    "denote",
    "Derelict",
    "Diagonal",
    "dirac",
    "Discard",
    "discarding",
    "Distribution",
    "dual",
    "endo",
    "eval_term",
    "feed",
    "fresh",
    "Function",
    "higher_order_master",
    "IllTypedTerm",
    "int_type",
    "Lam",
    "lam",
    "LetPair",
    "LetUnit",
    "LinearityError",
    "LogicError",
    "lolli",
    "Lolli",
    "Matrix",
    "newfeed",
    "nl",
    "numeral",
    "One",
    "ONE",
    "operator_polynomial",
    "OperatorPolynomial",
    "Pair",
    "paper_feed",
    "polynomial",
    "Promote",
    "psi",
    "repeat",
    "Scale",
    "scale",
    "second_order_master",
    "share",
    "show",
    "Star",
    "Sum",
    "symbol",
    "Tensor",
    "Tensors",
    "Term",
    "to_matrix",
    "Type",
    "type_of",
    "Var",
]
