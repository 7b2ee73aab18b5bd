"""Benchmark folders: a folder changed after its build is refused (sha256 in manifest.json), and every
field of config.json is checked on load: one-line ``ValueError`` (``SuiteFileError``) from the standalone loader,
``ModelFileError`` from ``lsrl.bench.load``, naming the file and the field. Before, edited configs raised raw
tracebacks, and some edits (``nonlinearity``, a removed layer) loaded silently with other outputs."""

import json
import shutil

import numpy as np
import pytest
import torch

from lsrl.bench import build_suite, load, standalone
from lsrl.bench.build import write_manifest
from lsrl.errors import LsrlError, ModelFileError


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    build_suite(root, ["majority", "tomita_3"], progress=False)
    return root


@pytest.fixture
def copy(suite, tmp_path):
    def make(name):
        shutil.copytree(suite, tmp_path / "suite", dirs_exist_ok=True)
        return tmp_path / "suite", tmp_path / "suite" / name
    return make


def edit_config(folder, change, rehash=True):
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    if rehash:
        write_manifest(folder)


def refused(root, folder, match):
    with pytest.raises(ValueError, match=match) as error:
        standalone.load_folder(folder)
    assert "\n" not in str(error.value)
    with pytest.raises(ModelFileError, match=match):
        load(f"{folder.parent.name}/{folder.name}", root=root)


@pytest.mark.slow
def test_an_edited_nonlinearity_is_refused_and_would_have_changed_the_outputs(copy):
    root, folder = copy("majority/rnn")
    edit_config(folder, lambda c: c["layers"][0]["state"][0]["kwargs"].update(nonlinearity="tanh"), rehash=False)
    refused(root, folder, r"config.json: its sha256 differs from the one in manifest.json")
    config = json.loads((folder / "config.json").read_text())
    tensors = standalone.read_tensors(folder)
    with np.load(folder / "data.npz") as data:
        x, y = data["test_inputs"], data["test_outputs"]
    with torch.no_grad():
        edited = standalone.Layers(config["layers"], tensors)(torch.as_tensor(x)).numpy()
    real = ~np.isnan(y)
    assert not np.allclose(edited[real], y[real])  # what loading it silently used to give


def test_a_removed_layer_is_refused(copy):
    root, folder = copy("tomita_3/lstm")
    edit_config(folder, lambda c: c["layers"].pop(2), rehash=False)
    refused(root, folder, "sha256 differs")
    edit_config(folder, lambda c: None)  # the manifest rewritten as well: the checks of the fields still see it
    root2, folder2 = copy("tomita_3/lstm")
    edit_config(folder2, lambda c: c["layers"].pop(1))
    refused(root2, folder2, r"tensor 'readout.\w+' is used by no layer|outputs")


def test_changed_weights_and_missing_manifest(copy):
    root, folder = copy("majority/linear_rnn")
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (folder / "model.safetensors").write_bytes(bytes(data))
    refused(root, folder, "model.safetensors: its sha256 differs")
    (folder / "manifest.json").unlink()
    refused(root, folder, "manifest.json: missing")


def _set(path, value):
    def change(config):
        target = config
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return change


EDITS = [  # (folder, path in config.json, new value or KeyError to delete, words of the message)
    ("majority/rnn", ["version"], 3, "field 'version' must be 4"),
    ("majority/rnn", ["tier"], "noisy", "field 'tier' must be one of"),
    ("majority/rnn", ["tier"], KeyError, "missing field 'tier'"),
    ("majority/rnn", ["format"], "x", "field 'format'"),
    ("majority/rnn", ["dtype"], "float16", "field 'dtype' must be one of"),
    ("majority/rnn", ["input_size"], 0, "field 'input_size' must be at least 1"),
    ("majority/rnn", ["input_size"], "1", "field 'input_size' must be int"),
    ("majority/rnn", ["output_size"], 2, "field 'output_size' says 2"),
    ("majority/rnn", ["layers"], [], "must list at least one layer"),
    ("majority/rnn", ["layers"], "x", "field 'layers' must be list"),
    ("majority/rnn", ["extra"], 1, "unknown field 'extra'"),
    ("majority/rnn", ["task"], KeyError, "missing field 'task'"),
    ("majority/rnn", ["layers", 0, "op"], "conv", "field 'op' must be one of"),
    ("majority/rnn", ["layers", 0, "state", 0, "kwargs", "nonlinearity"], "sigmoid", "'nonlinearity' must be 'tanh'"),
    ("majority/rnn", ["layers", 0, "state", 0, "kwargs", "hidden_size"], 3, "has shape"),
    ("majority/rnn", ["layers", 0, "state", 0, "kwargs", "hidden_size"], True, "'hidden_size' must be int"),
    ("majority/rnn", ["layers", 0, "state", 0, "kwargs", "bias"], False, "unknown field 'bias'"),
    ("majority/rnn", ["layers", 0, "state", 0, "h0"], "nothing", r"layers\[0\].state\[0\].h0: must name a tensor"),
    ("majority/rnn", ["layers", 0, "state", 0, "c0"], "blocks.0.h0", "must be null"),
    ("majority/rnn", ["layers", 0, "phi", 0, "weight"], None, "must name a tensor"),
    ("majority/rnn", ["layers", 0, "phi", 0, "bias"], KeyError, "missing field 'bias'"),
    ("majority/rnn", ["layers", 0, "gamma"], [{"op": "multiply_halves"}], "needs an even number"),
    ("majority/rnn", ["layers", 0, "state"], [], "must list at least one layer"),
    ("majority/gru", ["layers", 0, "hidden_size"], 5, "has shape"),
    ("majority/gru", ["layers", 0, "parameters"], {"weight_ih": "x"}, "must map exactly"),
    ("majority/linear_rnn", ["layers", 0, "state", 0, "A"], "blocks.0.s0", "has shape"),
    ("majority/path", ["layers", 0], "relu", r"layers\[0\]: must be an object"),
    ("tomita_3/lstm", ["layers", 0, "kwargs"], [], "must be an object"),
    ("tomita_3/lstm", ["layers", 0, "kwargs", "input_size"], 3, "the layer gets 2 features"),
    ("tomita_3/lstm", ["layers", 0, "c0"], None, "must name a tensor"),
    ("tomita_3/lstm", ["layers", 2, "op"], "multiply_halves", "needs an even number"),
]


@pytest.mark.parametrize("name, path, value, message", EDITS)
def test_every_config_field_is_checked(copy, name, path, value, message):
    root, folder = copy(name)
    edit_config(folder, _set(path, value))
    refused(root, folder, message)


def test_unreadable_files(copy):
    root, folder = copy("majority/rnn")
    (folder / "config.json").write_text("{not json")
    write_manifest(folder)
    refused(root, folder, "not valid JSON")
    root, folder = copy("majority/rnn")
    stored = json.loads((folder / "labels.json").read_text())
    stored["hooks"]["blocks.0.state"][0] = ["x", "0", "value"]
    (folder / "labels.json").write_text(json.dumps(stored))
    write_manifest(folder)
    with pytest.raises(ModelFileError, match=r"labels.json: hooks\['blocks.0.state'\]\[0\] must be \[node, index, role\]"):
        load("majority/rnn", root=root)
    root, folder = copy("majority/rnn")
    (folder / "data.npz").write_bytes(b"junk")
    with pytest.raises(ModelFileError, match="data.npz: its sha256 differs"):
        load("majority/rnn", root=root)
    write_manifest(folder)
    with pytest.raises(ModelFileError, match="data.npz: not a readable .npz file"):
        load("majority/rnn", root=root)
    with pytest.raises(ValueError, match="no such folder"):
        standalone.load_folder(root / "nothing")


def test_labels_of_a_torch_target_come_back_per_hook(suite):
    _, labels, _, _ = load("majority/rnn", root=suite)
    stored = json.loads((suite / "majority" / "rnn" / "labels.json").read_text())["hooks"]
    assert isinstance(labels, dict) and labels == {k: [tuple(u) for u in v] for k, v in stored.items()}


@pytest.mark.slow
def test_bad_build_and_load_arguments(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(LsrlError, match="build_suite: root: cannot write"):
        build_suite(tmp_path / "file", ["parity"], progress=False)
    with pytest.raises(LsrlError, match="build_suite: root: expected a path"):
        build_suite(None, ["parity"])
    with pytest.raises(LsrlError, match="name must be"):
        load(5, root=tmp_path)
    assert [f.name for f in build_suite(tmp_path / "one", "tomita_1", progress=False)] == ["rnn", "lstm", "gru"]
