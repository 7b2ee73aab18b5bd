import csv

import numpy as np

import lsrl
from lsrl.experiments import noise
from lsrl.programs import discrete_approximator

SMALL = noise.Protocol(samples=2, queries=2, discrete_queries=2, n=3, pairs=4, cells=4)


def test_without_noise_the_forced_run_is_the_model_run():
    model = lsrl.compile(discrete_approximator(3, ifelse="step"), backend="float")
    xs, expected = noise.discrete_inputs(SMALL)
    forced = noise.forced_outputs(model, xs, 0.0, np.random.default_rng(0))
    np.testing.assert_allclose(forced, model(xs), rtol=0, atol=1e-9)
    assert np.array_equal(np.round(forced[:, -3:, 0]), expected)


def test_states_are_teacher_forced_not_accumulated():
    x = lsrl.Input(1)
    counter = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[1]], [[1]])), backend="float")
    xs = np.ones((1, 200, 1))
    forced = noise.forced_outputs(counter, xs, 1e-3, np.random.default_rng(1))[0, :, 0]
    # each step reads the clean previous count, so the error stays one step's worth: |dA| t + |dB|
    error = np.abs(forced - np.arange(1, 201))
    assert error.max() < 200 * 5e-3 and error[-1] > 0


def test_sweep_writes_a_csv_and_plots(tmp_path):
    rows = noise.run(tmp_path, sigmas=(0.0, 1e-3), variants=("multiplicative", "original"),
                     protocol=SMALL, workers=1, progress=False)
    with open(tmp_path / "noise.csv") as handle:
        written = list(csv.DictReader(handle))
    assert len(written) == len(rows) == 2 * 2 * (2 * 2 + 2 * 2 + 2 * 2)
    clean_discrete = [float(r["error"]) for r in written if r["program"] == "discrete" and float(r["sigma"]) == 0]
    assert clean_discrete == [0.0] * len(clean_discrete)
    assert (tmp_path / "noise_continuous.png").stat().st_size > 0
    assert (tmp_path / "noise_discrete.png").stat().st_size > 0


def test_robust_discrete_construction_survives_1e_5():
    xs, expected = noise.discrete_inputs(SMALL)
    for variant in lsrl.IFELSE_VARIANTS:
        program = discrete_approximator(3, ifelse=variant, robust=True, vocabulary=10, max_length=xs.shape[1])
        model = lsrl.compile(program, backend="float")
        out = noise.forced_outputs(model, xs, 1e-5, np.random.default_rng(2))
        assert np.mean(np.round(out[:, -3:, 0]) != expected) <= 0.01
    paper = lsrl.compile(discrete_approximator(3, ifelse="original"), backend="float")
    out = noise.forced_outputs(paper, xs, 1e-5, np.random.default_rng(2))
    assert np.mean(np.round(out[:, -3:, 0]) != expected) > 0.5  # the paper's constants do not
