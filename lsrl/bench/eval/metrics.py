"""Scores of a discovery method against a known circuit, each computed in one place.

A method gives every candidate (a unit, a program variable, an edge) a score: larger means "more
likely in the circuit". ``auroc`` is the probability that a random positive scores above a random
negative, ties counting one half (the Mann-Whitney statistic, from average ranks); ``rates`` are the
true- and false-positive rates of the candidates whose score exceeds the method's threshold.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.stats import rankdata

from lsrl.errors import LsrlError


def _checked(scores: np.ndarray, truth: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    scores, truth = np.asarray(scores, dtype=np.float64), np.asarray(truth, dtype=bool)
    if scores.shape != truth.shape or scores.ndim != 1:
        raise LsrlError(f"{what}: scores and truth must be 1-D arrays of one length, got shapes "
                        f"{scores.shape} and {truth.shape}")
    if np.isnan(scores).any():
        raise LsrlError(f"{what}: a score is NaN")
    return scores, truth


def auroc(scores: np.ndarray, truth: np.ndarray) -> float:
    """The area under the ROC curve of ``scores`` for the labels ``truth`` (True: in the circuit),
    ties counted one half; NaN when one class is empty."""
    scores, truth = _checked(scores, truth, "auroc")
    positives, negatives = int(truth.sum()), int((~truth).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    ranks = rankdata(scores)  # ties get their average rank: each tie counts one half
    return float((ranks[truth].sum() - positives * (positives + 1) / 2) / (positives * negatives))


class Rates(NamedTuple):
    """True- and false-positive rates at a threshold (NaN where a class is empty)."""

    tpr: float
    fpr: float


def rates(scores: np.ndarray, truth: np.ndarray, threshold: float) -> Rates:
    """TPR and FPR of calling ``score > threshold`` in the circuit."""
    scores, truth = _checked(scores, truth, "rates")
    called = scores > threshold
    tpr = called[truth].mean() if truth.any() else float("nan")
    fpr = called[~truth].mean() if (~truth).any() else float("nan")
    return Rates(float(tpr), float(fpr))
