"""Linear lambda terms (the term calculus of Benton, Bierman, de Paiva and Hyland), with typed
constants and the sums and scalar multiples of differential linear logic.

Build terms with the classes below; calling a term applies it: ``f(x, y)`` is ``((f x) y)``.
Printing follows the paper: ``(λq.(copy q as q', q'' in (λz.(derelict(q'') (derelict(q') z)))))``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Union, cast

from lsrl.llrnn.logic.types import Type

Scalar = Union[int, Fraction, float]


class Term:
    """A linear lambda term."""

    def __call__(self, *arguments: "Term") -> "Term":
        result = self
        for argument in arguments:
            result = App(result, argument)
        return result

    def __add__(self, other: "Term") -> "Term":
        return Sum(_summands(self) + _summands(other))

    def __rmul__(self, coefficient: Scalar) -> "Term":
        return Scale(coefficient, self)

    def __sub__(self, other: "Term") -> "Term":
        return self + Scale(-1, other)

    def __str__(self) -> str:
        return show(self)


def _summands(term: Term) -> tuple[Term, ...]:
    return term.terms if isinstance(term, Sum) else (term,)


@dataclass(frozen=True, eq=True)
class Var(Term):
    name: str


@dataclass(frozen=True, eq=True)
class Lam(Term):
    """``λname:type.body``."""

    name: str
    type: Type
    body: Term


@dataclass(frozen=True, eq=True)
class App(Term):
    function: Term
    argument: Term


@dataclass(frozen=True, eq=True)
class Pair(Term):
    """``left ⊗ right``."""

    left: Term
    right: Term


@dataclass(frozen=True, eq=True)
class LetPair(Term):
    """``let pair be left ⊗ right in body``."""

    pair: Term
    left: str
    right: str
    body: Term


@dataclass(frozen=True, eq=True)
class Star(Term):
    """``*``, the element of 1."""


@dataclass(frozen=True, eq=True)
class LetUnit(Term):
    """``let scalar be * in body``: ``body`` scaled by the scalar."""

    scalar: Term
    body: Term


@dataclass(frozen=True, eq=True)
class Derelict(Term):
    term: Term


@dataclass(frozen=True, eq=True)
class Copy(Term):
    """``copy term as first, second in body``."""

    term: Term
    first: str
    second: str
    body: Term


@dataclass(frozen=True, eq=True)
class Discard(Term):
    """``discard term in body``."""

    term: Term
    body: Term


@dataclass(frozen=True, eq=True)
class Promote(Term):
    """``promote sources for names in body``: ``!B`` from ``body : B`` that uses only ``names``."""

    sources: tuple[Term, ...]
    names: tuple[str, ...]
    body: Term


@dataclass(frozen=True, eq=True)
class Const(Term):
    """A constant of a given type; its denotation is supplied when the term is evaluated."""

    name: str
    type: Type


@dataclass(frozen=True, eq=True)
class Sum(Term):
    """``t_1 + ... + t_k``: every summand uses the same linear variables."""

    terms: tuple[Term, ...]


@dataclass(frozen=True, eq=True)
class Scale(Term):
    coefficient: Scalar
    term: Term


def derelict(term: Term) -> Derelict:
    return Derelict(term)


def copy(term: Term, first: str, second: str, body: Term) -> Copy:
    return Copy(term, first, second, body)


def discard(term: Term, body: Term) -> Discard:
    return Discard(term, body)


def promote(sources: Iterable[Term], names: Iterable[str], body: Term) -> Promote:
    return Promote(tuple(sources), tuple(names), body)


def lam(*binders_and_body: tuple[str, Type] | Term) -> Term:
    """``lam(("x", A), ("y", B), body)`` is ``λx:A.(λy:B.body)``."""
    # the signature cannot say "binders, then one body": the last argument is the body
    binders = cast("tuple[tuple[str, Type], ...]", binders_and_body[:-1])
    body = cast(Term, binders_and_body[-1])
    for name, type_ in reversed(binders):
        body = Lam(name, type_, body)
    return body


def free_variables(term: Term) -> frozenset[str]:
    """The variables occurring free in ``term`` (as a set)."""
    if isinstance(term, Var):
        return frozenset([term.name])
    if isinstance(term, Lam):
        return free_variables(term.body) - {term.name}
    if isinstance(term, LetPair):
        return free_variables(term.pair) | (free_variables(term.body) - {term.left, term.right})
    if isinstance(term, Copy):
        return free_variables(term.term) | (free_variables(term.body) - {term.first, term.second})
    if isinstance(term, Promote):
        inner = free_variables(term.body) - set(term.names)
        return frozenset().union(inner, *(free_variables(s) for s in term.sources))
    return frozenset().union(*(free_variables(child) for child in children(term)))


def children(term: Term) -> tuple[Term, ...]:
    """The immediate sub-terms."""
    if isinstance(term, (Var, Star, Const)):
        return ()
    if isinstance(term, Lam):
        return (term.body,)
    if isinstance(term, App):
        return (term.function, term.argument)
    if isinstance(term, Pair):
        return (term.left, term.right)
    if isinstance(term, LetPair):
        return (term.pair, term.body)
    if isinstance(term, LetUnit):
        return (term.scalar, term.body)
    if isinstance(term, Derelict):
        return (term.term,)
    if isinstance(term, (Copy, Discard)):
        return (term.term, term.body)
    if isinstance(term, Promote):
        return (*term.sources, term.body)
    if isinstance(term, Sum):
        return term.terms
    if isinstance(term, Scale):
        return (term.term,)
    raise TypeError(f"not a linear lambda term: {term!r}")


def show(term: Term, types: bool = False) -> str:
    """The term in the paper's notation; ``types=True`` annotates every λ with its type."""

    def go(t: Term) -> str:
        if isinstance(t, Var):
            return t.name
        if isinstance(t, Const):
            return t.name
        if isinstance(t, Star):
            return "*"
        if isinstance(t, Lam):
            binder = f"{t.name}:{t.type.show()}" if types else t.name
            return f"(λ{binder}.{go(t.body)})"
        if isinstance(t, App):
            return f"({go(t.function)} {go(t.argument)})"
        if isinstance(t, Pair):
            return f"({go(t.left)} ⊗ {go(t.right)})"
        if isinstance(t, LetPair):
            return f"(let {go(t.pair)} be {t.left} ⊗ {t.right} in {go(t.body)})"
        if isinstance(t, LetUnit):
            return f"(let {go(t.scalar)} be * in {go(t.body)})"
        if isinstance(t, Derelict):
            return f"derelict({go(t.term)})"
        if isinstance(t, Copy):
            return f"(copy {go(t.term)} as {t.first}, {t.second} in {go(t.body)})"
        if isinstance(t, Discard):
            return f"(discard {go(t.term)} in {go(t.body)})"
        if isinstance(t, Promote):
            sources = ", ".join(go(s) for s in t.sources)
            return f"(promote {sources} for {', '.join(t.names)} in {go(t.body)})"
        if isinstance(t, Sum):
            return "(" + " + ".join(go(s) for s in t.terms) + ")"
        if isinstance(t, Scale):
            return f"({t.coefficient}·{go(t.term)})"
        raise TypeError(f"not a linear lambda term: {t!r}")

    return go(term)
