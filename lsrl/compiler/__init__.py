"""The compiler: preparation fusions and the debranching rules of App. A, to a path of layers."""

from lsrl.compiler.compiled import CompiledProgram, load
from lsrl.compiler.pipeline import compile

__all__ = ["CompiledProgram", "compile", "load"]
