"""ReLUState (footnote 3: a state update that depends on the state through one ReLU layer): the
interpreter against plain Python, its compiler rules, the compiled model, the targets, save/load,
value bounds, bad input, and the library programs of ``lsrl.programs.nonlinear``."""

import random
from fractions import Fraction

import numpy as np
import pytest
import torch

import lsrl
from conftest import as_fractions
from lsrl.kinds import Kind
from lsrl.programs import conditional_reset, parity, squaring
from test_compiler_stages import apply_case, apply_fusion, kinds_of_users, rules

LINEAR_TARGETS = ("linear_rnn", "gated_linear_rnn", "diagonal_linear_rnn", "hawk", "griffin")
NONLINEAR_TARGETS = ("rnn", "gated_rnn", "gru", "lstm")
LENGTH = 240


# ---- plain-Python references ----------------------------------------------------------------------


def reset_reference(increments, threshold=5):
    total, out = 0, []
    for x in increments:
        total += x
        total = 0 if total > threshold else total
        out.append(total)
    return out


def parity_reference(bits):
    p, out = 0, []
    for x in bits:
        p ^= x
        out.append(p)
    return out


def squaring_reference(squares):
    s, out = 0, []
    for x in squares:
        s = (s + 1) ** 2 if x else 0
        out.append(s)
    return out


def relustate_reference(A, B, b, h0, xs):
    """``h_t = max(0, A h_{t-1} + B x_t + b)`` in Fractions."""
    h, out = list(h0), []
    for x in xs:
        h = [max(Fraction(0), sum(a * v for a, v in zip(row_a, h)) + sum(c * u for c, u in zip(row_b, x)) + bi)
             for row_a, row_b, bi in zip(A, B, b)]
        out.append(h)
    return out


def bounded_runs(rng, length, longest):
    """0/1 inputs with at most ``longest`` 1s in a row (squaring stays in its declared values)."""
    out, run = [], 0
    for _ in range(length):
        bit = rng.randint(0, 1) if run < longest else 0
        run = run + 1 if bit else 0
        out.append(bit)
    return out


def library_cases():
    rng = random.Random(3)
    return [
        ("reset", conditional_reset(), [rng.randint(0, 4) for _ in range(LENGTH)], reset_reference),
        ("reset_large_steps", conditional_reset(), [rng.randint(0, 40) for _ in range(LENGTH)], reset_reference),
        ("parity", parity(), [rng.randint(0, 1) for _ in range(LENGTH)], parity_reference),
        ("squaring", squaring(), bounded_runs(rng, LENGTH, 3), squaring_reference),
        ("squaring_orbit", squaring([0, 1, 4, 25, 676]), bounded_runs(rng, LENGTH, 4), squaring_reference),
    ]


CASES = library_cases()
IDS = [case[0] for case in CASES]


def column(values):
    return np.array(values, dtype=np.int64)[:, None]


def integers(outputs):
    return [int(Fraction(str(v))) if Fraction(str(v)).denominator == 1 else Fraction(str(v)) for v in outputs[:, 0]]


# ---- the node and the interpreter -------------------------------------------------------------------


def test_interpreter_follows_the_definition_on_a_random_relustate():
    rng = random.Random(0)
    A = [[Fraction(rng.randint(-4, 4), 4) for _ in range(3)] for _ in range(3)]
    B = [[Fraction(rng.randint(-3, 3), 2) for _ in range(2)] for _ in range(3)]
    b, h0 = [Fraction(1, 3), -1, 0], [2, 0, Fraction(1, 2)]
    xs = [[Fraction(rng.randint(-6, 6), 3) for _ in range(2)] for _ in range(30)]
    state = lsrl.ReLUState(lsrl.Input(2), A, B, b, init_state=h0)
    got = as_fractions(lsrl.ForEach(state)(np.array(xs, dtype=object), exact=True))
    assert got == relustate_reference(A, B, b, h0, xs)
    assert min(v for row in got for v in row) == 0  # the ReLU did act


@pytest.mark.parametrize("name,program,xs,reference", CASES, ids=IDS)
def test_library_program_runs_exactly_in_the_interpreter(name, program, xs, reference):
    expected = reference(xs)
    assert integers(program(column(xs), exact=True)) == expected
    assert np.array_equal(program(column(xs))[:, 0], np.array(expected, dtype=np.float64))  # float64: integers


def test_the_library_programs_leave_their_range_only_where_documented():
    assert 0 in squaring_reference([1, 0]) and max(squaring_reference([1, 1, 1])) == 25
    with pytest.raises(lsrl.LsrlError, match="include 0"):
        squaring([1, 2, 3])
    with pytest.raises(lsrl.LsrlError, match="non-negative integer"):
        conditional_reset(-1)


# ---- compiled model and targets -----------------------------------------------------------------------


@pytest.mark.parametrize("name,program,xs,reference", CASES, ids=IDS)
def test_library_program_compiles_exactly_to_every_nonlinear_target(name, program, xs, reference):
    model = lsrl.compile(program)
    assert [layer.kind for layer in model.layers] == ["ReLUState", "Linear"]
    expected = reference(xs)
    assert integers(model(column(xs), exact=True)) == expected
    assert np.array_equal(model(column(xs))[:, 0], np.array(expected, dtype=np.float64))
    batch = torch.tensor(column(xs)[None], dtype=torch.float64)
    for arch in NONLINEAR_TARGETS:
        out = model.to_torch(arch)(batch).detach().numpy()[0, :, 0]
        # integers far below 2^53, every weight an integer or a dyadic-free exact slope: exact in float64
        assert np.max(np.abs(out - np.array(expected, dtype=np.float64))) <= 1e-9 * max(expected), arch


@pytest.mark.parametrize("arch", LINEAR_TARGETS)
def test_linear_targets_refuse_a_relustate_and_name_it(arch):
    model = lsrl.compile(parity())
    with pytest.raises(lsrl.LsrlError, match=rf"'{arch}' updates its state linearly, but ReLUState 'parity_features'"):
        model.to_torch(arch)


def test_rnn_layer_is_the_elman_step_itself():
    model = lsrl.compile(parity())
    (block,) = model.to_torch("rnn").blocks
    state = model.layers[0]
    assert block.rnn.hidden_size == state.dim  # no sign split
    assert np.array_equal(block.rnn.weight_hh_l0.detach().numpy(), state.A.to_numpy())
    assert np.array_equal(block.rnn.weight_ih_l0.detach().numpy(), state.B.to_numpy())


def test_gru_and_lstm_run_a_relustate_as_their_relu_units():
    model = lsrl.compile(parity())
    gru, lstm = model.to_torch("gru").rnn, model.to_torch("lstm").rnn
    hidden = model.layers[0].dim
    assert gru.hidden_sizes[0] == lstm.hidden_sizes[0] == hidden  # the state layer: one unit per state component
    z_bias = gru.bias_ih_l0[hidden:2 * hidden] + gru.bias_hh_l0[hidden:2 * hidden]
    assert not torch.any(z_bias) and not torch.any(gru.weight_hh_l0[hidden:2 * hidden])  # z = 0: h = n
    forget = lstm.bias_ih_l0[hidden:2 * hidden] + lstm.bias_hh_l0[hidden:2 * hidden]
    assert not torch.any(forget) and not torch.any(lstm.weight_hh_l0[hidden:2 * hidden])  # f = 0


def test_a_relustate_beside_linstates_and_gates_compiles_exactly():
    x = lsrl.Input(1, name="bits", bounds=(0, 1), integer=True)
    parity_state = lsrl.ReLUState(x, [[1, -2], [1, -2]], [[1], [1]], b=[0, -1], name="parity_state")
    bit = parity_state[0] - 2 * parity_state[1]
    count = lsrl.LinState(x, [[1]], [[1]], name="count")
    gated = lsrl.Multi(lsrl.Concat([count, bit]))  # ones so far, where the parity is odd
    program = lsrl.ForEach(lsrl.Concat([bit, count, gated, lsrl.ReLUState(x, [[0]], [[2]])]))
    xs = [random.Random(5).randint(0, 1) for _ in range(LENGTH)]
    model = lsrl.compile(program)
    reference = as_fractions(program(column(xs), exact=True))
    assert as_fractions(model(column(xs), exact=True)) == reference
    reference = np.array(reference, dtype=object)
    odd = parity_reference(xs)
    assert [int(v) for v in reference[:, 0]] == odd
    assert [int(v) for v in reference[:, 2]] == [p * sum(xs[:t + 1]) for t, p in enumerate(odd)]
    expected = reference.astype(float)[None]
    for arch in ("gated_rnn", "gru", "lstm"):
        out = model.to_torch(arch)(torch.tensor(column(xs)[None], dtype=torch.float64)).detach().numpy()
        assert np.max(np.abs(out - expected)) <= 1e-9 * LENGTH, arch


def test_onnx_export_runs_a_relustate_in_onnxruntime(tmp_path):
    import onnxruntime

    from lsrl.targets.onnx_export import export_onnx

    model = lsrl.compile(parity())
    xs = [random.Random(7).randint(0, 1) for _ in range(LENGTH)]
    expected = np.array(parity_reference(xs), dtype=np.float32)
    for arch in NONLINEAR_TARGETS:
        path = export_onnx(model.to_torch(arch), tmp_path / f"{arch}.onnx", arch=arch)
        (out,) = onnxruntime.InferenceSession(str(path)).run(None, {"x": column(xs)[None].astype(np.float32)})
        assert np.array_equal(out[0, :, 0], expected), arch  # 0/1 values: exact in float32


def test_save_and_load_keep_a_relustate(tmp_path):
    model = lsrl.compile(conditional_reset(3))
    loaded = lsrl.load(model.save(tmp_path / "reset"))
    assert [layer.kind for layer in loaded.layers] == ["ReLUState", "Linear"]
    assert loaded.layers[0].A.to_fractions() == model.layers[0].A.to_fractions()
    xs = [random.Random(2).randint(0, 3) for _ in range(LENGTH)]
    assert integers(loaded(column(xs), exact=True)) == reset_reference(xs, 3)
    assert loaded.state_size == 3


def test_the_diagonal_pass_keeps_a_relustate_as_it_is():
    x = lsrl.Input(1, name="bits", bounds=(0, 1), integer=True)
    counter = lsrl.LinState(x, [[1, 1], [0, 1]], [[0], [1]])  # a Jordan block: diagonalised into a cascade
    program = lsrl.ForEach(lsrl.Concat([lsrl.ReLUState(counter, [[Fraction(1, 2)]], [[1, -1]]), counter]))
    model = lsrl.compile(program)
    diagonal = model.diagonal()
    assert "ReLUState" in [layer.kind for layer in diagonal.layers]
    xs = column([random.Random(1).randint(0, 1) for _ in range(40)])
    assert as_fractions(diagonal(xs, exact=True)) == as_fractions(program(xs, exact=True))


# ---- value bounds ----------------------------------------------------------------------------------------


def test_bounds_of_a_contracting_relustate():
    x = lsrl.Input(1, bounds=(0, 1))
    state = lsrl.ReLUState(x, [[Fraction(1, 2)]], [[1]], init_state=[3])
    assert lsrl.value_bounds(state) == ([0], [Fraction(5, 2)])  # h_1 <= 3/2 + 1; then h <= 2


def test_bounds_of_a_relustate_that_is_always_zero():
    x = lsrl.Input(1, bounds=(0, 1))
    state = lsrl.ReLUState(x, [[Fraction(-1, 2)]], [[1]], b=[-2], init_state=[3])
    assert lsrl.value_bounds(state) == ([0], [0])


def test_bounds_of_a_growing_relustate_are_unbounded_unless_the_length_is_declared():
    x = lsrl.Input(1, bounds=(0, 1))
    state = lsrl.ReLUState(x, [[1]], [[1]])
    assert lsrl.value_bounds(state).unbounded == [0]
    assert lsrl.value_bounds(state, max_length=10) == ([0], [10])


def test_bounds_hold_on_random_runs():
    rng = random.Random(4)
    x = lsrl.Input(2, bounds=(-1, 1))
    A = [[Fraction(rng.randint(-2, 2), 4) for _ in range(3)] for _ in range(3)]
    B = [[rng.randint(-2, 2) for _ in range(2)] for _ in range(3)]
    state = lsrl.ReLUState(x, A, B, b=[1, -1, 0], init_state=[0, 1, 2])
    low, high = lsrl.value_bounds(state)
    xs = np.array([[Fraction(rng.randint(-4, 4), 4) for _ in range(2)] for _ in range(60)], dtype=object)
    values = as_fractions(lsrl.ForEach(state)(xs, exact=True))
    assert all(low[i] <= v <= high[i] for row in values for i, v in enumerate(row))
    assert all(lo == 0 for lo in low)


# ---- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,message", [
    (dict(A=[[1, 0]], B=[[1]]), r"ReLUState 'bad': A must be square, got shape \(1, 2\)"),
    (dict(A=[[1]], B=[[1, 2]]), r"ReLUState 'bad': B: expected shape \(1, 1\), got \(1, 2\)"),
    (dict(A=[[1]], B=[[1]], b=[1, 2]), r"ReLUState 'bad': b"),
    (dict(A=[[1]], B=[[1]], init_state=[-1]), r"ReLUState 'bad': init_state must be non-negative .* -1"),
])
def test_bad_relustates_are_refused_naming_the_node(kwargs, message):
    with pytest.raises(lsrl.DimensionError, match=message):
        lsrl.ReLUState(lsrl.Input(1), name="bad", **kwargs)


def test_a_relustate_reading_a_rewired_input_of_another_width_is_refused():
    x = lsrl.Input(1)
    state = lsrl.ReLUState(x, [[1]], [[1]], name="state")
    state.replace_input(x, lsrl.Input(2))
    with pytest.raises(lsrl.DimensionError, match="ReLUState 'state': B has 1 columns"):
        lsrl.ForEach(state)


# ---- the compiler rules for ReLUStates (one small graph each, as in test_compiler_stages) -----------------


def test_case_6r_reads_the_other_users_through_a_sign_split_relustate():
    x = lsrl.Input(2, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.ReLUState(x, [[1]], [[1, 0]]), lsrl.Linear(x, [[0, 5]])]))
    graph, v = apply_case(program, "v", "case_6r")
    assert kinds_of_users(graph, v) == [Kind.RELUSTATE, Kind.RELUSTATE]
    dummy = next(u for u in graph.distinct_users(v) if u.A.is_zero())
    assert dummy.dim == 2  # component 1 (the one the Linear reads) as ReLU(v1), ReLU(-v1)
    assert rules.choose_case(graph, v, graph.distinct_users(v)).__name__ == "case_2r"


def test_case_6r_carries_a_relu_output_without_a_split():
    x = lsrl.Input(2)
    v = lsrl.ReLU(x, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.ReLUState(v, [[1]], [[1, 0]]), lsrl.Linear(v, [[0, 5]])]))
    graph, op = apply_case(program, "v", "case_6r")
    dummy = next(u for u in graph.distinct_users(op) if u.A.is_zero())
    assert dummy.dim == 1


def test_case_6_reads_relustate_users_through_the_copying_linstate():
    x = lsrl.Input(1, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.LinState(x, [[1]], [[1]]), lsrl.ReLUState(x, [[-1]], [[1]], b=[1])]))
    graph, v = apply_case(program, "v", "case_6")
    assert kinds_of_users(graph, v) == [Kind.LINSTATE, Kind.LINSTATE]


def test_fuse_linear_relustate():
    x = lsrl.Input(2)
    program = lsrl.ForEach(lsrl.ReLUState(lsrl.Linear(x, [[1, -1]], [1], name="lin"), [[-1]], [[2]], b=[1]))
    graph = apply_fusion(program, "lin", "fuse_linear_relustate")
    assert [op.kind for op in graph.ops()] == [Kind.INPUT, Kind.RELUSTATE]


def test_fuse_relustate_relu():
    x = lsrl.Input(1)
    program = lsrl.ForEach(lsrl.ReLU(lsrl.ReLUState(x, [[-1]], [[1]], name="state")))
    graph = apply_fusion(program, "state", "fuse_relustate_relu")
    assert [op.kind for op in graph.ops()] == [Kind.INPUT, Kind.RELUSTATE]


def test_the_noise_experiment_runs_a_relustate_as_a_relustate():
    from lsrl.experiments import noise

    model = lsrl.compile(conditional_reset())
    xs = column([random.Random(6).randint(0, 4) for _ in range(LENGTH)])[None]
    forced = noise.forced_outputs(model, xs, 0.0, np.random.default_rng(0))
    assert np.array_equal(forced[0, :, 0], np.array(reset_reference(xs[0, :, 0].tolist()), dtype=np.float64))


def test_the_float_runner_carries_a_relustate_across_chunks():
    """Sequences longer than the runner's chunk of lanes (512): the state passes from chunk to chunk."""
    model = lsrl.compile(conditional_reset())
    rng = random.Random(8)
    batch = [[rng.randint(0, 3) for _ in range(1500)] for _ in range(3)]
    out = model(np.array(batch)[..., None])
    for row, xs in zip(out, batch):
        assert np.array_equal(row[:, 0], np.array(reset_reference(xs), dtype=np.float64))
