"""The suite's data and publishing: ``data.npz`` (1,000+ longer test sequences, traces, clean / corrupted pairs and
the expected outputs of interchanges, checked against references written from the tasks' rules), two builds
byte-identical, ``program.py`` runnable, the dataset card and Croissant file."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lsrl.bench import TASKS, build_suite, load
from lsrl.errors import LsrlError
from bench_builds import parity_builds

pytestmark = pytest.mark.slow  # every test here is slow (see pyproject.toml's markers)

@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Two builds of parity, tomita_3 and parity's distractor and rotated tiers (ROOT/TIER/parity/ARCH), each once per
    session (bench_builds; the first is tests/test_bench_tiers.py's rotated suite too)."""
    return parity_builds(tmp_path_factory)


def test_two_builds_are_byte_identical(builds):
    first, second = builds
    files = sorted(path.relative_to(first) for path in first.rglob("*") if path.is_file())
    # root: README.md, croissant.json, load_model.py; folders of 9 files; the rotated folders' rotations.json
    assert len(files) == 2 + 1 + (8 + 2 * 5) * 9 + 5
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
    runs = [subprocess.Popen([sys.executable, "program.py"], cwd=folder, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # side by side: each mostly imports
            for folder in (root / "parity" / "path", root / "tomita_3" / "rnn")]
    for run in runs:
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr
        assert "the outputs equal data.npz's test_outputs: True" in stdout


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
    assert len(files) == (8 + 2 * 5) * 8 + 5 and "rotated/parity/gru/rotations.json" in files


def test_every_folder_of_every_tier_says_its_tier_and_loads_standalone(builds):
    """``config.json``'s ``"tier"`` is the tier whose folder holds it; each folder's own ``load_model.py`` (torch
    alone: test_load_model_runs_with_torch_alone_in_its_folder) loads it and reproduces ``data.npz``'s test
    outputs; ``load(..., tier=...)`` reads the tier's folder."""
    root, _ = builds
    folders = sorted(manifest.parent for manifest in root.rglob("manifest.json"))
    assert len(folders) == 8 + 2 * 5
    for folder in folders:
        relative = folder.relative_to(root).parts
        tier = relative[0] if len(relative) == 3 else "compiled"
        config = json.loads((folder / "config.json").read_text())
        assert (config["tier"], config["task"], config["architecture"]) == (tier, *relative[-2:]), folder
        own = importlib.util.spec_from_file_location(f"load_model_{len(relative)}_{'_'.join(relative)}",
                                                     folder / "load_model.py")
        loader = importlib.util.module_from_spec(own)
        own.loader.exec_module(loader)
        with np.load(folder / "data.npz") as data, torch.no_grad():
            outputs = loader.load_folder(folder)(torch.as_tensor(data["test_inputs"][:64])).double().numpy()
            expected = data["test_outputs"][:64]
        real = ~np.isnan(expected)
        np.testing.assert_allclose(outputs[real], expected[real], rtol=0, atol=1e-9, err_msg=str(folder))
    distractors = load("parity/lstm", root=root, tier="distractors")
    names = {unit["node"] for unit in distractors.circuit.units}
    assert any(name.startswith("distractor.") for name in names)
    with np.load(root / "parity" / "lstm" / "data.npz") as data, torch.no_grad():
        outputs = distractors.model(torch.as_tensor(data["test_inputs"][:8])).numpy()
        np.testing.assert_allclose(outputs, np.nan_to_num(data["test_outputs"][:8], nan=outputs), atol=1e-9)


def test_a_distractor_folder_is_scored_as_its_tier(builds):
    """``lsrl bench eval`` on a folder of the distractor tier: its truth from ``circuit.json`` separates the task's
    units from the distractors' (resample patching near AUROC 1, random below)."""
    from lsrl.bench.eval import evaluate
    from lsrl.bench.eval.hooked import HookedSubject

    root, _ = builds
    subject = HookedSubject.from_folder(root / "distractors" / "parity" / "gru")
    assert subject.tier == "distractors" and any(node.startswith("distractor.") for node in subject.nodes)
    found = evaluate(subject, "resample", pairs=8)
    assert found["tier"] == "distractors" and found["unit_auroc"] >= 0.9, found
    assert evaluate(subject, "random", pairs=8)["unit_auroc"] < found["unit_auroc"]


def test_tiers_a_task_lacks_are_one_line_errors(tmp_path):
    with pytest.raises(LsrlError, match="only token programs .* not tomita_3 \\(rotated\\)"):
        build_suite(tmp_path, ["tomita_3"], progress=False, tiers=["rotated"])
    with pytest.raises(LsrlError, match="tiers must be among"):
        build_suite(tmp_path, ["parity"], progress=False, tiers=["noisy"])
    with pytest.raises(LsrlError, match="test_sequences must be a whole number >= 1, got 0"):
        build_suite(tmp_path, ["parity"], progress=False, test_sequences=0)
    with pytest.raises(LsrlError, match="has no tier 'rotated'"):
        load("tomita_3/rnn", root=tmp_path, tier="rotated")


def test_the_harness_scores_on_the_fixed_pairs_of_data_npz(builds):
    """``Pairs.from_data`` runs the pairs of the task's ``data.npz`` (equal and different lengths); where a corrupted
    run is shorter, its last step's values stand (the corrupted outputs against data.npz's, from the interpreter)."""
    from lsrl.bench.eval import Pairs, tier_subject
    from lsrl.bench.tiers import tier_model

    root, _ = builds
    pairs = Pairs.from_data(tier_subject(tier_model("parity", "compiled")))
    with np.load(root / "parity" / "path" / "data.npz") as data:
        clean, corrupted = data["pairs_clean_lengths"], data["pairs_corrupted_lengths"]
        assert np.array_equal(pairs.clean, data["pairs_clean_inputs"][:, : clean.max()])
        assert pairs.real[..., 0].sum(dim=1).tolist() == clean.tolist() and np.sum(clean != corrupted) >= 24
        for k, (n, m) in enumerate(zip(clean, corrupted)):
            expected = data["pairs_corrupted_outputs"][k, np.minimum(np.arange(n), m - 1)]
            np.testing.assert_allclose(pairs.corrupt_outputs[k, :n].numpy(), expected, rtol=0, atol=1e-9)
    half = Pairs.from_data(tier_subject(tier_model("parity", "compiled")), 8)
    assert half.clean.shape[0] == 8 and np.array_equal(half.clean[4], pairs.clean[32, : half.clean.shape[1]])


def test_acdc_finds_the_edges_of_a_distractor_folder(builds):
    """``lsrl bench eval --method acdc`` on the distractor tier's path folder: ACDC's greedy pruning keeps the task's
    edges and prunes the distractors' (edge AUROC high), where random scores stay near one half."""
    from click.testing import CliRunner

    from lsrl.bench.eval import Pairs, score
    from lsrl.bench.eval.hooked import HookedSubject
    from lsrl.bench.eval.methods import random_scores
    from lsrl.cli import main

    root, _ = builds
    folder = root / "distractors" / "parity" / "path"
    result = CliRunner().invoke(main, ["bench", "eval", "--method", "acdc", str(folder)])
    assert result.exit_code == 0, result.output
    printed = dict(line.split(": ") for line in result.output.splitlines())
    assert (printed["tier"], printed["method"]) == ("distractors", "acdc") and float(printed["edge_auroc"]) >= 0.8
    subject = HookedSubject.from_folder(folder)
    pairs = Pairs.from_data(subject, 8)
    chance = np.mean([score(subject, random_scores(subject, pairs, seed))["edge_auroc"] for seed in range(20)])
    assert abs(chance - 0.5) < 0.08 and float(printed["edge_auroc"]) > chance + 0.25
    wrong = CliRunner().invoke(main, ["bench", "eval", "--method", "acdc", "--tier", "rotated", str(folder)])
    assert wrong.exit_code != 0 and "tier 'rotated' given, but the folder's config.json says tier 'distractors'" \
        in wrong.output and len(wrong.output.strip().splitlines()) == 1
