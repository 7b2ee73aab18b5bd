"""lsrl: write programs that run exactly inside recurrent neural networks (LSRL), and study them.

``import lsrl`` is quick: the names of ``__all__`` (``lsrl.api``) load together on the first use of any of them.
"""

# ruff: noqa: F405  (the names of __all__ come from lsrl.api, star-imported for type checkers only)
from importlib import import_module as _import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and the API pages see; at run time the same names load on first use
    from lsrl.api import *  # noqa: F403

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


# lsrl.experiments imports torch and matplotlib: it loads on its own first use, not with the names above
_LAZY_MODULES = ("experiments",)


def __getattr__(name: str) -> Any:
    """A name of ``__all__``, from ``lsrl.api`` (all of them loaded at once, on the first use of any), or
    ``lsrl.experiments``: ``import lsrl`` itself imports neither numpy nor scipy, so ``lsrl --help`` is quick."""
    if name in __all__:
        api = _import_module("lsrl.api")
        globals().update({public: getattr(api, public) for public in __all__})
        return globals()[name]
    if name in _LAZY_MODULES:
        return _import_module(f"lsrl.{name}")
    raise AttributeError(f"module 'lsrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_LAZY_MODULES})
