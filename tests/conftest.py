import random
from fractions import Fraction

import numpy as np
import pytest
import torch


def as_fractions(array):
    """Exact outputs (mpq or Fraction) as a nested list of Fractions."""
    return np.vectorize(lambda v: Fraction(str(v)), otypes=[object])(np.asarray(array, dtype=object)).tolist()


def max_relative_difference(a, b):
    """max |a - b| / max(1, |b|): relative for large values, absolute near zero."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)))) if a.size else 0.0


@pytest.fixture
def rng():
    return random.Random(1234)


def run_module(module, xs):
    """A target module's float64 output for a numpy batch."""
    with torch.no_grad():
        return module(torch.as_tensor(np.asarray(xs, dtype=np.float64))).numpy()
