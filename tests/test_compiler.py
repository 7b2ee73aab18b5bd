from fractions import Fraction

import numpy as np
import pytest

import lsrl
from conftest import as_fractions
from lsrl.programs import discrete_approximator, discrete_prompt


def test_save_and_load_round_trip_exactly(tmp_path):
    program = discrete_approximator(2, ifelse="step")
    model = lsrl.compile(program)
    folder = model.save(tmp_path / "model")
    assert (folder / "model.json").exists() and (folder / "weights.safetensors").exists()
    loaded = lsrl.load(folder)
    assert [layer.kind for layer in loaded.layers] == [layer.kind for layer in model.layers]
    assert loaded.parameter_count == model.parameter_count
    for a, b in zip(model.layers, loaded.layers):
        if isinstance(a, lsrl.Linear):
            assert a.A.equals(b.A) and a.b.equals(b.b)
    xs = discrete_prompt({(1, 2): (3, 4), (2, 2): (5, 1)}, query=(2, 2))
    assert as_fractions(loaded(xs, exact=True)) == as_fractions(model(xs, exact=True))


def test_huge_rationals_survive_the_file(tmp_path):
    x = lsrl.Input(1)
    big = Fraction(3**60, 7**30 + 1)
    model = lsrl.compile(lsrl.ForEach(lsrl.Linear(x, [[big]], b=[-big])))
    loaded = lsrl.load(model.save(tmp_path / "big"))
    assert loaded.layers[0].A.to_fractions() == [[big]]
    assert loaded.layers[0].b.to_fractions() == [-big]


def test_float_backend_files(tmp_path):
    model = lsrl.compile(discrete_approximator(2), backend="float")
    loaded = lsrl.load(model.save(tmp_path / "f"))
    xs = discrete_prompt({(1, 2): (3, 4)}, query=(1, 2)).astype(float)
    np.testing.assert_array_equal(loaded(xs), model(xs))
    with pytest.raises(lsrl.LsrlError):
        loaded(xs, exact=True)


def test_load_rejects_foreign_folders(tmp_path):
    with pytest.raises(lsrl.LsrlError):
        lsrl.load(tmp_path)


def test_identity_program_compiles_to_no_layers():
    x = lsrl.Input(2)
    model = lsrl.compile(lsrl.ForEach(x[0:2]))
    assert model.layers == []
    np.testing.assert_array_equal(model(np.ones((3, 2))), np.ones((3, 2)))


def test_pruning_drops_unread_state():
    x = lsrl.Input(1)
    unused = lsrl.LinState(x, [[1, 0], [1, 1]], [[1], [0]])  # only component 0 is read
    model = lsrl.compile(lsrl.ForEach(unused[0]))
    assert model.state_size == 1
    xs = np.arange(5.0).reshape(-1, 1)
    np.testing.assert_array_equal(model(xs)[:, 0], np.cumsum(xs))


def test_compile_reports_the_rules_it_used():
    model = lsrl.compile(discrete_approximator(2, ifelse="multiplicative"))
    assert model.stats["case_1b"] > 0 and model.stats["case_2"] > 0
    assert "LinState" in model.summary()


def test_fast_runner_matches_the_step_by_step_recurrence_even_when_it_explodes():
    x = lsrl.Input(1)
    doubling = lsrl.LinState(x, [[2]], [[1]])  # 2^t growth: A^(2^k) overflows for long inputs
    model = lsrl.compile(lsrl.ForEach(doubling), backend="float")
    xs = np.zeros((1100, 1))
    xs[1050] = 1.0
    out = model(xs)[:, 0]
    assert not np.isnan(out).any()
    assert out[1049] == 0 and out[1050] == 1 and out[1060] == 2**10


def test_fast_runner_on_long_batches_matches_the_interpreter():
    program = discrete_approximator(2)
    model = lsrl.compile(program, backend="float")
    xs = np.random.default_rng(1).integers(0, 6, size=(3, 300, 1)).astype(float)
    np.testing.assert_array_equal(model(xs), program(xs))
