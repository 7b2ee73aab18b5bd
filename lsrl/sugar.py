"""Syntactic sugar of Sec. 3, Sec. 5 and App. F, built from the six nodes only.

Defaults follow the paper: steps of steepness ``mu = 1000`` and ``lambda_ = 1e10`` in the ReLU-based
conditionals. ``f_ifelse``'s optimised variants drop terms that the value-range analysis
(``lsrl.lang.bounds``) proves unnecessary.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, TypeAlias, cast

import numpy as np

from lsrl.errors import DimensionError, LsrlError, shown, whole_number
from lsrl.lang.bounds import ValueRange, is_nonnegative, is_nonpositive, is_zero, max_abs, value_bounds
from lsrl.lang.nodes import Concat, Linear, LinState, Multi, Node, ReLU, as_node
from lsrl.numbers import EXACT, Matrix, MatrixLike, is_number, to_rational

if TYPE_CHECKING:
    import gmpy2
    from numpy.typing import ArrayLike

Operand: TypeAlias = "Node | MatrixLike"  # a node, or a constant (scalar or vector) turned into f_constant

DEFAULT_MU = 1000
DEFAULT_LAMBDA = 10**10
MAX_DIVISOR = 10**5  # f_modulo_counter: one state unit per residue; 10**5 builds in seconds, 10**6 took a minute
IFELSE_VARIANTS = (
    "original",
    "optimized",
    "step",
    "step_optimized",
    "multiplicative",
    "multiplicative_optimized",
)


def positive_number(value: object, where: str) -> gmpy2.mpq:
    """``value`` as an exact positive rational, or an ``LsrlError`` naming ``where``."""
    if isinstance(value, bool) or not is_number(value):
        raise LsrlError(f"{where} must be a positive number, got {type(value).__name__} {value!r}")
    try:
        number = to_rational(value, where)
    except DimensionError as error:  # NaN, infinity, complex
        raise LsrlError(f"{where} must be a positive finite number, got {value!r} ({error})") from None
    if number <= 0:
        raise LsrlError(f"{where} must be positive, got {value!r}")
    return number


def flag(value: object, where: str) -> bool:
    """``value`` if it is True or False (numpy's too), else an ``LsrlError`` naming ``where``."""
    if not isinstance(value, (bool, np.bool_)):
        raise LsrlError(f"{where} must be True or False, got {type(value).__name__} {shown(value)}")
    return bool(value)


def positive_integer(value: object, where: str, at_most: int | None = None) -> int:
    """``value`` as a positive ``int`` (at most ``at_most``), or an ``LsrlError`` naming ``where``."""
    # a bool is no count, and a numpy timedelta64 (a numpy integer type) is a duration
    number = whole_number(value)
    if number is None:
        raise LsrlError(f"{where} must be a positive integer, got {type(value).__name__} {shown(value)}")
    if number < 1 or (at_most is not None and number > at_most):
        limit = "" if at_most is None else f" up to {at_most}"
        raise LsrlError(f"{where} must be a positive integer{limit}, got {value!r}")
    return number


def _never_below(lower: Node, upper: Node) -> tuple[int, ValueRange, ValueRange] | None:
    """A component where ``lower >= upper`` at every step (by the value-range analysis of each; a
    dim-1 operand is broadcast), with both ranges; None if there is none."""
    low, high = value_bounds(lower), value_bounds(upper)
    for i in range(max(lower.dim, upper.dim)):
        if low.low[min(i, lower.dim - 1)] >= high.high[min(i, upper.dim - 1)]:
            return i, low, high
    return None


def _operand(value: Operand, like: Node, where: str) -> Node:
    """A node, or a constant (scalar or vector) turned into ``f_constant(like, value)``; ``where`` names
    the argument in the error for anything else."""
    if isinstance(value, Node):
        node = value
    elif not isinstance(value, bool) and (isinstance(value, numbers.Number)  # a bool is no number
                                          or hasattr(value, "__len__") and not isinstance(value, (str, bytes))):
        node = _constant(like, value, where)
    else:
        raise LsrlError(f"{where}: expected a node or a number, got {type(value).__name__}"[:300])
    if node.dim not in (1, like.dim):  # it meets like component by component (a dim-1 operand is broadcast)
        raise LsrlError(f"{where} has {node.dim} components; {like.describe()} has {like.dim} (or give 1)")
    return node


def _node_or_number(value: Node | float, where: str) -> Node | float:
    """``value`` if it is a node or a finite real number, else an ``LsrlError`` naming ``where``."""
    if isinstance(value, Node):
        return value
    if isinstance(value, bool) or not is_number(value):
        raise LsrlError(f"{where} must be a node or a number, got {type(value).__name__} {value!r}"[:300])
    return to_rational(value, where)  # exact (a numpy integer would wrap in y - tolerance); NaN, inf, complex refused


def f_constant(x: Node, value: MatrixLike, name: str | None = None) -> Linear:
    """A constant vector (or scalar) that ignores the value of ``x``."""
    return _constant(as_node(x, "f_constant"), value, "f_constant: value", name)


def _constant(x: Node, value: MatrixLike, where: str, name: str | None = None) -> Linear:
    """``f_constant(x, value)``, its errors naming the argument as ``where``."""
    if value is None:  # EXACT.vector reads None as "no vector" (zeros): a constant must be given
        raise LsrlError(f"{where} must be a number or a vector of numbers, got None")
    try:  # a 0-d array or tensor has __len__ yet no length: a scalar
        length = len(value) if hasattr(value, "__len__") and np.ndim(cast("ArrayLike", value)) > 0 else 1
    except (TypeError, ValueError):  # ragged
        raise LsrlError(f"{where} must be a number or a vector of numbers, got {shown(value)}") from None
    if length == 0:  # a node of no components
        raise LsrlError(f"{where} must hold at least one number, got {shown(value)}")
    vector = EXACT.vector(value, length, where)
    return Linear(x, EXACT.zeros(vector.shape2d[0], x.dim), vector, name=name)


def f_step(x: Node, mu: float = DEFAULT_MU, name: str | None = None, saturating: bool = False) -> Node:
    """``ReLU(mu x) - ReLU(mu x - 1)``: 0 for x <= 0, 1 for x >= 1/mu, linear in between.

    ``saturating=True`` builds the same function as ``ReLU(1 - ReLU(1 - mu x))``, one ReLU layer
    deeper. The paper's form carries ``mu x`` through both ReLUs, so noise on the weights that
    subtract them moves a saturated step by ``noise * mu |x|``; in this form no large value reaches
    the next layer on the 1 side (the inner ReLU is 0), and on the 0 side it only pushes the outer
    ReLU further below zero: a saturated step stays exactly 0 (or 1 up to the noise on one bias).
    """
    x = as_node(x, "f_step")
    mu = positive_number(mu, f"f_step on {x.describe()}: mu")
    saturating = flag(saturating, f"f_step on {x.describe()}: saturating")
    d = x.dim
    if saturating:
        return ReLU(Linear(ReLU(Linear(x, EXACT.eye(d, -mu), [1] * d)), EXACT.eye(d, -1), [1] * d), name=name)
    both = ReLU(Linear(x, EXACT.vstack([EXACT.eye(d, mu), EXACT.eye(d, mu)]), [0] * d + [-1] * d))
    return Linear(both, EXACT.hstack([EXACT.eye(d), EXACT.eye(d, -1)]), name=name)


def f_bump(x: Node, lb: Operand, ub: Operand, mu: float = DEFAULT_MU, name: str | None = None,
           saturating: bool = False) -> Linear:
    """``f_step(x - lb) - f_step(x - ub)``: about 1 for lb < x <= ub, else 0 (edges of width 1/mu).

    ``lb`` must lie below ``ub``: a bump whose lower edge is at or above its upper edge (for every
    input within the declared bounds) is 0 or negative everywhere, and is refused."""
    x = as_node(x, "f_bump")
    lower = _operand(lb, x, f"f_bump on {x.describe()}: lb")
    upper = _operand(ub, x, f"f_bump on {x.describe()}: ub")
    inverted = _never_below(lower, upper)
    if inverted is not None:
        i, low, high = inverted
        i_low, i_high = min(i, lower.dim - 1), min(i, upper.dim - 1)
        raise LsrlError(f"f_bump on {x.describe()}: lb must lie below ub, but in component {i} lb (in "
                        f"[{low.low[i_low]}, {low.high[i_low]}]) is never below ub (in [{high.low[i_high]}, "
                        f"{high.high[i_high]}])")
    return Linear(
        Concat([f_step(x - lower, mu, saturating=saturating), f_step(x - upper, mu, saturating=saturating)]),
        EXACT.hstack([EXACT.eye(x.dim), EXACT.eye(x.dim, -1)]),
        name=name,
    )


def f_not(x: Node, name: str | None = None) -> Linear:
    """``1 - x`` for x in {0, 1}."""
    x = as_node(x, "f_not")
    return Linear(x, EXACT.eye(x.dim, -1), [1] * x.dim, name=name)


def f_and(x: Node, y: Node, *more: Node, mu: float = DEFAULT_MU, name: str | None = None) -> ReLU:
    """``ReLU(f_step(x) + f_step(y) + ... - (k - 1))`` for k operands in {0, 1}."""
    operands = [as_node(v, "f_and") for v in (x, y, *more)]
    dims = {v.dim for v in operands}
    if len(dims) > 1:
        raise DimensionError(f"f_and: operands {[v.describe() for v in operands]} have different dims {dims}")
    d = operands[0].dim
    _logic_mu(mu, "f_and")
    steps = f_step(Concat(operands) if len(operands) > 1 else operands[0], mu)
    summed = Linear(steps, EXACT.hstack([EXACT.eye(d)] * len(operands)), [1 - len(operands)] * d)
    return ReLU(summed, name=name)


def f_or(x: Node, y: Node, mu: float = DEFAULT_MU, name: str | None = None) -> Node:
    """``f_step(x + y)`` for x, y in {0, 1}."""
    _logic_mu(mu, "f_or")
    return f_step(as_node(x, "f_or") + as_node(y, "f_or"), mu, name=name)


def _logic_mu(mu: float, owner: str) -> None:
    """The steps of f_and and f_or read operands in {0, 1}: they reach 1 at 1 only if mu >= 1."""
    if positive_number(mu, f"{owner}: mu") < 1:
        raise LsrlError(f"{owner}: mu must be at least 1 (a step of width 1/mu = {float(1 / mu):.3g} does not reach 1 "
                        f"on operands in {{0, 1}}), got {mu!r}")


def f_larger(x: Node, y: Node | float, mu: float = DEFAULT_MU, name: str | None = None) -> Node:
    """``f_step(x - y)``: 1 where x > y (by at least 1/mu), else 0."""
    x = as_node(x, "f_larger")
    return f_step(x - _node_or_number(y, f"f_larger on {x.describe()}: y"), mu, name=name)


def f_smaller(x: Node, y: Node | float, mu: float = DEFAULT_MU, name: str | None = None) -> Node:
    """``f_step(y - x)``: 1 where x < y (by at least 1/mu), else 0."""
    x = as_node(x, "f_smaller")
    return f_step(-x + _node_or_number(y, f"f_smaller on {x.describe()}: y"), mu, name=name)


def f_eq(x: Node, y: Node | float, tolerance: float = 0.5, mu: float = DEFAULT_MU, name: str | None = None) -> ReLU:
    """1 where ``|x - y| < tolerance`` (for integer-valued x, y the default tolerance 1/2 is exact).

    The steps have width ``1/mu``, so ``tolerance`` must be at least ``1/mu`` (else ``f_eq(x, x)``
    is below 1)."""
    x = as_node(x, "f_eq")
    y = _node_or_number(y, f"f_eq on {x.describe()}: y")
    rational_tolerance = positive_number(tolerance, f"f_eq on {x.describe()}: tolerance")
    rational_mu = positive_number(mu, f"f_eq on {x.describe()}: mu")
    if rational_tolerance * rational_mu < 1:
        raise LsrlError(f"f_eq on {x.describe()}: tolerance={tolerance!r} is below the steps' width 1/mu = "
                        f"1/{mu!r}, so equal values would not give 1; raise tolerance or mu")
    return f_and(f_larger(x, y - rational_tolerance, mu), f_smaller(x, y + rational_tolerance, mu), mu=mu, name=name)


def f_relu_identity(x: Node, name: str | None = None) -> Linear:
    """``ReLU(x) - ReLU(-x)``, the identity through a ReLU (App. F.6)."""
    x = as_node(x, "f_relu_identity")
    d = x.dim
    both = Concat([ReLU(x), ReLU(Linear(x, EXACT.eye(d, -1)))])
    return Linear(both, EXACT.hstack([EXACT.eye(d), EXACT.eye(d, -1)]), name=name)


def f_modulo_counter(x: Node, divisor: int, method: str = "permutation", mu: float = DEFAULT_MU,
                     name: str | None = None) -> Linear:
    """``t mod divisor`` at step t = 0, 1, 2, ... (``x`` only anchors the node in the graph).

    ``method="permutation"``: a one-hot state cycled by a permutation matrix; rational weights,
    exact in the exact backend, no threshold. ``method="rotation"``: App. F.7, a unit vector rotated
    by 2π/divisor per step and read out by thresholding; its weights are irrational, so they are
    stored as the nearest floats (use it with the float backend).
    """
    x = as_node(x, "f_modulo_counter")
    if whole_number(divisor) is None or not 1 <= divisor <= MAX_DIVISOR:
        raise LsrlError(f"f_modulo_counter on {x.describe()}: divisor must be an integer in 1..{MAX_DIVISOR:,}, got "
                        f"{divisor!r}"[:300])
    if not isinstance(method, str) or method not in ("permutation", "rotation"):
        raise LsrlError(f"f_modulo_counter on {x.describe()}: method must be 'permutation' or 'rotation', got "
                        f"{shown(method)}")
    if method == "permutation":
        cycle = EXACT.from_entries((((i + 1) % divisor, i, 1) for i in range(divisor)), (divisor, divisor))
        # the state is rotated before it is read, so it starts one position before e_0
        one_hot: Node = LinState(x, cycle, EXACT.zeros(divisor, x.dim), init_state=[0] * (divisor - 1) + [1])
    elif method == "rotation":
        angle = 2 * math.pi / divisor
        # the readout f_larger(cos(phase), cos(angle / 2)) reaches 1 at the current phase only if its edge 1/mu is
        # within the margin 1 - cos(angle / 2); half of it is left to the float weights' rounding
        least_mu = 2 / (1 - math.cos(angle / 2))
        if positive_number(mu, f"f_modulo_counter on {x.describe()}: mu") < least_mu:
            raise LsrlError(f"f_modulo_counter on {x.describe()}: method='rotation' with divisor {divisor} needs mu >= "
                            f"{least_mu:.4g} (its readout's margin is 1 - cos(pi / {divisor})), got {shown(mu)}")
        rotation = [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]]
        cycler = LinState(
            x, rotation, EXACT.zeros(2, x.dim), init_state=[math.cos(angle), -math.sin(angle)]
        )
        extractor = [[math.cos(i * angle), math.sin(i * angle)] for i in range(divisor)]
        one_hot = f_larger(Linear(cycler, extractor), math.cos(angle / 2), mu)
    else:
        raise LsrlError(f"f_modulo_counter on {x.describe()}: unknown method {method!r}")
    return Linear(one_hot, [list(range(divisor))], name=name)


def _condition_columns(cond: Node, dim: int, factor: object) -> Matrix:
    """``factor`` times ``cond`` mapped onto ``dim`` outputs (a scalar condition is broadcast)."""
    if cond.dim == dim:
        return EXACT.eye(dim, factor)
    return EXACT.from_entries(((i, 0, factor) for i in range(dim)), (dim, 1))


def _ifelse_terms(t: Node, f: Node, optimized: bool) -> list[tuple[str, Node, int]]:
    """Which of Eq. (7)'s four ReLU terms are needed: (term, operand, sign) triples."""
    terms = [("f", f, 1), ("t", t, 1), ("f", f, -1), ("t", t, -1)]
    if not optimized:
        return terms

    def needed(operand: Node, sign: int) -> bool:
        if is_zero(operand):
            return False
        return not (is_nonpositive(operand) if sign > 0 else is_nonnegative(operand))

    return [(which, operand, sign) for which, operand, sign in terms if needed(operand, sign)]


def _auto_lambda(t: Node, f: Node) -> gmpy2.mpq:
    """The smallest safe λ the value-range analysis allows: 1 + the largest |t|, |f| (an integer)."""
    bound = max(max_abs(t), max_abs(f))
    if bound == math.inf:
        raise LsrlError(
            f"f_ifelse: lambda_='auto' needs bounded branches, but {t.describe()} or {f.describe()} is unbounded; "
            "declare bounds on the Input or pass lambda_"
        )
    return to_rational(math.floor(bound) + 1)


def _ifelse_relu(cond: Node, t: Node, f: Node, optimized: bool, lambda_: object, stepped: bool, mu: float,
                 name: str | None) -> Linear:
    """Eq. (7) (``stepped=False``) or Eq. (9) (``stepped=True``), unused terms dropped if optimized."""
    d = t.dim
    terms = _ifelse_terms(t, f, optimized)
    if not terms:
        return f_constant(t, [0] * d, name=name)
    lam = _auto_lambda(t, f) if lambda_ == "auto" else to_rational(lambda_, "f_ifelse: lambda_")
    if stepped:
        # guard[:c] = f_step(1/2 - cond) selects f, guard[c:] = f_step(cond - 1/2) selects t
        c = cond.dim
        flipped = Linear(cond, EXACT.vstack([EXACT.eye(c, -1), EXACT.eye(c)]), [0.5] * c + [-0.5] * c)
        gate, gate_dim = f_step(flipped, mu), c
    else:
        gate, gate_dim = cond, cond.dim
    parts = [gate] + [op for op in (t, f) if any(o is op for _, o, _ in terms)]
    parts = list(dict.fromkeys(parts))
    rows, bias = [], []
    for which, operand, sign in terms:
        blocks = []
        for part in parts:
            block = EXACT.zeros(d, part.dim)
            if part is gate:
                if stepped:
                    # lambda * guard[f or t] - lambda
                    offset = 0 if which == "f" else gate_dim
                    columns = [offset + (0 if gate_dim == 1 else i) for i in range(d)]
                    block = EXACT.from_entries(((i, c, lam) for i, c in enumerate(columns)), (d, part.dim))
                else:
                    # -lambda * cond for f, -lambda * (1 - cond) = lambda cond - lambda for t
                    block = _condition_columns(cond, d, -lam if which == "f" else lam)
            if part is operand:
                block = block + EXACT.eye(d, sign)
            blocks.append(block)
        rows.append(EXACT.hstack(blocks))
        bias.extend([-lam if (stepped or which == "t") else 0] * d)
    pre = Linear(parts[0] if len(parts) == 1 else Concat(parts), EXACT.vstack(rows), bias)
    signs = [sign for _, _, sign in terms]
    return Linear(ReLU(pre), EXACT.hstack([EXACT.eye(d, s) for s in signs]), name=name)


def _ifelse_multiplicative(cond: Node, t: Node, f: Node, optimized: bool, name: str | None) -> Linear:
    """Eq. (10): ``cond ⊙ t + (1 - cond) ⊙ f`` with one Multi; zero operands dropped if optimized."""
    d = t.dim
    keep_t = not (optimized and is_zero(t))
    keep_f = not (optimized and is_zero(f))
    if not (keep_t or keep_f):
        return f_constant(t, [0] * d, name=name)
    parts = list(dict.fromkeys([cond] + ([t] if keep_t else []) + ([f] if keep_f else [])))
    gate_rows, gate_bias, value_rows = [], [], []
    # gate rows: cond for t, 1 - cond for f; value rows: t, f
    for operand, kept, factor, offset in ((t, keep_t, 1, 0), (f, keep_f, -1, 1)):
        if not kept:
            continue
        gate_rows.append([_condition_columns(cond, d, factor) if p is cond else EXACT.zeros(d, p.dim) for p in parts])
        gate_bias.extend([offset] * d)
        value_rows.append([EXACT.eye(d) if p is operand else EXACT.zeros(d, p.dim) for p in parts])
    gate_matrix = EXACT.vstack([EXACT.hstack(blocks) for blocks in gate_rows])
    value_matrix = EXACT.vstack([EXACT.hstack(blocks) for blocks in value_rows])
    source = parts[0] if len(parts) == 1 else Concat(parts)
    products = Multi(Linear(source, EXACT.vstack([gate_matrix, value_matrix]), gate_bias + [0] * (d * len(gate_rows))))
    if len(gate_rows) == 1:
        return Linear(products, EXACT.eye(d), name=name)
    return Linear(products, EXACT.hstack([EXACT.eye(d), EXACT.eye(d)]), name=name)


def _require_selecting(cond: Node) -> None:
    """Refuse a condition that the value-range analysis proves is never 0 nor 1 in some component."""
    bounds = value_bounds(cond)
    for i, (low, high) in enumerate(zip(bounds.low, bounds.high)):
        if not (low <= 0 <= high or low <= 1 <= high):
            raise LsrlError(f"f_ifelse on {cond.describe()}: the condition must be 0 or 1, but component {i} lies in "
                            f"[{low}, {high}] (by value_bounds, from the declared Input bounds) at every step, so it "
                            "never selects a branch")


def f_ifelse(cond: Node, t: Node, f: Node, variant: str = "original", lambda_: float | str = DEFAULT_LAMBDA,
             mu: float = DEFAULT_MU, name: str | None = None) -> Node:
    """``t`` where ``cond`` is 1 and ``f`` where it is 0 (Sec. 5's six constructions).

    ``cond`` has the dim of ``t`` and ``f`` or dim 1 (broadcast). ``lambda_`` must exceed every
    ``|t|`` and ``|f|`` for the ReLU-based variants; ``lambda_="auto"`` takes the smallest such
    integer from the value-range analysis. A ``lambda_`` below the branches' declared bounds is
    refused; where a branch has no declared bound (an ``Input`` without ``bounds``) it cannot be
    checked and is a promise the caller makes: a larger ``|t|`` or ``|f|`` gives a wrong branch.

    ``cond`` must be 0 or 1 at every step: in between, the multiplicative variants blend the
    branches (``cond t + (1 - cond) f``) and the ReLU ones give neither; outside [0, 1] both are
    wrong. A condition whose value range (``lsrl.value_bounds``) holds neither 0 nor 1 in some
    component can never select a branch and is refused; a range that holds them is trusted (make
    conditions with ``f_step``, ``f_larger``, ``f_and`` ..., which give 0 or 1 away from their edges).
    """
    cond, t, f = (as_node(v, "f_ifelse") for v in (cond, t, f))
    if t.dim != f.dim or cond.dim not in (1, t.dim):
        raise DimensionError(
            f"f_ifelse: {t.describe()} (dim {t.dim}) and {f.describe()} (dim {f.dim}) must have one dim and "
            f"the condition {cond.describe()} (dim {cond.dim}) that dim or 1"
        )
    if not isinstance(variant, str) or variant not in IFELSE_VARIANTS:
        raise LsrlError(f"f_ifelse on {cond.describe()}: unknown variant {shown(variant)}; "
                        f"expected one of {IFELSE_VARIANTS}")
    mu = positive_number(mu, f"f_ifelse on {cond.describe()}: mu")
    if variant.startswith("step") and mu < 2:  # f_step(cond -+ 1/2) reaches 1 only where 1/2 >= 1/mu
        raise LsrlError(f"f_ifelse on {cond.describe()}: the step variants need mu >= 2 (their steps at cond -+ 1/2 "
                        f"must reach 1 within 1/2), got mu={mu}")
    _require_selecting(cond)
    if not (isinstance(lambda_, str) and lambda_ == "auto"):
        if isinstance(lambda_, str):
            raise LsrlError(f"f_ifelse on {cond.describe()}: lambda_ must be a positive number or 'auto', "
                            f"got {lambda_!r}")
        lam = positive_number(lambda_, f"f_ifelse on {cond.describe()}: lambda_")
        if not variant.startswith("multiplicative"):
            bound = max(max_abs(t), max_abs(f))
            if bound != math.inf and lam < bound:
                raise LsrlError(
                    f"f_ifelse on {cond.describe()}: lambda_={lambda_!r} is below the branches' declared bounds "
                    f"(|t|, |f| up to {bound}); the ReLU conditional needs lambda_ >= {bound}; "
                    "pass a larger lambda_ or lambda_='auto'"
                )
    optimized = variant.endswith("_optimized") or variant == "optimized"
    if variant.startswith("multiplicative"):
        return _ifelse_multiplicative(cond, t, f, optimized, name)
    return _ifelse_relu(cond, t, f, optimized, lambda_, variant.startswith("step"), mu, name)


__all__ = [
    "DEFAULT_LAMBDA", "DEFAULT_MU", "IFELSE_VARIANTS", "f_and", "f_bump", "f_constant", "f_eq", "f_ifelse",
    "f_larger", "f_modulo_counter", "f_not", "f_or", "f_relu_identity", "f_smaller", "f_step",
]
