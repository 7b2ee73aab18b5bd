"""Saved ``transformers`` folders bound by a manifest (``lsrl.hf.save`` / ``lsrl.hf.load``) and the check of
the ``config.lsrl_io`` record: every edit of every field is an ``LsrlError`` from ``lsrl.hf.inputs`` /
``outputs``, never a raw exception or a wrong answer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import lsrl
from lsrl.hf.record import record_digest
from lsrl.model.folders import MANIFEST, write_manifest


def real_program() -> lsrl.ForEach:
    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    return lsrl.ForEach(lsrl.Linear(lsrl.ReLU(lsrl.Linear(x, [[1, -2], [1, 1]], [0.5, 0])), [[1, 1]], [0.25]))


def token_program() -> lsrl.ForEach:
    token = lsrl.Input(1, name="token", bounds=(2, 6), integer=True)
    total = lsrl.LinState(token, A=[[1]], B=[[1]], name="total")
    return lsrl.ForEach(lsrl.Concat([total, lsrl.ReLU(token - 4)]))


@pytest.fixture(scope="module")
def built():
    """``{kind: (compiled model, stock Mamba, inputs)}`` for a real-valued and a token program."""
    cases = {}
    for kind, program, xs in (("real", real_program(), np.random.default_rng(0).uniform(-1, 1, (2, 4, 2))),
                              ("token", token_program(), np.array([[[2], [3], [6], [4]]]))):
        model = lsrl.compile(program)
        cases[kind] = model, model.to_hf("mamba", max_len=4), xs
    return cases


def run(hf, xs) -> torch.Tensor:
    with torch.no_grad():
        return lsrl.hf.outputs(hf, hf(**lsrl.hf.inputs(hf, xs)))


@pytest.mark.parametrize("kind", ["real", "token"])
def test_a_saved_folder_is_bound_and_loads_back(built, tmp_path, kind):
    model, hf, xs = built[kind]
    folder = lsrl.hf.save(hf, tmp_path / "hf")
    listed = json.loads((folder / MANIFEST).read_text())["sha256"]
    assert {"config.json", "model.safetensors", "README.md"} <= set(listed)
    loaded = lsrl.hf.load(folder)
    assert loaded.dtype == torch.float32 and torch.equal(run(loaded, xs), run(hf, xs))
    assert np.abs(run(loaded, xs).double().numpy() - model(xs)).max() <= hf.config.lsrl_io["tolerance"]


def test_a_float64_folder_loads_back_in_float64_unrounded(tmp_path):
    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    model = lsrl.compile(lsrl.ForEach(lsrl.Linear(lsrl.ReLU(x), [[0.1, 0.3]])))  # weights float32 would round
    hf = model.to_hf("mamba", max_len=4, dtype=torch.float64)
    assert any(not torch.equal(w, w.float().double()) for w in hf.state_dict().values())
    loaded = lsrl.hf.load(lsrl.hf.save(hf, tmp_path / "hf64"))
    xs = np.random.default_rng(1).uniform(-1, 1, (2, 4, 2))
    assert loaded.dtype == torch.float64 and torch.equal(run(loaded, xs), run(hf, xs))
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), hf.state_dict().values()))


def test_an_edited_or_mixed_folder_is_refused_by_lsrl_hf_load(built, tmp_path):
    _, hf, _ = built["real"]
    folder = lsrl.hf.save(hf, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    config["lsrl_io"]["output_scale"] = 0.5  # a power of two like the true one: only the bindings tell
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(lsrl.ModelFileError, match=r"hf/config.json: its sha256 differs from the one in manifest"):
        lsrl.hf.load(folder)
    write_manifest(folder)  # bound again: the record's own sha256 still refuses the edit
    with pytest.raises(lsrl.LsrlError, match="config.lsrl_io was edited after lsrl built it"):
        lsrl.hf.load(folder)
    lsrl.hf.save(hf, folder)
    weights = bytearray((folder / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (folder / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(lsrl.ModelFileError, match=r"hf/model.safetensors: its sha256 differs"):
        lsrl.hf.load(folder)
    with pytest.raises(lsrl.ModelFileError, match="is 300 bytes long"):
        lsrl.hf.save(hf, tmp_path / ("h" * 300))


# Values no field may take: wrong types, out of range, and values of the right kind that change the answer.
JUNK = [None, "x", True, -1, 0, 3, 0.5, 2.0, 1e9, float("nan"), float("inf"), [], {}, [0], [1, 0], [0, 0],
        [2, 3], "int8", "float16", {"0": 1.0}, {"2": 1.0}, "hawk", "input_ids"]


@pytest.mark.parametrize("kind", ["real", "token"])
def test_every_edit_of_every_record_field_is_refused(built, kind):
    """With the record's sha256 left as lsrl wrote it, any edit is refused; with it recomputed (a deliberate
    editor), an edit that breaks a field's type, range or agreement with the config names the field, and
    the rest still give the right answer."""
    _, hf, xs = built[kind]
    good = dict(hf.config.lsrl_io)
    expected = run(hf, xs)
    named = 0
    try:
        for field in [key for key in good if key != "sha256"]:
            for value in [*JUNK, "deleted"]:
                record = {k: v for k, v in good.items() if k != field}
                if value != "deleted":
                    record[field] = value
                if record == good:
                    continue
                hf.config.lsrl_io = record
                with pytest.raises(lsrl.LsrlError, match=f"{field}|was edited|format"):
                    run(hf, xs)
                hf.config.lsrl_io = {**record, "sha256": record_digest(record)}
                try:
                    outputs = run(hf, xs)
                except lsrl.LsrlError as error:
                    # a narrower bound or max_len is a consistent record that refuses these xs
                    assert field in str(error) or "lsrl.hf.inputs: xs" in str(error), (field, value, error)
                    named += 1
                else:
                    assert torch.equal(outputs, expected) or field in ("output_scale", "output_logits",
                                                                      "embed_scale", "embed_constants",
                                                                      "program", "tolerance", "largest_weight",
                                                                      "max_len", "input_low", "input_high"), \
                        (field, value)
    finally:
        hf.config.lsrl_io = good
    assert named > 100 and torch.equal(run(hf, xs), expected)


def test_a_record_of_the_first_format_is_refused(built):
    _, hf, xs = built["token"]
    good = dict(hf.config.lsrl_io)
    hf.config.lsrl_io = {key: value for key, value in good.items() if key != "sha256"} | {"format": 1}
    try:
        with pytest.raises(lsrl.LsrlError, match="format 1, written by an earlier lsrl"):
            lsrl.hf.inputs(hf, xs)
    finally:
        hf.config.lsrl_io = good


def test_a_generation_folder_binds_its_tokenizer_and_refuses_an_edited_head(tmp_path):
    token = lsrl.Input(1, name="token", bounds=(0, 3), integer=True)
    model = lsrl.compile(lsrl.ForEach(3 - token))  # the next token: 3 minus this one
    hf = model.to_hf("mamba", max_len=4, generate=True)
    folder = lsrl.hf.save(hf, tmp_path / "gen")
    listed = json.loads((folder / MANIFEST).read_text())["sha256"]
    assert "tokenizer.json" in listed and "model.safetensors" in listed
    xs = np.array([[[0], [2], [3], [1]]])
    loaded = lsrl.hf.load(folder)
    assert run(loaded, xs)[0, :, 0].tolist() == [3, 1, 0, 2]
    good = dict(hf.config.lsrl_io)
    try:
        hf.config.lsrl_io = {**good, "generation": {**good["generation"], "margin": 0.5}}
        with pytest.raises(lsrl.LsrlError, match="was edited after lsrl built it"):
            run(hf, xs)
        hf.config.lsrl_io = {**good, "output_logits": [0]}
        hf.config.lsrl_io["sha256"] = record_digest(hf.config.lsrl_io)
        with pytest.raises(lsrl.LsrlError, match="field 'generation'"):
            run(hf, xs)
    finally:
        hf.config.lsrl_io = good
