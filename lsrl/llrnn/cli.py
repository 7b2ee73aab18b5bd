"""``lsrl llrnn``: show the tasks, train one model, run the experiment grid.

Errors a user can cause are printed as one line (``Error: ...``), bugs with their traceback
(``lsrl.cli_errors``). ``lsrl llrnn`` reaches these commands through ``lsrl.cli.LLRNN``, which lists
them without importing this module (and torch).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from lsrl.cli_errors import ReportingGroup
from lsrl.llrnn.settings import (
    CONTROLLER_NAMES, CURRICULA, ERASES, EXPERIMENT_DEFAULTS, EXPERIMENT_MODELS, EXPERIMENT_TASKS, MAX_BATCH,
    MAX_LENGTH, MAX_RUNS, MAX_SLOTS, MAX_STEPS, MAX_WIDTH, MODEL_NAMES, PRESETS, REPRODUCTION_MODELS,
    REPRODUCTION_TASKS, SCHEDULES, SEED_RANGE, TASK_NAMES, TrainConfig,
)
from lsrl.grid import grid_options
from lsrl.workers import MAX_WORKERS

Command = TypeVar("Command", bound=Callable[..., Any])  # a command function, or a click command


class FiniteFloat(click.FloatRange):
    """``click.FloatRange`` that also refuses NaN and the infinities (which compare outside no range)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number != number or number in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


SEEDS = click.IntRange(*SEED_RANGE)  # what torch.manual_seed accepts


def _names(text: str, known: Collection[str], option: str) -> tuple[str, ...]:
    """The comma-separated names of ``option`` (``--models``, ``--tasks``), each one of ``known``."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise click.UsageError(f"{option}: unknown name(s) {', '.join(unknown) or '(none)'}; known: "
                               f"{', '.join(known)}")
    return names


def _shown_shifts(shifts: tuple[int, ...] | None) -> str:
    """The text of ``--shifts`` that ``_shifts`` reads as ``shifts``."""
    return "all" if shifts is None else ",".join(map(str, shifts))


def _shifts(context: click.Context, parameter: click.Parameter, text: str) -> tuple[int, ...] | None:
    """``--shifts 0,1`` -> (0, 1); ``all`` -> None (any rotation)."""
    if text == "all":
        return None
    try:
        return tuple(int(shift) for shift in text.split(","))
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers or 'all', got {text!r}") from None


def _device(context: click.Context, parameter: click.Parameter, text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``."""
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index or kind == "cuda" and (not index or index.isdigit()):
        return text
    raise click.BadParameter(f"expected cpu, cuda or cuda:N, got {text!r}")


def _lengths(context: click.Context, parameter: click.Parameter, text: str) -> tuple[int, ...]:
    """``--test-lengths 33,58,98`` -> (33, 58, 98); empty -> () (twice the longest training length)."""
    try:
        lengths = tuple(int(length) for length in text.split(",") if length.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None
    outside = [length for length in lengths if not 1 <= length <= MAX_LENGTH]
    if outside:
        raise click.BadParameter(f"lengths must be in 1 .. {MAX_LENGTH}, got {outside[0]}")
    return lengths


def training_options(defaults: TrainConfig) -> Callable[[Command], Command]:
    """Options for the TrainConfig fields shared by ``train`` and ``experiment``, with ``defaults``."""
    options = [
        click.option("--steps", type=click.IntRange(0, MAX_STEPS), default=defaults.steps, show_default=True),
        click.option("--min-length", type=click.IntRange(1, MAX_LENGTH), default=defaults.min_length,
                     show_default=True),
        click.option("--max-length", type=click.IntRange(1, MAX_LENGTH), default=defaults.max_length,
                     show_default=True,
                     help="longest training length (the curriculum's end)"),
        click.option("--start-length", type=click.IntRange(0, MAX_LENGTH), default=defaults.start_length,
                     show_default=True,
                     help="curriculum: first longest length; 0: max-length (no curriculum)"),
        click.option("--error-threshold", type=FiniteFloat(0, 1), default=defaults.error_threshold, show_default=True,
                     help="curriculum: running symbol error below which the longest length grows"),
        click.option("--batch-size", type=click.IntRange(1, MAX_BATCH), default=defaults.batch_size, show_default=True),
        click.option("--optimizer", type=click.Choice(["rmsprop", "adam"]), default=defaults.optimizer,
                     show_default=True),
        click.option("--lr", "learning_rate", type=FiniteFloat(min=0, min_open=True),
                     default=defaults.learning_rate, show_default=True),
        click.option("--schedule", type=click.Choice(SCHEDULES), default=defaults.schedule, show_default=True,
                     help="learning rate over the steps: constant, or cosine (down to 0 at the last step)"),
        click.option("--clip", type=FiniteFloat(min=0), default=defaults.clip, show_default=True,
                     help="gradient norm; 0: no clipping (TF)"),
        click.option("--max-skipped-steps", type=click.IntRange(0, MAX_STEPS), default=defaults.max_skipped_steps,
                     show_default=True, help="batches with a loss or gradient that is not finite to skip (weights "
                     "untouched) before training stops with an error; 0: stop at the first"),
        click.option("--controller-dim", type=click.IntRange(1, MAX_WIDTH), default=defaults.controller_dim,
                     show_default=True),
        click.option("--slots", type=click.IntRange(0, MAX_SLOTS), default=defaults.slots, show_default=True,
                     help="ring size; 0: the prompt length at the generalisation length"),
        click.option("--shifts", default=_shown_shifts(defaults.shifts), show_default=True, callback=_shifts,
                     help="head moves R^shift to choose from, or 'all' rotations"),
        click.option("--erase-init", type=FiniteFloat(min=0), default=defaults.erase_init, show_default=True,
                     help="--erase matrix: scale of the initial erase weights; 0: no erasing"),
        click.option("--curriculum", type=click.Choice(CURRICULA), default=defaults.curriculum, show_default=True,
                     help="error: grow on low running error; tf: the TF notebook's epoch schedule"),
        click.option("--test-lengths", default=",".join(map(str, defaults.test_lengths)), callback=_lengths,
                     help="lengths tested after training; empty: twice --max-length"),
        click.option("--readout-dim", type=click.IntRange(0, MAX_WIDTH), default=defaults.readout_dim,
                     show_default=True,
                     help="hidden read-out layer; 0: linear read-out (TF)"),
        click.option("--memory-width", type=click.IntRange(0, MAX_WIDTH), default=defaults.memory_width,
                     show_default=True,
                     help="NTM memory width; 0: the controller size"),
        click.option("--pattern-slots", type=click.IntRange(0, MAX_SLOTS), default=defaults.pattern_slots,
                     show_default=True,
                     help="size of the pattern rings; 0: as ring 1 (multiple pattern NTM: 2)"),
        click.option("--erase", type=click.Choice(ERASES), default=defaults.erase, show_default=True,
                     help="location: Eq. (2.13) sigmoid erase at the write address; matrix: the paper's Sec. 3.2"),
        click.option("--content-softmax/--linear-contents", default=defaults.content_softmax, show_default=True,
                     help="read pattern rings through a softmax over their contents (TF) or linearly (paper)"),
        click.option("--gate/--no-gate", default=defaults.gate, show_default=True,
                     help="pattern models: gate ring 1's pattern move with a direct read head (TF)"),
        click.option("--sharpen/--no-sharpen", default=defaults.sharpen, show_default=True,
                     help="sharpen addresses with a learned exponent (TF)"),
        click.option("--content-addressing/--no-content-addressing", default=defaults.content_addressing,
                     show_default=True, help="content-based addressing with key strength (Graves et al.)"),
        click.option("--controller", type=click.Choice(CONTROLLER_NAMES), default=defaults.controller,
                     show_default=True, help="the NTMs' controller activation: relu (paper) or tanh (TF)"),
        click.option("--device", default=defaults.device, show_default=True, callback=_device,
                     help="cpu, cuda or cuda:N"),
        click.option("--compile/--no-compile", default=defaults.compile, show_default=True,
                     help="torch.compile each step (one-off 20-30 s, then about 2x faster)"),
    ]

    def decorate(command: Command) -> Command:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


@click.group(cls=ReportingGroup)
def llrnn() -> None:
    """LLRNN: the NTM family of "Linear logic and recurrent neural networks" and its tasks."""


@llrnn.command()
@click.argument("task_name", type=click.Choice(sorted(TASK_NAMES)))
@click.option("--length", type=click.IntRange(1, MAX_LENGTH), default=5, show_default=True)
@click.option("--count", type=click.IntRange(1, MAX_BATCH), default=3, show_default=True)
@click.option("--seed", type=SEEDS, default=0, show_default=True)
def sample(task_name: str, length: int, count: int, seed: int) -> None:
    """Print random examples of a task: input, then the expected output."""
    import torch

    from lsrl.llrnn.tasks import TASKS

    task = TASKS[task_name]()
    batch = task.batch(count, length, torch.Generator().manual_seed(seed))
    for tokens, targets, mask in zip(batch.tokens, batch.targets, batch.mask):
        click.echo(f"{task.alphabet.decode(tokens)}  ->  {task.alphabet.decode(targets[mask])}")


@llrnn.command(name="train")
@click.option("--model", "model_name", default="ntm", show_default=True, help=f"one of {', '.join(MODEL_NAMES)}")
@click.option("--task", "task_name", type=click.Choice(sorted(TASK_NAMES)), default="copy", show_default=True)
@click.option("--preset", "preset_name", type=click.Choice(sorted(PRESETS)), default=None,
              help="start from these settings (tf: the authors' TensorFlow ones); options given override them")
@training_options(TrainConfig())
@click.option("--seed", type=SEEDS, default=0, show_default=True)
@click.option("-o", "--output", "out_dir", default="llrnn-run", show_default=True, type=click.Path(file_okay=False))
@click.option("--resume", is_flag=True, help="continue the checkpoint in OUTPUT (its settings) up to --steps")
@click.option("--checkpoint-every", type=click.IntRange(1, MAX_STEPS), default=500, show_default=True)
@click.option("--threads", type=click.IntRange(1, MAX_WORKERS), default=1, show_default=True,
              help="CPU threads (small recurrent models run fastest on one; at most 4 per usable CPU, 64)")
@click.pass_context
def train_command(context: click.Context, model_name: str, task_name: str, preset_name: str | None, seed: int,
                  out_dir: str, resume: bool, checkpoint_every: int, threads: int, **settings: Any) -> None:
    """Train a model on a task; write checkpoint, history, evaluation and plots to OUTPUT."""
    import torch

    from lsrl.llrnn.train import preset, train

    torch.set_num_threads(threads)
    if preset_name:
        given = {name: value for name, value in settings.items()
                 if context.get_parameter_source(name) is ParameterSource.COMMANDLINE}
        config = preset(preset_name, model_name, task_name, seed=seed, **given)
    else:
        config = TrainConfig(model=model_name, task=task_name, seed=seed, **settings)
    evaluation = train(config, out_dir, resume=resume, checkpoint_every=checkpoint_every)
    click.echo(f"{evaluation['steps']} steps, {evaluation['parameters']} parameters, "
               f"{evaluation['wall_seconds']} s; symbol error {evaluation['train_symbol_error']:.2%} "
               f"at the training lengths, {evaluation['test_symbol_error']:.2%} at length {evaluation['test_length']}")
    click.echo(f"wrote {Path(out_dir)}")


@llrnn.command(name="experiment")
@click.option("--models", default=",".join(EXPERIMENT_MODELS), show_default=True)
@click.option("--tasks", default=",".join(EXPERIMENT_TASKS), show_default=True)
@click.option("--seeds", type=click.IntRange(1, MAX_RUNS), default=3, show_default=True, help="seeds 0 .. SEEDS-1")
@training_options(EXPERIMENT_DEFAULTS)
@grid_options(workers=2)
@click.option("-o", "--output", "out_dir", default="llrnn-experiment", show_default=True,
              type=click.Path(file_okay=False))
def experiment_command(models: str, tasks: str, seeds: int, workers: int, ray_address: str | None, out_dir: str,
                       **settings: Any) -> None:
    """Every model on every task and seed (one CPU thread each): test errors and costs as CSV and Markdown."""
    import torch

    from lsrl.llrnn.experiment import run_experiment
    from lsrl.llrnn.train import MODELS  # the registry itself (MODEL_NAMES: its names, for the help)

    torch.set_num_threads(1)
    rows = run_experiment(out_dir, TrainConfig(**settings), _names(models, MODELS, "--models"),
                          _names(tasks, TASK_NAMES, "--tasks"), range(seeds), workers=workers, ray_address=ray_address)
    click.echo((Path(out_dir) / "experiment.md").read_text(), nl=False)
    click.echo(f"wrote {Path(out_dir) / 'experiment.csv'} ({len(rows)} runs)")


@llrnn.command(name="reproduce")
@click.option("--preset", "preset_name", type=click.Choice(sorted(PRESETS)), default="tf", show_default=True,
              help="tf: the authors' settings (GPU-sized); tf-cpu: minutes per run on one core; smoke: a check")
@click.option("--models", default=",".join(REPRODUCTION_MODELS), show_default=True)
@click.option("--tasks", default=",".join(REPRODUCTION_TASKS), show_default=True)
@click.option("--seeds", type=click.IntRange(1, MAX_RUNS), default=3, show_default=True, help="seeds 0 .. SEEDS-1")
@click.option("--steps", type=click.IntRange(0, MAX_STEPS), default=None, help="override the preset's number of steps")
@click.option("--schedule", type=click.Choice(SCHEDULES), default=None,
              help="override the preset's learning rate schedule (constant; cosine: down to 0 at the end)")
@click.option("--lr", "learning_rate", type=FiniteFloat(min=0, min_open=True), default=None,
              help="override the preset's learning rate (its exceptions for some models and tasks included)")
@click.option("--device", default="cpu", show_default=True, callback=_device, help="cpu, cuda or cuda:N")
@grid_options(workers=2)
@click.option("--finished-only", is_flag=True,
              help="train nothing: the table and plot of the runs finished so far in the output folder")
@click.option("-o", "--output", "out_dir", default="llrnn-reproduction", show_default=True,
              type=click.Path(file_okay=False))
def reproduce_command(preset_name: str, models: str, tasks: str, seeds: int, steps: int | None, schedule: str | None,
                      learning_rate: float | None, device: str, workers: int, ray_address: str | None,
                      finished_only: bool, out_dir: str) -> None:
    """Train models × TF tasks × seeds; the median errors beside the TF medians, plots and heat maps.
    Run again on the same folder, it picks up where it was stopped."""
    import torch

    from lsrl.llrnn.reproduce import run_reproduction
    from lsrl.llrnn.train import MODELS

    torch.set_num_threads(1)
    given = {"steps": steps, "schedule": schedule, "learning_rate": learning_rate}
    overrides: dict[str, Any] = {"device": device} | {name: value for name, value in given.items() if value is not None}
    rows = run_reproduction(out_dir, preset_name, _names(models, MODELS, "--models"),
                            _names(tasks, TASK_NAMES, "--tasks"), range(seeds), workers=workers,
                            ray_address=ray_address, finished_only=finished_only, **overrides)
    click.echo((Path(out_dir) / "reproduction.md").read_text(), nl=False)
    click.echo(f"wrote {Path(out_dir) / 'reproduction.csv'} ({len(rows)} runs) and error_vs_length.png")
