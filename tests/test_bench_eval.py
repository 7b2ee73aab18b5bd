"""The benchmark's tiers and evaluation harness (lsrl.bench.tiers, lsrl.bench.eval).

Checked against independent computations: AUROC against the pairwise definition, tier outputs against
the program's exact interpreter, distractors by the interpreter's own patching, subspace patching
against the interpreter's interchange of the variable.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
import torch

from lsrl.bench.eval import (METHODS, Found, Intervention, Pairs, auroc, evaluate, rates, score,
                             tier_subject)
from lsrl.bench.eval.methods import pruned_outputs, random_scores
from lsrl.bench.tasks import TASKS
from lsrl.bench.tiers import DISTRACTOR_PREFIX, in_circuit, rational_rotation, rotate, tier_model
from lsrl.bench.truth import tier_circuit
from lsrl.errors import LsrlError
from lsrl.lang.bounds import INF, value_bounds
from lsrl.numbers import EXACT
from tests.test_random_programs import _compiled_exact, _inputs_for

TASKS_TRIED = ("majority", "balanced_parens", "histogram")


@functools.lru_cache(maxsize=None)
def _tier(task, tier):
    return tier_model(task, tier)


@functools.lru_cache(maxsize=None)
def _subject(task, tier):
    return tier_subject(_tier(task, tier))


def _tokens(task, count=6, length=8, seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([TASKS[task].sample(rng, length) for _ in range(count)])


# ---- metrics ---------------------------------------------------------------------------------------


def _pairwise_auroc(scores, truth):
    positives = [s for s, t in zip(scores, truth) if t]
    negatives = [s for s, t in zip(scores, truth) if not t]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(positives, negatives))
    return wins / (len(positives) * len(negatives))


@pytest.mark.parametrize("seed", range(20))
def test_auroc_equals_the_pairwise_count_with_ties(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 30))
    scores = rng.integers(0, 4, size).astype(float)  # few values: many ties
    truth = rng.random(size) < 0.5
    truth[0], truth[1] = True, False
    assert auroc(scores, truth) == pytest.approx(_pairwise_auroc(scores, truth), abs=1e-12)


def test_auroc_extremes_and_rates():
    truth = np.array([True, True, False, False, False])
    assert auroc(np.array([3, 2, 1, 0, 0]), truth) == 1.0
    assert auroc(np.array([0, 0, 1, 2, 3]), truth) == 0.0
    assert auroc(np.ones(5), truth) == 0.5
    assert np.isnan(auroc(np.ones(2), np.array([True, True])))
    assert rates(np.array([3, 0, 1, 0, 0]), truth, 0.5) == (0.5, 1 / 3)
    with pytest.raises(LsrlError, match="1-D arrays of one length"):
        auroc(np.ones(3), np.ones(2, dtype=bool))


# ---- the distractor tier ---------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS_TRIED)
def test_distractor_tier_computes_the_task_exactly(task):
    xs = _tokens(task)
    expected = TASKS[task].build()(xs, exact=True)
    tier = _tier(task, "distractors")
    assert np.array_equal(tier.model(xs, exact=True), expected)
    assert np.array_equal(tier.task_outputs(xs, exact=True), expected)


def _within(bounds, rng, shape):
    """Random exact values of a node's components inside its value bounds (``lsrl.lang.bounds.value_bounds``)."""
    def inside(low, high, k):
        if low != -INF and high != INF:
            return low + Fraction(k, 10) * (high - low)
        return low + k if low != -INF else high - k if high != INF else k - 5

    steps = rng.integers(0, 11, shape).tolist()
    return np.array([[[inside(low, high, k) for low, high, k in zip(*bounds, row)] for row in sequence]
                     for sequence in steps], dtype=object)


@pytest.mark.parametrize("task", TASKS_TRIED)
def test_distractor_variables_reach_the_output_only_through_gates_shut_on_every_input(task):
    """The interpreter's own interchange: every distractor node set at once to random values inside its value bounds
    (values of other inputs among them) leaves the task's outputs alone; one raised node of the leak set to 0, a
    value below its bounds, opens its gate."""
    tier, xs = _tier(task, "distractors"), _tokens(task)
    names = tier.program.names
    distractors = [node for node in tier.program.nodes if names[node].startswith(DISTRACTOR_PREFIX)]
    rng = np.random.default_rng(1)
    clean = tier.task_outputs(xs, exact=True)
    inside = {node: _within(value_bounds(node), rng, (*xs.shape[:2], node.dim)) for node in distractors}
    assert np.array_equal(tier.task_outputs(xs, exact=True, patch=inside), clean)
    raised = [node for node in distractors if names[node].endswith(".raised")]
    assert raised
    for node in raised:
        zeroed = tier.task_outputs(xs, exact=True, patch={node: np.zeros((*xs.shape[:2], node.dim), dtype=int)})
        assert not np.array_equal(zeroed, clean), names[node]


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS_TRIED)
def test_distractor_units_are_active_but_resampling_them_never_changes_the_output(task):
    """Every unit that holds only distractor values, set to its values on other inputs: the outputs stay; set to 0,
    a value the leak's raised units never take, some open a gate."""
    subject, xs = _subject(task, "distractors"), _tokens(task, count=16)
    negatives = [c for c in subject.candidates if not c.truth and not any(in_circuit(n) for n in c.nodes)]
    opened = 0
    with torch.no_grad():
        clean, layers = subject.run(xs)
        varying = [c for c in negatives if layers[c.layer][..., c.unit].std() > 0]
        assert len(varying) >= 5  # others stay 0 on these inputs (a sign half, a depth flag never reached)
        for candidate in negatives:
            values = layers[candidate.layer]
            mask = torch.zeros(xs.shape[0], values.shape[-1], dtype=torch.float64)
            mask[:, candidate.unit] = 1
            patched, _ = subject.run(xs, {candidate.layer: Intervention(values=values.flip(0), mask=mask)})
            assert torch.equal(patched, clean), f"patching {candidate} changed the output"
            zeroed, _ = subject.run(xs, {candidate.layer: Intervention(values=torch.zeros_like(values), mask=mask)})
            opened += not torch.equal(zeroed, clean)
    assert opened


def test_the_labels_truth_has_both_classes_and_names_only_labelled_units():
    subject = _subject("balanced_parens", "distractors")
    truth = [c.truth for c in subject.candidates]
    assert any(truth) and not all(truth)
    for candidate in subject.candidates:
        label = subject.labels[candidate.layer][candidate.unit]
        assert candidate.nodes == (label.node,)


# ---- the rotated tier ------------------------------------------------------------------------------


def test_rational_rotations_are_exactly_orthogonal():
    for width in (1, 2, 5, 8):
        rotation = rational_rotation(width, np.random.default_rng(width))
        assert (rotation @ rotation.transpose()).equals(EXACT.eye(width))
        if width > 2:
            assert sum(1 for _ in rotation.entries()) > 2 * width  # mixes more than pairs


@pytest.mark.parametrize("task", TASKS_TRIED)
def test_rotated_tier_equals_the_interpreter_bit_for_bit(task):
    xs = _tokens(task)
    tier = _tier(task, "rotated")
    assert any(basis is not None for basis in tier.bases)
    assert np.array_equal(tier.model(xs, exact=True), TASKS[task].build()(xs, exact=True))


@pytest.mark.parametrize("seed", [0, 3, 7, 11, 19])
def test_rotated_random_programs_equal_the_interpreter(seed):
    gen, model, _ = _compiled_exact(seed)
    rotated, bases = rotate(model, seed)
    xs = np.array([[Fraction(v) for v in row] for row in _inputs_for(seed, gen.d_in)[0]], dtype=object)
    assert np.array_equal(rotated(xs, exact=True), gen.program(xs, exact=True))


@pytest.mark.parametrize("task", TASKS_TRIED)
def test_patching_a_variables_subspace_is_its_interchange(task):
    """The rotated tier's ground truth: the span of ``Q[:, units of v]`` in every layer holds ``v``."""
    subject = _subject(task, "rotated")
    tier = _tier(task, "rotated")
    base, source = _tokens(task, count=8, seed=2), _tokens(task, count=8, seed=3)
    source_trace = tier.program.trace(source)
    tried = 0
    with torch.no_grad():
        _, source_layers = subject.run(source)
        for node in tier.model.patchable:
            interventions = {}
            for index, labels in enumerate(subject.labels):
                units = [u for u, label in enumerate(labels) if label is not None and label.node == node
                         and label.role in ("value", "copy", "pos", "neg", "negated", "-pos", "-neg")]
                basis = np.eye(len(labels)) if subject.bases[index] is None else subject.bases[index]
                if units:
                    span = torch.as_tensor(basis[:, units])
                    interventions[index] = Intervention(values=source_layers[index], projector=span @ span.T)
            if not any(subject.bases[index] is not None for index in interventions):
                continue
            patched, _ = subject.run(base, interventions)
            expected = tier.task_outputs(base, patch={node: source_trace[node]})
            np.testing.assert_allclose(patched.numpy(), expected, atol=1e-9, err_msg=node)
            tried += 1
    assert tried >= 2


# ---- the harness -----------------------------------------------------------------------------------


def test_a_planted_perfect_method_scores_auroc_1():
    subject = _subject("balanced_parens", "distractors")
    truth = np.array([c.truth for c in subject.candidates], dtype=float)
    row = score(subject, Found(0.5, units=truth))
    assert row["unit_auroc"] == 1.0 and row["node_auroc"] == 1.0
    assert (row["unit_tpr"], row["unit_fpr"], row["node_tpr"], row["node_fpr"]) == (1.0, 0.0, 1.0, 0.0)


def test_interchange_accuracy_averages_the_interchangeable_circuit_variables_only():
    subject = _subject("balanced_parens", "distractors")
    marks = tier_circuit(_tier("balanced_parens", "distractors"), "path").nodes
    assert subject.not_interchangeable == {node["name"] for node in marks if not node["interchangeable"]}
    circuit = [node for node, inside in subject.nodes.items() if inside and in_circuit(node)]
    unreliable = [node for node in circuit if node in subject.not_interchangeable]
    reliable = [node for node in circuit if node not in subject.not_interchangeable]
    assert unreliable and reliable, "the truth marks some circuit variables of the distractor tier not interchangeable"
    found = Found(0.5, nodes=dict.fromkeys(subject.nodes, 1.0),
                  interchange={**dict.fromkeys(reliable, 1.0), **dict.fromkeys(unreliable, 0.0)})
    assert score(subject, found)["interchange_accuracy"] == 1.0
    every = replace(subject, not_interchangeable=frozenset())
    assert score(every, found)["interchange_accuracy"] == pytest.approx(len(reliable) / len(circuit))
    only_unreliable = Found(0.5, nodes=found.nodes, interchange=dict.fromkeys(unreliable, 0.0))
    assert np.isnan(score(subject, only_unreliable)["interchange_accuracy"])


def test_a_random_method_scores_auroc_near_one_half():
    subject = _subject("balanced_parens", "distractors")
    pairs = Pairs.from_data(subject, 4)
    rows = [score(subject, random_scores(subject, pairs, seed)) for seed in range(40)]
    for level in ("unit", "node", "edge"):
        assert abs(np.mean([row[f"{level}_auroc"] for row in rows]) - 0.5) < 0.06, level


@pytest.mark.parametrize("task", TASKS_TRIED)
def test_activation_patching_finds_the_circuit_among_distractors(task):
    row = evaluate(_subject(task, "distractors"), "resample", pairs=16)
    assert row["node_auroc"] >= 0.9 and row["unit_auroc"] >= 0.9, row
    assert row["node_auroc"] > evaluate(_subject(task, "distractors"), "random", pairs=4)["node_auroc"]


@pytest.mark.slow
def test_every_method_runs_and_scores_in_range():
    subject = _subject("majority", "rotated")
    for method in METHODS:
        row = evaluate(subject, method, pairs=8)
        assert 0.0 <= row["node_auroc"] <= 1.0, (method, row)
    assert 0.0 <= evaluate(subject, "probe", pairs=8)["interchange_accuracy"] <= 1.0


def test_unknown_method_and_tier_are_one_line_errors():
    with pytest.raises(LsrlError, match="unknown method 'sae'"):
        evaluate(_subject("majority", "distractors"), "sae")
    with pytest.raises(LsrlError, match="unknown tier 'noisy'"):
        tier_model("majority", "noisy")
    with pytest.raises(LsrlError, match="only token programs"):
        tier_model("lookup_1", "distractors")


def test_acdc_removes_an_edge_by_reading_its_senders_corrupted_value():
    """The pruned model ACDC tries: no edge removed is the model itself on the clean inputs; every edge removed, each
    layer reads only corrupted values, so the outputs are the corrupted run's (pairs of equal lengths)."""
    subject = _subject("majority", "distractors")
    pairs = Pairs.from_data(subject, 8)
    edges = subject.edges()
    np.testing.assert_array_equal(pruned_outputs(subject, pairs, {}).numpy(), pairs.clean_outputs.numpy())
    every = {}
    for edge in edges:
        every.setdefault(edge.layer, []).append(edge)
    equal = slice(0, 4)  # the first half of the pairs: equal lengths, nothing held
    np.testing.assert_allclose(pruned_outputs(subject, pairs, every).numpy()[equal],
                               pairs.corrupt_outputs.numpy()[equal], rtol=0, atol=1e-9)
    found = METHODS["acdc"](subject, pairs)
    assert found.edges.shape == (len(edges),) and (found.edges > found.threshold).any()


# ---- torch targets and suite folders ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["rnn", "lstm"])
def test_hooked_targets_of_the_distractor_tier_compute_the_task_and_are_scored(arch):
    subject = tier_subject(_tier("majority", "distractors"), arch)
    xs = _tokens("majority")
    outputs, _ = subject.run(xs)
    np.testing.assert_allclose(outputs.numpy(), TASKS["majority"].build()(xs), atol=1e-9)
    row = evaluate(subject, "resample", pairs=8)
    assert row["node_auroc"] >= 0.9 and row["unit_auroc"] >= 0.9, row
    for method in ("path_patching", "acdc"):
        with pytest.raises(LsrlError, match=f"method '{method}' needs the path model's weights.*use resample.*"
                                            "edge level: edge_attribution"):
            evaluate(subject, method, pairs=4)


def test_edge_attribution_of_a_weight_is_the_weight_times_the_receivers_gradient():
    """Through the cut layers (``_Cut``), a path model's edge into a Linear or linear-state layer has the direct
    derivative of its weight: its score is ``|w sum_t dL/da_receiver(t) (a_sender(corrupted) - a_sender(clean))|``,
    recomputed here from the weights (per pair, averaged)."""
    from lsrl.bench.eval.methods import _output_gradients, edge_attribution

    subject = _subject("majority", "distractors")
    pairs = Pairs.from_data(subject, 8)
    found, gradients = edge_attribution(subject, pairs), _output_gradients(subject, pairs)
    checked = 0
    for edge, edge_score in zip(subject.edges(), found.edges):
        if subject.layers[edge.layer].kind not in ("Linear", "LinState"):
            continue
        before = pairs.layer_input(subject, edge.source + 1) if edge.kind == "input" else pairs.clean_layers[edge.layer]
        after = (pairs.layer_input(subject, edge.source + 1, corrupted=True) if edge.kind == "input"
                 else pairs.corrupt_layers[edge.layer])
        change = (after - before)[..., edge.sender]
        receiver = gradients[edge.layer][..., edge.receiver]
        if edge.kind == "recurrent":  # the state read at step t is the previous step's
            change, receiver = change[:, :-1], receiver[:, 1:]
        expected = float((edge.weight * (change * receiver).sum(dim=1)).abs().mean())
        assert edge_score == pytest.approx(expected, rel=1e-9, abs=1e-12), edge
        checked += 1
    assert checked > 20 and (found.edges > found.threshold).any()


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["rnn", "gru"])
def test_edge_attribution_scores_a_hooked_models_edges_against_its_circuit(arch):
    """A torch target's edges are ``circuit.json``'s unit edges, scored where both ends hold variables: a planted
    perfect method scores edge AUROC 1; edge attribution gives 0 to every edge into a distractor's unit (the output
    does not read it) and finds circuit edges, above random."""
    from lsrl.bench.eval.harness import edge_truth

    subject = tier_subject(_tier("majority", "distractors"), arch)
    marks = edge_truth(subject)
    assert len(marks) == len(subject.edges()) > 0 and {0, 1} <= set(marks.tolist())
    assert score(subject, Found(0.5, units=np.zeros(len(subject.candidates)), edges=(marks == 1).astype(float))
                 )["edge_auroc"] == 1.0
    pairs = Pairs.from_data(subject, 8)
    found = METHODS["edge_attribution"](subject, pairs)
    distractor = {(c.layer, c.unit) for c in subject.candidates if not c.truth}
    outside = [position for position, edge in enumerate(subject.edges()) if (edge.layer, edge.receiver) in distractor]
    assert outside and (found.edges[outside] == 0).all()
    row, chance = evaluate(subject, "edge_attribution", pairs=8), evaluate(subject, "random", pairs=8)
    assert row["edge_auroc"] >= 0.75 and row["edge_auroc"] > chance["edge_auroc"] + 0.2, (row, chance)
    assert row["edge_fpr"] == 0.0 and row["edge_tpr"] > 0.5, row


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["rnn", "lstm"])
def test_a_hooked_models_unit_patch_is_the_loaders_own_patch(arch):
    """``HookedSubject.run`` applies interventions itself at the hook points (``changed_run``); setting units that way
    equals the standalone loader's ``run_with_cache(xs, patch)`` (NaN: keep), outputs and every hook's values."""
    subject = tier_subject(_tier("majority", "distractors"), arch)
    xs = _tokens("majority", count=5, length=9).astype(np.float64)
    rng = np.random.default_rng(5)
    for candidate in subject.candidates[::7]:
        hook, width = subject.hooks[candidate.layer], subject.widths[candidate.layer]
        values = torch.as_tensor(rng.integers(-2, 3, size=(len(xs), xs.shape[1], width)).astype(np.float64))
        mask = torch.zeros(len(xs), width, dtype=torch.float64)
        mask[:, candidate.unit] = 1
        outputs, layers = subject.run(xs, {candidate.layer: Intervention(values=values, mask=mask)})
        patch = torch.full_like(values, float("nan"))
        patch[..., candidate.unit] = values[..., candidate.unit]
        expected, cache = subject.net.run_with_cache(xs, {hook: patch})
        np.testing.assert_array_equal(outputs.numpy(), expected[..., : subject.output_dim].double().numpy())
        for index, name in enumerate(subject.hooks):
            np.testing.assert_array_equal(layers[index].numpy(), cache[name].double().numpy())


def _attribution_by_differences(subject, pairs, candidate, step=1e-5):
    """Attribution patching's score of ``candidate`` from central differences of the outputs' projection on their
    corrupted change, the candidate's activation moved along its corrupted change at every step (per pair)."""
    direction = ((pairs.corrupt_outputs - pairs.clean_outputs) * pairs.real).numpy()
    change = (pairs.corrupt_layers[candidate.layer] - pairs.clean_layers[candidate.layer])[..., candidate.unit]

    def projected(sign):
        delta = torch.zeros_like(pairs.clean_layers[candidate.layer])
        delta[..., candidate.unit] = sign * step * change
        with torch.no_grad():
            outputs = subject.run(pairs.clean, {candidate.layer: Intervention(delta=delta)})[0].numpy()
        return (outputs * direction).sum(axis=(1, 2))

    return float(np.abs((projected(1) - projected(-1)) / (2 * step)).mean())


@pytest.mark.parametrize("arch", ["rnn", "lstm"])
@pytest.mark.slow
def test_probe_and_attribution_find_the_circuit_of_a_hooked_model(arch):
    """On the hooked distractor targets (exact models), attribution finds the circuit's units as resample patching
    does, and the probes' subspaces interchange the circuit variables as the program does (its interchange)."""
    subject = tier_subject(_tier("majority", "distractors"), arch)
    chance = evaluate(subject, "random", pairs=8)
    attribution, probe = evaluate(subject, "attribution", pairs=8), evaluate(subject, "probe", pairs=32)
    assert attribution["unit_auroc"] >= 0.9 and attribution["unit_auroc"] > chance["unit_auroc"] + 0.2, attribution
    assert probe["node_auroc"] >= 0.95 and probe["node_tpr"] == 1.0 and probe["interchange_accuracy"] == 1.0, probe


@pytest.mark.slow
def test_bench_eval_command_on_a_suite_folder_and_on_a_tier(tmp_path):
    from click.testing import CliRunner

    from lsrl.bench import build_suite
    from lsrl.cli import main

    build_suite(tmp_path, ["balanced_parens"], progress=False)
    folder = str(tmp_path / "balanced_parens" / "gru")
    result = CliRunner().invoke(main, ["bench", "eval", "--method", "zero", "--pairs", "4", folder])
    assert result.exit_code == 0, result.output
    printed = dict(line.split(": ") for line in result.output.splitlines())
    assert printed["arch"] == "gru" and float(printed["unit_auroc"]) >= 0.9, printed
    # the folder holds its tier and architecture: options naming them must agree, never be ignored
    same = CliRunner().invoke(main, ["bench", "eval", "--method", "zero", "--pairs", "4", "--tier", "compiled",
                                     "--arch", "gru", folder])
    assert same.exit_code == 0 and same.output.split("seconds")[0] == result.output.split("seconds")[0], same.output
    wrong = CliRunner().invoke(main, ["bench", "eval", "--method", "zero", "--arch", "lstm", folder])
    assert wrong.exit_code != 0 and "arch 'lstm' given, but the folder's config.json says arch 'gru'" in wrong.output
    from lsrl.bench.eval.hooked import HookedSubject

    # the folder's truth (circuit.json) and the tier's own (live_units) agree: the same scores
    from_folder = evaluate(HookedSubject.from_folder(tmp_path / "balanced_parens" / "path"), "path_patching", pairs=8)
    in_memory = evaluate(_subject("balanced_parens", "compiled"), "path_patching", pairs=8)
    assert not np.isnan(in_memory["unit_auroc"]) and not np.isnan(in_memory["edge_auroc"])
    for column in ("unit_auroc", "unit_tpr", "unit_fpr", "edge_auroc", "edge_tpr", "units", "edges"):
        assert from_folder[column] == pytest.approx(in_memory[column], nan_ok=True), column
    result = CliRunner().invoke(main, ["bench", "eval", "--method", "random", "--task", "majority", "--pairs", "4"])
    assert result.exit_code == 0 and "tier: distractors" in result.output, result.output
    result = CliRunner().invoke(main, ["bench", "eval", "--method", "zero"])
    assert result.exit_code != 0 and "give a suite FOLDER or --task" in result.output


# ---- the trained tier ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _trained():
    from lsrl.bench.training.torch_rnn import train

    return train("count_ones", "gru", steps=240, batch=32)  # a short run: the full tier trains 600 steps of 64


@pytest.mark.slow
def test_trained_tier_runs_as_the_stock_module_and_learns_the_causal_graph():
    model = _trained()
    xs = torch.as_tensor(_tokens("count_ones", count=4), dtype=torch.float64)
    states, _ = model.stock()(xs)  # torch's fused GRU with the trained weights
    outputs, _ = model.run(xs)
    np.testing.assert_allclose(outputs.detach().numpy(), model.readout(states).detach().numpy(), atol=1e-12)
    assert model.accuracy >= 0.8 and model.interchange_accuracy["count"] >= 0.75, (model.accuracy,
                                                                                   model.interchange_accuracy)


@pytest.mark.slow
def test_trained_tier_subject_scores_the_aligned_units():
    from lsrl.bench.trained_tier import TrainedSubject

    subject = TrainedSubject.from_model(_trained())
    assert sum(c.truth for c in subject.candidates) == len(_trained().alignment["count"][1])
    assert evaluate(subject, "resample", pairs=8)["unit_auroc"] >= 0.9


def assert_attribution_is_the_derivative(subject, pairs=4, every=3, step=1e-5, rel=1e-4, absolute=1e-7):
    """Attribution's scores equal central differences (``step``) of the outputs under the same change added inside
    the run (``_attribution_by_differences``), within ``rel`` (or ``absolute``): gradients flow through
    ``subject.run``'s interventions. For smooth models (a compiled ReLU cell's kinks have one-sided differences)."""
    pairs = Pairs.from_data(subject, pairs)
    found = METHODS["attribution"](subject, pairs)
    assert (found.units > found.threshold).any()
    for position in range(0, len(subject.candidates), every):
        expected = _attribution_by_differences(subject, pairs, subject.candidates[position], step)
        assert found.units[position] == pytest.approx(expected, rel=rel, abs=absolute), position


@pytest.mark.slow
def test_attribution_on_a_trained_model_in_memory_and_from_its_folder_is_its_derivative(tmp_path):
    """The trained GRU as ``TrainedSubject`` (in memory) and as its suite folder through the standalone loader's hook
    points (``HookedSubject``, ``changed_run``)."""
    from lsrl.bench import build_suite
    from lsrl.bench.eval.hooked import HookedSubject
    from lsrl.bench.trained_tier import TrainedSubject

    assert_attribution_is_the_derivative(TrainedSubject.from_model(_trained()))
    build_suite(tmp_path, ["count_ones"], progress=False, tiers=["trained"], train_steps=60, trained_archs=["gru"],
                test_sequences=20)
    folder = HookedSubject.from_folder(tmp_path / "trained" / "count_ones" / "gru")
    assert isinstance(folder, HookedSubject) and folder.tier == "trained"
    assert_attribution_is_the_derivative(folder)
