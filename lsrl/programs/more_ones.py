"""Fig. 1: output 1 while the 0/1 input has held more 1s than 0s so far, else 0."""

from __future__ import annotations

from lsrl.lang.nodes import Input, LinState
from lsrl.lang.program import ForEach
from lsrl.sugar import f_larger


def more_ones_than_zeros() -> ForEach:
    bits = Input(dim=1, name="bits", bounds=(0, 1))
    # +1 for every 1, -1 for every 0; an integer, so a step of slope 1 decides "> 0" exactly
    lead = LinState(2 * bits - 1, A=[[1]], B=[[1]], name="ones_minus_zeros")
    return ForEach(f_larger(lead, 0, mu=1, name="more_ones"), name="more_ones_than_zeros")
