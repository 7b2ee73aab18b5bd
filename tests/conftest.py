import os
import random
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

from lsrl.programs import continuous_approximator, discrete_approximator, more_ones_than_zeros

# The fuzz suites (tests/test_fuzz_*.py): "ci" is small and reproducible (the same examples every run,
# nothing read from or written to a database, a failing example reported as drawn: shrinking it would take
# minutes); HYPOTHESIS_PROFILE=deep fuzzes longer with fresh examples, and shrinks what fails.
_FUZZ_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                HealthCheck.function_scoped_fixture]
settings.register_profile("ci", deadline=None, max_examples=5, derandomize=True, database=None,
                          phases=[Phase.explicit, Phase.generate], suppress_health_check=_FUZZ_HEALTH)
settings.register_profile("deep", deadline=None, max_examples=400, suppress_health_check=_FUZZ_HEALTH)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The tests' tensors are tiny: threads gain nothing, and with two test workers on two cores
    their pools contend, costing milliseconds per operation."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


def library_program(kind, variant="multiplicative"):
    """Fig. 1's program, discrete_approximator(3) or continuous_approximator(2, 2)."""
    return {
        "more_ones": more_ones_than_zeros,
        "discrete": lambda: discrete_approximator(3, ifelse=variant),
        "continuous": lambda: continuous_approximator(2, 2, ifelse=variant),
    }[kind]()


def random_map(rng, n, pairs=20, vocabulary=10):
    """``pairs`` distinct random keys of n tokens in 1..vocabulary, each with a random value."""
    mapping = {}
    while len(mapping) < pairs:
        key = tuple(rng.randint(1, vocabulary) for _ in range(n))
        mapping.setdefault(key, tuple(rng.randint(1, vocabulary) for _ in range(n)))
    return mapping
