"""Traces and interventions: ``prog.trace``, ``prog(xs, patch=...)``, ``model.trace``, ``net.run_with_cache``."""

import random
from fractions import Fraction

import numpy as np
import pytest
import torch

import lsrl
from lsrl.model.compiled import CompiledProgram
from tests.conftest import as_fractions, library_program
from tests.test_random_programs import _generated, _inputs_for


def _cumulative_program():
    """x -> double = 2x -> total = running sum of double -> out = total + x (names fixed for patching)."""
    x = lsrl.Input(1, name="x")
    double = lsrl.Linear(x, [[2]], name="double")
    total = lsrl.LinState(double, A=[[1]], B=[[1]], name="total")
    out = lsrl.Linear(lsrl.Concat([total, x]), [[1, 1]], name="out")
    return lsrl.ForEach(out)


def _small_lookup():
    """Listing 2 for keys of one token, and a prompt: query 1, then 1 -> 2 and 0 -> 1."""
    return lsrl.programs.discrete_approximator(1), lsrl.programs.discrete_prompt({(1,): (2,), (0,): (1,)}, query=(1,))


BITS = np.array([[1], [0], [1], [1], [0], [0], [1]])
OTHER_BITS = np.array([[0], [0], [1], [0], [1], [1], [1]])


# ---- prog.trace ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["more_ones", "discrete", "continuous"])
def test_trace_of_every_node_is_that_node_run_as_a_program(kind):
    prog, xs = {"more_ones": (library_program("more_ones"), BITS), "discrete": _small_lookup(),
                "continuous": (library_program("continuous"),
                               lsrl.programs.continuous_prompt(lambda v: v[::-1], 2, 2, 2)[:12])}[kind]
    trace = prog.trace(xs, exact=True)
    assert len(trace) == len(prog.nodes)
    for node in prog.nodes:
        assert as_fractions(trace[prog.names[node]]) == as_fractions(lsrl.ForEach(node)(xs, exact=True)), prog.names[node]
    assert as_fractions(trace[prog.names[prog.output]]) == as_fractions(prog(xs, exact=True))


@pytest.mark.parametrize("seed", range(6))
def test_trace_of_random_programs_matches_calls_and_prefixes(seed):
    generated = _generated(seed)
    prog = generated.program
    xs = np.array(_inputs_for(seed, generated.d_in)[0], dtype=object)
    trace = prog.trace(xs, exact=True)
    assert as_fractions(trace[prog.names[prog.output]]) == as_fractions(prog(xs, exact=True))
    prefix = prog.trace(xs[: max(1, len(xs) // 2)], exact=True)
    for key, values in prefix.items():
        assert as_fractions(values) == as_fractions(trace[key][: len(values)]), key
    floats = prog.trace(xs.astype(np.float64), check_bounds=False)
    for key, values in floats.items():  # float trace: the same values to 1e-9 relative
        exact = np.asarray(trace[key], dtype=np.float64)
        assert values.dtype == np.float64 and values.shape == exact.shape
        np.testing.assert_allclose(values, exact, rtol=1e-9, atol=1e-9)


def test_trace_of_a_batch_and_of_duplicate_names():
    x = lsrl.Input(1, name="x")
    a, b = lsrl.Linear(x, [[2]], name="twice"), lsrl.Linear(x, [[3]], name="twice")
    prog = lsrl.ForEach(lsrl.Concat([a, b], name="both"))
    trace = prog.trace(np.stack([BITS, OTHER_BITS]))
    assert trace["twice"].shape == (2, 7, 1) and trace["twice#2"].shape == (2, 7, 1)
    assert np.array_equal(trace["twice"][:, :, 0], 2 * np.stack([BITS, OTHER_BITS])[:, :, 0])
    assert np.array_equal(trace["twice#2"][:, :, 0], 3 * np.stack([BITS, OTHER_BITS])[:, :, 0])


# ---- interventions ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["more_ones", "discrete"])
def test_patching_every_node_with_its_own_values_changes_nothing(kind):
    prog, xs = (library_program(kind), BITS) if kind == "more_ones" else _small_lookup()
    trace = prog.trace(xs, exact=True)
    expected = as_fractions(prog(xs, exact=True))
    for name, values in trace.items():
        assert as_fractions(prog(xs, exact=True, patch={name: values})) == expected, name


def test_interchange_on_fig1_counter_matches_hand_computation():
    prog = lsrl.programs.more_ones_than_zeros()
    other = prog.trace(OTHER_BITS, exact=True)["ones_minus_zeros"]
    patched = prog(BITS, exact=True, patch={"ones_minus_zeros": other})
    lead = np.cumsum(2 * OTHER_BITS[:, 0] - 1)  # the other input's ones minus zeros
    assert as_fractions(patched)[:] == [[Fraction(int(v > 0))] for v in lead]
    assert as_fractions(patched) != as_fractions(prog(BITS, exact=True))  # the patch did something


def test_patch_before_a_linstate_flows_through_its_updates():
    prog = _cumulative_program()
    xs = np.array([[1], [2], [-1], [3]])
    replacement = np.array([[5], [0], [Fraction(1, 3)], [-2]], dtype=object)
    patched = as_fractions(prog(xs, exact=True, patch={"double": replacement}))
    running = 0
    for t in range(4):  # out_t = sum of the patched doubles so far + x_t
        running += Fraction(replacement[t, 0])
        assert patched[t] == [running + xs[t, 0]]
    # a patched LinState: out = patch + x at every step
    patched_state = as_fractions(prog(xs, exact=True, patch={prog.nodes[2]: replacement}))
    assert patched_state == [[Fraction(replacement[t, 0]) + xs[t, 0]] for t in range(4)]


def test_patch_shapes_batches_and_the_input():
    prog = _cumulative_program()
    batch = np.stack([BITS, OTHER_BITS])
    one = np.ones((7, 1))
    patched = prog(batch, patch={"double": one})  # (T, dim) patches every sequence
    assert np.array_equal(patched[:, :, 0], np.arange(1, 8)[None] + batch[:, :, 0])
    assert np.array_equal(prog(BITS, patch={"x": OTHER_BITS}), prog(OTHER_BITS))
    assert set(prog.trace(BITS, patch={"double": one})["total"][:, 0]) == set(range(1, 8))
    with pytest.raises(lsrl.LsrlError, match="cannot patch 'nothing': no such node"):
        prog(BITS, patch={"nothing": one})
    with pytest.raises(lsrl.LsrlError, match=r"Linear 'double'.*\(7, 1\).*got \(6, 1\)"):
        prog(BITS, patch={"double": one[:6]})
    with pytest.raises(lsrl.LsrlError, match="no such node"):
        prog(BITS, patch={lsrl.Input(1, name="stranger"): one})


# ---- model.trace --------------------------------------------------------------------------------


def _layer_by_formula(layer, x):
    """A layer's output from its weights, in Fractions: an independent reference for the trace."""
    x = [[Fraction(str(v)) for v in row] for row in x]
    if layer.kind == "ReLU":
        return [[max(v, Fraction(0)) for v in row] for row in x]
    if layer.kind == "Multi":
        half = len(x[0]) // 2
        return [[row[i] * row[half + i] for i in range(half)] for row in x]
    A, b = layer.A.to_fractions(), layer.b.to_fractions()
    if layer.kind == "Linear":
        return [[sum(a * v for a, v in zip(A_row, row)) + c for A_row, c in zip(A, b)] for row in x]
    B, s = layer.B.to_fractions(), layer.init_state.to_fractions()
    out = []
    for row in x:
        s = [sum(a * v for a, v in zip(A_row, s)) + sum(w * v for w, v in zip(B_row, row)) + c
             for A_row, B_row, c in zip(A, B, b)]
        out.append(s)
    return out


@pytest.mark.parametrize("kind", ["more_ones", "discrete"])
def test_model_trace_follows_each_layers_weights_exactly(kind):
    prog, xs = (library_program(kind), BITS) if kind == "more_ones" else _small_lookup()
    model = lsrl.compile(prog)
    trace = model.trace(xs, exact=True)
    assert [t.shape for t in trace] == [(len(xs), layer.dim) for layer in model.layers]
    previous = xs
    for layer, values in zip(model.layers, trace):
        assert as_fractions(values) == _layer_by_formula(layer, previous), layer.name
        previous = values
    assert as_fractions(trace[-1]) == as_fractions(model(xs, exact=True))


def test_trace_of_a_model_without_labels():
    """A model without unit labels (a file from before labels) traces; only patching by node needs labels."""
    model = lsrl.compile(library_program("more_ones"))
    unlabelled = CompiledProgram(model.input, model.layers, model.backend)
    assert unlabelled.labels is None
    assert [as_fractions(t) for t in unlabelled.trace(BITS, exact=True)] == [
        as_fractions(t) for t in model.trace(BITS, exact=True)]
    with pytest.raises(lsrl.LsrlError, match="no unit labels"):
        unlabelled.trace(BITS, patch={"count": [[0]] * len(BITS)})


def test_model_float_trace_equals_prefix_models_bit_for_bit():
    model = lsrl.compile(library_program("discrete"), backend="float")
    xs = np.stack([lsrl.programs.discrete_prompt({(1, 2, 0): (2, 0, 1), (0, 0, 0): (1, 1, 1)}, query=q)
                   for q in ((1, 2, 0), (0, 0, 0))])
    trace = model.trace(xs, check_bounds=False)
    for k in range(len(model.layers)):
        prefix = CompiledProgram(model.input, model.layers[: k + 1], "float")
        assert np.array_equal(trace[k], prefix(xs, check_bounds=False)), k
    with pytest.raises(lsrl.LsrlError, match="backend='exact'"):
        model.trace(xs, exact=True)


# ---- torch caches -------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["linear_rnn", "rnn", "gated_rnn", "gru", "lstm", "diagonal_linear_rnn", "hawk"])
def test_run_with_cache_shapes_and_last_layer(arch):
    prog = library_program("more_ones") if arch in ("linear_rnn", "rnn") else library_program("discrete")
    xs = BITS if arch in ("linear_rnn", "rnn") else lsrl.programs.discrete_prompt({(1, 2, 0): (2, 0, 1)})
    net = lsrl.compile(prog).to_torch(arch)
    batch = torch.as_tensor(np.stack([xs, xs[::-1].copy()]), dtype=torch.float64)
    outputs, cache = net.run_with_cache(batch)
    with torch.no_grad():
        assert torch.equal(outputs, net(batch))
    assert cache and all(v.shape[:2] == (2, len(xs)) and v.dim() == 3 for v in cache.values())
    assert torch.equal(list(cache.values())[-1], outputs)
    single_outputs, single = net.run_with_cache(xs)  # (T, d): no batch axis
    assert single_outputs.shape == (len(xs), prog.output.dim) and list(single) == list(cache)


@pytest.mark.slow
def test_cell_caches_recompute_gates_consistently():
    model = lsrl.compile(library_program("discrete"))
    xs = lsrl.programs.discrete_prompt({(1, 2, 0): (2, 0, 1)})
    for arch in ("gru", "lstm"):
        net = model.to_torch(arch)
        _, cache = net.run_with_cache(xs)
        layers = [key for key in cache if key.count(".") == 1 and key.startswith("rnn.l")]
        assert layers == [f"rnn.l{k}" for k in range(net.rnn.num_layers)]
        for k, key in enumerate(layers):
            h = cache[key]
            if arch == "lstm":  # h = o * ReLU(c) (the ReLU cells of App. D)
                torch.testing.assert_close(cache[f"{key}.o"] * torch.relu(cache[f"{key}.c"]), h, rtol=0, atol=1e-12)
            else:  # h_t = (1 - z) n + z h_{t-1}
                previous = torch.cat([net.rnn.layer_tensors(k)["h0"][None], h[:-1]])
                torch.testing.assert_close((1 - cache[f"{key}.z"]) * cache[f"{key}.n"] + cache[f"{key}.z"] * previous,
                                           h, rtol=0, atol=1e-9)


@pytest.mark.parametrize("arch", ["rnn", "gru", "lstm"])
def test_automaton_network_cache(arch):
    net = lsrl.automata.to_torch(lsrl.automata.tomita(4), arch)
    symbols = torch.tensor([[random.Random(s).randint(0, 1) for s in range(9)]])
    x = torch.eye(2)[symbols]
    outputs, cache = net.run_with_cache(x)
    with torch.no_grad():
        hidden, _ = net.hidden(x)
    assert cache["core"].shape == (1, 9, hidden.shape[-1])
    torch.testing.assert_close(cache["core"], hidden, rtol=0, atol=1e-6)
    assert torch.equal((cache["readout"] > 0).to(outputs.dtype), outputs)
    if arch == "lstm":  # stock LSTM: h = o * tanh(c)
        torch.testing.assert_close(cache["core.o"] * torch.tanh(cache["core.c"]), cache["core"], rtol=0, atol=1e-6)


def test_torch_patch_of_the_state_layer_follows_the_program_patch():
    """In the Eq. (11) RNN of Fig. 1, block 0's torch.nn.RNN holds [s+; s-] of the counter: patching it
    with its values on another input changes the outputs exactly as patching the counter in the program."""
    prog = lsrl.programs.more_ones_than_zeros()
    net = lsrl.compile(prog).to_torch("rnn")
    _, other = net.run_with_cache(OTHER_BITS)
    outputs, cache = net.run_with_cache(BITS, patch={"blocks.0.rnn": other["blocks.0.rnn"]})
    expected = prog(BITS, patch={"ones_minus_zeros": prog.trace(OTHER_BITS)["ones_minus_zeros"]})
    assert np.array_equal(outputs.numpy(), expected) and not np.array_equal(expected, prog(BITS))
    assert torch.equal(cache["blocks.0.rnn"], other["blocks.0.rnn"])
    own_outputs, own = net.run_with_cache(BITS)
    assert torch.equal(net.run_with_cache(BITS, patch={"blocks.0.rnn": own["blocks.0.rnn"]})[0], own_outputs)
    with pytest.raises(lsrl.LsrlError, match="cannot patch 'blocks.9'"):
        net.run_with_cache(BITS, patch={"blocks.9": own["blocks.0.rnn"]})
    with pytest.raises(lsrl.LsrlError, match=r"patch for 'blocks.0.rnn' has shape \(1, 6, 2\)"):
        net.run_with_cache(BITS, patch={"blocks.0.rnn": own["blocks.0.rnn"][:6]})


@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_torch_patch_of_a_whole_cell_layer_gives_the_other_inputs_outputs(arch):
    net = lsrl.compile(_small_lookup()[0]).to_torch(arch)
    xs = _small_lookup()[1]
    other = lsrl.programs.discrete_prompt({(1,): (3,), (0,): (2,)}, query=(0,))
    other_outputs, other_cache = net.run_with_cache(other)
    patched, _ = net.run_with_cache(xs, patch={"rnn.l0": other_cache["rnn.l0"]})  # later layers read only l0
    assert torch.equal(patched, other_outputs) and not torch.equal(patched, net.run_with_cache(xs)[0])
