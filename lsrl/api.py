"""The names ``import lsrl`` gives (``lsrl/__init__.py`` lists them in ``__all__``), imported together on
the first use of any of them: the language, the sugar, the compiler, and the packages that register the
model's front doors (``lsrl.model.extensions``: the targets of ``model.to_torch``, the builder of
``model.to_hf``). Every public name here is one of ``lsrl.__all__`` and the other way round."""
# ruff: noqa: F401  (every import is a name of lsrl, re-exported)

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
# ``import lsrl.x as x``, not ``from lsrl import x``: the package's lazy attributes would load this module again
import lsrl.programs as programs
import lsrl.automata as automata
import lsrl.targets as targets  # registers the targets that model.to_torch builds (torch is imported only then)
import lsrl.hf as hf  # registers model.to_hf (transformers is imported only when a model is built)
