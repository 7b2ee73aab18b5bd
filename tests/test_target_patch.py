"""Interventions on the torch targets by program node (``net(xs, patch={node: values})``), checked
against the same intervention on the program: ``prog(xs, exact=True, patch={node: donor})`` with
``donor = prog.trace(other_xs, exact=True)[node]``, to 1e-9 relative (floored at 1), for every node
of ``net.patchable`` on every architecture."""

import random
from functools import lru_cache

import numpy as np
import pytest
import torch

import lsrl
from conftest import random_map
from lsrl.programs import conditional_reset, discrete_approximator, discrete_prompt, parity
from lsrl.targets import ARCHITECTURES, NONLINEAR_STATE, STOCK, UNGATED
from test_random_programs import _as_object_array, _generated, _inputs_for

# the targets with unit labels (the stock LSTM / GRU have none: tests/test_targets_stock_rnn.py)
ARCHITECTURES = tuple(arch for arch in ARCHITECTURES if arch not in STOCK)
NONLINEAR_STATE = tuple(arch for arch in NONLINEAR_STATE if arch not in STOCK)
TOLERANCE = 1e-9
SEEDS = tuple(range(16))


def exact_case(program, xs, other):
    """``(program, model, xs, donor)``: ``xs`` and ``other`` as exact object arrays of one length."""
    return program, lsrl.compile(program, progress=False), xs, program.trace(other, exact=True)


@lru_cache(maxsize=None)
def random_case(seed):
    generator = _generated(seed)
    first, second = _inputs_for(seed, generator.d_in)
    steps = min(len(first), len(second))
    return exact_case(generator.program, _as_object_array(first[:steps])[None], _as_object_array(second[:steps])[None])


@lru_cache(maxsize=None)
def listing2_case():
    mapping = random_map(random.Random(5), 2, pairs=3)
    xs, other = (np.stack([discrete_prompt(mapping, query=key)]) for key in list(mapping)[:2])
    return exact_case(discrete_approximator(2), xs.astype(object), other.astype(object))


@lru_cache(maxsize=None)
def relu_state_case(which):
    program = {"parity": parity, "conditional_reset": lambda: conditional_reset(3)}[which]()
    xs, other = np.random.default_rng(11).integers(0, 2 if which == "parity" else 4, size=(2, 2, 9, 1))
    return exact_case(program, xs.astype(object), other.astype(object))


def target(model, arch, **options):
    """``model`` as ``arch``, or its gated form where ``arch`` has no gate and the program a Multi."""
    if arch in UNGATED and any(layer.kind == "Multi" for layer in model.layers):
        arch = "gated_" + arch
    return model.to_torch(arch, **options)


def relative_error(got, expected) -> float:
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(got - expected) / np.maximum(1.0, np.abs(expected)), initial=0.0))


def check_every_patch(program, model, xs, donor, net) -> tuple:
    """Patch every node of ``net.patchable``; ``(patches, patches that changed the output)``."""
    floats = torch.as_tensor(np.asarray(xs, dtype=np.float64))
    with torch.no_grad():
        plain = net(floats, check_bounds=False).numpy()
    changed = 0
    for name in net.patchable:
        expected = program(xs, exact=True, check_bounds=False, patch={name: donor[name]})
        with torch.no_grad():
            got = net(floats, check_bounds=False, patch={name: donor[name]}).numpy()
        assert relative_error(got, expected) <= TOLERANCE, f"{net.architecture}: patching {name}"
        changed += not np.array_equal(got, plain)
    return len(net.patchable), changed


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_patching_a_target_matches_the_program_on_random_programs(arch):
    patched = changed = 0
    for seed in SEEDS:
        program, model, xs, donor = random_case(seed)
        net = target(model, arch)
        assert set(net.patchable) <= set(model.patchable)
        counts = check_every_patch(program, model, xs, donor, net)
        patched, changed = patched + counts[0], changed + counts[1]
    assert patched >= 15 and changed >= 5, (patched, changed)  # the patches reach the outputs


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.slow
def test_patching_a_target_matches_the_program_on_listing2(arch):
    program, model, xs, donor = listing2_case()
    net = target(model, arch)
    patched, changed = check_every_patch(program, model, xs, donor, net)
    assert patched >= 5 and changed >= 1, (patched, changed)


@pytest.mark.parametrize("arch", NONLINEAR_STATE)
@pytest.mark.parametrize("which", ("parity", "conditional_reset"))
def test_patching_a_relu_state_matches_the_program(arch, which):
    program, model, xs, donor = relu_state_case(which)
    net = model.to_torch(arch)
    states = [layer.name for layer in model.layers if layer.kind == "ReLUState"]
    assert set(states) <= set(net.patchable)  # the state itself is patched, and carried
    patched, changed = check_every_patch(program, model, xs, donor, net)
    assert changed >= 1
    one = {states[0]: donor[states[0]][0]}  # (T, dim) values: the same at every sequence of the batch
    with torch.no_grad():
        got = net(torch.as_tensor(np.asarray(xs, dtype=float)), patch=one).numpy()
    assert relative_error(got, program(xs, exact=True, patch=one)) <= TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("arch", ("hawk", "griffin"))
def test_the_literal_app_e_construction_patches_all_but_its_convolved_states(arch):
    patched = refused = 0
    for seed in SEEDS:
        program, model, xs, donor = random_case(seed)
        net = model.to_torch(arch, construction="app_e", max_len=np.shape(xs)[1])
        patched += check_every_patch(program, model, xs, donor, net)[0]
        for name in net.unpatchable:
            assert name not in net.patchable
            with pytest.raises(lsrl.LsrlError, match="convolution"):
                net(torch.as_tensor(np.asarray(xs, dtype=float)), check_bounds=False, patch={name: donor[name]})
            refused += 1
    assert patched >= 10 and refused >= 5


def test_gru_and_lstm_refuse_the_products_no_unit_holds():
    refused = {"gru": 0, "lstm": 0}
    for seed in SEEDS:
        program, model, xs, donor = random_case(seed)
        for arch in refused:
            net = model.to_torch(arch)
            for name in set(net.unpatchable) & set(model.patchable):
                with pytest.raises(lsrl.LsrlError, match="no unit of the"):
                    net(torch.as_tensor(np.asarray(xs, dtype=float)), check_bounds=False, patch={name: donor[name]})
                refused[arch] += 1
    assert refused["gru"] >= 1 and refused["lstm"] >= 1


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_node_the_target_cannot_patch_is_refused(arch):
    program, model, xs, donor = listing2_case()
    net = target(model, arch)
    floats = torch.as_tensor(np.asarray(xs, dtype=np.float64))
    absent = sorted(set(program.trace(xs, exact=True)) - set(net.patchable))
    assert absent  # the input, at least (layers read it by weights)
    with pytest.raises(lsrl.LsrlError, match=f"'{absent[0]}' cannot be patched"):
        net(floats, patch={absent[0]: donor[absent[0]]})
    with pytest.raises(lsrl.LsrlError, match="cannot patch 'nowhere': neither a program node"):
        net(floats, patch={"nowhere": np.zeros((xs.shape[1], 1))})
    name = net.patchable[0]
    with pytest.raises(lsrl.DimensionError, match=f"patch values for '{name}'"):
        net(floats, patch={name: np.zeros((xs.shape[1] + 1, 1))})
    net.patchable = None  # as a module built without labels
    with pytest.raises(lsrl.LsrlError, match="no net.patchable"):
        net(floats, patch={name: donor[name]})


def test_run_with_cache_patches_program_nodes_too():
    program, model, xs, donor = listing2_case()
    net = model.to_torch("hawk")
    floats = np.asarray(xs, dtype=np.float64)
    key, unit, label = next((key, unit, label) for key, labels in net.labels.items() if key.endswith(".rg_lru")
                            for unit, label in enumerate(labels)
                            if label.role in ("value", "copy") and label.node in net.patchable)  # a carried state
    name = label.node
    outputs, cache = net.run_with_cache(floats[0], patch={name: np.asarray(donor[name][0], dtype=float)})
    with torch.no_grad():
        direct = net(torch.as_tensor(floats), patch={name: donor[name]})[0]
    assert torch.equal(outputs, direct)
    expected = np.asarray(donor[name][0], dtype=float)[:, label.index]
    np.testing.assert_array_equal(cache[key][:, unit].numpy(), expected)  # the cache holds the patched run
    with pytest.raises(lsrl.LsrlError, match="neither a program node of net.patchable nor a sub-layer"):
        net.run_with_cache(floats[0], patch={"nowhere": np.zeros((floats.shape[1], 1))})


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.slow
def test_net_and_run_with_cache_patch_hooks_alike(arch):
    """``net(xs, patch={hook: values})`` takes the hook names of ``run_with_cache`` (gates and carried states
    included) by the same code: both spellings give identical outputs, for every hook, and with a program node in
    the same patch (eight hooks spread over each model: each patched run goes step by step); patching the output
    layer with another input's values gives that input's outputs."""
    program, model, xs, donor = listing2_case()
    net = target(model, arch)
    floats = torch.as_tensor(np.asarray(xs, dtype=np.float64))
    other = torch.as_tensor(np.asarray(program.trace(xs, exact=True)[program.input.name], dtype=np.float64))
    other = other.flip(1)  # another input sequence of the same length
    plain, cache = net.run_with_cache(floats, check_bounds=False)
    other_outputs, other_cache = net.run_with_cache(other, check_bounds=False)
    hooks = [hook for hook in cache if not torch.equal(cache[hook], other_cache[hook])]  # the patch sets something
    tried = hooks[:: -(-len(hooks) // 8)]  # eight hooks spread over the model: states, gates, MLP layers
    changed = 0
    for hook in tried:
        patch = {hook: other_cache[hook]}
        with torch.no_grad():
            direct = net(floats, patch=patch, check_bounds=False)
        cached, _ = net.run_with_cache(floats, patch=patch, check_bounds=False)
        assert torch.equal(direct, cached), hook
        changed += not torch.equal(direct, plain)
    assert changed >= 2
    last = list(cache)[-1]  # the output layer: patched whole, the outputs are the other input's
    with torch.no_grad():
        assert torch.equal(net(floats, patch={last: other_cache[last]}, check_bounds=False), other_outputs)
    node = net.patchable[0]
    both = {node: donor[node], list(cache)[0]: other_cache[list(cache)[0]]}
    with torch.no_grad():
        direct = net(floats, patch=both, check_bounds=False)
    assert torch.equal(direct, net.run_with_cache(floats, patch=both, check_bounds=False)[0])
    with pytest.raises(lsrl.LsrlError, match="cannot patch 'nowhere': neither a program node"):
        net(floats, patch={"nowhere": other_cache[last]})
