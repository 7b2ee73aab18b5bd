"""The experiment grid (``lsrl llrnn experiment``): every model on every task with several seeds;
test errors at the training lengths and at twice the longest, and what each run cost, as CSV and
Markdown."""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from lsrl.llrnn.checks import LlrnnArgumentError, integers, strings
from lsrl.llrnn.tasks import TASKS
from lsrl.llrnn.train import MODELS, SEED_RANGE, SIDECAR, UNREADABLE_CHECKPOINT, TrainConfig, TrainingError, train
from lsrl.grid import Outcome, Run, run_grid
from lsrl.workers import check_workers

EXPERIMENT_DEFAULTS = TrainConfig(max_length=5)  # ~30 min for the full grid on two CPU cores
EXPERIMENT_MODELS = ("ntm", "pattern_ntm", "multiple_pattern_ntm")
EXPERIMENT_TASKS = ("copy", "repeat_copy", "pattern", "multiple_pattern")
RESULT_FIELDS = ("model", "task", "seed", "steps", "parameters", "wall_seconds", "curriculum_length",
                 "train_symbol_error", "train_sequence_error", "test_length", "test_symbol_error",
                 "test_sequence_error")


CHECKPOINT_EVERY = 250  # steps; a grid stopped part way loses at most this much of each run
MAX_RUNS = 10_000  # runs in one grid: each trains for seconds to hours, and each config is held in memory


def check_grid(owner: str, models: Sequence[str], tasks: Sequence[str], seeds: Sequence[int]
               ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]:
    """``models``, ``tasks`` and ``seeds`` as tuples: known names, seeds in torch's range, each at least
    one, and at most ``MAX_RUNS`` runs in all (``TrainingError`` otherwise)."""
    try:
        models, tasks = strings(owner, "models", models), strings(owner, "tasks", tasks)
        if isinstance(seeds, range) and len(seeds) > MAX_RUNS:  # before a huge range is listed
            raise LlrnnArgumentError(f"{owner}: {len(seeds)} seeds exceed the {MAX_RUNS} runs of a grid")
        seeds = integers(owner, "seeds", seeds)
    except LlrnnArgumentError as error:
        raise TrainingError(str(error)) from None
    for name, given, known in (("models", models, MODELS), ("tasks", tasks, TASKS)):
        unknown = [value for value in given if value not in known]
        if unknown:
            raise TrainingError(f"{owner}: unknown {name} {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    outside = [seed for seed in seeds if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]]
    if outside:
        raise TrainingError(f"{owner}: seeds must be in {SEED_RANGE[0]} .. {SEED_RANGE[1]}, got {outside[0]}")
    runs = len(models) * len(tasks) * len(seeds)
    if runs > MAX_RUNS:
        raise TrainingError(f"{owner}: {len(models)} models × {len(tasks)} tasks × {len(seeds)} seeds = {runs} runs, "
                            f"more than the {MAX_RUNS} of a grid")
    return models, tasks, seeds


def _experiment_run(config: TrainConfig, folder: Path) -> dict:
    """Train ``config`` into ``folder``. A run already trained there is read back, and one cut short
    continues from its last checkpoint, so a grid that was stopped picks up where it was."""
    steps = _steps_saved(config, folder)  # the checkpoint is read once
    finished = _finished_row(config, folder, steps)
    if finished is not None:
        return finished
    evaluation = train(config, folder, resume=steps is not None, progress=False, checkpoint_every=CHECKPOINT_EVERY)
    return {"model": config.model, "task": config.task, "seed": config.seed, **evaluation}


def finished_row(config: TrainConfig, folder: Path) -> dict | None:
    """The result row of ``config`` if it was trained to the end in ``folder`` (None otherwise)."""
    return _finished_row(config, folder, _steps_saved(config, folder))


def _finished_row(config: TrainConfig, folder: Path, steps_saved: int | None) -> dict | None:
    report = folder / "evaluation.json"
    if steps_saved != config.steps or not report.is_file():
        return None
    return {"model": config.model, "task": config.task, "seed": config.seed, **json.loads(report.read_text())}


def _steps_saved(config: TrainConfig, folder: Path) -> int | None:
    """Steps of ``config`` (its number of steps aside) in the checkpoint in ``folder``; None when
    there is none, it is of another config, or it is ahead of ``config``."""
    if not (folder / SIDECAR).is_file():
        return None
    try:
        state = torch.load(folder / SIDECAR, weights_only=True)
        saved = dataclasses.replace(TrainConfig(**state["config"]), steps=config.steps)
    except UNREADABLE_CHECKPOINT:  # trained again from the start
        return None
    return state["step"] if saved == config and state["step"] <= config.steps else None


def run_configs(configs: list[TrainConfig], folder: Path, workers: int = 2, progress: bool = True,
                finished_only: bool = False, ray_address: str | None = None) -> list[dict]:
    """Train every config into ``folder/{model}-{task}-{seed}``; one result row per run (``_experiment_run``:
    finished runs are read back, and runs cut short continue from their checkpoints), or a ``GridError`` naming
    the runs that failed. ``finished_only``: train nothing, the rows of the runs finished so far. Where the runs
    run: ``lsrl.grid.run_grid`` (``workers`` local processes of one CPU thread, or the Ray cluster at
    ``ray_address``, where a ``cuda`` run takes one GPU and ``folder`` must be one every node sees)."""
    outcome = grid_of_configs(configs, folder, workers, progress, finished_only, ray_address)
    outcome.check()
    return outcome.finished


def grid_of_configs(configs: list[TrainConfig], folder: Path, workers: int = 2, progress: bool = True,
                    finished_only: bool = False, ray_address: str | None = None, owner: str = "run_configs"
                    ) -> Outcome:
    """``run_configs``'s runs, their rows and failures (``lsrl.grid.Outcome``; ``owner`` names the grid in its
    bar and errors): a grid's tables are written from the runs that finished before the failures are raised."""
    workers = check_workers(owner, workers)
    if len(configs) > MAX_RUNS:
        raise TrainingError(f"run_configs: {len(configs)} runs, more than the {MAX_RUNS} of a grid")
    bad = [config for config in configs if not isinstance(config, TrainConfig)]
    if bad:
        raise TrainingError(f"run_configs: configs must be TrainConfig objects, got a {type(bad[0]).__name__}")
    named = [(f"{config.model}-{config.task}-{config.seed}", config) for config in configs]
    if finished_only:
        rows = {name: finished_row(config, folder / name) for name, config in named}
        finished = {name: row for name, row in rows.items() if row is not None}
        return Outcome(owner, list(finished), list(finished.values()))
    cuda = [config.device for config in configs if str(config.device).startswith("cuda:")]
    if ray_address is not None and cuda:
        raise TrainingError(f"run_configs: on a Ray cluster give device 'cuda' (Ray gives each run its GPU), "
                            f"not {cuda[0]!r}")
    runs = [Run(name, _experiment_run, (config, folder / name), gpus=int(str(config.device).startswith("cuda")))
            for name, config in named]
    return run_grid(owner, runs, workers, ray_address, progress)


def run_experiment(folder: str | Path, base: TrainConfig, models: Sequence[str] = EXPERIMENT_MODELS,
                   tasks: Sequence[str] = EXPERIMENT_TASKS, seeds: Sequence[int] = (0, 1, 2), workers: int = 2,
                   progress: bool = True, ray_address: str | None = None) -> list[dict]:
    """Train every model on every task with every seed; write ``experiment.csv`` and ``experiment.md`` (of the
    runs that finished, before a ``GridError`` names any that failed). The grid is checked first
    (``check_grid``; ``workers`` and ``ray_address``: ``run_configs``)."""
    models, tasks, seeds = check_grid("run_experiment", models, tasks, seeds)
    workers = check_workers("run_experiment", workers)
    if not isinstance(base, TrainConfig):
        raise TrainingError(f"run_experiment: base must be a TrainConfig, got a {type(base).__name__}")
    folder = Path(folder)
    configs = [dataclasses.replace(base, model=model, task=task, seed=seed)
               for model in models for task in tasks for seed in seeds]
    outcome = grid_of_configs(configs, folder, workers, progress, ray_address=ray_address, owner="run_experiment")
    rows = outcome.finished
    with open(folder / "experiment.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=RESULT_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (folder / "experiment.md").write_text(markdown_table(rows))
    outcome.check()
    return rows


def markdown_table(rows: list[dict]) -> str:
    """Per model and task: mean and best over seeds of the errors, seeds at most 1 % wrong, mean cost."""
    lines = ["| model | task | symbol error, training lengths | symbol error, test length (best) "
             "| sequence error, test length | seeds ≤ 1 % | test length | steps | parameters | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["task"]), []).append(row)
    for (model, task), group in groups.items():
        def mean(key: str, group: list[dict] = group) -> float:
            return sum(row[key] for row in group) / len(group)

        best = min(row["test_symbol_error"] for row in group)
        solved = sum(row["test_symbol_error"] <= 0.01 for row in group)
        lines.append(f"| {model} | {task} | {mean('train_symbol_error'):.2%} "
                     f"| {mean('test_symbol_error'):.2%} ({best:.2%}) | {mean('test_sequence_error'):.2%} "
                     f"| {solved}/{len(group)} | {group[0]['test_length']} | {mean('steps'):.0f} "
                     f"| {group[0]['parameters']} | {mean('wall_seconds'):.0f} |")
    return "\n".join(lines) + "\n"
