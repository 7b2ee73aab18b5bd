"""Value ranges against brute force: every bound holds on simulated sequences, and the tight ones
are approached by the sequences that push hardest."""

import itertools
import pickle
import random
from fractions import Fraction as F

import numpy as np
import pytest

import lsrl
from conftest import as_fractions
from lsrl.lang import relational_bounds


def simulated_extremes(node, dim, box, steps, sequences, seed=0):
    """Min and max of ``node`` over random sequences of box corners and interior points (exact)."""
    rng = random.Random(seed)
    program = lsrl.ForEach(node)
    low, high = box
    batch = np.empty((sequences, steps, dim), dtype=object)
    for index in np.ndindex(batch.shape):
        batch[index] = rng.choice([F(low), F(high), F(rng.randint(0, 8), 8) * (high - low) + low])
    values = np.array(as_fractions(program(batch, exact=True)), dtype=object)
    return values.min(axis=(0, 1)), values.max(axis=(0, 1))


def test_a_decaying_state_is_bounded_by_its_geometric_series():
    x = lsrl.Input(1, bounds=(0, 1))
    low, high = lsrl.value_bounds(lsrl.LinState(x, [[F(1, 2)]], [[1]]))
    assert low == [0] and high == [2]
    # constant input 1 approaches the supremum: 2 - 2^(1 - t)
    assert lsrl.ForEach(lsrl.LinState(x, [[F(1, 2)]], [[1]]))(np.ones((40, 1)), exact=True)[-1, 0] > 2 - F(1, 2**38)


def test_an_alternating_state_is_bounded_on_both_sides():
    x = lsrl.Input(1, bounds=(0, 1))
    state = lsrl.LinState(x, [[F(-1, 2)]], [[1]])
    low, high = lsrl.value_bounds(state)
    assert (low, high) == ([F(-2, 3)], [F(4, 3)])
    inputs = np.array([[1], [0]] * 20, dtype=object)  # 1 at every other step approaches 4/3
    out = lsrl.ForEach(state)(inputs, exact=True)[:, 0]
    assert max(out) > F(4, 3) - F(1, 10**9) and min(out) >= F(-2, 3)


def test_a_start_above_the_fixed_point_is_the_bound():
    x = lsrl.Input(1, bounds=(0, 1))
    low, high = lsrl.value_bounds(lsrl.LinState(x, [[F(1, 2)]], [[1]], init_state=[10]))
    assert (low, high) == ([0], [6])  # the first output is at most 10/2 + 1, later ones less


def test_a_counter_is_unbounded_unless_the_length_is_declared():
    x = lsrl.Input(1, bounds=(0, 1))
    counter = lsrl.LinState(lsrl.f_constant(x, 1), [[1]], [[1]])
    bounds = lsrl.value_bounds(counter)
    assert bounds.low == [1] and bounds.high == [float("inf")]
    assert not bounds.finite and bounds.unbounded == [0]
    declared = lsrl.value_bounds(counter, max_length=100)
    assert declared.finite and declared.high == [100]
    assert lsrl.ForEach(counter)(np.zeros((100, 1)), exact=True)[-1, 0] == 100


def test_a_one_hot_counter_keeps_its_exact_range():
    x = lsrl.Input(1)
    cycle = lsrl.LinState(x, [[0, 0, 1], [1, 0, 0], [0, 1, 0]], [[0], [0], [0]], init_state=[1, 0, 0])
    assert lsrl.value_bounds(cycle) == ([0, 0, 0], [1, 1, 1])


def random_contracting_state(rng, x, dim):
    """A dense rational A scaled so that sum |A_ij| per row < 1 (spectral radius < 1)."""
    A = [[F(rng.randint(-4, 4), 4) for _ in range(dim)] for _ in range(dim)]
    scale = max(sum(abs(v) for v in row) for row in A) * F(rng.randint(5, 12), 4) or 1
    A = [[v / scale for v in row] for row in A]
    B = [[F(rng.randint(-3, 3)) for _ in range(x.dim)] for _ in range(dim)]
    return lsrl.LinState(x, A, B, b=[F(rng.randint(-2, 2)) for _ in range(dim)],
                         init_state=[F(rng.randint(-3, 3)) for _ in range(dim)])


@pytest.mark.parametrize("seed", range(12))
def test_random_contracting_states_stay_within_their_finite_bounds(seed):
    rng = random.Random(seed)
    x = lsrl.Input(2, bounds=(-1, 2))
    state = random_contracting_state(rng, x, rng.randint(1, 3))
    bounds = lsrl.value_bounds(state)
    assert bounds.finite
    seen_low, seen_high = simulated_extremes(state, 2, (-1, 2), steps=25, sequences=40, seed=seed)
    for i in range(state.dim):
        assert bounds.low[i] <= seen_low[i] and seen_high[i] <= bounds.high[i]


def test_bounds_hold_through_relus_products_and_a_shift_register():
    x = lsrl.Input(1, bounds=(-2, 3))
    shift = lsrl.LinState(x, [[0, 0], [1, 0]], [[1], [0]])
    product = lsrl.Multi(lsrl.Concat([lsrl.ReLU(shift), shift]))
    bounds = lsrl.value_bounds(product)
    assert bounds == ([-6, -6], [9, 9])
    seen_low, seen_high = simulated_extremes(product, 1, (-2, 3), steps=6, sequences=60)
    assert all(bounds.low[i] <= seen_low[i] and seen_high[i] <= bounds.high[i] for i in range(2))
    assert list(seen_high) == [9, 9]  # the interval is attained: 3 * 3


def test_automatic_lambda_follows_a_decaying_branch():
    """``lambda_="auto"`` sizes the conditional from these ranges: a decaying state, which the
    widening analysis called unbounded (an error), now gives lambda = floor(2) + 1."""
    x = lsrl.Input(2, bounds=(0, 1))
    decaying = lsrl.LinState(x[1:2], [[F(1, 2)]], [[1]])
    chosen = lsrl.f_ifelse(lsrl.f_larger(x[0:1], F(1, 2), mu=2), decaying, decaying * 0, variant="original",
                           lambda_="auto")
    weights = [v for node in lsrl.ForEach(chosen).nodes if isinstance(node, lsrl.Linear)
               for row in node.A.to_fractions() for v in row]
    assert max(abs(v) for v in weights) == 3
    corners = np.array(list(itertools.product([0, 1], repeat=2)) * 3, dtype=object)
    program = lsrl.ForEach(chosen)
    expected = lsrl.ForEach(decaying)(corners, exact=True)[:, 0] * np.array([c[0] for c in corners])
    assert as_fractions(program(corners, exact=True)[:, 0]) == as_fractions(expected)


def test_bounds_follow_a_rewiring_above_the_node_and_only_there():
    """Cached bounds belong to the wiring they were computed for: rewiring an ancestor gives every reader
    new bounds (value and relational), and a node of another program keeps its cached bounds object."""
    narrow, wide = lsrl.Input(1, bounds=(0, 1)), lsrl.Input(1, bounds=(0, 5))
    relu = lsrl.ReLU(narrow)
    doubled = 2 * relu
    other = 3 * lsrl.ReLU(lsrl.Input(1, bounds=(0, 2)))
    assert as_fractions(lsrl.value_bounds(doubled)) == [[0], [2]]
    assert as_fractions(relational_bounds(doubled, 4)) == [[0], [2]]
    kept = lsrl.value_bounds(other)
    relu.replace_input(narrow, wide)
    assert as_fractions(lsrl.value_bounds(doubled)) == [[0], [10]]
    assert as_fractions(relational_bounds(doubled, 4)) == [[0], [10]]
    assert lsrl.value_bounds(other) is kept


def test_a_pickled_program_still_follows_a_rewiring():
    x = lsrl.Input(1, bounds=(0, 1), name="x")
    program = pickle.loads(pickle.dumps(lsrl.ForEach(2 * lsrl.ReLU(x, name="relu"))))
    assert as_fractions(lsrl.value_bounds(program.output)) == [[0], [2]]
    relu = next(node for node in program.nodes if node.name == "relu")
    relu.replace_input(program.input, lsrl.Input(1, bounds=(0, 5)))
    assert as_fractions(lsrl.value_bounds(program.output)) == [[0], [10]]
