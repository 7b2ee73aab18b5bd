"""The one training loop of the trained tier, for every trained model (a stock torch LSTM / GRU, a stock
``transformers`` model), and the measure of a trained model.

Training mixes three losses on sequences of the task's training lengths, one per Adam step in turn:

* the task: the outputs match the program's;
* interchange: with a variable's units set, at every step, to their values on a source sequence, the outputs match
  the program's outputs under the interchange of that variable (``prog(xs, patch=...)``);
* strictness (SIIT): with free units set to their values on a source sequence, the outputs do not change.

What differs between models is their ``Recipe``: the batch, the learning rate, whether it falls to 0 along a cosine,
and whether an interchange step trains one variable drawn at random or every variable on the same pair (summed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from lsrl.bench.data import pair_data, pair_lengths
from lsrl.bench.tasks import TASKS, Task, task_program
from lsrl.errors import InternalError
from lsrl.lang.program import ForEach

STEPS = 600  # Adam steps of a trained model

Units = dict[str, list[int]]  # hook -> the units of it set to a source run's values


@dataclass(frozen=True)
class Recipe:
    """How a kind of model trains: ``batch`` sequences per step, Adam's learning rate ``lr``, ``cosine``: the
    learning rate falls to 0 along a cosine over the steps; ``every_variable``: an interchange step sums the losses
    of every variable on one base / source pair (else it trains one variable, drawn)."""

    batch: int
    lr: float
    cosine: bool = False
    every_variable: bool = False


class Interchangeable(Protocol):
    """What ``measure`` runs: a trained model with its variables' units (``alignment``: variable -> ``(hook,
    units)``)."""

    task: str
    alignment: dict[str, tuple[str, list[int]]]

    def run(self, xs: torch.Tensor, units: Any = None, source: Any = None) -> tuple[torch.Tensor, Any]: ...


class Trainable(Interchangeable, Protocol):
    """What ``fit`` trains: an ``Interchangeable`` with its free units, its parameters, its outputs on a base with
    units set to their values on a source (``paired``), and what it records of training."""

    free: Units
    accuracy: float
    interchange_accuracy: dict[str, float] | None
    lengths: tuple[int, int]
    seconds: float
    steps: int
    seed: int

    def parameters(self) -> list[torch.nn.Parameter]: ...

    def set_training(self, on: bool) -> None: ...

    def paired(self, base: np.ndarray, source: np.ndarray, units: Units) -> torch.Tensor: ...


def sample_batch(task: Task, rng: np.random.Generator, length: int, size: int) -> np.ndarray:
    """``size`` sequences of ``task`` of ``length`` steps, float64 ``(size, length, d_in)``."""
    return np.stack([task.sample(rng, length) for _ in range(size)]).astype(np.float64)


def program_targets(program: ForEach, base: np.ndarray, source: np.ndarray, variable: str | None) -> torch.Tensor:
    """The program's outputs on ``base`` (``variable`` None) or under the interchange of ``variable`` with its values
    on ``source``."""
    if variable is None:
        return torch.as_tensor(program(base, check_bounds=False))
    trace = program.trace(source, check_bounds=False)
    return torch.as_tensor(program(base, check_bounds=False, patch={variable: trace[variable]}))


def pair_loss(model: Trainable, program: ForEach, base: np.ndarray, source: np.ndarray, units: Units,
              variable: str | None) -> torch.Tensor:
    """The mean squared error of ``model``'s outputs on ``base`` with ``units`` set at every step to their values on
    ``source``, against the program's outputs under the interchange of ``variable`` (None: its plain outputs)."""
    outputs = model.paired(base, source, units)
    return ((outputs - program_targets(program, base, source, variable)) ** 2).mean()


def step_loss(model: Trainable, program: ForEach, base: np.ndarray, source: np.ndarray, kind: int,
              rng: np.random.Generator, recipe: Recipe) -> torch.Tensor:
    """The loss of one step of ``kind`` (0 the task, 1 interchange, 2 strictness) on a base / source pair."""
    if kind == 0:
        return pair_loss(model, program, base, source, {}, None)
    if kind == 2:
        return pair_loss(model, program, base, source, model.free, None)
    if recipe.every_variable:
        return torch.stack([pair_loss(model, program, base, source, dict([units]), variable)
                            for variable, units in model.alignment.items()]).sum()
    variable = list(model.alignment)[int(rng.integers(len(model.alignment)))]
    return pair_loss(model, program, base, source, dict([model.alignment[variable]]), variable)


def fit(model: Trainable, recipe: Recipe, steps: int, seed: int) -> None:
    """Train ``model`` (built, its initial weights drawn from ``seed``) for ``steps`` Adam steps of ``recipe``, the
    sequences drawn from ``seed``; then record in it its accuracies (``measure``, on the fixed pairs of its folder's
    ``data.npz``), the seconds it took, ``steps`` and ``seed``."""
    start = time.perf_counter()
    task, program = TASKS[model.task], task_program(model.task)
    rng = np.random.default_rng(seed)
    model.set_training(True)
    optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps) if recipe.cosine else None
    for step in range(steps):
        length = int(rng.integers(task.train_lengths[0], task.train_lengths[1] + 1))
        base, source = sample_batch(task, rng, length, recipe.batch), sample_batch(task, rng, length, recipe.batch)
        loss = step_loss(model, program, base, source, step % 3, rng, recipe)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if schedule is not None:
            schedule.step()
    model.set_training(False)
    model.accuracy, model.interchange_accuracy = measure(model)
    model.lengths = pair_lengths(task, "trained")
    model.seconds, model.steps, model.seed = time.perf_counter() - start, steps, seed


def measure(model: Interchangeable) -> tuple[float, dict[str, float]]:
    """Task accuracy and per-variable interchange accuracy on the fixed clean / corrupted pairs of the trained
    folder's ``data.npz`` (``lsrl.bench.data.pair_data``: of the training lengths, each pair of equal lengths, the
    pairs the harness scores methods on): the share of the clean sequences' (pair, step) whose rounded outputs equal
    the program's (with the variable's units set at every step to their values in the corrupted run, as
    ``data.npz``'s ``interchange.*``)."""
    task = TASKS[model.task]
    data = pair_data(task, "trained", list(model.alignment))
    if not np.array_equal(data["pairs_clean_lengths"], data["pairs_corrupted_lengths"]):
        raise InternalError(f"measure: the trained pairs of {task.name!r} must be of equal lengths")
    clean, corrupted = torch.as_tensor(data["pairs_clean_inputs"]), torch.as_tensor(data["pairs_corrupted_inputs"])
    real = np.arange(clean.shape[1])[None] < data["pairs_clean_lengths"][:, None]

    def correct(outputs: torch.Tensor, expected: np.ndarray) -> float:
        equal = (np.round(outputs.numpy()) == np.round(expected)).all(axis=-1)
        return float(equal[real].mean())

    with torch.no_grad():
        accuracy = correct(model.run(clean)[0], data["pairs_clean_outputs"])
        _, source = model.run(corrupted)
        interchange = {variable: correct(model.run(clean, units, source)[0], data[f"interchange.{variable}"])
                       for variable, units in model.alignment.items()}
    return accuracy, interchange


def variable_levels(program: ForEach, variables: list[tuple[str, int]]) -> dict[str, int]:
    """Per circuit variable, how many circuit variables are chained before it within one step (a state node
    reads its own past, not its present): the level of the layer that holds it."""
    by_name = {program.names[node]: node for node in program.nodes}
    wanted = {name for name, _ in variables}
    levels: dict[str, int] = {}

    def level(name: str) -> int:
        if name not in levels:
            node, above, seen = by_name[name], [], set()
            stack = list(node.inputs)
            while stack:  # the circuit variables this one reads within the step (the first met on each path)
                other = stack.pop()
                if id(other) in seen or other is node:
                    continue
                seen.add(id(other))
                if program.names.get(other) in wanted:
                    above.append(level(program.names[other]))
                else:
                    stack += list(other.inputs)
            levels[name] = 1 + max(above) if above else 0
        return levels[name]

    for name in wanted:
        level(name)
    return levels
