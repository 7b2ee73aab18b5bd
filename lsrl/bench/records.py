"""The trained tier's training records: what training a model measured, and whether its labels count as faithful.

A model of the trained tier (``lsrl.bench.training``) meets the aim (``AIM``, ``meets_aim``) when its task accuracy
and every variable's interchange-intervention accuracy reach 0.95 on the fixed clean / corrupted pairs of its folder's
``data.npz`` (of the training lengths: the pairs methods are scored on; the alignment is claimed on those lengths
only, ``lengths`` in the record); its suite folder says whether it does
(``record_training``: ``config.json``'s ``"training"`` record and the model card's opening), and
``lsrl.bench.load`` returns the record (``Folder.training``; ``read_training`` reads it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lsrl.bench.hf_loader import RECORD

AIM = 0.95  # a trained folder's labels count as faithful when its task accuracy and every variable's IIA reach it
TRAINING = "training"  # the record's key in a trained folder's config.json (in ``lsrl_bench`` for a transformers one)


@dataclass(kw_only=True)
class Measured:
    """What training a model of the trained tier measured (``training_record`` reads it): task accuracy,
    interchange-intervention accuracy per variable, the shortest and longest length they were measured on, seconds,
    steps and seed; shared by the trained models of ``lsrl.bench.training``."""

    accuracy: float = float("nan")
    interchange_accuracy: dict[str, float] | None = None
    lengths: tuple[int, int] = (0, 0)
    seconds: float = 0.0
    steps: int = 0
    seed: int = 0


def measured(accuracy: float, interchange: dict[str, float] | None, lengths: tuple[int, int]) -> str:
    """The model card's sentence on a trained model's measured task and interchange-intervention accuracies, measured
    on sequences of ``lengths`` (shortest, longest)."""
    interchange = interchange or {}
    per_variable = ", ".join(f"`{variable}` {value:.3f}" for variable, value in interchange.items())
    mean = np.mean(list(interchange.values()) or [np.nan])
    return (f"Measured on the fixed clean / corrupted pairs of `data.npz`, of the training lengths "
            f"{lengths[0]}–{lengths[1]}, which methods are scored on (outputs rounded): **task accuracy "
            f"{accuracy:.3f}**, **interchange-intervention accuracy {mean:.3f}** (per variable: {per_variable}). "
            "The alignment is not claimed on longer sequences. Its outputs are floats: close to, not equal to, "
            "`data.npz`'s.")


def meets_aim(accuracy: float, interchange: Iterable[float]) -> bool:
    """Whether a trained model's labels count as faithful: task accuracy and every variable's interchange-intervention
    accuracy at least ``AIM``."""
    return bool(accuracy >= AIM and all(value >= AIM for value in interchange))


def training_record(model: Measured) -> dict[str, Any]:
    """The ``"training"`` record of a trained model (a ``lsrl.bench.training.torch_rnn.TrainedModel`` or a
    ``lsrl.bench.training.hf.HFTrained``): its steps and seed, the accuracies measured after training and the
    ``lengths`` (shortest, longest) they were measured on, ``AIM`` and whether it ``meets_aim``."""
    interchange = {variable: float(value) for variable, value in (model.interchange_accuracy or {}).items()}
    return {"steps": int(model.steps), "seed": int(model.seed), "task_accuracy": float(model.accuracy),
            "interchange_accuracy": interchange, "lengths": [int(length) for length in model.lengths], "aim": AIM,
            "meets_aim": meets_aim(model.accuracy, interchange.values())}


def aim_note(record: dict[str, Any], where: str) -> str:
    """The model card's opening paragraph on ``record`` (``training_record``), which ``config.json`` holds at
    ``where``."""
    values = ", ".join(f"`{variable}` {value:.3f}" for variable, value in record["interchange_accuracy"].items())
    shortest, longest = record["lengths"]
    accuracies = (f"the measured accuracies (task {record['task_accuracy']:.3f}; interchange-intervention {values}; "
                  f"on `data.npz`'s clean / corrupted pairs, of lengths {shortest}–{longest}, the lengths methods are "
                  "scored on)")
    if record["meets_aim"]:
        return (f"**Meets the aim**: {accuracies} are all at least {record['aim']}: interchanging a variable's "
                f"labelled units changes the outputs as the program's interchange of it does, on sequences of "
                f"lengths {shortest}–{longest} (not claimed on longer ones). `config.json`: "
                f"`{where}.meets_aim` is `true`.")
    return (f"**Below the aim: these labels are not faithful.** {accuracies[0].upper()}{accuracies[1:]} are not all "
            f"at least {record['aim']}: interchanging a variable's labelled units does not always change the outputs "
            f"as the program's interchange of it does, so a method scored against them is scored against a partly "
            f"wrong truth. `config.json`: `{where}.meets_aim` is `false`.")


def record_training(folder: Path, model: Measured) -> dict[str, Any]:
    """Write ``model``'s ``training_record`` into its suite ``folder`` (before ``manifest.json``, which then
    covers it): in ``config.json`` (field ``"training"``; in a stock ``transformers`` folder, in its ``lsrl_bench``
    record), and as the model card's opening paragraph (``aim_note``, after the title). Returns the record."""
    record = training_record(model)
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(config.get(RECORD), dict):  # as transformers' save_pretrained writes it
        config[RECORD][TRAINING] = record
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        where = f"{RECORD}.{TRAINING}"
    else:  # as lsrl.bench.build.write_model writes it
        config[TRAINING] = record
        path.write_text(json.dumps(config, indent=1), encoding="utf-8")
        where = TRAINING
    card = (folder / "README.md").read_text(encoding="utf-8").split("\n")
    title = next(i for i, line in enumerate(card) if line.startswith("# "))
    card[title + 1:title + 1] = ["", aim_note(record, where)]
    (folder / "README.md").write_text("\n".join(card), encoding="utf-8")
    return record


def read_training(folder: str | Path) -> dict[str, Any] | None:
    """The ``"training"`` record (``training_record``) of a suite folder's ``config.json`` (its ``lsrl_bench``
    record's, for a stock ``transformers`` folder); ``None`` for a folder of another tier."""
    config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    holder = config.get(RECORD) if isinstance(config.get(RECORD), dict) else config
    return holder.get(TRAINING)


def below_aim(folders: Iterable[str | Path]) -> list[str]:
    """Of suite ``folders``, the trained ones whose record (``read_training``) misses the aim, each as
    ``"FOLDER (task accuracy A; VARIABLE IIA, ...)"``."""
    missed = []
    for folder in folders:
        record = read_training(folder)
        if record is not None and not record["meets_aim"]:
            values = ", ".join(f"{variable} {value:.3f}" for variable, value in record["interchange_accuracy"].items())
            missed.append(f"{folder} (task accuracy {record['task_accuracy']:.3f}; interchange {values})")
    return missed
