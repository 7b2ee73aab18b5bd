"""LLRNN: recurrent networks whose update operator is the denotation of a linear-logic program.

After "Linear logic and recurrent neural networks" (Hu & Murfet): ``lsrl.llrnn.logic`` holds the
types, terms, type checker and denotations; ``lsrl.llrnn.explicit`` the models written from the
paper's explicit equations (on ``lsrl.llrnn.recurrent``'s flat named state); ``lsrl.llrnn.cell`` the
generic LLRNN cell that runs a master term.
"""

from __future__ import annotations

from importlib import import_module as _import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and the API page see; at run time each name loads on first use
    from lsrl.llrnn.cell import LLRNN, Commands, Data, Space, StateSpace
    from lsrl.llrnn.explicit import (
        NTM, DihedralNTM, DihedralPolynomialStepNTM, HigherOrderRNN, MultiplePatternNTM, MultiplicativeRNN,
        PatternNTM, PolynomialStepNTM, RingMachine, SecondOrderRNN,
    )
    from lsrl.llrnn.recurrent import RecurrentModel
    from lsrl.llrnn.forms import llrnn_form
    from lsrl.llrnn.ring import apply_powers, reflection, rotation, word_counts, word_operator, word_transform

# where each public name lives: the models import torch, so the package loads them on first use (the command
# line's settings, lsrl.llrnn.settings, load without torch)
_HOMES = {**dict.fromkeys(("LLRNN", "Commands", "Data", "Space", "StateSpace"), "cell"),
          **dict.fromkeys(("NTM", "DihedralNTM", "DihedralPolynomialStepNTM", "HigherOrderRNN", "MultiplePatternNTM",
                           "MultiplicativeRNN", "PatternNTM", "PolynomialStepNTM", "RingMachine", "SecondOrderRNN"),
                         "explicit"),
          "RecurrentModel": "recurrent",
          "llrnn_form": "forms",
          **dict.fromkeys(("apply_powers", "reflection", "rotation", "word_counts", "word_operator",
                           "word_transform"), "ring")}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'lsrl.llrnn' has no attribute {name!r}")
    value = getattr(_import_module(f"lsrl.llrnn.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "apply_powers",
    "Commands",
    "Data",
    "DihedralNTM",
    "DihedralPolynomialStepNTM",
    "HigherOrderRNN",
    "LLRNN",
    "llrnn_form",
    "MultiplePatternNTM",
    "MultiplicativeRNN",
    "NTM",
    "PatternNTM",
    "PolynomialStepNTM",
    "RecurrentModel",
    "reflection",
    "RingMachine",
    "rotation",
    "SecondOrderRNN",
    "Space",
    "StateSpace",
    "word_counts",
    "word_operator",
    "word_transform",
]
