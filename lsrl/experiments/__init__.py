"""Reproducible studies: the parameter-noise robustness of Fig. 4."""
