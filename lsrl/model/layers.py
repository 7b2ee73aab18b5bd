"""What the model and its file format read of the layers beyond their weights."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsrl.errors import InternalError

if TYPE_CHECKING:
    from lsrl.lang.nodes import Node
    from lsrl.numbers import Matrix

# a model.diagonal()'s eigenbases (lsrl.compiler.diagonal): rewritten LinState's name -> (layer index, V^-1, V^-1 B)
Eigenbases = dict[str, tuple[int, "Matrix", "Matrix"]]


def width_of(node: Node) -> int:
    """The width of a built node (``Node.dim`` is None only while the node's constructor runs)."""
    if node.dim is None:
        raise InternalError(f"{node.describe()} has no width: it was not built")
    return node.dim
