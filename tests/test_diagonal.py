"""``model.diagonal()`` and the ``"diagonal_linear_rnn"`` target.

The diagonal form is checked independently of ``lsrl.compiler.diagonal``: every off-diagonal entry
of a state matrix must lie in a 2x2 block with complex eigenvalues or in a nilpotent block (a delay
line), found here with networkx and numpy. Outputs are compared with the interpreter: exactly on the
exact backend, to 1e-9 (relative, floored at 1) in float64, on sequences of T = 1000 steps, longer
than anything used while building.
"""

from __future__ import annotations

import random
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
import torch

import lsrl
from lsrl.targets.blocks import to_blocks
from lsrl.programs import continuous_approximator, discrete_approximator
from test_random_programs import N_SEEDS, _as_object_array, _compiled_exact, _compiled_float, _inputs_for

LONG_T = 1000
DIAGONAL_TARGETS = ("diagonal_linear_rnn", "hawk", "griffin")
FLOAT_TOLERANCE = 1e-9


def _state_block_kinds(A: np.ndarray) -> list:
    graph = nx.Graph()
    graph.add_nodes_from(range(A.shape[0]))
    graph.add_edges_from((i, j) for i, j in zip(*np.nonzero(A)) if i != j)
    kinds = []
    for component in nx.connected_components(graph):
        block = A[np.ix_(sorted(component), sorted(component))]
        if len(component) == 1:
            kinds.append("1x1")
        elif len(component) == 2 and np.all(np.abs(np.linalg.eigvals(block).imag) > 0):
            kinds.append("complex pair")
        elif not np.any(np.diag(block)) and not np.any(np.linalg.matrix_power(block, len(component))):
            kinds.append("delay line")
        else:
            kinds.append(f"dense {len(component)}x{len(component)}")
    return kinds


def _assert_diagonal_form(model):
    for layer in model.layers:
        if layer.kind == "LinState":
            kinds = _state_block_kinds(layer.A.to_numpy())
            assert all(not k.startswith("dense") for k in kinds), f"{layer.name}: {kinds}"


def _relative_error(got, want):
    return float(np.max(np.abs(np.asarray(got) - want) / np.maximum(1.0, np.abs(want))))


def _exact_inputs(d_in, steps, seed):
    rng = random.Random(seed)
    return _as_object_array([[Fraction(rng.randint(-6, 6), rng.randint(1, 3)) for _ in range(d_in)] for _ in range(steps)])


# ---- small programs with a known structure ---------------------------------------------------------

def _state_program(A, init=None, b=None):
    x = lsrl.Input(1, name="x")
    d = len(A)
    state = lsrl.LinState(x, A, [[1]] * d, b=b, init_state=init, name="s")
    return lsrl.ForEach(lsrl.Linear(state, [[1] * d, list(range(1, d + 1))]))


STRUCTURES = [
    # (label, A, init, b, LinState layers after diagonal(), block kinds of the first one)
    ("counter_of_counter", [[1, 0], [1, 1]], [1, 2], [0, Fraction(1, 3)], 2, ["1x1"] * 3),
    ("chain_of_three_halves", [[Fraction(1, 2), 1, 0], [0, Fraction(1, 2), 1], [0, 0, Fraction(1, 2)]], [1, -1, 2],
     [1, 0, 0], 3, ["1x1"] * 4),
    ("distinct_eigenvalues", [[1, 0], [1, Fraction(1, 2)]], None, None, 1, ["1x1"] * 2),
    ("shift_register", [[0, 0, 0], [1, 0, 0], [0, 1, 0]], [1, 2, 3], [1, 0, 0], 1, ["delay line"]),
    ("three_cycle", [[0, 0, 1], [1, 0, 0], [0, 1, 0]], [0, 0, 1], None, 1, ["1x1", "complex pair"]),
    ("chain_and_delay", [[1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]], [1, 0, 0, 1], None, 2,
     ["1x1", "delay line", "1x1", "1x1"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("label,A,init,b,levels,kinds", STRUCTURES, ids=[s[0] for s in STRUCTURES])
def test_structured_state_is_diagonalised_exactly(label, A, init, b, levels, kinds):
    prog = _state_program(A, init, b)
    model = lsrl.compile(prog)
    diagonal = model.diagonal()
    states = [layer for layer in diagonal.layers if layer.kind == "LinState"]
    assert len(states) == levels
    assert sorted(_state_block_kinds(states[0].A.to_numpy())) == sorted(kinds)
    _assert_diagonal_form(diagonal)
    xs = _exact_inputs(1, 12, 0)
    assert np.array_equal(diagonal(xs, exact=True), prog(xs, exact=True))
    xf = np.random.default_rng(1).normal(size=(2, LONG_T, 1))
    want = prog(xf)
    for arch in DIAGONAL_TARGETS:
        with torch.no_grad():
            got = model.to_torch(arch)(torch.as_tensor(xf)).numpy()
        assert _relative_error(got, want) <= FLOAT_TOLERANCE, arch


@pytest.mark.slow
def test_irrational_eigenvalues_name_the_state():
    model = lsrl.compile(_state_program([[1, 1], [1, 0]]))  # Fibonacci: eigenvalues (1 +- sqrt 5) / 2
    with pytest.raises(lsrl.LsrlError, match=r"LinState 's'.*irrational real eigenvalues.*x\*\*2 - x - 1"):
        model.diagonal()
    five_cycle = [[1 if i == (j + 1) % 5 else 0 for j in range(5)] for i in range(5)]
    with pytest.raises(lsrl.LsrlError, match=r"LinState 's'.*degree 4.*backend='float'"):
        lsrl.compile(_state_program(five_cycle)).diagonal()
    prog = _state_program(five_cycle, init=[1, 0, 0, 0, 0])  # in float64: two rotations and a 1x1 block
    diagonal = lsrl.compile(prog, backend="float").diagonal()
    assert sorted(_state_block_kinds(diagonal.layers[0].A.to_numpy())) == ["1x1", "complex pair", "complex pair"]
    xs = np.random.default_rng(0).normal(size=(LONG_T, 1))
    assert _relative_error(diagonal(xs), prog(xs)) <= FLOAT_TOLERANCE
    exact_model = lsrl.compile(prog)  # the float64 targets fall back to a float64 diagonal form
    for arch in DIAGONAL_TARGETS:
        with torch.no_grad():
            got = exact_model.to_torch(arch)(torch.as_tensor(xs[None])).numpy()[0]
        assert _relative_error(got, prog(xs)) <= FLOAT_TOLERANCE, arch


def test_rotation_counter_is_a_pair_in_float():
    x = lsrl.Input(1, name="x")
    prog = lsrl.ForEach(lsrl.f_modulo_counter(x, 5, method="rotation"))
    model = lsrl.compile(prog, backend="float")
    assert "pair block" in model.diagonal().summary()
    xs = np.zeros((LONG_T, 1))
    np.testing.assert_array_equal(model.diagonal()(xs)[:, 0], np.arange(LONG_T) % 5)
    with torch.no_grad():
        got = model.to_torch("hawk")(torch.as_tensor(xs[None])).numpy()[0]
    assert _relative_error(got, prog(xs)) <= FLOAT_TOLERANCE


def test_float_backend_diagonalises_too():
    prog = _state_program([[Fraction(1, 2), 1, 0], [0, Fraction(1, 2), 1], [0, 0, Fraction(1, 2)]], [1, -1, 2])
    diagonal = lsrl.compile(prog, backend="float").diagonal()
    assert diagonal.backend == "float"
    _assert_diagonal_form(diagonal)
    xf = np.random.default_rng(2).normal(size=(LONG_T, 1))
    assert _relative_error(diagonal(xf), prog(xf)) <= FLOAT_TOLERANCE


# ---- Listings 1 and 2 ------------------------------------------------------------------------------

LISTINGS = [("listing1", lambda: continuous_approximator(2, 2)), ("listing2", lambda: discrete_approximator(3))]


@pytest.mark.parametrize("label,build", LISTINGS, ids=[p[0] for p in LISTINGS])
@pytest.mark.slow
def test_listing_diagonal_and_target(label, build):
    prog = build()
    model = lsrl.compile(prog, progress=False)
    diagonal = model.diagonal()
    _assert_diagonal_form(diagonal)
    if label == "listing2":  # its modulo counters are permutation cycles: complex pairs; a shift register
        assert "pair block" in diagonal.summary() and "delay block" in diagonal.summary()
    rng = np.random.default_rng(3)
    steps = 40
    if prog.input.dim == 1:
        xs = rng.integers(0, 4, size=(2, steps, 1))
    else:
        xs = rng.integers(0, 4, size=(2, steps, prog.input.dim))  # thirds within the declared [0, 1]
    exact_xs = np.vectorize(lambda v: Fraction(int(v), 3 if prog.input.dim > 1 else 1), otypes=[object])(xs)
    assert np.array_equal(diagonal(exact_xs, exact=True), model(exact_xs, exact=True))
    long_xs = rng.integers(0, 4, size=(1, LONG_T, 1)) if prog.input.dim == 1 else rng.random((1, LONG_T, prog.input.dim))
    long_xs = long_xs.astype(np.float64)
    want = prog(long_xs)
    for arch in DIAGONAL_TARGETS:
        with torch.no_grad():
            got = model.to_torch(arch)(torch.as_tensor(long_xs)).numpy()
        assert _relative_error(got, want) <= FLOAT_TOLERANCE, arch


# ---- the random programs of test_random_programs ------------------------------------------------------

def _diagonalised(seed):
    try:
        gen, model, ref = _compiled_exact(seed)
    except lsrl.LsrlError:
        return None
    try:
        return gen, model, model.diagonal(), ref
    except lsrl.LsrlError as error:
        return gen, model, error, ref


@pytest.mark.slow
def test_random_programs_diagonal_exact():
    done = failed = 0
    for seed in range(N_SEEDS):
        case = _diagonalised(seed)
        if case is None:
            continue
        gen, model, diagonal, ref = case
        if isinstance(diagonal, lsrl.LsrlError):  # the named state must really be outside the diagonal form
            failed += 1
            named = [layer for layer in model.layers if f"LinState '{layer.name}'" in str(diagonal)]
            assert named and any(k.startswith("dense") for k in _state_block_kinds(named[0].A.to_numpy())), seed
            continue
        done += 1
        _assert_diagonal_form(diagonal)
        seq, _ = _inputs_for(seed, gen.d_in)
        assert np.array_equal(diagonal(_as_object_array(seq), exact=True), ref["single0"]), seed
    assert done >= 0.8 * (done + failed), (done, failed)


@pytest.mark.slow
def test_random_programs_diagonal_float():
    """On the float backend every random program is diagonalised, irrational eigenvalues included."""
    for seed in range(0, N_SEEDS, 2):
        gen, model = _compiled_float(seed)
        diagonal = model.diagonal()
        _assert_diagonal_form(diagonal)
        for seq in _inputs_for(seed, gen.d_in):
            xs = np.array(seq, dtype=np.float64)
            assert _relative_error(diagonal(xs), gen.program(xs)) <= FLOAT_TOLERANCE, seed


@pytest.mark.slow
def test_random_programs_diagonal_target_long_sequences():
    checked = 0
    for seed in range(0, N_SEEDS, 6):
        gen, model = _compiled_float(seed)
        xs = np.random.default_rng(seed).integers(-6, 7, size=(1, LONG_T, gen.d_in)) / 3.0
        want = np.asarray(model(xs))  # the compiled model equals the interpreter (test_random_programs)
        if not np.all(np.isfinite(want)) or np.max(np.abs(want)) > 1e12:
            continue  # a program built for 8 steps may grow without bound over 1000
        for arch in DIAGONAL_TARGETS:
            with torch.no_grad():
                got = model.to_torch(arch)(torch.as_tensor(xs)).numpy()
            assert _relative_error(got, want) <= FLOAT_TOLERANCE, (seed, arch)
        checked += 1
    assert checked >= 30


# ---- Hawk / Griffin structure -------------------------------------------------------------------------

@pytest.mark.slow
def test_hawk_and_griffin_need_no_max_len_and_skip_idle_parts(monkeypatch):
    from lsrl.targets.hawk import DiagonalRecurrentBlock, IdentityTemporal, LocalMQA

    model = lsrl.compile(discrete_approximator(3), progress=False)
    hawk, griffin = model.to_torch("hawk"), model.to_torch("griffin")
    assert hawk.max_len is None and griffin.max_len is None
    states = [b for b in hawk.blocks if isinstance(b.temporal, DiagonalRecurrentBlock)]
    assert len(states) == len(to_blocks(model.diagonal()).blocks)
    assert all(isinstance(b.temporal, IdentityTemporal) for b in hawk.blocks if b.role != "state")
    # the delay line is the only convolution, of width 4 (its length); every other state has none
    assert sorted(len(b.temporal.rg_lru.taps) for b in states)[-2:] == [1, 4]
    attention = [b for b in griffin.blocks if isinstance(b.temporal, LocalMQA)]
    assert attention
    monkeypatch.setattr(torch, "softmax", lambda *a, **k: pytest.fail("an idle attention block was computed"))
    xs = torch.as_tensor(np.random.default_rng(0).integers(0, 4, size=(2, 50, 1)).astype(np.float64))
    with torch.no_grad():
        assert torch.equal(griffin(xs), hawk(xs))


def test_inspect_lists_the_diagonal_targets():
    from lsrl.targets import inspect

    text = inspect(lsrl.compile(continuous_approximator(1, 1), progress=False))
    for arch in DIAGONAL_TARGETS:
        assert f"\n{arch}:" in text and f"{arch}: not available" not in text


# ---- ONNX ---------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("arch", DIAGONAL_TARGETS)
def test_diagonal_targets_run_in_onnxruntime_with_dynamic_batch_and_length(arch, tmp_path):
    import onnxruntime

    from lsrl.targets.onnx_export import export_onnx

    _, A, init, b, _, _ = STRUCTURES[-1]  # a Jordan chain (a cascade) and a delay line with an initial state
    programs = [_state_program(A, init, b), discrete_approximator(3)]
    for k, prog in enumerate(programs):
        net = lsrl.compile(prog, progress=False).to_torch(arch)
        rng = np.random.default_rng(k)
        for dtype, tolerance in (("float64", 1e-12), ("float32", 1e-5)):
            # allow_inexact: this compares the file with torch; whether float32 is exact enough is not the point
            path = export_onnx(net, tmp_path / f"{k}.onnx", dtype=dtype, allow_inexact=True)
            session = onnxruntime.InferenceSession(str(path))
            for batch, steps in ((1, 1), (4, 3), (2, 60)):  # shorter and longer than the delay line
                xs = rng.integers(0, 4, size=(batch, steps, prog.input.dim)).astype(np.float64)
                with torch.no_grad():
                    want = net(torch.as_tensor(xs)).numpy()
                got = session.run(None, {"x": xs.astype(dtype)})[0]
                assert got.shape == want.shape
                assert _relative_error(got, want) <= tolerance, (k, dtype, batch, steps)


def test_diagonal_model_saves_and_loads(tmp_path):
    _, A, init, b, _, _ = STRUCTURES[-1]
    prog = _state_program(A, init, b)
    diagonal = lsrl.compile(prog).diagonal()
    loaded = lsrl.load(diagonal.save(tmp_path / "diagonal"))
    xs = _exact_inputs(1, 9, 4)
    assert np.array_equal(loaded(xs, exact=True), prog(xs, exact=True))
    assert "delay block(s) of size [2]" in loaded.summary()


def test_the_map_back_is_folded_into_the_next_state():
    x = lsrl.Input(1, name="x")
    first = lsrl.LinState(x, [[1, 0], [1, 1]], [[1], [0]], name="first")  # a chain: a cascade of two
    second = lsrl.LinState(first, [[Fraction(1, 2)]], [[1, -1]], name="second")
    prog = lsrl.ForEach(lsrl.Concat([second, first]))
    model = lsrl.compile(prog)
    diagonal = model.diagonal()
    assert [layer.kind for layer in model.layers] == ["LinState", "LinState"]
    assert [layer.kind for layer in diagonal.layers] == ["LinState", "LinState", "LinState"]  # no Linear between
    _assert_diagonal_form(diagonal)
    xs = _exact_inputs(1, 10, 5)
    assert np.array_equal(diagonal(xs, exact=True), prog(xs, exact=True))


def test_hawk_and_griffin_parameters_within_10x_of_the_gated_linear_rnn():
    model = lsrl.compile(discrete_approximator(3), progress=False)  # Listing 2, n = 3

    def parameters(arch):
        return sum(p.numel() for p in model.to_torch(arch).parameters())

    baseline = parameters("gated_linear_rnn")
    for arch in ("hawk", "griffin"):
        assert parameters(arch) <= 10 * baseline, arch
