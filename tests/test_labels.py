"""Unit labels (``model.labels``) checked against program traces, and interventions by label
(``model(xs, patch=...)``) checked against the same intervention on the program."""

import json
from collections import Counter

import numpy as np
import pytest

import lsrl
from lsrl.ir.labels import ROLES, label_violations
from lsrl.model.folders import write_manifest
from tests.conftest import as_fractions, library_program
from tests.test_random_programs import (
    N_SEEDS, RELU_SEEDS, _as_object_array, _compiled_seeds, _generated, _inputs_for, _relu_compiled,
)

# the roles lsrl.compile gives; helper, mode and drive come from the torch targets and model.diagonal(),
# -pos and -neg from the targets' product terms (a compiler bypass carries a part, which is >= 0, alone)
COMPILER_ROLES = tuple(role for role in ROLES if role not in ("helper", "mode", "drive", "-pos", "-neg"))


def _two_inputs(seed):
    generated = _generated(seed)
    first, second = _inputs_for(seed, generated.d_in)
    steps = min(len(first), len(second))
    return _as_object_array(first[:steps]), _as_object_array(second[:steps])


def _listings():
    lookup = lsrl.programs.discrete_approximator(2)
    lookup_prompt = lsrl.programs.discrete_prompt({(1, 2): (2, 1), (2, 2): (1, 1)}, query=(1, 2))
    other_prompt = lsrl.programs.discrete_prompt({(1, 2): (1, 1), (2, 1): (2, 2)}, query=(2, 1))
    approximator = library_program("continuous")
    cells = lsrl.programs.continuous_prompt(lambda v: v[::-1], 2, 2, 2)
    other_cells = lsrl.programs.continuous_prompt(lambda v: v * 2, 2, 2, 2)
    return [(lookup, lookup_prompt, other_prompt), (approximator, cells, other_cells)]


@pytest.mark.slow
def test_every_label_of_every_random_program_holds_exactly():
    roles = Counter()
    for seed, (_, model, _) in _compiled_seeds():
        xs, _ = _two_inputs(seed)
        assert model.label_violations(_generated(seed).program, xs) == [], f"seed {seed}"
        assert [len(layer) for layer in model.labels] == [layer.dim for layer in model.layers]
        assert all(None not in layer for layer in model.labels), f"seed {seed}: a unit without a label"
        roles.update(label.role for layer in model.labels for label in layer)
    assert set(roles) >= set(COMPILER_ROLES)  # every role is produced somewhere, and checked there


@pytest.mark.slow
def test_labels_and_patches_hold_on_programs_with_relustates():
    patched, roles = 0, Counter()
    for seed in RELU_SEEDS:
        generator, model, _ = _relu_compiled(seed)
        program = generator.program
        first, second = _inputs_for(seed, generator.d_in)
        steps = min(len(first), len(second))
        xs, other = _as_object_array(first[:steps]), _as_object_array(second[:steps])
        assert model.label_violations(program, xs) == [], f"seed {seed}"
        roles.update(label.role for layer in model.labels for label in layer)
        donor = program.trace(other, exact=True)
        for name in model.patchable:
            assert as_fractions(model(xs, exact=True, patch={name: donor[name]})) == as_fractions(
                program(xs, exact=True, patch={name: donor[name]})), f"seed {seed}: patching {name}"
            patched += 1
    assert patched > 20 and set(roles) == set(COMPILER_ROLES)


@pytest.mark.parametrize("index", [0, 1], ids=["listing2", "listing1"])
def test_labels_hold_on_listings_1_and_2(index):
    program, xs, _ = _listings()[index]
    model = lsrl.compile(program, progress=False)
    assert model.label_violations(program, xs) == []
    assert {label.node for layer in model.labels for label in layer} <= set(program.names.values())


def test_a_wrong_label_is_caught():
    x = lsrl.Input(1, name="x")
    total = lsrl.LinState(x, [[1]], [[1]], name="total")
    program = lsrl.ForEach(lsrl.Concat([total, lsrl.ReLU(x - 1, name="above")], name="out"))
    model = lsrl.compile(program, progress=False)
    xs = np.array([[1], [3], [0], [2]])
    assert model.label_violations(program, xs) == []
    labels = [list(layer) for layer in model.labels]
    layer, unit = next((i, u) for i, layer in enumerate(labels) for u, label in enumerate(layer)
                       if label.node == "total")
    labels[layer][unit] = lsrl.UnitLabel("above", 0, "value")
    broken = label_violations(labels, model.trace(xs, exact=True), program.trace(xs, exact=True))
    assert [(b[0], b[1], b[3]) for b in broken] == [(layer, unit, "values differ")]


def test_bypass_roles_say_what_the_units_hold():
    """``v`` read by a ReLU and by a Concat: Case 9 carries it as ReLU(v), ReLU(-v) (Eq. 11)."""
    x = lsrl.Input(2, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.ReLU(x, name="r"), x * 3], name="out"))
    model = lsrl.compile(program, progress=False)
    first = {(label.node, label.role) for label in model.labels[0]}
    assert ("v", "copy") in first and ("v", "negated") in first
    relu_roles = {label.role for label in model.labels[1]}
    assert relu_roles <= {"value", "pos", "neg"} and "neg" in relu_roles
    assert model.label_violations(program, np.array([[1, -2], [-3, 4]])) == []


def test_labels_are_saved_shown_and_checked_on_load(tmp_path):
    program = library_program("more_ones")
    model = lsrl.compile(program, progress=False)
    loaded = lsrl.load(model.save(tmp_path / "m"))
    assert loaded.labels == model.labels and loaded.entangled == model.entangled
    from lsrl.targets import inspect

    assert "units (node[index]:role)" in inspect(loaded, archs=())
    structure = json.loads((tmp_path / "m" / "model.json").read_text())
    structure["layers"][0]["labels"][0][2] = "guess"
    (tmp_path / "m" / "model.json").write_text(json.dumps(structure))
    with pytest.raises(lsrl.ModelFileError, match="model.json: its sha256 differs"):
        lsrl.load(tmp_path / "m")
    write_manifest(tmp_path / "m")  # bound again: the label check itself refuses the edit
    with pytest.raises(lsrl.ModelFileError, match="label of unit 0"):
        lsrl.load(tmp_path / "m")


# ---- interventions by label -----------------------------------------------------------------


@pytest.mark.slow
def test_patching_every_patchable_node_matches_the_program_exactly():
    patched = 0
    for seed, (_, model, _) in _compiled_seeds()[: N_SEEDS // 2]:
        program = _generated(seed).program
        xs, other = _two_inputs(seed)
        donor = program.trace(other, exact=True)
        for name in model.patchable:
            expected = program(xs, exact=True, patch={name: donor[name]})
            got = model(xs, exact=True, patch={name: donor[name]})
            assert as_fractions(got) == as_fractions(expected), f"seed {seed}: patching {name}"
            patched += 1
    assert patched > 100


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1], ids=["listing2", "listing1"])
def test_patching_listing_states_matches_the_program(index):
    program, xs, other = _listings()[index]
    model = lsrl.compile(program, progress=False)
    donor = program.trace(other, exact=True)
    states = [program.names[node] for node in program.linstates]
    assert set(states) <= set(model.patchable)  # every state of the listings can be intervened on
    for name in states:
        assert as_fractions(model(xs, exact=True, patch={name: donor[name]})) == as_fractions(
            program(xs, exact=True, patch={name: donor[name]}))
        floats = model(xs.astype(float), patch={name: np.asarray(donor[name], dtype=float)})
        np.testing.assert_allclose(floats, np.asarray(program(xs, exact=True, patch={name: donor[name]}),
                                                      dtype=float), rtol=1e-9, atol=1e-9)


def test_patching_a_node_the_model_cannot_separate_is_refused():
    x = lsrl.Input(1, name="x")
    inner = lsrl.Linear(x, [[2]], name="inner")  # fused into its only reader
    program = lsrl.ForEach(lsrl.Linear(inner, [[3]], name="out"))
    model = lsrl.compile(program, progress=False)
    xs = np.array([[1], [2]])
    assert "inner" not in model.patchable
    with pytest.raises(lsrl.LsrlError, match="'inner' cannot be patched"):
        model(xs, patch={"inner": np.ones((2, 1))})
    with pytest.raises(lsrl.LsrlError, match="'nowhere' has no unit"):
        model(xs, patch={"nowhere": np.ones((2, 1))})
    with pytest.raises(lsrl.DimensionError, match="patch values for 'out'"):
        model(xs, patch={"out": np.ones((3, 1))})


@pytest.mark.slow
def test_patching_a_diagonal_model_matches_the_program():
    patched = 0
    for seed in range(40):
        program = _generated(seed).program
        try:
            model = lsrl.compile(program, progress=False).diagonal()
        except lsrl.LsrlError:  # irrational eigenvalues: no exact diagonal form
            continue
        xs, other = _two_inputs(seed)
        donor = program.trace(other, exact=True)
        for name in model.patchable:
            assert as_fractions(model(xs, exact=True, patch={name: donor[name]})) == as_fractions(
                program(xs, exact=True, patch={name: donor[name]})), f"seed {seed}: patching {name}"
            patched += 1
    assert patched > 20


@pytest.mark.parametrize("tolerance", [-1, -1e-300, float("nan"), float("inf"), "0.1", None, True, 1j])
def test_a_tolerance_that_would_report_every_unit_is_refused(tolerance):
    x = lsrl.Input(1, name="x")
    program = lsrl.ForEach(lsrl.LinState(x, [[1]], [[1]], name="total"))
    model = lsrl.compile(program, progress=False)
    xs = np.array([[1.0], [3.0], [0.0]])
    assert model.label_violations(program, xs, exact=False, tolerance=1e-9) == []  # the labels hold
    with pytest.raises(lsrl.LsrlError, match=r"^label_violations: tolerance must be a finite number >= 0"):
        model.label_violations(program, xs, exact=False, tolerance=tolerance)
