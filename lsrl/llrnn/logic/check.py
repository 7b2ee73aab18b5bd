"""Type checking of linear lambda terms: every variable is used exactly once.

Variables of type !A are linear too, as in Benton et al.: they are duplicated with
``copy … as … in`` and erased with ``discard … in``; only !-typed terms may be copied, discarded,
derelicted or promoted. Errors name the offending sub-term in the paper's notation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TypeAlias

from lsrl.errors import LsrlError
from lsrl.llrnn.logic.terms import (
    App, Const, Copy, Derelict, Discard, Lam, LetPair, LetUnit, Pair, Promote, Scale, Star, Sum, Term, Var,
    free_variables, show,
)
from lsrl.llrnn.logic.types import ONE, Bang, Lolli, Tensor, Type


Inferred: TypeAlias = "tuple[Type, Counter[str]]"  # a term's type and how often each free variable occurs in it


class LogicError(LsrlError):
    """A linear-logic term that cannot be typed or evaluated."""


class IllTypedTerm(LogicError):
    """A sub-term whose type does not fit where it is used."""


class LinearityError(LogicError):
    """A linear variable used more or less than exactly once."""


def type_of(term: Term, context: Mapping[str, Type] | None = None) -> Type:
    """The type of ``term`` whose free variables have the types in ``context`` (each used once)."""
    context = dict(context or {})
    term_type, uses = _infer(term, context, frozenset(context))
    for name in context:
        _expect_used_once(name, uses, term)
    return term_type


def _expect_used_once(name: str, uses: Counter[str], scope: Term) -> None:
    count = uses.get(name, 0)
    if count == 1:
        return
    how = "never used" if count == 0 else f"used {count} times"
    hint = "; a linear variable is used exactly once (copy or discard a !-typed one explicitly)"
    raise LinearityError(f"variable {name} is {how} in {show(scope)}{hint}")


def _bind(names: Sequence[str], body: Term, context: Mapping[str, Type], bound: frozenset[str],
          types: Sequence[Type]) -> Inferred:
    for name in names:
        if name in bound:
            raise IllTypedTerm(f"variable {name} is bound twice (inside {show(body)}); rename one of them")
    inner = {**context, **dict(zip(names, types))}
    body_type, uses = _infer(body, inner, bound | set(names))
    for name in names:
        _expect_used_once(name, uses, body)
        del uses[name]
    return body_type, uses


def _expect_bang(term: Term, term_type: Type, what: str) -> Bang:
    if not isinstance(term_type, Bang):
        raise IllTypedTerm(f"only !-typed terms can be {what}: {show(term)} has type {term_type}")
    return term_type


def _infer(term: Term, context: Mapping[str, Type], bound: frozenset[str]) -> Inferred:
    """``(type, uses)`` where ``uses`` counts the free variables' occurrences."""
    if isinstance(term, Var):
        if term.name not in context:
            raise IllTypedTerm(f"unbound variable {term.name}")
        return context[term.name], Counter([term.name])
    if isinstance(term, Const):
        return term.type, Counter()
    if isinstance(term, Star):
        return ONE, Counter()
    if isinstance(term, Lam):
        body_type, uses = _bind([term.name], term.body, context, bound, [term.type])
        return Lolli(term.type, body_type), uses
    if isinstance(term, App):
        function_type, uses = _infer(term.function, context, bound)
        argument_type, argument_uses = _infer(term.argument, context, bound)
        if not isinstance(function_type, Lolli):
            raise IllTypedTerm(f"in {show(term)}: {show(term.function)} has type {function_type}, not a function type")
        if function_type.source != argument_type:
            raise IllTypedTerm(
                f"in {show(term)}: the argument {show(term.argument)} has type {argument_type}, "
                f"but {show(term.function)} expects {function_type.source}"
            )
        return function_type.target, uses + argument_uses
    if isinstance(term, Pair):
        left, left_uses = _infer(term.left, context, bound)
        right, right_uses = _infer(term.right, context, bound)
        return Tensor(left, right), left_uses + right_uses
    if isinstance(term, LetPair):
        pair_type, uses = _infer(term.pair, context, bound)
        if not isinstance(pair_type, Tensor):
            raise IllTypedTerm(f"in {show(term)}: {show(term.pair)} has type {pair_type}, expected a tensor A ⊗ B")
        body_type, body_uses = _bind(
            [term.left, term.right], term.body, context, bound, [pair_type.left, pair_type.right]
        )
        return body_type, uses + body_uses
    if isinstance(term, LetUnit):
        scalar_type, uses = _infer(term.scalar, context, bound)
        if scalar_type != ONE:
            raise IllTypedTerm(f"in {show(term)}: {show(term.scalar)} has type {scalar_type}, expected 1")
        body_type, body_uses = _infer(term.body, context, bound)
        return body_type, uses + body_uses
    if isinstance(term, Derelict):
        inner, uses = _infer(term.term, context, bound)
        return _expect_bang(term.term, inner, "derelicted").body, uses
    if isinstance(term, Copy):
        copied, uses = _infer(term.term, context, bound)
        _expect_bang(term.term, copied, "copied")
        body_type, body_uses = _bind([term.first, term.second], term.body, context, bound, [copied, copied])
        return body_type, uses + body_uses
    if isinstance(term, Discard):
        discarded, uses = _infer(term.term, context, bound)
        _expect_bang(term.term, discarded, "discarded")
        body_type, body_uses = _infer(term.body, context, bound)
        return body_type, uses + body_uses
    if isinstance(term, Promote):
        return _infer_promote(term, context, bound)
    if isinstance(term, Sum):
        return _infer_sum(term, context, bound)
    if isinstance(term, Scale):
        return _infer(term.term, context, bound)
    raise IllTypedTerm(f"not a linear lambda term: {term!r}")


def _infer_promote(term: Promote, context: Mapping[str, Type], bound: frozenset[str]) -> Inferred:
    if len(term.sources) != len(term.names):
        raise IllTypedTerm(f"in {show(term)}: {len(term.sources)} promoted terms but {len(term.names)} names")
    uses: Counter[str] = Counter()
    source_types: list[Type] = []
    for source in term.sources:
        source_type, source_uses = _infer(source, context, bound)
        source_types.append(_expect_bang(source, source_type, "promoted"))
        uses += source_uses
    # the body may use nothing but the promoted names: a linear variable inside it could be copied
    outside = sorted(free_variables(term.body) - set(term.names))
    if outside:
        raise LinearityError(
            f"in {show(term)}: the promoted body uses {', '.join(outside)}, outside the promoted names "
            f"{', '.join(term.names)}; a promoted body may be copied, so it may use only promoted !-typed names"
        )
    body_type, _ = _bind(term.names, term.body, {}, bound, source_types)
    return Bang(body_type), uses


def _infer_sum(term: Sum, context: Mapping[str, Type], bound: frozenset[str]) -> Inferred:
    first_type, first_uses = _infer(term.terms[0], context, bound)
    for summand in term.terms[1:]:
        summand_type, summand_uses = _infer(summand, context, bound)
        if summand_type != first_type:
            raise IllTypedTerm(
                f"in {show(term)}: summand {show(summand)} has type {summand_type}, the first has {first_type}"
            )
        if summand_uses != first_uses:
            raise LinearityError(
                f"in {show(term)}: summand {show(summand)} uses the variables {_describe(summand_uses)}, "
                f"the first summand {_describe(first_uses)}; every summand must use the same linear variables"
            )
    return first_type, first_uses


def _describe(uses: Counter[str]) -> str:
    return "{" + ", ".join(f"{name}" + (f"×{count}" if count > 1 else "") for name, count in sorted(uses.items())) + "}"
