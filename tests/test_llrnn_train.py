import dataclasses
import json
import math

import pytest
import torch
from click.testing import CliRunner

from lsrl.grid import GridError
from lsrl.llrnn import experiment
from lsrl.llrnn import train as training
from lsrl.llrnn.cli import llrnn
from lsrl.llrnn.ring import ring_powers
from lsrl.llrnn.tasks import TASKS, Copy
from lsrl.llrnn.train import Score, TrainConfig, Trainer, TrainingError


class StandIn(torch.nn.Module):
    """The model interface on a ReLU RNN, with a soft "read address" r = softmax(A h0) to plot."""

    def __init__(self, input_dim, controller_dim=16, slots=4, dtype=torch.float64, device=None):
        super().__init__()
        self.input_dim, self.controller_dim, self.state_dim = input_dim, controller_dim, controller_dim + slots
        self.layout = {"h0": (0, (controller_dim,)), "r": (controller_dim, (slots,))}
        self.cell = torch.nn.Linear(controller_dim + input_dim, controller_dim, dtype=dtype, device=device)
        self.address = torch.nn.Linear(controller_dim, slots, dtype=dtype, device=device)

    def initial_state(self, batch):
        return torch.zeros(batch, self.state_dim, dtype=self.cell.weight.dtype, device=self.cell.weight.device)

    def step(self, h, x):
        h0 = torch.relu(self.cell(torch.cat([h[:, : self.controller_dim], x], -1)))
        return torch.cat([h0, torch.softmax(self.address(h0), -1)], -1)

    def forward(self, xs, h=None):
        h = self.initial_state(xs.shape[0]) if h is None else h
        states = []
        for t in range(xs.shape[1]):
            h = self.step(h, xs[:, t])
            states.append(h)
        return torch.stack(states, 1)

    def parts(self, h):
        return {name: h[..., offset: offset + math.prod(shape)].reshape(*h.shape[:-1], *shape)
                for name, (offset, shape) in self.layout.items()}


def stand_in(config, input_dim, slots, dtype, device):
    return StandIn(input_dim, config.controller_dim, slots=4, dtype=dtype, device=device)


@pytest.fixture
def with_stand_in(monkeypatch):
    monkeypatch.setitem(training.MODELS, "stand_in", stand_in)


TINY = dict(model="stand_in", task="copy", min_length=1, max_length=3, start_length=1, batch_size=8,
            controller_dim=16, readout_dim=16, learning_rate=3e-3, test_batch_size=8, window=5)


@pytest.mark.slow
def test_training_reduces_the_copy_loss(with_stand_in):
    trainer = Trainer(TrainConfig(**TINY, steps=150, optimizer="adam", error_threshold=-1.0))
    trainer.run(progress=False)
    losses = [row["loss"] for row in trainer.history]
    assert sum(losses[-20:]) / 20 < 0.8 * sum(losses[:20]) / 20


def test_curriculum_grows_when_the_running_error_is_low(with_stand_in):
    trainer = Trainer(TrainConfig(**TINY, steps=0, error_threshold=2.0))  # every window counts as learnt
    assert trainer.current_length == 1
    for _ in range(5):
        trainer._record(1.0, 0.5)
    assert trainer.current_length == 2 and not trainer.recent_errors
    for _ in range(50):
        trainer._record(1.0, 0.5)
    assert trainer.current_length == 3  # never beyond max_length


def test_resume_continues_exactly(with_stand_in, tmp_path):
    straight = Trainer(TrainConfig(**TINY, steps=12, error_threshold=0.9))
    straight.run(progress=False)
    first = Trainer(TrainConfig(**TINY, steps=7, error_threshold=0.9))
    first.run(progress=False)
    first.save(tmp_path)
    resumed = Trainer.resume(tmp_path, steps=12)
    assert resumed.step == 7
    resumed.run(progress=False)
    assert resumed.history == straight.history
    for (name, a), (_, b) in zip(straight.net.state_dict().items(), resumed.net.state_dict().items()):
        assert torch.equal(a, b), name


def test_same_seed_same_run_other_seed_other_run(with_stand_in):
    runs = [Trainer(TrainConfig(**TINY, steps=5, seed=seed)) for seed in (0, 0, 1)]
    for run in runs:
        run.run(progress=False)
    weights = [run.net.readout[0].weight for run in runs]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])


def test_score_counts_masked_symbols_and_sequences():
    batch = Copy().batch(2, 3, torch.Generator().manual_seed(0))
    logits = torch.nn.functional.one_hot(batch.targets, 20).double()
    assert Score.of(logits, batch) == Score(0, 6, 0, 2)
    logits[0, -1] = logits[0, -1].roll(1)  # one wrong output symbol in the first sequence
    logits[1, 0] = logits[1, 0].roll(1)  # a wrong prompt position is not counted
    score = Score.of(logits, batch)
    assert (score.symbol_error, score.sequence_error) == (1 / 6, 0.5)


@pytest.mark.slow
def test_train_writes_checkpoint_reports_and_plots(with_stand_in, tmp_path):
    evaluation = training.train(TrainConfig(**TINY, steps=4), tmp_path, progress=False, checkpoint_every=2)
    assert evaluation["steps"] == 4 and evaluation["test_length"] == 6
    assert json.loads((tmp_path / "evaluation.json").read_text())["parameters"] == evaluation["parameters"]
    for name in ("checkpoint.safetensors", "checkpoint.state.pt", "history.csv", "error_curve.png", "addresses.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert len((tmp_path / "history.csv").read_text().splitlines()) == 5


def test_unknown_names_and_missing_checkpoints_are_training_errors(tmp_path):
    with pytest.raises(TrainingError, match="unknown model 'nope'"):
        Trainer(TrainConfig(model="nope"))
    with pytest.raises(TrainingError, match="no checkpoint"):
        Trainer.resume(tmp_path)
    with pytest.raises(TrainingError, match="unknown learning rate schedule 'linear'"):
        Trainer(TrainConfig(schedule="linear"))


def test_the_cosine_schedule_sets_the_optimisers_rate_each_step(with_stand_in):
    trainer = Trainer(TrainConfig(**TINY, steps=4, schedule="cosine"))
    rates = []
    for _ in range(4):
        trainer.train_step()
        rates.append(trainer.optimizer.param_groups[0]["lr"])
    lr = TINY["learning_rate"]
    assert rates == pytest.approx([lr, lr * (2 + 2**0.5) / 4, lr / 2, lr * (2 - 2**0.5) / 4], rel=1e-12)
    constant = Trainer(TrainConfig(**TINY, steps=4))
    constant.train_step()
    assert constant.optimizer.param_groups[0]["lr"] == lr


@pytest.mark.slow
def test_cli_trains_resumes_and_reports_errors_in_one_line(tmp_path):
    runner = CliRunner()
    common = ["--model", "ntm", "--max-length", "2", "--batch-size", "4", "--controller-dim", "8",
              "-o", str(tmp_path / "run")]
    result = runner.invoke(llrnn, ["train", *common, "--steps", "3"])
    assert result.exit_code == 0, result.output
    assert "3 steps" in result.output and (tmp_path / "run" / "addresses.png").exists()
    result = runner.invoke(llrnn, ["train", *common, "--steps", "5", "--resume"])
    assert result.exit_code == 0 and "5 steps" in result.output, result.output
    for arguments in (["train", "--model", "nope", "-o", str(tmp_path / "x")],
                      ["train", "--resume", "-o", str(tmp_path / "empty")],
                      ["experiment", "--models", "nope", "-o", str(tmp_path / "y")]):
        result = runner.invoke(llrnn, arguments)
        assert result.exit_code != 0 and "Traceback" not in result.output, result.output
        assert result.output.count("\n") == 1 or "Usage" in result.output, result.output


@pytest.mark.parametrize("models, workers", [("stand_in", "1"), ("ntm", "2")])
@pytest.mark.slow
def test_cli_experiment_writes_csv_and_markdown(with_stand_in, tmp_path, models, workers):
    result = CliRunner().invoke(llrnn, ["experiment", "--models", models, "--tasks", "copy,repeat_copy",
                                        "--seeds", "2", "--steps", "2", "--max-length", "2", "--batch-size", "4",
                                        "--controller-dim", "8", "--workers", workers, "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "experiment.csv").read_text().splitlines()) == 1 + 4
    table = (tmp_path / "experiment.md").read_text().splitlines()
    assert len(table) == 2 + 2 and table[2].startswith(f"| {models} | copy |") and "/2 |" in table[2]


@pytest.mark.slow
def test_a_grid_reads_finished_runs_back_and_continues_runs_cut_short(with_stand_in, tmp_path, monkeypatch):
    """``run_configs`` picks up where a stopped grid was: a run cut short (a checkpoint at step 4 of
    10) continues to exactly the weights of an uninterrupted run, and a finished run is not trained
    again (its evaluation is read back)."""
    config = TrainConfig(**TINY, steps=10, error_threshold=0.9)
    straight = Trainer(config)
    straight.run(progress=False)
    cut_short = Trainer(dataclasses.replace(config, steps=4))
    cut_short.run(progress=False)
    cut_short.training_seconds = 1000.0  # as if the first part had taken that long
    cut_short.save(tmp_path / "stand_in-copy-0")
    (row,) = experiment.run_configs([config], tmp_path, workers=1, progress=False)
    assert 1000 <= row["wall_seconds"] < 1000 + 600  # both parts counted (the second takes milliseconds)
    resumed = Trainer.resume(tmp_path / "stand_in-copy-0")
    assert resumed.step == 10 and resumed.history == straight.history
    for (name, a), (_, b) in zip(straight.net.state_dict().items(), resumed.net.state_dict().items()):
        assert torch.equal(a, b), name

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(experiment, "train", no_training)
    assert experiment.run_configs([config], tmp_path, workers=1, progress=False) == [row]
    # another config in that folder is trained (the grid names the run and its error)
    with pytest.raises(GridError, match="AssertionError: a finished run was trained again"):
        experiment.run_configs([dataclasses.replace(config, learning_rate=1e-2)], tmp_path, workers=1,
                               progress=False)


def test_cli_sample_prints_examples():
    result = CliRunner().invoke(llrnn, ["sample", "multiple_pattern", "--length", "2", "--count", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2 and all(line.startswith("∘") and line.count("S") == 2 for line in lines)


REAL = dict(task="copy", max_length=2, start_length=2, batch_size=4, test_batch_size=4, controller_dim=8,
            readout_dim=8, symbol_dim=3)


@pytest.mark.parametrize("name, addresses", [("ntm", {"r", "w"}), ("pattern_ntm", {"r1", "w1", "r2", "w2"}),
                                             ("multiple_pattern_ntm", {f"{h}{i}" for h in "rw" for i in "1234"})])
def test_real_models_train_and_show_every_address(name, addresses):
    trainer = Trainer(TrainConfig(model=name, **REAL, steps=2))
    trainer.run(progress=False)
    tokens, traces = training.address_traces(trainer, 4)
    assert set(traces) == addresses and all(trace.shape[1] == len(tokens) == 10 for trace in traces.values())
    assert trainer.evaluate()["test_length"] == 4


@pytest.mark.parametrize("name", ["pattern_ntm", "multiple_pattern_ntm"])
def test_pattern_models_keep_reading_ring_one(name):
    # from empty pattern rings ring 1's read address would be the zero vector from step 1 on
    trainer = Trainer(TrainConfig(model=name, **REAL, steps=0))
    _, traces = training.address_traces(trainer, 4)
    mass = traces["r1"].sum(0)
    assert bool((mass > 0.99).all() and (mass < 1.5).all()), mass


def test_the_paper_erase_matrix_starts_switched_off():
    trainer = Trainer(TrainConfig(model="ntm", **{**REAL, "controller_dim": 32}, erase="matrix", steps=0))
    erase = [p for name, p in trainer.net.model.named_parameters() if name in ("W_e", "B_e")]
    assert len(erase) == 2 and all(not p.requires_grad and not p.any() for p in erase)
    batch = trainer.task.batch(2, 40).to(dtype=trainer.dtype)
    assert torch.isfinite(trainer.net(batch.inputs)).all()


@pytest.mark.parametrize("name", sorted(training.MODELS))
@pytest.mark.slow
def test_every_untrained_model_runs_1000_steps_without_overflow(name):
    """Default initialisation and options, float32 (memory 32 × 8, controller 24, pattern rings 8);
    the ReLU RNNs, cheap to run, over 25 initialisations (drawn as the others, 13 and 23 of them
    made the higher-order RNN overflow)."""
    config = TrainConfig(model=name, controller_dim=24, memory_width=8, symbol_dim=8, pattern_slots=8)
    inputs = torch.nn.functional.one_hot(torch.randint(10, (1, 1000), generator=torch.Generator().manual_seed(0)))
    for seed in range(25) if name in ("second_order", "multiplicative", "higher_order") else (0,):
        torch.manual_seed(seed)
        model = training.MODELS[name](config, 10, 32, dtype=torch.float32, device="cpu")
        with torch.no_grad():
            states = model(inputs.float())
        assert torch.isfinite(states).all() and states.abs().max() < 1e3, (seed, states.abs().max())


@pytest.mark.parametrize("name", ["ntm", "pattern_ntm", "multiple_pattern_ntm", "graves_ntm"])
@pytest.mark.slow
def test_tfs_tanh_controller_keeps_grown_weights_from_overflowing(name):
    """Weights three times their initial scale, as training grows them: with the paper's ReLU controller
    the controller, its ReLU writes and the memory it reads back feed each other (in training on TF's
    variable pattern 1 they turned NaN); TF's tanh bounds the controller and so every write."""
    inputs = torch.nn.functional.one_hot(torch.randint(10, (1, 300), generator=torch.Generator().manual_seed(0)))
    largest = {}
    for controller in ("relu", "tanh"):
        config = TrainConfig(model=name, controller_dim=24, memory_width=8, symbol_dim=8, pattern_slots=8,
                             controller=controller, sharpen=True, gate=True)
        largest[controller] = []
        for seed in range(3):
            torch.manual_seed(seed)
            model = training.MODELS[name](config, 10, 32, dtype=torch.float32, device="cpu")
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.mul_(3)
                largest[controller].append(model(inputs.float()).abs().max().item())
    assert all(value < 100 for value in largest["tanh"]), largest
    assert not all(value < 1e6 for value in largest["relu"]), largest  # nan compares False: counted as overflow


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(training.MODELS))
def test_every_model_trains_from_python(name):
    """A few steps on one fixed batch of a TF task: the loss is finite and goes down."""
    trainer = Trainer(training.preset("smoke", name, "tf_copy", optimizer="adam", learning_rate=3e-2))
    batch = trainer.task.batch(8, 4, torch.Generator().manual_seed(0))
    losses = []
    for _ in range(12):
        loss = training.masked_loss(trainer.net(batch.inputs), batch)
        trainer.optimizer.zero_grad()
        loss.backward()
        trainer.optimizer.step()
        losses.append(loss.item())
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < 0.95 * losses[0], losses


@pytest.mark.parametrize("name", ["lstm", "multiple_pattern_ntm", "higher_order"])
@pytest.mark.slow
def test_cli_trains_any_model_with_a_preset(name, tmp_path):
    result = CliRunner().invoke(llrnn, ["train", "--preset", "smoke", "--model", name, "--task", "tf_pattern1",
                                        "--steps", "3", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    evaluation = json.loads((tmp_path / "evaluation.json").read_text())
    assert evaluation["steps"] == 3 and set(evaluation["test_errors"]) == {"6"}
    assert evaluation["parameters"] == Trainer.resume(tmp_path).parameter_count


@pytest.mark.slow
@pytest.mark.parametrize("controller", ["relu", "tanh"])
def test_cli_sets_the_controller_activation_over_a_preset(controller, tmp_path):
    result = CliRunner().invoke(llrnn, ["train", "--preset", "tf-cpu", "--model", "ntm", "--task", "tf_copy",
                                        "--controller", controller, "--steps", "0", "--controller-dim", "8",
                                        "--slots", "8", "--max-length", "6", "--test-lengths", "7",
                                        "--no-compile", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert Trainer.resume(tmp_path).net.model.stabilisers.controller == controller


@pytest.mark.slow
def test_baselines_match_the_ntms_parameter_count():
    ntm, lstm, gru = (Trainer(training.preset("tf", name, "tf_copy", steps=0)).parameter_count
                      for name in ("ntm", "lstm", "gru"))
    assert abs(lstm - ntm) / ntm < 0.01 and abs(gru - ntm) / ntm < 0.01, (ntm, lstm, gru)


@pytest.mark.slow
def test_tf_preset_and_curriculum():
    config = training.preset("tf", "pattern_ntm", "tf_variable_pattern1")
    assert (config.controller_dim, config.slots, config.memory_width, config.batch_size) == (100, 128, 20, 250)
    assert (config.min_length, config.max_length, config.test_lengths) == (8, 28, (33, 58, 98))
    assert config.controller == training.preset("tf-cpu", "ntm", "tf_copy").controller == "tanh"  # TF's h' = tanh(...)
    assert Trainer(training.preset("tf-cpu", "ntm", "tf_copy", steps=0)).net.model.stabilisers.controller == "tanh"
    trainer = Trainer(training.preset("tf", "ntm", "tf_copy"))  # 8000 steps: not run here
    # TF: 200 epochs, N 30, min ℓ 7 -> band 4; max ℓ reaches 30 at epoch 92 (contents: 5 .. 28)
    lengths = [trainer.scheduled_length(epoch * 40) for epoch in range(200)]
    assert lengths[0] == 5 and lengths[4] == 6 and lengths[91] == 27 and lengths[92] == 28 and lengths[199] == 28
    assert trainer.scheduled_length(7999) == 28 and lengths == sorted(lengths)


def test_tf_cpu_preset_slows_the_pattern_ring_ntms_on_pattern_tasks_only():
    rate = lambda model, task, **overrides: training.preset("tf-cpu", model, task, **overrides).learning_rate
    assert rate("pattern_ntm", "tf_pattern1") == rate("multiple_pattern_ntm", "tf_variable_pattern1") == 3e-4
    assert rate("pattern_ntm", "tf_copy") == rate("ntm", "tf_pattern1") == rate("lstm", "tf_multiple_pattern4") == 1e-3
    assert rate("pattern_ntm", "tf_pattern1", learning_rate=5e-3) == 5e-3  # an explicit setting wins
    assert training.preset("tf", "pattern_ntm", "tf_pattern1").learning_rate == 1e-4


def test_tf_cpu_preset_decays_the_rate_and_tf_keeps_the_authors_constant_rate():
    assert training.preset("tf-cpu", "ntm", "tf_pattern4").schedule == "cosine"
    assert training.preset("tf", "ntm", "tf_pattern4").schedule == "constant"
    assert training.preset("tf-cpu", "ntm", "tf_pattern4", schedule="constant").schedule == "constant"


def test_a_given_model_is_trained_as_it_is():
    from lsrl.llrnn.explicit import NTM

    model = NTM(13, 8, 6, dtype=torch.float32)
    erase = model.W_e.detach().clone()
    trainer = Trainer(TrainConfig(**REAL, steps=0), model=model)
    assert torch.equal(trainer.net.model.W_e, erase) and trainer.net.model.W_e.requires_grad


def test_shifts_are_powers_modulo_each_ring():
    assert ring_powers(5, (0, 1)) == (0, 1)
    assert ring_powers(5, (-1, 0, 1)) == (4, 0, 1)
    assert ring_powers(5, None) == (0, 1, 2, 3, 4)
    model = training.Trainer(TrainConfig(model="multiple_pattern_ntm", task="copy", shifts=(-1, 0, 1), slots=6)).net.model
    assert [ring.write_moves.shape[0] for ring in model.rings] == [3, 2, 2, 2]  # ±1 coincide on a 2-ring


def test_an_overflowing_batch_does_not_update_the_weights(with_stand_in):
    """Finite weights whose logits overflow float32: the batch is skipped when skipping is allowed
    (by default training stops there, tests/test_validation_llrnn.py)."""
    trainer = Trainer(TrainConfig(**TINY, steps=1, max_skipped_steps=1))
    with torch.no_grad():
        trainer.net.readout[0].bias.fill_(1e3)  # y = ReLU(W_y h0 + B_y) >= 1e3 - |W_y h0|
        trainer.net.readout[2].weight.fill_(1e38)  # logits ~ 16 × 1e41: inf in float32
    before = [p.clone() for p in trainer.net.parameters()]
    trainer.run(progress=False)
    assert not math.isfinite(trainer.history[0]["loss"]) and trainer.skipped_steps == 1
    assert trainer.step == 1 and all(torch.equal(a, b) for a, b in zip(before, trainer.net.parameters()))


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_task_trains(task):
    """One step of the pattern NTM on every task, at lengths the task allows, and its evaluation."""
    length = max(4, TASKS[task].min_length + 1)
    trainer = Trainer(training.preset("smoke", "pattern_ntm", task, steps=1, max_length=length,
                                      test_lengths=(length + 1,)))
    trainer.run(progress=False)
    evaluation = trainer.evaluate()
    assert math.isfinite(trainer.history[0]["loss"]) and 0 <= evaluation["test_errors"][str(length + 1)] <= 1
