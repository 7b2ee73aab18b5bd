"""Nothing silently wrong: tampered model files, inputs outside their declared
bounds, complex input, edge shapes, torch targets' input checks, float32 / ONNX precision, and
one-line CLI errors. Each test is a case that once gave a wrong answer or a raw traceback."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import torch

import lsrl
from lsrl.model.folders import write_manifest
from lsrl.programs import discrete_approximator, discrete_prompt


# ---------------------------------------------------------------------- model files
def _accumulator():
    x = lsrl.Input(1, name="x")
    return lsrl.ForEach(lsrl.LinState(lsrl.Linear(x, [[1], [2]], name="lin"), [[1, 0], [0, 1]], [[1, 0], [0, 1]],
                                      name="acc"))


@pytest.fixture(params=["exact", "float"])
def saved(request, tmp_path):
    lsrl.compile(_accumulator(), backend=request.param).save(tmp_path)
    return tmp_path, load_file(str(tmp_path / "weights.safetensors")), json.loads((tmp_path / "model.json").read_text())


def _load_with(folder, tensors=None, structure=None):
    """The error of loading ``folder`` after the edits, its manifest rebound to them (so that the checks of
    the files' contents, not the manifest's, are what refuse them)."""
    if tensors is not None:
        save_file(tensors, str(folder / "weights.safetensors"))
    if structure is not None:
        (folder / "model.json").write_text(json.dumps(structure))
    write_manifest(folder)
    with pytest.raises(lsrl.ModelFileError) as error:
        lsrl.load(folder)
    return str(error.value)


def test_an_untouched_file_loads_and_runs(saved):
    folder, _, _ = saved
    assert lsrl.load(folder)(np.ones((3, 1))).tolist() == [[1, 2], [2, 4], [3, 6]]


def test_a_shortened_array_is_rejected(saved):
    folder, tensors, structure = saved
    fields = ["values", "rows", "cols"] + (["num", "den"] if structure["backend"] == "exact" else [])
    for field in fields:
        key = f"layers.0.A.{field}"
        message = _load_with(folder, {**tensors, key: tensors[key][:-1]})
        assert "LinState 'acc'" in message and "A" in message and "length" in message


@pytest.mark.parametrize("field", ["rows", "cols"])
def test_an_index_out_of_range_is_rejected(saved, field):
    folder, tensors, _ = saved
    tensors[f"layers.0.B.{field}"] = tensors[f"layers.0.B.{field}"] + 7
    message = _load_with(folder, tensors)
    assert "LinState 'acc'" in message and f"'{field}'" in message and "outside" in message


def test_a_wrong_dtype_is_rejected(saved):
    folder, tensors, _ = saved
    tensors["layers.0.A.rows"] = tensors["layers.0.A.rows"].astype(np.int32)
    assert "int64" in _load_with(folder, tensors)


def test_a_zero_denominator_and_disagreeing_values_are_rejected(saved):
    folder, tensors, structure = saved
    if structure["backend"] != "exact":
        tensors["layers.0.A.values"] = tensors["layers.0.A.values"] * np.nan
        assert "NaN" in _load_with(folder, tensors)
        return
    zero = dict(tensors, **{"layers.0.A.den": tensors["layers.0.A.den"] * 0})
    assert "denominator" in _load_with(folder, zero)
    changed = dict(tensors, **{"layers.0.A.num": tensors["layers.0.A.num"] * 3})
    assert "disagrees" in _load_with(folder, changed)


def test_a_missing_array_is_rejected(saved):
    folder, tensors, _ = saved
    del tensors["layers.0.b.shape"]
    assert "'shape'" in _load_with(folder, tensors)


@pytest.mark.parametrize("content", [b"", b"garbage" * 20, b"\x08\x00\x00\x00\x00\x00\x00\x00{}"])
def test_a_corrupt_weights_file_is_one_line(saved, content):
    folder, _, _ = saved
    (folder / "weights.safetensors").write_bytes(content)
    write_manifest(folder)
    with pytest.raises(lsrl.ModelFileError) as error:
        lsrl.load(folder)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("change, expected", [
    (lambda s: [s], "JSON object"),
    (lambda s: {k: v for k, v in s.items() if k != "layers"}, "'layers'"),
    (lambda s: {**s, "layers": [{k: v for k, v in s["layers"][0].items() if k != "kind"}]}, "'kind'"),
    (lambda s: {**s, "layers": [{**s["layers"][0], "dim": 5}]}, "'dim'"),
    (lambda s: {**s, "layers": [{**s["layers"][0], "kind": "Conv"}]}, "Conv"),
    (lambda s: {**s, "input": {**s["input"], "bounds": [["1/0"], ["inf"]]}}, "denominator"),
    (lambda s: {**s, "input": {**s["input"], "dim": "one"}}, "'dim'"),
    (lambda s: {**s, "backend": "quantum"}, "quantum"),
])
def test_a_malformed_model_json_is_one_line(saved, change, expected):
    folder, _, structure = saved
    (folder / "model.json").write_text(json.dumps(change(structure)))
    message = _load_with(folder)
    assert expected in message and "\n" not in message


def test_a_layer_that_no_longer_fits_the_one_before_is_rejected(saved):
    folder, tensors, _ = saved
    tensors["layers.0.B.shape"] = np.array([2, 5, 0], dtype=np.int64)
    assert "LinState 'acc'" in _load_with(folder, tensors)


# ---------------------------------------------------------------------- declared Input bounds
def _bounded_ifelse():
    """The reported example: the optimised ifelse relies on x[1] in [0, 1]."""
    x = lsrl.Input(2, name="xb", bounds=(0, 1))
    return lsrl.ForEach(lsrl.f_ifelse(lsrl.f_step(x[0] - 0.5), x[1], x[1] * 0 + 7, variant="optimized"))


@pytest.fixture(scope="module")
def bounded():
    program = _bounded_ifelse()
    return program, lsrl.compile(program)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("runner", ["program", "model"])
def test_inputs_outside_the_declared_bounds_raise(bounded, runner, exact):
    run = bounded[0] if runner == "program" else bounded[1]
    with pytest.raises(lsrl.SequenceError) as error:
        run(np.array([[1.0, -5.0]]), exact=exact)
    assert "Input 'xb'" in str(error.value) and "component 1" in str(error.value) and "check_bounds" in str(error.value)
    with pytest.raises(lsrl.SequenceError, match="sequence 1"):
        run(np.array([[[1.0, 0.5]], [[1.0, 1.5]]]), exact=exact)
    # the opt-out runs the program as compiled: the optimised variant's answer for an input it was not built for
    assert run(np.array([[1.0, -5.0]]), exact=exact, check_bounds=False)[0, 0] == 0
    assert run(np.array([[1.0, 1.0], [0.0, 0.0]]), exact=exact).tolist() == [[1], [7]]


def test_a_bound_that_is_no_float_is_checked_exactly():
    third = lsrl.Input(1, name="third", bounds=(lsrl.numbers.mpq(1, 3), None))
    program = lsrl.ForEach(third * 1)
    below, above = 1 / 3, np.nextafter(1 / 3, 1)  # the float 1/3 is just below the rational 1/3
    assert below < lsrl.numbers.mpq(1, 3) < above
    with pytest.raises(lsrl.SequenceError):
        program([[below]])
    assert program([[above]])[0, 0] == above


@pytest.mark.parametrize("arch", ["linear_rnn", "gated_rnn", "gru", "lstm", "diagonal_linear_rnn", "hawk"])
def test_torch_targets_check_the_declared_bounds(bounded, arch):
    net = bounded[1].to_torch(arch)
    with pytest.raises(lsrl.SequenceError, match="Input 'xb'"):
        net(torch.tensor([[[1.0, -5.0]]], dtype=torch.float64))
    out = net(torch.tensor([[[1.0, -5.0]]], dtype=torch.float64), check_bounds=False)
    assert out.shape == (1, 1, 1)


# ---------------------------------------------------------------------- complex input, edge shapes
def _doubler():
    return lsrl.ForEach(lsrl.Linear(lsrl.Input(1, name="x"), [[2]]))


@pytest.mark.parametrize("exact", [False, True])
def test_complex_input_is_rejected(exact):
    program = _doubler()
    for run in (program, lsrl.compile(program)):
        with pytest.raises(lsrl.SequenceError, match="complex"):
            run(np.array([[1 + 2j]]), exact=exact)
    with pytest.raises(lsrl.SequenceError, match="complex"):
        lsrl.compile(program).to_torch("rnn")(torch.tensor([[[1 + 2j]]]))


def test_an_empty_batch_keeps_its_length_everywhere():
    program = _doubler()
    model = lsrl.compile(program)
    empty = np.zeros((0, 3, 1))
    shapes = {program(empty).shape, program(empty, exact=True).shape, model(empty).shape, model(empty, exact=True).shape}
    assert shapes == {(0, 3, 1)}
    assert program(np.zeros((2, 0, 1))).shape == model(np.zeros((2, 0, 1)), exact=True).shape == (2, 0, 1)


def test_a_node_without_components_is_rejected():
    with pytest.raises(lsrl.DimensionError, match="empty_rows"):
        lsrl.ForEach(lsrl.Linear(lsrl.Input(1, name="x"), np.zeros((0, 1)), name="empty_rows"))


# ---------------------------------------------------------------------- torch targets' input checks
TARGETS = ["linear_rnn", "gated_linear_rnn", "rnn", "gated_rnn", "gru", "lstm", "hawk", "griffin"]


@pytest.fixture(scope="module")
def accumulator_model():
    return lsrl.compile(_accumulator())


def _target(model, arch):
    return model.to_torch(arch)


@pytest.mark.parametrize("arch", TARGETS)
def test_every_target_checks_its_input_in_one_line(accumulator_model, arch):
    net = _target(accumulator_model, arch)
    good = torch.ones(2, 3, 1, dtype=torch.float64)
    expected = accumulator_model(good.numpy())
    np.testing.assert_array_equal(net(good).detach().numpy(), expected)
    np.testing.assert_array_equal(net(good.numpy()).detach().numpy(), expected)  # numpy is read like a tensor
    np.testing.assert_array_equal(net(torch.ones(2, 3, 1, dtype=torch.int64)).detach().numpy(), expected)
    for bad, words in [
        (torch.ones(2, 3, 2, dtype=torch.float64), "shape (B, T, 1)"),
        (torch.ones(3, 1, dtype=torch.float64), "x[None]"),
        (torch.ones(2, 3, 1, dtype=torch.float32), "float32"),
        (torch.full((2, 3, 1), float("nan"), dtype=torch.float64), "NaN"),
    ]:
        with pytest.raises(lsrl.SequenceError) as error:
            net(bad)
        assert words in str(error.value) and arch in str(error.value)


@pytest.mark.parametrize("arch", TARGETS)
def test_every_target_follows_to_dtype(accumulator_model, arch):
    net = _target(accumulator_model, arch).to(torch.float32)
    out = net(torch.ones(1, 3, 1, dtype=torch.float32))
    assert out.dtype == torch.float32
    np.testing.assert_array_equal(out.detach().numpy()[0], [[1, 2], [2, 4], [3, 6]])
    with pytest.raises(lsrl.SequenceError, match="float64"):
        net(torch.ones(1, 3, 1, dtype=torch.float64))


@pytest.mark.parametrize("arch", ["rnn", "linear_rnn", "lstm", "hawk"])
def test_unknown_target_options_are_refused(accumulator_model, arch):
    with pytest.raises(lsrl.LsrlError, match="gate_boundd"):
        accumulator_model.to_torch(arch, gate_boundd=4)


# ---------------------------------------------------------------------- float32 and ONNX precision
@pytest.fixture(scope="module")
def approximators():
    from lsrl.programs import discrete_approximator

    return {variant: lsrl.compile(discrete_approximator(2, ifelse=variant), progress=False)
            for variant in ("original", "multiplicative")}


def _prompts():
    from lsrl.programs import discrete_prompt

    mapping = {(1, 2): (3, 4), (2, 2): (5, 6), (4, 1): (7, 0)}
    return np.stack([discrete_prompt(mapping, query=key) for key in mapping]).astype(float), mapping


@pytest.mark.slow
def test_float32_with_lambda_1e10_warns_and_really_is_wrong(approximators):
    prompts, mapping = _prompts()
    expected = np.array(list(mapping.values()), dtype=float)
    original = approximators["original"].to_torch("gated_rnn").float()
    with pytest.warns(RuntimeWarning, match="multiplicative"):
        out = original(torch.as_tensor(prompts, dtype=torch.float32)).detach().numpy()
    assert not np.array_equal(np.round(out[:, -2:, 0]), expected)  # the warning is not a false alarm
    multiplicative = approximators["multiplicative"].to_torch("gated_rnn").float()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for the variant that is exact in float32
        out = multiplicative(torch.as_tensor(prompts, dtype=torch.float32)).detach().numpy()
    assert np.array_equal(np.round(out[:, -2:, 0]), expected)


def test_onnx_float32_export_of_lambda_1e10_is_refused(approximators, tmp_path):
    from lsrl.targets.onnx_export import export_onnx

    net = approximators["original"].to_torch("gru")
    with pytest.raises(lsrl.LsrlError, match="ifelse='multiplicative'"):
        export_onnx(net, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()
    assert export_onnx(net, tmp_path / "m64.onnx", dtype="float64").exists()
    assert export_onnx(net, tmp_path / "forced.onnx", allow_inexact=True).exists()
    assert export_onnx(approximators["multiplicative"].to_torch("gru"), tmp_path / "mult.onnx").exists()


def test_gru_onnx_gives_nan_where_a_gate_factor_exceeds_gate_bound(tmp_path):
    import onnxruntime

    from lsrl.targets.onnx_export import export_onnx

    x = lsrl.Input(1, name="x")
    gru = lsrl.compile(lsrl.ForEach(lsrl.Multi(lsrl.Concat([x, x * 1])))).to_torch("gru", gate_bound=1024)
    session = onnxruntime.InferenceSession(str(export_onnx(gru, tmp_path / "square.onnx")),
                                           providers=["CPUExecutionProvider"])
    out = session.run(["y"], {"x": np.array([[[10.0], [2000.0], [3.0]]], dtype=np.float32)})[0][0, :, 0]
    assert out[0] == 100 and np.isnan(out[1]) and out[2] == 9  # 2000 > 1024: NaN, not 2.05e6
    with pytest.raises(lsrl.SequenceError, match="gate_bound"):
        gru(torch.tensor([[[2000.0]]], dtype=torch.float64))


# ---------------------------------------------------------------------- the discrete approximator's prompts
@pytest.fixture(scope="module")
def discrete():
    from lsrl.programs import discrete_approximator

    return discrete_approximator(2), discrete_approximator(2, robust=True, vocabulary=9)


@pytest.mark.slow
def test_negative_and_out_of_vocabulary_tokens_are_refused_by_every_runner(discrete):
    plain, robust = discrete
    negative = np.array([[1], [2], [1], [2], [3], [-4]], dtype=float)
    too_large = np.array([[1], [2], [1], [2], [3], [12]], dtype=float)  # robust: vocabulary=9
    for program, xs in ((plain, negative), (robust, negative), (robust, too_large)):
        for run in (program, lsrl.compile(program, progress=False)):
            with pytest.raises(lsrl.SequenceError, match="Input 'token'"):
                run(xs)


@pytest.mark.parametrize("tokens, words", [
    ([9, 9, 1, 2, 3, 4], "not one of the prompt's keys"),
    ([1, 2, 1, 2, 3.5, 4], "non-negative integers"),
    ([1, 2, 1, 2, 3, -4], "non-negative integers"),
    ([1, 2, 1, 2, 3, 12], "vocabulary=9"),
    ([1, 2, 1, 2, 3, 4, 5], "key/value pairs"),
])
def test_the_prompt_check_names_what_is_wrong(tokens, words):
    from lsrl.programs import check_discrete_prompt

    good = np.array([[1, 2, 1, 2, 3, 4]], dtype=float).reshape(1, -1, 1)
    check_discrete_prompt(good, 2, vocabulary=9)
    with pytest.raises(lsrl.LsrlError, match=words.replace("(", r"\(")):
        check_discrete_prompt(np.array(tokens, dtype=float).reshape(-1, 1), 2, vocabulary=9)


def test_the_prompt_builder_refuses_an_unknown_query():
    from lsrl.programs import discrete_prompt

    with pytest.raises(lsrl.LsrlError, match="not one of the keys"):
        discrete_prompt({(1, 2): (3, 4)}, query=(9, 9))


@pytest.mark.parametrize("arch", TARGETS)
def test_targets_on_empty_batches_and_empty_sequences(accumulator_model, arch):
    net = _target(accumulator_model, arch)
    assert net(torch.zeros(0, 3, 1, dtype=torch.float64)).shape == (0, 3, 2)
    with pytest.raises(lsrl.SequenceError, match="no steps"):
        net(torch.zeros(2, 0, 1, dtype=torch.float64))


@pytest.mark.slow
def test_targets_and_experiments_are_reachable_after_import_lsrl():
    import subprocess
    import sys

    code = "import lsrl; print(lsrl.targets.ARCHITECTURES[0], lsrl.experiments.noise.__name__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["linear_rnn", "lsrl.experiments.noise"], result.stderr


@pytest.mark.parametrize("arch", ["hawk", "griffin"])
def test_a_hawk_too_large_for_memory_is_refused_with_the_estimate(accumulator_model, arch):
    with pytest.raises(lsrl.LsrlError, match=r"at least \d+\.\d GiB"):
        accumulator_model.to_torch(arch, max_len=10**8, construction="app_e")


# ---- integer tokens ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_discrete_approximator_refuses_tokens_that_are_not_integers(tmp_path):
    program = discrete_approximator(2)
    prompt = discrete_prompt({(1, 2): (3, 4)}, query=(1, 2)).astype(float)
    bad = prompt.copy()
    bad[3, 0] = 1.5
    model = lsrl.compile(program)
    runs = {
        "interpreter": lambda: program(bad),
        "interpreter exact": lambda: program(bad, exact=True),
        "compiled": lambda: model(bad),
        "compiled exact": lambda: model(bad, exact=True),
        "loaded": lambda: lsrl.load(model.save(tmp_path / "m"))(bad),
        "diagonal": lambda: model.diagonal()(bad),
        "gated_rnn": lambda: model.to_torch("gated_rnn")(torch.as_tensor(bad[None])),
        "gru": lambda: model.to_torch("gru")(torch.as_tensor(bad[None])),
    }
    for label, run in runs.items():
        with pytest.raises(lsrl.SequenceError, match=r"Input 'token': component 0 is (1\.5|3/2) at step 3 .*integer tokens"):
            run()
    assert list(model(prompt)[-2:, 0]) == [3, 4]  # integer tokens still pass
    assert model(bad, check_bounds=False).shape == (len(bad), 1)  # and the opt-out skips the check


def test_an_input_without_the_declaration_takes_any_number():
    x = lsrl.Input(1)
    assert not x.integer
    assert lsrl.ForEach(x * 2)([[0.25]])[0, 0] == 0.5
