"""Reproducible studies: the parameter-noise robustness of Fig. 4."""

from __future__ import annotations

from lsrl.experiments import noise

__all__ = ["noise"]
