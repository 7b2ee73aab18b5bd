"""The convolution fallback of ``lsrl.hf.lowering``: at ``max_len <= MAX_CONVOLUTION_LEN`` a state block no other
rule holds is its exact convolution ``z_t = sum_(m<t) A^m u_(t-m) + A^t z_0`` (delay channels and impulses of
exact rational powers of the block). Seed 4's driven cubic with complex roots, a driven rotation by an irrational
angle (``atan(4/3)``, decay 1/2), a driven decay 5/4, a repeated irrational factor and the golden ratio: their
slots give the interpreter's exact outputs bit for bit (an independent Fraction run of the slots), every
architecture and dtype is within the tolerance its model states, and beyond the limit each is refused, naming
the state and the limit. Random driven states of 2 or 3 units that no other rule holds: exact, and within the
tolerance in Mamba and Hawk."""

from __future__ import annotations

import sys
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

import lsrl
from lsrl.compiler.diagonal import rational_block_diagonal
from lsrl.hf.lowering import MAX_CONVOLUTION_LEN, lower
from lsrl.model.structure import OTHER, state_blocks

sys.path.insert(0, str(Path(__file__).parent))
from test_hf_lowering import _exact_reference, run_slots  # noqa: E402
from test_hf_mamba import bounded_random_program, run, stepwise_logits  # noqa: E402
from test_random_programs import X_NUM  # noqa: E402

MAX_LEN = 8
HALF, QUARTER = Fraction(1, 2), Fraction(1, 4)
TURN = [[Fraction(3, 10), Fraction(-4, 10)], [Fraction(4, 10), Fraction(3, 10)]]  # 1/2 times a 3-4-5 rotation
TWICE = [[HALF, QUARTER, 1, 0], [QUARTER, 0, 0, 1], [0, 0, HALF, QUARTER], [0, 0, QUARTER, 0]]  # (x^2-x/2-1/16)^2
STATES = {  # name: A, B (reading x of 2 components), initial state
    "turn": (TURN, [[1, 0], [0, 1]], [HALF, 0]),
    "growth": ([[Fraction(5, 4)]], [[1, 0]], [Fraction(-1, 3)]),
    "twice": (TWICE, [[0, 1], [0, 0], [0, 0], [0, 1]], [0, 1, 0, Fraction(1, 3)]),
    "fibonacci": ([[1, 1], [1, 0]], [[1, 0], [0, 0]], [0, 1]),  # the golden ratio: an irrational root above 1
}



def state(x: lsrl.Input, name: str) -> lsrl.LinState:
    A, B, init = STATES[name]
    return lsrl.LinState(x, A, B, init_state=init, name=name)


def refused_states_program() -> lsrl.ForEach:
    """The four driven states, with initial states, that only the convolution holds, mixed by a ReLU downstream."""
    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    states = lsrl.Concat([state(x, name) for name in STATES])
    mix = [[1, -1, 0, Fraction(1, 2), 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0, 1, 0, Fraction(1, 4)]]
    mixed = lsrl.Linear(states, mix, name="mixed")
    return lsrl.ForEach(lsrl.Concat([states, lsrl.ReLU(mixed)]))


def cubic_state(model: lsrl.CompiledProgram) -> str:
    """The name of seed 4's state with the driven cubic ``x**3 - x/9 - 2/27`` (its one 3-unit block)."""
    return next(layer.name for layer in rational_block_diagonal(model).layers if layer.kind == "LinState"
                and any(kind == OTHER and len(indices) == 3 for kind, indices in state_blocks(layer.A)))


@lru_cache(maxsize=None)
def case(name: str) -> tuple[lsrl.CompiledProgram, np.ndarray]:
    """The program and inputs (multiples of 1/2, exact in float32) of ``name``: seed 4's or the three states'."""
    if name == "seed 4":
        model = lsrl.compile(bounded_random_program(4))
        xs = np.random.default_rng(4).integers(-X_NUM, X_NUM + 1, (2, MAX_LEN, model.input.dim)) / 2
    else:
        model = lsrl.compile(refused_states_program())
        xs = np.random.default_rng(6).integers(-2, 3, (2, MAX_LEN, 2)) / 2
    return model, xs


@pytest.mark.parametrize("name", ["seed 4", "states"])
def test_refused_states_are_exact_convolutions_at_short_max_len(name):
    """The slots, run in exact fractions (each within its bounds), give the interpreter's outputs bit for bit;
    the refused states are delay channels and impulses only (no scan, no pulse)."""
    model, xs = case(name)
    lowered = lower(model, MAX_LEN)
    assert run_slots(lowered, xs) == _exact_reference(model, xs)
    states = [cubic_state(model)] if name == "seed 4" else [layer.name for layer in model.layers
                                                            if layer.kind == "LinState"]
    convolved = [c for slot in lowered.slots if slot.name in states for c in slot.channels]
    assert {c.kind for c in convolved} == {"delay"}
    assert max(c.lag for c in convolved if not c.impulse) == MAX_LEN - 1  # u_1 reaches step max_len
    if name == "states":  # A^max_len z_0 reaches step max_len
        assert max(c.lag for c in convolved if c.impulse) == MAX_LEN - 1


@pytest.mark.parametrize("arch", ["mamba", "mamba2", "hawk", "griffin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["seed 4", "states"])
def test_convolutions_match_the_interpreter_within_the_stated_tolerance(name, arch, dtype):
    """The stated tolerance holds, and says something: it is below 1e-3 of the outputs' largest value."""
    model, xs = case(name)
    exact = np.asarray(model(xs, exact=True), dtype=float)
    hf = model.to_hf(arch, max_len=MAX_LEN, dtype=dtype)
    tolerance = hf.config.lsrl_io["tolerance"]
    error = np.max(np.abs(run(hf, xs) - exact))
    assert error <= tolerance <= 1e-3 * np.max(np.abs(exact)), (error, tolerance)


@pytest.mark.parametrize("name", ["seed 4", *STATES])
def test_beyond_the_limit_each_state_is_refused_naming_it_and_the_limit(name):
    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    model = case("seed 4")[0] if name == "seed 4" else lsrl.compile(lsrl.ForEach(state(x, name)))
    named = cubic_state(model) if name == "seed 4" else name
    with pytest.raises(lsrl.LsrlError, match=f"LinState '{named}': .*; only at max_len <= {MAX_CONVOLUTION_LEN} "
                                             f"\\(here {MAX_CONVOLUTION_LEN + 1}\\)"):
        lower(model, MAX_CONVOLUTION_LEN + 1)


def test_stepwise_decoding_through_the_stock_cache_equals_the_full_forward():
    """The conv cache holds the convolution's whole window (``max_len + 2`` taps): one step at a time through the
    stock Mamba cache gives the full forward's logits bit for bit."""
    model, xs = case("states")
    hf = model.to_hf("mamba", max_len=MAX_LEN, dtype=torch.float64)
    embeds = lsrl.hf.inputs(hf, xs)["inputs_embeds"]
    with torch.no_grad():
        assert torch.equal(hf(inputs_embeds=embeds).logits, stepwise_logits(hf, embeds))
    assert hf.config.conv_kernel == MAX_LEN + 2


def random_convolved_state(seed: int) -> lsrl.CompiledProgram:
    """A random driven state of 2 or 3 units (entries multiples of 1/4 in [-5/4, 5/4], an initial state) drawn
    until no other rule holds it: its slots at ``MAX_LEN`` are delays reaching back ``MAX_LEN - 1`` steps."""
    rng = np.random.default_rng(seed)
    for _ in range(100):  # a bound: most draws (complex pairs of no finite period, decays above 1) qualify
        size = int(rng.integers(2, 4))
        A = [[Fraction(int(v), 4) for v in row] for row in rng.integers(-5, 6, (size, size))]
        B = [[Fraction(int(v), 2) for v in row] for row in rng.integers(-2, 3, (size, 1))]
        init = [Fraction(int(v), 3) for v in rng.integers(-2, 3, size)]
        x = lsrl.Input(1, name="x", bounds=(-1, 1))
        model = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, A, B, init_state=init, name="drawn")))
        lags = [c.lag for slot in lower(model, MAX_LEN).slots for c in slot.channels if c.kind == "delay"]
        if max(lags, default=0) == MAX_LEN - 1:
            return model
    raise AssertionError(f"seed {seed}: no state the convolution holds in 100 draws")


@pytest.mark.parametrize("seed", range(4))
def test_random_states_no_other_rule_holds_are_exact_convolutions(seed):
    """The slots give the interpreter's outputs bit for bit (in fractions); Mamba and Hawk in float32 are within
    their stated tolerance."""
    model = random_convolved_state(seed)
    xs = np.random.default_rng(seed).integers(-2, 3, (2, MAX_LEN, 1)) / 2
    assert run_slots(lower(model, MAX_LEN), xs) == _exact_reference(model, xs)
    exact = np.asarray(model(xs, exact=True), dtype=float)
    for arch in ("mamba", "hawk"):
        hf = model.to_hf(arch, max_len=MAX_LEN, dtype=torch.float32)
        error = np.max(np.abs(run(hf, xs) - exact))
        assert error <= hf.config.lsrl_io["tolerance"] <= 1e-3 * max(1.0, np.max(np.abs(exact))), (arch, error)
