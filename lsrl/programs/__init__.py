"""Library programs: Fig. 1's counter, the universal in-context approximators (Listings 1, 2), and
footnote 3's state updates that depend on the state (``ReLUState``)."""

from __future__ import annotations

from lsrl.programs.continuous import continuous_approximator, continuous_prompt, continuous_query
from lsrl.programs.discrete import check_discrete_prompt, discrete_approximator, discrete_prompt
from lsrl.programs.more_ones import more_ones_than_zeros
from lsrl.programs.nonlinear import conditional_reset, feature_state, parity, squaring

__all__ = [
    "continuous_approximator", "continuous_prompt", "continuous_query",
    "check_discrete_prompt", "discrete_approximator", "discrete_prompt", "more_ones_than_zeros",
    "conditional_reset", "feature_state", "parity", "squaring",
]
