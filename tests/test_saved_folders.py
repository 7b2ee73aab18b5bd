"""Saved folders as units bound by a manifest (``lsrl.model.folders``): ``model.save`` / ``lsrl.load``,
``lsrl compile -o``; edits of ``model.json`` that once loaded; concurrent writers and writers killed at
every step of the swap leave the old model or the new one, never a mix, and no litter once saved again."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import lsrl
from lsrl.cli import main
from lsrl.model import folders
from lsrl.model.folders import MANIFEST, write_manifest

FORK = multiprocessing.get_context("fork")  # the children share the imported lsrl: they start in milliseconds
XS = np.array([[1.0], [0.0], [1.0], [1.0]])


def counter(scale: int) -> lsrl.CompiledProgram:
    """A model whose outputs name it: ``scale`` times the running count of ones, through a ReLU."""
    x = lsrl.Input(1, name="x", bounds=(0, 1), integer=True)
    count = lsrl.LinState(x, A=[[1]], B=[[1]], name="count")
    return lsrl.compile(lsrl.ForEach(lsrl.ReLU(lsrl.Linear(count, [[scale]], [-1], name="scaled"), name="out")))


def expected(scale: int) -> list[float]:
    return [max(scale * c - 1, 0) for c in (1, 1, 2, 3)]  # the running counts of XS, independently


def which(folder: Path) -> int:
    """The scale of the model saved in ``folder`` (``lsrl.load`` must succeed and give one of them)."""
    outputs = lsrl.load(folder)(XS)[:, 0].tolist()
    matches = [scale for scale in range(1, 9) if outputs == expected(scale)]
    assert matches, outputs
    return matches[0]


def litter(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".lsrl-"))


def test_a_save_is_bound_by_its_manifest(tmp_path):
    folder = counter(2).save(tmp_path / "m")
    manifest = json.loads((folder / MANIFEST).read_text())
    assert sorted(manifest["sha256"]) == ["model.json", "weights.safetensors"]
    assert manifest["sha256"]["model.json"] == folders.sha256(folder / "model.json")
    assert which(folder) == 2 and litter(tmp_path) == []


def _edit(structure: dict, edit: str) -> None:
    """The edits of ``model.json`` (of ``counter``) that once loaded and changed what the model computes."""
    layers = structure["layers"]
    if edit == "empty layer list":
        layers.clear()
    elif edit == "deleted ReLU":
        layers.pop()
    elif edit == "LinState to ReLUState":
        layers[0]["kind"] = "ReLUState"
    elif edit == "widened input bounds":
        structure["input"]["bounds"] = [["-100"], ["100"]]
    elif edit == "edited unit label":
        layers[1]["labels"][0][1] = 3
    elif edit == "label naming no node":
        layers[2]["labels"][0][0] = "ghost"


EDITS = ["empty layer list", "deleted ReLU", "LinState to ReLUState", "widened input bounds", "edited unit label",
         "label naming no node"]
STRUCTURAL = {"empty layer list": "field 'layers' is empty", "edited unit label": r"names scaled\[3\]",
              "label naming no node": r"names ghost\[0\]"}  # the edits model.json's own checks refuse


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_model_json_is_refused(tmp_path, edit):
    folder = counter(2).save(tmp_path / "m")
    structure = json.loads((folder / "model.json").read_text())
    _edit(structure, edit)
    (folder / "model.json").write_text(json.dumps(structure))
    with pytest.raises(lsrl.ModelFileError, match=r"m/model.json: its sha256 differs from the one in manifest"):
        lsrl.load(folder)
    write_manifest(folder)  # bound again, as a deliberate editor would: what model.json's checks still refuse
    if edit in STRUCTURAL:
        with pytest.raises(lsrl.ModelFileError, match=STRUCTURAL[edit]) as error:
            lsrl.load(folder)
        assert "\n" not in str(error.value)
    else:  # consistent structures: only the manifest tells them from a saved model
        lsrl.load(folder)


def test_the_identity_program_still_saves_no_layers(tmp_path):
    model = lsrl.compile(lsrl.ForEach(lsrl.Input(2, name="x")))
    assert model.layers == []
    assert lsrl.load(model.save(tmp_path / "identity"))(np.eye(2)).tolist() == [[1, 0], [0, 1]]


@pytest.mark.parametrize("spoil, message", [
    (lambda folder: (folder / MANIFEST).unlink(), r"manifest.json: missing; lsrl binds"),
    (lambda folder: (folder / MANIFEST).write_text("[" * 100_000), r"manifest.json: not readable JSON"),
    (lambda folder: (folder / MANIFEST).write_text('{"format": "lsrl.manifest", "sha256": {"../x": "0"}}'),
     r"not an lsrl manifest"),
    (lambda folder: (folder / MANIFEST).write_text('{"format": "lsrl.manifest", "sha256": {}}'),
     r"does not list model.json"),
    (lambda folder: (folder / "weights.safetensors").unlink(), r"weights.safetensors: missing, though manifest"),
    (lambda folder: (folder / "weights.safetensors").write_bytes(b"x"), r"weights.safetensors: its sha256 differs"),
])
def test_a_spoilt_manifest_or_file_is_one_line(tmp_path, spoil, message):
    folder = counter(1).save(tmp_path / "m")
    spoil(folder)
    with pytest.raises(lsrl.ModelFileError, match=message) as error:
        lsrl.load(folder)
    assert "\n" not in str(error.value)


def test_a_deeply_nested_model_json_is_one_line(tmp_path):
    folder = counter(1).save(tmp_path / "m")
    (folder / "model.json").write_text("[" * 100_000 + "]" * 100_000)
    write_manifest(folder)
    with pytest.raises(lsrl.ModelFileError, match="model.json: nested too deeply"):
        lsrl.load(folder)


def test_a_path_component_over_255_bytes_is_one_line(tmp_path):
    model, long = counter(1), "m" * 256
    for call in (lambda: model.save(tmp_path / long), lambda: model.save(tmp_path / long / "inner"),
                 lambda: lsrl.load(tmp_path / long)):
        with pytest.raises(lsrl.ModelFileError, match="is 256 bytes long; file systems allow at most 255"):
            call()
    model.save(tmp_path / ("m" * 255))  # the longest name allowed: its temporaries carry a short key instead
    assert litter(tmp_path) == []


def test_a_save_replaces_an_earlier_folder_whole_and_leaves_foreign_folders_alone(tmp_path):
    folder = counter(1).save(tmp_path / "m")
    (folder / "notes.txt").write_text("an earlier file")
    counter(3).save(folder)
    assert which(folder) == 3 and not (folder / "notes.txt").exists()
    own = tmp_path / "mine"
    own.mkdir()
    (own / "thesis.tex").write_text("years of work")
    with pytest.raises(lsrl.ModelFileError, match="holds files lsrl did not write"):
        counter(1).save(own)
    assert [p.name for p in own.iterdir()] == ["thesis.tex"] and litter(tmp_path) == []
    (tmp_path / "empty").mkdir()
    assert which(counter(2).save(tmp_path / "empty")) == 2


def test_compile_into_a_reused_folder_keeps_no_stale_export(tmp_path):
    source = tmp_path / "prog.py"
    source.write_text("import lsrl\nx = lsrl.Input(1, name='x', bounds=(0, 1))\n"
                      "program = lsrl.ForEach(lsrl.LinState(x, A=[[1]], B=[[1]], name='count'))\n")
    out = tmp_path / "out"
    first = CliRunner().invoke(main, ["compile", str(source), "--target", "gru", "-o", str(out)])
    assert first.exit_code == 0, first.output
    assert sorted(p.name for p in out.iterdir()) == ["gru.onnx", MANIFEST, "model.json", "weights.safetensors"]
    assert "gru.onnx" in json.loads((out / MANIFEST).read_text())["sha256"]
    again = CliRunner().invoke(main, ["compile", str(source), "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "model.json", "weights.safetensors"]
    assert lsrl.load(out)(XS)[:, 0].tolist() == [1, 1, 2, 3] and litter(tmp_path) == []
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "data.csv").write_text("1,2")
    refused = CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "mine")])
    assert refused.exit_code != 0 and "holds files lsrl did not write" in refused.output
    assert (tmp_path / "mine" / "data.csv").read_text() == "1,2"


# ---- concurrent and killed writers ------------------------------------------------------------------------
# The children only save models compiled here, before the fork: a child killed while compiling would hold
# tqdm's lock (a semaphore shared with this process) for ever.
def _save_repeatedly(model: lsrl.CompiledProgram, folder: str, times: int) -> None:
    for _ in range(times):
        model.save(folder)


def _load_repeatedly(folder: str, times: int, seen: multiprocessing.Queue) -> None:
    seen.put(sorted({which(Path(folder)) for _ in range(times)}))


@pytest.mark.slow
def test_concurrent_saves_never_load_a_mix_and_leave_no_litter(tmp_path):
    folder = tmp_path / "m"
    counter(1).save(folder)
    seen = FORK.Queue()
    writers = [FORK.Process(target=_save_repeatedly, args=(counter(scale), str(folder), 15)) for scale in (2, 3, 4)]
    reader = FORK.Process(target=_load_repeatedly, args=(str(folder), 40, seen))
    for process in [*writers, reader]:
        process.start()
    for process in [*writers, reader]:
        process.join(60)
    assert [process.exitcode for process in [*writers, reader]] == [0, 0, 0, 0]  # no load failed in the reader
    assert set(seen.get(timeout=5)) <= {1, 2, 3, 4}
    assert which(folder) in (2, 3, 4) and litter(tmp_path) == []


def _crash_at(point: str, nth: int, after: bool):
    """A child that saves ``counter(2)`` over ``counter(1)`` and dies (``os._exit``) at the ``nth`` call of
    ``point`` (before or after it runs), as a process killed there would."""
    real = {"rename": os.rename, "rmtree": folders.shutil.rmtree, "write_manifest": folders.write_manifest}
    calls = []

    def dying(*args, **kwargs):
        calls.append(args)
        if len(calls) == nth and not after:
            os._exit(9)
        result = real[point](*args, **kwargs)
        if len(calls) == nth:
            os._exit(9)
        return result

    model = counter(2)

    def child(folder: str) -> None:
        if point == "write_manifest":
            folders.write_manifest = dying
        elif point == "rename":
            folders.os.rename = dying  # os.rename itself: this child is a fork of its own
        else:
            folders.shutil.rmtree = dying
        model.save(folder)

    return child


# (point, nth call, after it ran, the model a reader must then see): the renames are staging -> target
# (refused: the target is full), target -> aside, staging -> target; then the aside is removed
CRASHES = [("write_manifest", 1, False, 1), ("rename", 1, False, 1), ("rename", 2, False, 1),
           ("rename", 2, True, 1), ("rename", 3, False, 1), ("rename", 3, True, 2), ("rmtree", 1, False, 2),
           ("rmtree", 1, True, 2)]


@pytest.mark.parametrize("point, nth, after, seen", CRASHES)
def test_a_save_killed_at_each_step_leaves_the_old_or_the_new_model(tmp_path, point, nth, after, seen):
    folder = tmp_path / "m"
    counter(1).save(folder)
    process = FORK.Process(target=_crash_at(point, nth, after), args=(str(folder),))
    process.start()
    process.join(30)
    assert process.exitcode == 9
    assert which(folder) == seen  # a missing target is put back from a dead writer's aside folder
    counter(3).save(folder)
    assert which(folder) == 3 and litter(tmp_path) == []


@pytest.mark.slow
def test_saves_killed_by_pid_at_random_moments_never_load_a_mix(tmp_path):
    folder, chance = tmp_path / "m", random.Random(7)
    counter(1).save(folder)
    models = [counter(scale) for scale in (2, 3, 4)]
    for round_ in range(12):
        process = FORK.Process(target=_save_repeatedly, args=(models[round_ % 3], str(folder), 1000))
        process.start()
        time.sleep(chance.uniform(0.0, 0.05))
        os.kill(process.pid, signal.SIGKILL)
        process.join(10)
        assert which(folder) in (1, 2, 3, 4)
    counter(5).save(folder)
    assert which(folder) == 5 and litter(tmp_path) == []


def test_a_folder_saved_before_manifests_is_refused_by_load_and_replaced_by_save(tmp_path):
    folder = counter(1).save(tmp_path / "old")
    (folder / MANIFEST).unlink()  # as an lsrl from before manifests wrote it
    with pytest.raises(lsrl.ModelFileError, match="manifest.json: missing; .* save the model again"):
        lsrl.load(folder)
    assert which(counter(2).save(folder)) == 2 and litter(tmp_path) == []
