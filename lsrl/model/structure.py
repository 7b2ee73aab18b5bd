"""The structure of a state matrix ``A``: its independent blocks and what kind each is.

``CompiledProgram.summary`` lists the blocks that are not diagonal; the diagonalising pass
(``lsrl.compiler.diagonal``) and the diagonal targets read the same blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from lsrl.lang.nodes import LinState

if TYPE_CHECKING:
    from lsrl.lang.nodes import Node
    from lsrl.numbers import Matrix

DIAGONAL, PAIR, DELAY, OTHER = "diagonal", "pair", "delay", "other"


def components(A: Matrix) -> list[list[int]]:
    """Index lists of the connected components of ``A``'s off-diagonal sparsity graph."""
    d = A.shape2d[0]
    entries = [(i, j) for i, j, _ in A.entries() if i != j]
    graph = sp.coo_array(([1] * len(entries), ([e[0] for e in entries], [e[1] for e in entries])), shape=(d, d))
    count, labels = connected_components(graph, directed=False)
    groups: list[list[int]] = [[] for _ in range(count)]
    for index, label in enumerate(labels.tolist()):
        groups[label].append(index)
    return groups


def _is_delay_line(block: np.ndarray) -> bool:
    """A nilpotent block with ``k - 1`` entries and a zero diagonal: shifts along a path, or a tree of them
    (a row may read two units; the users take whole powers of the block)."""
    k = block.shape[0]
    return bool(np.all(np.diag(block) == 0) and np.count_nonzero(block) == k - 1 and np.all(
        np.linalg.matrix_power(block, k) == 0
    ))


def state_blocks(A: Matrix) -> list[tuple[str, list[int]]]:
    """``A``'s independent blocks as ``(kind, indices)``: ``"diagonal"`` (one unit), ``"pair"`` (a 2x2
    block with complex eigenvalues), ``"delay"`` (a nilpotent shift, a short convolution) or
    ``"other"`` (anything else: not a diagonal form)."""
    dense = A.to_numpy()
    blocks = []
    for indices in components(A):
        block = dense[np.ix_(indices, indices)]
        if len(indices) == 1:
            kind = DIAGONAL
        elif len(indices) == 2 and np.trace(block) ** 2 < 4 * np.linalg.det(block):
            kind = PAIR
        elif _is_delay_line(block):
            kind = DELAY
        else:
            kind = OTHER
        blocks.append((kind, indices))
    return blocks


def structured_blocks_note(layers: Iterable[Node]) -> str:
    """One line per LinState that has blocks other than 1x1 (for ``CompiledProgram.summary``)."""
    lines = []
    for layer in layers:
        if not isinstance(layer, LinState):
            continue
        counts: dict[str, list[int]] = {}
        for kind, indices in state_blocks(layer.A):
            if kind != DIAGONAL:
                counts.setdefault(kind, []).append(len(indices))
        if counts:
            listed = ", ".join(f"{len(sizes)} {kind} block(s) of size {sizes}" for kind, sizes in counts.items())
            lines.append(f"\n  LinState '{layer.name}': {listed}")
    return "".join(lines)
