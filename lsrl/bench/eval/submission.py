"""Scoring a method written outside lsrl: its scores per folder, against the folder's ``circuit.json``.

A method reads a suite folder with its own tools (the folder's ``load_model.py``, plain torch hooks, nnsight) and
gives, for that folder, a score per unit of every hook (higher: more likely in the circuit) and, optionally, per
unit edge and per variable::

    {"units": {"blocks.0.rnn": [0.9, 0.0, ...], ...},      # every hook of the folder, a score per unit, in order
     "edges": [{"source": ["input", 0], "target": ["blocks.0.rnn", 1], "score": 0.4}, ...],   # optional
     "nodes": {"count_1": 0.8, ...},                        # optional: variable-level scores
     "threshold": 0.5}                                      # optional: above it a unit is called in the circuit

A unit is a coordinate of a hook's values as the model holds them (``run_with_cache``'s cache, ``load_model.py``'s
patch). In a folder of the rotated tier those are raw coordinates, each mixing labelled units (``rotations.json``):
the truth of ``circuit.json``, in the labelled coordinates, is mapped onto them (``lsrl.bench.eval.hooked.rotated``:
a coordinate is in the circuit when it mixes a unit of the circuit and varies on the test data), and an edge joins
two raw coordinates that mix the ends of one of ``circuit.json``'s unit edges (a torch folder's
``HookedSubject.from_folder(folder).unit_edges``; a path folder's: its non-zero weights).

``score(scores, folder)`` returns the metrics of that folder: node, unit and edge AUROC (``harness.score``;
a variable's score is its best unit's unless ``nodes`` gives it), TPR and FPR at the ``threshold`` and at each
budget of ``BUDGETS`` (the top fraction of the scored units called in the circuit), the interchange accuracy of
the circuit's variables (``harness.found_interchange``: per variable, as many of the best-scored units of each layer
holding it as hold it there set to their corrupted values, the outputs against the program's own interchange of
the variable), and the faithfulness curve over
the budgets with its areas (as MIB's CPR and CMD): the circuit of a budget keeps its units clean while every other
scored unit is set, at every step inside the recurrence, to its value on the corrupted input of the task's fixed
pairs; its faithfulness is ``1 - d(circuit) / d(empty)``, ``d`` the mean absolute change of the outputs from the
clean run (1: the circuit alone carries the outputs, 0: no better than nothing).

A submission file (``lsrl bench score SUBMISSION SUITE``) is JSON::

    {"format": "lsrl.bench.submission", "method": "my_method",
     "folders": {"parity/lstm": {...}, "distractors/parity/gru": {...}}}

keyed by the folder's path under the suite's root (``SUITE/parity/lstm`` for the compiled tier,
``SUITE/TIER/TASK/ARCH`` for the others). ``problems`` lists every way a submission does not fit its suite, one
line each; ``score`` raises the first as an ``LsrlError``.
"""

from __future__ import annotations

import json
import math
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from lsrl.bench.circuit import INPUT, read_circuit
from lsrl.bench.eval.harness import (
    COLUMNS, PAIRS, corrupted_units, edge_truth, found_interchange, score as harness_score,
)
from lsrl.bench.eval.pairs import Found, Pairs
from lsrl.bench.eval.subject import PathSubject, Subject
from lsrl.errors import InternalError, LsrlError
from lsrl.model.writing import as_path

FORMAT = "lsrl.bench.submission"
BUDGETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)  # fractions of the scored units called in the circuit
FIELDS = ("units", "edges", "nodes", "threshold")
SCORE_COLUMNS = ("folder", "task", "tier", "arch", "method", *COLUMNS[4:15],
                 *(f"unit_{rate}@{budget:g}" for budget in BUDGETS for rate in ("tpr", "fpr")),
                 *(f"faithfulness@{budget:g}" for budget in BUDGETS), "cpr", "cmd", "units", "edges")


class SubmissionError(LsrlError):
    """A submission that does not fit the suite it is scored on: the message names the folder and the field."""


def score(scores: dict[str, Any], folder: str | Path, pairs: int = PAIRS) -> dict[str, float]:
    """The metrics of one folder's part of a submission (module docstring); a ``SubmissionError`` naming the first
    problem (an unknown hook, a wrong number of units, a NaN score, an edge the folder does not have)."""
    scored = _scored(folder)
    subject = scored.subject
    found = _found(scores, scored, str(folder))
    row = harness_score(subject, found)
    units = np.asarray(found.units)
    truth = np.array([candidate.truth for candidate in subject.candidates])
    for budget in BUDGETS:
        chosen = _top(units, budget)
        row[f"unit_tpr@{budget:g}"] = float(chosen[truth].mean()) if truth.any() else math.nan
        row[f"unit_fpr@{budget:g}"] = float(chosen[~truth].mean()) if (~truth).any() else math.nan
    data = Pairs.from_data(subject, pairs)
    row.update(faithfulness(subject, data, units))
    if scores.get("threshold") is None:  # no call in or out of the circuit: no rates at a threshold
        row.update(dict.fromkeys(("node_tpr", "node_fpr", "unit_tpr", "unit_fpr", "edge_tpr", "edge_fpr"), math.nan))
    interchange = found_interchange(subject, data, found)  # through each variable's best-scored units
    row["interchange_accuracy"] = float(np.mean(list(interchange.values()))) if interchange else math.nan
    row.update(units=len(subject.candidates), edges=int((edge_truth(subject) >= 0).sum()))
    return row


def faithfulness(subject: Subject, data: Pairs, units: np.ndarray) -> dict[str, float]:
    """``faithfulness@budget`` for every budget of ``BUDGETS`` and the areas under the curve (``cpr``) and under
    ``|1 - faithfulness|`` (``cmd``) over the budgets (trapezoids, divided by the budgets' span)."""
    empty = _distance(subject, data, np.zeros(len(units), dtype=bool))
    curve = [1.0 - _distance(subject, data, _top(units, budget)) / empty if empty > 0 else math.nan
             for budget in BUDGETS]
    row = {f"faithfulness@{budget:g}": value for budget, value in zip(BUDGETS, curve)}
    row["cpr"] = _area(np.array(curve))
    row["cmd"] = _area(np.abs(1.0 - np.array(curve)))
    return row


def _area(values: np.ndarray) -> float:
    """The trapezoid area under ``values`` over ``BUDGETS``, divided by the budgets' span."""
    budgets = np.array(BUDGETS)
    return float(((values[1:] + values[:-1]) / 2 * np.diff(budgets)).sum() / (budgets[-1] - budgets[0]))


def _top(units: np.ndarray, budget: float) -> np.ndarray:
    """The ``ceil(budget * n)`` highest-scored units (ties: the first in candidate order) as a mask."""
    count = min(len(units), math.ceil(budget * len(units) - 1e-9))
    chosen = np.zeros(len(units), dtype=bool)
    chosen[np.argsort(-units, kind="stable")[:count]] = True
    return chosen


def _distance(subject: Subject, data: Pairs, kept: np.ndarray) -> float:
    """The mean absolute change of the outputs over the clean sequences' steps when every scored unit outside
    ``kept`` is set to its corrupted value at every step."""
    ablated = [candidate for candidate, keep in zip(subject.candidates, kept) if not keep]
    with torch.no_grad():
        outputs = subject.run(data.clean, corrupted_units(data, ablated))[0]
    change = (outputs - data.clean_outputs).abs() * data.real
    return float(change.sum() / (data.real.sum() * outputs.shape[-1]))


class _Scored(NamedTuple):
    """A folder as a submission is scored on it: its subject, its hooks ``(name, width)`` in the order of the
    subject's layers, and the edges a submission may score ``(source layer, sender, layer, receiver)``: the
    subject's (a path model's weights) and ``circuit.json``'s unit edges (one through a ReLU, unit to unit, is no
    weight of a path model and is not scored there)."""

    subject: Subject
    hooks: list[tuple[str, int]]
    edges: set[tuple[int, int, int, int]]


def _scored(folder: str | Path) -> _Scored:
    from lsrl.bench.eval.hooked import HookedSubject

    folder = as_path(folder, "lsrl.bench.score")
    if not (folder / "circuit.json").is_file():
        raise SubmissionError(f"lsrl.bench.score: {str(folder)!r} is no suite folder (it holds no circuit.json): "
                              "give a folder lsrl bench build wrote, as SUITE/parity/gru")
    subject = HookedSubject.from_folder(folder)
    circuit = read_circuit(folder / "circuit.json")
    # the units the model holds: a rotated hook may hold as sign parts what circuit.json's hook holds whole
    hooks = [(hook["name"], width) for hook, width in zip(circuit.hooks, subject.widths)]
    if len(circuit.hooks) != len(subject.labels):
        raise InternalError(f"bench score: {folder}'s circuit.json lists {len(circuit.hooks)} hooks, its subject has "
                            f"{len(subject.labels)} layers")
    layer = {name: index for index, (name, _) in enumerate(hooks)}
    edges = {(e.source, e.sender, e.layer, e.receiver) for e in subject.edges()}
    if isinstance(subject, PathSubject):  # a hooked model's edges are circuit.json's (a rotated one's: raw_edges)
        edges |= {(-1 if source == INPUT else layer[source], sender, layer[target], receiver)
                  for source, sender, target, receiver, _ in circuit.unit_edges}
    return _Scored(subject, hooks, edges)


def _found(scores: Any, scored: _Scored, where: str) -> Found:
    """``scores`` checked against the folder and read as the harness's ``Found``."""
    subject, hooks = scored.subject, scored.hooks
    problem = next(iter(_problems(scores, scored, where)), None)
    if problem is not None:
        raise SubmissionError(problem)
    layer = {name: index for index, (name, _) in enumerate(hooks)}
    units = np.array([scores["units"][hooks[c.layer][0]][c.unit] for c in subject.candidates], dtype=np.float64)
    edges = None
    if scores.get("edges") is not None:
        given = {_edge_key(edge, layer): float(edge["score"]) for edge in scores["edges"]}
        edges = np.array([given.get((e.source, e.sender, e.layer, e.receiver), 0.0) for e in subject.edges()])
    nodes = None
    if scores.get("nodes") is not None:
        nodes = {node: float(scores["nodes"].get(node, 0.0)) for node in subject.nodes}
    threshold = float(scores.get("threshold", math.inf))
    return Found(threshold=threshold, units=units, nodes=nodes, edges=edges)


def _edge_key(edge: dict[str, Any], layer: dict[str, int]) -> tuple[int, int, int, int]:
    (source, sender), (target, receiver) = edge["source"], edge["target"]
    return (-1 if source == INPUT else layer[source]), int(sender), layer[target], int(receiver)


def _problems(scores: Any, scored: _Scored, where: str) -> list[str]:
    """Every way ``scores`` does not fit the folder, one line each."""
    subject, hooks = scored.subject, scored.hooks
    if not isinstance(scores, dict):
        return [f"{where}: an object with 'units' (and optionally 'edges', 'nodes', 'threshold') expected, got "
                f"{type(scores).__name__}"]
    problems = [f"{where}: unknown field {key!r}; the fields are {', '.join(FIELDS)}" for key in scores
                if key not in FIELDS]
    units = scores.get("units")
    if not isinstance(units, dict):
        return problems + [f"{where}: 'units' must map every hook to its scores, one per unit"]
    widths = dict(hooks)
    problems += [f"{where}: unknown hook {hook!r}; the folder's hooks are {', '.join(widths)}" for hook in units
                 if hook not in widths]
    for hook, width in hooks:
        given = units.get(hook)
        if given is None:
            problems.append(f"{where}: hook {hook!r} has no scores ({width} units expected)")
        elif not _numbers(given) or len(given) != width:
            count = len(given) if isinstance(given, list) else type(given).__name__
            problems.append(f"{where}: hook {hook!r} needs a list of {width} scores, one per unit, got {count}")
        elif not np.isfinite(np.asarray(given, dtype=np.float64)).all():
            problems.append(f"{where}: hook {hook!r} has a score that is not a finite number (NaN or inf)")
    problems += _edge_problems(scores.get("edges"), scored, where)
    nodes = scores.get("nodes")
    if nodes is not None and (not isinstance(nodes, dict) or not _numbers(list(nodes.values()))):
        problems.append(f"{where}: 'nodes' must map variables to finite scores")
    elif nodes is not None:
        problems += [f"{where}: unknown variable {node!r} in 'nodes'" for node in nodes if node not in subject.nodes]
    threshold = scores.get("threshold")
    if threshold is not None and not (_numbers([threshold]) and math.isfinite(threshold)):
        problems.append(f"{where}: 'threshold' must be a finite number, got {threshold!r}")
    return problems


def _edge_problems(edges: Any, scored: _Scored, where: str) -> list[str]:
    if edges is None:
        return []
    if not isinstance(edges, list):
        return [f"{where}: 'edges' must be a list of {{'source': [hook, unit], 'target': [hook, unit], 'score': x}}"]
    layer = {name: index for index, (name, _) in enumerate(scored.hooks)}
    problems = []
    for position, edge in enumerate(edges):
        try:
            key = _edge_key(edge, layer)
            value = float(edge["score"])
        except (KeyError, TypeError, ValueError):
            problems.append(f"{where}: edge {position}: {{'source': [hook, unit], 'target': [hook, unit], "
                            f"'score': x}} with hooks of the folder (or 'input') expected, got {edge!r}")
            continue
        if key not in scored.edges:
            problems.append(f"{where}: edge {position} ({edge['source']} -> {edge['target']}) is not an edge of the "
                            "folder (circuit.json's unit_edges; a rotated folder's: between its raw coordinates)")
        elif not math.isfinite(value):
            problems.append(f"{where}: edge {position} has a score that is not a finite number")
    return problems


def _numbers(values: Any) -> bool:
    return isinstance(values, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


# ---- a submission file -----------------------------------------------------------------------------------------

def read_submission(path: str | Path) -> dict[str, Any]:
    """A submission file's JSON; a ``SubmissionError`` where it is no submission."""
    file = Path(path)
    try:
        stored = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SubmissionError(f"{file}: not a readable JSON file ({error})") from None
    if not isinstance(stored, dict) or stored.get("format") != FORMAT or not isinstance(stored.get("folders"), dict):
        raise SubmissionError(f"{file}: a submission is {{'format': {FORMAT!r}, 'method': NAME, 'folders': "
                              "{FOLDER: scores}}")
    if not isinstance(stored.get("method", ""), str):
        raise SubmissionError(f"{file}: 'method' must be a name")
    return stored


def problems(submission: dict[str, Any], suite: str | Path) -> list[str]:
    """Every problem of a submission against the suite at ``suite``, one line each (none: it can be scored)."""
    root, found = Path(suite), []
    for name, scores in submission["folders"].items():
        folder = root / name
        if not (folder / "circuit.json").is_file():
            found.append(f"{name}: no such folder in the suite {root} (a folder's path under the root, as "
                         "'parity/lstm' or 'distractors/parity/gru')")
            continue
        found += _problems(scores, _scored(folder), name)
    return found


def score_submission(submission: dict[str, Any], suite: str | Path, pairs: int = PAIRS) -> list[dict[str, object]]:
    """A row per folder of the submission (``SCORE_COLUMNS``); a ``SubmissionError`` listing every problem first."""
    found = problems(submission, suite)
    if found:
        raise SubmissionError(f"{len(found)} problem(s): " + "; ".join(found))
    rows = []
    for name, scores in submission["folders"].items():
        config = json.loads((Path(suite) / name / "config.json").read_text(encoding="utf-8"))
        record = config.get("lsrl_bench", config)  # a transformers folder keeps the suite's record in its config
        row: dict[str, object] = {"folder": name, "task": record["task"], "tier": record["tier"],
                                  "arch": record["architecture"], "method": submission.get("method", "submitted")}
        row.update(score(scores, Path(suite) / name, pairs))
        rows.append(row)
    return rows


def eval_results_yaml(rows: list[dict[str, object]], today: date | None = None) -> str:
    """The rows as a Hugging Face ``.eval_results/`` YAML list: one entry per folder and metric."""
    when = (today or date.today()).isoformat()
    lines = []
    for row in rows:
        for metric in ("unit_auroc", "node_auroc", "edge_auroc", "cpr", "cmd", "interchange_accuracy"):
            value = row.get(metric)
            if not isinstance(value, (int, float)) or math.isnan(value):
                continue
            lines += ["- dataset:", "    id: lsrl-bench", f"    task_id: {row['folder']}/{metric}",
                      f"  value: {round(value, 4)}", f"  date: '{when}'", "  source:",
                      f"    name: lsrl bench score ({row['method']})"]
    return "\n".join(lines) + "\n"
