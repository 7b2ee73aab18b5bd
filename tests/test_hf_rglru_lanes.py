"""The RG-LRU's lanes (``lsrl.hf.recurrentgemma``, module doc: the lanes): torch's vectorised body and scalar
tail round some elementwise functions differently, so the builder writes only parameters on which every
code path computes the same ``a`` and ``m``; tested on lane counts that put a channel's lanes in both."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lsrl
import lsrl.hf as H
from lsrl.hf.recurrentgemma import decay_param, on_every_path, rglru_lanes, unit_decay

DTYPES = (torch.float32, torch.float64)
VECTOR_STEP = {torch.float32: 16, torch.float64: 8}  # elements per vectorised round (2 AVX2 vectors)


def _nearest_param(eigenvalue: float, dtype) -> float:
    return float(torch.tensor(math.log(math.expm1(-math.log(eigenvalue) / 8)), dtype=dtype))


def test_the_paths_are_seen_where_they_differ():
    """``on_every_path`` gives exactly the values the kernel's paths compute here (a vector run, a strided input, a
    lone element, each computed apart), whether they differ or not on this CPU capability; on AVX2 they do, e.g.
    gelu_tanh at -5.0613809: -0 in a vector and -1.5e-7 alone (benchmarks/activation_identities.py, AVX2)."""
    def gelu(v):
        return F.gelu(v, approximate="tanh")

    x = torch.linspace(-5.2, -4.9, 2049, dtype=torch.float32)
    vector = gelu(x.repeat_interleave(64)).reshape(-1, 64)[:, 0]
    scalar = gelu(x.repeat_interleave(2)[::2])
    lone = torch.stack([gelu(x[i:i + 1])[0] for i in range(x.numel())])
    differ = 0
    for i in range(x.numel()):
        paths = {vector[i].item(), scalar[i].item(), lone[i].item()}
        assert on_every_path(gelu, x[i]) == paths, float(x[i])
        differ += len(paths) > 1
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert differ > 0 and len(on_every_path(gelu, torch.tensor(-5.0613809, dtype=torch.float32))) == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_written_decay_is_one_value_in_every_lane(dtype):
    rng = random.Random(3)
    moved = 0
    for _ in range(120):
        eigenvalue = rng.uniform(0.02, 0.98)
        param, m = decay_param(eigenvalue, dtype)
        lanes = rglru_lanes(param, dtype)
        assert len(lanes) == 1 and next(iter(lanes))[1] == m
        (a, _), = lanes
        assert abs(a - eigenvalue) < 1e-5  # a neighbouring parameter moves the decay by ulps only
        nearest_disagrees = len(rglru_lanes(_nearest_param(eigenvalue, dtype), dtype)) > 1
        assert (param != _nearest_param(eigenvalue, dtype)) == nearest_disagrees  # moved where needed, only there
        moved += nearest_disagrees
    if dtype == torch.float32 and torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert moved > 0  # about one float32 parameter in ten has softplus paths that disagree on AVX2


def _counters_and_decays() -> lsrl.CompiledProgram:
    """Seventeen counters (unit decays) and three genuine decays of the token: 41 RG-LRU lanes (P and Q per
    scan, F), so the softplus over lru_width has a vectorised body and a tail."""
    token = lsrl.Input(1, name="token", bounds=(0, 3), integer=True)
    decays = [1] * 17 + [0.5, 0.31, 0.9]  # 0.5 (float32) and 0.31 (float64): their nearest parameters disagree
    state = lsrl.LinState(token, np.diag(decays), np.ones((20, 1)), name="states")
    return lsrl.compile(lsrl.ForEach(state, name="lanes"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_lane_of_the_stock_layout_computes_the_builders_decay(dtype):
    """The stock code's a and m on a (batch, T, lru_width) layout whose flat size leaves a tail, from the
    written parameters, equal in every lane the one pair the builder proved for that channel."""
    hf = H.to_hf(_counters_and_decays(), "hawk", 5, dtype)
    rg = hf.model.layers[0].temporal_block.rg_lru
    lru, step = hf.config.lru_width, VECTOR_STEP[dtype]
    batch, steps = 3, 5
    assert lru % step and (batch * steps * lru) % step and lru > step  # lanes in the body and in the tail
    with torch.no_grad():
        gate = torch.sigmoid(torch.full((batch, steps, lru), 1024.0, dtype=dtype))  # the saturated recurrence gate
        log_a = -8.0 * gate * F.softplus(rg.recurrent_param)
        a = torch.exp(log_a).to(torch.float32)
        m = torch.sqrt(1 - torch.exp(2 * log_a))
    for channel, param in enumerate(rg.recurrent_param.tolist()):
        (a_c, m_c), = rglru_lanes(param, dtype)
        assert torch.all(a[..., channel] == a_c) and torch.all(m[..., channel] == m_c), channel


@pytest.mark.parametrize("dtype", DTYPES)
def test_counters_exact_and_decays_within_tolerance_across_body_and_tail(dtype):
    model = _counters_and_decays()
    xs = np.random.default_rng(5).integers(0, 4, size=(3, 5, 1)).astype(float)
    hf = H.to_hf(model, "hawk", 5, dtype)
    with torch.no_grad():
        out = H.outputs(hf, hf(**H.inputs(hf, xs))).double().numpy()
    reference = np.asarray(model(xs, exact=True), dtype=float)
    np.testing.assert_array_equal(out[..., :17], reference[..., :17])
    assert np.max(np.abs(out - reference)) <= hf.config.lsrl_io["tolerance"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_unit_decay_holds_on_every_path(dtype):
    param, m = unit_decay(dtype)
    assert rglru_lanes(param, dtype) == frozenset({(1.0, m)})
