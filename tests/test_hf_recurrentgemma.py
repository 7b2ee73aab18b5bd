"""Programs in a stock ``transformers`` ``RecurrentGemmaForCausalLM`` (``lsrl.hf.recurrentgemma``):
Hawk and Griffin against the interpreter, on random and library programs, through
``save_pretrained`` / ``from_pretrained`` and stepwise decoding, and the construction's bounds at
their boundaries."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_random_programs import X_BOUND, _generated
from transformers import AutoModelForCausalLM, DynamicCache

import lsrl
import lsrl.hf as H
from lsrl.compiler.diagonal import float_diagonal
from lsrl.errors import LsrlError
from lsrl.hf.recurrentgemma import GATE_GAIN, _rglru_decay, unit_decay
from lsrl.programs.discrete import _shift_register

DTYPES = (torch.float32, torch.float64)
T = 6  # random programs run at T = max_len


def _bounded_program(seed: int) -> lsrl.ForEach:
    """The random program of ``seed`` (tests/test_random_programs.py) with its Input bounded by ``X_BOUND``."""
    gen = _generated(seed)
    plain = f"lsrl.Input({gen.d_in}, name='x')"
    source = gen.source_code()
    assert plain in source
    namespace: dict = {}
    exec(source.replace(plain, plain[:-1] + f", bounds=(-{X_BOUND}, {X_BOUND}))"), namespace)
    return namespace["prog"]


@functools.lru_cache(maxsize=None)
def _random_case(seed: int):
    prog = _bounded_program(seed)
    xs = np.random.default_rng(seed).integers(-18, 19, size=(3, T, prog.input.dim)) / 3
    return lsrl.compile(prog), xs, np.asarray(prog(xs, exact=True), dtype=float)


def _run(hf, xs) -> np.ndarray:
    with torch.no_grad():
        return H.outputs(hf, hf(**H.inputs(hf, xs))).double().numpy()


def _refused_for_its_eigenvalues(error: LsrlError, model) -> bool:
    """A refusal names a LinState of the diagonal form whose A has an eigenvalue outside [0, 1]."""
    layers = [layer for layer in float_diagonal(model).layers if layer.kind == "LinState"]
    layer = next((layer for layer in layers if f"LinState '{layer.name}'" in str(error)), None)
    if layer is None:
        return False
    eigenvalues = np.linalg.eigvals(layer.A.to_numpy())
    return bool(np.any((np.abs(eigenvalues.imag) > 0) | (eigenvalues.real < 0) | (eigenvalues.real > 1)))


@pytest.mark.parametrize("arch,dtype,seeds", [("hawk", torch.float32, range(16)), ("hawk", torch.float64, range(16)),
                                              ("griffin", torch.float32, range(16, 24)),
                                              ("griffin", torch.float64, range(24, 32))])
@pytest.mark.slow
def test_random_programs_within_the_stated_tolerance(arch, dtype, seeds):
    built = 0
    for seed in seeds:
        model, xs, reference = _random_case(seed)
        try:
            hf = H.to_hf(model, arch, T, dtype)
        except LsrlError as error:  # a state the RG-LRU cannot hold: it must be one
            assert _refused_for_its_eigenvalues(error, model), f"seed {seed}: {error}"
            continue
        error = np.max(np.abs(_run(hf, xs) - reference) / np.maximum(1.0, np.abs(reference)))
        assert error <= hf.config.lsrl_io["tolerance"], f"seed {seed}: error {error:.3g}"
        built += 1
    assert built >= len(seeds) * 2 // 3


def _mixed_program() -> lsrl.CompiledProgram:
    """A counter, a delay line, permutation counters (emulated), a ReLU and a Multi."""
    token = lsrl.Input(1, name="token", bounds=(0, 9), integer=True)
    total = lsrl.LinState(token, [[1]], [[1]], init_state=[2], name="total")
    parts = [total, _shift_register(token, 3), lsrl.f_modulo_counter(token, 3), lsrl.f_modulo_counter(token, 4)]
    gated = lsrl.Multi(lsrl.Concat([lsrl.ReLU(token - 4), token]))
    return lsrl.compile(lsrl.ForEach(lsrl.Concat(parts + [gated]), name="mixed"))


@pytest.mark.parametrize("arch", ["hawk", "griffin"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_mixed_program_is_exact(arch, dtype):
    model = _mixed_program()
    xs = np.random.default_rng(1).integers(0, 10, size=(2, 40, 1)).astype(float)
    hf = H.to_hf(model, arch, 40, dtype)
    np.testing.assert_array_equal(_run(hf, xs), np.asarray(model(xs, exact=True), dtype=float))


def test_save_pretrained_then_from_pretrained_gives_identical_logits(tmp_path):
    hf = H.to_hf(_mixed_program(), "griffin", 20, torch.float32)
    xs = np.random.default_rng(2).integers(0, 10, size=(2, 20, 1))
    H.save(hf, tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert type(loaded).__name__ == "RecurrentGemmaForCausalLM" and loaded.config.lsrl_io == hf.config.lsrl_io
    with torch.no_grad():
        assert torch.equal(hf(**H.inputs(hf, xs)).logits, loaded(**H.inputs(loaded, xs)).logits)


@pytest.mark.parametrize("arch", ["hawk", "griffin"])
def test_stepwise_decoding_through_the_stock_cache_equals_the_full_forward(arch):
    """A prefill of 3 tokens, then one token at a time (the stock recurrent block sizes its
    first-token conv state by hidden_size, so decoding starts after a prefill of 2 or more)."""
    hf = H.to_hf(_mixed_program(), arch, 16, torch.float32)
    ids = H.inputs(hf, np.random.default_rng(3).integers(0, 10, size=(2, 16, 1)))["input_ids"]
    with torch.no_grad():
        full = hf(input_ids=ids).logits
        cache, pieces = DynamicCache(config=hf.config), []
        mask = {"sliding_attention": None} if arch == "hawk" else None  # a stock Hawk cannot build one
        for start, stop in [(0, 3)] + [(t, t + 1) for t in range(3, ids.shape[1])]:
            positions = torch.arange(start, stop).expand(ids.shape[0], -1)
            pieces.append(hf(input_ids=ids[:, start:stop], position_ids=positions, use_cache=True, cache=cache,
                             attention_mask=mask).logits)
    assert torch.equal(full, torch.cat(pieces, dim=1))


LISTING_2_MAPS = {
    2: {(1, 2): (3, 4), (2, 2): (5, 6), (3, 1): (7, 8), (4, 4): (1, 9), (9, 0): (0, 2)},
    3: {(1, 2, 3): (3, 4, 5), (3, 2, 1): (9, 9, 0), (0, 0, 0): (1, 2, 1), (5, 5, 6): (6, 0, 7)},
}


@pytest.mark.parametrize("arch,dtype,n", [("hawk", torch.float32, 2), ("hawk", torch.float64, 2),
                                          ("hawk", torch.float32, 3), ("griffin", torch.float32, 2),
                                          ("griffin", torch.float64, 3)])
@pytest.mark.slow
def test_listing_2_answers_every_query(arch, dtype, n):
    mapping = LISTING_2_MAPS[n]
    prompts = np.stack([lsrl.programs.discrete_prompt(mapping, query) for query in mapping]).astype(float)
    model = lsrl.compile(lsrl.programs.discrete_approximator(n, robust=True, vocabulary=9))
    hf = H.to_hf(model, arch, prompts.shape[1], dtype)
    blocks = hf.config.layers_block_type[: hf.config.num_hidden_layers]
    assert ("sliding_attention" in blocks) == (arch == "griffin")  # Griffin's local attention blocks are there
    answers = np.rint(_run(hf, prompts)[:, -n:, 0]).astype(int)
    assert [tuple(answer) for answer in answers] == list(mapping.values())
    assert hf.config.lsrl_io["tolerance"] == 0.0  # proved exact (relational_bounds: every value on a grid)


def test_listing_1_within_its_error():
    model = lsrl.compile(lsrl.programs.continuous_approximator(1, 1, robust=True, value_bound=1))

    def f(x):
        return np.sin(3 * x)

    queries = [0.1, 0.45, 0.9]
    prompts = np.stack([np.vstack([lsrl.programs.continuous_query([q], 1), lsrl.programs.continuous_prompt(f, 1, 1, 8)])
                        for q in queries]).astype(float)
    hf = H.to_hf(model, "hawk", prompts.shape[1], torch.float32)
    outputs = _run(hf, prompts)
    assert np.max(np.abs(outputs - model(prompts))) <= hf.config.lsrl_io["tolerance"]
    # the program's own error: the value at the query's cell centre, |f'| <= 3, half a cell 1/16
    assert np.all(np.abs(outputs[:, -1, 0] - f(np.array(queries))) <= 3 / 16)


# ---- boundaries -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_unit_decay_rounding_trick_and_its_boundaries(dtype):
    param, m = unit_decay(dtype)
    assert _rglru_decay(param, dtype) == (1.0, m) and m == (2.0 ** -12 if dtype == torch.float32 else 2.0 ** -13)
    softplus = F.softplus(torch.tensor(param, dtype=dtype)).item()
    # the float32 window is softplus in (2**-29, 2**-28): a 2x larger softplus makes a < 1 (a decay),
    # a 4x smaller one rounds a**2 to 1 (m = 0: the input is erased)
    for factor in (2.0, 0.25):
        wrong = math.log(math.expm1(softplus * factor))
        assert _rglru_decay(wrong, dtype) != (1.0, m)


@pytest.mark.slow
def test_counter_exact_at_max_len():
    x = lsrl.Input(1, name="x", bounds=(0, 3), integer=True)
    model = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[1]], [[1]], name="sum")))
    xs = np.full((1, 700, 1), 3.0)
    hf = H.to_hf(model, "hawk", 700, torch.float32)
    np.testing.assert_array_equal(_run(hf, xs)[0, :, 0], 3.0 * np.arange(1, 701))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_is_relu_where_the_units_saturate(dtype):
    for length in (1, 7, 33):  # torch's scalar and vectorised paths
        saturated = torch.tensor([8.0, -8.0, 2.0 ** 60, -(2.0 ** 60), 0.0] * length, dtype=dtype)
        assert torch.equal(F.gelu(saturated, approximate="tanh"), torch.relu(saturated))
    assert F.gelu(torch.tensor(5.0, dtype=dtype), approximate="tanh").item() != 5.0
    assert GATE_GAIN * 2.0 ** -42 < 1  # the unsaturated error 0.17 / G is below 2**-42


@pytest.mark.parametrize("dtype", DTYPES)
def test_driven_sign_flips_and_rotations_are_emulated_exactly(dtype):
    x = lsrl.Input(1, name="x", bounds=(-3, 3), integer=True)
    flip = lsrl.LinState(x, [[-1]], [[1]], init_state=[1], name="flip")  # s_t = -s_(t-1) + x_t
    turn = lsrl.LinState(x, [[0, -1], [1, 0]], [[1], [2]], name="turn")  # a quarter turn, period 4
    model = lsrl.compile(lsrl.ForEach(lsrl.Concat([flip, turn])))
    xs = np.random.default_rng(4).integers(-3, 4, size=(2, 25, 1)).astype(float)
    hf = H.to_hf(model, "hawk", 25, dtype)
    np.testing.assert_array_equal(_run(hf, xs), np.asarray(model(xs, exact=True), dtype=float))


def test_refusals_name_the_node():
    x = lsrl.Input(1, name="x", bounds=(-1, 1))
    spiral = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[0.6, -0.8], [0.8, 0.6]], [[1], [0]], name="spiral")))
    with pytest.raises(LsrlError, match="LinState 'spiral'.*complex eigenvalues.*driven by the input.*max_len <= 64"):
        H.to_hf(spiral, "hawk", 65)  # at max_len <= 64: its exact convolution (tests/test_hf_convolution.py)
    free = lsrl.Input(1, name="free")
    with pytest.raises(LsrlError, match="Input 'free' has no finite bound"):
        H.to_hf(lsrl.compile(lsrl.ForEach(lsrl.ReLU(free))), "hawk", 8)
    growth = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[2]], [[1]], name="growth")))
    with pytest.raises(LsrlError, match="LinState 'growth'.*eigenvalue 2.*max_len <= 64 \\(here 65\\)"):
        H.to_hf(growth, "griffin", 65)
