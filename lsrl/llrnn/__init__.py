"""LLRNN: recurrent networks whose update operator is the denotation of a linear-logic program.

After "Linear logic and recurrent neural networks" (Hu & Murfet): ``lsrl.llrnn.logic`` holds the
types, terms, type checker and denotations; ``lsrl.llrnn.explicit`` the models written from the
paper's explicit equations; ``lsrl.llrnn.cell`` the generic LLRNN cell that runs a master term.
"""

from __future__ import annotations

from lsrl.llrnn.cell import LLRNN, Commands, Data, Space, StateSpace
from lsrl.llrnn.explicit import (
    NTM, DihedralNTM, DihedralPolynomialStepNTM, HigherOrderRNN, MultiplePatternNTM, MultiplicativeRNN, PatternNTM,
    PolynomialStepNTM, RecurrentModel, RingMachine, SecondOrderRNN,
)
from lsrl.llrnn.forms import llrnn_form
from lsrl.llrnn.ring import apply_powers, reflection, rotation, word_counts, word_operator, word_transform

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
