"""The ``"trained"`` tier: a stock ``torch.nn.LSTM`` / ``GRU`` trained by interchange intervention training
towards the program's causal graph (as InterpBench's SIIT does), so that its circuit is known by design.

Each variable of the task's circuit (``Task.circuit``: named program nodes) is aligned with its own block of
``UNITS_PER_COMPONENT`` hidden units per component (the cell state too, for an LSTM); the other units are
free. Training mixes three losses on sequences of the training lengths:

* the task: the outputs match the program's;
* interchange: with a variable's units set, at every step, to their values on a source sequence, the
  outputs match the program's outputs under the interchange of that variable (``prog(xs, patch=...)``);
* strictness (SIIT): with free units set to their values on a source sequence, the outputs do not change.

``train(task, arch)`` returns a ``TrainedModel`` with its task accuracy and interchange-intervention accuracy
(outputs rounded to integers, per step) on fresh sequences. The cell runs step by step with the weights of
one ``torch.nn.LSTM`` / ``GRU`` layer (``TrainedModel.stock()`` gives that module).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lsrl.bench.eval.subject import Candidate, Intervention, Subject
from lsrl.bench.tasks import TASKS
from lsrl.bench.tiers import TASKS_TRAINED
from lsrl.errors import LsrlError
from lsrl.ir.labels import UnitLabel
from lsrl.lang.program import ForEach

UNITS_PER_COMPONENT = 4
FREE_UNITS = 8
STEPS = 600
BATCH = 64


def measured(accuracy: float, interchange: dict[str, float] | None) -> str:
    """The model card's sentence on a trained model's measured task and interchange-intervention accuracies."""
    interchange = interchange or {}
    per_variable = ", ".join(f"`{variable}` {value:.3f}" for variable, value in interchange.items())
    mean = np.mean(list(interchange.values()) or [np.nan])
    return (f"Measured on fresh sequences of the training lengths (outputs rounded): **task accuracy "
            f"{accuracy:.3f}**, **interchange-intervention accuracy {mean:.3f}** (per variable: {per_variable}). "
            "Its outputs are floats: close to, not equal to, `data.npz`'s.")


@dataclass
class TrainedModel:
    """A trained cell and readout; ``alignment``: variable -> its hidden units; the accuracies measured."""

    task: str
    arch: str
    cell: nn.Module
    readout: nn.Linear
    alignment: dict[str, list[int]]
    accuracy: float = float("nan")
    interchange_accuracy: dict[str, float] | None = None
    seconds: float = 0.0
    steps: int = 0
    seed: int = 0

    @property
    def labels(self) -> dict[str, list[tuple[str, int, str]]]:
        """The unit labels per hook of its suite folder (``lsrl.bench.export``): ``core`` (and the LSTM's cell
        ``core.c``) the alignment, ``(variable, component, "value")``, and ``("free", unit, "value")`` for a free
        unit (a pseudo-variable of no program node, trained to be inert: never in the circuit, a true negative); the
        gates ``(..., "helper")`` of their unit; ``readout`` the program's output."""
        from lsrl.bench.standalone import GATES

        owner = {unit: (variable, units_index(units, unit)) for variable, units in self.alignment.items()
                 for unit in units}
        state = [(*owner[u], "value") if u in owner else ("free", u, "value") for u in range(self.cell.hidden_size)]
        helpers = [(node, index, "helper") for node, index, _ in state]
        gates = {f"core.{gate}": state if gate == "c" else helpers
                 for gate in GATES[f"torch.nn.{self.arch.upper()}"]}
        program = TASKS[self.task].build()
        output = program.names[program.output]
        return {"core": state, **gates, "readout": [(output, k, "value") for k in range(self.readout.out_features)]}

    def card(self) -> str:
        """What the model card says of its training and its measured accuracies."""
        hooks = "`core`, `core.c`" if self.arch == "lstm" else "`core`"
        return (f" **Tier `trained`**: a stock `torch.nn.{self.arch.upper()}` trained by interchange intervention "
                f"training ({self.steps} Adam steps, seed {self.seed}; `lsrl.bench.eval.trained`), each circuit "
                f"variable aligned with its own block of hidden units (labels {hooks}; "
                f"`free` units are trained to be inert). {measured(self.accuracy, self.interchange_accuracy)}")

    def run(self, xs: torch.Tensor, units: list[int] | None = None, source: list | None = None
            ) -> tuple[torch.Tensor, list]:
        """``(outputs (B, T, d_out), states per step)``; ``units`` of the state set, at every step, to their
        values in ``source`` (the states of another run) before the next step reads them."""
        count, hidden = xs.shape[0], self.cell.hidden_size
        state = (xs.new_zeros(count, hidden), xs.new_zeros(count, hidden)) if self.arch == "lstm" else \
            xs.new_zeros(count, hidden)
        states, outputs = [], []
        for t in range(xs.shape[1]):
            state = self.cell(xs[:, t], state)
            if units is not None:
                state = _set_units(state, units, source[t])
            states.append(state)
            outputs.append(self.readout(state[0] if self.arch == "lstm" else state))
        return torch.stack(outputs, dim=1), states

    def stock(self) -> nn.Module:
        """The stock ``torch.nn.LSTM`` / ``GRU`` (batch first) with the cell's weights."""
        module = (nn.LSTM if self.arch == "lstm" else nn.GRU)(self.cell.input_size, self.cell.hidden_size,
                                                             batch_first=True, dtype=self.cell.weight_ih.dtype)
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(module, f"{name}_l0").copy_(getattr(self.cell, name))
        return module


def _set_units(state, units, source):
    def setting(mine, theirs):
        mine = mine.clone()
        mine[:, units] = theirs[:, units]
        return mine

    if isinstance(state, tuple):
        return tuple(setting(m, s) for m, s in zip(state, source))
    return setting(state, source)


def _batch(task, rng, length, size=BATCH):
    return np.stack([task.sample(rng, length) for _ in range(size)]).astype(np.float64)


def _targets(program, base, source, variable):
    """The program's outputs on ``base`` (``variable`` None) or under the interchange of ``variable``."""
    if variable is None:
        return torch.as_tensor(program(base, check_bounds=False))
    trace = program.trace(source, check_bounds=False)
    return torch.as_tensor(program(base, check_bounds=False, patch={variable: trace[variable]}))


def train(name: str, arch: str, steps: int = STEPS, seed: int = 0, batch: int = BATCH) -> TrainedModel:
    """Train the trained tier of task ``name`` as a stock ``arch`` (``"lstm"`` or ``"gru"``); see the module
    docstring. ``steps`` Adam steps of ``batch`` sequences, each step one of the three losses in turn."""
    task = TASKS.get(name)
    variables = task.circuit_nodes() if task is not None else []
    if not variables or arch not in ("lstm", "gru"):
        raise LsrlError(f"train: needs a program task with named circuit variables and arch 'lstm' or 'gru', got "
                        f"{name!r}, {arch!r}")
    start = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    program = task.build()
    alignment, next_unit = {}, 0
    for variable, dim in variables:
        alignment[variable] = list(range(next_unit, next_unit + dim * UNITS_PER_COMPONENT))
        next_unit += dim * UNITS_PER_COMPONENT
    hidden = next_unit + FREE_UNITS
    cell = (nn.LSTMCell if arch == "lstm" else nn.GRUCell)(program.input.dim, hidden).double()
    model = TrainedModel(name, arch, cell, nn.Linear(hidden, program.output.dim).double(), alignment)
    free = list(range(next_unit, hidden))
    optimizer = torch.optim.Adam([*cell.parameters(), *model.readout.parameters()], lr=1e-2)
    for step in range(steps):
        length = int(rng.integers(task.train_lengths[0], task.train_lengths[1] + 1))
        base, source = _batch(task, rng, length, batch), _batch(task, rng, length, batch)
        kind = step % 3  # task, interchange, strictness
        variable = variables[int(rng.integers(len(variables)))][0] if kind == 1 else None
        units = alignment[variable] if kind == 1 else free if kind == 2 else None
        expected = _targets(program, base, source, variable)
        patched = None
        if units is not None:
            _, patched = model.run(torch.as_tensor(source), None)
        outputs, _ = model.run(torch.as_tensor(base), units, patched)
        loss = ((outputs - expected) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.accuracy, model.interchange_accuracy = measure(model, program, rng)
    model.seconds, model.steps, model.seed = time.perf_counter() - start, steps, seed
    return model


def measure(model: TrainedModel, program: ForEach, rng: np.random.Generator, batches: int = 4) -> tuple[float, dict]:
    """Task accuracy and per-variable interchange accuracy on fresh sequences of the training lengths: the
    share of (sequence, step) whose rounded outputs equal the program's."""
    task = TASKS[model.task]

    def correct(outputs, expected):
        return (torch.round(outputs) == torch.round(expected)).all(dim=-1).double().mean().item()

    accuracy, interchange = [], {variable: [] for variable in model.alignment}
    with torch.no_grad():
        for _ in range(batches):
            base, source = _batch(task, rng, task.train_lengths[1]), _batch(task, rng, task.train_lengths[1])
            outputs, _ = model.run(torch.as_tensor(base))
            accuracy.append(correct(outputs, _targets(program, base, source, None)))
            _, states = model.run(torch.as_tensor(source))
            for variable, units in model.alignment.items():
                outputs, _ = model.run(torch.as_tensor(base), units, states)
                interchange[variable].append(correct(outputs, _targets(program, base, source, variable)))
    return float(np.mean(accuracy)), {variable: float(np.mean(v)) for variable, v in interchange.items()}


@dataclass
class TrainedSubject(Subject):
    """A trained model for the harness: one layer, the state (``[h; c]`` for an LSTM); a unit is in the
    circuit when it is aligned with a variable (the free units are trained to be inert)."""

    model: TrainedModel | None = None

    @classmethod
    def from_model(cls, model: TrainedModel) -> TrainedSubject:
        hidden = model.cell.hidden_size
        owner = {unit: variable for variable, units in model.alignment.items() for unit in units}
        units = [UnitLabel(owner[u], units_index(model.alignment[owner[u]], u), "value") if u in owner else None
                 for u in range(hidden)]
        labels = [units * (2 if model.arch == "lstm" else 1)]
        live = [np.array([label is not None for label in labels[0]])]
        candidates = [Candidate(0, u, (label.node,) if label else (), label is not None)
                      for u, label in enumerate(labels[0])]
        program = TASKS[model.task].build()
        return cls(model.task, "trained", model.arch, labels, [None], program, program.output.dim, candidates, live,
                   model)

    def run(self, xs: torch.Tensor | np.ndarray, interventions: dict[int, Intervention] | None = None
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """As ``Subject.run``: an intervention on layer 0 sets state units (a mask) at every step."""
        x = torch.as_tensor(np.asarray(xs, dtype=np.float64)) if not isinstance(xs, torch.Tensor) else xs
        intervention = (interventions or {}).get(0)
        model, hidden = self.model, self.model.cell.hidden_size
        count = x.shape[0]
        state = (x.new_zeros(count, hidden), x.new_zeros(count, hidden)) if model.arch == "lstm" else \
            x.new_zeros(count, hidden)
        outputs, states = [], []
        with torch.no_grad():
            for t in range(x.shape[1]):
                state = model.cell(x[:, t], state)
                flat = torch.cat(state, dim=-1) if model.arch == "lstm" else state
                if intervention is not None:
                    flat = intervention.apply(flat, t)
                    state = (flat[:, :hidden], flat[:, hidden:]) if model.arch == "lstm" else flat
                states.append(flat)
                outputs.append(model.readout(state[0] if model.arch == "lstm" else state))
        return torch.stack(outputs, dim=1), [torch.stack(states, dim=1)]


def units_index(units: list[int], unit: int) -> int:
    """The component of its variable that an aligned unit holds."""
    return units.index(unit) // UNITS_PER_COMPONENT


TRAINED_COLUMNS = ("task", "arch", "hidden", "steps", "task_accuracy", "interchange_accuracy", "worst_variable",
                   "resample_unit_auroc", "zero_unit_auroc", "random_unit_auroc", "seconds")


def train_all(tasks: tuple[str, ...] = TASKS_TRAINED, archs: tuple[str, ...] = ("lstm", "gru"), steps: int = STEPS,
              progress: bool = False) -> list[dict[str, object]]:
    """Train every task as every arch; a row per model: accuracies, and the harness's unit AUROC of
    resample / zero patching and of random scores against the alignment."""
    from tqdm import tqdm

    from lsrl.bench.eval.harness import evaluate

    rows = []
    for name, arch in tqdm([(t, a) for t in tasks for a in archs], desc="trained tier", disable=not progress):
        model = train(name, arch, steps)
        subject = TrainedSubject.from_model(model)
        row = {"task": name, "arch": arch, "hidden": model.cell.hidden_size, "steps": steps,
               "task_accuracy": model.accuracy, "interchange_accuracy": float(np.mean(list(
                   model.interchange_accuracy.values()))), "worst_variable": min(model.interchange_accuracy.values())}
        for method in ("resample", "zero", "random"):
            row[f"{method}_unit_auroc"] = evaluate(subject, method)["unit_auroc"]
        row["seconds"] = round(model.seconds, 1)
        rows.append(row)
    return rows
