"""A method written outside lsrl, scored from a submission file: ``lsrl bench score SUBMISSION SUITE`` and
``lsrl.bench.score(scores, folder)``. A submission planted from ``circuit.json`` scores 1, random scores sit near
0.5, and every malformed submission is refused with one line per problem."""

from __future__ import annotations

import csv
import json
import math
import re

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import lsrl.bench
from lsrl.bench.circuit import read_circuit
from lsrl.bench.eval.submission import BUDGETS, FORMAT, SubmissionError
from lsrl.cli import main
from bench_builds import built_once, parity_tiers_and_an_automaton

FOLDERS = ("distractors/parity/lstm", "parity/path")  # a hooked torch target and a compiled path model


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    (root, _), = built_once(tmp_path_factory, [("parity-first", parity_tiers_and_an_automaton)])
    return root


def _planted(folder):
    """Scores of 1 on every in-circuit unit and edge of ``circuit.json``, 0 elsewhere."""
    circuit = read_circuit(folder / "circuit.json")
    units = {hook["name"]: [0.0] * hook["width"] for hook in circuit.hooks}
    in_circuit = set()
    for unit in circuit.units:
        if unit["in_circuit"]:
            units[unit["hook"]][unit["unit"]] = 1.0
            in_circuit.add((unit["hook"], unit["unit"]))
    edges = [{"source": [source, sender], "target": [target, receiver],
              "score": float(((source, sender) in in_circuit or source == "input") and (target, receiver) in in_circuit)}
             for source, sender, target, receiver, _ in circuit.unit_edges]
    return {"units": units, "edges": edges, "threshold": 0.5}


def _random(folder, seed):
    circuit = read_circuit(folder / "circuit.json")
    rng = np.random.default_rng(seed)
    return {"units": {hook["name"]: rng.random(hook["width"]).tolist() for hook in circuit.hooks}}


def _submission(tmp_path, folders, name="planted"):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"format": FORMAT, "method": name, "folders": folders}))
    return path


@pytest.mark.slow
def test_a_planted_submission_scores_one_through_the_command(suite, tmp_path):
    submission = _submission(tmp_path, {name: _planted(suite / name) for name in FOLDERS})
    result = CliRunner().invoke(main, ["bench", "score", str(submission), str(suite), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    with (tmp_path / "out" / "score.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [row["folder"] for row in rows] == list(FOLDERS)
    for row in rows:
        assert float(row["unit_auroc"]) == 1.0 and float(row["node_auroc"]) == 1.0
        assert float(row["unit_tpr"]) == 1.0 and float(row["unit_fpr"]) == 0.0
        assert float(row["faithfulness@1"]) == 1.0  # every unit kept: the clean run itself
    assert float(rows[1]["edge_auroc"]) == 1.0  # the path model's edges are circuit.json's unit edges
    results = yaml.safe_load((tmp_path / "out" / ".eval_results" / "lsrl_bench.yaml").read_text())
    entry = next(entry for entry in results if entry["dataset"]["task_id"] == f"{FOLDERS[0]}/unit_auroc")
    assert entry["dataset"]["id"] == "lsrl-bench" and entry["value"] == 1.0 and "planted" in entry["source"]["name"]


@pytest.mark.slow
def test_random_scores_sit_near_chance(suite):
    aurocs = [lsrl.bench.score(_random(suite / name, seed), suite / name)["unit_auroc"]
              for name in FOLDERS for seed in range(3)]
    assert 0.3 < float(np.mean(aurocs)) < 0.7
    row = lsrl.bench.score(_random(suite / FOLDERS[0], 0), suite / FOLDERS[0])
    assert math.isnan(row["unit_tpr"])  # no threshold: no call in or out of the circuit
    assert all(f"unit_tpr@{budget:g}" in row and f"faithfulness@{budget:g}" in row for budget in BUDGETS)
    assert 0.0 <= row["cpr"] <= 1.0 and row["cmd"] >= 0.0


@pytest.mark.slow
def test_the_budgets_rates_follow_the_ranking(suite):
    """The planted scores rank every in-circuit unit first: at a budget as large as the circuit, TPR is 1 and FPR
    0; at the full budget both are 1."""
    folder = suite / FOLDERS[0]
    row = lsrl.bench.score(_planted(folder), folder)
    truth = [unit["in_circuit"] for unit in read_circuit(folder / "circuit.json").units]
    assert row["unit_tpr@1"] == 1.0 and row["unit_fpr@1"] == 1.0
    share = sum(truth) / len(truth)
    for budget in BUDGETS:
        if budget <= share:
            assert row[f"unit_fpr@{budget:g}"] == 0.0


@pytest.mark.parametrize("edit, message", [
    (lambda s, hook: s["units"].update({"nowhere": [0.0]}), "unknown hook 'nowhere'"),
    (lambda s, hook: s["units"].pop(hook), "has no scores"),
    (lambda s, hook: s["units"][hook].pop(), "needs a list of"),
    (lambda s, hook: s["units"][hook].__setitem__(0, float("nan")), "not a finite number"),
    (lambda s, hook: s.update({"weights": 1}), "unknown field 'weights'"),
    (lambda s, hook: s.update({"edges": [{"source": ["input", 99], "target": [hook, 0], "score": 1.0}]}),
     "is not an edge of the folder"),
    (lambda s, hook: s.update({"threshold": "high"}), "'threshold' must be a finite number"),
])
def test_the_checker_names_each_problem(suite, tmp_path, edit, message):
    folder = suite / FOLDERS[0]
    scores = _planted(folder)
    edit(scores, next(iter(scores["units"])))
    submission = _submission(tmp_path, {FOLDERS[0]: scores, "parity/nothing": {"units": {}}})
    result = CliRunner().invoke(main, ["bench", "score", str(submission), str(suite), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert any(message in line for line in lines), result.output
    assert any("parity/nothing: no such folder" in line for line in lines)  # every problem, one line each
    assert not (tmp_path / "out").exists()
    with pytest.raises(SubmissionError, match=re.escape(message)):
        lsrl.bench.score(scores, folder)


def test_a_file_that_is_no_submission_is_refused(suite, tmp_path):
    path = tmp_path / "scores.json"
    path.write_text(json.dumps({"units": {}}))
    result = CliRunner().invoke(main, ["bench", "score", str(path), str(suite)])
    assert result.exit_code != 0 and "a submission is" in result.output
