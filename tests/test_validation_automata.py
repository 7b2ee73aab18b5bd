"""``lsrl.automata``: every search terminates (the gain search that looped on NaN, the subset
construction of a regex, the redraws of random_dfa), sizes are refused before memory is spent, and every
bad argument ends in one ``LsrlError`` with a one-line message naming it; valid inputs keep their results.

The reported examples: ``to_torch(dfa, "gru")`` never returned for a ~400-symbol alphabet; the LSTM of a
2,500-symbol DFA took 2.2 GB; invalid regexes, ``random_dfa(3, 2, 0)``, numpy input and T = 0 raised
raw tracebacks.
"""

import math
import time

import numpy as np
import pytest
import torch
from automata.fa.dfa import DFA as LibDFA
from automata.fa.nfa import NFA

import lsrl.automata.compile as compile_module
from lsrl.automata import (
    ARCHITECTURES, DEFAULT_MAX_PARAMETERS, DFA, Mealy, certified_deviation, check, export_onnx, from_regex,
    gain_bound, learn_back, network_size, random_dfa, to_torch, tomita,
)
from lsrl.automata import gated, machines
from lsrl.automata.checking import count_errors, network_outputs, random_strings
from lsrl.automata.machines import _from_library
from lsrl.automata.units import transition_units
from fuzz_strategies import deadline

from lsrl.errors import AutomatonError, DimensionError, LsrlError, SequenceError


def one_line(error):
    message = str(error.value)
    assert "\n" not in message and message, message
    return message


def chain_with_sink(n_chain, k):
    """States 0..n_chain-1 read symbol 0 along a chain; every other symbol (and the chain's end) goes to a
    sink: the sink's in-degree is about n_chain * k, as in a keyword matcher over a large alphabet."""
    sink = n_chain
    table = {p: {a: (p + 1 if a == 0 and p + 1 < n_chain else sink) for a in range(k)} for p in range(n_chain)}
    table[sink] = {a: sink for a in range(k)}
    return DFA(range(n_chain + 1), range(k), table, 0, [n_chain - 1])


def _one_hot(indices, k):
    return torch.nn.functional.one_hot(torch.as_tensor(indices), k).float()


# ---- hangs: every search terminates ------------------------------------------------------------------------


def test_gru_of_a_400_symbol_dfa_is_refused_quickly_instead_of_looping():
    """The reported hang: the sink of this DFA sums 2,795 units, and float32 rounding leaves a GRU no margin;
    the gain search used to double the gain forever on a NaN grid."""
    dfa = chain_with_sink(6, 400)
    assert transition_units(dfa).in_degree > 2000
    start = time.perf_counter()
    with deadline(30), pytest.raises(LsrlError, match=r"no certified gain.*'rnn' or 'second_order'") as error:
        to_torch(dfa, "gru")
    assert time.perf_counter() - start < 10
    assert "D = 2795" in one_line(error)


def test_gain_bound_at_the_edge_of_feasibility():
    with deadline(30):
        assert math.isfinite(gain_bound("gru", 1900, 1900))  # certifiable, if only with a large gain
        with pytest.raises(LsrlError, match="no certified gain"):
            gain_bound("gru", 2000, 2000)  # looped before
        with pytest.raises(LsrlError, match="no certified gain"):
            gain_bound("lstm", 10 ** 6, 1)  # looped before: the grid ended below δ
        assert certified_deviation("gru", 10.0, 2000, 2000) is None


def test_gain_search_terminates_when_the_leak_is_nan(monkeypatch):
    """A NaN leak certifies nothing, and the search stops after its stated number of steps."""
    calls = []

    def nan_leak(architecture, gain, deviation, in_degree, readout_size):
        calls.append(gain)
        return np.full(np.shape(deviation), np.nan)

    monkeypatch.setattr(gated, "leak", nan_leak)
    with deadline(30), pytest.raises(LsrlError, match="no certified gain up to 2\\^64"):
        gain_bound("gru", 3, 1)
    assert len(calls) == gated.MAX_DOUBLINGS
    assert certified_deviation("gru", 5.0, 3, 1) is None


def test_gain_bound_unchanged_for_valid_widths():
    """The bounded search visits the same gains as the unbounded one did (values of the original search)."""
    for architecture, in_degree, readout in [("lstm", 2, 2), ("gru", 5, 20), ("lstm", 10, 100), ("gru", 419, 419)]:
        low, high = 0.0, 1.0
        while certified_deviation(architecture, high, in_degree, readout) is None:
            low, high = high, 2.0 * high
        while high - low > 1e-6 * high:
            middle = 0.5 * (low + high)
            certified = certified_deviation(architecture, middle, in_degree, readout) is not None
            low, high = (low, middle) if certified else (middle, high)
        assert gain_bound(architecture, in_degree, readout) == high


def test_regex_subset_construction_stops_at_max_states():
    pattern = "(a|b)*a" + "(a|b)" * 10  # 2^11 subsets
    with deadline(60), pytest.raises(AutomatonError, match=r"more than max_states=1,000 states") as error:
        from_regex(pattern, "ab", max_states=1000)
    assert "(a|b)*a(a|b)" in one_line(error)
    assert len(from_regex(pattern, "ab").states) == 2 ** 11  # under the default limit of 100,000
    assert machines.REGEX_MAX_STATES == 100_000
    with pytest.raises(AutomatonError, match="max_states must be at least 1"):
        from_regex("a", "ab", max_states=0)


PATTERNS = ["1*", "(10)*", "0*1*0*1*", "(0*10*1)*0*", "", "()", "1**", ".", "..*", "0()", "1*?", "(0|1)*0(0|1)(0|1)",
            "01&0*1", "(01|10)+1?", "0.1", "((0|1)1)*&(0|1)*", "011|101|110", "(0|1)*011(0|1)*", "0^1"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_from_regex_gives_the_dfa_automata_lib_gives(pattern):
    """The bounded subset construction changes no result: the same minimal DFA, numbered alike."""
    ours = from_regex(pattern, "01")
    library = _from_library(LibDFA.from_nfa(NFA.from_regex(pattern, input_symbols={"0", "1"}), minify=True),
                            ("0", "1"), ("0", "1"))
    assert np.array_equal(ours.table, library.table) and np.array_equal(ours.accepting, library.accepting)
    assert ours.start == library.start


def _old_random_dfa(n_states, n_symbols, rng):
    """random_dfa as it was (quadratic spanning-tree choice, unbounded redraws): the reference for its draws."""
    while True:
        table = rng.integers(0, n_states, size=(n_states, n_symbols))
        free = [(p, a) for p in range(n_states) for a in range(n_symbols)]
        for state in range(1, n_states):
            choices = [i for i, (p, _) in enumerate(free) if p < state]
            p, a = free.pop(choices[rng.integers(len(choices))])
            table[p, a] = state
        accepting = np.flatnonzero(rng.random(n_states) < 0.5).tolist()
        dfa = DFA(range(n_states), range(n_symbols), {p: dict(enumerate(map(int, table[p]))) for p in range(n_states)},
                  0, accepting)
        minimal = dfa.minimal()
        if len(minimal.states) == n_states:
            return minimal


@pytest.mark.parametrize("n_states, n_symbols", [(1, 1), (2, 1), (5, 1), (3, 2), (20, 3), (50, 5)])
def test_random_dfa_draws_what_it_drew_before(n_states, n_symbols):
    for seed in range(3):
        new = random_dfa(n_states, n_symbols, np.random.default_rng(seed))
        old = _old_random_dfa(n_states, n_symbols, np.random.default_rng(seed))
        assert np.array_equal(new.table, old.table) and np.array_equal(new.accepting, old.accepting)


def test_random_dfa_redraws_are_bounded(monkeypatch):
    monkeypatch.setattr(DFA, "minimal", lambda self: DFA([0], self.alphabet, {0: {a: 0 for a in self.alphabet}}, 0, []))
    monkeypatch.setattr(machines, "RANDOM_DFA_DRAWS", 5)
    with deadline(30), pytest.raises(AutomatonError, match="no minimal DFA with 3 states over 2 symbols in 5 draws"):
        random_dfa(3, 2, 0)


# ---- blow-ups: sizes refused before memory is spent ---------------------------------------------------------


def test_lstm_of_a_2500_symbol_dfa_is_refused_before_anything_is_built(monkeypatch):
    """The reported 2.2 GB: 2 states x 2,500 symbols is 5,001 units (with the start unit), 1.5e8 LSTM parameters.
    The refusal comes from the machine's size alone: building the units would fail this test."""
    dfa = chain_with_sink(1, 2500)
    monkeypatch.setattr(compile_module, "transition_units", lambda machine: pytest.fail("built before refusing"))
    with pytest.raises(LsrlError, match=r"5,001 units\) has 150,105,016 parameters \(0.6 GB in float32\), above "
                                        r"max_parameters=50,000,000") as error:
        to_torch(dfa, "lstm")
    assert "second_order" in one_line(error)
    assert network_size(dfa, "lstm") == (5001, 150_105_016, 600_420_064)
    assert DEFAULT_MAX_PARAMETERS == 5 * 10 ** 7


def test_the_limit_can_be_moved_and_lifted():
    dfa = tomita(3)
    with pytest.raises(LsrlError, match="above max_parameters=10"):
        to_torch(dfa, "rnn", max_parameters=10)
    for value in (0, -1, 2.5, "big", True):
        with pytest.raises(LsrlError, match="max_parameters"):
            to_torch(dfa, "rnn", max_parameters=value)
    assert to_torch(dfa, "rnn", max_parameters=None).core.hidden_size == 10


def _residue_mealy():
    return Mealy(range(3), "01", ("r0", "r1", "r2"),
                 {p: {a: ((2 * p + int(a)) % 3, f"r{(2 * p + int(a)) % 3}") for a in "01"} for p in range(3)}, 0)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_network_size_counts_what_to_torch_builds(architecture):
    machines_ = [tomita(1), tomita(3), random_dfa(6, 4, 2), chain_with_sink(3, 5), _residue_mealy()]
    for machine in machines_:
        for dtype in (torch.float32, torch.float64):
            net = to_torch(machine, architecture, dtype=dtype)
            tensors = [*net.parameters(), *net.buffers()]
            size = network_size(machine, architecture, dtype)
            assert size.parameters == sum(t.numel() for t in tensors)
            assert size.bytes == sum(t.numel() * t.element_size() for t in tensors)
            assert size.units == net.h0.shape[0]


# ---- numbers the gated networks cannot take ------------------------------------------------------------------


@pytest.mark.parametrize("gain", [float("inf"), float("nan"), 0, -2.0, True, "3", 1e300])
def test_gains_that_break_the_network_are_refused(gain):
    """inf gave all zeros with a RuntimeWarning; 1e300 overflowed float32 to inf weights: both silently wrong."""
    with pytest.raises(LsrlError, match="gain") as error:
        to_torch(tomita(4), "gru", gain=gain)
    one_line(error)


@pytest.mark.parametrize("architecture", ["lstm", "gru"])
def test_a_large_finite_gain_stays_exact_and_a_small_one_warns(architecture):
    dfa, rng = tomita(4), np.random.default_rng(0)
    indices = rng.integers(0, 2, size=(64, 200))
    net = to_torch(dfa, architecture, gain=1e30)
    with torch.no_grad():
        assert np.array_equal(net(_one_hot(indices, 2)).numpy(), dfa.reference(indices))
    with pytest.warns(RuntimeWarning, match="below the certified bound"):
        to_torch(dfa, architecture, gain=0.5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_exact_networks_run_in_half_precision_gated_ones_are_refused(dtype):
    dfa, rng = tomita(3), np.random.default_rng(1)
    indices = rng.integers(0, 2, size=(16, 300))
    for architecture in ("rnn", "second_order"):
        net = to_torch(dfa, architecture, dtype=dtype)
        with torch.no_grad():
            assert np.array_equal(net(_one_hot(indices, 2)).float().numpy(), dfa.reference(indices))
    for architecture in ("lstm", "gru"):
        with pytest.raises(LsrlError, match="float32 rounding"):
            to_torch(dfa, architecture, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.int64, torch.complex64, "float32", np.float32, None])
def test_bad_dtypes_are_refused(dtype):
    with pytest.raises(LsrlError, match="dtype") as error:
        to_torch(tomita(3), "rnn", dtype=dtype)
    one_line(error)


# ---- raw tracebacks: regexes, constructors, generators ------------------------------------------------------


@pytest.mark.parametrize("pattern", ["a(", "(", ")", "a)", "*", "|", "a|", "|a", "a||b", "+a", "?", "a&", "&",
                                     "((a)", "(|a)", "ab(", "a\n", "^a"])
def test_invalid_regexes_name_the_regex(pattern):
    """automata-lib's InvalidRegexError and LexerError escaped as raw tracebacks."""
    with pytest.raises(AutomatonError, match="from_regex: cannot parse the pattern") as error:
        from_regex(pattern, "ab")
    assert f"cannot parse the pattern {pattern!r}:" in one_line(error)


@pytest.mark.parametrize("pattern, alphabet", [(5, "ab"), (None, "ab"), (["a"], "ab"), ("a", None), ("a", 5),
                                               ("a", []), ("a", ["ab"]), ("a", [["a"]])])
def test_bad_regex_arguments(pattern, alphabet):
    with pytest.raises(AutomatonError) as error:
        from_regex(pattern, alphabet)
    one_line(error)


def test_random_dfa_takes_an_integer_seed():
    """random_dfa(3, 2, 0) was an AttributeError; a seed now means numpy.random.default_rng(seed)."""
    assert np.array_equal(random_dfa(3, 2, 0).table, random_dfa(3, 2, np.random.default_rng(0)).table)
    assert np.array_equal(random_dfa(3, 2, np.int64(7)).table, random_dfa(3, 2, np.random.default_rng(7)).table)


@pytest.mark.parametrize("args, message", [
    ((3, 2, None), "rng must be a numpy.random.Generator"), ((3, 2, "x"), "rng must be"), ((3, 2, -1), "seed"),
    ((3, 2, 1.5), "rng must be"), ((0, 2, 0), "n_states must be at least 1"), ((3, 0, 0), "n_symbols must be"),
    ((-1, 2, 0), "n_states"), ((2.5, 2, 0), "n_states must be an integer"), (("3", 2, 0), "n_states"),
    ((True, 2, 0), "n_states"), ((3, 2.0, 0), "n_symbols"), ((float("nan"), 2, 0), "n_states"),
    ((10 ** 9, 2, 0), "above the limit of 200,000"), ((3, 10 ** 9, 0), "above the limit"),
])
def test_bad_random_dfa_arguments(args, message):
    with deadline(30), pytest.raises(AutomatonError, match=message) as error:
        random_dfa(*args)
    one_line(error)


TABLE = dict(states=[0, 1], alphabet="ab", transitions={0: {"a": 1, "b": 0}, 1: {"a": 0, "b": 1}}, start=0,
             accepting=[1])


@pytest.mark.parametrize("field, value, message", [
    ("states", 3, "states must be an iterable"), ("states", None, "states must be"),
    ("states", [[0], [1]], "must be hashable"), ("alphabet", 5, "the alphabet must be"),
    ("alphabet", None, "the alphabet"), ("start", [0], "start state"), ("accepting", 1, "accepting states"),
    ("accepting", None, "accepting states"), ("accepting", [[1]], "must be hashable"),
    ("transitions", {0: {"a": {}, "b": 0}, 1: {"a": 0, "b": 1}}, "state 0 on symbol 'a' goes to"),
    ("transitions", {0: {"a": [[1]], "b": 0}, 1: {"a": 0, "b": 1}}, "state 0 on symbol 'a' goes to"),
])
def test_bad_dfa_arguments(field, value, message):
    with pytest.raises(AutomatonError, match=message) as error:
        DFA(**{**TABLE, field: value})
    one_line(error)


def test_bad_mealy_arguments():
    ok = dict(states=[0], alphabet="a", outputs=["x"], transitions={0: {"a": (0, "x")}}, start=0)
    for field, value in [("outputs", None), ("outputs", 3), ("outputs", [["x"]]), ("start", {}),
                         ("transitions", {0: {"a": (0, ["x"])}})]:
        with pytest.raises(AutomatonError) as error:
            Mealy(**{**ok, field: value})
        one_line(error)


def test_tomita_of_an_unhashable_number():
    with pytest.raises(AutomatonError, match="seven Tomita grammars"):
        tomita([])


@pytest.mark.parametrize("indices, message", [
    ([[0.5]], "whole numbers"), ([[np.nan]], "whole numbers"), ([[np.inf]], "whole numbers"), ("ab", "integers"),
    (None, "integers"), ([[10 ** 30]], "must lie in 0..1"), ([["a"]], "integers"), ([[2]], "must lie in 0..1"),
])
def test_symbol_indices_that_are_no_indices(indices, message):
    """0.5 was truncated to 0 silently; NaN, strings and huge ints were raw tracebacks."""
    dfa = DFA(**TABLE)
    for run in (dfa.states_after, dfa.reference, _residue_mealy().reference):
        with pytest.raises(AutomatonError, match=message) as error:
            run(indices)
        one_line(error)


def test_whole_float_and_bool_indices_keep_working():
    dfa = DFA(**TABLE)
    assert np.array_equal(dfa.states_after([[1.0, 0.0]]), dfa.states_after([[1, 0]]))
    assert np.array_equal(dfa.states_after(np.array([[True, False]])), dfa.states_after([[1, 0]]))


def test_start_states_of_a_continued_run():
    dfa = DFA(**TABLE)
    assert np.array_equal(dfa.states_after([[0]], start=1), [[0]])
    for start, message in [(5, "must lie in 0..1"), (0.5, "whole numbers"), ([0, 1, 0], "one per string")]:
        with pytest.raises(AutomatonError, match=message):
            dfa.states_after([[0]], start=start)


def test_words_that_are_no_words():
    dfa = DFA(**TABLE)
    for word in (5, None, ["a", ["b"]]):
        with pytest.raises(AutomatonError) as error:
            dfa.accepts(word)
        one_line(error)
    with pytest.raises(AutomatonError, match="word 5"):
        _residue_mealy().translate(5)
    with pytest.raises(AutomatonError, match="words"):
        dfa.indices(5)


def test_equivalence_with_something_else():
    dfa = DFA(**TABLE)
    with pytest.raises(AutomatonError, match="can compare with a DFA or a Mealy machine"):
        dfa.equivalent(5)
    mealy = Mealy([0, 1], "ab", ["x"], {0: {"a": (1, "x"), "b": (0, "x")}, 1: {"a": (0, "x"), "b": (1, "x")}}, 0)
    assert not dfa.equivalent(mealy) and not mealy.equivalent(dfa)  # was an AttributeError for a shared alphabet


# ---- the networks: numpy input, T = 0, states -----------------------------------------------------------------


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_networks_take_numpy_and_lists_and_the_empty_word(architecture):
    """numpy input was an AttributeError, T = 0 a RuntimeError from inside torch."""
    dfa = tomita(3)
    net = to_torch(dfa, architecture)
    x = np.eye(2)[[[0, 1, 1, 0], [1, 1, 0, 0]]]
    with torch.no_grad():
        expected = net(torch.as_tensor(x, dtype=torch.float32))
        assert torch.equal(net(x), expected) and torch.equal(net(x.tolist()), expected)
        assert torch.equal(net(x.astype(np.int64)), expected)
        empty = net(np.zeros((3, 0, 2)))
        assert empty.shape == (3, 0, 1) and empty.dtype == torch.float32
        hidden, state = net.hidden(torch.zeros(2, 0, 2))
        assert hidden.shape == (2, 0, net.h0.shape[0])
        initial = net.initial_state(2)
        same = all(torch.equal(a, b) for a, b in zip(state, initial)) if isinstance(state, tuple) \
            else torch.equal(state, initial)
        assert same  # the state after the empty word is the state before it
        # a run continued from the empty word's state is the run from the start
        assert torch.equal(net.read(net.hidden(x, net.hidden(np.zeros((2, 0, 2)))[1])[0]), expected)
    assert np.array_equal(network_outputs(net, np.zeros((2, 0), int)), np.zeros((2, 0, 1)))
    assert count_errors(net, dfa, np.zeros((2, 0), int)) == (0, 0)


@pytest.mark.parametrize("x, error, message", [
    ("x", SequenceError, "one-hot symbols"), (None, SequenceError, "one-hot symbols"),
    (torch.eye(2), DimensionError, r"\(B, T, 2\)"), (np.ones((1, 2, 3)), DimensionError, r"\(B, T, 2\)"),
    (torch.eye(2, dtype=torch.complex64)[None], SequenceError, "complex"),
    (np.full((1, 1, 2), np.nan), SequenceError, "not a one-hot symbol"),
    (np.array([[[0.5, 0.5]]]), SequenceError, "not a one-hot symbol"),
])
def test_bad_network_inputs(x, error, message):
    net = to_torch(tomita(3), "lstm")
    with pytest.raises(error, match=message) as raised:
        net(x)
    one_line(raised)


def test_bad_states_and_batch_sizes():
    net = to_torch(tomita(3), "lstm")
    x = _one_hot(np.zeros((2, 3), int), 2)
    for state in (torch.zeros(3), net.initial_state(1), (torch.zeros(1, 2, 10),), "state"):
        with pytest.raises(DimensionError, match="state must be what hidden"):
            net.hidden(x, state)
    for batch in (-1, 1.5, True):
        with pytest.raises(DimensionError, match="batch size"):
            net.initial_state(batch)


@pytest.mark.parametrize("kwargs, message", [
    (dict(machine=5), "machine must be"), (dict(machine=None), "machine must be"),
    (dict(architecture="RNN"), "architecture must be one of"), (dict(architecture=None), "architecture"),
    (dict(architecture="rnn", gain=3.0), "a gain applies"),
])
def test_bad_to_torch_requests(kwargs, message):
    arguments = {"machine": tomita(2), "architecture": "gru", **kwargs}
    with pytest.raises(LsrlError, match=message) as error:
        to_torch(arguments.pop("machine"), arguments.pop("architecture"), **arguments)
    one_line(error)


@pytest.mark.parametrize("args, message", [
    (("gru", 0, 1), "in_degree must be at least 1"), (("gru", -1, 1), "in_degree"), (("gru", 2.5, 1), "integer"),
    (("gru", float("nan"), 1), "integer"), (("gru", 2, -1), "readout_size"), (("rnn", 2, 2), "'lstm' and 'gru'"),
])
def test_bad_gain_bound_arguments(args, message):
    with deadline(30), pytest.raises(LsrlError, match=message):
        gain_bound(*args)
    with pytest.raises(LsrlError, match=message):
        certified_deviation(args[0], 5.0, *args[1:])


def test_certified_deviation_certifies_no_broken_gain():
    for gain in (float("nan"), float("inf"), 0.0, -1.0):
        assert certified_deviation("gru", gain, 2, 2) is None  # inf was "certified"
    with pytest.raises(LsrlError, match="gain must be a real number"):
        certified_deviation("gru", "5", 2, 2)


# ---- the checking and learning tools ------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    (dict(strings=-1), "strings must be at least 0"), (dict(strings=2.5), "strings must be an integer"),
    (dict(max_length=0), "max_length must be at least 1"), (dict(batch=0), "batch must be at least 1"),
    (dict(seed=-1), "seed must be at least 0"), (dict(first=-2), "first"),
    (dict(architectures=["x"]), "architectures must be among"), (dict(machines=[5]), "machine 0 must be"),
])
def test_bad_check_arguments(kwargs, message):
    arguments = {"machines": [tomita(1)], "architectures": ["rnn"], "strings": 3, "max_length": 4, **kwargs}
    with pytest.raises(LsrlError, match=message) as error:
        check(arguments.pop("machines"), arguments.pop("architectures"), **arguments)
    one_line(error)


def test_bad_counting_arguments():
    dfa = tomita(1)
    net = to_torch(dfa, "rnn")
    cases = [
        (lambda: network_outputs(net, np.zeros((1, 3), int), chunk=0), "chunk must be at least 1"),
        (lambda: network_outputs(net, np.full((1, 3), 5)), "must lie in 0..1"),
        (lambda: network_outputs(net, np.zeros((1, 3))), "array of integers"),
        (lambda: count_errors(net, dfa, np.zeros((2, 3), int), batch=0), "batch must be at least 1"),
        (lambda: count_errors(net, dfa, np.zeros((2, 3), int), np.array([1, 4])), "lengths must be 2 integers"),
        (lambda: count_errors(net, dfa, np.zeros((2, 3), int), np.array([1])), "lengths"),
        (lambda: random_strings(np.random.default_rng(0), 2, -1, 3), "count must be at least 0"),
        (lambda: random_strings(np.random.default_rng(0), 2, 1, 0), "max_length must be at least 1"),
    ]
    for call, message in cases:
        with pytest.raises(LsrlError, match=message) as error:
            call()
        one_line(error)


@pytest.mark.parametrize("kwargs, message", [
    (dict(words=0), "words must be in 1.."), (dict(words=-1), "words"), (dict(length=0), "length must be"),
    (dict(length=-1), "length"), (dict(seed=-1), "seed"), (dict(outputs=5), "outputs must be an iterable"),
    (dict(alphabet="abc"), "the alphabet must name the network's 2 input symbols"),
    (dict(alphabet="aa"), "once each"), (dict(network=5), "network must be an automaton network"),
])
def test_bad_learn_back_arguments(kwargs, message):
    """words=0 or length=0 made the equivalence oracle vacuous: L* returned its first guess, silently; an
    alphabet naming a symbol twice made L* run forever."""
    arguments = {"network": to_torch(from_regex("(a|b)*b", "ab"), "rnn"), "alphabet": "ab", **kwargs}
    with deadline(30), pytest.raises(LsrlError, match=message) as error:
        learn_back(arguments.pop("network"), arguments.pop("alphabet"), **arguments)
    one_line(error)


def test_export_onnx_refuses_what_only_looks_like_a_network(tmp_path):
    class Impostor(torch.nn.Module):
        architecture = "rnn"

    with pytest.raises(LsrlError, match="^export_onnx: needs an automaton network .*got Impostor$") as error:
        export_onnx(Impostor(), tmp_path / "x.onnx")
    one_line(error)
    assert not (tmp_path / "x.onnx").exists()


def test_export_onnx_to_impossible_paths(tmp_path):
    net = to_torch(tomita(2), "rnn")
    for path, message in [(tmp_path / "missing" / "x.onnx", "does not exist"), (tmp_path, "is a folder"),
                          (None, "expected a path"), ("", "expected a path")]:
        with pytest.raises(LsrlError, match=message) as error:
            export_onnx(net, path)
        one_line(error)
    assert export_onnx(net, tmp_path / "ok.onnx").is_file()


@pytest.mark.parametrize("strings, max_length", [(10 ** 9, 1), (1, 10 ** 9), (10 ** 5, 10 ** 4), (10 ** 60, 10 ** 60)])
def test_check_refuses_more_symbols_than_its_cap_before_any_work(strings, max_length):
    from lsrl.automata.checking import MAX_CHECK_SYMBOLS

    drawn = []

    def machines():  # a machine drawn would mean work started
        drawn.append(1)
        yield random_dfa(3, 2, 0)

    assert strings * max_length > MAX_CHECK_SYMBOLS
    with deadline(5), pytest.raises(AutomatonError, match=r"^check: strings x max_length .*at most") as caught:
        check(machines(), ["rnn"], strings=strings, max_length=max_length)
    assert "\n" not in str(caught.value) and drawn == []


def test_check_at_its_cap_is_accepted():
    from lsrl.automata.checking import MAX_CHECK_SYMBOLS

    # the cap itself is allowed: no machines, so nothing is drawn
    assert check([], ["rnn"], strings=MAX_CHECK_SYMBOLS // 1000, max_length=1000)[0].strings == 0


@pytest.mark.slow
@pytest.mark.parametrize("strings, batch", [(10 ** 6, 1), (1001, 1), (10 ** 7, 9999)])
def test_check_refuses_more_batches_than_its_cap_before_any_work(strings, batch):
    from lsrl.automata.checking import MAX_CHECK_BATCHES

    assert -(-strings // batch) > MAX_CHECK_BATCHES
    with deadline(5), pytest.raises(AutomatonError, match=r"^check: strings / batch must be at most") as caught:
        check(iter([]), ["rnn"], strings=strings, max_length=1, batch=batch)
    assert "\n" not in str(caught.value)
    # the largest number of batches allowed runs, and finds no error
    result = check([tomita(1)], ["rnn"], strings=MAX_CHECK_BATCHES, max_length=2, batch=1)[0]
    assert result.errors == 0 and result.strings == MAX_CHECK_BATCHES


@pytest.mark.parametrize("architectures", [np.array(3.0), 3, None])
def test_check_refuses_architectures_that_cannot_be_listed(architectures):
    with pytest.raises(LsrlError, match="^check: architectures must be names among"):
        check([tomita(1)], architectures, strings=1, max_length=1)


# ---- calls that do not fit a signature: a CallError naming the argument and what is accepted ---------------


ENTRY_POINTS = ("DFA", "Mealy", "certified_deviation", "check", "export_onnx", "from_regex", "gain_bound",
                "learn_back", "network_size", "random_dfa", "to_torch", "tomita")


def test_the_entry_points_below_are_every_public_function_and_machine_of_lsrl_automata():
    import lsrl.automata as automata

    built_by_lsrl = {"AutomatonNetwork", "NetworkSize"}  # results, not entry points
    public = {name for name in automata.__all__ if callable(getattr(automata, name))} - built_by_lsrl
    assert public == set(ENTRY_POINTS)


def _entry_points(folder):
    """Each public function and class of lsrl.automata with a call that fits it (checked to run below)."""
    import lsrl.automata as automata

    dfa = tomita(1)
    network = automata.to_torch(dfa, "rnn")
    return {
        "export_onnx": (automata.export_onnx, (network, folder / "dfa.onnx"), {}),
        "to_torch": (automata.to_torch, (dfa, "rnn"), {}),
        "network_size": (automata.network_size, (dfa, "rnn"), {}),
        "gain_bound": (automata.gain_bound, ("lstm", 2, 2), {}),
        "certified_deviation": (automata.certified_deviation, ("lstm", 10.0, 2, 2), {}),
        "from_regex": (automata.from_regex, ("ab*", "ab"), {}),
        "random_dfa": (automata.random_dfa, (3, 2, 0), {}),
        "tomita": (automata.tomita, (2,), {}),
        "check": (automata.check, ([dfa], ["rnn"]), {"strings": 2, "max_length": 2}),
        "learn_back": (automata.learn_back, (network, [0, 1]), {}),
        "DFA": (DFA, ([0], ["a"], {0: {"a": 0}}, 0, [0]), {}),
        "Mealy": (automata.Mealy, ([0], ["a"], ["x"], {0: {"a": (0, "x")}}, 0), {}),
    }


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_an_unknown_keyword_to_a_public_entry_point_names_it_and_the_accepted_ones(name, tmp_path):
    import inspect

    function, args, kwargs = _entry_points(tmp_path)[name]
    function(*args, **kwargs)  # the call fits: only the unknown keyword below is wrong
    accepted = [parameter for parameter in inspect.signature(function).parameters if parameter != "self"]
    with pytest.raises(LsrlError) as caught:
        function(*args, **kwargs, unknown_keyword=1)
    message = one_line(caught)
    assert isinstance(caught.value, TypeError)  # as Python's own error for such a call is
    assert message.startswith(f"{name}: unknown keyword argument 'unknown_keyword'; it accepts "), message
    assert all(parameter in message for parameter in accepted), message


def test_a_missing_or_surplus_argument_to_to_torch_is_one_line_with_the_signature():
    import lsrl.automata as automata

    with pytest.raises(LsrlError) as missing:
        automata.to_torch(tomita(1))
    assert one_line(missing).startswith("to_torch: missing a required argument: 'architecture'; it is called as "
                                        "to_torch(machine, architecture, *, gain=None")
    with pytest.raises(LsrlError) as surplus:
        automata.to_torch(tomita(1), "rnn", 3.0)  # gain is keyword-only
    assert one_line(surplus).startswith("to_torch: too many positional arguments")
