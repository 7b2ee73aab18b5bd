"""Listing 1: universal in-context approximation of continuous functions [0,1]^d_in -> R^d_out.

The first token is the query ``[q', 0_{d_out+1}]``; each prompt token ``[δ, l_1..l_d_in, f(centre)]``
describes one cell of side δ (Eq. (8)). The program stores q' and adds the value of the cell that
contains it. Two slips of the printed listing are corrected: the step counter uses ``A = I`` (the
printed ``ones(d_in, d_in)`` grows exponentially for d_in > 1), and "processing" means counter > 1
(the printed ``counter > 0.5`` is always true). A cell is ``(l, l + δ]`` with edges of width 1/mu.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from fractions import Fraction
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from lsrl.errors import LsrlError, shown
from lsrl.lang.evaluate import finite_numbers
from lsrl.lang.nodes import Concat, Input, Linear, LinState, Node, ReLU
from lsrl.lang.program import ForEach
from lsrl.numbers import EXACT
from lsrl.sugar import (
    DEFAULT_LAMBDA, DEFAULT_MU, IFELSE_VARIANTS, f_and, f_bump, f_constant, f_ifelse, f_larger, f_not, f_smaller,
    f_step, flag, positive_integer, positive_number,
)

MAX_PROMPT_CELLS = 10**7  # continuous_prompt builds one token (a Python list) per cell: a stated bound
FLAG_MU = 2  # steepness for flags in [0, 1] compared at 1/2: a margin of 1/2 saturates a step of slope 2

MAX_DIMENSION = 1_000  # continuous_approximator: d_in, d_out (nodes of width d; 256 x 256 builds in 0.2 s)


def continuous_approximator(
    d_in: int, d_out: int, ifelse: str = "multiplicative", mu: float = DEFAULT_MU,
    lambda_: float | Literal["auto"] = DEFAULT_LAMBDA, robust: bool = False, value_bound: float | None = None,
) -> ForEach:
    """Listing 1 with the paper's constants, or with ``robust=True`` a construction whose margins
    come from the value ranges (``lsrl.value_bounds``) instead of ``lambda_ = 1e10``.

    Why the paper's constants break under weight noise: a step ``ReLU(mu x) - ReLU(mu x - 1)`` on the
    step counter (which grows with the prompt) carries ``mu * counter`` through its ReLUs, so noise
    on the weights that subtract them leaves an error of ``sigma * mu * counter`` in a flag, and a
    ReLU conditional multiplies that error by ``lambda_``. The robust construction removes each
    factor where the values allow it:

    - the only integer the program needs is "is this the query token?": a two-component state
      ``s_t = [1, s_{t-1}[0]]`` gives a ``processing`` flag that is exactly 0 then 1, bounded, with no
      comparison at all (the counter is unbounded; the value-range analysis widens it to infinity);
    - the query is an arbitrary real, so the cell edges have no margin: the bumps keep the steepness
      ``mu`` (edges of width ``1/mu``) but use saturating steps (``f_step(..., saturating=True)``),
      which are exactly 0 or 1 away from an edge whatever small noise the weights carry, so noise
      only matters for a query within ``1/mu`` (plus the noise) of an edge;
    - "in the cell and processing" is the Łukasiewicz conjunction ``ReLU(sum of bumps + processing -
      d_in)``: exact inside a cell, and near a single edge the two neighbouring cells' conditions
      sum to 1, so the multiplicative conditionals blend the two cells' values. A ReLU conditional
      given a fractional condition clips its branch instead of scaling it (two halves give almost
      nothing), so for those the condition is first sharpened by a saturating step at 1/2;
    - ``lambda_`` only has to exceed the branch values: 2 for the query (in ``[0, 1]``) and
      ``floor(value_bound) + 1`` for the prompt values (``lambda_="auto"``); the step-based
      conditionals compare conditions in ``[0, 1]`` at 1/2, for which steepness 2 is enough.

    ``value_bound`` bounds ``|f|`` (the values in the prompt); the ReLU-based variants need it, the
    multiplicative ones, which have no ``lambda_``, do not. ``mu`` is the edge steepness of both
    constructions; ``lambda_`` is ignored by the robust one.
    """
    d_in = positive_integer(d_in, "continuous_approximator: d_in", at_most=MAX_DIMENSION)
    d_out = positive_integer(d_out, "continuous_approximator: d_out", at_most=MAX_DIMENSION)
    if not isinstance(ifelse, str) or ifelse not in IFELSE_VARIANTS:
        raise LsrlError(f"continuous_approximator: unknown ifelse variant {shown(ifelse)}; "
                        f"expected one of {IFELSE_VARIANTS}")
    robust = flag(robust, "continuous_approximator: robust")  # a truthy {} or "no" is no robust=True
    if robust:
        return _robust_continuous_approximator(d_in, d_out, ifelse, mu, value_bound)

    def choose(cond: Node, t: Node, f: Node, name: str) -> Node:
        return f_ifelse(cond, t, f, variant=ifelse, lambda_=lambda_, mu=mu, name=name)

    low = [0] * (1 + d_in) + [None] * d_out  # δ, lower bounds and the query lie in [0, 1]
    high = [1] * (1 + d_in) + [None] * d_out
    token = Input(dim=1 + d_in + d_out, name="token", bounds=(low, high))
    counter = LinState(f_constant(token, 1), A=[[1]], B=[[1]], name="counter")  # 1, 2, 3, ...
    # copy the query into a state at the first step only
    q_update = choose(f_smaller(counter, 1.5, mu), token[:d_in], token[:d_in] * 0, "query_update")
    query = LinState(q_update, A=EXACT.eye(d_in), B=EXACT.eye(d_in), name="query")
    lower, upper = _cell_edges(token, d_in)
    in_bump = f_bump(query, lower, upper, mu)
    bump_sum = Linear(in_bump, [[1] * d_in])
    in_cell = f_larger(bump_sum, d_in - 0.5, mu)
    in_and_processing = f_and(in_cell, f_larger(counter, 1.5, mu), mu=mu, name="in_cell_of_prompt")
    value = token[1 + d_in :]
    update = choose(f_larger(in_and_processing, 0.5, mu), value, value * 0, "value_update")
    estimate = LinState(update, A=EXACT.eye(d_out), B=EXACT.eye(d_out), name="estimate")
    return ForEach(estimate, name=f"continuous_approximator({d_in}, {d_out}, {ifelse})")


def _cell_edges(token: Node, d_in: int) -> tuple[Node, Node]:
    """The lower and upper edges ``l`` and ``l + δ`` of the prompt token's cell."""
    step_size = Linear(token[0], EXACT.from_entries(((i, 0, 1) for i in range(d_in)), (d_in, 1)))
    lower = token[1 : 1 + d_in]
    return lower, lower + step_size


def _robust_continuous_approximator(d_in: int, d_out: int, ifelse: str, mu: float, value_bound: float | None
                                    ) -> ForEach:
    multiplicative = ifelse.startswith("multiplicative")
    if value_bound is None and not multiplicative:
        raise LsrlError(
            f"continuous_approximator(robust=True, ifelse={ifelse!r}) needs value_bound= (a bound on |f|): "
            "the ReLU-based conditionals take lambda from it"
        )
    if value_bound is not None:
        positive_number(value_bound, "continuous_approximator: value_bound")
    low = [0] * (1 + d_in) + [None if value_bound is None else -value_bound] * d_out
    high = [1] * (1 + d_in) + [value_bound] * d_out
    token = Input(dim=1 + d_in + d_out, name="token", bounds=(low, high))

    def choose(cond: Node, t: Node, f: Node, name: str) -> Node:
        return f_ifelse(cond, t, f, variant=ifelse, lambda_="auto", mu=FLAG_MU, name=name)

    started = LinState(f_constant(token, 1), A=[[0, 0], [1, 0]], B=[[1], [0]], name="started")  # [1, 0], [1, 1], ...
    processing = started[1]
    q_update = choose(f_not(processing), token[:d_in], token[:d_in] * 0, "query_update")
    query = LinState(q_update, A=EXACT.eye(d_in), B=EXACT.eye(d_in), name="query")
    lower, upper = _cell_edges(token, d_in)
    in_bump = f_bump(query, lower, upper, mu, saturating=True)
    in_cell = ReLU(Linear(Concat([in_bump, processing]), [[1] * (d_in + 1)], [-d_in]), name="in_cell_of_prompt")
    take_value = in_cell if multiplicative else f_step(in_cell - 0.5, mu, saturating=True)
    value = token[1 + d_in :]
    update = choose(take_value, value, value * 0, "value_update")
    estimate = LinState(update, A=EXACT.eye(d_out), B=EXACT.eye(d_out), name="estimate")
    return ForEach(estimate, name=f"continuous_approximator({d_in}, {d_out}, {ifelse}, robust)")


def continuous_prompt(f: Callable[[np.ndarray], ArrayLike], d_in: int, d_out: int, cells_per_dim: int,
                      exact: bool = False) -> np.ndarray:
    """One token ``[δ, l_1..l_d_in, f(centre)]`` per cell of the regular grid (Eq. (8)).

    The model's input is the query first, then these tokens:
    ``np.vstack([continuous_query(q, d_out), continuous_prompt(f, d_in, d_out, k)])``.

    ``f`` maps a length-d_in numpy vector to d_out values. With ``exact=True`` the grid numbers are
    Fractions (object array) so that an exact run sees exactly the cells of the grid.
    """
    d_in = positive_integer(d_in, "continuous_prompt: d_in", MAX_DIMENSION)
    d_out = positive_integer(d_out, "continuous_prompt: d_out", MAX_DIMENSION)
    cells_per_dim = positive_integer(cells_per_dim, "continuous_prompt: cells_per_dim", MAX_PROMPT_CELLS)
    if not callable(f):
        raise LsrlError(f"continuous_prompt: f must be a function of a length-d_in vector, got {type(f).__name__}")
    if cells_per_dim ** d_in > MAX_PROMPT_CELLS:
        raise LsrlError(f"continuous_prompt: cells_per_dim ** d_in = {cells_per_dim}^{d_in} cells is more than "
                        f"{MAX_PROMPT_CELLS:,} prompt tokens")
    step = Fraction(1, cells_per_dim)
    rows = []
    for cell in itertools.product(range(cells_per_dim), repeat=d_in):
        lower = [index * step for index in cell]
        centre = np.array([float(v + step / 2) for v in lower])
        returned = f(centre)
        try:
            value = np.asarray(returned, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError, OverflowError):
            raise LsrlError(f"continuous_prompt: f returned {returned!r} at {centre.tolist()}, "
                            f"expected d_out = {d_out} "
                            "numbers") from None
        if value.shape != (d_out,):
            raise LsrlError(f"continuous_prompt: f returned {value.shape[0]} values, expected d_out = {d_out}")
        if not np.all(np.isfinite(value)):
            raise LsrlError(f"continuous_prompt: f returned {value.tolist()} at {centre.tolist()}, not finite numbers")
        rows.append([step] + lower + ([Fraction(repr(float(v))) for v in value] if exact else list(value)))
    if exact:
        return np.array(rows, dtype=object)
    return np.array([[float(v) for v in row] for row in rows])


def continuous_query(q: ArrayLike, d_out: int) -> np.ndarray:
    """The query token ``[q', 0_{d_out+1}]`` as a ``(1, 1 + d_in + d_out)`` array; it is the model's
    first input token, before ``continuous_prompt``'s."""
    d_out = positive_integer(d_out, "continuous_query: d_out", MAX_DIMENSION)
    finite_numbers(q, "continuous_query: q")  # no complex, text, None, NaN or infinity
    q = list(np.asarray(q, dtype=object).reshape(-1))
    return np.array([q + [0] * (d_out + 1)], dtype=object)
