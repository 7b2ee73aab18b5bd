"""Every whole-number argument goes through ``lsrl.errors.whole_number``: a numpy ``timedelta64`` (which
``numbers.Integral`` accepts) and a bool are refused with an ``LsrlError``, numpy integers are accepted."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import lsrl
from lsrl.errors import LsrlError, whole_number

DURATION = np.timedelta64(3, "s")


def test_whole_number_takes_python_and_numpy_integers_only():
    assert [whole_number(v) for v in (3, np.int64(3), np.uint8(3), 10 ** 40)] == [3, 3, 3, 10 ** 40]
    assert all(whole_number(v) is None for v in (True, np.bool_(True), DURATION, np.timedelta64(3), 3.0, "3",
                                                  None, np.float64(3)))


def _entry_points():
    """(name, call with one whole-number argument) at entry points of several rooms of the library."""
    from lsrl.automata import random_dfa
    from lsrl.lang.bounds import value_bounds
    from lsrl.llrnn import NTM
    from lsrl.programs import continuous_prompt, discrete_approximator
    from lsrl.programs.nonlinear import conditional_reset
    from lsrl.sugar import f_modulo_counter
    from lsrl.targets.registry import whole_number_option
    from lsrl.workers import check_workers

    x = lsrl.Input(1)
    return {
        "Input(dim)": lambda n: lsrl.Input(n),
        "node[index]": lambda n: lsrl.Linear(lsrl.Input(4), np.eye(4))[n],
        "value_bounds(max_length)": lambda n: value_bounds(x, max_length=n),
        "f_modulo_counter(divisor)": lambda n: f_modulo_counter(x, n),
        "discrete_approximator(n)": lambda n: discrete_approximator(n),
        "continuous_prompt(cells_per_dim)": lambda n: continuous_prompt(np.sin, 1, 1, n),
        "conditional_reset(threshold)": lambda n: conditional_reset(n),
        "random_dfa(n_states)": lambda n: random_dfa(n, 2, 0),
        "NTM(powers)": lambda n: NTM(n, 2, 2),
        "whole_number_option": lambda n: whole_number_option("gru", "max_len", n, 10),
        "check_workers": lambda n: check_workers("study", n),
    }


@pytest.mark.parametrize("name", sorted(_entry_points()))
def test_a_duration_or_a_bool_is_no_whole_number_anywhere(name):
    call = _entry_points()[name]
    call(np.int64(3))  # a numpy integer is accepted
    for bad in (DURATION, np.timedelta64(3), True):
        with pytest.raises(LsrlError) as caught:
            call(bad)
        assert "\n" not in str(caught.value)


def test_no_module_tests_numbers_integral_itself():
    # numbers.Integral accepts timedelta64: whole numbers are tested by lsrl.errors.whole_number alone
    root = pathlib.Path(lsrl.__file__).parent
    offenders = [str(path.relative_to(root)) for path in root.rglob("*.py")
                 if re.search(r"isinstance\([^)]*Integral\)", path.read_text()) and path.name != "registry.py"]
    assert offenders == []
