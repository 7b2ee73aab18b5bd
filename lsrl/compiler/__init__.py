"""The compiler: passes from a program's working graph to a path of layers (App. A).

``lsrl.compile`` runs ``to_graph``, the ``PASSES`` (``prepare -> debranch -> prune``) and
``to_layers`` (``lsrl.compiler.pipeline``); each stage is public and can be run on its own.
``lsrl.compiler.diagonal`` is the pass behind ``model.diagonal()``.
"""

from lsrl.compiler import diagonal  # noqa: F401  (registers model.diagonal(), see lsrl.model.extensions)
from lsrl.compiler.debranch import debranch
from lsrl.compiler.fusion import prepare
from lsrl.compiler.pipeline import PASSES, Stage, compile, run_passes, to_graph, to_layers
from lsrl.compiler.prune import prune
from lsrl.ir.graph import Graph
from lsrl.model import CompiledProgram, load

__all__ = [
    "PASSES", "CompiledProgram", "Graph", "Stage", "compile", "debranch", "load", "prepare", "prune", "run_passes",
    "to_graph", "to_layers",
]
