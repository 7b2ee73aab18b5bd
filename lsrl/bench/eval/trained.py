"""The ``"trained"`` tier: a stock ``torch.nn.LSTM`` / ``GRU`` trained by interchange intervention training
towards the program's causal graph (as InterpBench's SIIT does), so that its circuit is known by design.

Each variable of the task's circuit (``Task.circuit``: named program nodes) is aligned with its own block of
``UNITS_PER_COMPONENT`` hidden units per component (the cell state too, for an LSTM) in the recurrent layer of its
level (``layout``: a variable computed from another in the same step sits a layer above it; the model has as many
layers as levels, a stock multi-layer module); the other units are free. Training mixes three losses on sequences
of the training lengths:

* the task: the outputs match the program's;
* interchange: with a variable's units set, at every step, to their values on a source sequence, the
  outputs match the program's outputs under the interchange of that variable (``prog(xs, patch=...)``);
* strictness (SIIT): with free units set to their values on a source sequence, the outputs do not change.

``train(task, arch)`` returns a ``TrainedModel`` with its task accuracy and interchange-intervention accuracy
(outputs rounded to integers, per step) on fresh sequences. The cells run step by step with the weights of a
stock ``torch.nn.LSTM`` / ``GRU`` (``TrainedModel.stock()`` gives that module). A model meets the aim (``AIM``,
``meets_aim``) when its task accuracy and every variable's interchange accuracy reach 0.95; its suite folder says
whether it does (``record_training``: ``config.json``'s ``"training"`` record and the model card's opening), and
``lsrl.bench.load`` returns the record (``Folder.training``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
from torch import nn

from lsrl.bench.eval.das import STEPS as DAS_DEFAULT_STEPS
from lsrl.bench.eval.das import das
from lsrl.bench.eval.subject import Candidate, Intervention, Subject, frozen
from lsrl.bench.tasks import TASKS
from lsrl.bench.tiers import TASKS_TRAINED
from lsrl.errors import InternalError, LsrlError
from lsrl.ir.labels import UnitLabel
from lsrl.lang.program import ForEach

UNITS_PER_COMPONENT = 4
FREE_UNITS = 8
STEPS = 600
BATCH = 64
LR = 2e-2  # 1e-2 left count_token_2 as a GRU at an interchange accuracy of 0.95 after 600 steps; 2e-2: 0.996
AIM = 0.95  # a trained folder's labels count as faithful when its task accuracy and every variable's IIA reach it
RELAY = "input_relay"  # the pseudo-variable of the units that pass the input to the layer above
TRAINING = "training"  # the record's key in a trained folder's config.json (in ``lsrl_bench`` for a transformers one)


def measured(accuracy: float, interchange: dict[str, float] | None) -> str:
    """The model card's sentence on a trained model's measured task and interchange-intervention accuracies."""
    interchange = interchange or {}
    per_variable = ", ".join(f"`{variable}` {value:.3f}" for variable, value in interchange.items())
    mean = np.mean(list(interchange.values()) or [np.nan])
    return (f"Measured on fresh sequences of the training lengths (outputs rounded): **task accuracy "
            f"{accuracy:.3f}**, **interchange-intervention accuracy {mean:.3f}** (per variable: {per_variable}). "
            "Its outputs are floats: close to, not equal to, `data.npz`'s.")


def meets_aim(accuracy: float, interchange: Iterable[float]) -> bool:
    """Whether a trained model's labels count as faithful: task accuracy and every variable's interchange-intervention
    accuracy at least ``AIM``."""
    return bool(accuracy >= AIM and all(value >= AIM for value in interchange))


def training_record(model: Measured) -> dict[str, Any]:
    """The ``"training"`` record of a trained model (a ``TrainedModel`` or a ``lsrl.bench.hf_trained.HFTrained``):
    its steps and seed, the accuracies measured after training, ``AIM`` and whether it ``meets_aim``."""
    interchange = {variable: float(value) for variable, value in (model.interchange_accuracy or {}).items()}
    return {"steps": int(model.steps), "seed": int(model.seed), "task_accuracy": float(model.accuracy),
            "interchange_accuracy": interchange, "aim": AIM,
            "meets_aim": meets_aim(model.accuracy, interchange.values())}


def aim_note(record: dict[str, Any], where: str) -> str:
    """The model card's opening paragraph on ``record`` (``training_record``), which ``config.json`` holds at
    ``where``."""
    values = ", ".join(f"`{variable}` {value:.3f}" for variable, value in record["interchange_accuracy"].items())
    accuracies = f"the measured accuracies (task {record['task_accuracy']:.3f}; interchange-intervention {values})"
    if record["meets_aim"]:
        return (f"**Meets the aim**: {accuracies} are all at least {record['aim']}: interchanging a variable's "
                f"labelled units changes the outputs as the program's interchange of it does. `config.json`: "
                f"`{where}.meets_aim` is `true`.")
    return (f"**Below the aim: these labels are not faithful.** {accuracies[0].upper()}{accuracies[1:]} are not all "
            f"at least {record['aim']}: interchanging a variable's labelled units does not always change the outputs "
            f"as the program's interchange of it does, so a method scored against them is scored against a partly "
            f"wrong truth. `config.json`: `{where}.meets_aim` is `false`.")


def record_training(folder: Path, model: Measured) -> dict[str, Any]:
    """Write ``model``'s ``training_record`` into its suite ``folder`` (before ``manifest.json``, which then
    covers it): in ``config.json`` (field ``"training"``; in a stock ``transformers`` folder, in its ``lsrl_bench``
    record), and as the model card's opening paragraph (``aim_note``, after the title). Returns the record."""
    from lsrl.bench.hf_loader import RECORD

    record = training_record(model)
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(config.get(RECORD), dict):  # as transformers' save_pretrained writes it
        config[RECORD][TRAINING] = record
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        where = f"{RECORD}.{TRAINING}"
    else:  # as lsrl.bench.build.write_model writes it
        config[TRAINING] = record
        path.write_text(json.dumps(config, indent=1), encoding="utf-8")
        where = TRAINING
    card = (folder / "README.md").read_text(encoding="utf-8").split("\n")
    title = next(i for i, line in enumerate(card) if line.startswith("# "))
    card[title + 1:title + 1] = ["", aim_note(record, where)]
    (folder / "README.md").write_text("\n".join(card), encoding="utf-8")
    return record


def read_training(folder: str | Path) -> dict[str, Any] | None:
    """The ``"training"`` record (``training_record``) of a suite folder's ``config.json`` (its ``lsrl_bench``
    record's, for a stock ``transformers`` folder); ``None`` for a folder of another tier."""
    from lsrl.bench.hf_loader import RECORD

    config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    holder = config.get(RECORD) if isinstance(config.get(RECORD), dict) else config
    return holder.get(TRAINING)


def below_aim(folders: Iterable[str | Path]) -> list[str]:
    """Of suite ``folders``, the trained ones whose record (``read_training``) misses the aim, each as
    ``"FOLDER (task accuracy A; VARIABLE IIA, ...)"``."""
    missed = []
    for folder in folders:
        record = read_training(folder)
        if record is not None and not record["meets_aim"]:
            values = ", ".join(f"{variable} {value:.3f}" for variable, value in record["interchange_accuracy"].items())
            missed.append(f"{folder} (task accuracy {record['task_accuracy']:.3f}; interchange {values})")
    return missed


def with_aim(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of ``TRAINED_COLUMNS`` with ``meets_aim`` (``meets_aim`` of their task accuracy and worst variable)."""
    return [{**row, "meets_aim": meets_aim(float(row["task_accuracy"]), [float(row["worst_variable"])])}
            for row in rows]


def task_program(name: str) -> ForEach:
    """The program of task ``name`` (a program task of the trained tier: ``InternalError`` for an automaton task,
    which the callers refuse first)."""
    build = TASKS[name].build
    if build is None:
        raise InternalError(f"bench: task {name!r} has no program")
    return build()


def widths(program: ForEach) -> tuple[int, int]:
    """The input and output widths of a built program (``InternalError`` if unknown: a built ``ForEach`` knows
    both)."""
    given, output = program.input.dim, program.output.dim
    if given is None or output is None:
        raise InternalError(f"bench: the program {program.name!r} has no input or output width")
    return given, output


def layer_hook(layer: int) -> str:
    """The hook (and ``state_dict`` prefix) of the trained model's recurrent layer ``layer``."""
    return f"core.l{layer}"


@dataclass(kw_only=True)
class Measured:
    """What training a model of the trained tier measured (``training_record`` reads it): task accuracy,
    interchange-intervention accuracy per variable, seconds, steps and seed; shared by ``TrainedModel`` and
    ``lsrl.bench.hf_trained.HFTrained``."""

    accuracy: float = float("nan")
    interchange_accuracy: dict[str, float] | None = None
    seconds: float = 0.0
    steps: int = 0
    seed: int = 0


@dataclass
class TrainedModel(Measured):
    """Trained cells (one per layer, stacked as a stock multi-layer module stacks them) and a readout of the last;
    ``alignment``: variable -> ``(hook, units)`` of its layer (``layer_hook``); ``free``: hook -> the free units;
    ``relay``: hook -> the units that pass the input to the layer above (``layout``); the accuracies measured."""

    task: str
    arch: str
    cells: nn.ModuleList
    readout: nn.Linear
    alignment: dict[str, tuple[str, list[int]]]
    free: dict[str, list[int]]
    relay: dict[str, list[int]]

    @property
    def hidden_size(self) -> int:
        """Units per layer (every layer has as many, as in one stock module)."""
        return self.readout.in_features

    @property
    def hooks(self) -> list[str]:
        """The recurrent layers' hooks, bottom first."""
        return [layer_hook(k) for k in range(len(self.cells))]

    def unit_labels(self) -> dict[str, list[tuple[str, int, str]]]:
        """Per recurrent layer's hook: a unit aligned with a variable ``(variable, component, "value")``, a free
        one ``("free", unit, "value")``, a relay of the input ``("input_relay", component, "helper")`` (not scored:
        the input passed up, no variable of the program)."""
        labels = {hook: [("free", unit, "value") for unit in range(self.hidden_size)] for hook in self.hooks}
        blocks = [*self.alignment.items(), *((RELAY, (hook, units)) for hook, units in self.relay.items())]
        for variable, (hook, units) in blocks:
            for position, unit in enumerate(units):
                labels[hook][unit] = (variable, position // UNITS_PER_COMPONENT,
                                      "helper" if variable == RELAY else "value")
        return labels

    @property
    def labels(self) -> dict[str, list[tuple[str, int, str]]]:
        """The unit labels per hook of its suite folder (``lsrl.bench.export``): each layer's ``core.lK`` (and the
        LSTM's cell ``core.lK.c``) as ``unit_labels`` (a free unit: a pseudo-variable of no program node, trained
        to be inert: never in the circuit, a true negative); the gates ``(..., "helper")`` of their unit;
        ``readout`` the program's output."""
        from lsrl.bench.standalone import GATES

        labels = {}
        for hook, state in self.unit_labels().items():
            helpers = [(node, index, "helper") for node, index, _ in state]
            labels[hook] = state
            labels.update({f"{hook}.{gate}": state if gate == "c" else helpers
                           for gate in GATES[f"torch.nn.{self.arch.upper()}"]})
        program = task_program(self.task)
        output = program.names[program.output]
        return {**labels, "readout": [(output, k, "value") for k in range(self.readout.out_features)]}

    def card(self) -> str:
        """What the model card says of its training and its measured accuracies."""
        hooks = ", ".join(f"`{hook}`" + (f", `{hook}.c`" if self.arch == "lstm" else "") for hook in self.hooks)
        blocks = [*self.alignment.items(), *((RELAY, block) for block in self.relay.items())]
        where = ", ".join(f"`{variable}` → `{hook}[{units[0]}:{units[-1] + 1}]`" for variable, (hook, units) in blocks)
        relay = "; `input_relay` units pass the input to the layer above" if self.relay else ""
        return (f" **Tier `trained`**: a stock `torch.nn.{self.arch.upper()}` of {len(self.cells)} layer(s) trained "
                f"by interchange intervention training ({self.steps} Adam steps, seed {self.seed}; "
                f"`lsrl.bench.eval.trained`), each circuit variable aligned with its own block of hidden units in "
                f"the layer of its depth within a step ({where}; labels {hooks}; `free` units are trained to be "
                f"inert{relay}). {measured(self.accuracy, self.interchange_accuracy)}")

    def run(self, xs: torch.Tensor, units: tuple[str, list[int]] | dict[str, list[int]] | None = None,
            source: list | None = None) -> tuple[torch.Tensor, list]:
        """``(outputs (B, T, d_out), states per step: per layer its state)``; ``units`` (``(hook, units)`` of
        ``alignment`` or ``{hook: units}``) set, at every step, to their values in ``source`` (the states of
        another run) before anything reads them (the layer above, the next step)."""
        chosen = dict([units]) if isinstance(units, tuple) else units or {}
        sources = source or []
        count = xs.shape[0]
        state = [self._zeros(xs, count) for _ in self.cells]
        states, outputs = [], []
        for t in range(xs.shape[1]):
            below, step = xs[:, t], []
            for k, (hook, cell) in enumerate(zip(self.hooks, self.cells)):
                layer = cell(below, state[k])
                if hook in chosen:
                    layer = _set_units(layer, chosen[hook], sources[t][k])
                step.append(layer)
                below = layer[0] if self.arch == "lstm" else layer
            state = step
            states.append(step)
            outputs.append(self.readout(below))
        return torch.stack(outputs, dim=1), states

    def _zeros(self, xs, count):
        zeros = xs.new_zeros(count, self.hidden_size)
        return (zeros, zeros.clone()) if self.arch == "lstm" else zeros

    def stock(self, layer: int | None = None) -> nn.Module:
        """The stock ``torch.nn.LSTM`` / ``GRU`` (batch first) with the cells' weights: all of them (``num_layers``
        the cells), or only recurrent layer ``layer``'s."""
        cells = list(self.cells) if layer is None else [self.cells[layer]]
        first = cells[0]
        module = (nn.LSTM if self.arch == "lstm" else nn.GRU)(first.input_size, self.hidden_size, len(cells),
                                                             batch_first=True, dtype=first.weight_ih.dtype)
        with torch.no_grad():
            for k, cell in enumerate(cells):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(module, f"{name}_l{k}").copy_(getattr(cell, name))
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


def reads_input_above(program: ForEach, levels: dict[str, int]) -> bool:
    """Whether a circuit variable above the first layer (``levels``) reads the program's input within the step
    other than through a circuit variable (``first_token_1``'s ``first``: the count and the current token)."""
    by_name = {program.names[node]: node for node in program.nodes if node in program.names}
    for name, level in levels.items():
        stack, seen = list(by_name[name].inputs), set()
        while stack and level > 0:  # each node of the program at most once (seen)
            other = stack.pop()
            if id(other) in seen or program.names.get(other) in levels:
                continue
            seen.add(id(other))
            if other is program.input:
                return True
            stack += list(other.inputs)
    return False


def layout(program: ForEach, variables: list[tuple[str, int]]
           ) -> tuple[dict[str, tuple[str, list[int]]], dict[str, list[int]], dict[str, list[int]], int]:
    """``(alignment, free, relay, hidden size)``: each variable's block of ``UNITS_PER_COMPONENT`` units per
    component in the layer of its level (``lsrl.bench.hf_trained.variable_levels``: how many circuit variables it
    reads within one step); below the last layer, where a variable above reads the input (``reads_input_above``),
    a ``relay`` block that passes the input up (a stock layer reads only the one below); every layer as wide as the
    widest one's blocks plus ``FREE_UNITS``, the other units ``free`` (per layer's hook). A variable computed from
    another one in the same step sits a layer above it: in one layer it could read the other only one step late,
    and no weights could follow both interchanges (``count_token_2``'s ``is_2`` and ``count``: interchange accuracy
    0.75 in one layer)."""
    from lsrl.bench.hf_trained import variable_levels  # (it imports this module)

    levels = variable_levels(program, variables)
    top = max(levels.values())
    alignment, taken = {}, {layer_hook(k): 0 for k in range(top + 1)}
    for variable, dim in variables:
        hook = layer_hook(levels[variable])
        alignment[variable] = (hook, list(range(taken[hook], taken[hook] + dim * UNITS_PER_COMPONENT)))
        taken[hook] += dim * UNITS_PER_COMPONENT
    relay = {}
    if reads_input_above(program, levels):
        for hook in map(layer_hook, range(top)):
            relay[hook] = list(range(taken[hook], taken[hook] + widths(program)[0] * UNITS_PER_COMPONENT))
            taken[hook] += len(relay[hook])
    hidden = max(taken.values()) + FREE_UNITS
    return alignment, {hook: list(range(first, hidden)) for hook, first in taken.items()}, relay, hidden


def train(name: str, arch: str, steps: int = STEPS, seed: int = 0, batch: int = BATCH, lr: float = LR
          ) -> TrainedModel:
    """Train the trained tier of task ``name`` as a stock ``arch`` (``"lstm"`` or ``"gru"``); see the module
    docstring. ``steps`` Adam steps (learning rate ``lr``) of ``batch`` sequences, each step one of the three
    losses in turn."""
    task = TASKS.get(name)
    variables = task.circuit_nodes() if task is not None else []
    if task is None or not variables or arch not in ("lstm", "gru"):
        raise LsrlError(f"train: needs a program task with named circuit variables and arch 'lstm' or 'gru', got "
                        f"{name!r}, {arch!r}")
    start = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    program = task_program(name)
    alignment, free, relay, hidden = layout(program, variables)
    given, output = widths(program)
    cell = nn.LSTMCell if arch == "lstm" else nn.GRUCell
    cells = nn.ModuleList([cell(given if k == 0 else hidden, hidden).double() for k in range(len(free))])
    model = TrainedModel(name, arch, cells, nn.Linear(hidden, output).double(), alignment, free, relay)
    optimizer = torch.optim.Adam([*cells.parameters(), *model.readout.parameters()], lr=lr)
    for step in range(steps):
        length = int(rng.integers(task.train_lengths[0], task.train_lengths[1] + 1))
        base, source = _batch(task, rng, length, batch), _batch(task, rng, length, batch)
        kind = step % 3  # task, interchange, strictness
        variable = variables[int(rng.integers(len(variables)))][0] if kind == 1 else None
        units = alignment[variable] if variable is not None else free if kind == 2 else None
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


class Interchangeable(Protocol):
    """What ``measure`` runs: a ``TrainedModel`` or a ``lsrl.bench.hf_trained.HFTrained``."""

    task: str
    alignment: dict[str, tuple[str, list[int]]]

    def run(self, xs: torch.Tensor, units: Any = None, source: Any = None) -> tuple[torch.Tensor, Any]: ...


def measure(model: Interchangeable, program: ForEach, rng: np.random.Generator, batches: int = 4
            ) -> tuple[float, dict]:
    """Task accuracy and per-variable interchange accuracy on fresh sequences of the training lengths: the
    share of (sequence, step) whose rounded outputs equal the program's."""
    task = TASKS[model.task]

    def correct(outputs, expected):
        return (torch.round(outputs) == torch.round(expected)).all(dim=-1).double().mean().item()

    accuracy: list[float] = []
    interchange: dict[str, list[float]] = {variable: [] for variable in model.alignment}
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
    """A trained model for the harness: a layer per recurrent layer, its state (``[h; c]`` for an LSTM); a unit is
    in the circuit when it is aligned with a variable (the free units are trained to be inert)."""

    model: TrainedModel | None = None

    @classmethod
    def from_model(cls, model: TrainedModel) -> TrainedSubject:
        """The subject of a trained ``model``."""
        labels, live, candidates = [], [], []
        for layer, state in enumerate(model.unit_labels().values()):
            units = [UnitLabel(*label) if label[0] in model.alignment else None for label in state]
            scored = [label[0] != RELAY for label in state] * (2 if model.arch == "lstm" else 1)
            labels.append(units * (2 if model.arch == "lstm" else 1))
            live.append(np.array([label is not None for label in labels[-1]]))
            candidates += [Candidate(layer, u, (label.node,) if label else (), label is not None)
                           for u, label in enumerate(labels[-1]) if scored[u]]
        program = task_program(model.task)
        return cls(model.task, "trained", model.arch, labels, [None] * len(labels), program, widths(program)[1],
                   candidates, live, model)

    def run(self, xs: torch.Tensor | np.ndarray, interventions: dict[int, Intervention] | None = None
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """As ``Subject.run``: an intervention on layer ``k`` sets its state units (a mask) or a subspace (a
        projector) at every step; with gradients only where an intervention has them (``frozen``)."""
        x = torch.as_tensor(np.asarray(xs, dtype=np.float64)) if not isinstance(xs, torch.Tensor) else xs
        model = self.model
        if model is None:
            raise InternalError("a TrainedSubject is built by TrainedSubject.from_model")
        hidden, lstm, chosen = model.hidden_size, model.arch == "lstm", interventions or {}
        with frozen(model.cells, model.readout):
            state = [model._zeros(x, x.shape[0]) for _ in model.cells]
            outputs: list[torch.Tensor] = []
            states: list[list[torch.Tensor]] = [[] for _ in model.cells]
            for t in range(x.shape[1]):
                below = x[:, t]
                for k, cell in enumerate(model.cells):
                    flat = torch.cat(cell(below, state[k]), dim=-1) if lstm else cell(below, state[k])
                    if k in chosen:
                        flat = chosen[k].apply(flat, t)
                    state[k] = (flat[:, :hidden], flat[:, hidden:]) if lstm else flat
                    states[k].append(flat)
                    below = flat[:, :hidden]
                outputs.append(model.readout(below))
        return torch.stack(outputs, dim=1), [torch.stack(layer, dim=1) for layer in states]


UNIT_METHODS = ("resample", "mean", "zero", "attribution", "random")  # the unit-level methods the tables score
TRAINED_COLUMNS = ("task", "arch", "hidden", "steps", "task_accuracy", "interchange_accuracy", "worst_variable",
                   "meets_aim", *(f"{method}_unit_auroc" for method in UNIT_METHODS), "heldout_interchange_accuracy",
                   "probe_interchange_accuracy", "das_interchange_accuracy", "seconds", "das_seconds")
DAS_STEPS = DAS_DEFAULT_STEPS  # Adam steps per DAS search on a trained model


def method_columns(subject: Subject, pairs: int, das_steps: int = DAS_STEPS) -> dict[str, float]:
    """A trained model's method columns of ``TRAINED_COLUMNS``: the harness's unit AUROC of ``UNIT_METHODS`` against
    the alignment; on ``pairs`` held-out pairs of ``data.npz`` (the test lengths), the interchange accuracy of the
    aligned units (``heldout_interchange_accuracy``: the alignment scored as a method would be, DAS's reference),
    of the linear probes' subspaces (``probe``: correlational) and of the subspaces ``das`` learns (``das_steps``
    Adam steps per search; ``das_seconds`` its CPU seconds). DAS
    has no node AUROC here (every variable a trained model aligns is in its circuit: no negatives) and no subspace
    overlap (training aligns each variable with a block of units, not with a subspace of them)."""
    from lsrl.bench.eval.harness import evaluate, found_interchange, score
    from lsrl.bench.eval.methods import METHODS, Found, Pairs

    row = {f"{method}_unit_auroc": cast(float, evaluate(subject, method, pairs)["unit_auroc"])
           for method in UNIT_METHODS}
    held_out = Pairs.from_data(subject, pairs)
    aligned = Found(0.5, units=np.array([float(candidate.truth) for candidate in subject.candidates]))
    row["heldout_interchange_accuracy"] = float(np.mean(list(found_interchange(subject, held_out, aligned).values())))
    row["probe_interchange_accuracy"] = score(subject, METHODS["probe"](subject, held_out))["interchange_accuracy"]
    start = time.process_time()
    found = das(subject, held_out, steps=das_steps)
    row["das_interchange_accuracy"] = score(subject, found)["interchange_accuracy"]
    row["das_seconds"] = round(time.process_time() - start, 1)
    return row


def train_all(tasks: tuple[str, ...] = TASKS_TRAINED, archs: tuple[str, ...] = ("lstm", "gru"), steps: int = STEPS,
              progress: bool = False, das_steps: int = DAS_STEPS, workers: int = 1, ray_address: str | None = None
              ) -> list[dict[str, object]]:
    """Train every task as every arch; a row per model: accuracies and the method columns (``method_columns``).
    Where the models train: ``lsrl.grid.run_grid`` (``workers`` processes or the Ray cluster at ``ray_address``;
    one torch thread each, the rows the same wherever, but ``seconds``); a ``GridError`` names those that failed."""
    from lsrl.grid import Run, run_grid

    runs = [Run(f"{name}/{arch}", stock_row, (name, arch, steps, das_steps)) for name in tasks for arch in archs]
    outcome = run_grid("trained tier", runs, workers, ray_address, progress)
    outcome.check()
    return with_aim(outcome.finished)


def stock_row(name: str, arch: str, steps: int, das_steps: int = DAS_STEPS) -> dict[str, object]:
    """The table's row of task ``name`` trained as the stock torch ``arch`` (``train_all``)."""
    from lsrl.bench.eval.harness import PAIRS

    model = train(name, arch, steps)
    subject = TrainedSubject.from_model(model)
    accuracies = list((model.interchange_accuracy or {}).values())
    row: dict[str, object] = {
        "task": name, "arch": arch, "hidden": model.hidden_size * len(model.cells), "steps": steps,
        "task_accuracy": model.accuracy, "interchange_accuracy": float(np.mean(accuracies)),
        "worst_variable": min(accuracies)}
    row.update(method_columns(subject, PAIRS, das_steps), seconds=round(model.seconds, 1))
    return row
