"""The ops of the working graph: ``Op`` (one node), whose ``kind`` (``lsrl.kinds.Kind``) says what it computes.

Ops mirror the program's node types, with one difference: a Concat holds a *gather*, a list of
slots ``(op, picks)`` that each take the components ``picks`` of ``op`` (see ``lsrl.ir.graph``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from lsrl.errors import InternalError
from lsrl.kinds import CONCAT, LINEAR, LINSTATE, RELUSTATE, Kind

if TYPE_CHECKING:
    from lsrl.ir.labels import UnitLabel
    from lsrl.numbers import Matrix


# the weights an op of each kind holds; an op keeps a state's init as ``init`` (a node as ``init_state``)
WEIGHTS: dict[Kind, tuple[str, ...]] = {
    LINEAR: ("A", "b"), LINSTATE: ("A", "B", "b", "init"), RELUSTATE: ("A", "B", "b", "init"),
}


InputBounds: TypeAlias = tuple[list[Any], list[Any]]  # an input's (low, high) per component, as lsrl.lang.Input


@dataclass(frozen=True, slots=True)
class OpParts:
    """What an op holds besides its inputs, each part used by some kinds only (None where the kind has none):
    ``A, b`` of a linear; ``A, B, b, init`` of a state; ``picks`` (one sequence of components per input) of a
    concat; ``bounds`` and ``integer``, what an input declares about its values."""

    A: Matrix | None = None
    B: Matrix | None = None
    b: Matrix | None = None
    init: Matrix | None = None
    picks: list[Sequence[int]] | None = None
    bounds: InputBounds | None = None
    integer: bool = False


NO_PARTS = OpParts()  # a ReLU's or a Multi's


class Op:
    """One node of the working graph: its ``kind``, ``inputs`` and width ``dim``, its ``parts`` and the
    ``labels`` of its components (lsrl.ir.labels). ``op.A``, ``op.B``, ``op.b``, ``op.init`` and
    ``op.picks`` read the parts a pass expects the op's kind to hold, and raise ``InternalError`` where it
    holds none (``Graph.verify`` checks that every kind holds its parts)."""

    _ids = itertools.count()

    def __init__(self, kind: Kind, inputs: Iterable[Op], dim: int, name: str | None = None,
                 parts: OpParts = NO_PARTS, labels: Iterable[UnitLabel | None] | None = None) -> None:
        self.kind, self.inputs, self.dim, self.parts = kind, list(inputs), dim, parts
        self.labels: list[UnitLabel | None] = list(labels) if labels is not None else [None] * dim
        self.id = next(Op._ids)
        self.name = name or f"{kind.lower()}_{self.id}"
        self.nnz: int = sum(getattr(parts, w).nnz for w in WEIGHTS.get(kind, ()))

    def _lacks(self, part: str) -> InternalError:
        return InternalError(f"op %{self.name} ({self.kind.lower()}) holds no {part}")

    # the passes read these in their inner loops: each property is one look and one test
    @property
    def A(self) -> Matrix:
        if (A := self.parts.A) is None:
            raise self._lacks("A")
        return A

    @property
    def B(self) -> Matrix:
        if (B := self.parts.B) is None:
            raise self._lacks("B")
        return B

    @property
    def b(self) -> Matrix:
        if (b := self.parts.b) is None:
            raise self._lacks("b")
        return b

    @property
    def init(self) -> Matrix:
        if (init := self.parts.init) is None:
            raise self._lacks("init")
        return init

    @property
    def picks(self) -> list[Sequence[int]]:
        if (picks := self.parts.picks) is None:
            raise self._lacks("picks")
        return picks

    @property
    def bounds(self) -> InputBounds | None:
        return self.parts.bounds

    @property
    def integer(self) -> bool:
        return self.parts.integer

    def __repr__(self) -> str:
        return f"Op({self.name}, dim={self.dim}, in={[x.name for x in self.inputs]})"

    @property
    def slots(self) -> Iterator[tuple[Op, Sequence[int]]]:
        """A concat's ``(input, picks)`` pairs."""
        return zip(self.inputs, self.picks)

    @property
    def is_slice(self) -> bool:
        """A Linear that only selects (and possibly repeats) input components."""
        return self.kind == LINEAR and self.b.is_zero() and self.A.is_selection()

    def is_identity(self) -> bool:
        """A Slice that picks every component of its input in order."""
        return self.is_slice and self.dim == self.inputs[0].dim and self.A.selected_columns() == list(range(self.dim))

    def describe(self) -> str:
        """One line: ``%name = kind[dim](%input, ...)`` and the weights' sizes."""
        if self.kind == CONCAT:
            args = ", ".join(f"%{x.name}{_picks_text(p, x.dim)}" for x, p in self.slots)
        else:
            args = ", ".join(f"%{x.name}" for x in self.inputs)
        weights = "  ".join(
            f"{w}{'x'.join(map(str, getattr(self, w).shape))} nnz={getattr(self, w).nnz}"
            for w in WEIGHTS.get(self.kind, ())
        )
        return f"%{self.name} = {self.kind.lower()}[{self.dim}]({args}){'  ' + weights if weights else ''}"


def _picks_text(picks: Iterable[int], width: int) -> str:
    picks = list(picks)
    if picks == list(range(width)):
        return ""
    if picks and picks == list(range(picks[0], picks[-1] + 1)):
        return f"[{picks[0]}:{picks[-1] + 1}]"
    return f"[{','.join(map(str, picks))}]"
