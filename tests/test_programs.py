"""The library programs, run by the interpreter and compiled, in both backends."""

import math
import random
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest

import lsrl
from conftest import as_fractions, max_relative_difference, random_map
from lsrl.programs import (
    continuous_approximator, continuous_prompt, continuous_query, discrete_approximator, discrete_prompt,
    more_ones_than_zeros,
)

VARIANTS = lsrl.IFELSE_VARIANTS
CELLS = 8
MU = 1000  # the programs' default step steepness: cells have soft edges of width 1/MU


@lru_cache(maxsize=None)
def compiled(kind, variant, backend, n=3):
    program = {
        "discrete": lambda: discrete_approximator(n, ifelse=variant),
        "continuous": lambda: continuous_approximator(2, 2, ifelse=variant),
    }[kind]()
    return program, lsrl.compile(program, backend=backend)


# ---- Fig. 1 --------------------------------------------------------------------------------


def test_more_ones_than_zeros_counts_and_compiles_to_one_linear_rnn_layer():
    program = more_ones_than_zeros()
    model = lsrl.compile(program)
    kinds = [layer.kind for layer in model.layers]
    assert kinds[0] == "LinState" and kinds.count("LinState") == 1
    assert set(kinds[1:]) <= {"Linear", "ReLU"}  # one recurrent layer followed by its ReLU MLP
    rng = random.Random(0)
    bits = np.array([[[rng.randint(0, 1)] for _ in range(40)] for _ in range(5)])
    lead = np.cumsum(2 * bits - 1, axis=1)
    expected = (lead > 0).astype(float)
    np.testing.assert_array_equal(program(bits), expected)
    np.testing.assert_array_equal(model(bits), expected)
    assert as_fractions(model(bits, exact=True)) == as_fractions(program(bits, exact=True))


# ---- compiled == interpreter ---------------------------------------------------------------


def random_token_sequences(rng, count, length):
    return np.array([[[rng.randint(0, 10)] for _ in range(length)] for _ in range(count)])


def random_continuous_inputs(rng, count, length, dyadic):
    def value():
        return Fraction(rng.randint(0, 64), 64) if dyadic else Fraction(repr(rng.random()))

    rows = [[[value() for _ in range(5)] for _ in range(length)] for _ in range(count)]
    for sequence in rows:  # well-formed cells half of the time: [δ, l1, l2, y1, y2]
        for token in sequence[1::2]:
            token[0] = Fraction(1, 8)
    return np.array(rows, dtype=object)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", ["discrete", "continuous"])
def test_exact_compilation_is_bit_identical(kind, variant):
    program, model = compiled(kind, variant, "exact")
    rng = random.Random(10 * VARIANTS.index(variant) + len(kind))
    if kind == "discrete":
        xs = random_token_sequences(rng, 3, 25)
    else:
        xs = random_continuous_inputs(rng, 3, 12, dyadic=False)
    assert as_fractions(model(xs, exact=True)) == as_fractions(program(xs, exact=True))


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", ["discrete", "continuous"])
def test_float_compilation_agrees_to_1e_9(kind, variant):
    """Tolerance: max |a - b| / max(1, |b|) <= 1e-9.

    The ReLU-based conditionals multiply by lambda = 1e10 after steps of slope mu = 1000; on
    inputs that are not exactly representable, fusing those layers changes float rounding by about
    lambda * mu * 2^-52 ~ 1e-3 (the instability of Sec. 5). On token inputs and on dyadic inputs
    no rounding occurs, and the compiled model agrees to 1e-9; the multiplicative variants agree on
    any real input.
    """
    program, model = compiled(kind, variant, "float")
    rng = random.Random(10 * VARIANTS.index(variant) + len(kind) + 1)
    if kind == "discrete":
        xs = random_token_sequences(rng, 8, 40).astype(float)
    else:
        dyadic = not variant.startswith("multiplicative")
        xs = random_continuous_inputs(rng, 8, 30, dyadic=dyadic).astype(float)
    assert max_relative_difference(model(xs), program(xs)) <= 1e-9


# ---- Listing 2: token maps -----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["exact", "float"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.slow
def test_discrete_approximator_answers_every_query(n, variant, backend):
    _, model = compiled("discrete", variant, backend, n)
    mapping = random_map(random.Random(n), n)
    keys = list(mapping)
    if backend == "exact":  # exact runs are slow in pure Python: a sample of the queries
        keys = keys[:: 4]
    batch = np.stack([discrete_prompt(mapping, query=key) for key in keys])
    if backend == "exact":
        answers = np.array(as_fractions(model(batch, exact=True)), dtype=object)[:, -n:, 0]
        assert [tuple(a) for a in answers] == [mapping[k] for k in keys]
    else:
        answers = model(batch)[:, -n:, 0]
        np.testing.assert_allclose(answers, np.array([mapping[k] for k in keys]), rtol=0, atol=1e-9)


def test_discrete_answer_for_an_unknown_key_is_zero():
    """The network's answer to a query that is no key (``discrete_prompt`` refuses to build such a prompt)."""
    program = discrete_approximator(2)
    xs = np.vstack([[[9], [9]], discrete_prompt({(1, 2): (3, 4), (5, 6): (7, 8)})])
    assert list(program(xs)[-2:, 0]) == [0, 0]


# ---- Listing 1: continuous functions -------------------------------------------------------


def smooth_target(seed):
    """f(x) = sum_k a_k sin(w_k . x + p_k), with its Lipschitz constant sum_k |a_k| |w_k|."""
    generator = np.random.default_rng(seed)
    amplitude = generator.uniform(-1, 1, size=(2, 3))
    frequency = generator.uniform(-3, 3, size=(2, 3, 2))
    phase = generator.uniform(0, 2 * np.pi, size=(2, 3))

    def f(x):
        return np.array([
            sum(amplitude[o, k] * np.sin(frequency[o, k] @ x + phase[o, k]) for k in range(3)) for o in range(2)
        ])

    lipschitz = math.sqrt(sum(
        sum(abs(amplitude[o, k]) * np.linalg.norm(frequency[o, k]) for k in range(3)) ** 2 for o in range(2)
    ))
    return f, lipschitz


def query_away_from_edges(rng):
    """A query at least 1/MU away from every cell edge (the program's cells have soft edges)."""
    while True:
        q = [Fraction(rng.randint(1, 10**6 - 1), 10**6) for _ in range(2)]
        if all(min(v * CELLS % 1, 1 - v * CELLS % 1) > Fraction(CELLS, MU) for v in q):
            return q


def assert_cell_centre_values(model, target_seed, query_seed):
    """Exact output = the target's value at the centre of the query's cell, within App. B's bound."""
    f, lipschitz = smooth_target(target_seed)
    prompt = continuous_prompt(f, 2, 2, CELLS, exact=True)
    rng = random.Random(query_seed)
    for _ in range(4):
        q = query_away_from_edges(rng)
        xs = np.vstack([continuous_query(q, 2), prompt])
        estimate = [Fraction(str(v)) for v in model(xs, exact=True)[-1]]
        centre = np.array([(math.floor(v * CELLS) + 0.5) / CELLS for v in q])
        assert estimate == [Fraction(repr(float(v))) for v in f(centre)]
        error = np.linalg.norm(np.array(estimate, dtype=float) - f(np.array(q, dtype=float)))
        assert error <= (1 / CELLS) * lipschitz * math.sqrt(2) / 2 + 1e-12  # App. B


@pytest.mark.parametrize("variant", VARIANTS)
def test_continuous_approximator_returns_the_cell_centre_value(variant):
    _, model = compiled("continuous", variant, "exact")
    assert_cell_centre_values(model, target_seed=7, query_seed=3)


def test_continuous_streaming_refines_coarse_to_fine():
    """Sec. 4.1: prompts for a coarse grid and then corrections on finer grids add up."""
    program = continuous_approximator(1, 1)
    f = lambda x: np.array([x[0] ** 2])  # noqa: E731
    coarse = continuous_prompt(f, 1, 1, 2, exact=True)
    fine = continuous_prompt(f, 1, 1, 4, exact=True)
    fine[:, 2] -= np.repeat(coarse[:, 2], 2)  # each fine cell corrects its coarse parent
    q = [Fraction(5, 16)]
    xs = np.vstack([continuous_query(q, 1), coarse, fine])
    out = [Fraction(str(v)) for v in program(xs, exact=True)[:, 0]]
    assert out[len(coarse)] == Fraction(repr(0.0625))  # coarse cell (0, 1/2], centre 1/4
    assert out[-1] == Fraction(repr(0.140625))  # fine cell (1/4, 1/2], centre 3/8


# ---- the robust constructions (Sec. 5's goal, see lsrl.experiments.noise) ---------------------


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_robust_discrete_approximator_is_still_exact(variant):
    program = discrete_approximator(3, ifelse=variant, robust=True, vocabulary=10)
    model = lsrl.compile(program)
    mapping = random_map(random.Random(9), 3, pairs=9)
    keys = list(mapping)[::3]
    batch = np.stack([discrete_prompt(mapping, query=key) for key in keys])
    exact = model(batch, exact=True)
    assert as_fractions(exact) == as_fractions(program(batch, exact=True))
    assert [tuple(int(Fraction(str(v))) for v in row) for row in exact[:, -3:, 0]] == [mapping[k] for k in keys]


def test_robust_discrete_answer_for_an_unknown_key_is_zero():
    program = discrete_approximator(2, robust=True, vocabulary=9)
    xs = np.vstack([[[9], [9]], discrete_prompt({(1, 2): (3, 4), (5, 6): (7, 8)})])
    assert list(program(xs)[-2:, 0]) == [0, 0]


def robust_continuous(variant):
    return continuous_approximator(2, 2, ifelse=variant, robust=True, value_bound=3)


@pytest.mark.parametrize("variant", VARIANTS)
def test_robust_continuous_compilation_is_bit_identical(variant):
    program = robust_continuous(variant)
    model = lsrl.compile(program)
    xs = random_continuous_inputs(random.Random(VARIANTS.index(variant)), 3, 12, dyadic=False)
    assert as_fractions(model(xs, exact=True)) == as_fractions(program(xs, exact=True))


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_robust_float_compilation_agrees_to_1e_9_on_any_real_input(variant):
    """With lambda a little above the values (not 1e10), rounding is not amplified: no dyadic inputs needed."""
    rng = random.Random(VARIANTS.index(variant) + 100)
    for program, xs in [
        (robust_continuous(variant), random_continuous_inputs(rng, 8, 30, dyadic=False).astype(float)),
        (discrete_approximator(3, ifelse=variant, robust=True, vocabulary=10),
         random_token_sequences(rng, 8, 40).astype(float)),
    ]:
        assert max_relative_difference(lsrl.compile(program, backend="float")(xs), program(xs)) <= 1e-9


@pytest.mark.parametrize("variant", VARIANTS)
def test_robust_continuous_approximator_returns_the_cell_centre_value(variant):
    assert_cell_centre_values(lsrl.compile(robust_continuous(variant)), target_seed=8, query_seed=4)


@pytest.mark.parametrize("variant", ["multiplicative", "multiplicative_optimized"])
def test_robust_multiplicative_blends_the_two_cells_at_an_edge(variant):
    """Within 1/MU of an edge the two cells' conditions sum to 1: the value is their mix, not 0."""
    program = robust_continuous(variant)
    f, _ = smooth_target(9)
    prompt = continuous_prompt(f, 2, 2, CELLS, exact=True)
    q = [Fraction(3, CELLS) + Fraction(1, 4 * MU), Fraction(5, 16)]  # a quarter into the edge 3/8
    estimate = [Fraction(str(v)) for v in program(np.vstack([continuous_query(q, 2), prompt]), exact=True)[-1]]
    below, above = f(np.array([2.5, 2.5]) / CELLS), f(np.array([3.5, 2.5]) / CELLS)
    expected = [Fraction(3, 4) * Fraction(repr(float(b))) + Fraction(1, 4) * Fraction(repr(float(a)))
                for b, a in zip(below, above)]
    assert estimate == expected


def test_robust_needs_its_margins():
    with pytest.raises(lsrl.LsrlError, match="vocabulary"):
        discrete_approximator(3, robust=True)
    with pytest.raises(lsrl.LsrlError, match="permutation"):
        discrete_approximator(3, robust=True, vocabulary=10, counter="rotation")
    with pytest.raises(lsrl.LsrlError, match="value_bound"):
        continuous_approximator(2, 2, ifelse="optimized", robust=True)
    with pytest.raises(lsrl.LsrlError, match="value_bound must be positive"):
        continuous_approximator(2, 2, robust=True, value_bound=0)
    continuous_approximator(2, 2, ifelse="multiplicative", robust=True)  # no lambda, no bound needed
