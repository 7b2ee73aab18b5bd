"""Issue 17, "nothing silently wrong": tampered model files, inputs outside their declared
bounds, complex input, edge shapes, torch targets' input checks, float32 / ONNX precision, and
one-line CLI errors. Each test is a case that once gave a wrong answer or a raw traceback."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import lsrl


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
    if tensors is not None:
        save_file(tensors, str(folder / "weights.safetensors"))
    if structure is not None:
        (folder / "model.json").write_text(json.dumps(structure))
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
