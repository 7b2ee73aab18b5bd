"""Linear RNN, Gated Linear RNN, RNN and Gated RNN modules against the interpreter."""

import random
from functools import lru_cache

import numpy as np
import pytest
import torch

import lsrl
from conftest import library_program, max_relative_difference, random_map, run_module as run
from lsrl.programs import discrete_prompt
from lsrl.targets import to_blocks
from test_random_programs import generate_program

OWN_TARGETS = ("linear_rnn", "gated_linear_rnn", "rnn", "gated_rnn")
GATED = ("gated_linear_rnn", "gated_rnn")


@lru_cache(maxsize=None)
def compiled(kind, variant="multiplicative"):
    program = library_program(kind, variant)
    return program, lsrl.compile(program)


def test_linear_rnn_of_fig_1_is_one_block_in_stock_rnn():
    program, model = compiled("more_ones")
    bits = np.array([[[random.Random(i).randint(0, 1)] for i in range(j, j + 30)] for j in range(4)], dtype=float)
    for arch in OWN_TARGETS:
        net = model.to_torch(arch)
        assert len(net.blocks) == 1
        np.testing.assert_array_equal(run(net, bits), program(bits))
    assert isinstance(model.to_torch("rnn").blocks[0].rnn, torch.nn.RNN)
    assert model.to_torch("rnn").blocks[0].rnn.nonlinearity == "relu"


def module_or_refusal(model, arch, variant):
    """The module, or None after checking that an ungated target refuses a gated program."""
    if variant.startswith("multiplicative") and arch not in GATED:
        with pytest.raises(lsrl.LsrlError, match="Multi"):
            model.to_torch(arch)
        return None
    return model.to_torch(arch)


@pytest.mark.parametrize("arch", OWN_TARGETS)
@pytest.mark.parametrize("variant", lsrl.IFELSE_VARIANTS)
@pytest.mark.slow
def test_discrete_approximator_every_token_right(arch, variant):
    program, model = compiled("discrete", variant)
    net = module_or_refusal(model, arch, variant)
    if net is None:
        return
    mapping = random_map(random.Random(5), 3, pairs=8)
    batch = np.stack([discrete_prompt(mapping, query=key) for key in mapping]).astype(float)
    out = run(net, batch)
    assert max_relative_difference(out, program(batch)) <= 1e-9
    assert np.array_equal(np.round(out[:, -3:, 0]), np.array(list(mapping.values()), dtype=float))


@pytest.mark.parametrize("arch", OWN_TARGETS)
@pytest.mark.parametrize("variant", lsrl.IFELSE_VARIANTS)
def test_continuous_approximator(arch, variant):
    program, model = compiled("continuous", variant)
    net = module_or_refusal(model, arch, variant)
    if net is None:
        return
    rng = np.random.default_rng(3)
    xs = rng.integers(0, 65, size=(4, 20, 5)) / 64  # dyadic: see test_programs' float tolerance note
    xs[:, 1::2, 0] = 1 / 8
    assert max_relative_difference(run(net, xs), program(xs)) <= 1e-9


@pytest.mark.parametrize("seed", range(100))
def test_random_programs_on_every_own_target(seed):
    program = generate_program(random.Random(seed)).program
    model = lsrl.compile(program)
    rng = np.random.default_rng(seed)
    xs = rng.integers(-8, 9, size=(2, 6, program.input.dim)) / 4
    expected = program(xs)
    assert max_relative_difference(to_blocks(model)(xs), expected) <= 1e-9
    gated = to_blocks(model).gated
    for arch in OWN_TARGETS:
        if gated and arch not in GATED:
            with pytest.raises(lsrl.LsrlError, match="Multi"):
                model.to_torch(arch)
            continue
        assert max_relative_difference(run(model.to_torch(arch), xs), expected) <= 1e-9


def test_multi_needs_a_gated_target_and_the_error_names_it():
    x = lsrl.Input(2, name="x")
    program = lsrl.ForEach(lsrl.Multi(lsrl.Concat([x, x]), name="square"))
    model = lsrl.compile(program)
    with pytest.raises(lsrl.LsrlError, match="square"):
        model.to_torch("linear_rnn")
    with pytest.raises(lsrl.LsrlError, match="square"):
        model.to_torch("rnn")
    xs = np.array([[[1.5, -2.0], [0.5, 3.0], [-4.0, 0.25]]])
    assert max_relative_difference(run(model.to_torch("gated_rnn"), xs), program(xs)) <= 1e-9  # x * x, as asked


def test_unknown_architecture():
    _, model = compiled("more_ones")
    with pytest.raises(lsrl.LsrlError, match="transformer"):
        model.to_torch("transformer")


def test_parameters_are_the_compiled_weights():
    _, model = compiled("more_ones")
    net = model.to_torch("linear_rnn")
    state = model.layers[0]
    np.testing.assert_array_equal(net.blocks[0].A.detach().numpy(), state.A.to_numpy())
    np.testing.assert_array_equal(net.blocks[0].B.detach().numpy(), state.B.to_numpy())
    assert net.blocks[0].A.dtype == torch.float64
