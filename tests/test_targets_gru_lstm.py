"""GRU (App. C) and LSTM (App. D) targets: PyTorch's cells with ReLU activations, equal to the interpreter."""

import random
from functools import lru_cache

import numpy as np
import pytest
import torch

import lsrl
from conftest import library_program, max_relative_difference, random_map, run_module as run
from lsrl.errors import SequenceError
from lsrl.programs import discrete_prompt
from lsrl.targets.blocks import Block, BlockStack, Dense, to_blocks
from lsrl.targets.gru_lstm import ReluGRU, ReluLSTM, build_gru, build_lstm, layer_report
from test_random_programs import generate_program

BUILDERS = {"gru": build_gru, "lstm": build_lstm}
ARCHS = tuple(BUILDERS)


@lru_cache(maxsize=None)
def compiled(kind, variant="multiplicative"):
    program = library_program(kind, variant)
    return program, to_blocks(lsrl.compile(program))


@lru_cache(maxsize=None)
def built(arch, kind, variant="multiplicative"):
    return BUILDERS[arch](compiled(kind, variant)[1])


def assert_matches(module, stack, program, xs):
    out = run(module, xs)
    assert max_relative_difference(out, stack(xs)) <= 1e-9
    assert max_relative_difference(out, program(xs)) <= 1e-9
    return out


# ---- the cells are PyTorch's, with ReLU in place of sigmoid and tanh ------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_one_layer_has_torch_parameter_names_and_shapes(arch):
    ours = (ReluGRU if arch == "gru" else ReluLSTM)(5, [7])
    stock = (torch.nn.GRU if arch == "gru" else torch.nn.LSTM)(5, 7)
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in stock.named_parameters()
    ]
    assert ours.activation == "relu" and "ReLU in place of" in type(ours).__doc__
    assert "h0_l0" in dict(ours.named_buffers()) and (arch == "gru") != ("c0_l0" in dict(ours.named_buffers()))


def _copy_stock(arch, stock, ours, layers):
    with torch.no_grad():
        for k in range(layers):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(ours, f"{name}_l{k}").copy_(getattr(stock, f"{name}_l{k}"))


@pytest.mark.parametrize("arch", ARCHS)
def test_with_sigmoid_and_tanh_the_cells_equal_torch_nn(arch):
    torch.manual_seed(0)
    stock_type = torch.nn.GRU if arch == "gru" else torch.nn.LSTM
    stock = stock_type(4, 6, num_layers=2, batch_first=True, dtype=torch.float64)
    ours = (ReluGRU if arch == "gru" else ReluLSTM)(4, [6, 6], activations=("sigmoid", "tanh"))
    _copy_stock(arch, stock, ours, 2)
    h0 = torch.randn(2, 6, dtype=torch.float64)
    c0 = torch.randn(2, 6, dtype=torch.float64)
    with torch.no_grad():
        for k in range(2):
            getattr(ours, f"h0_l{k}").copy_(h0[k])
            if arch == "lstm":
                getattr(ours, f"c0_l{k}").copy_(c0[k])
        x = torch.randn(3, 9, 4, dtype=torch.float64)
        initial = (h0[:, None].expand(2, 3, 6).contiguous(),)
        if arch == "lstm":
            initial = (initial + (c0[:, None].expand(2, 3, 6).contiguous(),),)
        expected, _ = stock(x, *initial)
        torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-12)


def _hand_gru(x, w_ih, w_hh, b_ih, b_hh, h, act):
    out = []
    for t in range(x.shape[1]):
        gi, gh = x[:, t] @ w_ih.T + b_ih, h @ w_hh.T + b_hh
        H = h.shape[1]
        r = act(gi[:, :H] + gh[:, :H])
        z = act(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = act(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        h = (1 - z) * n + z * h
        out.append(h)
    return torch.stack(out, 1)


def _hand_lstm(x, w_ih, w_hh, b_ih, b_hh, h, c, act):
    out = []
    for t in range(x.shape[1]):
        gates = x[:, t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        i, f, g, o = gates.chunk(4, dim=1)
        c = act(f) * c + act(i) * act(g)
        h = act(o) * act(c)
        out.append(h)
    return torch.stack(out, 1)


@pytest.mark.parametrize("arch", ARCHS)
def test_relu_cells_equal_a_hand_written_pytorch_convention_cell(arch):
    """Different hidden sizes per layer; random weights, including the recurrent ones."""
    generator = torch.Generator().manual_seed(1)
    sizes = [5, 3]
    ours = (ReluGRU if arch == "gru" else ReluLSTM)(2, sizes)
    with torch.no_grad():
        for name, tensor in list(ours.named_parameters()) + list(ours.named_buffers()):
            tensor.copy_(0.3 * torch.randn(tensor.shape, generator=generator, dtype=torch.float64))
        x = torch.randn(2, 7, 2, generator=generator, dtype=torch.float64)
        expected = x
        for k in range(len(sizes)):
            t = ours.layer_tensors(k)
            h = t["h0"].expand(2, -1)
            args = (expected, t["weight_ih"], t["weight_hh"], t["bias_ih"], t["bias_hh"], h)
            if arch == "gru":
                expected = _hand_gru(*args, torch.relu)
            else:
                expected = _hand_lstm(*args, t["c0"].expand(2, -1), torch.relu)
        torch.testing.assert_close(ours(x), expected, rtol=1e-12, atol=1e-12)


# ---- compiled programs: module == BlockStack == interpreter -------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_more_ones_than_zeros(arch):
    program, stack = compiled("more_ones")
    bits = np.array([[[random.Random(i).randint(0, 1)] for i in range(j, j + 30)] for j in range(4)], dtype=float)
    out = assert_matches(built(arch, "more_ones"), stack, program, bits)
    np.testing.assert_array_equal(out, program(bits))


@pytest.mark.parametrize("variant", lsrl.IFELSE_VARIANTS)
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.slow
def test_discrete_approximator_every_token_right(arch, variant):
    program, stack = compiled("discrete", variant)
    module = built(arch, "discrete", variant)
    rng = random.Random(5 + lsrl.IFELSE_VARIANTS.index(variant))
    tokens = np.array([[[rng.randint(0, 10)] for _ in range(30)] for _ in range(3)], dtype=float)
    assert_matches(module, stack, program, tokens)
    mapping = random_map(rng, 3, pairs=8)
    prompts = np.stack([discrete_prompt(mapping, query=key) for key in mapping]).astype(float)
    out = assert_matches(module, stack, program, prompts)
    assert np.array_equal(np.round(out[:, -3:, 0]), np.array(list(mapping.values()), dtype=float))


@pytest.mark.parametrize("variant", lsrl.IFELSE_VARIANTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_continuous_approximator(arch, variant):
    program, stack = compiled("continuous", variant)
    rng = np.random.default_rng(3)
    if variant.startswith("multiplicative"):
        xs = rng.random((4, 20, 5))  # any real input
    else:
        xs = rng.integers(0, 65, size=(4, 20, 5)) / 64  # dyadic: see test_programs' float tolerance note
    xs[:, 1::2, 0] = 1 / 8
    assert_matches(built(arch, "continuous", variant), stack, program, xs)


@pytest.mark.parametrize("seed", range(100))
def test_random_programs(seed):
    program = generate_program(random.Random(seed)).program
    stack = to_blocks(lsrl.compile(program))
    xs = np.random.default_rng(seed).integers(-8, 9, size=(2, 7, program.input.dim)) / 4
    for build in BUILDERS.values():
        assert_matches(build(stack), stack, program, xs)


# ---- structure ----------------------------------------------------------------------------------


def _roles(module):
    return [role for _, role in module.roles]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("k", [1, 2, 4])
def test_one_linstate_with_mlp_depth_k_gives_k_plus_1_layers(arch, k):
    x = lsrl.Input(2)
    h = lsrl.LinState(x, [[1, 0.5], [0, -1]], [[1, 0], [1, 1]], b=[0.5, -1])
    for i in range(k):
        h = lsrl.ReLU(lsrl.Linear(h, [[1, -1], [0.5, 2]], b=[i, -1]))
    program = lsrl.ForEach(h)
    stack = to_blocks(lsrl.compile(program))
    assert len(stack.blocks) == 1 and len(stack.blocks[0].phi) == k and stack.blocks[0].gamma is None
    module = BUILDERS[arch](stack)
    assert _roles(module) == ["state"] + ["mlp"] * k
    xs = np.random.default_rng(k).normal(size=(2, 9, 2))
    assert_matches(module, stack, program, xs)


def _dense(rng, rows, cols, relu):
    return Dense(rng.normal(size=(rows, cols)), rng.normal(size=rows), relu)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("phi_depth,gamma_depth", [(3, 1), (1, 3), (0, 2), (2, 0), (0, 0)])
def test_gated_block_with_mlp_depth_k_gives_k_plus_2_layers(arch, phi_depth, gamma_depth):
    """phi and gamma of different depths (the shorter is passed on), last Dense without ReLU."""
    rng = np.random.default_rng(phi_depth * 10 + gamma_depth)
    out = 4
    d_in = 3 if gamma_depth else out  # gamma = [] is the identity: gamma(x) = x
    d = 5 if phi_depth else out
    phi = [_dense(rng, out if i == phi_depth - 1 else 5, d if i == 0 else 5, i < phi_depth - 1)
           for i in range(phi_depth)]
    gamma = [_dense(rng, out if i == gamma_depth - 1 else 6, d_in if i == 0 else 6, i < gamma_depth - 1)
             for i in range(gamma_depth)]
    block = Block(0.5 * rng.normal(size=(d, d)), rng.normal(size=(d, d_in)), rng.normal(size=d), rng.normal(size=d),
                  phi=phi, gamma=gamma)
    stack = BlockStack(d_in, [block])
    module = BUILDERS[arch](stack, gate_bound=64) if arch == "gru" else BUILDERS[arch](stack)
    k = max(phi_depth, gamma_depth)
    assert _roles(module) == ["state"] + ["mlp"] * k + ["product"]
    xs = rng.normal(size=(2, 8, d_in))
    out = run(module, xs)
    assert max_relative_difference(out, stack(xs)) <= 1e-9


@pytest.mark.parametrize("arch", ARCHS)
def test_every_block_has_k_plus_2_or_k_plus_1_layers(arch):
    _, stack = compiled("discrete", "multiplicative")
    module = built(arch, "discrete", "multiplicative")
    for index, block in enumerate(stack.blocks):
        k = max(len(block.phi), len(block.gamma or []))
        layers = [role for b, role in module.roles if b == index]
        assert len(layers) == (k + 2 if block.gamma is not None else k + 1)


@pytest.mark.parametrize("arch", ARCHS)
def test_layer_report(arch):
    module = built(arch, "continuous")
    rows = layer_report(module)
    layers = [row for row in rows if row["kind"] == arch]
    assert [row["layer"] for row in layers] == list(range(len(module.rnn.hidden_sizes)))
    assert [row["hidden"] for row in layers] == module.rnn.hidden_sizes
    assert all(row["nonzeros"] > 0 for row in rows)
    assert rows[-1]["kind"] == "readout" and rows[-1]["hidden"] == 2
    total = sum(int(torch.count_nonzero(t)) for t in list(module.parameters()) + list(module.buffers())
                if t.dtype == torch.float64)
    assert sum(row["nonzeros"] for row in rows) == total


# ---- the GRU's gate bound -------------------------------------------------------------------------


def _gate_program(scale):
    x = lsrl.Input(1)
    s = lsrl.LinState(x, [[1]], [[1]])
    return lsrl.ForEach(lsrl.Multi(lsrl.Concat([scale * s, x - 0.5]), name="gate"))


def test_gru_gate_bound_is_checked_and_can_be_raised():
    program = _gate_program(100)
    stack = to_blocks(lsrl.compile(program))
    xs = np.full((1, 40, 1), 1.0)  # the gate factor reaches 100 * 40 = 4000
    with pytest.raises(SequenceError, match="Multi 'gate'.*gate_bound"):
        run(build_gru(stack), xs)
    assert build_gru(stack, gate_bound=5000).gate_bound == 8192
    assert_matches(build_gru(stack, gate_bound=5000), stack, program, xs)
    assert_matches(build_lstm(stack), stack, program, xs)  # the LSTM multiplies without a bound
    assert_matches(build_gru(stack), stack, program, xs[:, :10])  # 1000 < 1024: fine
