"""Every argument that takes several items goes through ``lsrl.errors.listed``: a 0-d numpy array or tensor is
``Iterable`` yet raises on iteration, and a string is one item, not its characters. Each caller refuses such a
value in one line (an ``LsrlError``) instead of a raw ``TypeError``."""

import numpy as np
import pytest
import torch

from lsrl.errors import LsrlError, listed


def test_listed_takes_sequences_and_refuses_what_cannot_be_iterated():
    assert listed([1, 2]) == [1, 2] and listed((3,)) == [3] and listed(np.arange(2)) == [0, 1]
    assert listed(range(0)) == [] and listed(torch.tensor([5.0])) == [torch.tensor(5.0)]
    assert all(listed(v) is None for v in (np.array(1), torch.tensor(1.0), "ab", b"ab", 3, None))


def _feature_state(readout):
    from lsrl.lang import Input
    from lsrl.programs.nonlinear import feature_state

    return feature_state(Input(dim=1), readout=readout, reads_value=[0], B=[[1]], b=[0], name="f")


def _squaring(values):
    from lsrl.programs.nonlinear import squaring

    return squaring(values)


def _check(architectures):
    from lsrl.automata import check, random_dfa

    return check([random_dfa(2, 2, 0)], architectures=architectures, strings=2, max_length=2)


def _inspect(archs):
    import lsrl
    from lsrl.programs import more_ones_than_zeros
    from lsrl.targets import inspect

    return inspect(lsrl.compile(more_ones_than_zeros(), progress=False), archs)


def _integers(values):
    from lsrl.llrnn.checks import integers

    return integers("owner", "values", values)


@pytest.mark.parametrize("call", [_feature_state, _squaring, _check, _integers])
@pytest.mark.parametrize("scalar", [np.array(1), torch.tensor(1.0)], ids=["numpy", "torch"])
def test_a_0d_array_is_refused_in_one_line(call, scalar):
    with pytest.raises(LsrlError) as refused:
        call(scalar)
    assert len(str(refused.value).splitlines()) == 1


def test_inspect_reads_a_0d_array_as_one_unknown_architecture():
    with pytest.raises(LsrlError, match="archs must be architecture names"):
        _inspect(np.array(1))
