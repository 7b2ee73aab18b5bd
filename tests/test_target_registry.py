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
    assert TARGETS is extensions.TARGETS  # one registry: the model looks up what lsrl.targets registers


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
        del TARGETS["test_ungated_copy"]


def test_registering_a_different_target_under_a_taken_name_is_a_bug():
    with pytest.raises(InternalError, match="two targets are registered as 'gru'"):
        register(dataclasses.replace(TARGETS["gru"], options=()))
    assert register(TARGETS["gru"]) is TARGETS["gru"]  # the same record again (a re-import) is harmless


def test_unknown_architecture_lists_the_registered_ones(model):
    with pytest.raises(LsrlError, match=r"unknown architecture 'transformer'; expected one of \('linear_rnn', "):
        model.to_torch("transformer")


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
