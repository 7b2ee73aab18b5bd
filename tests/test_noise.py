import csv

import numpy as np
import pytest
from click.testing import CliRunner

import lsrl
from lsrl.cli import main
from lsrl.experiments import noise
from lsrl.programs import discrete_approximator

QUICK = noise.QUICK


def wrong_fraction(model, xs, expected, sigma, seed=2):
    out = noise.forced_outputs(model, xs, sigma, np.random.default_rng(seed))
    return np.mean(np.round(out[:, -QUICK.n :, 0]) != expected)


def test_without_noise_the_forced_run_is_the_model_run():
    model = lsrl.compile(discrete_approximator(3, ifelse="step"), backend="float")
    xs, expected = noise.discrete_inputs(QUICK)
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


def test_a_saturating_step_stays_saturated_under_weight_noise():
    """The paper's step carries mu x through its ReLUs; noise on the weights that subtract them
    moves a saturated step by about noise * mu x. The saturating form does not."""
    xs = np.array([[[400.0]], [[-400.0]]])

    def deviation(saturating):
        x = lsrl.Input(1)
        model = lsrl.compile(lsrl.ForEach(lsrl.f_step(x, 1000, saturating=saturating)), backend="float")
        np.testing.assert_array_equal(model(xs)[:, 0, 0], [1, 0])
        runs = [noise.forced_outputs(model, xs, 1e-5, np.random.default_rng(seed)) for seed in range(20)]
        return max(np.abs(run[:, 0, 0] - [1, 0]).max() for run in runs)

    assert deviation(saturating=False) > 0.5
    assert deviation(saturating=True) < 1e-4


@pytest.mark.parametrize("variant", lsrl.IFELSE_VARIANTS)
def test_robust_constructions_meet_the_goal_at_1e_5(variant):
    xs, expected = noise.discrete_inputs(QUICK)
    model = lsrl.compile(noise.build_program("discrete", "robust", variant, QUICK), backend="float")
    assert wrong_fraction(model, xs, expected, 1e-5) <= 0.01
    xs, expected = noise.continuous_inputs(QUICK)
    model = lsrl.compile(noise.build_program("continuous", "robust", variant, QUICK), backend="float")

    def error(sigma):
        out = noise.forced_outputs(model, xs, sigma, np.random.default_rng(3))
        return noise.sample_errors("continuous", out, expected, QUICK).mean()

    assert error(1e-5) <= 2 * error(0.0)


def test_the_paper_constants_do_not_meet_it():
    xs, expected = noise.discrete_inputs(QUICK)
    model = lsrl.compile(noise.build_program("discrete", "paper", "original", QUICK), backend="float")
    assert wrong_fraction(model, xs, expected, 0.0) == 0
    assert wrong_fraction(model, xs, expected, 1e-5) > 0.5


def row(program, source, variant, sigma, error, statistic="sample"):
    return noise.Row(program, source, variant, sigma, statistic, 0 if statistic == "sample" else "", error)


def test_survival_is_the_largest_sigma_up_to_which_the_goal_holds():
    paper, robust = noise.CONSTRUCTIONS["paper"], noise.CONSTRUCTIONS["robust"]
    rows = [
        *(row("discrete", paper, "step", s, e) for s, e in [(0.0, 0.0), (1e-9, 1.0), (1e-7, 0.0), (1e-5, 50.0)]),
        *(row("discrete", robust, "step", s, e) for s, e in [(0.0, 2.0), (1e-9, 0.0)]),
        *(row("continuous", paper, "step", s, e) for s, e in [(0.0, 0.1), (1e-9, 0.2), (1e-7, 0.21), (1e-5, 0.0)]),
        row("discrete", noise.PAPER_FIG4, "step", 1e-5, 99.0, "mean_at_least"),
        row("discrete", noise.PAPER_FIG4, "original", 0.0, 89.0, "mean"),
        row("discrete", noise.PAPER_FIG4, "optimized", 1e-9, 0.0, "mean"),
        row("discrete", noise.PAPER_FIG4, "optimized", 1e-7, 70.0, "mean"),
    ]
    assert noise.survival(rows) == {
        ("discrete", paper, "step"): "1e-07",  # 1 % is still within the goal; 50 % is not
        ("discrete", robust, "step"): "none",  # fails without noise: nothing after counts
        ("continuous", paper, "step"): "1e-09",  # 0.21 > 2 x 0.1
        ("discrete", noise.PAPER_FIG4, "step"): "< 1e-05",
        ("discrete", noise.PAPER_FIG4, "original"): "none",
        ("discrete", noise.PAPER_FIG4, "optimized"): "1e-09",
    }


@pytest.mark.slow
def test_cli_sweep_writes_csv_survival_table_and_plots(tmp_path):
    result = CliRunner().invoke(main, ["experiment", "noise", "-o", str(tmp_path), "--quick", "--workers", "2"])
    assert result.exit_code == 0, result.output
    with open(tmp_path / "noise.csv") as handle:
        written = list(csv.DictReader(handle))
    ours = [r for r in written if r["source"] != noise.PAPER_FIG4]
    variants, sigmas = len(lsrl.IFELSE_VARIANTS), len(noise.SIGMAS)
    assert len(ours) == 2 * 2 * variants * sigmas * QUICK.samples  # programs x constructions x ... x targets
    assert len(written) - len(ours) == len(noise.PAPER_DISCRETE_MEANS)
    clean_discrete = [float(r["error"]) for r in ours if r["program"] == "discrete" and float(r["sigma"]) == 0]
    assert clean_discrete == [0.0] * len(clean_discrete)

    # the survival table agrees with the CSV's means
    means = {}
    for r in ours:
        means.setdefault((r["program"], r["source"], r["variant"]), {}).setdefault(float(r["sigma"]), []).append(
            float(r["error"]))
    with open(tmp_path / "survival.csv") as handle:
        survival = {(r["program"], r["source"], r["variant"]): r["largest_sigma_survived"]
                    for r in csv.DictReader(handle)}
    for key, by_sigma in means.items():
        limit = 1.0 if key[0] == "discrete" else 2 * np.mean(by_sigma[0.0])
        expected = "none"
        for sigma in sorted(by_sigma):
            if np.mean(by_sigma[sigma]) > limit:
                break
            expected = f"{sigma:g}"
        assert survival[key] == expected
    assert all(survival["discrete", noise.CONSTRUCTIONS["robust"], v] == "0.001" for v in lsrl.IFELSE_VARIANTS)
    assert survival["discrete", noise.PAPER_FIG4, "optimized"] == "1e-09"

    assert "Largest σ survived" in result.output and "lsrl-robust" in result.output
    assert (tmp_path / "summary.md").read_text().strip() in result.output
    assert (tmp_path / "noise_continuous.png").stat().st_size > 0
    assert (tmp_path / "noise_discrete.png").stat().st_size > 0
