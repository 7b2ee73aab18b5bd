"""What the model and its file format read of the layers beyond their weights: a diagonal form's eigenbases."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lsrl.numbers import Matrix

# a model.diagonal()'s eigenbases (lsrl.compiler.diagonal): rewritten LinState's name -> (layer index, V^-1, V^-1 B)
Eigenbases = dict[str, tuple[int, "Matrix", "Matrix"]]
