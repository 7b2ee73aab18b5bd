"""Types of intuitionistic linear logic: atoms, the unit 1, ⊸ (Hom), ⊗ (tensor) and ! (bang).

``int_type(A) = !(A ⊸ A) ⊸ (A ⊸ A)`` and ``bint_type(A) = !(A ⊸ A) ⊸ (!(A ⊸ A) ⊸ (A ⊸ A))`` are
the integers and binary integers on A (Sec. 2.4.1); ``dual(W) = W ⊸ 1`` gives ⟦W^∨⟧ = W*.
"""

from __future__ import annotations

from dataclasses import dataclass


class Type:
    """A linear-logic type; subclasses are immutable and compare structurally."""

    def show(self, top: bool = False) -> str:
        """The type in the paper's notation; ``top`` omits the parentheses around a binary connective."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it is shown")

    def __str__(self) -> str:
        return self.show(top=True)


@dataclass(frozen=True)
class Atom(Type):
    name: str

    def show(self, top: bool = False) -> str:
        return self.name


@dataclass(frozen=True)
class One(Type):
    """The unit type 1, with ⟦1⟧ = the scalars."""

    def show(self, top: bool = False) -> str:
        return "1"


@dataclass(frozen=True)
class Lolli(Type):
    """``source ⊸ target``: programs using their input exactly once."""

    source: Type
    target: Type

    def show(self, top: bool = False) -> str:
        text = f"{self.source.show()} ⊸ {self.target.show(top=True)}"  # ⊸ associates to the right
        return text if top else f"({text})"


@dataclass(frozen=True)
class Tensor(Type):
    left: Type
    right: Type

    def show(self, top: bool = False) -> str:
        text = f"{self.left.show()} ⊗ {self.right.show()}"
        return text if top else f"({text})"


@dataclass(frozen=True)
class Bang(Type):
    """``!body``: a value that may be copied, discarded and derelicted."""

    body: Type

    def show(self, top: bool = False) -> str:
        return f"!{self.body.show()}"


ONE = One()


def lolli(*types: Type) -> Type:
    """``lolli(A, B, C) = A ⊸ (B ⊸ C)``."""
    result = types[-1]
    for source in reversed(types[:-1]):
        result = Lolli(source, result)
    return result


def endo(a: Type) -> Lolli:
    """``A ⊸ A``."""
    return Lolli(a, a)


def int_type(a: Type) -> Type:
    """``int_A = !(A ⊸ A) ⊸ (A ⊸ A)``."""
    return lolli(Bang(endo(a)), endo(a))


def bint_type(a: Type) -> Type:
    """``bint_A = !(A ⊸ A) ⊸ (!(A ⊸ A) ⊸ (A ⊸ A))``."""
    return lolli(Bang(endo(a)), Bang(endo(a)), endo(a))


def dual(a: Type) -> Lolli:
    """``A^∨ = A ⊸ 1``."""
    return Lolli(a, ONE)


def is_first_order(a: Type) -> bool:
    """Atoms and 1, and ⊸ between them: the types whose values are plain tensors or matrices."""
    if isinstance(a, (Atom, One)):
        return True
    return isinstance(a, Lolli) and isinstance(a.source, (Atom, One)) and isinstance(a.target, (Atom, One))
