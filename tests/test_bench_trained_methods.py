"""The trained tier's method columns (lsrl.bench.trained_tier.method_columns): mean ablation, attribution, probes and
DAS on an in-memory trained model (TrainedSubject) and on a stock transformers model (through SteppedModel.run_steps).

Checked against independent computations: DAS's interchange accuracy recomputed here from the subspace it learned,
on the held-out pairs, with the subject's own projector intervention and the program's interchange; the aligned
units as a planted perfect method (unit AUROC 1, against random's); the stepped run's subspace change against the
loader's own patch; attribution's gradients against central differences."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from lsrl.bench.eval import Found, Intervention, Pairs, evaluate, score
from lsrl.bench.eval import das as das_module
from lsrl.bench.eval import tier_subject
from lsrl.bench.eval.harness import found_interchange, ranked_units
from lsrl.bench.eval.methods import METHODS
from lsrl.bench.eval.pairs import EFFECT_FRACTION, EFFECT_THRESHOLD, held_trace
from lsrl.bench.tiers import tier_model
from lsrl.bench.trained_tier import TRAINED_COLUMNS, TrainedSubject, method_columns
from lsrl.bench.training.torch_rnn import train
from lsrl.bench.tasks import TASKS
from lsrl.errors import LsrlError
from tests.test_bench_eval import assert_attribution_is_the_derivative

torch.set_num_threads(1)


@functools.cache
def _subject() -> TrainedSubject:
    return TrainedSubject.from_model(train("count_ones", "gru", steps=240, batch=32))  # about 3 s: short


@pytest.mark.slow
def test_mean_ablation_and_das_score_an_in_memory_trained_model_in_range():
    subject = _subject()
    row = method_columns(subject, pairs=8, das_steps=20)
    measured = ("_auroc", "_fpr", "_accuracy", "das_seconds")
    assert set(row) == {column for column in TRAINED_COLUMNS if column.endswith(measured)} - {"interchange_accuracy",
                                                                                               "task_accuracy"}
    for column, value in row.items():
        assert column == "das_seconds" or 0.0 <= value <= 1.0, (column, value)
    assert row["mean_unit_auroc"] >= 0.75  # the free units are trained to be inert: ablating them changes little
    assert row["das_interchange_accuracy"] >= 0.5, row


@pytest.mark.slow
def test_das_interchange_accuracy_is_measured_on_the_held_out_pairs(monkeypatch):
    """The subspace das learns (on fresh sequences of the longest training length), applied here by the subject's own
    projector intervention on the fixed pairs of the trained folder's ``data.npz`` (of the training lengths, which
    the trained tier is scored on), reproduces its reported interchange accuracy."""
    subject, seen = _subject(), {}
    best, training = das_module._best, das_module._training_pairs
    monkeypatch.setattr(das_module, "_best", lambda searches: seen.setdefault("found", best(searches)))
    monkeypatch.setattr(das_module, "_training_pairs", lambda *a: seen.setdefault("train", training(*a)))
    pairs = Pairs.from_data(subject, 8)
    found = das_module.das(subject, pairs, steps=20)
    (search,) = seen["found"]
    assert seen["train"].base.shape[1] == TASKS["count_ones"].train_lengths[1] >= pairs.clean.shape[1]
    basis = search.basis.double()
    change = Intervention(values=pairs.corrupt_layers[search.layer], projector=basis.T @ basis)
    with torch.no_grad():
        outputs = subject.run(pairs.clean, {search.layer: change})[0].numpy()
    expected = subject.program(pairs.clean, check_bounds=False, patch={"count": held_trace(subject, pairs)["count"]})
    real = pairs.real.numpy()[..., 0] > 0
    agree = (np.round(outputs) == np.round(expected[..., : subject.output_dim])).all(axis=-1)[real]
    assert found.interchange["count"] == pytest.approx(agree.mean(), abs=1e-12)


def test_the_aligned_units_score_as_a_planted_perfect_method_and_random_does_not():
    subject = _subject()
    truth = np.array([float(candidate.truth) for candidate in subject.candidates])
    assert 0 < truth.sum() < len(truth)
    assert score(subject, Found(0.5, units=truth))["unit_auroc"] == 1.0
    assert evaluate(subject, "random", pairs=8)["unit_auroc"] < 0.9


@pytest.mark.slow
def test_random_scores_fall_clearly_below_resample_patching_in_interchange_accuracy():
    """A unit method's interchange goes through as many of its best-ranked units per variable as the variable has
    (``ranked_units``): scoring every unit high (or at random) does not pick the aligned ones."""
    subject = _subject()
    resample, chance = (evaluate(subject, method, pairs=32)["interchange_accuracy"]
                        for method in ("resample", "random"))
    assert resample >= 0.95 and chance <= resample - 0.3, (resample, chance)
    pairs = Pairs.from_data(subject, 32)
    every_unit = found_interchange(subject, pairs, Found(0.5, units=np.ones(len(subject.candidates))))
    assert every_unit["count"] <= resample - 0.3, every_unit


@pytest.mark.slow
def test_ranked_units_take_the_variables_budget_from_the_method_s_ranking():
    subject = _subject()
    truth = np.array([float(candidate.truth) for candidate in subject.candidates])
    aligned = {(candidate.layer, candidate.unit) for candidate in subject.candidates if candidate.truth}

    def named(scores):
        (variable, units), = ranked_units(subject, scores).items()
        assert variable == "count" and len(units) == len(aligned)
        return {(candidate.layer, candidate.unit) for candidate in units}

    assert named(truth) == aligned
    assert not named(1.0 - truth) & aligned  # the free units outnumber the aligned ones
    assert named(np.zeros(len(truth))) != aligned  # ties: not broken in candidate order (aligned units first)


@pytest.mark.slow
def test_a_trained_models_threshold_is_a_share_of_the_whole_inputs_effect():
    """On a trained model every unit moves the outputs a little (free units are trained to be inert, not exactly
    so): at 1e-6 every unit would be called. The threshold is ``EFFECT_FRACTION`` of the whole corrupted input's
    effect, recomputed here from the subject's own runs; a compiled model keeps ``EFFECT_THRESHOLD``."""
    subject = _subject()
    pairs = Pairs.from_data(subject, 8)
    with torch.no_grad():
        clean, corrupted = subject.run(pairs.clean)[0], subject.run(pairs.corrupt)[0]
    real = pairs.real.numpy()[..., 0] > 0
    change = (corrupted - clean).numpy()
    per_pair = [np.abs(change[k][real[k]]).mean() for k in range(len(change))]
    squared = [(change[k][real[k]] ** 2).sum() for k in range(len(change))]
    resample, attribution = METHODS["resample"](subject, pairs), METHODS["attribution"](subject, pairs)
    assert resample.threshold == pytest.approx(EFFECT_FRACTION * np.mean(per_pair), rel=1e-9)
    assert attribution.threshold == pytest.approx(EFFECT_FRACTION * np.mean(squared), rel=1e-9)
    assert (resample.units > EFFECT_THRESHOLD).all()
    row = score(subject, resample)
    assert row["unit_fpr"] <= 0.25 and row["unit_tpr"] >= 0.5, row
    compiled = tier_subject(tier_model("count_ones", "compiled"))
    assert METHODS["resample"](compiled, Pairs.from_data(compiled, 4)).threshold == EFFECT_THRESHOLD


@pytest.mark.slow
def test_das_changes_a_stock_transformers_model_inside_its_stepped_run():
    """The full subspace (identity projector) of a carried state set from a source run is the loader's own patch of
    that state; das then runs on the model (a few steps) and scores in range."""
    pytest.importorskip("transformers")
    from lsrl.bench.eval.das import _Subspaces
    from lsrl.bench.eval.hooked import HookedSubject, changed_run
    from lsrl.bench.training.hf import train_hf

    model = train_hf("majority", "hawk", steps=3, batch=8)
    rng = np.random.default_rng(3)
    base, source = (np.stack([TASKS["majority"].sample(rng, 5) for _ in range(4)]).astype(float) for _ in "ab")
    hook = model.alignment["ones_minus_zeros"][0]
    _, states = model.net.run_with_cache(source)
    width = states[hook].shape[-1]
    change = _Subspaces(batch=torch.arange(4), projectors=torch.eye(width, dtype=torch.float64)[None],
                        source=states[hook])
    with torch.no_grad():
        changed = changed_run(model.net, base, {hook: change})[0]
    patched, _ = model.net.run_with_cache(base, {hook: states[hook]})
    np.testing.assert_allclose(changed.numpy(), patched.numpy(), atol=1e-12)
    program = TASKS["majority"].build()
    data = {"test_inputs": base, "test_lengths": np.full(4, 5)}
    subject = HookedSubject.from_circuit("majority", "trained", model.net, model.circuit(data), program, 1)
    found = das_module.das(subject, Pairs.from_data(subject, 4), steps=2, nodes=["ones_minus_zeros"])
    assert 0.0 <= found.interchange["ones_minus_zeros"] <= 1.0
    # gradients through the stepped run's hooks; its outputs carry ~1e-9 of noise: a wider step, and summed over
    # every step and output that noise over the step bounds a difference's error near 1e-5
    assert_attribution_is_the_derivative(subject, every=16, step=1e-3, rel=5e-3, absolute=1e-5)
    probe = evaluate(subject, "probe", pairs=4)
    assert 0.0 <= probe["interchange_accuracy"] <= 1.0, probe


def test_edge_attribution_on_a_trained_model_is_refused_naming_why():
    with pytest.raises(LsrlError, match="edge_attribution' needs the model's unit edges; none are known of count_ones"):
        evaluate(_subject(), "edge_attribution", pairs=4)


def test_scoring_a_trained_model_leaves_its_parameters_as_they_were():
    """A subject is scored, not trained: its run asks no gradient of the model's weights (``frozen``), so attribution's
    and DAS's backward passes add nothing to them, and the weights still ask for gradients after."""
    subject = _subject()
    parameters = [*subject.model.cells.parameters(), *subject.model.readout.parameters()]
    before = [None if parameter.grad is None else parameter.grad.clone() for parameter in parameters]
    evaluate(subject, "attribution", pairs=4)
    das_module.das(subject, Pairs.from_data(subject, 4), steps=2)
    assert all(parameter.requires_grad for parameter in parameters)
    for parameter, grad in zip(parameters, before):
        assert (parameter.grad is None) == (grad is None) and (grad is None or torch.equal(parameter.grad, grad))
