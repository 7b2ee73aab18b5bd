from fractions import Fraction

import numpy as np
import pytest
import torch

import lsrl
from conftest import as_fractions, run_module
from lsrl.programs import discrete_approximator, discrete_prompt, more_ones_than_zeros
from lsrl.targets import ARCHITECTURES, STOCK


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


@pytest.mark.slow
def test_fast_runner_on_long_batches_matches_the_interpreter():
    program = discrete_approximator(2)
    model = lsrl.compile(program, backend="float")
    xs = np.random.default_rng(1).integers(0, 6, size=(3, 300, 1)).astype(float)
    np.testing.assert_array_equal(model(xs), program(xs))


# ---- targets through the public method; sizes counted independently ------------------------------


def _structure_matches(net, arch) -> bool:
    """What tells each architecture's module apart, read from its torch parameters."""
    modules = list(net.modules())
    has_rnn = any(isinstance(m, torch.nn.RNN) for m in modules)
    if arch in STOCK:  # one stock LSTM / GRU
        return isinstance(net.core, torch.nn.LSTM if arch == "stock_lstm" else torch.nn.GRU)
    if arch in ("gru", "lstm"):
        gates = {name: p.shape[0] // net.get_parameter(name.replace("ih", "hh")).shape[1]
                 for name, p in net.named_parameters() if "weight_ih" in name}
        return bool(gates) and set(gates.values()) == {3 if arch == "gru" else 4}
    if arch in ("rnn", "gated_rnn"):
        return has_rnn
    return not has_rnn


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_to_torch_builds_each_named_architecture(arch):
    program = more_ones_than_zeros()
    model = lsrl.compile(program)
    net = model.to_torch(arch, **({"max_len": 12, "dtype": torch.float64} if arch in STOCK else {}))
    assert net.architecture == arch and _structure_matches(net, arch)
    xs = np.random.default_rng(3).integers(0, 2, size=(4, 12, 1)).astype(float)
    np.testing.assert_allclose(run_module(net, xs), program(xs), atol=1e-9)


@pytest.mark.parametrize("arch", ["linear_rnn", "rnn"])
def test_ungated_architectures_refuse_a_multi(arch):
    model = lsrl.compile(discrete_approximator(1, ifelse="multiplicative"))
    with pytest.raises(lsrl.LsrlError, match=f"gated_{arch}"):
        model.to_torch(arch)


def test_parameter_count_counts_every_nonzero_weight():
    model = lsrl.compile(discrete_approximator(2, ifelse="original"))
    dense = [getattr(layer, weight).to_numpy() for layer in model.layers
             for weight in ("A", "B", "b", "init_state") if hasattr(layer, weight)]
    assert model.parameter_count == sum(int(np.count_nonzero(w)) for w in dense) > 0


# ---- floats no worse than the interpreter --------------------------------------------------------


def test_float_model_is_as_exact_as_the_interpreter_with_the_papers_conditionals():
    x = lsrl.Input(dim=2)
    program = lsrl.ForEach(lsrl.f_ifelse(lsrl.f_larger(x[0:1], 0.5), x[1:2], x[1:2] * 0))
    xs = np.array([[1.0, 0.3712345], [0.0, 0.3712345], [1.0, -2.718281828], [1.0, 12345.678901]])
    exact = np.array(as_fractions(program(xs, exact=True)), dtype=float)
    assert np.max(np.abs(program(xs) - exact)) <= 1e-6
    for backend in ("exact", "float"):
        model = lsrl.compile(program, backend=backend)
        assert np.max(np.abs(model(xs) - exact)) <= 1e-6, backend


@pytest.mark.parametrize("variant", lsrl.IFELSE_VARIANTS)
def test_float_conditionals_stay_within_a_millionth_of_the_exact_value(variant):
    x = lsrl.Input(dim=3, bounds=(-100, 100))
    chosen = lsrl.f_ifelse(lsrl.f_larger(x[0:1], 0.5), x[1:2], x[2:3] * 3 - 1, variant=variant)
    program = lsrl.ForEach(chosen)
    rng = np.random.default_rng(7)
    xs = np.column_stack([rng.integers(0, 2, 200), rng.uniform(-100, 100, 200), rng.uniform(-30, 30, 200)])
    exact = np.array(as_fractions(program(xs, exact=True)), dtype=float)
    interpreter_ok = np.abs(program(xs) - exact)[:, 0] <= 1e-6
    compiled = lsrl.compile(program, backend="float")(xs)
    assert (np.abs(compiled - exact)[interpreter_ok] <= 1e-6).all()


def test_pruning_drops_components_that_are_always_zero():
    x = lsrl.Input(dim=2)
    program = lsrl.ForEach(lsrl.f_ifelse(lsrl.f_larger(x[0:1], 0.5), x[1:2], x[1:2] * 0, variant="original"))
    model = lsrl.compile(program)
    for layer in model.layers:
        if layer.kind == "Linear":
            rows_in_use = set(layer.A.rows) | set(layer.b.rows)
            assert rows_in_use == set(range(layer.dim)), layer.name


def test_pruning_folds_constant_components_into_their_readers():
    """``v = [x; 3]``: the ReLU bypass would carry the 3 as a unit of its own; the reader folds it
    into its bias instead, and the node that held it is no longer patchable."""
    x = lsrl.Input(1)
    v = lsrl.Linear(x, [[1], [0]], [0, 3], name="v")
    program = lsrl.ForEach(lsrl.Linear(lsrl.ReLU(v), [[1, 2]]))
    model = lsrl.compile(program, progress=False)
    assert [(layer.kind, layer.dim) for layer in model.layers] == [("Linear", 1), ("ReLU", 1), ("Linear", 1)]
    assert model.layers[-1].b.rows == {0: {0: 6}}
    xs = np.array([[Fraction(k, 3)] for k in range(-4, 5)], dtype=object)
    assert as_fractions(model(xs, exact=True)) == as_fractions(program(xs, exact=True))
    assert "v" not in model.patchable


def test_a_state_that_reads_a_constant_state_keeps_it():
    """``s2`` is 2 from step 1 on but starts at 5; ``s1`` reads it through ``A``, so its first update
    sees the 5: the constant cannot be folded there (the readers of the output can fold it)."""
    x = lsrl.Input(1)
    s = lsrl.LinState(x, [[1, 1], [0, 0]], [[1], [0]], [0, 2], init_state=[0, 5])
    program = lsrl.ForEach(lsrl.Concat([s[0:1], lsrl.Linear(s, [[0, 1]]) * 1]))
    model = lsrl.compile(program, progress=False)
    xs = np.array([[Fraction(k)] for k in range(5)], dtype=object)
    assert as_fractions(model(xs, exact=True)) == as_fractions(program(xs, exact=True))
    assert [x[0] for x in as_fractions(program(xs, exact=True))] == [5, 8, 12, 17, 23]  # 0 + 5 + x_1 ...
