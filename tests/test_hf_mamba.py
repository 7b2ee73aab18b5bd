"""Programs in a stock ``transformers`` ``MambaForCausalLM`` (``lsrl.hf.mamba``): equal to the interpreter
within the tolerance each model states, in float32 and float64, at T = max_len; stepwise decoding through
the stock cache; Listings 1 and 2; the refusals (the bounds at their boundaries: tests/test_hf_bounds.py)."""

import itertools
import math
import random
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

import lsrl
from lsrl.programs import continuous_approximator, continuous_prompt, continuous_query, discrete_approximator
from lsrl.programs import discrete_prompt

sys.path.insert(0, str(Path(__file__).parent))
from test_random_programs import X_NUM, generate_program  # noqa: E402

DTYPES = [torch.float32, torch.float64]
RANDOM_SEEDS = [*range(10), 20]  # seed 20 has a delay line with an initial state


def run(hf, xs):
    with torch.no_grad():
        return lsrl.hf.outputs(hf, hf(**lsrl.hf.inputs(hf, xs))).double().numpy()


def stepwise_logits(hf, embeds):
    """The logits of decoding ``embeds`` one step at a time through the stock cache, as generate does."""
    step = hf(inputs_embeds=embeds[:, :1], use_cache=True)
    logits = [step.logits]
    for t in range(1, embeds.shape[1]):
        step = hf(inputs_embeds=embeds[:, t:t + 1], cache=step.cache, use_cache=True)
        logits.append(step.logits)
    return torch.cat(logits, 1)


def bounded_random_program(seed):
    """The random program of ``seed`` (tests/test_random_programs.py) with its Input declared in
    [-X_NUM, X_NUM], the range of the generator's inputs."""
    source = generate_program(random.Random(seed)).source_code()
    namespace = {}
    exec(source.replace("name='x')", f"name='x', bounds=(-{X_NUM}, {X_NUM}))", 1), namespace)
    return namespace["prog"]


def every_state_program():
    """Decays 1, 1/2 and 0 with initial states, a sign flip with decay (-1/2), a quarter turn (a pair of
    period 4), a delay line with an initial state, ReLU and Multi."""
    x = lsrl.Input(2, name="x", bounds=(-2, 2))
    states = lsrl.LinState(x, A=[[1, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, -0.5, 0], [0, 0, 0, 0]],
                           B=[[1, 0], [0, 1], [1, 1], [1, -1]], init_state=[1, -2, 3, 0], name="diagonal")
    turn = lsrl.LinState(x, A=[[0, -1], [1, 0]], B=[[1, 0], [0, 1]], init_state=[1, 0], name="quarter_turn")
    delay = lsrl.LinState(x[0], A=[[0, 0, 0], [1, 0, 0], [0, 1, 0]], B=[[1], [0], [0]], init_state=[1, -2, 0.5],
                          name="delay")
    both = lsrl.Concat([states, turn, delay])
    product = lsrl.Multi(lsrl.Concat([lsrl.ReLU(both[0:4] - 1), both[4:8]]))
    return lsrl.ForEach(lsrl.Concat([both, product]))


@lru_cache(maxsize=None)
def listing2():
    program = discrete_approximator(2, robust=True, vocabulary=3)
    return lsrl.compile(program)


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_random_programs_match_the_interpreter(seed):
    model = lsrl.compile(bounded_random_program(seed))
    max_len = 8
    xs = np.random.default_rng(seed).integers(-X_NUM, X_NUM + 1, (2, max_len, model.input.dim)) / 2
    for dtype in DTYPES:
        hf = model.to_hf("mamba", max_len=max_len, dtype=dtype)  # seed 4's driven cubic: a convolution
        assert hf.dtype == dtype
        error = np.abs(run(hf, xs) - model(xs)).max()
        assert error <= hf.config.lsrl_io["tolerance"], (dtype, error)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_kind_of_state_matches_the_interpreter(dtype):
    model = lsrl.compile(every_state_program())
    max_len = 24
    hf = model.to_hf("mamba", max_len=max_len, dtype=dtype)
    xs = np.random.default_rng(1).uniform(-2, 2, (3, max_len, 2))
    error = np.abs(run(hf, xs) - model(xs)).max()
    assert error <= hf.config.lsrl_io["tolerance"]
    assert error < 1e-4  # measured ~1e-6; the proved bound (about 1) follows the interval bounds
    assert hf.config.conv_kernel >= 4  # the delay line's lags sit in the depthwise convolution


@pytest.mark.parametrize("dtype", DTYPES)
def test_stepwise_decoding_through_the_stock_cache_equals_the_full_forward(dtype):
    model = lsrl.compile(every_state_program())
    hf = model.to_hf("mamba", max_len=12, dtype=dtype)
    embeds = lsrl.hf.inputs(hf, np.random.default_rng(2).uniform(-2, 2, (2, 12, 2)))["inputs_embeds"]
    with torch.no_grad():
        full = hf(inputs_embeds=embeds).logits
        stepwise = stepwise_logits(hf, embeds)
    # the stock step path computes its state in float32 also in a float64 model
    assert torch.allclose(stepwise, full, rtol=0, atol=hf.config.lsrl_io["tolerance"])


@pytest.mark.slow
def test_listing2_in_stock_mamba_answers_every_query():
    model = listing2()
    rng = random.Random(5)
    keys = list(itertools.product(range(4), repeat=2))
    mapping = {key: (rng.randint(0, 3), rng.randint(0, 3)) for key in keys}
    prompt = discrete_prompt(mapping)
    xs = np.array([np.vstack([np.array(query)[:, None], prompt]) for query in keys])
    hf = model.to_hf("mamba", max_len=xs.shape[1])
    out = run(hf, xs)
    assert np.array_equal(np.rint(out[:, -2:, 0]), np.array([mapping[key] for key in keys]))
    assert np.array_equal(out, np.asarray(model(xs, exact=True), dtype=float))  # every output, and proved so:
    assert hf.config.lsrl_io["tolerance"] == 0.0
    assert hf.config.lsrl_io["input"] == "input_ids"


def test_listing1_in_stock_mamba_within_its_stated_error():
    """App. B: the estimate is f at the centre of the query's cell, within L * cell / 2 of f(q)."""
    model = lsrl.compile(continuous_approximator(1, 1, robust=True, value_bound=2))
    cells = 16
    prompt = continuous_prompt(lambda x: np.array([np.sin(3 * x[0])]), 1, 1, cells)
    queries = np.random.default_rng(3).uniform(0.01, 0.99, 6)
    queries = queries[np.abs(queries * cells - np.rint(queries * cells)) > 0.05]  # away from the soft edges
    xs = np.array([np.vstack([continuous_query([q], 1), prompt]) for q in queries])
    hf = model.to_hf("mamba", max_len=xs.shape[1])
    out = run(hf, xs)
    assert np.abs(out - model(xs)).max() < 1e-5
    assert np.all(np.abs(out[:, -1, 0] - np.sin(3 * queries)) <= 3 / cells / 2 + 1e-5)


def test_refusals_name_the_node():
    unbounded = lsrl.compile(lsrl.ForEach(lsrl.LinState(lsrl.Input(1, name="x"), [[1]], [[1]], name="sum")))
    with pytest.raises(lsrl.LsrlError, match="'sum'.*no finite bound"):
        unbounded.to_hf("mamba", max_len=10)
    angle = 1.0  # radians: no finite period
    rotation = [[math.cos(angle) / 2, -math.sin(angle) / 2], [math.sin(angle) / 2, math.cos(angle) / 2]]
    spiral = lsrl.compile(lsrl.ForEach(lsrl.LinState(lsrl.Input(2, bounds=(-1, 1)), rotation, np.eye(2),
                                                     name="spiral")), backend="float")
    with pytest.raises(lsrl.LsrlError, match="'spiral'.*cannot be emulated.*only at max_len <= 64 \\(here 65\\)"):
        spiral.to_hf("mamba", max_len=65)  # at max_len <= 64: its exact convolution
    relu_state = lsrl.compile(lsrl.ForEach(lsrl.ReLUState(lsrl.Input(1, bounds=(0, 1)), [[1]], [[1]], name="r")))
    with pytest.raises(lsrl.LsrlError, match="ReLUState"):
        relu_state.to_hf("mamba", max_len=10)
    huge = lsrl.compile(lsrl.ForEach(lsrl.ReLU(lsrl.Input(1, name="x", bounds=(-1e35, 1e35)))))
    with pytest.raises(lsrl.LsrlError, match="too large"):
        huge.to_hf("mamba", max_len=2)


@pytest.mark.slow
def test_the_command_writes_listing2_as_a_folder_from_pretrained_loads(tmp_path):
    from click.testing import CliRunner
    from transformers import AutoModelForCausalLM

    from lsrl.cli import main

    source = tmp_path / "listing2.py"
    source.write_text("from lsrl.programs import discrete_approximator\n"
                      "program = discrete_approximator(2, robust=True, vocabulary=3)\n")
    result = CliRunner().invoke(main, ["compile", str(source), "--target", "hf-mamba", "--max-len", "21",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "hf-mamba")
    assert (tmp_path / "out" / "hf-mamba" / "README.md").is_file()
    mapping = {(1, 2): (3, 0), (2, 1): (0, 3)}
    xs = np.vstack([np.array([[2], [1]]), discrete_prompt(mapping)])[None]
    assert np.array_equal(np.rint(run(loaded, xs)[0, -2:, 0]), [0, 3])
    result = CliRunner().invoke(main, ["compile", str(source), "--target", "hf-mamba", "-o", str(tmp_path / "x")])
    assert result.exit_code != 0 and "--max-len" in result.output


# ---- Mamba-2 (lsrl.hf.mamba2): the same slots; per-head parameters, B and C through the SiLU, the gated
# group norm made exact by anchor heads, scans gated down to fit it. Its chunked scan is slow: few and short
# sequences.

@pytest.mark.parametrize("seed", range(6))
def test_mamba2_random_programs_match_the_interpreter(seed):
    model = lsrl.compile(bounded_random_program(seed))
    xs = np.random.default_rng(seed).integers(-X_NUM, X_NUM + 1, (2, 8, model.input.dim)) / 2
    for dtype in DTYPES:
        hf = model.to_hf("mamba2", max_len=8, dtype=dtype)  # seed 4's driven cubic: a convolution
        error = np.abs(run(hf, xs) - model(xs)).max()
        assert error <= hf.config.lsrl_io["tolerance"], (dtype, error)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mamba2_every_kind_of_state_matches_the_interpreter(dtype):
    model = lsrl.compile(every_state_program())
    hf = model.to_hf("mamba2", max_len=16, dtype=dtype)
    assert type(hf).__name__ == "Mamba2ForCausalLM" and hf.config.head_dim == 1
    xs = np.random.default_rng(1).uniform(-2, 2, (2, 16, 2))
    error = np.abs(run(hf, xs) - model(xs)).max()
    assert error <= hf.config.lsrl_io["tolerance"]
    assert error < 1e-4  # measured 6e-6: floating-point scans, as Mamba's (module doc)


def test_mamba2_stepwise_decoding_and_from_pretrained(tmp_path):
    from transformers import AutoModelForCausalLM

    model = lsrl.compile(every_state_program())
    hf = model.to_hf("mamba2", max_len=8)
    embeds = lsrl.hf.inputs(hf, np.random.default_rng(2).uniform(-2, 2, (1, 8, 2)))["inputs_embeds"]
    lsrl.hf.save(hf, tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    with torch.no_grad():
        full = hf(inputs_embeds=embeds).logits
        assert torch.equal(loaded(inputs_embeds=embeds).logits, full)
        stepwise = stepwise_logits(hf, embeds)
    assert torch.allclose(stepwise, full, rtol=0, atol=hf.config.lsrl_io["tolerance"])


def random_listing2_case(n, seed, vocabulary=5, keys=3):
    """Listing 2 (robust, tokens 0..vocabulary) with a random map of ``keys`` keys, prompted with each key."""
    rng = random.Random(seed)
    chosen = rng.sample(list(itertools.product(range(vocabulary + 1), repeat=n)), keys)
    mapping = {key: tuple(rng.randint(0, vocabulary) for _ in range(n)) for key in chosen}
    xs = np.array([discrete_prompt(mapping, key) for key in chosen]).astype(float)
    return lsrl.compile(discrete_approximator(n, robust=True, vocabulary=vocabulary)), mapping, xs


@pytest.mark.parametrize("arch,n,dtype", [("mamba2", 2, torch.float32), ("mamba2", 2, torch.float64),
                                          ("mamba2", 3, torch.float32), ("mamba2", 3, torch.float64),
                                          ("mamba", 3, torch.float32)])
@pytest.mark.slow
def test_listing2_answers_every_query_exactly_and_is_proved_so(arch, n, dtype):
    """value_bounds bounds Listing 2's output registers' drive by 7e5 (n = 2) to 2e9 (n = 3) where its values
    are tokens; relational_bounds by the tokens: the scales follow the bounds (in Mamba-2 gated down, module
    doc), every value is on a grid (the permutation counters read from the phase), and the builder proves it
    (stated tolerance 0)."""
    model, mapping, xs = random_listing2_case(n, seed=10 * n + DTYPES.index(dtype), keys=5 - n)
    hf = model.to_hf(arch, max_len=xs.shape[1], dtype=dtype)
    assert hf.config.lsrl_io["tolerance"] == 0.0
    out = run(hf, xs)
    assert np.array_equal(out, np.asarray(model(xs, exact=True), dtype=float))  # every output, not only the answers
    assert [tuple(answer) for answer in np.rint(out[:, -n:, 0]).astype(int)] == list(mapping.values())


@pytest.mark.slow
def test_mamba2_listing2_stepwise_decoding_equals_the_full_forward():
    model, _, xs = random_listing2_case(2, seed=7)
    hf = model.to_hf("mamba2", max_len=xs.shape[1])
    ids = lsrl.hf.inputs(hf, xs)["input_ids"]
    with torch.no_grad():
        full = hf(input_ids=ids).logits
        step = hf(input_ids=ids[:, :1], use_cache=True)
        logits = [step.logits]
        for t in range(1, ids.shape[1]):
            step = hf(input_ids=ids[:, t:t + 1], cache=step.cache, use_cache=True)
            logits.append(step.logits)
    assert torch.equal(torch.cat(logits, 1), full)


@pytest.mark.slow
def test_listing2_paper_constants_are_refused_naming_a_node():
    """The paper's constants (mu = 1000 steps on a global counter, lambda = 1e10) give value_bounds of 1e27
    and more, where no float32 gate saturates; relational_bounds keeps the values small, but the rounding
    error of the steep steps then exceeds their headroom: refused either way, naming the node."""
    model = lsrl.compile(discrete_approximator(2, vocabulary=5))
    for arch in ("mamba", "mamba2"):
        with pytest.raises(lsrl.LsrlError, match=r"^\w+: .*beyond what its bound \(\d+\) allows"):
            model.to_hf(arch, max_len=14)


def test_silu_halves_a_tiny_gate_exactly_in_float32():
    """Mamba-2's small gates (module doc): silu(2 g) == g for powers of two g <= 2**-26 in float32 (the
    vectorised and the scalar path); at 2**-20 it is not."""
    from lsrl.hf.mamba2 import SMALL_GATE

    gates = torch.tensor([2 * SMALL_GATE * 2.0 ** -e for e in range(0, 100, 9)] * 9, dtype=torch.float32)
    assert torch.equal(torch.nn.functional.silu(gates), gates / 2)
    for gate in gates[:12]:
        assert torch.nn.functional.silu(gate.reshape(1)).item() == gate.item() / 2
    assert torch.nn.functional.silu(torch.tensor([2.0 ** -20])).item() != 2.0 ** -21


@pytest.mark.parametrize("arch", ["mamba", "mamba2", "hawk"])
def test_a_driveless_state_is_a_fixed_sequence_of_the_phase(arch):
    """lsrl.hf.lowering: a state the input does not drive (eigenvalue -2: 1, -2, 4, ... is no decay) is
    read from the phase indicators while max_len <= 64, exactly; beyond, refused naming the state."""
    x = lsrl.Input(1, name="x", bounds=(0, 3), integer=True)
    growth = lsrl.LinState(x, [[-2]], [[0]], init_state=[1], name="growth")
    model = lsrl.compile(lsrl.ForEach(lsrl.Concat([growth, x])))
    xs = np.random.default_rng(3).integers(0, 4, (2, 10, 1)).astype(float)
    hf = model.to_hf(arch, max_len=10)
    assert np.array_equal(run(hf, xs), np.asarray(model(xs, exact=True), dtype=float))
    with pytest.raises(lsrl.LsrlError, match=r"LinState '\w+'.*eigenvalue -2.*no period <= 64"):
        model.to_hf(arch, max_len=65)
