"""The ops of the working graph: ``Op`` (one node), whose ``kind`` (``lsrl.kinds.Kind``) says what it computes.

Ops mirror the program's node types, with one difference: a Concat holds a *gather*, a list of
slots ``(op, picks)`` that each take the components ``picks`` of ``op`` (see ``lsrl.ir.graph``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from lsrl.kinds import CONCAT, LINEAR, LINSTATE, RELUSTATE, Kind

if TYPE_CHECKING:
    from lsrl.ir.labels import UnitLabel
    from lsrl.numbers import Matrix


# the weights an op of each kind holds; an op keeps a state's init as ``init`` (a node as ``init_state``)
WEIGHTS: dict[Kind, tuple[str, ...]] = {
    LINEAR: ("A", "b"), LINSTATE: ("A", "B", "b", "init"), RELUSTATE: ("A", "B", "b", "init"),
}


class Op:
    """One node of the working graph. ``A, b`` for linear; ``A, B, b, init`` for the state kinds;
    ``picks`` (one sequence of components per input) for concat. A weight an op's kind does not
    have is None (typed as ``Matrix``: passes read a weight only after checking the kind, and
    ``Graph.verify`` checks that every kind holds its weights)."""

    _ids = itertools.count()
    A: Matrix
    B: Matrix
    b: Matrix
    init: Matrix

    def __init__(self, kind: Kind, inputs: Iterable[Op], dim: int, name: str | None = None,
                 A: Matrix | None = None, B: Matrix | None = None, b: Matrix | None = None,
                 init: Matrix | None = None, picks: list[Sequence[int]] | None = None, bounds: Any = None,
                 integer: bool = False, labels: Iterable[UnitLabel | None] | None = None) -> None:
        self.kind, self.inputs, self.dim = kind, list(inputs), dim
        # per component (lsrl.ir.labels)
        self.labels: list[UnitLabel | None] = list(labels) if labels is not None else [None] * dim
        # None where the kind has no such weight (see the class doc); no cast(): it runs for every op made
        self.A, self.B, self.b, self.init = A, B, b, init  # type: ignore[assignment]
        self.picks: list[Sequence[int]] = picks  # type: ignore[assignment]  # None unless a concat
        self.bounds, self.integer = bounds, integer  # what an input declares about its values
        self.id = next(Op._ids)
        self.name = name or f"{kind.lower()}_{self.id}"
        self.nnz: int = sum(getattr(self, w).nnz for w in WEIGHTS.get(kind, ()))

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
