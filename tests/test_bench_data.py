"""The suite's data and publishing: ``data.npz`` (1,000+ longer test sequences, traces, clean / corrupted pairs and
the expected outputs of interchanges, checked against references written from the tasks' rules), two builds
byte-identical, ``program.py`` runnable, the dataset card and Croissant file."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lsrl.bench import TASKS, build_suite

TASK_NAMES = ("parity", "tomita_3")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    build_suite(first, TASK_NAMES, progress=False)
    build_suite(second, TASK_NAMES, progress=False)
    return first, second


def test_two_builds_are_byte_identical(builds):
    first, second = builds
    files = sorted(path.relative_to(first) for path in first.rglob("*") if path.is_file())
    assert len(files) == 2 + 1 + 8 * 9  # root: README.md, croissant.json, load_model.py; 8 folders of 9 files
    assert files == sorted(path.relative_to(second) for path in second.rglob("*") if path.is_file())
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_splits_traces_and_pairs(builds):
    root, _ = builds
    with np.load(root / "parity" / "rnn" / "data.npz") as data:
        assert len(data["test_lengths"]) >= 1000 and data["test_lengths"].min() > data["train_lengths"].max()
        tokens, lengths = data["test_inputs"][..., 0], data["test_lengths"]
        real = np.arange(tokens.shape[1])[None] < lengths[:, None]
        count = np.cumsum(tokens == 1, axis=1)  # the counter of 1s, written from the task's rule
        assert np.array_equal(data["trace.count_1"][..., 0][real], count[real])
        assert np.all(np.isnan(data["trace.count_1"][~real]))
        clean, corrupted = data["pairs_clean_lengths"], data["pairs_corrupted_lengths"]
        assert np.all(clean[:32] == corrupted[:32]) and np.sum(clean[32:] != corrupted[32:]) >= 24
        donor = np.cumsum(data["pairs_corrupted_inputs"][..., 0] == 1, axis=1)
        for k, (n, m) in enumerate(zip(clean, corrupted)):
            held = donor[k, np.minimum(np.arange(n), m - 1)]  # the corrupted count, its last value held
            assert data["interchange.count_1"][k, :n, 0].tolist() == (held % 2).tolist(), k
            assert np.all(np.isnan(data["interchange.count_1"][k, n:]))
            assert data["pairs_clean_outputs"][k, :n, 0].tolist() == (np.cumsum(
                data["pairs_clean_inputs"][k, :n, 0] == 1) % 2).tolist()
    machine = TASKS["tomita_3"].automaton()
    with np.load(root / "tomita_3" / "gru" / "data.npz") as data:
        symbols = np.argmax(data["pairs_corrupted_inputs"], axis=-1)
        states = machine.states_after(symbols)
        for k, (n, m) in enumerate(zip(data["pairs_clean_lengths"], data["pairs_corrupted_lengths"])):
            accepted = machine.accepting[states[k, np.minimum(np.arange(n), m - 1)]]
            assert data["interchange.state"][k, :n, 0].tolist() == accepted.astype(float).tolist()


def test_program_py_runs_and_prints_the_outputs(builds):
    root, _ = builds
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for folder in (root / "parity" / "path", root / "tomita_3" / "rnn"):
        result = subprocess.run([sys.executable, "program.py"], cwd=folder, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        assert "the outputs equal data.npz's test_outputs: True" in result.stdout


def test_load_model_runs_with_torch_alone_in_its_folder(builds):
    """The folder's own ``load_model.py`` (no lsrl on the path) loads and runs the model; it is
    ``lsrl/bench/standalone.py`` with the cells' steps of ``lsrl/targets/cell_steps.py`` inlined verbatim (the one
    copy of the gate maths, which lsrl's GRU / LSTM run too)."""
    root, _ = builds
    folder = root / "parity" / "gru"
    code = ("import numpy as np; from load_model import load_folder; net = load_folder('.'); "
            "data = np.load('data.npz'); y, cache = net.run_with_cache(data['test_inputs'][:4]); "
            "print(sorted(cache) == sorted(net.hook_names), tuple(y.shape))")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "True"
    lsrl_root = Path(__file__).resolve().parents[1] / "lsrl"
    loader = (lsrl_root / "bench" / "standalone.py").read_text()
    steps = (lsrl_root / "targets" / "cell_steps.py").read_text()
    marker = "# ---- inlined into load_model.py from here on ----\n"
    body = steps[steps.index(marker) + len(marker):]
    shipped = (folder / "load_model.py").read_text()
    assert body in shipped and "def gru_step" in body and "import lsrl" not in shipped and "from lsrl" not in shipped
    # the rest is standalone.py verbatim, the import of the steps replaced by them
    import_line = next(line for line in loader.splitlines(keepends=True) if line.startswith("from lsrl.targets"))
    before, after = loader.split(import_line)
    assert shipped.startswith(before) and shipped.endswith(after)


def test_dataset_card_and_croissant(builds):
    root, _ = builds
    card = (root / "README.md").read_text()
    assert card.startswith("---\n") and "\nlicense: \"mit\"\n" in card and "| `parity/gru` |" in card
    model_card = (root / "parity" / "rnn" / "README.md").read_text()
    circuit = json.loads((root / "parity" / "rnn" / "circuit.json").read_text())
    assert f"{len(circuit['units'])} units in {len(circuit['hooks'])} hooks" in model_card
    described = json.loads((root / "croissant.json").read_text())
    assert described["conformsTo"] == "http://mlcommons.org/croissant/1.0"
    files = {entry["contentUrl"]: entry["sha256"] for entry in described["distribution"]}
    manifest = json.loads((root / "parity" / "lstm" / "manifest.json").read_text())["sha256"]
    assert {name: files[f"parity/lstm/{name}"] for name in manifest} == manifest
    assert len(files) == 8 * 8
