"""The compiler: preparation fusions and the debranching rules of App. A, to a path of layers.

``lsrl.compile`` runs the stages ``to_graph -> prepare -> debranch -> prune -> to_layers``; each is
public and can be run on its own (see ``lsrl.compiler.pipeline``).
"""

from lsrl.compiler.compiled import CompiledProgram, load
from lsrl.compiler.debranch import debranch
from lsrl.compiler.fusion import prepare
from lsrl.compiler.graph import Graph
from lsrl.compiler.pipeline import compile, to_graph, to_layers
from lsrl.compiler.prune import prune

__all__ = ["CompiledProgram", "Graph", "compile", "debranch", "load", "prepare", "prune", "to_graph", "to_layers"]
