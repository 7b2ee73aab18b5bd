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
from lsrl.bench.eval.pairs import held_trace
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
    assert set(row) == {column for column in TRAINED_COLUMNS if column.endswith(("_auroc", "_fpr", "_accuracy", "das_seconds"))
                        } - {"interchange_accuracy", "task_accuracy"}
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
