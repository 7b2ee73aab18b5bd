"""Unit labels of the torch targets (``net.labels``) checked against the program's trace.

Every module listed in ``net.labels`` is read from ``net.run_with_cache`` (forward hooks; GRU / LSTM
layers, gates and cells recomputed from the weights); a block's state from ``block.states``.
Every label must hold (float64, 1e-9 relative, floored at 1) against the interpreter's values of
the program's nodes, and every unit of a listed module must have one.
"""

import json
import random
from functools import lru_cache

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

import lsrl
from conftest import as_fractions, random_map
from lsrl.compiler.diagonal import eigen_trace, float_diagonal
from lsrl.ir.labels import label_violations
from lsrl.model.folders import write_manifest
from lsrl.programs import conditional_reset, continuous_approximator, discrete_approximator, discrete_prompt, parity
from lsrl.targets import ARCHITECTURES, NONLINEAR_STATE, STOCK, UNGATED
from test_diagonal import STRUCTURES, _state_program
from test_random_programs import _generated

# the targets with unit labels (the stock LSTM / GRU have none: tests/test_targets_stock_rnn.py)
ARCHITECTURES = tuple(arch for arch in ARCHITECTURES if arch not in STOCK)
NONLINEAR_STATE = tuple(arch for arch in NONLINEAR_STATE if arch not in STOCK)
TOLERANCE = 1e-9
BLOCK_ARCHS = ("linear_rnn", "gated_linear_rnn", "rnn", "gated_rnn")
SEEDS = tuple(range(10))


def program_trace(program, xs, exact=False) -> dict:
    """Every node's values per step (``prog.trace``), the inputs' bounds unchecked."""
    return program.trace(xs, exact=exact, check_bounds=False)


def block_states(net, xs) -> dict:
    """``blocks.i.state``: each block's ``s_t``, from the block's own ``states``."""
    outputs, x = {}, torch.as_tensor(xs, dtype=torch.float64)
    with torch.no_grad():
        for index, block in enumerate(net.blocks):
            outputs[f"blocks.{index}.state"] = block.states(x).numpy()
            x = block(x)
    return outputs


def unit_values(net, xs) -> dict:
    """Values of every key of ``net.labels``: ``net.run_with_cache`` (every sub-module, GRU / LSTM
    layers and their gates recomputed from the weights) and the block states."""
    _, outputs = net.run_with_cache(xs, check_bounds=False)
    outputs = {name: value.numpy() for name, value in outputs.items()}
    if net.architecture in BLOCK_ARCHS:
        outputs.update(block_states(net, xs))
    return outputs


def violations(net, xs, trace):
    values = unit_values(net, xs)
    missing = set(net.labels) - set(values)
    assert not missing, f"no values seen for {sorted(missing)}"
    names = sorted(net.labels)
    for name in names:
        labels = net.labels[name]
        assert values[name].shape[-1] == len(labels), f"{name}: {values[name].shape[-1]} units, {len(labels)} labels"
        assert None not in labels, f"{name}: unit {labels.index(None)} has no label"
    return [
        (names[layer], unit, label, reason)
        for layer, unit, label, reason in label_violations(
            [net.labels[n] for n in names], [values[n] for n in names], trace, TOLERANCE
        )
    ]


# ---- programs ----------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def random_case(seed):
    program = _generated(seed).program
    xs = np.random.default_rng(seed).integers(-8, 9, size=(2, 6, program.input.dim)) / 4
    return program, lsrl.compile(program, progress=False), xs


@lru_cache(maxsize=None)
def listing_case(which):
    if which == "listing2":
        program = discrete_approximator(2)
        mapping = random_map(random.Random(5), 2, pairs=3)
        xs = np.stack([discrete_prompt(mapping, query=key) for key in list(mapping)[:2]]).astype(float)
    else:
        program = continuous_approximator(1, 1)
        rng = np.random.default_rng(3)
        xs = rng.integers(0, 65, size=(2, 10, 3)) / 64  # dyadic, as test_targets
        xs[:, 1::2, 0] = 1 / 8
    return program, lsrl.compile(program, progress=False), xs


def cases():
    return [("seed", seed) for seed in SEEDS] + [("listing", "listing1"), ("listing", "listing2")]


def case(kind, which):
    return random_case(which) if kind == "seed" else listing_case(which)


def has_multi(model):
    return any(layer.kind == "Multi" for layer in model.layers)


def built(model, arch):
    if arch in UNGATED and has_multi(model):
        pytest.skip(f"{arch} has no gate; this program has a Multi (covered by the gated targets)")
    return model.to_torch(arch)


# ---- tests -------------------------------------------------------------------------------------




@pytest.mark.parametrize("arch", BLOCK_ARCHS)
@pytest.mark.parametrize("kind,which", cases())
def test_every_label_of_a_block_target_holds(arch, kind, which):
    program, model, xs = case(kind, which)
    if arch in UNGATED and has_multi(model):
        arch = "gated_" + arch  # the ungated targets refuse a Multi; the gated ones cover it
    net = model.to_torch(arch)
    assert violations(net, xs, program_trace(program, xs)) == []


def wrongly_labelled(net, xs):
    """``net`` with one label made false: a unit holding a non-zero ``v`` claimed to hold ``-v``."""
    values = unit_values(net, xs)
    for name, labels in net.labels.items():
        for unit, label in enumerate(labels):
            if label.role in ("value", "copy") and np.any(values[name][..., unit] != 0):
                net.labels[name] = labels[:unit] + [label._replace(role="negated")] + labels[unit + 1:]
                return name, unit
    raise AssertionError("no non-zero labelled unit to falsify")


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_wrong_label_is_caught(arch):
    program, model, xs = random_case(1) if arch in UNGATED else listing_case("listing1")
    net = model.to_torch(arch)
    name, unit = wrongly_labelled(net, xs)
    found = violations(net, xs, program_trace(program, xs))
    assert [(n, u) for n, u, _, _ in found] == [(name, unit)]


# ---- the diagonal model ------------------------------------------------------------------------


def exact_layer_values(model, xs):
    """Every layer's exact output on the dyadic batch ``xs`` (``model.trace``)."""
    return model.trace(np.array(as_fractions(xs), dtype=object), exact=True, check_bounds=False)


def diagonal_trace(program, model, diagonal, xs, exact):
    """The program's trace plus the eigen-coordinates ``mode`` / ``drive`` labels claim."""
    fractions = np.array(as_fractions(xs), dtype=object)
    trace = program_trace(program, fractions if exact else xs, exact)
    extra = eigen_trace(diagonal, fractions, exact_layer_values(model, xs))
    return {**trace, **(extra if exact else {key: value.astype(float) for key, value in extra.items()})}


def rewritten(kind, which):
    """The case's program, model, inputs and ``model.diagonal()`` (None where the model has irrational
    eigenvalues: then the refusal is checked, and the float target below covers the case)."""
    program, model, xs = case(kind, which)
    try:
        diagonal = model.diagonal()
    except lsrl.LsrlError as error:
        assert "no exact diagonal" in str(error)
        diagonal = None
    return program, model, xs, diagonal


@pytest.mark.parametrize("kind,which", cases())
def test_diagonal_model_labels_hold_exactly(kind, which):
    program, model, xs, diagonal = rewritten(kind, which)
    if diagonal is None:
        return
    assert [len(labels) for labels in diagonal.labels] == [layer.dim for layer in diagonal.layers]
    assert all(None not in labels for labels in diagonal.labels)
    trace = diagonal_trace(program, model, diagonal, xs, exact=True)
    assert label_violations(diagonal.labels, exact_layer_values(diagonal, xs), trace) == []


@lru_cache(maxsize=None)
def structured_case(name):
    """A state of known Jordan structure (test_diagonal's STRUCTURES) and a dyadic input batch."""
    _, A, init, b, _, _ = next(s for s in STRUCTURES if s[0] == name)
    program = _state_program(A, init, b)
    xs = np.random.default_rng(7).integers(-8, 9, size=(2, 7, 1)) / 4
    return program, lsrl.compile(program, progress=False), xs


CASCADES = ("counter_of_counter", "chain_of_three_halves", "three_cycle", "chain_and_delay")


@pytest.mark.parametrize("name", CASCADES)
def test_mode_and_drive_units_hold_exactly(name):
    program, model, xs = structured_case(name)
    diagonal = model.diagonal()
    roles = {label.role for labels in diagonal.labels for label in labels}
    assert "mode" in roles and diagonal.eigenbases
    assert ("drive" in roles) == (name in ("counter_of_counter", "chain_of_three_halves", "chain_and_delay"))
    trace = diagonal_trace(program, model, diagonal, xs, exact=True)
    values = exact_layer_values(diagonal, xs)
    assert label_violations(diagonal.labels, values, trace) == []
    # a mode claimed as the state's other mode 0 / 1 is caught
    wrong = [list(labels) for labels in diagonal.labels]
    layer, unit = next(
        (i, u) for i, labels in enumerate(wrong) for u, label in enumerate(labels) if label.role == "mode"
    )
    wrong[layer][unit] = wrong[layer][unit]._replace(index=1 - min(wrong[layer][unit].index, 1))
    assert [(i, u) for i, u, _, _ in label_violations(wrong, values, trace)] == [(layer, unit)]
    net = model.to_torch("diagonal_linear_rnn")
    assert violations(net, xs, diagonal_trace(program, model, float_diagonal(model), xs, exact=False)) == []


@pytest.mark.parametrize("arch", ("gru", "lstm"))
@pytest.mark.parametrize("kind,which", cases())
def test_every_label_of_a_cell_target_holds(arch, kind, which):
    program, model, xs = case(kind, which)
    net = model.to_torch(arch)
    assert violations(net, xs, program_trace(program, xs)) == []


@pytest.mark.slow
@pytest.mark.parametrize("arch,options", [("hawk", {}), ("griffin", {}), ("hawk", {"construction": "app_e"}),
                                          ("griffin", {"construction": "app_e"})])
@pytest.mark.parametrize("kind,which", cases())
def test_every_label_of_a_hawk_target_holds(arch, options, kind, which):
    program, model, xs = case(kind, which)
    if options:
        options = dict(options, max_len=xs.shape[1])
    net = model.to_torch(arch, **options)
    if options:  # App. E runs the compiled model itself
        trace = program_trace(program, xs)
    else:  # the diagonal construction runs model.diagonal(): its mode / drive units
        trace = diagonal_trace(program, model, float_diagonal(model), xs, exact=False)
    assert violations(net, xs, trace) == []


@pytest.mark.parametrize("kind,which", cases())
def test_every_label_of_the_diagonal_target_holds(kind, which):
    program, model, xs = case(kind, which)
    net = model.to_torch("diagonal_linear_rnn")
    trace = diagonal_trace(program, model, float_diagonal(model), xs, exact=False)
    assert violations(net, xs, trace) == []


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_model_without_labels_gives_a_target_without_labels(arch):
    program, model, xs = random_case(1) if arch in UNGATED else listing_case("listing1")
    unlabelled = lsrl.model.compiled.CompiledProgram(model.input, model.layers, model.backend, name=model.name)
    assert unlabelled.to_torch(arch).labels is None
    net = model.to_torch(arch)
    assert net.labels and all(units and all(isinstance(label, lsrl.UnitLabel) for label in units)
                              for units in net.labels.values())


def test_eigen_trace_needs_a_diagonal_model():
    program, model, xs = structured_case("counter_of_counter")
    with pytest.raises(lsrl.LsrlError, match="model.diagonal"):
        eigen_trace(model, xs, exact_layer_values(model, xs))


def saved_and_loaded(model, folder):
    return lsrl.load(model.save(folder))


@pytest.mark.parametrize("which", [9, "chain_and_delay"])  # seed 9: a rewritten state at layer 4
def test_eigenbases_survive_save_and_load_exactly(tmp_path, which):
    program, model, xs = random_case(which) if isinstance(which, int) else structured_case(which)
    diagonal = model.diagonal()
    loaded = saved_and_loaded(diagonal, tmp_path / "diagonal")
    assert diagonal.eigenbases and loaded.eigenbases.keys() == diagonal.eigenbases.keys()
    for name, (index, V_inv, drive) in diagonal.eigenbases.items():
        got = loaded.eigenbases[name]
        assert got[0] == index and got[1].backend is V_inv.backend is lsrl.numbers.EXACT
        assert list(got[1].entries()) == list(V_inv.entries()) and list(got[2].entries()) == list(drive.entries())
    fractions, values = np.array(as_fractions(xs), dtype=object), exact_layer_values(model, xs)
    want, got = eigen_trace(diagonal, fractions, values), eigen_trace(loaded, fractions, values)
    assert want.keys() == got.keys() and all(np.array_equal(got[key], want[key]) for key in want)
    trace = diagonal_trace(program, model, loaded, xs, exact=True)
    assert label_violations(loaded.labels, exact_layer_values(loaded, xs), trace) == []


def test_float_eigenbases_survive_save_and_load(tmp_path):
    program, model, xs = random_case(1)  # irrational eigenvalues: a numerical float64 eigenbasis
    diagonal = float_diagonal(model)
    loaded = saved_and_loaded(diagonal, tmp_path / "diagonal")
    assert loaded.backend == "float" and loaded.eigenbases.keys() == diagonal.eigenbases.keys()
    want, got = (diagonal_trace(program, model, d, xs, exact=False) for d in (diagonal, loaded))
    assert want.keys() == got.keys() and any(key[1] == "mode" for key in want if isinstance(key, tuple))
    assert all(np.max(np.abs(got[key] - want[key]), initial=0) <= 1e-12 for key in want)
    assert label_violations(loaded.labels, loaded.trace(xs, check_bounds=False), got, TOLERANCE) == []


def test_a_model_that_is_not_diagonal_saves_no_eigenbases(tmp_path):
    program, model, xs = structured_case("counter_of_counter")
    folder = model.save(tmp_path / "plain")
    assert "eigenbases" not in json.loads((folder / "model.json").read_text())
    with pytest.raises(lsrl.LsrlError, match="model.diagonal"):
        eigen_trace(lsrl.load(folder), xs, exact_layer_values(model, xs))
    older = model.diagonal().save(tmp_path / "older")  # a diagonal model written before eigenbases were saved
    structure = json.loads((older / "model.json").read_text())
    del structure["eigenbases"]
    (older / "model.json").write_text(json.dumps(structure))
    write_manifest(older)
    assert not hasattr(lsrl.load(older), "eigenbases")


def _pointing_v_inv_at_drive(entry):
    entry["V_inv"] = entry["drive"]


BAD_EIGENBASES = [
    (_pointing_v_inv_at_drive, r"\(layer 's'\): V_inv must be square"),
    (lambda entry: entry.pop("index"), r"\(layer 's'\): missing field 'index'"),
    (lambda entry: entry.update(drive=entry["V_inv"]), r"\(layer 's'\): drive has 2 columns for an input of 1"),
    (lambda entry: entry.update(index=-1), r"\(layer 's'\): field 'index' must be in"),
    (lambda entry: entry.update(backend="double"), r"\(layer 's'\): field 'backend': unknown backend"),
    (lambda entry: entry.update(layer="t"), r"\(layer 't'\): field 'layer' must name a rewritten LinState"),
    (lambda entry: entry.update(drive=7), r"\(layer 's'\): field 'drive' must be str"),
]


@pytest.mark.parametrize("spoil,message", BAD_EIGENBASES)
def test_a_bad_eigenbases_entry_names_the_layer(tmp_path, spoil, message):
    folder = structured_case("counter_of_counter")[1].diagonal().save(tmp_path / "diagonal")
    structure = json.loads((folder / "model.json").read_text())
    spoil(structure["eigenbases"][0])
    (folder / "model.json").write_text(json.dumps(structure))
    write_manifest(folder)
    with pytest.raises(lsrl.ModelFileError, match="eigenbases entry 0 " + message):
        lsrl.load(folder)


def test_a_missing_eigenbasis_tensor_names_the_layer_and_field(tmp_path):
    folder = structured_case("counter_of_counter")[1].diagonal().save(tmp_path / "diagonal")
    tensors = load_file(str(folder / "weights.safetensors"))
    del tensors["eigenbases.0.drive.rows"]
    save_file(tensors, str(folder / "weights.safetensors"))
    write_manifest(folder)
    with pytest.raises(lsrl.ModelFileError, match=r"\(layer 's'\): drive: field 'rows'.*missing"):
        lsrl.load(folder)


def not_listed(net, name) -> bool:
    """The sub-modules ``net.labels`` leaves out: Griffin's pass-through attention's projections (never
    run), App. E's inner Conv1d (channels first), a GRU / LSTM stack (listed per layer, ``rnn.l{k}``)."""
    parent = type(net.get_submodule(name.rsplit(".", 1)[0]) if "." in name else net).__name__
    own = type(net.get_submodule(name)).__name__
    return (parent, name.split(".")[-1]) in {("LocalMQA", p) for p in ("W_q", "W_k", "W_v", "W_o")} | {
        ("TemporalConv1d", "conv")} or own in ("ReluGRU", "ReluLSTM")


@pytest.mark.parametrize(
    "arch,options", [(arch, {}) for arch in ARCHITECTURES] + [("griffin", {"construction": "app_e"})]
)
def test_every_module_that_computes_is_listed(arch, options):
    program, model, xs = random_case(1) if arch in UNGATED else listing_case("listing2")
    net = model.to_torch(arch, **(dict(options, max_len=xs.shape[1]) if options else {}))
    unlisted = [
        name for name, module in net.named_modules()
        if name and name not in net.labels and not isinstance(module, torch.nn.ModuleList)
    ]
    assert [name for name in unlisted if not not_listed(net, name)] == []
    assert (arch in ("gru", "lstm")) == any(name == "rnn" for name in unlisted)


@lru_cache(maxsize=None)
def relu_state_case(which):
    """A program with a ReLUState (``lsrl.programs.nonlinear``) and integer inputs it accepts."""
    program = {"parity": parity, "conditional_reset": lambda: conditional_reset(3)}[which]()
    xs = np.random.default_rng(11).integers(0, 2 if which == "parity" else 4, size=(2, 9, 1)).astype(float)
    return program, lsrl.compile(program, progress=False), xs


@pytest.mark.parametrize("arch", NONLINEAR_STATE)
@pytest.mark.parametrize("which", ("parity", "conditional_reset"))
def test_every_label_holds_on_a_relu_state(arch, which):
    program, model, xs = relu_state_case(which)
    assert any(layer.kind == "ReLUState" for layer in model.layers)
    net = model.to_torch(arch)
    assert violations(net, xs, program_trace(program, xs)) == []
