"""lsrl: write programs that run exactly inside recurrent neural networks (LSRL), and study them."""

from types import ModuleType as _ModuleType

from lsrl.errors import (
    AutomatonError, BackendError, DimensionError, GraphError, LsrlError, ModelFileError, SequenceError,
)
from lsrl.lang import Concat, ForEach, Input, LinState, Linear, Multi, Node, ReLU, ReLUState, value_bounds
from lsrl.numbers import Matrix
from lsrl.sugar import (
    IFELSE_VARIANTS,
    f_and,
    f_bump,
    f_constant,
    f_eq,
    f_ifelse,
    f_larger,
    f_modulo_counter,
    f_not,
    f_or,
    f_relu_identity,
    f_smaller,
    f_step,
)
from lsrl.compiler import CompiledProgram, compile, load
from lsrl.ir.labels import UnitLabel
from lsrl import programs
from lsrl import automata
from lsrl import targets  # registers the targets that model.to_torch builds (torch is imported only then)
from lsrl import hf  # registers model.to_hf (transformers is imported only when a model is built)

__all__ = [
    "automata",
    "AutomatonError",
    "BackendError",
    "compile",
    "CompiledProgram",
    "Concat",
    "DimensionError",
    "f_and",
    "f_bump",
    "f_constant",
    "f_eq",
    "f_ifelse",
    "f_larger",
    "f_modulo_counter",
    "f_not",
    "f_or",
    "f_relu_identity",
    "f_smaller",
    "f_step",
    "ForEach",
    "GraphError",
    "IFELSE_VARIANTS",
    "hf",
    "Input",
    "Linear",
    "LinState",
    "load",
    "LsrlError",
    "Matrix",
    "ModelFileError",
    "Multi",
    "Node",
    "programs",
    "ReLU",
    "ReLUState",
    "SequenceError",
    "targets",
    "UnitLabel",
    "value_bounds",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> _ModuleType:
    """``lsrl.experiments`` (it imports torch and matplotlib) loaded on first use, not on ``import lsrl``."""
    if name == "experiments":
        import importlib

        return importlib.import_module("lsrl.experiments")
    raise AttributeError(f"module 'lsrl' has no attribute {name!r}")
