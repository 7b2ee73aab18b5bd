"""LLRNN and the CLI ranges: training that diverges stops with an error naming the step,
hyper-parameters and CLI options outside their ranges are refused before anything runs, and the models
check their constructor arguments and inputs, each with a one-line ``LsrlError`` naming the argument."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from lsrl.cli import main
from lsrl.errors import LsrlError, SequenceError
from lsrl.llrnn import (
    NTM, DihedralNTM, DihedralPolynomialStepNTM, HigherOrderRNN, MultiplePatternNTM, MultiplicativeRNN, PatternNTM,
    PolynomialStepNTM, SecondOrderRNN, llrnn_form,
)
from lsrl.llrnn.baselines import Baseline
from lsrl.llrnn.checks import LlrnnArgumentError
from lsrl.llrnn.experiment import MAX_RUNS, run_configs, run_experiment
from lsrl.llrnn.handbuilt import swap_solution
from lsrl.llrnn.reproduce import run_reproduction
from lsrl.llrnn.tasks import MultiplePattern
from lsrl.llrnn.train import MAX_STEPS, TrainConfig, Trainer, TrainingError, preset, train
from lsrl.workers import MAX_WORKERS, StudyError, check_workers
from fuzz_strategies import deadline


def _one_line_failure(args, *words, code=None):
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and (code is None or result.exit_code == code), result.output
    assert "Traceback" not in result.output, result.output
    if code != 2:  # click's usage errors print the usage too
        assert result.output.strip().count("\n") == 0 or "Error:" in result.output.strip().splitlines()[-1], \
            result.output
    for word in words:
        assert word in result.output, result.output
    return result.output


def _last_line(output):
    return [line for line in output.splitlines() if line.startswith("Error:")][-1]


# ---- the reported examples: training that diverges -------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["--lr", "inf"], ["--lr"]),
    (["--clip", "nan"], ["--clip"]),
    (["--erase", "matrix", "--erase-init", "nan"], ["--erase-init"]),
    (["--lr", "1e10"], ["step 2", "diverged", "loss is nan"]),
    (["--erase", "matrix", "--erase-init", "1e30"], ["step 1", "diverged", "loss"]),
])
def test_diverging_training_from_the_cli_stops_with_an_error(tmp_path, args, words):
    """Each printed an error rate and exited 0 with every parameter NaN."""
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["llrnn", "train", "--preset", "smoke", *args, "-o", str(out)])
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert "symbol error" not in result.output and "wrote" not in result.output, result.output
    for word in words:
        assert word in result.output, result.output
    assert not (out / "evaluation.json").exists()


def test_a_diverging_learning_rate_names_the_step_and_what_went_wrong(tmp_path):
    with pytest.raises(TrainingError, match=r"^step 2: training diverged: the loss is nan .*--max-skipped-steps"):
        train(preset("smoke", "ntm", "copy", learning_rate=1e10), tmp_path, progress=False)
    assert not (tmp_path / "evaluation.json").exists()


def test_a_learning_rate_that_makes_parameters_infinite_is_caught_after_the_step():
    """A finite learning rate and a finite gradient whose product overflows float32."""
    trainer = Trainer(preset("smoke", "ntm", "copy", learning_rate=1e38))
    with pytest.raises(TrainingError, match=r"^step 1: training diverged: the optimiser step .* made the parameters "):
        trainer.run(progress=False)
    trainer = Trainer(preset("smoke", "ntm", "copy", learning_rate=1e38, optimizer="adam"))  # lr / (1 - beta1)
    with pytest.raises(TrainingError, match=r"^step 1: training diverged: the optimiser's step size overflows"):
        trainer.run(progress=False)


def test_initial_parameters_that_are_not_finite_are_refused():
    model = NTM(13, 8, 6, dtype=torch.float32)
    with torch.no_grad():
        model.W_a[0, 0] = float("nan")
    with pytest.raises(TrainingError, match="initial parameters are not finite.*W_a"):
        Trainer(preset("smoke", "ntm", "copy"), model=model)


def test_skipping_overflowing_batches_is_bounded(tmp_path):
    """``max_skipped_steps``: that many batches with a non-finite loss are skipped, the next one stops."""
    config = preset("smoke", "ntm", "copy", erase="matrix", erase_init=1e30, max_skipped_steps=2, steps=5)
    trainer = Trainer(config)
    with pytest.raises(TrainingError, match=r"^step 3: .*max-skipped-steps: 2 now"):
        trainer.run(progress=False)
    assert trainer.skipped_steps == 3 and trainer.step == 2


def test_a_checkpoint_with_parameters_that_are_not_finite_is_refused(tmp_path):
    trainer = Trainer(preset("smoke", "ntm", "copy", steps=0))
    with torch.no_grad():
        next(trainer.net.parameters()).fill_(float("inf"))
    trainer.save(tmp_path)
    with pytest.raises(TrainingError, match="checkpoint's parameters are not finite"):
        Trainer.resume(tmp_path)


@pytest.mark.slow
def test_a_valid_run_is_unchanged_by_the_checks(tmp_path):
    evaluation = train(preset("smoke", "ntm", "copy"), tmp_path, progress=False)
    history = (tmp_path / "history.csv").read_text().splitlines()
    assert evaluation["steps"] == 5 and len(history) == 6 and json.loads((tmp_path / "evaluation.json").read_text())
    assert all(math.isfinite(float(line.split(",")[1])) for line in history[1:])


# ---- the class: hyper-parameters refused before training ------------------------------------------


BAD_SETTINGS = [
    ("learning_rate", [float("inf"), float("nan"), 0.0, -1e-3, "0.1", True, None]),
    ("clip", [float("nan"), float("inf"), -1.0, "1"]),
    ("rmsprop_decay", [1.0, 1.5, -0.1, float("nan")]),
    ("error_threshold", [float("nan"), float("inf"), "0.1"]),
    ("erase_init", [float("nan"), float("inf"), -1.0]),
    ("pattern_write_init", [float("nan"), -0.5]),
    ("steps", [-5, MAX_STEPS + 1, 2.5, True]),
    ("min_length", [0, -1, 1.5]),
    ("max_length", [0, 10**9]),
    ("start_length", [-1]),
    ("window", [0, -3]),
    ("steps_per_epoch", [0]),
    ("batch_size", [0, -1, 10**9, 4.0]),
    ("controller_dim", [0, 10**6]),
    ("readout_dim", [-1]),
    ("slots", [-1, 10**9]),
    ("memory_width", [-1]),
    ("symbol_dim", [0]),
    ("pattern_slots", [-2]),
    ("max_power", [-1, 1000]),
    ("aux_dim", [-1]),
    ("generalisation_factor", [0]),
    ("test_batch_size", [0]),
    ("seed", [2**64, -(2**63) - 1, 0.5]),
    ("max_skipped_steps", [-1]),
    ("pattern_powers", [(), "012", (0.5,)]),
    ("shifts", [(), (1.5,)]),
    ("test_lengths", [(0,), (-3,), ("a",), (10**9,)]),
    ("optimizer", ["sgd"]),
    ("dtype", ["int32", "float"]),
    ("device", ["tpu", "cuda:x", ""]),
    ("compile", ["yes"]),
]


@pytest.mark.parametrize("field, value", [(field, value) for field, values in BAD_SETTINGS for value in values])
def test_settings_outside_their_range_are_refused(field, value):
    with pytest.raises(TrainingError) as caught:
        TrainConfig(**{field: value})
    message = str(caught.value)
    assert "\n" not in message and (field in message or field.replace("_", " ") in message), message


def test_lengths_in_the_wrong_order_and_a_huge_default_test_length_are_refused():
    with pytest.raises(TrainingError, match="min_length <= start_length <= max_length"):
        TrainConfig(min_length=5, max_length=3)
    with pytest.raises(TrainingError, match="generalisation_factor × max_length"):
        TrainConfig(max_length=9000, generalisation_factor=2)


def test_settings_assigned_after_construction_are_checked_by_the_trainer():
    config = preset("smoke", "ntm", "copy")
    config.learning_rate = float("nan")
    with pytest.raises(TrainingError, match="learning_rate"):
        Trainer(config)


# ---- the reported examples and the class: CLI ranges ------------------------------------------------


def test_noise_workers_have_an_upper_limit(tmp_path):
    """``--workers 100000`` forked thousands of processes."""
    out = _one_line_failure(["experiment", "noise", "--workers", "100000", "-o", str(tmp_path / "n")], "--workers",
                            code=2)
    assert f"1<=x<={MAX_WORKERS}" in out
    assert not (tmp_path / "n").exists()


@pytest.mark.parametrize("args, word", [
    (["--workers", "0"], "--workers"),
    (["--steps", "-5"], "--steps"),
    (["--seeds", "0"], "--seeds"),
    (["--workers", "100000"], "--workers"),
    (["--seeds", str(MAX_RUNS + 1)], "--seeds"),
    (["--steps", str(MAX_STEPS + 1)], "--steps"),
    (["--lr", "nan"], "--lr"),
    (["--lr", "inf"], "--lr"),
    (["--device", "tpu"], "--device"),
])
def test_reproduce_options_have_ranges(tmp_path, args, word):
    """``llrnn reproduce`` accepted ``--workers 0``, ``--steps -5``, ``--seeds 0``."""
    _one_line_failure(["llrnn", "reproduce", "--preset", "smoke", *args, "-o", str(tmp_path / "r")], word, code=2)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command, args, word", [
    ("train", ["--steps", "-1"], "--steps"),
    ("train", ["--steps", str(MAX_STEPS + 1)], "--steps"),
    ("train", ["--lr", "nan"], "--lr"),
    ("train", ["--lr", "-1"], "--lr"),
    ("train", ["--clip", "-1"], "--clip"),
    ("train", ["--clip", "inf"], "--clip"),
    ("train", ["--error-threshold", "nan"], "--error-threshold"),
    ("train", ["--error-threshold", "5"], "--error-threshold"),
    ("train", ["--erase-init", "-1"], "--erase-init"),
    ("train", ["--erase-init", "inf"], "--erase-init"),
    ("train", ["--seed", str(2**64)], "--seed"),
    ("train", ["--test-lengths", "0"], "--test-lengths"),
    ("train", ["--test-lengths", "5,1000000"], "--test-lengths"),
    ("train", ["--max-length", "1000000"], "--max-length"),
    ("train", ["--controller-dim", "100000"], "--controller-dim"),
    ("train", ["--batch-size", "10000000"], "--batch-size"),
    ("train", ["--threads", "100000"], "--threads"),
    ("train", ["--threads", "0"], "--threads"),
    ("train", ["--checkpoint-every", "0"], "--checkpoint-every"),
    ("train", ["--max-skipped-steps", "-1"], "--max-skipped-steps"),
    ("train", ["--slots", "-1"], "--slots"),
    ("experiment", ["--workers", "100000"], "--workers"),
    ("experiment", ["--seeds", "0"], "--seeds"),
    ("experiment", ["--lr", "inf"], "--lr"),
    ("sample", ["copy", "--length", "1000000"], "--length"),
    ("sample", ["copy", "--count", "10000000"], "--count"),
    ("sample", ["copy", "--seed", "-99999999999999999999"], "--seed"),
])
def test_llrnn_options_have_ranges(tmp_path, command, args, word):
    _one_line_failure(["llrnn", command, *args, "-o", str(tmp_path / "o")] if command != "sample"
                      else ["llrnn", command, *args], word, code=2)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_clip_0_means_no_clipping_on_the_command_line_too(tmp_path):
    result = CliRunner().invoke(main, ["llrnn", "train", "--preset", "smoke", "--clip", "0", "--steps", "1",
                                       "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert Trainer.resume(tmp_path).config.clip == 0.0


def test_a_config_refused_as_a_whole_is_one_line(tmp_path):
    out = _one_line_failure(["llrnn", "train", "--min-length", "5", "--max-length", "3", "-o", str(tmp_path / "o")],
                            "min_length")
    assert _last_line(out).startswith("Error: lengths must satisfy")


# ---- the class: the Python APIs behind the CLI ---------------------------------------------------


@pytest.mark.parametrize("workers", [0, -1, MAX_WORKERS + 1, 100_000, 2.5, True, "2", None])
def test_check_workers_refuses(workers):
    with pytest.raises(StudyError, match=f"workers must be an integer in 1 .. {MAX_WORKERS}"):
        check_workers("test", workers)


def test_max_workers_is_between_1_and_64():
    assert 1 <= MAX_WORKERS <= 64 and check_workers("test", 1) == 1 and check_workers("test", MAX_WORKERS)


@pytest.mark.parametrize("workers", [0, 100_000, 1.5])
def test_noise_run_checks_its_workers_before_writing(tmp_path, workers):
    from lsrl.experiments import noise

    with pytest.raises(StudyError, match="noise.run: workers"):
        noise.run(tmp_path / "n", protocol=noise.QUICK, workers=workers, progress=False)
    assert not (tmp_path / "n").exists()


@pytest.mark.parametrize("keyword, value, match", [
    ("sigmas", (), "sigmas"), ("sigmas", (float("nan"),), "sigmas"), ("sigmas", (-1e-3,), "sigmas"),
    ("sigmas", (float("inf"),), "sigmas"), ("variants", ("nope",), "variants"), ("variants", (), "variants"),
])
def test_noise_run_checks_its_levels_and_variants(tmp_path, keyword, value, match):
    from lsrl.experiments import noise

    with pytest.raises(StudyError, match=match):
        noise.run(tmp_path / "n", protocol=noise.QUICK, progress=False, **{keyword: value})


@pytest.mark.parametrize("keyword, value, match", [
    ("workers", 0, "workers"), ("workers", 100_000, "workers"), ("seeds", range(0), "seeds"),
    ("seeds", [], "seeds"), ("seeds", [0.5], "seeds"), ("seeds", range(10**9), "runs"), ("models", (), "models"),
    ("models", ("nope",), "unknown models"), ("tasks", ("nope",), "unknown tasks"), ("tasks", "copy", "tasks"),
    ("steps", -5, "steps"), ("learning_rate", float("inf"), "learning_rate"), ("stepz", 5, "unknown setting"),
])
def test_run_reproduction_checks_its_grid_before_writing(tmp_path, keyword, value, match):
    with pytest.raises(LsrlError, match=match):
        run_reproduction(tmp_path / "r", "smoke", progress=False,
                         **{"models": ("ntm",), "tasks": ("tf_copy",), "seeds": (0,), "workers": 1, keyword: value})
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("keyword, value, match", [
    ("workers", 0, "workers"), ("seeds", (), "seeds"), ("models", ["ntm", 3], "models"), ("base", {}, "base"),
])
def test_run_experiment_checks_its_grid(tmp_path, keyword, value, match):
    arguments = {"base": TrainConfig(steps=0), "models": ("ntm",), "tasks": ("copy",), "seeds": (0,), "workers": 1,
                 keyword: value}
    with pytest.raises(LsrlError, match=match):
        run_experiment(tmp_path, progress=False, **arguments)


def test_run_configs_checks_workers_and_configs(tmp_path):
    with pytest.raises(StudyError):
        run_configs([TrainConfig(steps=0)], tmp_path, workers=10**6)
    with pytest.raises(TrainingError, match="TrainConfig objects"):
        run_configs([{"steps": 0}], tmp_path, workers=1)


# ---- the reported examples: the models' Python API -------------------------------------------------


def test_ntm_with_no_slots():
    """``NTM(10, 8, 0)`` was a raw ZeroDivisionError."""
    with pytest.raises(LlrnnArgumentError, match=r"^NTM: slots must be an integer in 1 \.\. 100000, got 0$"):
        NTM(10, 8, 0)


def test_empty_powers():
    with pytest.raises(LlrnnArgumentError, match="NTM: powers must hold at least one integer"):
        NTM(10, 8, 5, powers=())
    with pytest.raises(LlrnnArgumentError, match="PatternNTM: pattern_powers must hold at least one"):
        PatternNTM(10, 8, 5, 3, pattern_powers=[])


@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 0, 4)])
def test_empty_batch_or_length(shape):
    with pytest.raises(SequenceError, match="the batch B and the length T must be at least 1"):
        NTM(4, 8, 5)(torch.zeros(shape, dtype=torch.float64))


def test_float32_and_numpy_inputs_are_refused_with_the_conversion():
    model = NTM(4, 8, 5)
    with pytest.raises(SequenceError, match=r"dtype torch.float32, the model computes in torch.float64; .*xs.to"):
        model(torch.zeros(2, 3, 4))
    with pytest.raises(SequenceError, match=r"must be a torch.Tensor .* got a ndarray; .*torch.as_tensor"):
        model(np.zeros((2, 3, 4)))


def test_nan_input_is_refused():
    xs = torch.zeros(2, 3, 4, dtype=torch.float64)
    xs[1, 2, 0] = float("nan")
    with pytest.raises(SequenceError, match="not finite .* at batch 1, step 2"):
        NTM(4, 8, 5)(xs)


# ---- the class: every model, constructor and forward --------------------------------------------


MODELS = {
    "NTM": lambda **k: NTM(3, 4, 5, **k),
    "DihedralNTM": lambda **k: DihedralNTM(3, 4, 5, **k),
    "PatternNTM": lambda **k: PatternNTM(3, 4, 5, 2, **k),
    "MultiplePatternNTM": lambda **k: MultiplePatternNTM(3, 4, 2, slots=(6, 2, 2, 2), **k),
    "PolynomialStepNTM": lambda **k: PolynomialStepNTM(3, 4, 5, 2, **k),
    "DihedralPolynomialStepNTM": lambda **k: DihedralPolynomialStepNTM(3, 4, 5, 2, **k),
    "SecondOrderRNN": lambda **k: SecondOrderRNN(3, 4, **k),
    "MultiplicativeRNN": lambda **k: MultiplicativeRNN(3, 4, 2, **k),
    "HigherOrderRNN": lambda **k: HigherOrderRNN(3, 4, 2, **k),
}


def _forwards():
    for name, build in MODELS.items():
        yield name, build()
    yield "LSTM", Baseline("lstm", 3, 4)
    yield "GRU", Baseline("gru", 3, 4)
    yield "LLRNN form", llrnn_form(NTM(3, 4, 5))


FORWARDS = dict(_forwards())
BAD_INPUTS = {
    "numpy": (np.zeros((2, 3, 3)), "torch.Tensor"),
    "list": ([[[0.0] * 3] * 3] * 2, "torch.Tensor"),
    "float32": (torch.zeros(2, 3, 3, dtype=torch.float32), "dtype"),
    "int64": (torch.zeros(2, 3, 3, dtype=torch.int64), "dtype"),
    "B = 0": (torch.zeros(0, 3, 3, dtype=torch.float64), "at least 1"),
    "T = 0": (torch.zeros(2, 0, 3, dtype=torch.float64), "at least 1"),
    "2-D": (torch.zeros(3, 3, dtype=torch.float64), "(B, T, 3)"),
    "wrong width": (torch.zeros(2, 3, 4, dtype=torch.float64), "(B, T, 3)"),
    "NaN": (torch.full((2, 3, 3), float("nan"), dtype=torch.float64), "not finite"),
    "inf": (torch.full((2, 3, 3), float("inf"), dtype=torch.float64), "not finite"),
}


@pytest.mark.parametrize("model_name", sorted(FORWARDS))
@pytest.mark.parametrize("input_name", sorted(BAD_INPUTS))
def test_every_model_refuses_bad_inputs_in_one_line(model_name, input_name):
    xs, words = BAD_INPUTS[input_name]
    with pytest.raises(LsrlError) as caught:
        FORWARDS[model_name](xs)
    assert "\n" not in str(caught.value) and words in str(caught.value), str(caught.value)


@pytest.mark.parametrize("model_name", sorted(FORWARDS))
def test_every_model_runs_a_good_input(model_name):
    states = FORWARDS[model_name](torch.zeros(2, 3, 3, dtype=torch.float64))
    assert states.shape[:2] == (2, 3) and torch.isfinite(states).all()


BAD_ARGUMENTS = [
    (lambda v: NTM(v, 4, 5), "input_dim"),
    (lambda v: NTM(3, v, 5), "controller_dim"),
    (lambda v: NTM(3, 4, v), "slots"),
    (lambda v: NTM(3, 4, 5, memory_width=v), "memory_width"),
    (lambda v: DihedralNTM(3, 4, v), "slots"),
    (lambda v: PatternNTM(3, 4, v, 2), "slots"),
    (lambda v: PatternNTM(3, 4, 5, v), "symbol_dim"),
    (lambda v: PatternNTM(3, 4, 5, 2, pattern_slots=v), "pattern_slots"),
    (lambda v: MultiplePatternNTM(3, 4, v), "symbol_dim"),
    (lambda v: MultiplePatternNTM(3, 4, 2, slots=(6, v, 2, 2)), "slots"),
    (lambda v: PolynomialStepNTM(3, 4, v, 2), "slots"),
    (lambda v: DihedralPolynomialStepNTM(3, 4, 5, v), "symbol_dim"),
    (lambda v: SecondOrderRNN(3, v), "hidden_dim"),
    (lambda v: MultiplicativeRNN(3, 4, v), "aux_dim"),
    (lambda v: HigherOrderRNN(v, 4, 2), "input_dim"),
    (lambda v: Baseline("lstm", 3, v), "hidden_dim"),
]


@pytest.mark.parametrize("build, argument", BAD_ARGUMENTS)
@pytest.mark.parametrize("value", [0, -1, 2.5, True, "3", None])
def test_sizes_must_be_positive_integers(build, argument, value):
    if value is None and argument in ("memory_width", "pattern_slots"):
        return  # None is their default
    with pytest.raises(LlrnnArgumentError) as caught:
        build(value)
    assert argument in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


@pytest.mark.parametrize("build, match", [
    (lambda: NTM(3, 4, 5, powers=[0.5]), "powers must hold integers"),
    (lambda: NTM(3, 4, 5, powers="01"), "powers must be a sequence"),
    (lambda: PatternNTM(3, 4, 5, 2, head_powers=()), "head_powers"),
    (lambda: DihedralNTM(3, 4, 5, words=()), "words must hold at least one"),
    (lambda: DihedralNTM(3, 4, 5, words=["0", "2"]), "binary words"),
    (lambda: DihedralNTM(3, 4, 5, words="01"), "words must be a sequence"),
    (lambda: MultiplePatternNTM(3, 4, 2, slots=(6, 2, 2)), "4 rings"),
    (lambda: MultiplePatternNTM(3, 4, 2, switch_words=()), "switch_words"),
    (lambda: MultiplePatternNTM(3, 4, 2, pattern_powers=()), "pattern_powers"),
    (lambda: PolynomialStepNTM(3, 4, 5, 2, polynomials=()), "polynomials"),
    (lambda: PolynomialStepNTM(3, 4, 5, 2, polynomials=[(0, "x")]), "polynomial"),
    (lambda: DihedralPolynomialStepNTM(3, 4, 5, 2, transforms=("twice",)), "word transform"),
    (lambda: DihedralPolynomialStepNTM(3, 4, 5, 2, pattern_words=()), "pattern_words"),
    (lambda: HigherOrderRNN(3, 4, -1), "max_power"),
    (lambda: HigherOrderRNN(3, 4, 10**6), "max_power"),  # numerals up to 10**6 exhausted memory
    (lambda: NTM(3, 4, 10**7), "slots"),
    (lambda: NTM(3, 4, 10**4), "gather indices"),  # every rotation of 10**4 slots: 10**8 indices
    (lambda: NTM(3, 4, 5, dtype=torch.int64), "dtype"),
    (lambda: NTM(3, 4, 5, dtype="float64"), "dtype"),
    (lambda: NTM(3, 4, 5, erase_matrix=True), "unknown option"),
    (lambda: Baseline("rnn", 3, 4), "kind"),
])
def test_lists_words_and_options_are_checked(build, match):
    with pytest.raises(LsrlError, match=match):
        build()


@pytest.mark.parametrize("keyword, value", [("max_length", 0), ("sharpness", float("nan")), ("margin", -1.0),
                                            ("sharpness", float("inf"))])
def test_swap_solution_checks_its_arguments(keyword, value):
    with pytest.raises(LlrnnArgumentError, match=keyword):
        swap_solution(MultiplePattern(), **{keyword: value})


def test_valid_models_are_unchanged():
    """The checks leave the construction alone: the same seed draws the same weights and outputs."""
    xs = torch.rand(2, 4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for name, build in MODELS.items():
        torch.manual_seed(0)
        first = build()(xs)
        torch.manual_seed(0)
        assert torch.equal(first, build()(xs)), name


def test_a_real_option_beyond_float64_is_refused_in_one_line():
    """Found by the deep fuzz profile: an int too large for a float raised a raw OverflowError."""
    from lsrl.llrnn.train import TrainConfig

    with pytest.raises(LsrlError, match="learning_rate must be finite") as error:
        TrainConfig(learning_rate=10**400)
    assert "\n" not in str(error.value)


def test_an_unhashable_word_transform_name_is_refused_in_one_line():
    from lsrl.llrnn.ring import word_transform

    with pytest.raises(LsrlError, match="unknown word transform slice") as error:
        word_transform(slice(1), "01")
    assert "\n" not in str(error.value)
    assert word_transform("repeat", "001") == "001001"


# ---- long binary words: share is a loop, and words are capped at what llrnn_form can build (MAX_TERM_WORD) ----


def test_share_builds_thousands_of_copies_without_recursion():
    from lsrl.llrnn.logic import Var
    from lsrl.llrnn.logic.library import share
    from lsrl.llrnn.logic.terms import Copy

    term, depth = share("v", 5000, lambda names: Var(names[-1])), 0
    while isinstance(term, Copy):  # walked by a loop: the term is 4,999 copies deep
        depth, term = depth + 1, term.body
    assert depth == 4999 and term == Var("v" + "'" * 5000)


def test_the_longest_binary_word_runs_through_llrnn_form_as_the_explicit_model():
    from lsrl.llrnn.logic.library import MAX_TERM_WORD

    word = ("011" * MAX_TERM_WORD)[:MAX_TERM_WORD]
    model = DihedralNTM(2, 3, 5, words=("0", word))
    xs = torch.randn(2, 3, 2, dtype=torch.float64)
    assert torch.allclose(llrnn_form(model)(xs), model(xs), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("length", [129, 1000, 10 ** 5])
def test_longer_words_are_refused_in_one_line(length):
    from lsrl.llrnn.logic import Atom, binary
    from lsrl.llrnn.logic.check import LogicError
    from lsrl.llrnn.logic.library import MAX_TERM_WORD

    assert length > MAX_TERM_WORD
    word = "01" * (length // 2) + "1" * (length % 2)
    for call, error in ((lambda: binary(word, Atom("A")), LogicError),
                        (lambda: DihedralNTM(2, 3, 5, words=("0", word)), LlrnnArgumentError),
                        (lambda: MultiplePatternNTM(2, 3, 2, switch_words=("0", word)), LlrnnArgumentError)):
        with pytest.raises(error, match=rf"at most {MAX_TERM_WORD} letters") as caught:
            call()
        assert "\n" not in str(caught.value)
    with pytest.raises(LogicError, match="binary: the word must be a string"):
        binary(7, Atom("A"))


# ---- llrnn_form: the sizes of its dense maps are estimated and refused before anything is allocated ----


def _dense_numbers(cell) -> int:
    """What the built form holds in dense maps: fixed rotations/reflections, erase spaces, the input map."""
    fixed = sum(d.fixed.matrix.numel() for d in cell.data if d.fixed is not None and hasattr(d.fixed, "matrix"))
    erase = sum(d.space.dim for d in cell.data if d.fixed is None and d.name.startswith("e"))
    return fixed + erase + (cell.input_space.dim if cell.input_space is not None and not cell.data else 0)


@pytest.mark.parametrize("make", [lambda: NTM(2, 3, 6), lambda: DihedralNTM(2, 3, 5),
                                  lambda: NTM(2, 3, 6, erase="location"), lambda: SecondOrderRNN(2, 4)])
def test_form_elements_counts_what_llrnn_form_builds(make):
    from lsrl.llrnn.forms import form_elements

    # an upper estimate (the contragredients R^∨, P^∨ are counted as dense, though built lazily), within 2x
    model = make()
    built = _dense_numbers(llrnn_form(model))
    assert built <= form_elements(model) <= 2 * built


@pytest.mark.parametrize("make, match", [(lambda: NTM(2, 3, 4097, powers=(0, 1)), "4,097 slots"),
                                         (lambda: DihedralNTM(2, 3, 4000), "64,0.* numbers")])
def test_forms_too_large_are_refused_before_allocating(make, match):
    model = make()  # the explicit model is accepted: it needs no dense N x N map
    with deadline(5), pytest.raises(LlrnnArgumentError, match=rf"^llrnn_form: .*{match}") as caught:
        llrnn_form(model)
    assert "\n" not in str(caught.value)


def test_space_caps_coordinates_as_the_explicit_models_count_parameters():
    from lsrl.errors import DimensionError
    from lsrl.llrnn.cell import Space
    from lsrl.llrnn.logic import Atom, endo

    assert Space(endo(Atom("A")), (7072, 7072), diagonal=True).dim == 7072  # 7,072 coordinates
    with pytest.raises(DimensionError, match="at most 50,000,000 coordinates"):
        Space(endo(Atom("A")), (7072, 7072))
