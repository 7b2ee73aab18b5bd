"""Listing 1: universal in-context approximation of continuous functions [0,1]^d_in -> R^d_out.

The first token is the query ``[q', 0_{d_out+1}]``; each prompt token ``[δ, l_1..l_d_in, f(centre)]``
describes one cell of side δ (Eq. (8)). The program stores q' and adds the value of the cell that
contains it. Two slips of the printed listing are corrected: the step counter uses ``A = I`` (the
printed ``ones(d_in, d_in)`` grows exponentially for d_in > 1), and "processing" means counter > 1
(the printed ``counter > 0.5`` is always true). A cell is ``(l, l + δ]`` with edges of width 1/mu.
"""

import itertools
from fractions import Fraction

import numpy as np

from lsrl.lang.nodes import Input, Linear, LinState
from lsrl.lang.program import ForEach
from lsrl.numbers import EXACT
from lsrl.sugar import DEFAULT_LAMBDA, DEFAULT_MU, f_and, f_bump, f_constant, f_ifelse, f_larger, f_smaller


def continuous_approximator(d_in: int, d_out: int, ifelse="multiplicative", mu=DEFAULT_MU, lambda_=DEFAULT_LAMBDA):
    def choose(cond, t, f, name):
        return f_ifelse(cond, t, f, variant=ifelse, lambda_=lambda_, mu=mu, name=name)

    low = [0] * (1 + d_in) + [None] * d_out  # δ, lower bounds and the query lie in [0, 1]
    high = [1] * (1 + d_in) + [None] * d_out
    token = Input(dim=1 + d_in + d_out, name="token", bounds=(low, high))
    counter = LinState(f_constant(token, 1), A=[[1]], B=[[1]], name="counter")  # 1, 2, 3, ...
    # copy the query into a state at the first step only
    q_update = choose(f_smaller(counter, 1.5, mu), token[:d_in], token[:d_in] * 0, "query_update")
    query = LinState(q_update, A=EXACT.eye(d_in), B=EXACT.eye(d_in), name="query")
    step_size = Linear(token[0], EXACT.from_entries(((i, 0, 1) for i in range(d_in)), (d_in, 1)))
    lower = token[1 : 1 + d_in]
    upper = lower + step_size
    in_bump = f_bump(query, lower, upper, mu)
    bump_sum = Linear(in_bump, [[1] * d_in])
    in_cell = f_larger(bump_sum, d_in - 0.5, mu)
    in_and_processing = f_and(in_cell, f_larger(counter, 1.5, mu), mu=mu, name="in_cell_of_prompt")
    value = token[1 + d_in :]
    update = choose(f_larger(in_and_processing, 0.5, mu), value, value * 0, "value_update")
    estimate = LinState(update, A=EXACT.eye(d_out), B=EXACT.eye(d_out), name="estimate")
    return ForEach(estimate, name=f"continuous_approximator({d_in}, {d_out}, {ifelse})")


def continuous_prompt(f, d_in: int, d_out: int, cells_per_dim: int, exact: bool = False) -> np.ndarray:
    """One token ``[δ, l_1..l_d_in, f(centre)]`` per cell of the regular grid (Eq. (8)).

    ``f`` maps a length-d_in numpy vector to d_out values. With ``exact=True`` the grid numbers are
    Fractions (object array) so that an exact run sees exactly the cells of the grid.
    """
    step = Fraction(1, cells_per_dim)
    rows = []
    for cell in itertools.product(range(cells_per_dim), repeat=d_in):
        lower = [index * step for index in cell]
        centre = np.array([float(v + step / 2) for v in lower])
        value = np.asarray(f(centre), dtype=np.float64).reshape(-1)
        if value.shape != (d_out,):
            raise ValueError(f"continuous_prompt: f returned {value.shape[0]} values, expected d_out = {d_out}")
        rows.append([step] + lower + ([Fraction(repr(float(v))) for v in value] if exact else list(value)))
    if exact:
        return np.array(rows, dtype=object)
    return np.array([[float(v) for v in row] for row in rows])


def continuous_query(q, d_out: int) -> np.ndarray:
    """The query token ``[q', 0_{d_out+1}]`` as a ``(1, 1 + d_in + d_out)`` array."""
    q = list(np.asarray(q, dtype=object).reshape(-1))
    return np.array([q + [0] * (d_out + 1)], dtype=object)
