"""DAS, the harness's subspace search (lsrl.bench.eval.das), on the rotated tier.

Checked against independent computations: the interchange accuracy against the program's own interchange
(``program(xs, patch=...)``), the overlap against the exact rotations of the tier (``TierModel.bases``) and of a
folder's ``rotations.json``; controls: an untrained rotation and a layer that holds no unit of the variable.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from lsrl.bench.eval import Pairs, Subject, tier_subject
from lsrl.bench.eval.das import THRESHOLD, das, overlap_with_labels
from lsrl.bench.eval.subject import holds
from lsrl.bench.tiers import tier_model
from lsrl.errors import LsrlError

CIRCUIT = ["ones_minus_zeros", "more_ones"]  # majority's running count and its sign


@functools.lru_cache(maxsize=None)
def _rotated(arch="path"):
    return tier_subject(tier_model("majority", "rotated"), arch)


@functools.lru_cache(maxsize=None)
def _found(steps, seed=0):
    subject = _rotated()
    return das(subject, Pairs.from_data(subject, 16), seed=seed, steps=steps, nodes=CIRCUIT)


def _units(subject, layer, node):
    return [unit for unit, label in enumerate(subject.labels[layer]) if holds(label) and label.node == node
            and subject.live[layer][unit]]


def _planted(subject, node):
    """The first layer holding live units of ``node``, and their rotated directions ``Q[:, units]`` as rows."""
    layer = next(i for i in range(len(subject.labels)) if _units(subject, i, node))
    basis = subject.bases[layer]
    assert basis is not None, "majority's rotated tier rotates the layer of its count"
    return layer, np.asarray(basis)[:, _units(subject, layer, node)].T


@pytest.mark.slow
def test_das_finds_the_planted_subspace_and_the_programs_interchange():
    found = _found(steps=60)
    for node in CIRCUIT:
        assert found.interchange[node] >= 0.95, (node, found.interchange)
        assert found.overlap[node] >= 0.95, (node, found.overlap)
        assert found.nodes[node] > THRESHOLD, (node, found.nodes)


def test_an_untrained_rotation_scores_clearly_lower():
    trained, untrained = _found(steps=60), _found(steps=1)
    assert np.mean([untrained.overlap[n] for n in CIRCUIT]) <= np.mean([trained.overlap[n] for n in CIRCUIT]) - 0.5
    assert np.mean([untrained.interchange[n] for n in CIRCUIT]) <= \
        np.mean([trained.interchange[n] for n in CIRCUIT]) - 0.1


def test_the_overlap_is_one_on_the_planted_directions_and_zero_off_them():
    """Against the tier's exact rotation: its own directions overlap 1, a unit vector of the rotated coordinates
    (which mixes the variable with others) less, and a layer holding none of the variable's units 0."""
    subject = _rotated()
    layer, rows = _planted(subject, "ones_minus_zeros")
    assert rows.shape[1] > rows.shape[0] and not np.allclose(np.abs(rows), np.eye(rows.shape[1])[: len(rows)])
    assert overlap_with_labels(subject, layer, ["ones_minus_zeros"], rows) == pytest.approx(1.0, abs=1e-9)
    mixed = np.eye(rows.shape[1])[[int(np.argmax(np.abs(rows[0])))]]
    assert 0.0 < overlap_with_labels(subject, layer, ["ones_minus_zeros"], mixed) < 1.0 - 1e-6
    other = next(i for i in range(len(subject.labels)) if not _units(subject, i, "ones_minus_zeros")
                 and subject.live[i].any())
    probe = np.eye(subject.widths[other])[:1]
    assert overlap_with_labels(subject, other, ["ones_minus_zeros"], probe) == 0.0


@pytest.mark.slow
def test_das_is_deterministic_under_its_seed():
    subject = _rotated()
    again = das(subject, Pairs.from_data(subject, 16), seed=0, steps=60, nodes=CIRCUIT)
    first = _found(steps=60)
    assert (again.nodes, again.interchange, again.overlap) == (first.nodes, first.interchange, first.overlap)


@pytest.mark.slow
def test_das_on_a_rotated_hooked_folder_reads_its_rotations(tmp_path):
    """A stock GRU folder of the rotated tier: searched in its own (rotated) coordinates, scored through
    ``rotations.json``."""
    import lsrl.bench
    from lsrl.bench.eval.hooked import HookedSubject

    lsrl.bench.build_suite(tmp_path, ["majority"], progress=False, tiers=["rotated"], test_sequences=20)
    subject = HookedSubject.from_folder(tmp_path / "rotated" / "majority" / "gru")
    assert subject.rotations
    found = das(subject, Pairs.from_data(subject, 16), nodes=["ones_minus_zeros"])
    # a GRU hook holds the count as [ReLU(r); ReLU(-r)]: the learned direction may lean on their sum, which the
    # interchange hardly reads (bench.md, das)
    assert found.interchange["ones_minus_zeros"] >= 0.95 and found.overlap["ones_minus_zeros"] >= 0.7, found
    path = HookedSubject.from_folder(tmp_path / "rotated" / "majority" / "path")  # its rotations.json as bases
    tier = [None if basis is None else basis.to_numpy() for basis in tier_model("majority", "rotated").bases]
    assert [b is None for b in path.bases] == [b is None for b in tier] and any(b is not None for b in tier)
    for mine, exact in zip(path.bases, tier):
        if exact is not None:
            np.testing.assert_array_equal(mine, exact)


def test_bad_arguments_are_one_line_errors_naming_them():
    subject = _rotated()
    pairs = Pairs.from_data(subject, 4)
    for arguments, word in (({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"), ({"steps": 0}, "steps"),
                            ({"nodes": ["no_such_variable"]}, "nodes"), ({"nodes": "more_ones"}, "nodes"),
                            ({"nodes": []}, "nodes"), ({"nodes": [["more_ones"]]}, "nodes")):
        with pytest.raises(LsrlError, match=word) as error:
            das(subject, pairs, **arguments)
        assert "\n" not in str(error.value)


def test_a_subject_it_cannot_intervene_on_is_refused():
    """A bare ``Subject`` (no ``run``): das needs to run the model with its interchanges inside the recurrence."""
    held = _rotated()
    bare = Subject(held.task, held.tier, held.arch, held.labels, held.bases, held.program, held.output_dim,
                   held.candidates, held.live)
    with pytest.raises(LsrlError, match="subject must be a model it can run with interventions") as error:
        das(bare, Pairs.from_data(held, 4))
    assert "\n" not in str(error.value)
