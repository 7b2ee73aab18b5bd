"""Denotations ⟦t⟧ of linear lambda terms as differentiable functions on PyTorch tensors.

Values of each type (Sec. 2.4.3):

- an atom or 1: a tensor ``(..., d)`` (leading axes are a batch; 1 has d = 1), or a symbolic
  ``OperatorPolynomial`` (``lsrl.llrnn.logic.symbolic``);
- ``A ⊸ B``: a linear map, either a ``Matrix`` ``(..., d_B, d_A)`` (a ``Diagonal`` holds only its diagonal)
  or a ``Function`` (a closure);
- ``A ⊗ B``: a ``Tensors``, a formal sum of pure tensors ``a ⊗ b``;
- ``!A``: a ``Distribution``, a finite combination ``Σ c_i |∅⟩_{u_i}`` of Dirac distributions.

``⟦t⟧_nl`` feeds ``|∅⟩_u`` to every ``!``-typed argument (Eq. (2.15)). A combination of
denotations ``Σ λ_i ⟦t_i⟧`` given to a ``!``-typed argument is read as ``Σ λ_i |∅⟩_{⟦t_i⟧}``: this is
how the paper's formulas (Sec. 4.2: ``Σ λ_i μ_j κ_k R^{a_k i + b_k j}``) are multilinear in the
coefficients; ``dirac_of_sum=True`` gives ``|∅⟩_{Σ λ_i ⟦t_i⟧}`` instead (its unpolished remark).
Coefficients are numbers or tensors ``(..., 1)`` that broadcast against the values.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeAlias

import torch

from lsrl.llrnn.logic.check import LogicError, type_of
from lsrl.llrnn.logic.terms import (
    App, Const, Copy, Derelict, Discard, Lam, LetPair, LetUnit, Pair, Promote, Scale, Scalar, Star, Sum, Term, Var,
    show,
)
from lsrl.llrnn.logic.types import Bang, Lolli, Type, is_first_order

if TYPE_CHECKING:
    from lsrl.llrnn.logic.symbolic import OperatorPolynomial

# a denotation (module docstring); a scalar is the value of * and of a sum of coefficients
Value: TypeAlias = "torch.Tensor | OperatorPolynomial | Matrix | Function | Tensors | Distribution | Scalar"
Coefficient: TypeAlias = "Scalar | torch.Tensor"  # a number, or a tensor (..., 1) batched over the leading axes
Given: TypeAlias = "Value | Combination"  # what a term's argument or constant may be given as


class Function:
    """A linear map given by a Python function (the denotation of a λ-abstraction)."""

    def __init__(self, apply: Callable[[Value], Value]) -> None:
        self.apply = apply

    def __call__(self, value: Value) -> Value:
        return self.apply(value)


class Matrix:
    """A linear map between first-order spaces given by a matrix ``(..., d_out, d_in)``."""

    def __init__(self, matrix: torch.Tensor) -> None:
        self.matrix = matrix

    def __call__(self, value: Value) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return (self.matrix @ value.unsqueeze(-1)).squeeze(-1)
        raise LogicError(f"a matrix of shape {tuple(self.matrix.shape)} cannot act on {type(value).__name__}")


class Diagonal(Matrix):
    """A diagonal linear map ``diag(entries)`` (..., d): it acts entry by entry, and its dense ``matrix``
    (..., d, d) is built only when asked for, so that a wide diagonal map (an erase vector weighted by
    location, the multiplicative RNN's ``diag(V x)``) costs d numbers per batch element, not d^2."""

    def __init__(self, entries: torch.Tensor) -> None:  # no super().__init__: ``matrix`` is derived from entries
        self.entries = entries

    @property
    def matrix(self) -> torch.Tensor:  # type: ignore[override]  # derived from the entries, not stored
        return torch.diag_embed(self.entries)

    def __call__(self, value: Value) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return self.entries * value
        raise LogicError(f"a diagonal map of size {self.entries.shape[-1]} cannot act on {type(value).__name__}")


@dataclass
class Tensors:
    """``Σ_k left_k ⊗ right_k``."""

    pairs: list[tuple[Value, Value]]


@dataclass
class Distribution:
    """``Σ_k c_k |∅⟩_{u_k}``: ``items`` is a list of ``(c_k, u_k)``."""

    items: list[tuple[Coefficient, Value]]


def dirac(point: Value) -> Distribution:
    """``|∅⟩_u``."""
    return Distribution([(1, point)])


def as_map(value: Value) -> Matrix | Function:
    """``value`` as a linear map (a value of a ``⊸`` type)."""
    if isinstance(value, (Matrix, Function)):
        return value
    raise LogicError(f"a value of a ⊸ type must be a linear map, got {type(value).__name__}")


def as_tensors(value: Value) -> Tensors:
    """``value`` as a formal sum of pure tensors (a value of a ``⊗`` type)."""
    if isinstance(value, Tensors):
        return value
    raise LogicError(f"a value of a ⊗ type must be a Tensors, got {type(value).__name__}")


def as_distribution(value: Value) -> Distribution:
    """``value`` as a combination of Diracs (a value of a ``!`` type)."""
    if isinstance(value, Distribution):
        return value
    raise LogicError(f"a value of a ! type must be a Distribution, got {type(value).__name__}")


def as_tensor(value: Value) -> torch.Tensor:
    """``value`` as a tensor (a value of an atom or 1 given by numbers, not symbols)."""
    if isinstance(value, torch.Tensor):
        return value
    raise LogicError(f"expected a tensor, got {type(value).__name__}")


def add(first: Value, second: Value) -> Value:
    """The sum of two values of the same type."""
    if isinstance(first, Diagonal) and isinstance(second, Diagonal):
        return Diagonal(first.entries + second.entries)
    if isinstance(first, Matrix) and isinstance(second, Matrix):
        return Matrix(first.matrix + second.matrix)
    if isinstance(first, (Matrix, Function)):
        other = as_map(second)
        return Function(lambda value: add(first(value), other(value)))
    if isinstance(first, Tensors):
        return Tensors(first.pairs + as_tensors(second).pairs)
    if isinstance(first, Distribution):
        return Distribution(first.items + as_distribution(second).items)
    return _leaf_arithmetic(first) + second


def scale(value: Value, coefficient: Coefficient) -> Value:
    """``coefficient · value``; a tensor coefficient ``(..., 1)`` scales batch element by element."""
    if isinstance(coefficient, (int, float)) and coefficient == 1:
        return value
    if isinstance(value, Diagonal):  # a coefficient (..., 1) scales the entries (..., d) alike
        return Diagonal(value.entries * _tensor_factor(coefficient))
    if isinstance(value, Matrix):
        factor = coefficient.unsqueeze(-1) if isinstance(coefficient, torch.Tensor) else _tensor_factor(coefficient)
        return Matrix(value.matrix * factor)
    if isinstance(value, Function):
        return Function(lambda argument: scale(value(argument), coefficient))
    if isinstance(value, Tensors):
        return Tensors([(scale(left, coefficient), right) for left, right in value.pairs])
    if isinstance(value, Distribution):
        return Distribution([(_leaf_arithmetic(coefficient) * c, point) for c, point in value.items])
    if isinstance(value, torch.Tensor):
        return value * _tensor_factor(coefficient)
    return _leaf_arithmetic(value) * coefficient


def _tensor_factor(coefficient: Coefficient) -> torch.Tensor | int | float:
    """``coefficient`` as a factor of a tensor: torch multiplies by numbers and tensors, not by Fractions."""
    return float(coefficient) if isinstance(coefficient, Fraction) else coefficient


def _leaf_arithmetic(value: Value) -> Any:
    """A tensor, operator polynomial or scalar, whose own ``+`` and ``*`` combine it with a value of the
    same type (torch broadcasting, exact polynomial sums): that the two fit is the term's type's business,
    which the static types of the evaluator cannot follow."""
    return value


def total(values: Iterable[Value]) -> Value:
    """The sum of a non-empty iterable of values."""
    values = iter(values)
    result = next(values)
    for value in values:
        result = add(result, value)
    return result


def split(coefficients: torch.Tensor | Iterable[Coefficient]) -> list[Coefficient]:
    """One coefficient per term: a tensor ``(..., k)`` becomes k tensors ``(..., 1)``."""
    if isinstance(coefficients, torch.Tensor):
        return [coefficients[..., i : i + 1] for i in range(coefficients.shape[-1])]
    return list(coefficients)


def combine(coefficients: list[Coefficient], denotations: list[Value], bang: bool, dirac_of_sum: bool = False
            ) -> Value:
    """``Σ c_i ⟦t_i⟧``, or for a ``!``-typed argument ``Σ c_i |∅⟩_{⟦t_i⟧}`` (the paper's multilinear
    reading; ``dirac_of_sum`` gives ``|∅⟩_{Σ c_i ⟦t_i⟧}``)."""
    pairs = list(zip(coefficients, denotations))
    if bang and not dirac_of_sum:
        return Distribution(pairs)
    summed = total(scale(value, c) for c, value in pairs)
    return dirac(summed) if bang else summed


def coordinates(terms: Iterable[Term], bang: bool = False) -> Function:
    """The linear map ``R^k → ⟦X⟧`` (``→ !⟦X⟧`` with ``bang``), ``e_i ↦ ⟦t_i⟧`` (``|∅⟩_{⟦t_i⟧}``):
    how a memory ring whose coefficients live in ``span(⟦t_1⟧, …)`` hands its content to a term."""
    denotations = [denote(term) for term in terms]
    return Function(lambda v: combine(split(as_tensor(v)), denotations, bang))


class Combination:
    """``Σ λ_i ⟦t_i⟧`` for closed terms ``t_i``; ``coefficients`` is a sequence of numbers or a
    tensor ``(..., k)`` (one coefficient per term, batched over the leading axes)."""

    def __init__(self, coefficients: torch.Tensor | Iterable[Coefficient], terms: Iterable[Term],
                 constants: Mapping[str, Given] | None = None) -> None:
        self.terms = list(terms)
        self.coefficients = split(coefficients)
        if len(self.coefficients) != len(self.terms):
            raise LogicError(f"{len(self.coefficients)} coefficients for {len(self.terms)} terms")
        self.denotations = [denote(term, constants) for term in self.terms]

    def value(self, expected: Type, dirac_of_sum: bool = False) -> Value:
        """This combination as a value of ``expected`` (a term type, or ``!`` of one)."""
        body = expected.body if isinstance(expected, Bang) else expected
        for term in self.terms:
            if type_of(term) != body:
                raise LogicError(f"combination: {show(term)} has type {type_of(term)}, expected {body}")
        return combine(self.coefficients, self.denotations, isinstance(expected, Bang), dirac_of_sum)


def as_value(expected: Type, given: Given, dirac_of_sum: bool = False) -> Value:
    """Read ``given`` (a value, a ``Combination``, or a tensor of a first-order type) as a value of
    ``expected``; a plain value for a ``!``-typed argument becomes ``|∅⟩_given``."""
    if isinstance(given, Combination):
        return given.value(expected, dirac_of_sum)
    if isinstance(expected, Bang):
        return given if isinstance(given, Distribution) else dirac(as_value(expected.body, given))
    if isinstance(given, torch.Tensor) and isinstance(expected, Lolli):
        if not is_first_order(expected):
            raise LogicError(f"a tensor cannot stand for a value of the higher type {expected}")
        return Matrix(given)
    return given


def nl(term: Term, *arguments: Given, constants: Mapping[str, Given] | None = None, dirac_of_sum: bool = False
       ) -> Value:
    """``⟦term⟧_nl(arguments…)``: the closed term applied to its arguments in order."""
    term_type = type_of(term)
    value = denote(term, constants)
    for position, argument in enumerate(arguments):
        if not isinstance(term_type, Lolli):
            raise LogicError(f"{show(term)} takes {position} arguments, {len(arguments)} given")
        value = as_map(value)(as_value(term_type.source, argument, dirac_of_sum))
        term_type = term_type.target
    return value


def to_matrix(value: Matrix | Function, dim: int, dtype: torch.dtype = torch.float64,
              device: torch.device | str | None = None) -> torch.Tensor:
    """The matrix ``(..., d_out, dim)`` of a linear map on ``R^dim`` (applied to the unit vectors)."""
    if isinstance(value, Matrix):
        return value.matrix
    basis = torch.eye(dim, dtype=dtype, device=device)
    return torch.stack([as_tensor(value(basis[j])) for j in range(dim)], dim=-1)


def denote(term: Term, constants: Mapping[str, Given] | None = None) -> Value:
    """⟦term⟧ for a closed term; ``constants`` maps each constant's name to its denotation."""
    return _Evaluator(constants or {}).run(term, {})


def _as_coefficient(value: Value) -> Coefficient:
    """A value of 1 (a scalar or a tensor ``(..., 1)``) as a coefficient."""
    if isinstance(value, (int, float, Fraction, torch.Tensor)):
        return value
    raise LogicError(f"a value of 1 must be a number or a tensor, got {type(value).__name__}")


class _Evaluator:
    def __init__(self, constants: Mapping[str, Given]) -> None:
        self.constants = constants

    def run(self, term: Term, env: dict[str, Value]) -> Value:
        run = self.run
        if isinstance(term, Var):
            return env[term.name]
        if isinstance(term, Const):
            if term.name not in self.constants:
                raise LogicError(f"no denotation given for the constant {term.name} : {term.type}")
            return as_value(term.type, self.constants[term.name])
        if isinstance(term, Star):
            return 1
        if isinstance(term, Lam):
            return Function(lambda value: run(term.body, {**env, term.name: value}))
        if isinstance(term, App):
            return as_map(run(term.function, env))(run(term.argument, env))
        if isinstance(term, Pair):
            return Tensors([(run(term.left, env), run(term.right, env))])
        if isinstance(term, LetPair):
            pairs = as_tensors(run(term.pair, env)).pairs
            return total(run(term.body, {**env, term.left: a, term.right: b}) for a, b in pairs)
        if isinstance(term, LetUnit):
            return scale(run(term.body, env), _as_coefficient(run(term.scalar, env)))
        if isinstance(term, Derelict):
            return total(scale(point, c) for c, point in as_distribution(run(term.term, env)).items)
        if isinstance(term, Copy):
            items = as_distribution(run(term.term, env)).items
            return total(
                scale(run(term.body, {**env, term.first: dirac(point), term.second: dirac(point)}), c)
                for c, point in items
            )
        if isinstance(term, Discard):
            mass = total(c for c, _ in as_distribution(run(term.term, env)).items)  # the counit: |∅⟩_u ↦ 1
            return scale(run(term.body, env), _as_coefficient(mass))
        if isinstance(term, Promote):
            return self._promote(term, env)
        if isinstance(term, Sum):
            return total(run(summand, env) for summand in term.terms)
        if isinstance(term, Scale):
            return scale(run(term.term, env), term.coefficient)
        raise LogicError(f"not a linear lambda term: {term!r}")

    def _promote(self, term: Promote, env: dict[str, Value]) -> Distribution:
        """``promote`` on combinations of Diracs, multilinearly: one Dirac per choice of points."""
        choices = itertools.product(*(as_distribution(self.run(source, env)).items for source in term.sources))
        items: list[tuple[Coefficient, Value]] = []
        for choice in choices:
            coefficient: Coefficient = 1
            inner: dict[str, Value] = {}
            for name, (c, point) in zip(term.names, choice):
                coefficient = _leaf_arithmetic(c) * coefficient
                inner[name] = dirac(point)
            items.append((coefficient, self.run(term.body, inner)))
        return Distribution(items)
