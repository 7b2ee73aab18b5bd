"""Hawk and Griffin targets, literal App. E construction (``construction="app_e"``; the default
diagonal construction is tested in tests/test_diagonal.py): the modules reproduce the block stack
and the interpreter.

Tolerance: max |a - b| / max(1, |b|) <= 1e-9 (see tests/test_programs.py for why the ReLU-based
conditionals get dyadic inputs). The convolution kernel is max_len x H x H per residual block, so
every model here is built with max_len = the length of the sequences it is given.
"""

import random
from functools import lru_cache

import numpy as np
import pytest
import torch

import lsrl
from conftest import library_program, max_relative_difference, random_map, run_module as run
from lsrl.programs import discrete_prompt
from lsrl.targets.blocks import Block, BlockStack, Dense, to_blocks
from lsrl.targets.hawk import LocalMQA, RecurrentBlock, build_griffin, build_hawk, layer_report
from test_random_programs import _inputs_for, generate_program

BUILDERS = {"hawk": build_hawk, "griffin": build_griffin}
VARIANTS = lsrl.IFELSE_VARIANTS
RANDOM_SEEDS = range(100)


@lru_cache(maxsize=None)
def stack_of(kind, variant=None):
    program = library_program(kind, variant)
    return program, to_blocks(lsrl.compile(program, backend="float"))


def residual_count(stack) -> int:
    """k + 2 residual blocks per gated block, k + 1 per ungated one (k: depth of phi / gamma)."""
    return sum(max(len(b.phi), len(b.gamma or [])) + 1 + (b.gamma is not None) for b in stack.blocks)


def check(arch, program, stack, xs):
    net = BUILDERS[arch](stack, construction="app_e", max_len=xs.shape[1])
    got = run(net, xs)
    assert got.shape == xs.shape[:2] + (stack.d_out,)
    assert max_relative_difference(got, stack(xs)) <= 1e-9
    assert max_relative_difference(got, program(xs)) <= 1e-9
    return net, got


# ---- agreement on the library programs ---------------------------------------------------------


@pytest.mark.parametrize("arch", BUILDERS)
def test_more_ones_than_zeros(arch):
    program, stack = stack_of("more_ones")
    bits = np.random.default_rng(0).integers(0, 2, size=(4, 30, 1)).astype(float)
    _, got = check(arch, program, stack, bits)
    np.testing.assert_array_equal(got, (np.cumsum(2 * bits - 1, axis=1) > 0).astype(float))


@pytest.mark.parametrize("arch", BUILDERS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.slow
def test_discrete_approximator_answers_every_query(variant, arch):
    program, stack = stack_of("discrete", variant)
    rng = random.Random(VARIANTS.index(variant))
    prompts, answers = [], []
    for _ in range(3):  # random maps over tokens 1..10, queried at one of their keys
        mapping = random_map(rng, 3, pairs=6)
        key = rng.choice(list(mapping))
        prompts.append(discrete_prompt(mapping, query=key))
        answers.append(mapping[key])
    xs = np.stack(prompts).astype(float)
    _, got = check(arch, program, stack, xs)
    np.testing.assert_array_equal(got[:, -3:, 0], np.array(answers, dtype=float))


@pytest.mark.parametrize("arch", BUILDERS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_continuous_approximator(variant, arch):
    program, stack = stack_of("continuous", variant)
    rng = np.random.default_rng(VARIANTS.index(variant))
    xs = rng.integers(0, 65, size=(4, 20, 5)) / 64  # dyadic: multiples of 1/64
    xs[:, 1::2, 0] = 1 / 8  # well-formed cells of side 1/8 on every other token
    xs[:, 0, 3:] = 0  # the query token
    check(arch, program, stack, xs)


@pytest.mark.slow
def test_random_programs():
    for seed in RANDOM_SEEDS:
        gen = generate_program(random.Random(seed))
        stack = to_blocks(lsrl.compile(gen.program, backend="float"))
        for seq in _inputs_for(seed, gen.d_in):
            xs = np.array([seq], dtype=np.float64)
            reference = gen.program(xs)
            for arch, build in BUILDERS.items():
                got = run(build(stack, construction="app_e", max_len=xs.shape[1]), xs)
                assert max_relative_difference(got, stack(xs)) <= 1e-9, (seed, arch)
                assert max_relative_difference(got, reference) <= 1e-9, (seed, arch)


# ---- structure ------------------------------------------------------------------------------


def gated_stack(L=3, k=2, d=3, seed=0) -> BlockStack:
    """L gated blocks, phi k layers deep (ReLU, ReLU, linear), gamma one linear layer: k + 2 each."""
    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(L):
        A = rng.normal(size=(d, d))
        A *= 0.9 / max(abs(np.linalg.eigvals(A)))
        phi = [Dense(rng.normal(size=(d, d)), rng.normal(size=d), relu=j < k - 1) for j in range(k)]
        gamma = [Dense(rng.normal(size=(d, d)), rng.normal(size=d))]
        blocks.append(Block(A, rng.normal(size=(d, d)), rng.normal(size=d), rng.normal(size=d), phi, gamma))
    return BlockStack(d, blocks)


def test_residual_block_count_is_L_times_k_plus_2_and_negative_values_need_no_bound():
    L, k = 3, 2
    stack = gated_stack(L, k)
    xs = np.random.default_rng(1).normal(size=(2, 12, 3)) * 5  # any sign, no lower bound
    net = build_hawk(stack, construction="app_e", max_len=12)
    assert len(net.blocks) == L * (k + 2)
    assert [b.role for b in net.blocks] == ["state", "layer", "layer", "product"] * L
    assert np.any(stack(xs) < 0)
    assert max_relative_difference(run(net, xs), stack(xs)) <= 1e-9
    assert max_relative_difference(run(build_griffin(stack, construction="app_e", max_len=12), xs), stack(xs)) <= 1e-9


def test_block_counts_of_the_library_programs():
    _, stack = stack_of("more_ones")
    assert len(build_hawk(stack, construction="app_e", max_len=4).blocks) == 3  # one ungated block, phi 2 layers deep: k + 1
    _, stack = stack_of("discrete", "multiplicative")
    hawk = build_hawk(stack, construction="app_e", max_len=4)
    assert len(hawk.blocks) == residual_count(stack)
    assert sum(b.role == "state" for b in hawk.blocks) == len(stack.blocks)


@pytest.mark.parametrize("kind", ["discrete", "continuous"])
def test_griffin_puts_attention_in_every_third_block(kind):
    _, stack = stack_of(kind, "multiplicative")
    hawk, griffin = build_hawk(stack, construction="app_e", max_len=4), build_griffin(stack, construction="app_e", max_len=4, window=3)
    assert all(isinstance(b.temporal, RecurrentBlock) for b in hawk.blocks)
    for i, block in enumerate(griffin.blocks):
        assert isinstance(block.temporal, LocalMQA) == (i % 3 == 2), i
        if block.role == "state":
            assert isinstance(block.temporal, RecurrentBlock)
    padding = sum(b.role == "pass" for b in griffin.blocks)
    assert len(griffin.blocks) == len(hawk.blocks) + padding
    kinds = [row["kind"] for row in layer_report(griffin)]
    assert kinds[::2] == ["attention" if i % 3 == 2 else "recurrent" for i in range(len(griffin.blocks))]
    assert set(kinds[1::2]) == {"mlp"}


def test_local_mqa_attends_causally_within_its_window():
    rng = np.random.default_rng(0)
    d, heads, window = 3, 2, 2
    mqa = LocalMQA(rng.normal(size=(heads * d, d)), rng.normal(size=(d, d)), np.eye(d), np.eye(d, heads * d),
                   np.zeros(d), heads=heads, window=window, residual=False)
    xs = torch.as_tensor(rng.normal(size=(1, 6, d)))
    out = mqa(xs).detach()
    changed = xs.clone()
    changed[0, 5] += 1.0  # the last step does not influence earlier outputs
    changed[0, 0] += 1.0  # step 0 lies outside the window of steps 2..5
    assert torch.equal(mqa(changed).detach()[0, 2:5], out[0, 2:5])


def test_layer_report():
    _, stack = stack_of("discrete", "multiplicative")
    net = build_hawk(stack, construction="app_e", max_len=8)
    rows = layer_report(net)
    assert len(rows) == 2 * len(net.blocks)
    assert all(row["hidden"] > 0 and row["nonzeros"] > 0 for row in rows)
    assert sum(row["nonzeros"] for row in rows) == sum(
        int(torch.count_nonzero(p)) for b in net.blocks for p in b.parameters()
    )


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", BUILDERS)
def test_a_sequence_longer_than_max_len_is_refused(arch):
    _, stack = stack_of("more_ones")
    net = BUILDERS[arch](stack, construction="app_e", max_len=5)
    run(net, np.ones((1, 5, 1)))
    with pytest.raises(lsrl.LsrlError, match="max_len=5"):
        run(net, np.ones((1, 6, 1)))
    with pytest.raises(lsrl.LsrlError, match="max_len"):
        BUILDERS[arch](stack, construction="app_e")
    with pytest.raises(lsrl.LsrlError, match="only used by construction='app_e'"):
        BUILDERS[arch](stack, max_len=5)
    with pytest.raises(lsrl.LsrlError, match=r"\(B, T, 1\)"):
        run(net, np.ones((5, 1)))
