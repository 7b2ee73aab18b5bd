"""Scoring a method on a subject: node (variable), unit and edge AUROC, TPR / FPR at the method's
threshold, and interchange accuracy for variable-level methods (on the trained tier, whose circuit is an
alignment of variables to units, also for unit-level methods: ``found_interchange``, through each variable's
as many best-scored units as it has, ``ranked_units``), averaged over the circuit's interchangeable variables (a
node ``circuit.json`` marks not interchangeable has no reliable expected output: ``Subject.not_interchangeable``);
one row per (task, tier, arch, method).

Node level follows the promotion rule: a variable's score is the largest score of a unit that holds
it (pos / neg halves and copies of one variable count once); an edge-level method's unit score is the
largest score of an edge into the unit.
"""

from __future__ import annotations

import contextlib
import csv
import tempfile
import time
import zlib
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from lsrl.bench.eval.methods import PATH_METHODS, METHODS
from lsrl.bench.eval.pairs import Found, Pairs, held_trace, program_interchange
from lsrl.bench.eval.metrics import auroc, rates
from lsrl.bench.eval.subject import Candidate, Intervention, Subject
from lsrl.bench.tiers import TIERS, in_circuit
from lsrl.errors import InternalError, LsrlError

PAIRS = 32
DAS_TIERS = ("rotated",)  # the tier built for subspace methods; das runs on any other by lsrl bench eval
ARCHS = ("path", "linear_rnn", "rnn", "lstm", "gru")
DEFAULT_TASKS = ("parity", "majority", "balanced_parens", "histogram", "mode", "running_max", "first_one_position",
                 "copy_delay_1", "bigram_01", "at_least_3_ones")  # token tasks of every kind, small enough for CI
COLUMNS = ("task", "tier", "arch", "method", "node_auroc", "node_tpr", "node_fpr", "unit_auroc", "unit_tpr",
           "unit_fpr", "edge_auroc", "edge_tpr", "edge_fpr", "interchange_accuracy", "subspace_overlap", "nodes",
           "units", "edges", "seconds")


def _unit_scores(subject: Subject, found: Found) -> np.ndarray | None:
    if found.units is not None:
        return found.units
    if found.edges is None:
        return None
    where = {(c.layer, c.unit): position for position, c in enumerate(subject.candidates)}
    scores = np.zeros(len(subject.candidates))
    for edge, score in zip(subject.edges(), found.edges):
        position = where.get((edge.layer, edge.receiver))
        if position is not None:
            scores[position] = max(scores[position], score)
    return scores


def node_scores(subject: Subject, found: Found) -> dict[str, float]:
    """The method's variable scores, promoted from its unit scores where it gives none."""
    if found.nodes is not None:
        return found.nodes
    units = _unit_scores(subject, found)
    if units is None:
        raise InternalError("a method's Found gives variable, unit or edge scores")
    scores = {node: 0.0 for node in subject.nodes}
    for candidate, score in zip(subject.candidates, units):
        for node in candidate.nodes:
            scores[node] = max(scores[node], float(score))
    return scores


def edge_truth(subject: Subject) -> np.ndarray:
    """Per edge of ``subject.edges()``: 1 in the circuit (both ends are, and no gate holds it shut on the data:
    ``Edge.shut``), 0 not, -1 not scored (an end that holds no variable, a constant's or a helper's, as a gate of
    constant value: no patching or gradient moves it); the model's input counts as in the circuit."""
    truth = {(c.layer, c.unit): c.truth for c in subject.candidates}
    marks = []
    for edge in subject.edges():
        sender = True if edge.source < 0 else truth.get((edge.source, edge.sender))
        receiver = truth.get((edge.layer, edge.receiver))
        marks.append(-1 if sender is None or receiver is None else int(sender and receiver and not edge.shut))
    return np.array(marks, dtype=int)


def _scored(prefix: str, scores: np.ndarray, truth: np.ndarray, threshold: float) -> dict[str, float]:
    found = rates(scores, truth, threshold)
    return {f"{prefix}_auroc": auroc(scores, truth), f"{prefix}_tpr": found.tpr, f"{prefix}_fpr": found.fpr}


def score(subject: Subject, found: Found) -> dict[str, float]:
    """The metrics of the module docstring for one method's ``found`` (NaN where it scores no such level)."""
    row = dict.fromkeys(COLUMNS[4:15], float("nan"))
    nodes, truth = node_scores(subject, found), subject.nodes
    names = sorted(truth)
    row.update(_scored("node", np.array([nodes[n] for n in names]), np.array([truth[n] for n in names]),
                       found.threshold))
    units = _unit_scores(subject, found)
    if units is not None:
        row.update(_scored("unit", units, np.array([c.truth for c in subject.candidates]), found.threshold))
    if found.edges is not None:
        marks = edge_truth(subject)
        row.update(_scored("edge", found.edges[marks >= 0], marks[marks >= 0] == 1, found.threshold))
    circuit = [accuracy for node, accuracy in found.interchange.items()
               if in_circuit(node) and truth[node] and node not in subject.not_interchangeable]
    if circuit:
        row["interchange_accuracy"] = float(np.mean(circuit))
    overlaps = [overlap for node, overlap in found.overlap.items() if in_circuit(node) and truth[node]]
    if overlaps:
        row["subspace_overlap"] = float(np.mean(overlaps))
    return row


def corrupted_units(pairs: Pairs, candidates: Iterable[Candidate]) -> dict[int, Intervention]:
    """Interventions that set each of ``candidates`` (units of the subject's layers) to its value on the
    corrupted inputs at every step, one per layer they lie in."""
    masks: dict[int, torch.Tensor] = {}
    for candidate in candidates:
        layer = pairs.corrupt_layers[candidate.layer]
        mask = masks.setdefault(candidate.layer, torch.zeros(layer.shape[0], layer.shape[-1], dtype=layer.dtype))
        mask[:, candidate.unit] = 1
    return {index: Intervention(values=pairs.corrupt_layers[index], mask=mask) for index, mask in masks.items()}


def ranked_units(subject: Subject, units: np.ndarray) -> dict[str, list[Candidate]]:
    """Per circuit variable, the units a unit-level method's ``units`` scores name for it: in each layer that holds
    the variable, the method's highest-scored scored candidates of that layer, as many as hold the variable there.
    A unit method says which units matter, not which variable each holds, so the variable's budget (its size and
    layer) comes from the circuit, the units from the method alone: scoring every unit high earns nothing. Ties are
    broken in a fixed order drawn from the subject's name, not in candidate order (which may list a variable's units
    first)."""
    tie_break = np.random.default_rng(zlib.crc32(f"{subject.task}/{subject.tier}/{subject.arch}".encode())
                                      ).permutation(len(units))
    order = np.lexsort((tie_break, -np.asarray(units, dtype=np.float64)))  # best first
    ranked: dict[int, list[Candidate]] = {}
    for position in order:
        candidate = subject.candidates[position]
        if candidate.truth is not None:
            ranked.setdefault(candidate.layer, []).append(candidate)
    budgets: dict[str, dict[int, int]] = {}
    for candidate in subject.candidates:
        for node in candidate.nodes:
            if subject.nodes.get(node) and in_circuit(node):
                layers = budgets.setdefault(node, {})
                layers[candidate.layer] = layers.get(candidate.layer, 0) + 1
    return {node: [unit for layer, count in layers.items() for unit in ranked.get(layer, [])[:count]]
            for node, layers in budgets.items()}


def found_interchange(subject: Subject, pairs: Pairs, found: Found) -> dict[str, float]:
    """Per circuit variable, with the units the method names for it (``ranked_units``) set at every step to their
    corrupted values: the share of the clean sequences' (pair, step) outputs that equal the program's interchange of
    the variable, both rounded (as the trained tier's training measures it)."""
    units = _unit_scores(subject, found)
    if units is None:
        return {}
    corrupt_trace, real = held_trace(subject, pairs), pairs.real.numpy()[..., 0] > 0
    accuracy = {}
    for node, candidates in ranked_units(subject, units).items():
        with torch.no_grad():
            outputs = subject.run(pairs.clean, corrupted_units(pairs, candidates))[0].numpy()
        expected = program_interchange(subject, pairs, node, corrupt_trace)
        equal = (np.round(outputs) == np.round(expected)).all(axis=-1)
        accuracy[node] = float(equal[real].mean())
    return accuracy


def evaluate(subject: Subject, method: str, pairs: int = PAIRS) -> dict[str, object]:
    """One row of the results table: ``method`` (a key of ``METHODS``) scored on ``subject`` with ``pairs`` of the
    fixed clean / corrupted pairs of the task's ``data.npz`` (``Pairs.from_data``)."""
    if method not in METHODS:
        raise LsrlError(f"unknown method {method!r}; the methods are {sorted(METHODS)}")
    start = time.perf_counter()
    data = Pairs.from_data(subject, pairs)
    found = METHODS[method](subject, data)
    if subject.tier == "trained" and not found.interchange:  # the aligned variables: a unit method's interchange
        found = replace(found, interchange=found_interchange(subject, data, found))
    row: dict[str, object] = {"task": subject.task, "tier": subject.tier, "arch": subject.arch, "method": method}
    row.update(score(subject, found))
    row.update(nodes=len(subject.nodes), units=len(subject.candidates), edges=int((edge_truth(subject) >= 0).sum()),
               seconds=round(time.perf_counter() - start, 3))
    return row


def combinations(tiers: Iterable[str] = TIERS, archs: Iterable[str] = ARCHS, methods: Iterable[str] = tuple(METHODS)
                 ) -> list[tuple[str, str, str]]:
    """The ``(tier, arch, method)`` triples that can run: ``PATH_METHODS`` on path models only (every model, a rotated
    one included, is scored in its own coordinates: ``hooked.rotated``); ``das`` (a training per variable) on the
    tiers of ``DAS_TIERS``."""
    return [(tier, arch, method) for tier in tiers for arch in archs for method in methods
            if (arch == "path" or method not in PATH_METHODS) and (method != "das" or tier in DAS_TIERS)]


def evaluate_all(tasks: Iterable[str] = DEFAULT_TASKS, tiers: Iterable[str] = TIERS, archs: Iterable[str] = ARCHS,
                 methods: Iterable[str] = tuple(METHODS), pairs: int = PAIRS, progress: bool = False, workers: int = 1,
                 ray_address: str | None = None, suite: str | Path | None = None) -> list[dict[str, object]]:
    """A row per task and runnable ``combinations`` of tier, architecture and method, each scored on the task's
    folder of that tier and architecture under ``suite`` (``lsrl bench build``'s layout; the folders missing there are
    built; default: a temporary directory), against its ``circuit.json``. A run per task and tier; where the runs
    run: ``lsrl.grid.run_grid`` (``workers`` processes or the Ray cluster at ``ray_address``, whose nodes must all see
    ``suite``; the rows the same wherever, but ``seconds``); a ``GridError`` names the runs that failed."""
    from lsrl.grid import Run, run_grid

    runs = combinations(tiers, archs, methods)
    built = tempfile.TemporaryDirectory(prefix="lsrl-bench-") if suite is None else contextlib.nullcontext(suite)
    with built as root:
        grid = [Run(f"{task}/{tier}", tier_rows, (task, tier, [run for run in runs if run[0] == tier], pairs,
                                                  Path(root)))
                for task in list(tasks) for tier in dict.fromkeys(tier for tier, _, _ in runs)]
        outcome = run_grid("lsrl bench eval", grid, workers, ray_address, progress)
    outcome.check()
    return [row for rows in outcome.finished for row in rows]


def tier_rows(task: str, tier: str, runs: list[tuple[str, str, str]], pairs: int, suite: Path
              ) -> list[dict[str, object]]:
    """``evaluate_all``'s rows of ``task``'s ``tier``: one per (tier, arch, method) of ``runs``, scored on the folders
    under ``suite`` (the task's tier built there first where a folder is missing)."""
    from lsrl.bench.build import build_tier, tier_folder
    from lsrl.bench.eval.hooked import HookedSubject

    archs = list(dict.fromkeys(arch for _, arch, _ in runs))
    folders = {arch: tier_folder(suite, task, arch, tier) for arch in archs}
    if not all((folder / "config.json").is_file() for folder in folders.values()):
        build_tier(suite, task, tier)
    rows = []
    for arch in archs:
        subject = HookedSubject.from_folder(folders[arch])
        rows += [evaluate(subject, method, pairs) for _, other, method in runs if other == arch]
    return rows


SUMMARY_COLUMNS = ("tier", "arch", "method", "tasks", "node_scored", "node_auroc", "unit_auroc", "edge_auroc",
                   "interchange_accuracy", "subspace_overlap", "node_tpr", "node_fpr", "seconds")


def summary(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Per (tier, arch, method): the mean of each score over the tasks (NaN left out); ``node_scored``: the
    tasks with a node AUROC (a variable outside the circuit; in the compiled tier only a dead variable is)."""
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault((row["tier"], row["arch"], row["method"]), []).append(row)
    table = []
    for (tier, arch, method), members in groups.items():
        entry = {"tier": tier, "arch": arch, "method": method, "tasks": len(members),
                 "node_scored": sum(not np.isnan(float(m["node_auroc"])) for m in members)}
        for column in SUMMARY_COLUMNS[5:]:
            values = np.array([float(m[column]) for m in members])
            entry[column] = float(np.nanmean(values)) if (~np.isnan(values)).any() else float("nan")
        table.append(entry)
    return table


def write_csv(rows: list[dict[str, object]], path: str | Path, columns: tuple[str, ...] = COLUMNS) -> Path:
    """The rows as CSV (``columns``), numbers rounded to 4 digits, NaN as an empty cell."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: _cell(row[key]) for key in columns})
    return path


def plot_summary(table: list[dict[str, object]], path: str | Path) -> Path:
    """Node AUROC per method: by tier (path models, left; the compiled tier has almost no variable outside its
    circuit, so it is left out) and by architecture (distractor tier, right)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    panels = (("tier", ("arch", "path"), "path models, by tier"),
              ("arch", ("tier", "distractors"), "distractor tier, by architecture"))
    for axis, (group, fixed, title) in zip(axes, panels):
        shown = [row for row in table if row[fixed[0]] == fixed[1] and row["tier"] != "compiled"]
        methods = list(dict.fromkeys(row["method"] for row in shown))
        bars = list(dict.fromkeys(row[group] for row in shown))
        width = 0.8 / max(len(bars), 1)
        for k, bar in enumerate(bars):
            values = {row["method"]: row["node_auroc"] for row in shown if row[group] == bar}
            axis.bar(np.arange(len(methods)) + k * width, [values.get(m, np.nan) for m in methods], width, label=bar)
        axis.set_xticks(np.arange(len(methods)) + 0.4 - width / 2, methods, rotation=30)
        axis.axhline(0.5, color="grey", linestyle=":", linewidth=1)
        axis.set_title(title)
        if bars:  # a panel of no tier's rows (a suite without it) has nothing to name
            axis.legend(fontsize="small", loc="upper center", ncol=len(bars))  # above the bars: AUROC <= 1
    axes[0].set_ylabel("node AUROC (mean over tasks)")
    axes[0].set_ylim(0, 1.2)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _cell(value: object) -> object:
    if isinstance(value, float):
        return "" if np.isnan(value) else round(value, 4)
    return value
