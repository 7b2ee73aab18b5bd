"""``lsrl.lang.relational_bounds``: sound against the interpreter (exact) on fixed and random programs
over many random sequences, never looser than ``value_bounds``, and tight where the interval analysis
loses the relations (the ``f_step`` and ``f_ifelse`` cancellations, step-only conditions, registers
written once)."""

from __future__ import annotations

import collections
import importlib
import math
import random
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lsrl
from lsrl.hf.lowering import exact_layers
from lsrl.lang.relational_bounds import relational_bounds
from lsrl.programs import discrete_approximator
from test_random_programs import generate_program

X = 3  # random programs read inputs in [-X, X]
relational = importlib.import_module("lsrl.lang.relational_bounds")  # the module (lsrl.lang exports the function)
rv = importlib.import_module("lsrl.lang.relational_values")  # its values and rules


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


class FreshAtoms(rv.Atoms):
    """Atoms numbered in creation order, a new one each time (no ids shared between steps)."""

    def new(self, source, centres, lo, hi, grid):
        atom = len(self.sizes)
        self.sizes[atom] = len(centres)
        return rv.Value((atom,), centres, lo, hi, grid)


def reference_step(node, weights, inputs, previous, sizes):
    """The node's components by the rules computed on the tables, every one (no copies or products by a
    constant passed on as they are)."""
    if isinstance(node, lsrl.Concat):
        return [v for part in inputs for v in part]
    if isinstance(node, lsrl.ReLU):
        return [rv.relu(v) for v in inputs[0]]
    if isinstance(node, lsrl.Multi):
        return [rv._product_tables(x, y, sizes) for x, y in zip(inputs[0][:node.dim], inputs[0][node.dim:])]
    operands = list(previous) + list(inputs[0])  # a state's previous components, then its input's
    rows = [rv._linear_terms(row, b, operands, sizes) for row, b in zip(weights.terms, weights.b)]
    return [rv.relu(v) for v in rows] if node.kind == "ReLUState" else rows


def reference_unrolled(output, max_length):
    """The unrolled analysis run step by step, every rule applied afresh at every step to new atoms and
    computed on the tables: the oracle of ``_unrolled``, which reuses the results of steps that read what an
    earlier one read and passes copied values on as they are."""
    order = lsrl.lang.program.topological_order(output)
    weights = {node: relational._Weights(node) for node in order if not isinstance(node, lsrl.Input)}
    states = [node for node in order if node.kind in ("LinState", "ReLUState")]
    atoms = FreshAtoms()
    previous = {node: list(weights[node].init) for node in states}
    exact = {node: weights[node].exact_init for node in states}
    low = {node: [np.inf] * node.dim for node in order}
    high = {node: [-np.inf] * node.dim for node in order}
    for _ in range(max_length):
        values = {}
        for node in order:
            if isinstance(node, lsrl.Input):
                values[node] = relational._input_values(node, atoms, 0)
            else:
                values[node] = reference_step(node, weights[node], [values[x] for x in node.inputs],
                                              previous.get(node, []), atoms.sizes)
            if node in exact:
                exact[node] = relational._exact_state(node, weights[node], exact[node], values[node.inputs[0]])
                values[node] = [v if e is None else rv.exact_float(e)
                                for v, e in zip(values[node], exact[node])]
            low[node] = [min(a, v.low) for a, v in zip(low[node], values[node])]
            high[node] = [max(a, v.high) for a, v in zip(high[node], values[node])]
        # source -1: no atom is of it, so every atom is made afresh (ids of FreshAtoms)
        previous = {node: [rv.as_atom(v, atoms, -1) for v in values[node]] for node in states}
    return {node: (low[node], high[node]) for node in order}


def assert_same_bounds(output, steps):
    """Bit for bit (``repr`` tells -0.0 from 0.0), every node, every component."""
    fast, reference = relational._unrolled(output, steps), reference_unrolled(output, steps)
    assert fast.keys() == reference.keys()
    for node, bounds in reference.items():
        assert repr(fast[node]) == repr(bounds), node


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_reusing_earlier_steps_gives_the_bounds_of_the_step_by_step_analysis_on_random_programs(seed):
    for integer in (True, False):
        assert_same_bounds(random_program(seed, integer).output, 40)


@pytest.mark.parametrize("form, steps", [("layers", 200), ("diagonal", 64)])
@pytest.mark.slow
def test_reusing_earlier_steps_gives_the_bounds_of_the_step_by_step_analysis_on_compiled_listing_2(form, steps):
    """The compiled layers and the exact diagonal form (``to_hf`` bounds both); at 200 steps the answer's
    register has outgrown its joint tables (from step 188 its values carry an offset) while the rest runs
    in a period."""
    model = lsrl.compile(discrete_approximator(2, robust=True, vocabulary=9), progress=False)
    layers = model.layers if form == "layers" else exact_layers(model)
    assert_same_bounds(layers[-1], steps)


def test_parts_of_a_program_that_run_in_a_period_are_computed_once_per_phase(monkeypatch):
    """Listing 2's layers before its answer register repeat with the token phase: over 300 steps each is
    stepped at a handful of steps (its group of layers is a look-up at the others); the register and the
    three layers reading it at every step."""
    model = lsrl.compile(discrete_approximator(2, robust=True, vocabulary=9), progress=False)
    stepped = collections.Counter()
    step = relational._Stepper.step

    def counted(self, *args):
        stepped[self.node] += 1
        return step(self, *args)

    monkeypatch.setattr(relational._Stepper, "step", counted)
    relational._unrolled(model.layers[-1], 300)
    assert max(stepped[layer] for layer in model.layers[:-4]) <= 10
    assert min(stepped[layer] for layer in model.layers[-4:]) == 300


def test_a_diagonal_form_is_made_once_per_model_so_builds_reuse_its_bounds():
    model = lsrl.compile(discrete_approximator(2, robust=True, vocabulary=9), progress=False)
    first = exact_layers(model)
    assert [a is b for a, b in zip(first, exact_layers(model))] == [True] * len(first)
    other = lsrl.compile(discrete_approximator(2, robust=True, vocabulary=9), progress=False)
    assert exact_layers(other)[-1] is not first[-1]


@pytest.mark.slow
def test_every_build_of_a_model_at_a_length_reuses_its_analyses(monkeypatch):
    """The first ``to_hf`` runs the analysis on the compiled layers and on the diagonal form; a second
    ``to_hf`` and a stock LSTM at that length run none; another length runs them again."""
    model = lsrl.compile(discrete_approximator(2, robust=True, vocabulary=9), progress=False)
    runs = []
    unrolled = relational._unrolled

    def counted(output, max_length):
        runs.append(max_length)
        return unrolled(output, max_length)

    monkeypatch.setattr(relational, "_unrolled", counted)
    model.to_hf("mamba", 12)
    assert runs == [12, 12]
    model.to_hf("mamba", 12)
    model.to_torch("stock_lstm", max_len=12)
    assert runs == [12, 12]
    model.to_torch("stock_lstm", max_len=13)
    assert runs == [12, 12, 13]


ENTRIES = st.sampled_from([0.0, -0.0, 1.0, -1.0, 3.0, -2.5, 0.5, 2.0 ** -1060, 2.0 ** 60, math.inf])
OFFSETS = st.sampled_from([0.0, -0.0, 0.25, -0.5, 1.0, 2.0 ** 55])
GRIDS = st.sampled_from([None, 0, 1, 60])


@st.composite
def supported_values(draw, sizes):
    """A value over some of the atoms of ``sizes`` (ids 0, 1, 2): either like a register's (distinct small whole
    entries, offsets on the grid), or drawn to hit the rules' edges (zeros of both signs, tiny and huge entries,
    infinities, no grid)."""
    support = tuple(sorted(draw(st.sets(st.sampled_from(sorted(sizes)), min_size=1))))
    shape = [sizes[atom] for atom in support]
    count = math.prod(shape)
    if draw(st.booleans()):
        start = draw(st.sampled_from([0.0, -2.0, 1.0]))
        table = start + np.array(draw(st.permutations(range(count))), dtype=float)
        lo, hi, grid = draw(st.sampled_from([(0.0, 0.0, 0), (0.0, 4.0, 0), (-0.5, 0.0, 1), (-0.0, 0.0, 0)]))
        return rv.Value(support, table.reshape(shape), lo, hi, grid)
    table = np.array(draw(st.lists(ENTRIES, min_size=count, max_size=count))).reshape(shape)
    lo, hi = sorted([draw(OFFSETS), draw(OFFSETS)])
    return rv.Value(support, table, lo, hi, draw(GRIDS))


def constants(table):
    return st.builds(lambda lo, hi, grid: rv.Value((), table, *sorted([lo, hi]), grid), OFFSETS, OFFSETS,
                     GRIDS)


ZERO_OR_ONE = st.sampled_from([0.0, 0.0, -0.0, 1.0]).flatmap(  # mostly as programs hold them: exact, no offset
    lambda c: st.one_of(constants(c), *[st.just(rv.exact_float(int(c)))] * 3))
SIZES = {0: 2, 1: 3, 2: 4}


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_product_by_an_exact_one_or_zero_is_what_the_rule_computes_on_the_tables(data):
    """Where ``_times_one`` or ``_times_zero`` answer, their value has the contents (bit for bit) of the
    product computed on the tables."""
    value, constant = data.draw(supported_values(SIZES)), data.draw(ZERO_OR_ONE)
    for x, y in ((value, constant), (constant, value)):
        with np.errstate(invalid="ignore"):  # an infinite entry times a zero
            full = rv._product_tables(x, y, SIZES)
        for shortcut in (rv._times_one, rv._times_zero):
            known = shortcut(x, y)
            assert known is None or known.contents == full.contents


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_linear_row_copying_one_term_is_what_the_rule_computes_on_the_tables(data):
    """Where ``_copied_term`` answers, its value has the contents (bit for bit) of the row computed term by
    term: one term with a support, the others and the bias constants (zeros mostly), weights 1 mostly."""
    term = data.draw(supported_values(SIZES))
    others = data.draw(st.lists(ZERO_OR_ONE, max_size=2))
    bias = data.draw(ZERO_OR_ONE)
    inputs = [term, *others]
    count = len(inputs)
    weights = data.draw(st.lists(st.sampled_from([1.0, 1.0, 1.0, -1.0, 2.0]), min_size=count, max_size=count))
    order = data.draw(st.permutations(range(len(inputs))))
    row = [(j, weights[j], rv.dyadic(weights[j])) for j in order]
    copied = rv._copied_term(row, bias, inputs)
    with np.errstate(invalid="ignore"):  # infinite entries of opposite signs
        full = rv._linear_terms(row, bias, inputs, SIZES)
    assert copied is None or copied.contents == full.contents


def test_copies_and_products_by_one_pass_the_value_on_as_it_is():
    """The shortcuts answer where programs copy a register (Listing 2's answer): an integer table, exact."""
    atoms = rv.Atoms()
    register = atoms.new(0, np.arange(5.0), 0.0, 3.0, 0)
    zero, one = rv.exact_float(0), rv.exact_float(1)
    assert rv._copied_term([(0, 1.0, 0), (1, 1.0, 0)], zero, [register, zero]) is register
    assert rv._times_one(one, register) is register
    assert rv._times_zero(register, zero).contents == rv._product_tables(register, zero, atoms.sizes).contents


def test_a_state_read_again_as_it_is_keeps_its_atom():
    """A state component that kept its atom's values is that atom at the next step; a table over it that is no
    set of centres (decreasing), or an atom of another source, makes a new atom."""
    atoms = rv.Atoms()
    register = atoms.new(3, np.arange(5.0), 0.0, 3.0, 0)
    assert rv.as_atom(register, atoms, 3) is register
    negated = rv.as_atom(rv.Value(register.support, -register.table, 0.0, 0.0, 0), atoms, 3)
    assert negated.support != register.support and negated.table.tolist() == [-4.0, -3.0, -2.0, -1.0, 0.0]
    assert rv.as_atom(register, atoms, 4).support != register.support


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(grid=st.sampled_from([0, 1, 5]), units=st.lists(st.integers(-40, 40), min_size=1, max_size=60),
       extra=st.sampled_from([None, -0.0, 2.0 ** -14, 1e6]), two_axes=st.booleans())
def test_a_state_table_s_distinct_entries_are_np_unique_s_bit_for_bit(grid, units, extra, two_axes):
    """The distinct entries a state's atom is made of, counted on the table's grid, or sorted where an entry is
    -0.0, off the grid, or far beyond the others: ``np.unique``'s, bit for bit."""
    table = np.ldexp(np.array(units, dtype=float), -grid)
    if extra is not None:
        table = np.append(table, extra)
    support: tuple[int, ...] = (0,)
    if two_axes and table.size % 2 == 0:
        table, support = table.reshape(2, -1), (0, 1)
    value = rv.Value(support, table, 0.0, 0.0, grid)
    assert rv._distinct(value).view(np.uint64).tolist() == np.unique(table).view(np.uint64).tolist()
