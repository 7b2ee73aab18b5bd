"""The trained tier's table: every task of ``TASKS_TRAINED`` trained as every architecture (``lsrl.bench.training``),
then the harness's methods scored against each model's known circuit (``method_columns``): a row per model of
``TRAINED_COLUMNS`` (``lsrl bench train-tier``). ``TrainedSubject`` is an in-memory trained LSTM / GRU for the
harness.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from lsrl.bench.build import tier_folder, write_hf_folder
from lsrl.bench.data import npz_bytes, task_data
from lsrl.bench.eval.das import STEPS as DAS_DEFAULT_STEPS
from lsrl.bench.eval.das import das
from lsrl.bench.eval.harness import PAIRS, evaluate, found_interchange, score
from lsrl.bench.eval.hooked import HookedSubject
from lsrl.bench.eval.methods import METHODS
from lsrl.bench.eval.pairs import Found, Pairs
from lsrl.bench.eval.subject import Candidate, Intervention, Subject, frozen
from lsrl.bench.records import meets_aim
from lsrl.bench.tasks import TASKS, program_widths, task_program
from lsrl.bench.tiers import TASKS_TRAINED
from lsrl.bench.training.hf import HF_ARCHS, carried, train_hf
from lsrl.bench.training.loop import STEPS
from lsrl.bench.training.torch_rnn import RELAY, TrainedModel, train
from lsrl.errors import InternalError
from lsrl.ir.labels import UnitLabel

HF_PAIRS = 8  # clean / corrupted pairs of data.npz per method when the table scores a transformers model
UNIT_METHODS = ("resample", "mean", "zero", "attribution", "random")  # the unit-level methods the tables score
UNIT_COLUMNS = ("unit_auroc", "unit_fpr", "interchange_accuracy")  # of each unit method's harness row, in the table
TRAINED_COLUMNS = ("task", "arch", "hidden", "steps", "task_accuracy", "interchange_accuracy", "worst_variable",
                   "meets_aim", *(f"{method}_{column}" for column in UNIT_COLUMNS for method in UNIT_METHODS),
                   "heldout_interchange_accuracy",
                   "probe_interchange_accuracy", "das_interchange_accuracy", "seconds", "das_seconds")
DAS_STEPS = DAS_DEFAULT_STEPS  # Adam steps per DAS search on a trained model


@dataclass
class TrainedSubject(Subject):
    """A trained model for the harness: a layer per recurrent layer, its state (``[h; c]`` for an LSTM); a unit is
    in the circuit when it is aligned with a variable (the free units are trained to be inert)."""

    model: TrainedModel | None = None

    @classmethod
    def from_model(cls, model: TrainedModel) -> TrainedSubject:
        """The subject of a trained ``model``."""
        labels, live, candidates = [], [], []
        for layer, state in enumerate(model.unit_labels().values()):
            units = [UnitLabel(*label) if label[0] in model.alignment else None for label in state]
            scored = [label[0] != RELAY for label in state] * (2 if model.arch == "lstm" else 1)
            labels.append(units * (2 if model.arch == "lstm" else 1))
            live.append(np.array([label is not None for label in labels[-1]]))
            candidates += [Candidate(layer, u, (label.node,) if label else (), label is not None)
                           for u, label in enumerate(labels[-1]) if scored[u]]
        program = task_program(model.task)
        return cls(model.task, "trained", model.arch, labels, [None] * len(labels), program, program_widths(program)[1],
                   candidates, live, model)

    def run(self, xs: torch.Tensor | np.ndarray, interventions: dict[int, Intervention] | None = None
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """As ``Subject.run``: an intervention on layer ``k`` sets its state units (a mask) or a subspace (a
        projector) at every step; with gradients only where an intervention has them (``frozen``)."""
        x = torch.as_tensor(np.asarray(xs, dtype=np.float64)) if not isinstance(xs, torch.Tensor) else xs
        model = self.model
        if model is None:
            raise InternalError("a TrainedSubject is built by TrainedSubject.from_model")
        hidden, lstm, chosen = model.hidden_size, model.arch == "lstm", interventions or {}
        with frozen(model.cells, model.readout):
            state = [model.initial_state(x, x.shape[0]) for _ in model.cells]
            outputs: list[torch.Tensor] = []
            states: list[list[torch.Tensor]] = [[] for _ in model.cells]
            for t in range(x.shape[1]):
                below = x[:, t]
                for k, cell in enumerate(model.cells):
                    flat = torch.cat(cell(below, state[k]), dim=-1) if lstm else cell(below, state[k])
                    if k in chosen:
                        flat = chosen[k].apply(flat, t)
                    state[k] = (flat[:, :hidden], flat[:, hidden:]) if lstm else flat
                    states[k].append(flat)
                    below = flat[:, :hidden]
                outputs.append(model.readout(below))
        return torch.stack(outputs, dim=1), [torch.stack(layer, dim=1) for layer in states]


def method_columns(subject: Subject, pairs: int, das_steps: int = DAS_STEPS) -> dict[str, float]:
    """A trained model's method columns of ``TRAINED_COLUMNS``: of each of ``UNIT_METHODS``, the harness's unit AUROC
    against the alignment, unit FPR at the method's threshold (``pairs.effect_threshold``) and interchange accuracy
    through the units it ranks best (``harness.ranked_units``); on ``pairs`` fixed pairs of the trained folder's
    ``data.npz`` (the training lengths, which ``meets_aim`` is measured on), the interchange accuracy of the
    aligned units (``heldout_interchange_accuracy``: the alignment scored as a method would be, DAS's reference),
    of the linear probes' subspaces (``probe``: correlational) and of the subspaces ``das`` learns (``das_steps``
    Adam steps per search; ``das_seconds`` its CPU seconds). DAS
    has no node AUROC here (every variable a trained model aligns is in its circuit: no negatives) and no subspace
    overlap (training aligns each variable with a block of units, not with a subspace of them)."""
    row: dict[str, float] = {}
    for method in UNIT_METHODS:
        scored = evaluate(subject, method, pairs)
        row.update({f"{method}_{column}": cast(float, scored[column]) for column in UNIT_COLUMNS})
    held_out = Pairs.from_data(subject, pairs)
    aligned = Found(0.5, units=np.array([float(candidate.truth) for candidate in subject.candidates]))
    row["heldout_interchange_accuracy"] = float(np.mean(list(found_interchange(subject, held_out, aligned).values())))
    row["probe_interchange_accuracy"] = score(subject, METHODS["probe"](subject, held_out))["interchange_accuracy"]
    start = time.process_time()
    found = das(subject, held_out, steps=das_steps)
    row["das_interchange_accuracy"] = score(subject, found)["interchange_accuracy"]
    row["das_seconds"] = round(time.process_time() - start, 1)
    return row


def train_all(tasks: tuple[str, ...] = TASKS_TRAINED, archs: tuple[str, ...] = ("lstm", "gru"), steps: int = STEPS,
              progress: bool = False, das_steps: int = DAS_STEPS, workers: int = 1, ray_address: str | None = None
              ) -> list[dict[str, object]]:
    """Train every task as every arch; a row per model: accuracies and the method columns (``method_columns``).
    Where the models train: ``lsrl.grid.run_grid`` (``workers`` processes or the Ray cluster at ``ray_address``;
    one torch thread each, the rows the same wherever, but ``seconds``); a ``GridError`` names those that failed."""
    from lsrl.grid import Run, run_grid

    runs = [Run(f"{name}/{arch}", stock_row, (name, arch, steps, das_steps)) for name in tasks for arch in archs]
    outcome = run_grid("trained tier", runs, workers, ray_address, progress)
    outcome.check()
    return with_aim(outcome.finished)


def stock_row(name: str, arch: str, steps: int, das_steps: int = DAS_STEPS) -> dict[str, object]:
    """The table's row of task ``name`` trained as the stock torch ``arch`` (``train_all``)."""
    model = train(name, arch, steps)
    subject = TrainedSubject.from_model(model)
    accuracies = list((model.interchange_accuracy or {}).values())
    row: dict[str, object] = {
        "task": name, "arch": arch, "hidden": model.hidden_size * len(model.cells), "steps": steps,
        "task_accuracy": model.accuracy, "interchange_accuracy": float(np.mean(accuracies)),
        "worst_variable": min(accuracies)}
    row.update(method_columns(subject, PAIRS, das_steps), seconds=round(model.seconds, 1))
    return row


def with_aim(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of ``TRAINED_COLUMNS`` with ``meets_aim`` (``meets_aim`` of their task accuracy and worst variable)."""
    return [{**row, "meets_aim": meets_aim(float(row["task_accuracy"]), [float(row["worst_variable"])])}
            for row in rows]


def merged_rows(rows: list[dict[str, object]], path: str | Path) -> list[dict[str, object]]:
    """``rows`` with the rows of the CSV at ``path`` (when it exists) whose ``(task, arch)`` they do not hold: a run
    of some architectures or tasks replaces their rows of the table and keeps the others; rows in the order of
    ``TASKS_TRAINED`` (others after them) then ``HF_ARCHS``; a kept row's cells of columns of ``TRAINED_COLUMNS`` it
    lacks (a table written before they were added) are empty."""
    import csv

    path = Path(path)
    fresh = {(row["task"], row["arch"]) for row in rows}
    kept = []
    if path.exists():
        with open(path, newline="") as file:
            kept = [{**dict.fromkeys(TRAINED_COLUMNS, ""), **row} for row in csv.DictReader(file)
                    if (row["task"], row["arch"]) not in fresh]  # a column the table had not yet: empty
    tasks = {name: index for index, name in enumerate(TASKS_TRAINED)}
    archs = {name: index for index, name in enumerate(HF_ARCHS)}
    return sorted([*kept, *rows], key=lambda row: (tasks.get(str(row["task"]), len(tasks)), str(row["task"]),
                                                    archs.get(str(row["arch"]), len(archs))))


def train_all_hf(tasks: tuple[str, ...] = TASKS_TRAINED, archs: tuple[str, ...] = HF_ARCHS, steps: int = STEPS,
                 suite: str | Path | None = None, progress: bool = False, workers: int = 1,
                 done: Callable[[dict[str, object]], None] | None = None, das_steps: int = DAS_STEPS,
                 ray_address: str | None = None) -> list[dict[str, object]]:
    """Train every task as every arch of ``HF_ARCHS``; a row per model (``TRAINED_COLUMNS``: ``hidden`` the
    carried-state units): accuracies and the method columns (``method_columns``; ``das_steps``
    Adam steps per DAS search). ``suite``: also write each model's folder there (``DIR/trained/TASK/ARCH``). Where the
    models train: ``lsrl.grid.run_grid`` (``workers`` processes or the Ray cluster at ``ray_address``; one torch
    thread each, the rows the same wherever, but ``seconds``); a ``GridError`` names the models that failed.
    ``done``: called with each row as soon as it is measured (the command line writes the table then)."""
    from lsrl.grid import Run, run_grid

    runs = [Run(f"{name}/{arch}", hf_row, (name, arch, steps, suite, das_steps)) for name in tasks for arch in archs]
    outcome = run_grid("trained tier (transformers)", runs, workers, ray_address, progress, done)
    outcome.check()
    return outcome.finished


def hf_row(name: str, arch: str, steps: int, suite: str | Path | None, das_steps: int = DAS_STEPS
           ) -> dict[str, object]:
    """The table's row of task ``name`` trained as ``arch`` (``train_all_hf``), its folder written under ``suite``
    when given; ``das_steps``: Adam steps per DAS search (``method_columns``)."""
    data = task_data(TASKS[name], tier="trained")
    model = train_hf(name, arch, steps)
    circuit = model.circuit(data)
    if suite is not None:
        write_hf_folder(tier_folder(Path(suite), name, arch, "trained"), model, data, npz_bytes(data))
    program = task_program(name)
    subject = HookedSubject.from_circuit(name, "trained", model.net, circuit, program, program_widths(program)[1])
    accuracies = list((model.interchange_accuracy or {}).values())
    row: dict[str, object] = {
        "task": name, "arch": arch, "hidden": sum(h["width"] for h in carried(model.hooks)), "steps": steps,
        "task_accuracy": model.accuracy, "interchange_accuracy": float(np.mean(accuracies)),
        "worst_variable": min(accuracies)}
    row.update(method_columns(subject, HF_PAIRS, das_steps), seconds=round(model.seconds, 1))
    return row
