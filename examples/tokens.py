"""A token program for a stock transformers folder that answers through ``generate``: Fig. 1's counter on
integer tokens (its ``Input`` one integer with finite bounds), its output the next token.

    lsrl compile examples/tokens.py --target hf-hawk --max-len 16 --generate --words examples/words.json -o majority

``examples/words.json`` names the two tokens in the folder's tokenizer.
"""

import lsrl

bits = lsrl.Input(dim=1, name="bits", bounds=(0, 1), integer=True)   # tokens 0 and 1
lead = lsrl.LinState(2 * bits - 1, A=[[1]], B=[[1]], name="ones_minus_zeros")
prog = lsrl.ForEach(lsrl.f_larger(lead, 0, mu=1, name="more_ones"), name="more_ones_than_zeros")
