"""float64 stock models: what they keep of float32, and that their stated tolerance holds.

The stock modeling code of every architecture computes its RMSNorms in float32 whatever the model's dtype
(Mamba and Mamba-2 also their scans and their logits, Mamba-2 its gated group norm, RecurrentGemma its RG-LRU
scan), so every value a block or the head reads is rounded to float32's 24 bits: a float64 model is of
float32-class error, and its model card says which parts and why (``lsrl.hf.io.FLOAT32_PARTS``). The casts are
checked here on the running transformers (a release that computes them in the model's dtype fails these tests:
then a float64 construction could do better); the tolerances, float32-class in both dtypes, are checked against
the DAG interpreter on fixed and random bounded programs.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import lsrl
from lsrl.hf.io import FLOAT32_PARTS

sys.path.insert(0, str(Path(__file__).parent))
from test_hf_mamba import bounded_random_program, every_state_program, run  # noqa: E402
from test_random_programs import X_NUM  # noqa: E402

ARCHITECTURES = lsrl.hf.ARCHITECTURES


def _small_model(arch: str, dtype: torch.dtype):
    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    return lsrl.compile(lsrl.ForEach(lsrl.ReLU(x))).to_hf(arch, max_len=3, dtype=dtype)


def _norms(hf) -> dict[str, torch.nn.Module]:
    return {name: module for name, module in hf.named_modules() if type(module).__name__.endswith(("RMSNorm",
                                                                                                    "RMSNormGated"))}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_stock_norm_of_a_float64_model_rounds_what_it_reads_to_float32(arch):
    """Two channels that differ by ``2**-40`` (relative) in float64 read as equal: the norm cast them to float32
    (in float64 their outputs would differ by about ``2**-40``)."""
    hf = _small_model(arch, torch.float64)
    norms = _norms(hf)
    assert len(norms) >= 2  # each block's and the final norm
    for name, norm in norms.items():
        unit = copy.deepcopy(norm)
        with torch.no_grad():  # weight 1 (Mamba: w) or 0 (RecurrentGemma: 1 + w) on every channel
            unit.weight.fill_(0.0 if type(norm).__name__.startswith("RecurrentGemma") else 1.0)
        h = torch.ones(1, 1, unit.weight.shape[0], dtype=torch.float64)
        h[..., 0] = 1 + 2.0 ** -40
        out = unit(h)
        assert out.dtype == torch.float64, name
        assert out[..., 0] == out[..., 1], name
        float64_norm = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True))
        assert float64_norm[..., 0] != float64_norm[..., 1]  # what a float64 norm would have kept


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_card_names_the_float32_parts_and_the_logits_are_as_it_says(arch):
    hf = _small_model(arch, torch.float64)
    card = lsrl.hf.model_card(hf)
    assert "float64 keeps float32-class error" in card and FLOAT32_PARTS[arch.removeprefix("hf-")] in card and "2**-24" in card
    with torch.no_grad():
        logits = hf(**lsrl.hf.inputs(hf, np.zeros((1, 2, 2)))).logits
    assert (logits.dtype == torch.float32) == ("logits" in FLOAT32_PARTS[arch.removeprefix("hf-")])
    assert "float32-class" not in lsrl.hf.model_card(_small_model(arch, torch.float32))


def _errors(model, arch: str, xs: np.ndarray, max_len: int) -> dict[torch.dtype, tuple[float, float]]:
    """``{dtype: (measured max error against the DAG interpreter, stated tolerance)}`` for float32 and float64."""
    expected = model(xs)
    found = {}
    for dtype in (torch.float32, torch.float64):
        hf = model.to_hf(arch, max_len=max_len, dtype=dtype)
        found[dtype] = float(np.abs(run(hf, xs) - expected).max()), float(hf.config.lsrl_io["tolerance"])
    return found


def _check_float32_class(found: dict[torch.dtype, tuple[float, float]]) -> None:
    """Both dtypes within their stated tolerance; float64's stated tolerance of float32's size (the card's claim)."""
    for dtype, (error, tolerance) in found.items():
        assert error <= tolerance, (dtype, error, tolerance)
    stated32, stated64 = found[torch.float32][1], found[torch.float64][1]
    assert (stated32 == 0) == (stated64 == 0)
    assert stated32 == 0 or 0.5 <= stated64 / stated32 <= 2, (stated32, stated64)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_fixed_program_holds_its_float32_class_tolerance_in_both_dtypes(arch):
    model = lsrl.compile(every_state_program())
    xs = np.random.default_rng(3).uniform(-2, 2, (2, 12, 2))
    _check_float32_class(_errors(model, arch, xs, max_len=12))


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("seed", [5, 7, 9])
def test_random_bounded_programs_hold_their_float32_class_tolerance_in_both_dtypes(arch, seed):
    model = lsrl.compile(bounded_random_program(seed))
    xs = np.random.default_rng(seed).integers(-X_NUM, X_NUM + 1, (2, 8, model.input.dim)) / 2
    _check_float32_class(_errors(model, arch, xs, max_len=8))
