"""LLRNN: recurrent networks whose update operator is the denotation of a linear-logic program.

After "Linear logic and recurrent neural networks" (Hu & Murfet): ``lsrl.llrnn.logic`` holds the
types, terms, type checker and denotations; ``lsrl.llrnn.explicit`` the models written from the
paper's explicit equations; ``lsrl.llrnn.cell`` the generic LLRNN cell that runs a master term.
"""
