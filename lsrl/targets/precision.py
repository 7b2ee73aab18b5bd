"""Can a compiled program run correctly in a given float precision?

A float with a ``p``-bit significand rounds a term of magnitude ``m`` by up to ``m * 2**-p``. The
paper's ``f_ifelse`` (variant "original", ``lambda_ = 1e10``) adds ``lambda_``-sized terms to small
values and cancels them again, so in float32 the small value is lost (an error of about 600); the
multiplicative variants and the robust constructions keep every weight small. The scale of a
program is the largest of its weights and of its ``Input``'s declared bounds (``value_bounds`` of
the Input: exact, given by the user); a program is flagged for a dtype when ``scale * 2**-p``
exceeds ``ERROR_BUDGET``, a margin below the width ``1 / mu = 1e-3`` of the paper's steps.

The propagated bounds of inner layers are not used: interval arithmetic over-estimates them by
orders of magnitude (the multiplicative discrete approximator, exact in float32, gets bounds of
1.5e9), so they would refuse good models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lsrl.errors import LsrlError
from lsrl.lang import value_bounds

if TYPE_CHECKING:
    from lsrl.model.compiled import CompiledProgram

SIGNIFICAND_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
SMALLEST_NORMAL_EXPONENT = {"float16": -14, "bfloat16": -126, "float32": -126, "float64": -1022}
ERROR_BUDGET = 2.0 ** -12
_WEIGHTS = ("A", "B", "b", "init_state")


@dataclass(frozen=True)
class Precision:
    """The largest magnitude in a program and where it sits."""

    scale: float
    where: str

    def problem(self, dtype: str) -> str | None:
        """Why the program cannot be trusted in ``dtype`` (a message), or None."""
        bits = SIGNIFICAND_BITS.get(dtype)
        if bits is None:
            return f"no precision check for dtype {dtype!r} (known: {', '.join(SIGNIFICAND_BITS)})"
        error = self.scale * 2.0 ** -bits
        if error <= ERROR_BUDGET:
            return None
        return (
            f"{self.where} has magnitude {self.scale:.3g}; {dtype} rounds it by up to {error:.3g}, more than the "
            f"{ERROR_BUDGET:.3g} the steps and conditionals can absorb, so outputs can be wrong. The paper's "
            "f_ifelse (variant 'original', lambda_=1e10) does this: compile the program with ifelse='multiplicative' "
            "(or robust=True for the approximators), or run in float64"
        )


def gate_bound_range(dtype: str) -> tuple[float, float]:
    """``(lowest, highest)`` gate bound a GRU's product layer (``lsrl.targets.gru_lstm``) may use in ``dtype``.

    The product rounds ``1 - Q / gate_bound`` to the ``2**-p`` spacing of numbers near 1 and divides
    the difference of two such units by ``1 / gate_bound``: it errs by about ``gate_bound * 2**-p``
    times the factor's magnitude. The highest bound keeps that within ``ERROR_BUDGET``
    (``gate_bound <= 2**(p - 12)``: 2**41 ~ 2.2e12 in float64, 4096 in float32); the lowest keeps
    ``1 / gate_bound`` finite and ``gate_bound`` a normal number.
    """
    bits = SIGNIFICAND_BITS[dtype]
    return 2.0 ** SMALLEST_NORMAL_EXPONENT[dtype], 2.0 ** bits * ERROR_BUDGET


def precision_of(model: CompiledProgram) -> Precision:
    """The scale of a ``CompiledProgram``: its largest weight or declared input bound."""
    low, high = value_bounds(model.input)
    finite = [abs(v) for v in (*low, *high) if not math.isinf(v)]
    best = Precision(float(max(finite, default=0)), f"{model.input.describe()}'s declared bound")
    for layer in model.layers:
        for weight in _WEIGHTS:
            matrix = getattr(layer, weight, None)
            entries = matrix.entries() if matrix is not None else ()
            largest = max((abs(float(value)) for _, _, value in entries), default=0.0)
            if largest > best.scale:
                best = Precision(largest, f"weight {weight} of {layer.kind} '{layer.name}'")
    return best


# ---- the stated tolerance of a float target ----------------------------------------------------

CHECKED_STEPS = 200_000  # the longest run benchmarks/tolerances.py checks the stated tolerance on
ROUNDINGS = 256  # roundings of scale-sized terms per output and step that the stated tolerance allows


class ToleranceWarning(RuntimeWarning):
    """A module runs where its stated tolerance (``module.tolerance``) was not checked: longer than
    ``CHECKED_STEPS`` steps, or in a dtype without a significand width in ``SIGNIFICAND_BITS``."""


@dataclass(frozen=True)
class Tolerance:
    """The stated error of a float module: ``|output - exact| <= bound(steps, magnitude)``, compared with
    the exact interpreter on the same inputs, for inputs within the declared ``Input`` bounds.

    ``bound = ROUNDINGS * 2^-p * max(scale, magnitude) * steps + products``: every output may carry
    ``ROUNDINGS`` roundings of the largest term a layer adds up (``scale``: the largest weight or
    declared input bound, as ``precision_of``; ``magnitude``: the largest input of the run, for
    inputs without declared bounds) at every step, plus the GRU product's ``5 * gate_bound * 2^-p``
    times ``scale`` (``lsrl.targets.gru_lstm``). This is a stated, checked bound, not a proof: the
    float error analysis of a whole program (the paper's ``lambda_ = 1e10`` conditionals multiply an
    upstream rounding by ``lambda_``) over-estimates by 20 orders of magnitude. ``benchmarks/tolerances.py``
    measures every path against it (``docs/results/benchmarks/tolerances.csv``) on the library's
    programs, random programs and a numerically diagonalised rotation over up to ``CHECKED_STEPS``
    steps; a longer run warns (``ToleranceWarning``).
    """

    dtype: str
    scale: float
    gate_bound: float | None = None

    @property
    def unit(self) -> float:
        """``2^-p``: half the spacing of the dtype's numbers near 1."""
        return 2.0 ** -SIGNIFICAND_BITS[self.dtype]

    def bound(self, steps: int, magnitude: float = 0.0) -> float:
        """The stated bound for a run of ``steps`` steps whose inputs are at most ``magnitude`` in size."""
        scale = max(self.scale, float(magnitude))
        products = 0.0 if self.gate_bound is None else 5 * self.gate_bound * self.unit * scale
        return ROUNDINGS * self.unit * scale * max(1, int(steps)) + products

    def in_dtype(self, dtype: str) -> Tolerance:
        """The same module's tolerance when it runs in ``dtype`` (after ``module.to(...)``)."""
        if dtype not in SIGNIFICAND_BITS:
            raise LsrlError(f"no tolerance for dtype {dtype!r} (known: {', '.join(SIGNIFICAND_BITS)})")
        return replace(self, dtype=dtype)

    def exceeded_by(self, steps: int) -> str | None:
        """Why a run of ``steps`` steps lies where the bound was not checked (a message), or None."""
        if steps > CHECKED_STEPS:
            return (f"{steps} steps is beyond the {CHECKED_STEPS} steps on which the stated tolerance "
                    "(module.tolerance) was checked; compare with model(xs, exact=True)")
        return None


def tolerance_of(model: CompiledProgram, dtype: str = "float64", gate_bound: float | None = None) -> Tolerance:
    """The stated tolerance (``Tolerance``) of a module computing ``model``'s layers in ``dtype``."""
    return Tolerance("float64", max(precision_of(model).scale, 1.0), gate_bound).in_dtype(dtype)
