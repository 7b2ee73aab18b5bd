"""``lsrl.lang.relational_bounds``: sound against the interpreter (exact) on fixed and random programs
over many random sequences, never looser than ``value_bounds``, and tight where the interval analysis
loses the relations (the ``f_step`` and ``f_ifelse`` cancellations, step-only conditions, registers
written once)."""

from __future__ import annotations

import random
from fractions import Fraction as F

import numpy as np
import pytest

import lsrl
from lsrl.lang.relational_bounds import relational_bounds
from lsrl.programs import discrete_approximator
from test_random_programs import generate_program

X = 3  # random programs read inputs in [-X, X]


def random_program(seed: int, integer: bool) -> lsrl.ForEach:
    """The random program of ``seed`` (tests/test_random_programs.py), its Input declared in [-X, X]."""
    source = generate_program(random.Random(seed)).source_code()
    declared = f"name='x', bounds=(-{X}, {X}), integer={integer})"
    namespace: dict = {}
    exec(source.replace("name='x')", declared, 1), namespace)
    return namespace["prog"]


def random_sequences(rng: np.random.Generator, count: int, steps: int, dim: int, integer: bool) -> np.ndarray:
    """Sequences at the bounds' corners and inside them (halves where real), as exact fractions."""
    values = rng.integers(-X, X + 1, size=(count, steps, dim)) if integer else (
        rng.integers(-2 * X, 2 * X + 1, size=(count, steps, dim)) / 2)
    corners = rng.choice([-X, X], size=(count // 4, steps, dim))
    both = np.concatenate([values, corners]).astype(object)
    return np.vectorize(lambda v: F(v).limit_denominator(4), otypes=[object])(both)


def assert_sound(program: lsrl.ForEach, xs: np.ndarray, steps: int, exact: bool = True) -> None:
    trace = program.trace(xs, exact=exact)
    relational_bounds(program.output, steps)  # every node's bounds in one run
    for node in program.nodes:
        values = trace[program.names[node]]
        bounds = relational_bounds(node, steps)
        interval = lsrl.value_bounds(node, steps)
        for i in range(node.dim):
            observed = list(np.asarray(values)[..., i].reshape(-1))
            assert bounds.low[i] <= min(observed) and max(observed) <= bounds.high[i], (node, i)
            assert interval.low[i] <= bounds.low[i] and bounds.high[i] <= interval.high[i], (node, i)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("integer", [True, False])
def test_random_programs_stay_within_their_bounds_and_never_beyond_the_intervals(seed, integer):
    program = random_program(seed, integer)
    steps = 7
    xs = random_sequences(np.random.default_rng(seed), 24, steps, program.input.dim, integer)
    assert_sound(program, xs, steps)


def test_listing_2_stays_within_its_bounds_on_prompts_and_on_random_tokens():
    """In float64, which is exact here (every value is a small multiple of 1/2: the exact run is slow)."""
    program = discrete_approximator(2, robust=True, vocabulary=5)
    steps = 22
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6, size=(30, steps, 1))
    mapping = {(a, b): (b, a) for a, b in [(1, 2), (3, 4), (5, 0), (2, 2), (0, 1)]}
    prompts = np.stack([lsrl.programs.discrete_prompt(mapping, query=key) for key in mapping])
    assert prompts.shape[1] == steps
    assert_sound(program, np.concatenate([tokens, prompts]).astype(float), steps, exact=False)


def test_a_step_of_an_integer_is_a_flag():
    """``relu(2x) - relu(2x - 1)`` over integers: [0, 1]; the intervals give [-5, 6]."""
    x = lsrl.Input(1, name="x", bounds=(-3, 3), integer=True)
    step = lsrl.f_step(x, 2)
    assert lsrl.value_bounds(step, 4) == ([-5], [6])
    assert relational_bounds(step, 4) == ([0], [1])


def test_an_ifelse_on_a_flag_cancels_to_its_branches_bound():
    """Eq. (7): ``relu(t - lam (1 - c)) - relu(-t - lam (1 - c)) + ...`` with ``lam = 10**10``: the branches'
    bounds, where the intervals carry ``lam``."""
    x = lsrl.Input(2, name="x", bounds=(-3, 3), integer=True)
    flag = lsrl.f_larger(x[0], F(1, 2), 2)
    for variant in ("original", "step", "multiplicative"):
        chosen = lsrl.f_ifelse(flag, x[1] * 5, x[1] * 0 + 7, variant=variant, mu=2)
        assert relational_bounds(chosen, 3) == ([-15], [15]), variant
        assert lsrl.value_bounds(chosen, 3).high[0] > 15


def test_a_register_written_only_at_its_first_steps_is_bounded_by_them():
    """``r_t = r_(t-1) + [t <= 3] x_t``: 3 X, exactly, at any length; the intervals give max_len X times
    the conditional's widening."""
    x = lsrl.Input(1, name="x", bounds=(0, X), integer=True)
    counter = lsrl.LinState(lsrl.f_constant(x, 1), [[1]], [[1]], name="counter")
    early = lsrl.f_smaller(counter, F(7, 2), 2)
    register = lsrl.LinState(lsrl.f_ifelse(early, x, x * 0, variant="multiplicative"), [[1]], [[1]])
    for steps in (3, 50):
        assert relational_bounds(register, steps) == ([0], [3 * X])
    assert lsrl.value_bounds(register, 50).high[0] > 50 * X


def test_a_real_input_is_an_interval_and_a_rotation_stays_bounded():
    """A real Input enters as its interval; a quarter turn with irrational-free weights is carried exactly,
    a rotation by an irrational angle with rounding slack that does not grow with the steps."""
    x = lsrl.Input(1, name="x", bounds=(-1, 1))
    assert relational_bounds(x - x, 5) == ([-2], [2])  # no relation between uses of a real input
    c, s = np.cos(1.0), np.sin(1.0)
    turn = lsrl.LinState(x, [[c, -s], [s, c]], [[0], [0]], init_state=[1, 0])
    bounds = relational_bounds(turn, 200)
    assert all(-1 - 1e-9 <= float(v) for v in bounds.low) and all(float(v) <= 1 + 1e-9 for v in bounds.high)


def test_listing_2_outputs_are_bounded_by_tokens_not_by_10_to_the_11():
    program = discrete_approximator(2, robust=True, vocabulary=9)
    assert lsrl.value_bounds(program.output, 66).high[0] > 1e11
    low, high = relational_bounds(program.output, 66)
    assert low == [0] and 9 <= high[0] <= 9 * 66 // 2


def test_without_a_length_or_with_an_unbounded_input_it_is_the_interval_analysis():
    x = lsrl.Input(1, name="x")
    counter = lsrl.LinState(lsrl.f_constant(x, 1), [[1]], [[1]])
    assert relational_bounds(counter) == lsrl.value_bounds(counter)
    assert relational_bounds(counter + x, 10) == lsrl.value_bounds(counter + x, 10)
    with pytest.raises(lsrl.LsrlError, match="max_length"):
        relational_bounds(counter, 0)
