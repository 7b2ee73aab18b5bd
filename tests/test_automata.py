"""lsrl.automata: machines, the four networks (float32, against the automaton), the gain bound at its
boundary, ONNX in onnxruntime, the L* round trip, and bad tables.

The full-size check (100 random DFAs x 10,000 strings of lengths up to 1,000, and lengths
up to 10^6) is ``lsrl.automata.check``, run by ``benchmarks/finite_automata.py``; here a smaller sample:
the seven Tomita grammars and 20 random minimal DFAs (up to 50 states, alphabets up to 5), per DFA
64 strings of length 300 and 256 of length 12, plus 16 strings of length 1,000 for the Tomita grammars
and the three largest DFAs; every prefix is checked; and ``check`` itself on the Tomita grammars and
two random DFAs with 100 strings of lengths up to 1,000 each.
"""

import itertools
import re

import numpy as np
import pytest
import torch

import lsrl
from lsrl.automata import (
    ARCHITECTURES, DFA, Mealy, certified_deviation, check, export_onnx, from_regex, gain_bound, learn_back,
    random_dfa, to_torch, tomita,
)
from lsrl.automata.checking import count_errors, random_strings
from lsrl.automata.units import transition_units
from lsrl.errors import AutomatonError, DimensionError, LsrlError, SequenceError

# ---- the machines ---------------------------------------------------------------------------------------


def _runs(word):
    return [(symbol, len(list(group))) for symbol, group in itertools.groupby(word)]


def _tomita_3(word):
    runs = _runs(word)
    return not any(a == ("1", n) and b[0] == "0" and n % 2 and b[1] % 2
                   for (a, b) in zip(runs, runs[1:]) for n in [a[1]])


TOMITA = {
    1: lambda w: re.fullmatch("1*", w) is not None,
    2: lambda w: re.fullmatch("(10)*", w) is not None,
    3: _tomita_3,
    4: lambda w: "000" not in w,
    5: lambda w: w.count("0") % 2 == 0 and w.count("1") % 2 == 0,
    6: lambda w: (w.count("0") - w.count("1")) % 3 == 0,
    7: lambda w: re.fullmatch("0*1*0*1*", w) is not None,
}
TOMITA_STATES = {1: 2, 2: 3, 3: 5, 4: 4, 5: 4, 6: 3, 7: 5}


@pytest.mark.parametrize("number", range(1, 8))
def test_tomita_grammars_match_their_definitions(number):
    dfa = tomita(number)
    assert len(dfa.states) == TOMITA_STATES[number]
    for length in range(11):
        for word in map("".join, itertools.product("01", repeat=length)):
            assert dfa.accepts(word) == TOMITA[number](word), word


def test_from_regex_and_tables_agree_and_minimise():
    ends_in_one = DFA(["a", "b", "c"], "01", {"a": {"0": "a", "1": "b"}, "b": {"0": "c", "1": "b"},
                                              "c": {"0": "a", "1": "b"}}, "a", {"b"})
    regex = from_regex("(0|1)*1", "01")
    assert len(regex.states) == 2 and len(ends_in_one.minimal().states) == 2
    assert regex.equivalent(ends_in_one) and not regex.equivalent(from_regex("(0|1)*0", "01"))
    words = ["".join(w) for w in itertools.product("01", repeat=6)]
    assert [regex.accepts(w) for w in words] == [w.endswith("1") for w in words]


def test_random_dfas_are_minimal_with_the_requested_size():
    rng = np.random.default_rng(3)
    for n, k in [(1, 2), (7, 3), (30, 5)]:
        dfa = random_dfa(n, k, rng)
        assert len(dfa.states) == n and dfa.table.shape == (n, k)
        assert len(dfa.minimal().states) == n and dfa.minimal().equivalent(dfa)


def _residue_machine():
    """Binary prefix value mod 3, output after each bit."""
    return Mealy(range(3), "01", ("r0", "r1", "r2"),
                 {p: {a: ((2 * p + int(a)) % 3, f"r{(2 * p + int(a)) % 3}") for a in "01"} for p in range(3)}, 0)


def test_mealy_machine_translates():
    machine = _residue_machine()
    for word in ["", "1", "110", "1001", "111111"]:
        assert machine.translate(word) == [f"r{int(word[:t + 1], 2) % 3}" for t in range(len(word))]


# ---- the networks, float32, against the automaton ----------------------------------------------------------


def _sample_dfas():
    rng = np.random.default_rng(14)
    sizes = [(50, 5), (50, 2), (40, 3)] + [(int(rng.integers(2, 51)), int(rng.integers(2, 6))) for _ in range(17)]
    return [tomita(i) for i in range(1, 8)] + [random_dfa(n, k, rng) for n, k in sizes]


SAMPLE = _sample_dfas()


def _one_hot(indices, k):
    return torch.nn.functional.one_hot(torch.as_tensor(indices), k).float()


def _strings(rng, k, batch, length):
    return rng.integers(0, k, size=(batch, length))


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.slow
def test_networks_run_tomita_and_random_dfas_without_error(architecture):
    rng = np.random.default_rng(1)
    for dfa in SAMPLE:
        k = len(dfa.alphabet)
        net = to_torch(dfa, architecture)
        assert net.h0.dtype == torch.float32 and net(_one_hot(np.zeros((1, 1), int), k)).shape == (1, 1, 1)
        long = [(16, 1000)] if dfa in SAMPLE[:10] else []
        for batch, length in [(64, 300), (256, 12)] + long:
            indices = _strings(rng, k, batch, length)
            with torch.no_grad():
                out = net(_one_hot(indices, k)).numpy()
            assert np.array_equal(out, dfa.reference(indices)), (architecture, dfa)
        assert bool(net.initial_output()[0]) == bool(dfa.accepting[dfa.start])


def test_cores_are_stock_torch_layers():
    dfa = tomita(4)
    assert isinstance(to_torch(dfa, "rnn").core, torch.nn.RNN) and to_torch(dfa, "rnn").core.nonlinearity == "relu"
    assert type(to_torch(dfa, "lstm").core) is torch.nn.LSTM and type(to_torch(dfa, "gru").core) is torch.nn.GRU
    from lsrl.llrnn.cell import LLRNN

    assert isinstance(to_torch(dfa, "second_order").core, LLRNN)
    rnn = to_torch(dfa, "rnn").core
    weights = torch.cat([rnn.weight_hh_l0.flatten(), rnn.weight_ih_l0.flatten(), rnn.bias_ih_l0, rnn.bias_hh_l0])
    assert torch.equal(weights, weights.round())  # integer weights
    assert rnn.hidden_size <= len(dfa.states) * len(dfa.alphabet) + 1


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_mealy_networks_output_one_hot_symbols(architecture):
    machine, rng = _residue_machine(), np.random.default_rng(2)
    indices = _strings(rng, 2, 64, 500)
    with torch.no_grad():
        out = to_torch(machine, architecture)(_one_hot(indices, 2)).numpy()
    assert out.shape == (64, 500, 3) and np.array_equal(out, machine.reference(indices))
    word = "".join("01"[i] for i in indices[0, :40])
    assert [machine.outputs[i] for i in out[0, :40].argmax(-1)] == [f"r{int(word[:t + 1], 2) % 3}" for t in range(40)]


@pytest.mark.slow
def test_check_at_a_reduced_size():
    """``check`` at a tenth of a percent of the full size: zero errors, and every prefix counted."""
    rng = np.random.default_rng(21)
    dfas = [tomita(i) for i in range(1, 8)] + [random_dfa(50, 5, rng), random_dfa(int(rng.integers(2, 51)), 3, rng)]
    results = check(dfas, strings=100, max_length=1000, seed=4)
    lengths = [random_strings(np.random.default_rng([4, i]), len(d.alphabet), 100, 1000)[1] for i, d in enumerate(dfas)]
    assert [r.architecture for r in results] == list(ARCHITECTURES)
    for r in results:
        assert (r.machines, r.strings, r.errors) == (len(dfas), 100 * len(dfas), 0)
        assert r.checked == sum(int(n.sum()) + 1 for n in lengths)  # every prefix and each empty word


def test_check_in_slices_sees_the_strings_of_the_whole():
    """``first`` numbers a slice's machines as in the whole list, so its strings (and the prefixes
    counted) are those the whole sweep gives them."""
    dfas = [tomita(i) for i in range(1, 5)]
    whole = check(dfas, ["rnn"], strings=30, max_length=300, seed=5)[0]
    pieces = [check(dfas[:1], ["rnn"], strings=30, max_length=300, seed=5)[0],
              check(dfas[1:], ["rnn"], strings=30, max_length=300, seed=5, first=1)[0]]
    unnumbered = check(dfas[1:], ["rnn"], strings=30, max_length=300, seed=5)[0]
    assert whole.checked == sum(piece.checked for piece in pieces) != pieces[0].checked + unnumbered.checked


@pytest.mark.slow
def test_count_errors_buckets_by_length_and_sees_errors():
    """Bucketed by length, ``count_errors`` counts exactly the wrong prefixes that a plain loop over the
    strings counts; a network at 0.6 times its gain bound makes errors, and they are counted."""
    dfa, rng = random_dfa(20, 3, np.random.default_rng(7)), np.random.default_rng(8)
    indices, lengths = random_strings(rng, 3, 40, 400)
    assert lengths.min() >= 1 and lengths.max() <= 400 and len(set(lengths.tolist())) > 20
    with pytest.warns(RuntimeWarning, match="below the certified bound"):  # as it says: it errs below it
        weak = to_torch(dfa, "gru", gain=0.6 * to_torch(dfa, "gru").gain)
    errors, checked = count_errors(weak, dfa, indices, lengths, batch=7, chunk=64)
    expected = 0
    for row, n in zip(indices, lengths):
        with torch.no_grad():
            out = weak(_one_hot(row[None, :n], 3)).numpy()
        expected += int((out != dfa.reference(row[None, :n])).any(-1).sum())
    assert checked == lengths.sum() and errors == expected > 0


# ---- the gain bound of the saturated LSTM and GRU -------------------------------------------------------------


def _units_deviation(hidden, dfa, indices, architecture):
    """max |unit read as 0/1 - ideal unit| over a run (LSTM h / tanh(1), GRU (h + 1) / 2); the ideal unit
    that is on at step t is (state before t, symbol t), from the automaton's own run."""
    states = dfa.states_after(indices)
    previous = np.concatenate([np.full((len(indices), 1), dfa.start), states[:, :-1]], axis=1)
    hidden = hidden.double()
    ideal = torch.nn.functional.one_hot(torch.as_tensor(previous * len(dfa.alphabet) + indices), hidden.shape[-1])
    read = hidden / np.tanh(1.0) if architecture == "lstm" else (hidden + 1) / 2
    return float((read - ideal).abs().max())


BOUNDARY_DFAS = [tomita(4), tomita(5), random_dfa(20, 3, np.random.default_rng(7))]


@pytest.mark.parametrize("architecture", ["lstm", "gru"])
@pytest.mark.slow
def test_gain_at_the_bound_works_and_a_clearly_smaller_one_fails(architecture):
    rng = np.random.default_rng(5)
    for dfa in BOUNDARY_DFAS:
        units, k = transition_units(dfa), len(dfa.alphabet)
        bound = gain_bound(architecture, units.in_degree, units.readout_size)
        net = to_torch(dfa, architecture)
        assert net.gain == bound
        # the bound is the smallest certified gain: a little less is not certified
        assert certified_deviation(architecture, bound * 0.999, units.in_degree, units.readout_size) is None
        epsilon = certified_deviation(architecture, bound, units.in_degree, units.readout_size)
        indices = _strings(rng, k, 32, 5000)
        with torch.no_grad():
            hidden = net.hidden(_one_hot(indices, k))[0]
            assert np.array_equal(net.read(hidden).numpy(), dfa.reference(indices))
        assert _units_deviation(hidden, dfa, indices, architecture) <= epsilon  # the theorem's invariant, measured
        with pytest.warns(RuntimeWarning, match="below the certified bound"):
            weak = to_torch(dfa, architecture, gain=0.6 * bound)
        with torch.no_grad():
            assert not np.array_equal(weak(_one_hot(indices[:, :500], k)).numpy(), dfa.reference(indices[:, :500]))


def test_bound_grows_with_the_width_and_every_larger_gain_is_certified():
    assert gain_bound("lstm", 2, 2) < gain_bound("lstm", 10, 10) < gain_bound("lstm", 10, 100)
    bound = gain_bound("gru", 5, 20)
    assert all(certified_deviation("gru", bound * f, 5, 20) is not None for f in (1.0, 1.5, 4.0, 30.0))
    with pytest.raises(LsrlError, match="lstm"):
        gain_bound("rnn", 2, 2)


# ---- ONNX -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["rnn", "lstm", "gru"])
def test_onnx_export_runs_in_onnxruntime_like_torch(architecture, tmp_path):
    import onnx
    import onnxruntime

    rng = np.random.default_rng(9)
    for machine in [tomita(3), SAMPLE[7], _residue_machine()]:
        net, k = to_torch(machine, architecture), len(machine.alphabet)
        path = export_onnx(net, tmp_path / f"{architecture}.onnx")
        recurrences = [node for node in onnx.load(str(path)).graph.node if node.op_type in ("RNN", "LSTM", "GRU")]
        assert [node.op_type for node in recurrences] == [architecture.upper()]
        activations = [a for a in recurrences[0].attribute if a.name == "activations"]
        assert (activations[0].strings == [b"Relu"]) if architecture == "rnn" else not activations
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        indices = _strings(rng, k, 16, 1000)
        ours = session.run(None, {"x": _one_hot(indices, k).numpy()})[0]
        with torch.no_grad():
            assert np.array_equal(ours, net(_one_hot(indices, k)).numpy())
        assert np.array_equal(ours, machine.reference(indices))


def test_onnx_refuses_the_second_order_network(tmp_path):
    with pytest.raises(LsrlError, match="architecture"):
        export_onnx(to_torch(tomita(1), "second_order"), tmp_path / "x.onnx")


# ---- the round trip: L* learns the automaton back from the network ---------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_lstar_learns_back_an_equivalent_dfa(architecture):
    for dfa in [tomita(3), tomita(6), random_dfa(6, 3, np.random.default_rng(11))]:
        learned = learn_back(to_torch(dfa, architecture), dfa.alphabet)
        assert len(learned.states) == len(dfa.states) and learned.equivalent(dfa)


def _random_mealy(n, k, outputs, rng):
    """A random Mealy machine: a random minimal DFA's (reachable) table with random transition outputs."""
    table = random_dfa(n, k, rng).table
    names = rng.integers(0, len(outputs), size=table.shape)
    return Mealy(range(n), range(k), outputs, {p: {a: (int(table[p, a]), outputs[names[p, a]]) for a in range(k)}
                                               for p in range(n)}, 0)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.slow
def test_lstar_learns_back_an_equivalent_mealy_machine(architecture):
    rng = np.random.default_rng(12)
    for machine in [_residue_machine(), _random_mealy(8, 3, ("x", "y", "z"), rng)]:
        network = to_torch(machine, architecture)
        learned = learn_back(network, machine.alphabet, outputs=machine.outputs)
        assert isinstance(learned, Mealy) and learned.equivalent(machine)
        assert len(learned.states) <= len(machine.states)
    assert len(learn_back(to_torch(_residue_machine(), architecture), "01", outputs=("r0", "r1", "r2")).states) == 3


def test_mealy_equivalence_is_decided_exactly():
    machine = _residue_machine()
    renamed = Mealy(["a", "b", "c"], "10", ("r2", "r1", "r0"),
                    {"abc"[p]: {a: ("abc"[(2 * p + int(a)) % 3], f"r{(2 * p + int(a)) % 3}") for a in "01"}
                     for p in range(3)}, "a")
    changed = Mealy(range(3), "01", ("r0", "r1", "r2"),
                    {p: {a: ((2 * p + int(a)) % 3, "r1" if (p, a) == (2, "1") else f"r{(2 * p + int(a)) % 3}")
                         for a in "01"} for p in range(3)}, 0)
    assert machine.equivalent(renamed) and not machine.equivalent(changed)
    assert machine.translate("1011") != changed.translate("1011")
    with pytest.raises(LsrlError, match="outputs="):
        learn_back(to_torch(machine, "rnn"), "01")


def test_equivalence_is_decided_exactly():
    dfa = tomita(5)
    flipped = DFA(dfa.states, dfa.alphabet, dfa.transitions, dfa.states[dfa.start],
                  [s for i, s in enumerate(dfa.states) if not dfa.accepting[i]])
    assert dfa.equivalent(dfa.minimal()) and not dfa.equivalent(flipped)


# ---- bad input ----------------------------------------------------------------------------------------------


def _parity(**changes):
    table = {"even": {"0": "even", "1": "odd"}, "odd": {"0": "odd", "1": "even"}}
    table.update(changes)
    return table


@pytest.mark.parametrize("transitions, message", [
    (_parity(odd={"0": {"odd", "even"}, "1": "even"}), r"non-deterministic.*'odd'.*'0'"),
    (_parity(odd={"0": "odd", "2": "even", "1": "even"}), r"state 'odd': symbol '2' is not in the alphabet"),
    (_parity(odd={"0": "odd"}), r"missing transition: state 'odd' has none on symbol '1'"),
    (_parity(odd={"0": "odd", "1": "void"}), r"'odd' on symbol '1' goes to 'void'"),
    (_parity(limbo={"0": "even", "1": "even"}), r"state 'limbo'"),
])
def test_bad_tables_name_the_state_and_symbol(transitions, message):
    with pytest.raises(AutomatonError, match=message):
        DFA(["even", "odd"], "01", transitions, "even", {"even"})


def test_unreachable_states_and_foreign_symbols_are_rejected():
    table = {**_parity(), "island": {"0": "even", "1": "island"}}
    with pytest.raises(AutomatonError, match="unreachable state 'island'"):
        DFA(["even", "odd", "island"], "01", table, "even", {"even"})
    dfa = DFA(["even", "odd"], "01", _parity(), "even", {"even"})
    with pytest.raises(AutomatonError, match="symbol '2'"):
        dfa.accepts("0120")
    with pytest.raises(AutomatonError, match=r"symbol\(s\) \['2'\]"):
        from_regex("(01)*2", "01")
    with pytest.raises(AutomatonError, match="'nope'"):
        DFA(["even", "odd"], "01", _parity(), "nope", {"even"})
    with pytest.raises(AutomatonError, match="outputs 'r9'"):
        Mealy([0], "0", ["r0"], {0: {"0": (0, "r9")}}, 0)
    with pytest.raises(AutomatonError, match=r"non-deterministic.*state 0 on symbol '0'"):
        Mealy([0, 1], "0", ["r0"], {0: {"0": [(0, "r0"), (1, "r0")]}, 1: {"0": (0, "r0")}}, 0)


def test_bad_network_requests():
    with pytest.raises(LsrlError, match="architecture"):
        to_torch(tomita(1), "transformer")
    with pytest.raises(LsrlError, match="gain"):
        to_torch(tomita(1), "rnn", gain=3.0)
    with pytest.raises(DimensionError, match=r"\(B, T, 2\)"):
        to_torch(tomita(1), "lstm")(torch.zeros(1, 4, 3))
    two_hot = _one_hot(np.zeros((2, 5), int), 2)
    two_hot[1, 3, 1] = 1
    with pytest.raises(SequenceError, match=r"input \[1, 3\] is \[1.0, 1.0\], not a one-hot symbol"):
        to_torch(tomita(1), "rnn")(two_hot)


def test_reachable_after_import_lsrl():
    assert lsrl.automata.to_torch is to_torch and issubclass(lsrl.AutomatonError, lsrl.LsrlError)
