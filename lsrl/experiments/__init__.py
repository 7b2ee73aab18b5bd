"""Reproducible studies: the parameter-noise robustness of Fig. 4."""

from lsrl.experiments import noise

__all__ = ["noise"]
