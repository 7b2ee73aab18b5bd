"""The terms of the paper: numerals n̲, binary integers S̲, eval, feed, newfeed, repeat, polynomial
iterators, and the master terms of the second-order and higher-order RNN (Secs. 2.4, 3, 4).

Two of the printed terms are not typeable as printed and are given here in their typeable form:
``feed`` promotes ``(p x)`` with the linear variable ``p`` free inside the promotion, and
``newfeed`` promotes the linear ``p``; a promoted body may use only !-typed variables (it is copied).
Both take their pattern arguments as ``!int_W`` instead; with a ring's coefficients read as
``Σ λ_i |∅⟩_{⟦i⟧}`` (``semantics.Combination``) they give the paper's formulas.
``paper_feed`` is the printed term, kept so that the type checker can be seen to reject it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

from lsrl.errors import shown
from lsrl.llrnn.logic.check import LogicError
from lsrl.llrnn.logic.terms import (
    Copy, Derelict, Discard, Lam, LetPair, LetUnit, Promote, Term, Var, free_variables, lam,
)
from lsrl.llrnn.logic.types import Bang, Lolli, Tensor, Type, bint_type, dual, endo, int_type

_fresh = itertools.count()
MAX_TERM_WORD = 128  # letters of a binary word as a term: about 300 nest past the recursion limit in llrnn_form


def fresh(stem: str) -> str:
    """A variable name used nowhere else, for terms assembled from pieces (terms forbid shadowing).
    The closed terms of this library use fixed names: they never bind inside one another."""
    return f"{stem}_{next(_fresh)}"  # the separator: stems "a" and "a1" must not both give "a18"


def share(variable: str, count: int, body: Callable[[list[str]], Term]) -> Term:
    """``body(names)`` with ``count`` copies ``v', v'', …`` of the !-typed ``variable`` (discarded
    when 0, the variable itself when 1); the intermediate copies are ``v~1, v~2, …``."""
    copies = [variable + "'" * (i + 1) for i in range(count)]
    if count == 0:
        return Discard(Var(variable), body([]))
    if count == 1:
        return body([variable])
    # built from the innermost copy outwards (a loop: one nested call per copy would hit the recursion limit)
    sources = [variable] + [f"{variable}~{index}" for index in range(1, count - 1)]
    term = Copy(Var(sources[-1]), copies[-2], copies[-1], body(copies))
    for index in range(count - 3, -1, -1):
        term = Copy(Var(sources[index]), copies[index], sources[index + 1], term)
    return term


def discarding(variables: Iterable[str], body: Term) -> Term:
    """``body`` with every variable of ``variables`` that it does not use discarded in front."""
    used = free_variables(body)
    for name in reversed([v for v in variables if v not in used]):
        body = Discard(Var(name), body)
    return body


def compose_all(functions: Iterable[Callable[[Term], Term]], argument: Term) -> Term:
    """``f_k (… (f_1 argument))``: ``functions`` listed in the order they are applied."""
    for function in functions:
        argument = function(argument)
    return argument


# ---- integers and binary integers (Sec. 2.4.2) --------------------------------------------------


def numeral(n: int, a: Type) -> Term:
    """``n̲ : int_A``, with ``⟦n̲⟧_nl(α) = αⁿ``; ``numeral(2, A)`` is the paper's Eq. (2.12)."""
    if n < 0:
        raise ValueError(f"numeral: n must be a natural number, got {n}")
    q, z = "q", "z"
    return Lam(q, Bang(endo(a)), share(q, n, lambda names: Lam(z, a, compose_all(
        [Derelict(Var(name)) for name in names], Var(z)))))


def binary(word: str, a: Type) -> Term:
    """``S̲ : bint_A`` for a word over {0, 1}: ``⟦S̲⟧_nl(α, β)`` reads α for 0 and β for 1 in reverse
    order, so ``⟦001̲⟧_nl(α, β) = βαα`` (Example 2.3)."""
    if not isinstance(word, str) or set(word) - {"0", "1"}:
        raise LogicError(f"binary: the word must be a string over the letters 0 and 1, got {shown(word)}")
    if len(word) > MAX_TERM_WORD:
        raise LogicError(f"binary: the word must have at most {MAX_TERM_WORD} letters (its term nests one level per "
                         f"letter, and terms are read recursively), got {len(word):,}")
    q, p, z = "q", "p", "z"

    def body(zero_names: Sequence[str], one_names: Sequence[str]) -> Term:
        zeros, ones = iter(zero_names), iter(one_names)
        operators = [Derelict(Var(next(zeros) if letter == "0" else next(ones))) for letter in word]
        return Lam(z, a, compose_all(operators, Var(z)))

    return lam((q, Bang(endo(a))), (p, Bang(endo(a))), share(
        q, word.count("0"), lambda zeros: share(p, word.count("1"), lambda ones: body(zeros, ones))))


# ---- the programs of Sec. 4 ----------------------------------------------------------------------


def eval_term(w: Type) -> Term:
    """``eval : int_W, !(W ⊸ W) ⊢ W ⊸ W`` with ``⟦eval⟧(Σ λ_i ⟦n_i⟧, |∅⟩_α) = Σ λ_i α^{n_i}``."""
    n, alpha = "n", "a"
    return lam((n, int_type(w)), (alpha, Bang(endo(w))), Var(n)(Var(alpha)))


def feed(w: Type) -> Term:
    """``feed : !int_W, !int_W, bint_W ⊢ int_W`` (Sec. 4.2): the word picks, letter by letter, the
    first pattern (0) or the second (1); on ``⟦i⟧, ⟦j⟧, ⟦S⟧`` it gives ``R^{a i + b j}``."""
    p, q, r, a = "p", "q", "r", "a"
    a1, a2, p1, q1, x, y = "a'", "a''", "p'", "q'", "x", "y"
    first = Promote((Var(p), Var(a1)), (p1, x), Derelict(Var(p1))(Var(x)))
    second = Promote((Var(q), Var(a2)), (q1, y), Derelict(Var(q1))(Var(y)))
    return lam((p, Bang(int_type(w))), (q, Bang(int_type(w))), (r, bint_type(w)), (a, Bang(endo(w))),
               Copy(Var(a), a1, a2, Var(r)(first, second)))


def paper_feed(w: Type) -> Term:
    """``feed`` exactly as printed in Sec. 4.2; it does not type check (see the module docstring)."""
    p, q, r, a, a1, a2, x, y = "p", "q", "r", "a", "a'", "a''", "x", "x'"
    return lam((p, int_type(w)), (q, int_type(w)), (r, bint_type(w)), (a, Bang(endo(w))),
               Copy(Var(a), a1, a2, Var(r)(Promote((Var(a1),), (x,), Var(p)(Var(x))),
                                           Promote((Var(a2),), (y,), Var(q)(Var(y))))))


def newfeed(w: Type) -> Term:
    """``newfeed : !int_W, (!int_W ⊸ int_W) ⊢ int_W`` (Sec. 4.3): the polynomial ``q`` applied to the
    pattern entry ``p``."""
    p, q, x = "p", "q", "x"
    return lam((p, Bang(int_type(w))), (q, Lolli(Bang(int_type(w)), int_type(w))), (x, Bang(endo(w))),
               Var(q)(Var(p))(Var(x)))


def polynomial(coefficients: Sequence[int], w: Type) -> Term:
    """``a̲ : !int_W ⊸ int_W`` for ``a(x) = Σ_k c_k x^k`` with natural coefficients: ``n̲ ↦ a(n)̲``.

    ``f^{a(n)}`` is the composite of ``c_k`` copies of ``f^{n^k}`` for every k, and ``f^{n^k}`` is
    ``n`` iterating ``f^{n^{k-1}}`` (a promotion, since the iterated map is used n times).
    """
    if any(c < 0 or int(c) != c for c in coefficients):
        raise ValueError(f"polynomial: coefficients must be natural numbers, got {tuple(coefficients)}")
    degrees = [k for k, c in enumerate(coefficients) for _ in range(int(c))]
    n, f, z = "n", "f", "z"
    inner = itertools.count(1)  # names of the promoted copies, ν1, ν2, … and φ1, φ2, …

    def power(ns: Sequence[str], f_name: str) -> Term:  # f^{n^k} with k = len(ns)
        if not ns:
            return Derelict(Var(f_name))
        inner_ns, inner_f = [f"ν{next(inner)}" for _ in ns[1:]], f"φ{next(inner)}"
        return Derelict(Var(ns[0]))(Promote(tuple(Var(v) for v in (*ns[1:], f_name)), (*inner_ns, inner_f),
                                            power(inner_ns, inner_f)))

    def body(n_names: Sequence[str], f_copies: Sequence[str]) -> Term:
        n_copies = iter(n_names)
        monomials = [power([next(n_copies) for _ in range(k)], f_copy) for k, f_copy in zip(degrees, f_copies)]
        return Lam(z, w, compose_all(monomials, Var(z)))

    return lam((n, Bang(int_type(w))), (f, Bang(endo(w))), share(
        n, sum(degrees), lambda n_copies: share(f, len(degrees), lambda f_copies: body(n_copies, f_copies))))


def binary_identity(w: Type) -> Term:
    """``id : !bint_W ⊸ bint_W``."""
    return Lam("s", Bang(bint_type(w)), Derelict(Var("s")))


def repeat(w: Type) -> Term:
    """``repeat : !bint_W ⊸ bint_W`` with ``⟦repeat⟧⟦S̲⟧ = ⟦SS̲⟧`` (Sec. 4.3.1): the word's group
    element is applied twice."""
    s, f, g, z = "s", "f", "g", "z"
    s1, s2, f1, f2, g1, g2 = "s'", "s''", "f'", "f''", "g'", "g''"
    once = [Derelict(Var(s1))(Var(f1), Var(g1)), Derelict(Var(s2))(Var(f2), Var(g2))]
    return lam((s, Bang(bint_type(w))), (f, Bang(endo(w))), (g, Bang(endo(w))),
               Copy(Var(s), s1, s2, Copy(Var(f), f1, f2, Copy(Var(g), g1, g2, Lam(z, w, compose_all(once, Var(z)))))))


def psi(w: Type, v: Type) -> Term:
    """``Ψ : W^∨ ⊗ V ⊸ (W ⊸ V)``, ``Ψ(φ ⊗ a)(z) = φ(z) a`` (Eq. (2.8)): writing ``a`` at ``φ``."""
    pair, z, phi, a = "p", "z", "u", "a"
    return lam((pair, Tensor(dual(w), v)), (z, w), LetPair(Var(pair), phi, a, LetUnit(Var(phi)(Var(z)), Var(a))))


def choice(first: bool, source: Type, target: Type) -> Term:
    """``pick_1`` (``first``) or ``pick_2 : !(S ⊸ T) ⊸ !(S ⊸ T) ⊸ S ⊸ T``: apply one operator, discard the
    other. A command vector ``(g, 1 - g)`` over the two denotes the gate ``g f + (1 - g) k`` (the TF code's
    interpolation gate, with ``softmax(z, 0) = (sigmoid(z), 1 - sigmoid(z))``)."""
    f, k, z = "f", "k", "z"
    kept, dropped = (f, k) if first else (k, f)
    operator = Bang(Lolli(source, target))
    return lam((f, operator), (k, operator), (z, source), Discard(Var(dropped), Derelict(Var(kept))(Var(z))))


def compose(outer: Term, inner: Term, source: Type) -> Term:
    """``outer ∘ inner`` for ``inner : source ⊸ B``."""
    z = fresh("z")
    return Lam(z, source, outer(inner(Var(z))))


# ---- master terms of Sec. 3.1 -------------------------------------------------------------------


def second_order_master(a: Type) -> Term:
    """``master^in : !(A ⊸ A) ⊢ A ⊸ A`` by dereliction: ``Z_in = W^c(x)``."""
    return Lam("c", Bang(endo(a)), Derelict(Var("c")))


def higher_order_master(a: Type) -> Term:
    """``master^in = (λn.(λa.(derelict(n) a))) : !int_A, !(A ⊸ A) ⊢ A ⊸ A``."""
    return lam(("n", Bang(int_type(a))), ("a", Bang(endo(a))), Derelict(Var("n"))(Var("a")))
