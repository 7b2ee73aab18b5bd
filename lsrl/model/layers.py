"""What the model reads of its layers beyond their weights."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsrl.errors import InternalError

if TYPE_CHECKING:
    from lsrl.lang.nodes import Node


def width_of(node: Node) -> int:
    """The width of a built node (``Node.dim`` is None only while the node's constructor runs)."""
    if node.dim is None:
        raise InternalError(f"{node.describe()} has no width: it was not built")
    return node.dim
