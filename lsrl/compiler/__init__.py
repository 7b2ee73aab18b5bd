"""The compiler: passes from a program's working graph to a path of layers (App. A).

``lsrl.compile`` runs the stages ``to_graph -> prepare -> debranch -> prune -> to_layers``; each is
public and can be run on its own (see ``lsrl.compiler.pipeline``). ``lsrl.compiler.diagonal`` is the
pass behind ``model.diagonal()``.
"""

from lsrl.compiler import diagonal  # noqa: F401  (registers model.diagonal(), see lsrl.model.extensions)
from lsrl.compiler.debranch import debranch
from lsrl.compiler.fusion import prepare
from lsrl.compiler.pipeline import compile, to_graph, to_layers
from lsrl.compiler.prune import prune
from lsrl.ir.graph import Graph
from lsrl.model import CompiledProgram, load

__all__ = ["CompiledProgram", "Graph", "compile", "debranch", "load", "prepare", "prune", "to_graph", "to_layers"]
