"""The distractor tier's leak: the distractors reach the output, but only through gates shut on every input.

Checked against independent computations: the task's own program (its interpreter) for the outputs, the sound
value analysis and the traces on the data for the gates, the folders' own loaders (``load_model.py``) for
patching, a hand-built program for the reach rule of the truth.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lsrl.bench import load
from lsrl.bench.build import check_outputs
from lsrl.bench.circuit import program_graph
from lsrl.bench.eval import evaluate
from lsrl.bench.eval.hooked import HookedSubject
from lsrl.bench.tasks import TASKS, task_program
from lsrl.bench.tiers import DISTRACTOR_PREFIX, TASK_OUTPUT, has_tier, task_output, tier_model
from lsrl.errors import InternalError
from lsrl.lang.bounds import value_bounds
from lsrl.lang.nodes import Input, Linear, ReLU
from lsrl.lang.program import ForEach
from bench_builds import built_once, parity_tiers_and_an_automaton

TIERED = [name for name in TASKS if has_tier(name, "distractors")]
LEAK_PARTS = (".shifted", ".raised", ".below", ".gate")


def _leak(name: str) -> bool:
    return name.startswith(DISTRACTOR_PREFIX) and name.endswith(LEAK_PARTS)


def _tokens(task: str, count: int = 6, length: int = 9, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([TASKS[task].sample(rng, length) for _ in range(count)])


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """parity's distractor and rotated tiers (a short test split), built once per session (bench_builds)."""
    return built_once(tmp_path_factory, [("parity-first", parity_tiers_and_an_automaton)])[0][0]


# ---- the program ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("task", TIERED)
def test_the_leaky_output_is_the_tasks_output_and_every_gate_is_shut(task):
    """On random inputs the model's output node (``TASK_OUTPUT``) and the compiled model equal the task's own
    program exactly; every gate is 0 by the value analysis (its raised value at least 1) and on those inputs."""
    tier = tier_model(task, "distractors")
    xs = _tokens(task)
    expected = task_program(task)(xs, exact=True)
    assert tier.program.names[task_output(tier.program)] == TASK_OUTPUT
    assert np.array_equal(tier.task_outputs(xs, exact=True), expected)
    assert np.array_equal(tier.model(xs, exact=True), expected)
    trace = tier.program.trace(xs, exact=True)
    gates = [node for node in tier.program.nodes if tier.program.names[node].endswith(".gate")]
    assert gates
    for gate in gates:
        name = tier.program.names[gate]
        assert name.startswith(DISTRACTOR_PREFIX)
        assert value_bounds(gate) == ([0] * gate.dim, [0] * gate.dim), name
        raised = gate.inputs[0].inputs[0]
        assert min(value_bounds(raised).low) >= 1, name
        assert not np.any(trace[name]) and np.all(trace[tier.program.names[raised]] >= 1), name


def test_a_node_proven_identically_zero_passes_nothing_on_in_the_truth():
    """``ReLU(-ReLU(x + 1))`` and three times it are 0 on every input: neither they nor what only they read reach
    the output, while ``x`` itself, read by the output directly as well, does; every edge stays in the node
    graph."""
    x = Input(1, name="x", bounds=(0, 1))
    lifted = ReLU(Linear(x, [[1]], [1], name="lifted"), name="positive")
    dead = ReLU(Linear(lifted, [[-1]], name="negated"), name="dead")
    out = Linear(x, [[2]]) + Linear(dead, [[3]], name="scaled")
    program = ForEach(out)
    nodes, edges = program_graph(program)
    reaches = {node["name"]: node["reaches_output"] for node in nodes}
    assert not any(reaches[name] for name in ("lifted", "positive", "negated", "dead", "scaled"))
    assert reaches["x"] and reaches[program.names[out]]
    assert ("dead", "scaled") in edges and ("negated", "dead") in edges


def test_the_build_refuses_a_folder_whose_outputs_are_not_the_datas():
    xs = np.linspace(0, 1, 6).reshape(1, 3, 2)
    data = {"test_inputs": xs, "test_outputs": np.where(xs > 0.9, np.nan, xs + 1e-7)}  # NaN: padding, not compared
    check_outputs(torch.nn.Identity(), data, 1e-6, "folder")
    with pytest.raises(InternalError, match="outputs 1e-07 away from data.npz's test outputs"):
        check_outputs(torch.nn.Identity(), data, 0.0, "folder")


# ---- the folders ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("arch", TASKS["parity"].archs)
def test_leak_units_and_distractor_nodes_are_outside_the_circuit(suite, arch):
    circuit = json.loads((suite / "distractors" / "parity" / arch / "circuit.json").read_text())
    leak = [unit for unit in circuit["units"] if unit["node"] and _leak(unit["node"])]
    assert leak and not any(unit["in_circuit"] or unit["live"] for unit in leak)
    assert not any(unit["in_circuit"] for unit in circuit["units"] if (unit["holds"][0] or "").startswith(
        DISTRACTOR_PREFIX))
    distractors = [node for node in circuit["nodes"] if node["name"].startswith(DISTRACTOR_PREFIX)]
    assert distractors and not any(node["reaches_output"] or node["in_circuit"] for node in distractors)
    assert any(node["in_circuit"] for node in circuit["nodes"])


@pytest.mark.slow
@pytest.mark.parametrize("arch", TASKS["parity"].archs)
def test_zeroing_a_raised_unit_opens_its_gate_and_resampling_it_does_not(suite, arch):
    """Through the folder's own loader: the outputs are data.npz's (bit-identical on the path model); each unit
    labelled with a raised value, set to 0 at every step, moves the outputs; set to its values on other test
    sequences, it leaves them alone."""
    net, labels, data, _ = load(f"parity/{arch}", root=suite, tier="distractors")
    lengths = data["test_lengths"][:16]
    xs = data["test_inputs"][:16, : int(lengths.min())]  # every step real
    expected = data["test_outputs"][:16, : xs.shape[1]]
    with torch.no_grad():
        clean, cache = net.run_with_cache(xs)
        clean = clean.double().numpy()
        assert np.array_equal(clean, expected) if arch == "path" else np.allclose(clean, expected, rtol=0, atol=1e-9)
        raised = [(hook, unit) for hook, units in labels.items() for unit, label in enumerate(units)
                  if label.node.endswith(".raised") and label.role == "value"]
        assert raised
        for hook, unit in raised:
            values = cache[hook].double().numpy()
            for donor, moves in ((np.zeros_like(values), True), (values[::-1], False)):
                patch = np.full(values.shape, np.nan)  # NaN: the model's own value
                patch[..., unit] = donor[..., unit]
                patched, _ = net.run_with_cache(xs, patch={hook: patch})
                assert moves == (not np.array_equal(patched.double().numpy(), clean)), (hook, unit, moves)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["path", "lstm"])
def test_zero_ablation_and_probes_call_the_shut_distractors_and_resampling_does_not(suite, arch):
    """The harness on the folders: resample patching separates the circuit from the distractors at node level;
    zero ablation (which opens the gates) and probes (which decode distractors from circuit units) fall clearly
    below it."""
    subject = HookedSubject.from_folder(suite / "distractors" / "parity" / arch)
    rows = {method: evaluate(subject, method) for method in ("resample", "zero", "probe")}
    resample = rows["resample"]["node_auroc"]
    assert resample >= 0.95, rows["resample"]
    assert rows["zero"]["node_auroc"] <= resample - 0.1 and rows["zero"]["node_fpr"] > 0, rows["zero"]
    assert rows["probe"]["node_auroc"] <= resample - 0.1, rows["probe"]


@pytest.mark.slow
def test_the_card_of_a_distractor_folder_says_how_the_distractors_reach_the_output(suite):
    card = " ".join((suite / "distractors" / "parity" / "gru" / "README.md").read_text().split())
    assert "only through gates shut on every input" in card and "false positive" in card
    rotated = " ".join((suite / "rotated" / "parity" / "gru" / "README.md").read_text().split())
    assert "reach the output by no path" in rotated and "false positive" not in rotated


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["path", "lstm"])
def test_the_rotated_tier_rotates_the_distractor_model_without_its_gates(suite, arch):
    """No unit of a rotated folder is labelled with a part of the leak (a rotated coordinate mixing a raised value
    would, set to another input's value, open its gate), and no distractor node reaches the output."""
    circuit = json.loads((suite / "rotated" / "parity" / arch / "circuit.json").read_text())
    assert not [unit for unit in circuit["units"] if unit["node"] and _leak(unit["node"])]
    distractors = [node for node in circuit["nodes"] if node["name"].startswith(DISTRACTOR_PREFIX)]
    assert distractors and not any(node["reaches_output"] or node["in_circuit"] for node in distractors)
