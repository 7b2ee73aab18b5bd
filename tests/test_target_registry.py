"""The target registry (lsrl.targets.registry) and the model's front doors (lsrl.model.extensions)."""

from __future__ import annotations

import dataclasses

import pytest

import lsrl
from lsrl.errors import InternalError, LsrlError
from lsrl.model import extensions
from lsrl.programs import more_ones_than_zeros
from lsrl.targets import (
    ARCHITECTURES, NONLINEAR_STATE, OPTIONS, STOCK, TARGETS, UNGATED, Target, inspect, layer_report, register,
)
from lsrl.targets.registry import resolve_reference


@pytest.fixture(scope="module")
def model():
    return lsrl.compile(more_ones_than_zeros())


def test_the_derived_names_read_the_registry():
    assert ARCHITECTURES == (
        "linear_rnn", "gated_linear_rnn", "diagonal_linear_rnn", "rnn", "gated_rnn", "gru", "lstm", "hawk", "griffin",
        "stock_lstm", "stock_gru",
    )
    assert UNGATED == ("linear_rnn", "rnn")
    assert NONLINEAR_STATE == ("rnn", "gated_rnn", "gru", "lstm", "stock_lstm", "stock_gru")
    assert STOCK == ("stock_lstm", "stock_gru")
    stock = ("max_len", "dtype", "amplitude", "gate_amplitude", "gain", "runtime")
    assert OPTIONS == {"gru": ("gate_bound",), "hawk": ("max_len", "construction"),
                       "griffin": ("max_len", "window", "heads", "construction"),
                       "stock_lstm": stock, "stock_gru": stock}
    # one registry: the model looks up what lsrl.targets registers
    assert dict(TARGETS) == {name: b for name, b in extensions.BUILDERS.items() if b.door == "to_torch"}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_entry_names_functions_that_exist(arch):
    target = TARGETS[arch]
    assert target.name == arch
    assert callable(resolve_reference(target.builder)) and callable(resolve_reference(target.report))
    assert "``" in target.labels  # names sub-modules


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_layer_report_goes_through_the_module_architecture(model, arch):
    net = model.to_torch(arch, **({"max_len": 8} if arch in STOCK else {}))
    assert net.architecture == arch
    rows = layer_report(net)
    assert rows and rows == resolve_reference(TARGETS[arch].report)(net)
    assert {"layer", "kind", "hidden", "nonzeros"} <= set(rows[0])


def test_layer_report_refuses_a_module_that_is_no_target():
    import torch

    with pytest.raises(LsrlError, match="needs a module built by to_torch, got a Linear"):
        layer_report(torch.nn.Linear(2, 2))


def test_a_registered_target_is_built_by_model_to_torch(model):
    """Adding a target is one registry entry: model.to_torch, inspect and the requirements follow it."""
    entry = Target("test_ungated_copy", "lsrl.targets.recurrent:build_linear_rnn",
                   "lsrl.targets.recurrent:block_report", "``blocks.{i}``", options=("unused",), gated=False)
    register(entry)
    try:
        assert "test_ungated_copy" in TARGETS
        net = model.to_torch("test_ungated_copy")
        reference = model.to_torch("linear_rnn")
        assert all((a == b).all() for a, b in zip(net.state_dict().values(), reference.state_dict().values()))
        with pytest.raises(LsrlError, match="'test_ungated_copy' takes no option 'max_len'; its options: unused"):
            model.to_torch("test_ungated_copy", max_len=3)
        assert "test_ungated_copy" not in inspect(model)  # inspect's default list is ARCHITECTURES
    finally:
        del extensions.BUILDERS["test_ungated_copy"]


def test_registering_a_different_target_under_a_taken_name_is_a_bug():
    with pytest.raises(InternalError, match="two builders are registered as 'gru'"):
        register(dataclasses.replace(TARGETS["gru"], options=()))
    assert register(TARGETS["gru"]) is TARGETS["gru"]  # the same record again (a re-import) is harmless


def test_unknown_architecture_lists_the_registered_ones(model):
    with pytest.raises(LsrlError, match=r"unknown architecture 'transformer'; expected one of \('linear_rnn', "):
        model.to_torch("transformer")


def test_every_builder_of_a_model_is_found_in_one_registry(model):
    """The targets and the stock transformers models share one registry, names unique, one lookup."""
    import lsrl.hf

    doors = {"to_torch": ARCHITECTURES, "to_hf": lsrl.hf.ARCHITECTURES}
    assert list(extensions.BUILDERS) == [*ARCHITECTURES, *lsrl.hf.ARCHITECTURES]
    for door, names in doors.items():
        for name in names:
            builder = extensions.find_builder(name, door)
            assert builder is extensions.BUILDERS[name] and builder.name == name and builder.door == door
    for older, name in lsrl.hf.ALIASES.items():  # an alias is read by its own door only
        assert extensions.find_builder(older, "to_hf") is extensions.BUILDERS[name]
    assert extensions.find_builder("hawk", "to_torch") is TARGETS["hawk"]
    with pytest.raises(LsrlError, match=r"'hf-mamba' is built by model.to_hf\(\), not model.to_torch\(\)"):
        model.to_torch("hf-mamba")
    with pytest.raises(LsrlError, match=r"to_hf: 'gru' is built by model.to_torch\(\), not model.to_hf\(\)"):
        model.to_hf("gru", max_len=4)


@pytest.mark.slow
def test_no_other_registry_of_builders_exists_in_the_package():
    """A dict of builders anywhere but lsrl.model.extensions would be a second registry."""
    import ast
    from pathlib import Path

    package = Path(lsrl.__file__).parent
    defined = sorted(
        str(path.relative_to(package)) for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(target, ast.Name) and target.id in {"BUILDERS", "TARGETS"}
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]))
    )
    assert defined == ["model/extensions.py", "targets/registry.py"]  # the registry, and its to_torch view
    assert isinstance(TARGETS, extensions.DoorView)  # a live view, not a dict of its own
    assert not hasattr(lsrl.hf, "BUILDERS") and not hasattr(extensions, "TARGETS")


def test_requirements_come_from_the_entry(model):
    gated = lsrl.compile(lsrl.ForEach(lsrl.Multi(lsrl.Concat([x := lsrl.Input(1, name="x"), x]), name="square")))
    for arch in UNGATED:
        with pytest.raises(LsrlError, match=f"'{arch}' has no multiplicative gate, but Multi 'square' needs one"):
            gated.to_torch(arch)
    assert [arch for arch in ARCHITECTURES if TARGETS[arch].built_on_diagonal({})] == [
        "diagonal_linear_rnn", "hawk", "griffin"]
    assert not TARGETS["hawk"].built_on_diagonal({"construction": "app_e"})


def test_model_diagonal_runs_the_registered_pass(model):
    from lsrl.compiler.diagonal import diagonalise

    assert extensions.find_model_pass("diagonal") is diagonalise
    assert hasattr(model.diagonal(), "eigenbases")
    with pytest.raises(InternalError, match=r"no pass is registered for model.transpose\(\)"):
        extensions.find_model_pass("transpose")
