"""The stock LSTM / GRU targets (lsrl.targets.stock): every program in one torch.nn.LSTM / GRU.

Every output is compared with the exact interpreter (``model(xs, exact=True)``) and must lie within the
tolerance the module states (``net.tolerance``); each scale of the construction is tested at its
bound: at the default the error is within the tolerance, far beyond it the error exceeds it.
"""

from __future__ import annotations

import csv
import math
import random
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

import lsrl
from lsrl.ir.labels import unit_values
from lsrl.programs import (
    continuous_approximator, continuous_prompt, continuous_query, discrete_approximator, discrete_prompt,
    more_ones_than_zeros, parity, squaring,
)
from lsrl.targets import STOCK, layer_report
from lsrl.targets.promises import StockState
from lsrl.targets.stock import export_stock_onnx, power_sum
from lsrl.targets.stock.scales import GATE_AMPLITUDE, RELU_KNEE
from test_random_programs import X_NUM, generate_program

DTYPES = (torch.float32, torch.float64)
SEEDS = range(12)
T = 24


def bounded_random_program(seed: int) -> lsrl.ForEach:
    """The random program of ``test_random_programs`` for ``seed``, its Input declared in [-X_NUM, X_NUM]."""
    gen = generate_program(random.Random(seed))
    plain = f"lsrl.Input({gen.d_in}, name='x')"
    source = gen.source_code()
    assert plain in source
    namespace: dict = {}
    exec(source.replace(plain, f"lsrl.Input({gen.d_in}, name='x', bounds=(-{X_NUM}, {X_NUM}))"), namespace)
    return namespace["prog"]


@lru_cache(maxsize=None)
def random_program_case(seed: int):
    """``(program, model, xs, reference)``: a bounded random program and three input sequences in its bounds."""
    program = bounded_random_program(seed)
    model = lsrl.compile(program, progress=False)
    rng = np.random.default_rng(seed)
    xs = rng.integers(-2 * X_NUM, 2 * X_NUM + 1, size=(3, T, model.input.dim)) / 2  # halves: exact in float32
    return program, model, xs, exact(model, xs)


def random_case(seed: int):
    return random_program_case(seed)[1:]


def exact(model, xs) -> np.ndarray:
    return np.array(model(np.asarray(xs, dtype=np.float64), exact=True), dtype=np.float64)


def run(net, xs) -> np.ndarray:
    dtype = net.scales.dtype
    with torch.no_grad():
        return net(torch.as_tensor(np.asarray(xs), dtype=dtype)).double().numpy()


def largest_error(net, xs, reference) -> float:
    return float(np.max(np.abs(run(net, xs) - reference)))


# ---- equivalence ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("arch", STOCK)
def test_random_programs_stay_within_the_stated_tolerance(arch, dtype):
    ratios = []
    for seed in SEEDS:
        model, xs, reference = random_case(seed)
        net = model.to_torch(arch, max_len=T, dtype=dtype)
        assert isinstance(net.core, torch.nn.LSTM if arch == "stock_lstm" else torch.nn.GRU)
        error = largest_error(net, xs, reference)
        assert error <= net.tolerance, f"seed {seed}: error {error:.3g} above the stated {net.tolerance:.3g}"
        ratios.append(error / net.tolerance)
        # the tolerance says something: below the outputs' scale (the value bounds it rests on are loose)
        assert net.tolerance <= (0.25 if dtype == torch.float32 else 1e-6) * max(1.0, np.abs(reference).max())
    assert max(ratios) > 1e-3  # and it is not loose by many orders of magnitude


@pytest.mark.parametrize("arch", STOCK)
def test_one_step_at_a_time_stays_within_the_stated_tolerance(arch):
    """``net.run(x_t, state)`` step by step, carrying the state, and the whole sequence at once: both within
    ``net.tolerance`` of the interpreter. They are the same computation up to rounding, not bit for bit (the input
    products are computed per step, not per sequence, and the kernels' order of the sums differs between CPUs), and
    the tolerance is what the module promises for either."""
    for seed in (2, 5):
        model, xs, reference = random_case(seed)
        net = model.to_torch(arch, max_len=T, dtype=torch.float64)
        x = torch.as_tensor(xs)
        with torch.no_grad():
            whole = net(x)
            state, steps = None, []
            for t in range(x.shape[1]):
                y, state = net.run(x[:, t:t + 1], state)
                steps.append(y)
        stepped = torch.cat(steps, dim=1).numpy()
        assert 0 < net.tolerance < 1e-3 * max(1.0, float(np.max(np.abs(reference))))  # a bound that says something
        assert np.max(np.abs(stepped - reference)) <= net.tolerance, seed
        assert np.max(np.abs(whole.numpy() - reference)) <= net.tolerance, seed


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("arch", STOCK)
def test_fig1_decides_every_step_exactly(arch, dtype):
    model = lsrl.compile(more_ones_than_zeros(), progress=False)
    xs = np.random.default_rng(7).integers(0, 2, size=(32, 200, 1)).astype(np.float64)
    reference = exact(model, xs)
    net = model.to_torch(arch, max_len=200, dtype=dtype)
    out = run(net, xs)
    assert np.max(np.abs(out - reference)) <= net.tolerance < 0.5
    assert np.array_equal(np.round(out), reference)


@lru_cache(maxsize=None)
def listing2_case(n: int, robust: bool = True):
    """``(model, xs, reference)``: Listing 2 (vocabulary 4) prompted with every query of a token map of ``8 - 2 n``
    keys, and as many random token sequences of the same length (within the bounds, no prompts)."""
    model = lsrl.compile(discrete_approximator(n, robust=robust, vocabulary=4), progress=False)
    rng = np.random.default_rng(n)
    keys = {tuple(int(t) for t in rng.integers(0, 5, n)) for _ in range(40)}
    mapping = {key: tuple(int(t) for t in rng.integers(0, 5, n)) for key in sorted(keys)[:8 - 2 * n]}
    prompts = np.stack([discrete_prompt(mapping, query) for query in mapping]).astype(np.float64)
    xs = np.concatenate([prompts, rng.integers(0, 5, size=prompts.shape).astype(np.float64)])
    return model, xs, exact(model, xs)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("arch", STOCK)
def test_listing2_answers_every_query_exactly(arch, dtype):
    """Listing 2 (robust, n = 2 and 3) is built of threshold units (module docstring, "Threshold units"): the
    stated tolerance is 0, and every output at every step equals the interpreter's, on every query of a token map
    and on random token sequences."""
    for n in (2, 3):
        model, xs, reference = listing2_case(n)
        net = model.to_torch(arch, max_len=xs.shape[1], dtype=dtype)
        assert net.tolerance == 0.0 and any(layer.thresholded for layer in net.unit_plan.layers)
        out = run(net, xs)
        assert np.array_equal(out, reference), (n, float(np.max(np.abs(out - reference))))
        assert np.array_equal(reference[:len(xs) // 2, -1], [[mapped] for mapped in reference[:len(xs) // 2, -1, 0]])


@pytest.mark.parametrize("arch", STOCK)
@pytest.mark.slow
def test_the_papers_listing2_is_exact_and_refused_where_its_register_outgrows_float32(arch):
    """The paper's Listing 2 (steps of slope 1000, lambda = 1e10): exact units hold it in float64 and, at its prompts'
    length, in float32; at max_len 256 its started_on register's bound (3.8e15) is beyond float32's identity units
    and threshold units, its small-signal error does not fit, and float32 refuses, naming the state."""
    model, xs, reference = listing2_case(2, robust=False)
    for dtype in DTYPES:
        net = model.to_torch(arch, max_len=xs.shape[1], dtype=dtype)
        assert net.tolerance == 0.0 and np.array_equal(run(net, xs), reference)
    with pytest.raises(lsrl.LsrlError, match=r"LinState '\w+'.*float32.*grows most at .*use float64"):
        model.to_torch(arch, max_len=256, dtype=torch.float32)


@pytest.mark.parametrize("arch", STOCK)
def test_the_threshold_gain_is_at_its_boundary(arch):
    """A threshold unit's gain K is the smallest power of two with K margin >= EXACT_SATURATION (margin just below
    1/2 for Listing 2's integers): at gain 1 the module is exact; at gain 1/2 the gates would fall short of
    saturation, and the build is refused naming the node."""
    model, xs, reference = listing2_case(2)
    assert np.array_equal(run(model.to_torch(arch, max_len=xs.shape[1], dtype=torch.float32), xs), reference)
    short = r"gain=0.5 leaves the threshold units of \w+ '\w+' .* short of saturation"
    with pytest.raises(lsrl.LsrlError, match=short):
        model.to_torch(arch, max_len=xs.shape[1], dtype=torch.float32, gain=0.5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_threshold_units_constants_are_exact_and_a_smaller_one_is_not(dtype):
    """Threshold units rest on sigmoid(+-EXACT_SATURATION) being exactly 1 / 0 (table rows, both code paths) and on
    tanh(TANH_ONE) = 1 exactly; an eighth of either is not exact (sigmoid(-128) = 2.6e-56 in float64)."""
    from lsrl.targets.stock.scales import EXACT_SATURATION, TANH_ONE

    assert holds_on_both_paths("sigmoid(x) == 1", EXACT_SATURATION, dtype)
    assert holds_on_both_paths("sigmoid(x) == 0", -EXACT_SATURATION, dtype)
    ones = [torch.tensor([TANH_ONE], dtype=dtype), torch.full((64,), TANH_ONE, dtype=dtype)]
    assert all(bool(torch.all(torch.tanh(x) == 1)) for x in ones)
    assert not any(bool(torch.all(torch.tanh(x / 8) == 1)) for x in ones)
    if dtype == torch.float64:
        assert not holds_on_both_paths("sigmoid(x) == 0", -EXACT_SATURATION / 8, dtype)


def test_the_readout_of_threshold_units_is_exact_within_its_bound():
    """``exact_sums``: a readout of flags (h 0 or 1) with weights on one grid 2^-q sums exactly while
    (sum |w| + |b|) 2^q <= 2^23 in float32 (here 2^22 on the grid 1/2); at 2^24 + 1 the float32 sum rounds,
    and the bound says inexact; a weight 1/3 or a unit that is not exact (grid 0) is never taken as exact."""
    from types import SimpleNamespace

    from lsrl.targets.stock.builder import Builder

    builder = SimpleNamespace(payload=SimpleNamespace(grid=np.array([1.0, 1.0, 0.0]), H=np.ones(3)),
                              scales=SimpleNamespace(dtype=torch.float32))
    cases = {(2.0 ** 21, 2.0 ** 21 - 0.5, 0.0, 0.5): True, (2.0 ** 24, 1.0, 0.0, 0.0): False,
             (1 / 3, 1.0, 0.0, 0.0): False, (1.0, 1.0, 1.0, 0.0): False}
    for (*weights, bias), exact_sum in cases.items():
        assert Builder.exact_sums(builder, np.array([weights]), np.array([bias]))[0] == exact_sum, weights
    flags = torch.ones(1, 2)
    for (*weights, bias), exact_sum in list(cases.items())[:2]:
        readout = torch.nn.Linear(2, 1)
        with torch.no_grad():
            readout.weight.copy_(torch.tensor([weights[:2]]))
            readout.bias.fill_(bias)
            assert (float(readout(flags)) == sum(weights[:2]) + bias) == exact_sum


@pytest.mark.slow
def test_the_value_lattices_hold_every_value_of_every_layer():
    """``value_lattices``: every value of every compiled layer of Listing 2 (exact trace) lies on its lattice;
    a state halving its value has none; a relu of half-integers lies on the half-integers with 0."""
    from lsrl.targets.stock.lattices import value_lattices

    model, xs, _ = listing2_case(2)
    trace = model.trace(xs.astype(object), exact=True)
    checked = 0
    for lattices, values in zip(value_lattices(model)[1:], trace):
        for j, lattice in enumerate(lattices):
            assert lattice is not None
            offset, step = (Fraction(int(x.numerator), int(x.denominator)) for x in lattice)
            held = {Fraction(v) for v in np.asarray(values)[..., j].ravel()}
            assert all((v - offset) / step == int((v - offset) / step) if step else v == offset for v in held)
            checked += 1
    assert checked > 400
    x = lsrl.Input(1, name="x", bounds=(0, 4), integer=True)
    halving = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[Fraction(1, 2)]], [[1]], name="h")), progress=False)
    assert value_lattices(halving)[-1] == [None]
    shifted = lsrl.compile(lsrl.ForEach(lsrl.ReLU(lsrl.Linear(x, [[1]], [Fraction(-1, 2)]))), progress=False)
    assert [tuple(map(str, lattice)) for lattice in value_lattices(shifted)[-1]] == [("0", "1/2")]


@pytest.mark.slow
@pytest.mark.parametrize("arch", STOCK)
def test_exact_modules_step_cache_and_export(arch, tmp_path):
    """A module of exact units (identity and threshold units; the LSTM's cells start at TANH_ONE): one step at a
    time and ``run_with_cache`` give the interpreter's outputs exactly. onnxruntime's tanh is no identity, so the
    default module's ONNX file is off (its doc string says the tolerance is torch's); built with
    ``runtime="onnxruntime"`` (threshold units only, GRU flags within ONNX_FLAG_ERROR) the stated tolerance holds
    in onnxruntime too, and decides every output. The nodes held by exact units are not patchable."""
    import onnx
    import onnxruntime

    model, xs, reference = listing2_case(2)
    net = model.to_torch(arch, max_len=xs.shape[1], dtype=torch.float32)
    x = torch.as_tensor(xs, dtype=torch.float32)
    with torch.no_grad():
        state, steps = None, []
        for t in range(x.shape[1]):
            y, state = net.run(x[:, t:t + 1], state)
            steps.append(y)
        assert np.array_equal(torch.cat(steps, dim=1).double().numpy(), reference)
        assert np.array_equal(net.run_with_cache(x)[0].double().numpy(), reference)
    for runtime in ("torch", "onnxruntime"):
        built = model.to_torch(arch, max_len=xs.shape[1], dtype=torch.float32, runtime=runtime)
        path = export_stock_onnx(built, tmp_path / f"{arch}_{runtime}.onnx")
        assert f"runtime {runtime}" in onnx.load(str(path)).doc_string
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        error = np.max(np.abs(session.run(None, {"x": xs.astype(np.float32)})[0] - reference))
        if runtime == "torch":
            assert built.tolerance == 0 < error < 1e-2  # identity units: outside what the tolerance covers
        else:
            assert error <= built.tolerance < 0.5 and (error == 0) == (arch == "stock_lstm"), (error, built.tolerance)
    assert "exact units" in net.unpatchable["query"] and net.patchable == ["answer"]  # the readout's
    with pytest.raises(lsrl.LsrlError, match="'query' cannot be patched.*exact units"):
        net(x, patch={"query": np.zeros((len(xs), xs.shape[1], 2))})
    donor = np.asarray(model(xs[::-1].copy(), exact=True), dtype=np.float64)
    with torch.no_grad():
        assert np.array_equal(net(x, patch={"answer": donor}).double().numpy(), donor)


@lru_cache(maxsize=None)
def long_listing2_case():
    """``(model, xs, reference)``: robust Listing 2 (n = 3, tokens up to 10) on 256 steps: two prompts repeating the
    query's key with the value 10 (the output registers reach their bound, 420), two random token sequences."""
    model = lsrl.compile(discrete_approximator(3, robust=True, vocabulary=10), progress=False)
    steps = 256
    repeated = np.array(([1, 1, 1] + [1, 1, 1, 10, 10, 10] * 43)[:steps], dtype=np.float64)
    randoms = np.random.default_rng(3).integers(0, 11, size=(2, steps))
    xs = np.stack([repeated, np.roll(repeated, 3), *randoms])[..., None].astype(np.float64)
    return model, xs, exact(model, xs)


@pytest.mark.parametrize("arch", STOCK)
@pytest.mark.slow
def test_listing2_stays_exact_at_long_max_len(arch):
    """Robust Listing 2 (n = 3, tokens up to 10) at max_len 256: the output registers' bound is 420, beyond
    MAX_THRESHOLDS, and prompts that repeat the query's key reach it; as identity units they stay exact, in float32
    and float64, with the width of max_len 64."""
    model, xs, reference = long_listing2_case()
    steps = xs.shape[1]
    assert np.abs(reference).max() == 420
    widths = {model.to_torch(arch, max_len=64, dtype=torch.float32).core.hidden_size}
    for dtype in DTYPES:
        net = model.to_torch(arch, max_len=steps, dtype=dtype)
        assert net.tolerance == 0 and np.array_equal(run(net, xs), reference), dtype
        widths.add(net.core.hidden_size)
    assert len(widths) == 1


@pytest.mark.slow
@pytest.mark.parametrize("arch", STOCK)
def test_parity_is_exact_far_beyond_the_threshold_budget(arch):
    """parity's features are bounded by max_len (relational bounds); as identity units they take two units (LSTM,
    four in the GRU) at max_len 1000, exact in float32."""
    model = lsrl.compile(parity(), progress=False)
    xs = np.random.default_rng(9).integers(0, 2, size=(4, 1000, 1)).astype(np.float64)
    xs[0] = 1.0
    net = model.to_torch(arch, max_len=1000, dtype=torch.float32)
    assert net.tolerance == 0 and net.core.hidden_size == (2 if arch == "stock_lstm" else 4)
    assert np.array_equal(run(net, xs), exact(model, xs))


@pytest.mark.slow
def test_random_programs_of_exact_units_equal_the_interpreter(monkeypatch):
    """Random programs with integer inputs, exact units forced (their plain bounds would often decide them): every
    module states its tolerance and keeps it, in both archs and dtypes, and identity units of every kind occur
    (ReLU, gated products, LinState; the GRU's gated pairs)."""
    from lsrl.targets.stock import builder

    monkeypatch.setattr(builder, "_decides", lambda *_: False)
    kinds, exact_outputs = set(), 0
    for seed in (*range(40, 50), 53, 72):  # 53 and 72: states of identity units
        gen = generate_program(random.Random(seed))
        plain = f"lsrl.Input({gen.d_in}, name='x')"
        namespace: dict = {}
        exec(gen.source_code().replace(plain, f"lsrl.Input({gen.d_in}, name='x', bounds=(-{X_NUM}, {X_NUM}), "
                                                "integer=True)"), namespace)
        model = lsrl.compile(namespace["prog"], progress=False)
        xs = np.random.default_rng(seed).integers(-X_NUM, X_NUM + 1, size=(4, 16, model.input.dim)).astype(float)
        reference = exact(model, xs)
        for arch in STOCK:
            for dtype in DTYPES:
                try:
                    net = model.to_torch(arch, max_len=16, dtype=dtype)
                except lsrl.LsrlError as error:  # float32 refuses some: their bound does not fit
                    assert dtype == torch.float32, (seed, arch, error)
                    continue
                error = largest_error(net, xs, reference)
                assert error <= net.tolerance, (seed, arch, dtype, error, net.tolerance)
                exact_outputs += net.tolerance == 0 == error
                kinds |= {(arch, model.layers[layer.source].kind) for layer in net.unit_plan.layers
                          if layer.thresholded and not any(layer.binary)}
    assert {(arch, kind) for arch in STOCK for kind in ("ReLU", "Multi", "LinState")} <= kinds, kinds
    assert exact_outputs >= 4  # modules of exact units only: tolerance 0 and the interpreter's outputs


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_identity_amplitude_is_at_its_boundary(dtype, monkeypatch):
    """Identity units rest on tanh(x) == x for |x| <= TANH_IDENTITY (a fact checked where the module runs, both code
    paths): a counter of integer inputs to 64, held by one identity unit (exact units forced: its plain bound would
    decide it), is exact; with 16 times TANH_IDENTITY (tanh(x) != x there) its outputs are not the interpreter's."""
    from lsrl.targets.stock import builder, scales

    limit = scales.TANH_IDENTITY[dtype]
    assert holds_on_both_paths("tanh(x) == x", limit, dtype)
    assert not holds_on_both_paths("tanh(x) == x", 16 * limit, dtype)
    x = lsrl.Input(1, name="x", bounds=(0, 1), integer=True)
    model = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[1]], [[1]], name="count")), progress=False)
    xs = np.random.default_rng(4).integers(0, 2, size=(8, 64, 1)).astype(np.float64)
    xs[0] = 1.0  # the count reaches its bound, 64
    reference = exact(model, xs)
    monkeypatch.setattr(builder, "_decides", lambda *_: False)
    for arch in STOCK:
        net = model.to_torch(arch, max_len=64, dtype=dtype)
        assert net.tolerance == 0 and net.core.hidden_size == 1 and np.array_equal(run(net, xs), reference)
    monkeypatch.setitem(scales.TANH_IDENTITY, dtype, 16 * limit)
    for arch in STOCK:
        assert not np.array_equal(run(model.to_torch(arch, max_len=64, dtype=dtype), xs), reference), arch


def test_the_kernel_facts_cover_the_measured_table():
    """The kernels with their own activations (benchmarks/rnn_activations.py, sampled): torch's float32 nn.LSTM runs
    oneDNN's, within ACTIVATION_ULPS, with tanh(x) == x up to TANH_IDENTITY and the saturation identities;
    runtime="onnxruntime" charges ONNX_ACTIVATION_ULPS and ONNX_FLAG_ERROR: at least what onnxruntime's kernels
    measured (sigmoid exactly 0 / 1 at -+1024 but in the GRU's reset gate, tanh(TANH_ONE) = 1 in the LSTM)."""
    from lsrl.targets.stock.scales import (
        ACTIVATION_ULPS, EXACT_SATURATION, ONNX_ACTIVATION_ULPS, ONNX_FLAG_ERROR, SATURATION, TANH_IDENTITY, TANH_ONE,
    )

    with open(KERNEL_FACTS, newline="") as file:
        rows = {(row["runtime"], row["kernel"], row["function"]): row for row in csv.DictReader(file)}
    assert TANH_ONE == 64 and EXACT_SATURATION == 1024 and SATURATION <= 128  # the rows' at_64, at_1024 columns
    onednn = {name: rows["torch", "LSTM (oneDNN)", name] for name in ("tanh", "sigmoid")}
    assert float(onednn["tanh"]["max_relative_error_u"]) <= ACTIVATION_ULPS
    assert float(onednn["sigmoid"]["max_relative_error_u_where_at_least_quarter"]) <= ACTIVATION_ULPS
    assert float(onednn["tanh"]["identity_up_to"]) >= TANH_IDENTITY[torch.float32]
    assert float(onednn["tanh"]["at_64"]) == 1 and float(onednn["sigmoid"]["exact_beyond"]) <= 128
    tanh = max(float(rows["onnxruntime", kernel, "tanh"]["max_relative_error_u"]) for kernel in ("GRU", "LSTM"))
    sigmoid = max(float(rows["onnxruntime", kernel, "sigmoid"]["max_absolute_error_u"]) for kernel in ("GRU", "LSTM"))
    reset = rows["onnxruntime", "GRU r", "sigmoid"]
    assert tanh + sigmoid + float(reset["max_absolute_error_u"]) <= ONNX_ACTIVATION_ULPS
    assert float(rows["onnxruntime", "LSTM", "tanh"]["at_64"]) == 1.0
    assert abs(float(rows["onnxruntime", "GRU", "tanh"]["at_64"]) - 1) <= ONNX_FLAG_ERROR
    assert abs(float(reset["at_minus_1024"])) * TANH_ONE <= ONNX_FLAG_ERROR
    for kernel in ("GRU", "LSTM"):
        row = rows["onnxruntime", kernel, "sigmoid"]
        assert (row["at_1024"], row["at_minus_1024"]) == ("1", "0") and float(row["exact_beyond"]) <= 128


@pytest.mark.parametrize("arch", STOCK)
def test_listing1_approximates_within_its_tolerance(arch):
    """Listing 1 (robust): in float64 the stated tolerance is small; float32 states a useless one (the
    value bounds the scales rest on are loose), so it is not tested there."""
    program = continuous_approximator(1, 1, robust=True, value_bound=1)
    model = lsrl.compile(program, progress=False)
    prompt = continuous_prompt(lambda x: np.sin(3 * x), 1, 1, 8)
    xs = np.stack([np.vstack([continuous_query([q], 1), prompt]).astype(np.float64) for q in (0.1, 0.45, 0.9)])
    reference = exact(model, xs)
    net = model.to_torch(arch, max_len=xs.shape[1], dtype=torch.float64)
    assert np.max(np.abs(run(net, xs) - reference)) <= net.tolerance <= 1e-2
    assert np.abs(reference[:, -1, 0] - np.sin(3 * np.array([0.1, 0.45, 0.9]))).max() < 0.2  # it approximates


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("arch", STOCK)
def test_the_relu_state_programs(arch, dtype):
    """parity and squaring (ReLUState): exact decisions; their bounds grow as |A|^T (module docstring),
    so the lengths are short in float32."""
    cases = [(parity(), 8), (squaring(range(6)), 4)]
    if dtype == torch.float64:
        cases.append((parity(), 16))
    for program, length in cases:
        model = lsrl.compile(program, progress=False)
        xs = np.random.default_rng(length).integers(0, 2, size=(64, length, 1)).astype(np.float64)
        reference = exact(model, xs)
        net = model.to_torch(arch, max_len=length, dtype=dtype)
        out = run(net, xs)
        assert np.max(np.abs(out - reference)) <= net.tolerance
        assert np.array_equal(np.round(out), reference)


@pytest.mark.parametrize("arch", STOCK)
def test_threshold_units_replace_a_bound_that_decides_nothing_and_only_that(arch):
    """parity in float32: at max_len 8 the plain bound proves its decisions and the module is the plain one; at
    64 the plain bound is refused, and the threshold units give tolerance 0 and the interpreter's outputs."""
    model = lsrl.compile(parity(), progress=False)
    xs = np.random.default_rng(64).integers(0, 2, size=(32, 64, 1)).astype(np.float64)
    reference = exact(model, xs)
    plain = model.to_torch(arch, max_len=8, dtype=torch.float32)
    assert 0 < plain.tolerance < 0.5 and not any(layer.thresholded for layer in plain.unit_plan.layers)
    net = model.to_torch(arch, max_len=64, dtype=torch.float32)
    assert net.tolerance == 0.0 and np.array_equal(run(net, xs), reference)


# ---- labels, patches, run_with_cache -----------------------------------------------------------------


def patch_case(which):
    """``(program, model, xs, donor trace)`` with in-bound inputs; the donor is the trace of other inputs."""
    if isinstance(which, int):
        program, model, xs, _ = random_program_case(which)
        other = np.random.default_rng(100 + which).integers(-2 * X_NUM, 2 * X_NUM + 1, size=xs.shape) / 2
    else:
        program = {"fig1": more_ones_than_zeros, "parity": parity}[which]()
        model = lsrl.compile(program, progress=False)
        xs, other = np.random.default_rng(5).integers(0, 2, size=(2, 3, 8, 1))
    return program, model, xs.astype(np.float64), program.trace(other.astype(np.float64), exact=True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("arch", STOCK)
def test_patched_runs_match_the_programs_patched_run(arch, dtype):
    """Every node of ``net.patchable``, patched with another input's trace, on fixed and random programs: the
    output within ``net.tolerance`` of ``program(xs, exact=True, patch=...)``, by ``net(xs, patch=)`` (stock
    layers one step at a time) and by ``run_with_cache`` (PyTorch's equations, step by step)."""
    patched = changed = 0
    for which in ("fig1", "parity", *SEEDS):
        program, model, xs, donor = patch_case(which)
        net = model.to_torch(arch, max_len=xs.shape[1], dtype=dtype)
        x = torch.as_tensor(xs, dtype=dtype)
        plain = run(net, xs)
        for name in net.patchable:
            values = np.asarray(donor[name], dtype=np.float64)
            expected = np.asarray(program(xs.astype(object), exact=True, patch={name: donor[name]}), dtype=np.float64)
            with torch.no_grad():
                got = net(x, patch={name: values}).double().numpy()
            cached = net.run_with_cache(x, patch={name: values})[0].double().numpy()
            for result in (got, cached):
                assert np.max(np.abs(result - expected)) <= net.tolerance, (which, name)
            patched += 1
            changed += np.max(np.abs(expected - plain)) > 2 * net.tolerance
    assert patched >= 15 and changed >= 8, (patched, changed)  # many patches, many of them moved the outputs


@pytest.mark.parametrize("arch", STOCK)
def test_every_label_holds_within_its_unit_tolerance(arch):
    """A labelled unit holds ``unit_scales`` times what its label says, within ``unit_tolerances`` (both read
    from ``run_with_cache``, checked against the program's trace); the cache's output is the module's."""
    checked = 0
    for which in ("fig1", "parity", 1, 4):
        program, model, xs, _ = patch_case(which)
        net = model.to_torch(arch, max_len=xs.shape[1], dtype=torch.float64)
        outputs, cache = net.run_with_cache(xs)
        assert list(cache) == net.hook_names()
        # PyTorch's equations step by step and the stock kernel: both within the stated tolerance of the program
        assert np.max(np.abs(outputs.numpy() - exact(model, xs))) <= net.tolerance
        assert np.max(np.abs(run(net, xs) - exact(model, xs))) <= net.tolerance
        trace = program.trace(xs, exact=True)
        for key, labels in net.labels.items():
            for unit, label in enumerate(labels):
                if label is None or np.isnan(net.unit_scales[key][unit]):
                    continue
                held = unit_values(label, np.asarray(trace[label.node], dtype=np.float64))
                error = np.abs(cache[key][..., unit].numpy() - net.unit_scales[key][unit] * held)
                assert np.max(error) <= net.unit_tolerances[key][unit] + 1e-300, (which, key, unit, label)
                checked += 1
    assert checked > 50


@pytest.mark.parametrize("arch", STOCK)
def test_patches_the_construction_cannot_carry_are_refused(arch):
    program, model, xs, donor = patch_case("fig1")
    net = model.to_torch(arch, max_len=xs.shape[1], dtype=torch.float64)
    assert "linear_3" in net.unpatchable and "linear_3" not in net.patchable  # folded into the next layer's gates
    with pytest.raises(lsrl.LsrlError, match="'linear_3' cannot be patched.*folds"):
        net(xs, patch={"linear_3": donor["linear_3"]})
    steps = xs.shape[1]
    too_large = np.full((steps, 1), steps + 1.0)  # the counter's value bound at max_len is max_len
    with pytest.raises(lsrl.LsrlError, match="'ones_minus_zeros' reach 9 .*beyond its value bound 8"):
        net(xs, patch={"ones_minus_zeros": too_large})
    with pytest.raises(lsrl.LsrlError, match="cannot patch 'core.l9'"):
        net.run_with_cache(xs, patch={"core.l9": np.zeros((3, steps, 1))})
    hidden = net.core.hidden_size  # a hook patch: NaN keeps the model's value
    nothing = net.run_with_cache(xs, patch={"core.l0": np.full((3, steps, hidden), np.nan)})[0]
    assert torch.equal(nothing, net.run_with_cache(xs)[0])
    unlabelled = lsrl.compile(more_ones_than_zeros(), progress=False)
    unlabelled.labels = None  # as a model file from before labels
    bare = unlabelled.to_torch(arch, max_len=xs.shape[1], dtype=torch.float64)
    assert bare.labels is None and bare.patchable is None
    with pytest.raises(lsrl.LsrlError, match="has no net.patchable"):
        bare(xs, patch={"relu_0": donor["relu_0"]})


# ---- every bound at its boundary --------------------------------------------------------------------


def relu_program() -> lsrl.CompiledProgram:
    x = lsrl.Input(1, name="x", bounds=(-1, 1))
    return lsrl.compile(lsrl.ForEach(lsrl.ReLU(x, name="r")), progress=False)


@pytest.mark.parametrize("arch", STOCK)
def test_the_relu_gain_bound_is_real(arch):
    """K is the smallest power of two with 0.2785 / K <= u M: at K the knee's error (worst at K x = 1.2785)
    is within the tolerance; at K / 256 it exceeds it (the tolerance adds the rounding of every step:
    about 40 u M for the LSTM, 70 u M for the GRU, where the knee at K is 0.55 u M)."""
    model = relu_program()
    net = model.to_torch(arch, max_len=4, dtype=torch.float32)
    K = 2.0 ** math.ceil(math.log2(RELU_KNEE / 2.0 ** -24))
    for gain, within in ((1.0, True), (1 / 256, False)):
        worst = np.array([[[1.2785 / (K * gain)]] * 4])
        reference = exact(model, worst.astype(np.float32).astype(np.float64))
        error = largest_error(model.to_torch(arch, max_len=4, dtype=torch.float32, gain=gain), worst, reference)
        assert (error <= net.tolerance) == within, (gain, error, net.tolerance)


def counter_program() -> lsrl.CompiledProgram:
    x = lsrl.Input(1, name="x", bounds=(0, 1))
    return lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[1]], [[1]], name="count")), progress=False)


@pytest.mark.parametrize("arch", STOCK)
def test_the_amplitude_bound_is_real(arch):
    """The small-signal amplitude keeps tanh's cubic error below the rounding (``2/3 delta^2 <= u``: the
    default is 4 times below that point): a counter to 64 is within the tolerance at the default, and with
    256 times the amplitude its cubic error, about ``delta^2 T^2 / 6``, exceeds it."""
    model = counter_program()
    xs = np.ones((1, 64, 1))
    reference = exact(model, xs)
    net = model.to_torch(arch, max_len=64, dtype=torch.float32)
    assert largest_error(net, xs, reference) <= net.tolerance
    loud = model.to_torch(arch, max_len=64, dtype=torch.float32, amplitude=256 * net.scales.amplitude)
    assert largest_error(loud, xs, reference) > net.tolerance


def product_program() -> lsrl.CompiledProgram:
    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    return lsrl.compile(lsrl.ForEach(lsrl.Multi(x, name="product")), progress=False)


@pytest.mark.parametrize("arch", STOCK)
def test_the_gate_amplitude_is_near_its_optimum(arch):
    """A product's gate amplitude trades rounding (grows as it shrinks) against truncation (grows with it):
    at the default the error is within the tolerance; 64 times smaller or larger, beyond it."""
    model = product_program()
    grid = np.linspace(-1, 1, 65)
    xs = np.stack(np.meshgrid(grid, grid), axis=-1).reshape(1, -1, 2).astype(np.float32).astype(np.float64)
    xs = xs.reshape(65, 65, 2)
    reference = exact(model, xs)
    net = model.to_torch(arch, max_len=65, dtype=torch.float32)
    assert largest_error(net, xs, reference) <= net.tolerance
    default = GATE_AMPLITUDE[torch.float32]
    for factor in (1 / 64, 64):
        other = model.to_torch(arch, max_len=65, dtype=torch.float32, gate_amplitude=default * factor)
        assert largest_error(other, xs, reference) > net.tolerance, factor


def test_power_sum_adds_whole_periods_and_stops_at_zero():
    def brute(A, steps):
        total, power = np.zeros_like(A), np.eye(len(A))
        for _ in range(steps):
            total, power = total + np.abs(power), A @ power
        return total

    cycle = np.roll(np.eye(3), 1, axis=0)  # a permutation: period 3
    flip = np.array([[0.0, -1.0], [1.0, 0.0]])  # a quarter turn: period 4
    shift = np.array([[0.0, 0.0], [1.0, 0.0]])  # nilpotent
    for A in (cycle, flip, shift, np.array([[0.5]])):
        for steps in (1, 2, 7, 100, 1001):
            np.testing.assert_allclose(power_sum(A, steps), brute(A, steps), rtol=1e-6)


# ---- refusals ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", STOCK)
def test_a_value_without_a_finite_bound_is_refused_by_name(arch):
    x = lsrl.Input(1, name="x")
    model = lsrl.compile(lsrl.ForEach(lsrl.ReLU(x, name="r")), progress=False)
    with pytest.raises(lsrl.LsrlError, match=r"Input 'x' has no finite bound .*declare bounds"):
        model.to_torch(arch, max_len=8)
    growing = lsrl.Input(1, name="g", bounds=(0, 1))
    doubling = lsrl.compile(lsrl.ForEach(lsrl.LinState(growing, [[2]], [[1]], name="doubling")), progress=False)
    with pytest.raises(lsrl.LsrlError, match="LinState 'doubling'.*float32"):  # bound 2^200, errors doubling
        doubling.to_torch(arch, max_len=200, dtype=torch.float32)
    assert doubling.to_torch(arch, max_len=8, dtype=torch.float32).tolerance < 1.0


@pytest.mark.parametrize("arch", STOCK)
def test_scales_that_overflow_the_dtype_are_refused_by_name(arch):
    x = lsrl.Input(2, name="x", bounds=(-1e30, 1e30))
    model = lsrl.compile(lsrl.ForEach(lsrl.Multi(x, name="big")), progress=False)
    with pytest.raises(lsrl.LsrlError, match="'big'.*float32"):
        model.to_torch(arch, max_len=4, dtype=torch.float32)
    model.to_torch(arch, max_len=4, dtype=torch.float64)  # fine in float64


@pytest.mark.parametrize("arch", STOCK)
def test_bad_options_and_patches_are_refused(arch):
    model = counter_program()
    for options, match in [({}, "max_len must be a positive integer"), ({"max_len": 0}, "max_len"),
                           ({"max_len": 4, "dtype": torch.float16}, "dtype must be"),
                           ({"max_len": 4, "gain": -1}, "gain must be a positive"),
                           ({"max_len": 4, "runtime": "tvm"}, "runtime must be one of"),
                           ({"max_len": 4, "dtype": torch.float64, "runtime": "onnxruntime"},
                            "needs dtype=torch.float32"),
                           ({"max_len": 4, "window": 2}, "takes no option 'window'")]:
        with pytest.raises(lsrl.LsrlError, match=match):
            model.to_torch(arch, **options)
    net = model.to_torch(arch, max_len=4, dtype=torch.float64)
    with pytest.raises(lsrl.SequenceError, match="outside the declared bounds"):
        net(torch.full((1, 4, 1), 2.0, dtype=torch.float64))


# ---- promises: max_len, continued runs, dtype --------------------------------------------------------


def core_outputs(net, xs) -> np.ndarray:
    """The core and readout run directly, past every check: what the module would answer unchecked."""
    with torch.no_grad():
        x = torch.as_tensor(xs, dtype=net.h0.dtype)
        return net.readout(net.core(x, net.initial_state(x.shape[0]))[0]).double().numpy()


@pytest.mark.parametrize("arch", STOCK)
def test_a_counter_built_for_16_steps_refuses_1000(arch):
    """Past max_len the scales no longer hold the values: unchecked, the float32 counter is off by far more than
    its tolerance at 1,000 steps; the module refuses, naming the target, the length and the limit, in every path."""
    model = counter_program()
    net = model.to_torch(arch, max_len=16, dtype=torch.float32)
    ones = np.ones((1, 1000, 1))
    assert np.abs(core_outputs(net, ones) - np.cumsum(ones, axis=1)).max() > 1000 * net.tolerance
    assert np.array_equal(run(net, ones[:, :16]), exact(model, ones[:, :16]))  # within max_len: exact
    message = rf"{arch}: sequence length 1000 exceeds max_len=16"
    for call in (lambda: net(torch.ones(1, 1000, 1)), lambda: net.run(torch.ones(1, 1000, 1)),
                 lambda: net.run_with_cache(torch.ones(1, 1000, 1)),
                 lambda: net(torch.ones(1, 1000, 1), patch={"count": np.zeros((1, 1000, 1))})):
        with pytest.raises(lsrl.SequenceError, match=message):
            call()


@pytest.mark.parametrize("arch", STOCK)
def test_a_continued_run_counts_its_steps_and_refuses_past_max_len(arch):
    model = counter_program()
    net = model.to_torch(arch, max_len=16, dtype=torch.float64)
    xs = np.random.default_rng(3).integers(0, 2, size=(2, 16, 1)).astype(np.float64)
    x = torch.as_tensor(xs)
    with torch.no_grad():
        first, state = net.run(x[:, :10])
        second, state = net.run(x[:, 10:], state)
    assert isinstance(state, StockState) and state.steps == 16
    assert np.array_equal(torch.cat([first, second], dim=1).numpy(), exact(model, xs))  # a counter: exact
    with pytest.raises(lsrl.SequenceError, match=rf"{arch}.run: 16 steps run and 1 more make 17, beyond max_len=16"):
        net.run(x[:, :1], state)
    wrapped = StockState(state.core, 15)  # a core state from elsewhere, wrapped with its step count
    assert net.run(x[:, :1], wrapped)[1].steps == 16


@pytest.mark.parametrize("arch", STOCK)
def test_a_bad_state_is_one_sequence_error(arch):
    net = counter_program().to_torch(arch, max_len=16, dtype=torch.float32)
    x = torch.ones(2, 3, 1)
    _, state = net.run(x)
    core = state.core
    h = core[0] if isinstance(core, tuple) else core
    as_core = (lambda t: (t, t)) if isinstance(core, tuple) else (lambda t: t)
    for bad, match in [
        (core, "state must be the StockState an earlier run returned"),
        ("junk", "got str"),
        (StockState(core, -1), "steps must be a non-negative integer"),
        (StockState(core, 2.5), "steps must be a non-negative integer"),
        (StockState(as_core(h[:, :1]), 3), r"shape \(\d+, 1, \d+\), expected \(\d+, 2, \d+\)"),
        (StockState(as_core(h.double()), 3), "float64 tensor on cpu, the module runs in torch.float32"),
        (StockState(as_core(torch.full_like(h, np.nan)), 3), "NaN or infinite"),
        (StockState(as_core(h.to("meta")), 3), "on meta"),
        (StockState((h, h, h) if isinstance(core, tuple) else (h, h), 3), "state.core must be"),
        (StockState((h.detach().numpy(), h) if isinstance(core, tuple) else h.detach().numpy(), 3), "state.core must be"),
    ]:
        with pytest.raises(lsrl.SequenceError, match=match):
            net.run(x, bad)
    assert net.run(x[:1])[1].steps == 3  # a smaller batch starts from the initial state


@pytest.mark.parametrize("arch", STOCK)
def test_a_stock_target_refuses_any_dtype_change_before_moving(arch):
    """Its scales and tolerance are made for the dtype it was built in: float64 -> float32 and back, half and
    bfloat16 are refused, and the module still runs in its own dtype, within its tolerance."""
    model, xs, reference = random_case(2)
    for built, others in ((torch.float32, (torch.float64, torch.float16, torch.bfloat16)),
                          (torch.float64, (torch.float32, torch.float16))):
        net = model.to_torch(arch, max_len=T, dtype=built)
        for dtype in others:
            with pytest.raises(lsrl.LsrlError, match=rf"{arch}: built for {built}.*cannot run in {dtype}"):
                net.to(dtype)
        with pytest.raises(lsrl.LsrlError, match="built for"):
            net.half()
        assert all(p.dtype == built for p in net.parameters()) and net.h0.dtype == built
        assert largest_error(net.to("cpu"), xs, reference) <= net.tolerance  # a device move is no dtype change


# ---- ONNX, reports ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", STOCK)
def test_onnx_export_runs_in_onnxruntime_within_the_tolerance(arch, tmp_path):
    import onnx
    import onnxruntime

    for seed in range(6):  # built for onnxruntime: the tolerance charges its activations (module docstring)
        model, xs, reference = random_case(seed)
        net = model.to_torch(arch, max_len=T, dtype=torch.float32, runtime="onnxruntime")
        path = export_stock_onnx(net, tmp_path / f"{arch}.onnx")
        operators = {node.op_type for node in onnx.load(str(path)).graph.node}
        assert ("LSTM" if arch == "stock_lstm" else "GRU") in operators and not operators & {"Sigmoid", "Tanh"}
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(None, {"x": xs.astype(np.float32)})[0]
        assert got.shape == reference.shape
        assert np.max(np.abs(got - reference)) <= net.tolerance, seed
        assert np.max(np.abs(run(net, xs) - reference)) <= net.tolerance, seed
    with pytest.raises(lsrl.LsrlError, match="cannot write"):
        export_stock_onnx(net, tmp_path / "missing" / "x.onnx")


@pytest.mark.parametrize("arch", STOCK)
def test_layer_report_and_summary(arch):
    model = lsrl.compile(more_ones_than_zeros(), progress=False)
    net = model.to_torch(arch, max_len=50)
    rows = layer_report(net)
    assert [row["kind"] for row in rows] == [arch, arch, "readout"]
    assert sum(row["nonzeros"] for row in rows) == sum(int(torch.count_nonzero(p)) for p in net.parameters()) + int(
        torch.count_nonzero(net.h0))
    assert f"tolerance={net.tolerance:.3g}" in repr(net)
    assert f"\n{arch}: 2 layers" in lsrl.targets.inspect(model, archs=(arch,), max_len=50)


def test_the_command_line_writes_the_onnx_file(tmp_path):
    from click.testing import CliRunner

    from lsrl.cli import main

    source = tmp_path / "fig1.py"
    source.write_text("from lsrl.programs import more_ones_than_zeros\nprogram = more_ones_than_zeros()\n")
    runner = CliRunner()
    done = runner.invoke(main, ["compile", f"{source}:program", "--target", "stock_gru", "--max-len", "20",
                                "-o", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "out" / "stock_gru.onnx").is_file()
    refused = runner.invoke(main, ["compile", f"{source}:program", "--target", "stock_gru", "-o", str(tmp_path / "x")])
    assert refused.exit_code != 0 and "needs --max-len" in refused.output


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_sigmoid_and_tanh_are_as_accurate_as_the_proof_assumes(dtype):
    """The bound charges ACTIVATION_ULPS units of roundoff to every sigmoid and tanh (module docstring);
    the reference is computed in numpy's long double (64-bit significand on x86)."""
    from lsrl.targets.stock.scales import ACTIVATION_ULPS

    u = torch.finfo(dtype).eps / 2
    x = np.concatenate([np.linspace(-40, 40, 200_001), np.logspace(-12, 0, 20_001), -np.logspace(-12, 0, 20_001)])
    x = torch.as_tensor(x).to(dtype)  # representable in dtype
    wide = x.double().numpy().astype(np.longdouble)
    references = {torch.sigmoid: 1 / (1 + np.exp(-wide)), torch.tanh: np.tanh(wide)}
    for function, reference in references.items():
        got = function(x).double().numpy().astype(np.longdouble)
        relative = np.abs(got - reference) / np.maximum(np.abs(reference), np.finfo(np.float64).tiny)
        assert float(relative.max()) <= ACTIVATION_ULPS * u, (function.__name__, float(relative.max()) / u)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_gru_pair_cancels_its_latched_value_at_the_knee(dtype):
    """The GRU's ReLU unit keeps z a_{t-1}; its partner removes it with a gate of identical weight rows. The
    worst case for that assumption: a large latched value (x = 1 one step) then inputs at the knee, where
    z is neither 0 nor 1 (x of a few 1 / K)."""
    x = lsrl.Input(3, name="x", bounds=(-1, 1))
    model = lsrl.compile(lsrl.ForEach(lsrl.ReLU(lsrl.Linear(x, [[1, 1, 1], [1, -1, 0.5]]), name="r")), progress=False)
    net = model.to_torch("stock_gru", max_len=64, dtype=dtype)
    K = 2.0 ** math.ceil(math.log2(RELU_KNEE / (torch.finfo(dtype).eps / 2 * 3)))  # the bound of the first sum is 3
    xs = np.zeros((64, 64, 3))
    xs[:, ::2] = 1.0
    xs[:, 1::2, 0] = np.random.default_rng(0).integers(-8, 9, size=(64, 32)) / K
    assert largest_error(net, xs, exact(model, xs)) <= net.tolerance


# ---- the activation identities (benchmarks/activation_identities.py) ---------------------------------

IDENTITIES = Path(__file__).parents[1] / "docs" / "results" / "benchmarks" / "activation_identities.csv"
KERNEL_FACTS = IDENTITIES.with_name("rnn_activations.csv")
FACTS = {  # the fact's function and what it equals on its region
    "sigmoid(x) == 1": (torch.sigmoid, torch.ones_like), "sigmoid(x) == 0": (torch.sigmoid, torch.zeros_like),
    "silu(x) == relu(x)": (torch.nn.functional.silu, torch.relu), "tanh(x) == x": (torch.tanh, lambda x: x),
    "gelu_tanh(x) == relu(x)": (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), torch.relu),
}


def identity_rows() -> list[dict]:
    with open(IDENTITIES, newline="") as file:
        return list(csv.DictReader(file))


def holds_on_both_paths(fact: str, value: float, dtype: torch.dtype) -> bool:
    """The identity at ``value`` by torch's scalar loop (one element) and its vectorised kernel (64 of them)."""
    function, target = FACTS[fact]
    return all(bool(torch.all(function(x) == target(x))) for x in
               (torch.tensor([value], dtype=dtype), torch.full((64,), value, dtype=dtype)))


def test_the_activation_table_proves_what_the_constructions_rely_on():
    """For every CPU capability and dtype measured (a set of rows each, named in ``capability`` and ``dtype``):
    every fact a construction relies on holds in the table (float32 rows exhaustive, float64 sampled), and both
    activations' relative errors are within ACTIVATION_ULPS; the stock gates' saturation is not relied on (their
    leak e^-128 is charged)."""
    from lsrl.targets.stock.scales import ACTIVATION_ULPS

    rows = identity_rows()
    groups = {(row["capability"], row["dtype"]) for row in rows}
    assert {(capability, dtype) for capability in ("AVX2", "DEFAULT") for dtype in ("float32", "float64")} <= groups
    for capability, dtype in groups:
        measured = [row for row in rows if (row["capability"], row["dtype"]) == (capability, dtype)]
        assert all(row["cpu"].endswith(capability) for row in measured)
        assert {row["method"] for row in measured} <= ({"exhaustive"} if dtype == "float32" else
                                                       {"sampled", "sampled, a power of two below"})
        assert {row["fact"] for row in measured} >= set(FACTS)
        relied = [row for row in measured if "charged anyway" not in row["used_by"]]
        assert [row for row in relied if row["holds"] != "True"] == [], (capability, dtype)
        ulps = [float(row["boundary"]) for row in measured if "relative error" in row["fact"]]
        assert len(ulps) == 2 and max(ulps) <= ACTIVATION_ULPS, (capability, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_activation_table_boundaries_of_this_capability_are_exact(dtype):
    """The rows measured on the CPU capability these tests run on (``ATEN_CPU_CAPABILITY`` picks it): each region's
    boundary and the floats beyond it satisfy the identity, the float before it does not, on both code paths; the
    used constants hold as the row says. Rows of other capabilities are other kernels (AVX512's float32
    ``tanh(x) == x`` ends 7,590 ulps lower than AVX2's) and are not checked here; the facts the constructions use
    are checked on every capability (``tests/test_facts.py``)."""
    capability = torch.backends.cpu.get_cpu_capability()
    rows = [row for row in identity_rows() if row["capability"] == capability and row["fact"] in FACTS
            and row["dtype"] == str(dtype).removeprefix("torch.")]
    if not rows:
        pytest.skip(f"the activation table has no {dtype} rows measured on {capability} "
                    "(benchmarks/activation_identities.py --dtypes)")
    np_type = np.float32 if dtype == torch.float32 else np.float64
    for row in rows:
        boundary = np_type(float.fromhex(row["boundary_hex"]))
        inward = np_type(0) if row["region"] != "|x| <= boundary" else np_type(np.copysign(np.inf, boundary))
        outward = np_type(np.copysign(np.inf, boundary)) if row["region"] != "|x| <= boundary" else np_type(0)
        beyond = [boundary]
        for _ in range(4):
            beyond.append(np.nextafter(beyond[-1], outward))
        assert all(holds_on_both_paths(row["fact"], float(v), dtype) for v in beyond), row
        if "power of two below" not in row["method"]:  # float64 tanh(x) == x: a region below its holes, not its edge
            assert not holds_on_both_paths(row["fact"], float(np.nextafter(boundary, inward)), dtype), row
        assert holds_on_both_paths(row["fact"], float(row["used"]), dtype) == (row["holds"] == "True"), row
    assert len(rows) >= 7
