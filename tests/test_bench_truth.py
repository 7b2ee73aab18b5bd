"""The benchmark's ground truth (``circuit.json``, ``lsrl.bench.truth``) checked on built folders with the folder's
own ``load_model.py`` (torch only, no lsrl class) and ``data.npz``: every unit in the circuit changes the outputs
when interchanged, no edge in the circuit passes through a gate held shut, every variable marked interchangeable
reproduces ``data.npz``'s interchange, the rotated tier marks only the task's variables, and the truth a method is
scored against is the folder's, whether the model comes from the folder or from memory.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import lsrl.bench
from lsrl.bench.circuit import read_circuit
from lsrl.bench.eval import evaluate, tier_subject
from lsrl.bench.eval.hooked import HookedSubject
from lsrl.bench.tiers import DISTRACTOR_PREFIX, tier_model, unrotated_model
from lsrl.bench.truth import tier_circuit
from bench_builds import cell_part

TASK = "parity"
ARCHS = ("path", "linear_rnn", "rnn", "lstm", "gru")
PAIRS_PER_UNIT = 8  # interchanges tried per unit: the same-length test sequences on which it differs most
CHANGED = 1e-6  # an output change above this is a change (float64 noise of the exact targets is ~1e-15)


@functools.lru_cache(maxsize=None)
def _suite() -> Path:
    import tempfile

    root = Path(tempfile.mkdtemp())
    lsrl.bench.build_suite(root, [TASK], tiers=["compiled", "distractors", "rotated"], progress=False)
    return root


def _folder(tier: str, arch: str) -> Path:
    return _suite() / (TASK if tier == "compiled" else f"{tier}/{TASK}") / arch


def _loaded(folder: Path):
    """The folder's module, built by its own ``load_model.py``."""
    spec = importlib.util.spec_from_file_location(f"load_model_{abs(hash(folder))}", folder / "load_model.py")
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    return loader.load_folder(folder)


def _run(net, xs, patch=None):
    with torch.no_grad():
        outputs, cache = net.run_with_cache(xs, patch)
    return outputs.double().numpy(), {hook: values.double().numpy() for hook, values in cache.items()}


def _interchange_rows(values: np.ndarray, lengths: np.ndarray) -> list[tuple[int, int]]:
    """Up to ``PAIRS_PER_UNIT`` (clean, source) test sequences of equal length on which a unit's values
    ``(N, T)`` differ most."""
    pairs = []
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        trace = values[rows, :length]
        distance = np.abs(trace[:, None] - trace[None]).sum(axis=-1)
        best = np.argmax(distance, axis=1)
        pairs += [(float(distance[i, best[i]]), int(rows[i]), int(rows[best[i]])) for i in range(len(rows))]
    pairs.sort(reverse=True)
    return [(clean, source) for gap, clean, source in pairs[:PAIRS_PER_UNIT] if gap > 0]


@pytest.mark.slow
@pytest.mark.parametrize("tier", ["compiled", "distractors"])
@pytest.mark.parametrize("arch", ARCHS)
def test_every_unit_in_the_circuit_changes_the_outputs_when_interchanged(tier, arch):
    folder = _folder(tier, arch)
    circuit, data, net = read_circuit(folder / "circuit.json"), np.load(folder / "data.npz"), _loaded(folder)
    xs, lengths = data["test_inputs"], data["test_lengths"]
    outputs, cache = _run(net, xs)
    units = sorted(circuit.in_circuit())
    assert units
    cleans, patches, owners = [], {hook: [] for hook in cache}, []
    for hook, unit in units:
        for clean, source in _interchange_rows(cache[hook][..., unit], lengths):
            cleans.append(clean)
            owners.append((hook, unit))
            for name, values in cache.items():
                patch = np.full(values.shape[1:], np.nan)
                if name == hook:
                    patch[:, unit] = values[source, :, unit]
                patches[name].append(patch)
    patched, _ = _run(net, xs[cleans], {hook: np.stack(rows) for hook, rows in patches.items()})
    real = (np.arange(xs.shape[1])[None] < lengths[cleans][:, None])[..., None]
    changed = (np.abs(patched - outputs[cleans]) * real).max(axis=(1, 2)) > CHANGED
    moving = {owner for owner, moved in zip(owners, changed) if moved}
    inert = [unit for unit in units if unit not in moving]
    assert not inert, f"{folder}: units in the circuit that no interchange moves: {inert[:8]}"


GATE_OF = {  # (sender gate, receiver gate, delay) -> (the gate multiplying the edge, its shut value)
    ("", "", 1): ("z", 0.0), ("n", "", 0): ("z", 1.0), ("", "n", 1): ("r", 0.0),  # GRU
    ("c", "c", 1): ("f", 0.0), ("i", "c", 0): ("g", 0.0), ("g", "c", 0): ("i", 0.0),  # LSTM
    ("c", "", 0): ("o", 0.0), ("o", "", 0): ("c", 0.0),
}


@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_no_edge_in_the_circuit_passes_through_a_gate_held_shut(arch):
    folder = _folder("distractors", arch)
    circuit, data = read_circuit(folder / "circuit.json"), np.load(folder / "data.npz")
    _, cache = _run(_loaded(folder), data["test_inputs"])
    real = np.arange(data["test_inputs"].shape[1])[None] < data["test_lengths"][:, None]
    inside, shut = circuit.in_circuit(), set(circuit.shut_edges)
    checked = 0
    for edge in circuit.unit_edges:
        source, sender, target, receiver, delay = edge
        (layer, sender_gate), (other, receiver_gate) = cell_part(source), cell_part(target)
        gate = GATE_OF.get((sender_gate, receiver_gate, delay))
        if layer != other or gate is None or sender != receiver and receiver_gate != "n":
            continue
        name = f"{layer}.{gate[0]}" if gate[0] else layer
        held_shut = bool(np.all(cache[name][..., receiver][real] == gate[1]))
        assert held_shut == (edge in shut), edge
        checked += 1
        if (source, sender) in inside and (target, receiver) in inside and edge not in shut:
            assert not held_shut
    assert checked and shut, "the compiled cells hold some gates shut: the rule must act"


@pytest.mark.parametrize("tier", ["compiled", "distractors"])
@pytest.mark.parametrize("arch", ARCHS)
def test_variables_marked_interchangeable_reproduce_the_interchanges_of_data_npz(tier, arch):
    folder = _folder(tier, arch)
    circuit, data, net = read_circuit(folder / "circuit.json"), np.load(folder / "data.npz"), _loaded(folder)
    clean, lengths = data["pairs_clean_inputs"], data["pairs_clean_lengths"]
    steps = clean.shape[1]
    corrupted = np.zeros((len(clean), max(steps, data["pairs_corrupted_inputs"].shape[1]), clean.shape[-1]))
    corrupted[:, :data["pairs_corrupted_inputs"].shape[1]] = data["pairs_corrupted_inputs"]
    _, donors = _run(net, corrupted)
    last = np.minimum(np.arange(steps)[None], data["pairs_corrupted_lengths"][:, None] - 1)
    rows = np.arange(len(clean))[:, None]
    units = {}
    for variable in circuit.variables:
        units.setdefault(variable["node"], []).extend(map(tuple, variable["units"]))
    real = np.arange(steps)[None] < lengths[:, None]
    marked = 0
    for node in circuit.nodes:
        if node["name"] not in units:
            continue
        if not node["interchangeable"]:
            assert node["interchange_note"], node
            continue
        patch = {hook: np.full((len(clean), steps, values.shape[-1]), np.nan) for hook, values in donors.items()}
        for hook, unit in units[node["name"]]:
            patch[hook][..., unit] = donors[hook][rows, last, unit]
        outputs, _ = _run(net, clean, patch)
        expected = data[f"interchange.{node['name']}"][:, :steps]
        assert np.allclose(outputs[real], expected[real], atol=CHANGED, rtol=0), node["name"]
        marked += 1
    in_circuit = [node for node in circuit.nodes if node["in_circuit"] and node["name"] != "token"]
    assert marked >= len(in_circuit) // 2, "most circuit variables of a compiled model are interchangeable"


@pytest.mark.parametrize("arch", ARCHS)
def test_a_rotated_folder_holds_its_distractor_models_truth_and_only_task_variables(arch):
    rotated = read_circuit(_folder("rotated", arch) / "circuit.json")
    data = dict(np.load(_folder("rotated", arch) / "data.npz"))
    assert rotated == tier_circuit(unrotated_model(TASK), arch, data)  # the model before its change of basis
    inside = {node["name"] for node in rotated.nodes if node["in_circuit"]}
    outside = {node["name"] for node in rotated.nodes if not node["in_circuit"]}
    assert inside and not any(name.startswith(DISTRACTOR_PREFIX) for name in inside)
    assert any(name.startswith(DISTRACTOR_PREFIX) for name in outside)
    variables = {variable["node"] for variable in rotated.variables if variable["in_circuit"]}
    assert variables and not any(name.startswith(DISTRACTOR_PREFIX) for name in variables)


@pytest.mark.slow
@pytest.mark.parametrize("tier", ["distractors", "rotated"])
def test_the_truth_is_the_folders_from_memory_or_folder_and_pairs_change_no_truth(tier):
    row = {}
    for pairs in (8, 32):
        for arch in ("path", "lstm"):
            from_folder = HookedSubject.from_folder(_folder(tier, arch))
            in_memory = tier_subject(tier_model(TASK, tier), arch)
            assert from_folder.nodes == in_memory.nodes
            assert [c.truth for c in from_folder.candidates] == [c.truth for c in in_memory.candidates]
            folder_row, memory_row = (evaluate(subject, "resample", pairs) for subject in (from_folder, in_memory))
            for column in ("node_auroc", "unit_auroc", "unit_tpr", "unit_fpr", "nodes", "units", "edges"):
                assert folder_row[column] == pytest.approx(memory_row[column], nan_ok=True), column
            assert not np.isnan(folder_row["node_auroc"])  # variables on both sides of the truth
            row[(pairs, arch)] = folder_row
    for arch in ("path", "lstm"):
        assert [row[(8, arch)][column] for column in ("nodes", "units", "edges")] == \
            [row[(32, arch)][column] for column in ("nodes", "units", "edges")]


@pytest.mark.slow
def test_the_published_rows_are_the_scores_of_a_rebuilt_folder():
    from lsrl.bench.eval.harness import COLUMNS, evaluate_all

    methods = ("resample", "attribution", "random")
    rows = evaluate_all([TASK], tiers=("distractors",), methods=methods, suite=_suite())
    published_file = Path(__file__).parent.parent / "docs" / "results" / "bench" / "eval.csv"
    with open(published_file, newline="") as file:
        published = {(row["arch"], row["method"]): row for row in csv.DictReader(file)
                     if row["task"] == TASK and row["tier"] == "distractors" and row["method"] in methods}
    assert len(rows) == len(published) == len(ARCHS) * len(methods)
    for row in rows:
        stored = published[(row["arch"], row["method"])]
        for column in COLUMNS[4:-1]:  # every score but the seconds
            value = float(row[column])
            if stored[column] == "":
                assert np.isnan(value), (row["arch"], row["method"], column)
            else:
                assert value == pytest.approx(float(stored[column]), abs=1e-4), (row["arch"], row["method"], column)


def _published_summary() -> dict[tuple[str, str, str], dict[str, str]]:
    summary_file = Path(__file__).parent.parent / "docs" / "results" / "bench" / "eval_summary.csv"
    with open(summary_file, newline="") as file:
        return {(row["tier"], row["arch"], row["method"]): row for row in csv.DictReader(file)}


@pytest.mark.parametrize("arch", ARCHS)
def test_the_published_table_separates_the_methods_on_the_distractor_and_rotated_tiers(arch):
    summary = _published_summary()

    def node(tier: str, method: str) -> float:
        return float(summary[(tier, arch, method)]["node_auroc"])

    # distractors: patching near 1, random near 0.5, zero ablation (the leak's raised units) and probes clearly below
    assert node("distractors", "resample") >= 0.95
    assert 0.3 <= node("distractors", "random") <= 0.7
    assert node("distractors", "zero") <= node("distractors", "resample") - 0.05
    assert node("distractors", "probe") <= node("distractors", "resample") - 0.1
    # rotated, scored in the models' own coordinates: the subspace search beats unit-level patching and chance
    assert node("rotated", "das") > node("rotated", "resample") > node("rotated", "random") + 0.2
