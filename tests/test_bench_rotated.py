"""The rotated tier's torch folders scored in their own coordinates (``lsrl.bench.eval.hooked.rotated``): the methods
see and set the values the model's hooks hold, and the truth of ``circuit.json`` (labelled coordinates) is mapped
onto them through ``rotations.json``. Checked with the folder's own ``load_model.py`` and ``data.npz``: every raw
coordinate marked in the circuit changes the outputs when set to its value on another input of the fixed pairs, and
none marked outside does."""

from __future__ import annotations

import functools
import importlib.util
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import lsrl.bench
from lsrl.bench.circuit import read_circuit
from lsrl.bench.eval import evaluate
from lsrl.bench.eval.harness import combinations
from lsrl.bench.eval.hooked import HookedSubject
from lsrl.bench.eval.pairs import Pairs
from lsrl.bench.rotations import HookRotation, read_rotations
from lsrl.bench.tiers import unrotated_model

TASK = "parity"
WIDENED = "copy_delay_1"  # its rotated LSTM and GRU hold as sign parts a layer its distractor model holds whole
TORCH_ARCHS = ("linear_rnn", "rnn", "lstm", "gru")
CHANGED = 1e-9  # an output change above this is a change (the rotated weights' float64 rounding moves ~1e-15)


@functools.lru_cache(maxsize=None)
def _suite() -> Path:
    """parity's and copy_delay_1's distractor and rotated tiers at the published test split (the liveness of the
    truth is read on it)."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="lsrl-bench-rotated-"))
    lsrl.bench.build_suite(root, [TASK, WIDENED], tiers=["distractors", "rotated"], progress=False)
    return root


def _folder(tier: str, arch: str, task: str = TASK) -> Path:
    return _suite() / tier / task / arch


def _loaded(folder: Path):
    """The folder's model, built by its own ``load_model.py``."""
    spec = importlib.util.spec_from_file_location(f"load_model_{abs(hash(folder))}", folder / "load_model.py")
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    return loader.load_folder(folder)


def test_a_coordinate_mixes_the_labelled_units_its_row_of_q_names():
    turn = np.array([[Fraction(3, 5), Fraction(-4, 5)], [Fraction(4, 5), Fraction(3, 5)]], dtype=object)
    whole = HookRotation(turn, (0, 2), (None, None))  # unit 1 not rotated
    assert whole.mixing(3).tolist() == [[True, False, True], [False, True, False], [True, False, True]]
    swap = np.array([[Fraction(0), Fraction(1)], [Fraction(1), Fraction(0)]], dtype=object)
    split = HookRotation(swap, (0, 1), (2, 3))  # [ReLU(r0), ReLU(r1), ReLU(-r0), ReLU(-r1)], r0 = h1, r1 = h0
    assert split.mixing(4).astype(int).tolist() == [[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]]


@pytest.mark.slow
@pytest.mark.parametrize("arch", TORCH_ARCHS)
def test_a_rotated_subject_sees_and_sets_the_values_its_hooks_hold(arch):
    """The subject's layers are the folder's own hook values (rotated, not the labelled ones) and its candidates at a
    rotated hook are its raw coordinates, which hold the variables of several labelled units."""
    folder = _folder("rotated", arch)
    subject, rotations = HookedSubject.from_folder(folder), read_rotations(folder)
    data = np.load(folder / "data.npz")
    xs = data["test_inputs"][:16]
    with torch.no_grad():
        outputs, own = _loaded(folder).run_with_cache(xs)
        ran, layers = subject.run(xs)
    np.testing.assert_array_equal(ran.numpy(), outputs.double().numpy()[..., : subject.output_dim])
    for hook, values in zip(subject.hooks, layers):
        np.testing.assert_array_equal(values.numpy(), own[hook].double().numpy(), err_msg=hook)
    assert rotations
    for hook, rotation in rotations.items():  # before the change of basis the values differ: not what is seen
        assert not np.allclose(rotation.unrotate(own[hook].double().numpy()), own[hook].double().numpy()), hook
    rotated = [c for c in subject.candidates if subject.hooks[c.layer] in rotations]
    assert any(len(c.nodes) > 1 for c in rotated)  # a raw coordinate mixes several variables
    assert any(c.truth for c in rotated)
    assert any(not c.truth for c in rotated) or arch == "linear_rnn"  # there every one mixes a circuit unit in


def _moves(folder: Path, subject: HookedSubject, candidates: list) -> list[float]:
    """Per candidate, the largest change of the outputs (over the clean sequences' real steps) when, through the
    folder's own loader, that unit alone is set at every step to its value on the corrupted input of ``data.npz``'s
    pairs (the corrupted run's values held at each clean step)."""
    net, pairs = _loaded(folder), Pairs.from_data(subject)
    count, steps = pairs.clean.shape[:2]
    patch = {hook: np.full((len(candidates) * count, steps, width), np.nan)
             for hook, width in zip(subject.hooks, subject.widths)}
    for position, candidate in enumerate(candidates):
        patch[subject.hooks[candidate.layer]][position * count:(position + 1) * count, :, candidate.unit] = \
            pairs.corrupt_layers[candidate.layer][..., candidate.unit].numpy()
    with torch.no_grad():
        clean, _ = net.run_with_cache(pairs.clean)
        patched, _ = net.run_with_cache(np.concatenate([pairs.clean] * len(candidates)), patch)
    change = (patched.double() - clean.double().repeat(len(candidates), 1, 1)).abs().numpy()
    change = change.reshape(len(candidates), count, steps, -1) * pairs.real.numpy()
    return change.max(axis=(1, 2, 3)).tolist()


@pytest.mark.slow
@pytest.mark.parametrize(("task", "arch"), [*((TASK, arch) for arch in TORCH_ARCHS),
                                            (WIDENED, "lstm"), (WIDENED, "gru")])
def test_a_raw_coordinate_moves_the_outputs_exactly_when_marked_in_the_circuit(task, arch):
    """Every coordinate of a rotated hook changes the outputs when the subject marks it in the circuit, and changes
    nothing when it marks it outside (``_moves``)."""
    folder = _folder("rotated", arch, task)
    subject, rotations = HookedSubject.from_folder(folder), read_rotations(folder)
    candidates = [c for c in subject.candidates if subject.hooks[c.layer] in rotations]
    moved = _moves(folder, subject, candidates)
    inert = [(subject.hooks[c.layer], c.unit) for c, most in zip(candidates, moved) if c.truth and most <= CHANGED]
    leaking = [(subject.hooks[c.layer], c.unit, most) for c, most in zip(candidates, moved)
               if not c.truth and most > CHANGED]
    assert not inert and not leaking, (inert, leaking)
    assert any(c.truth for c in candidates)


@pytest.mark.slow
def test_a_submission_for_a_rotated_folder_scores_the_units_its_hooks_hold():
    """A method written outside lsrl, patching each unit of every hook as the folder's loader holds it, submits a score
    per raw unit (``lsrl.bench.score``): scored against the raw truth, it calls no unit outside the circuit. A hook
    that holds as sign parts what ``circuit.json``'s hook holds whole takes a score per unit the model holds."""
    folder = _folder("rotated", "gru", WIDENED)
    subject, circuit = HookedSubject.from_folder(folder), read_circuit(folder / "circuit.json")
    listed = {hook["name"]: hook["width"] for hook in circuit.hooks}
    wider = [hook for hook, width in zip(subject.hooks, subject.widths) if width > listed[hook]]
    assert wider and set(wider) & set(read_rotations(folder))
    moved = _moves(folder, subject, subject.candidates)
    units = {hook: [0.0] * width for hook, width in zip(subject.hooks, subject.widths)}
    for candidate, most in zip(subject.candidates, moved):
        units[subject.hooks[candidate.layer]][candidate.unit] = most
    row = lsrl.bench.score({"units": units, "threshold": CHANGED}, folder)
    assert row["unit_fpr"] == 0.0 and row["unit_auroc"] >= 0.95, row
    assert row["units"] == len(subject.candidates)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_resample_on_a_rotated_folder_scores_other_units_than_on_its_distractor_folder(arch):
    """Its raw coordinates are other units than those of the model before the change of basis (``unrotated_model``):
    the rows differ; activation patching still separates the task's variables from the distractors', better than
    chance; probes run on it."""
    rotated = HookedSubject.from_folder(_folder("rotated", arch))
    plain = HookedSubject.from_tier(unrotated_model(TASK), arch)
    assert rotated.nodes == plain.nodes  # the variables and their truth: circuit.json's, the same
    assert [c.truth for c in rotated.candidates] != [c.truth for c in plain.candidates]
    resample, chance = evaluate(rotated, "resample", pairs=32), evaluate(rotated, "random", pairs=32)
    distractor = evaluate(plain, "resample", pairs=32)
    assert (resample["unit_auroc"], resample["node_fpr"]) != (distractor["unit_auroc"], distractor["node_fpr"])
    assert resample["node_auroc"] >= 0.85 and resample["unit_fpr"] == 0.0, resample
    assert resample["node_auroc"] > chance["node_auroc"] and resample["unit_auroc"] > chance["unit_auroc"] + 0.2
    probe = evaluate(rotated, "probe", pairs=8)  # affine maps of whole layers: blind to the change of basis
    assert 0.0 <= probe["node_auroc"] <= 1.0 and 0.0 <= probe["interchange_accuracy"] <= 1.0, probe
    assert {("rotated", arch, "resample"), ("rotated", arch, "probe"), ("rotated", arch, "edge_attribution"),
            ("rotated", arch, "das")} <= set(combinations())
    assert ("rotated", arch, "acdc") not in combinations() and ("rotated", "path", "acdc") in combinations()


@pytest.mark.slow
def test_a_rotated_folders_edges_join_its_raw_coordinates():
    """The unit edges the methods score join raw coordinates: at a rotated hook a labelled edge becomes the edges
    between the coordinates that mix its ends, and one of the circuit only where it carries a labelled edge of it."""
    folder = _folder("rotated", "lstm")
    subject, circuit, rotations = HookedSubject.from_folder(folder), read_circuit(folder / "circuit.json"), \
        read_rotations(folder)
    labelled, raw = set(circuit.unit_edges), set(subject.unit_edges)
    touching = {edge for edge in raw if edge[0] in rotations or edge[2] in rotations}
    untouched = {edge for edge in labelled if edge[0] not in rotations and edge[2] not in rotations}
    assert untouched == raw - touching  # where no rotated hook is involved, the edges are circuit.json's
    assert len(touching) > len(labelled - untouched)  # a coordinate mixes several units: more edges
    truth = {(c.layer, c.unit): c.truth for c in subject.candidates}
    inside = [e for e in subject.edges() if not e.shut and truth.get((e.layer, e.receiver))]
    assert inside and all(e.source < 0 or truth.get((e.source, e.sender)) is not None for e in inside)
