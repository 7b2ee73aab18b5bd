"""The program the command-line examples compile: Fig. 1's counter, written out.

    lsrl compile examples/my_program.py:prog -o out --target gru
    lsrl run out --input examples/bits.txt

``lsrl compile FILE.py:NAME`` imports this file and compiles its module-level ``ForEach`` named NAME
(``FILE.py`` alone, when the file holds just one).
"""

import lsrl

bits = lsrl.Input(dim=1, name="bits", bounds=(0, 1))       # one token per step: 0 or 1
lead = lsrl.LinState(2 * bits - 1, A=[[1]], B=[[1]],       # s_t = s_{t-1} + (2 x_t - 1)
                     name="ones_minus_zeros")
more = lsrl.f_larger(lead, 0, mu=1, name="more_ones")       # 1 iff s_t >= 1
prog = lsrl.ForEach(more, name="more_ones_than_zeros")
