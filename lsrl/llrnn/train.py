"""Training the NTM family on the LLRNN tasks: curriculum on lengths, checkpoints, evaluation, plots.

A model (``lsrl.llrnn.explicit``) maps inputs to states; ``TaskModel`` adds the read-out of Sec. 2.1,
``y = ReLU(W_y h0 + B_y)`` and ``logits = W_o y + B_o`` over the task's alphabet. The loss is the
cross-entropy on the output steps only (``Batch.mask``).

Curriculum: batch lengths are drawn uniformly from ``min_length .. current`` where ``current`` starts
at ``start_length`` and grows by one (up to ``max_length``) whenever the mean symbol error of the last
``window`` batches drops below ``error_threshold``. It is off by default (``start_length = 0``: all
lengths from the start): on copy, short sequences let the controller memorise them without the
memory, and the NTM found the memory solution later or not at all (see the report in the README).
Generalisation is measured at ``generalisation_factor × max_length``, longer than anything trained on.

Everything random comes from ``seed``: the initial weights and the training batches (a generator whose
state is checkpointed). The test set has its own fixed seed, so every run is scored on the same data.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import pickle
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from lsrl.errors import LsrlError
from lsrl.llrnn.explicit import NTM, MultiplePatternNTM, PatternNTM
from lsrl.llrnn.tasks import TASKS, Batch

TEST_SEED = 20_170_101
WEIGHTS, SIDECAR = "checkpoint.safetensors", "checkpoint.state.pt"


class TrainingError(LsrlError):
    """A training request that cannot be honoured (unknown model, missing checkpoint, no CUDA)."""


@dataclass
class TrainConfig:
    model: str = "ntm"
    task: str = "copy"
    min_length: int = 1
    max_length: int = 10  # longest training length once the curriculum is done
    start_length: int = 0  # the curriculum's first longest length; 0: max_length (no curriculum)
    error_threshold: float = 0.05  # running symbol error below which the curriculum moves on
    window: int = 20  # batches in the running error
    steps: int = 3000
    batch_size: int = 16
    optimizer: str = "rmsprop"
    learning_rate: float = 3e-4
    clip: float = 10.0  # gradient norm
    controller_dim: int = 32
    readout_dim: int = 32
    slots: int = 0  # ring size; 0: the prompt length at the generalisation length (nothing wraps)
    symbol_dim: int = 4  # coefficient size of the pattern rings
    erase_init: float = 0.0  # scale of the initial erase weights; 0: no erasing (see quiet_memory)
    pattern_write_init: float = 0.01  # scale of the initial write weights of the pattern rings
    shifts: tuple[int, ...] | None = (0, 1)  # the moves a head chooses from (R^shift); None: any rotation
    generalisation_factor: int = 2
    test_batch_size: int = 64
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"


# ---- models -----------------------------------------------------------------------------------


def _ntm(config, input_dim, slots, **placement):
    return NTM(input_dim, config.controller_dim, slots, config.shifts, **placement)


def _pattern_ntm(config, input_dim, slots, **placement):
    return PatternNTM(input_dim, config.controller_dim, slots, config.symbol_dim, head_powers=config.shifts,
                      **placement)


def _multiple_pattern_ntm(config, input_dim, slots, **placement):
    return MultiplePatternNTM(input_dim, config.controller_dim, config.symbol_dim, slots=(slots, 2, 2, 2),
                              head_powers=config.shifts, **placement)


# name -> builder(config, input_dim, slots, dtype=, device=) -> model
MODELS = {"ntm": _ntm, "pattern_ntm": _pattern_ntm, "multiple_pattern_ntm": _multiple_pattern_ntm}


@torch.no_grad()
def quiet_memory(model: torch.nn.Module, erase_scale: float, pattern_write_scale: float) -> None:
    """Scale the initial erase weights ``W_e*``, ``B_e*`` (0: erasing off for good) and the write
    weights ``W_a2..``, ``B_a2..`` of the pattern rings.

    The erase operator is a full matrix ``e = ReLU(W_e h0 + B_e)`` applied to the whole memory,
    ``M' = (1 - e) M + a w^T``. With the default uniform initialisation and d = 32 its entries are
    about 0.1, so ``1 - e`` has spectral radius ~1.4 and the memory grows geometrically: an untrained
    NTM overflows after ~25 steps. At 0, ``e = 0`` and its weights are frozen (memory only accumulates).
    Writes to a pattern ring add to the coefficients ``lambda`` that move ring 1's read address, whose
    mass then grows by ``sum lambda`` per step; small initial writes keep it near 1.
    """
    for name, parameter in model.named_parameters():
        if re.fullmatch(r"[WB]_e\d*", name):
            parameter.mul_(erase_scale)
            parameter.requires_grad_(erase_scale != 0)
        elif re.fullmatch(r"[WB]_a[2-9]", name):
            parameter.mul_(pattern_write_scale)


class TaskModel(torch.nn.Module):
    """A model plus the read-out of Sec. 2.1: ``logits = W_o ReLU(W_y h0 + B_y) + B_o``."""

    def __init__(self, model: torch.nn.Module, vocabulary: int, readout_dim: int):
        super().__init__()
        self.model = model
        parameter = next(model.parameters())
        controller_dim = model.layout["h0"][1][-1]
        self.readout = torch.nn.Sequential(
            torch.nn.Linear(controller_dim, readout_dim), torch.nn.ReLU(), torch.nn.Linear(readout_dim, vocabulary)
        ).to(parameter.device, parameter.dtype)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        states = self.model(inputs)
        return self.readout(self.model.parts(states)["h0"])


# ---- metrics ----------------------------------------------------------------------------------


@dataclass
class Score:
    """Masked error counts: symbols and whole sequences."""

    wrong_symbols: int = 0
    symbols: int = 0
    wrong_sequences: int = 0
    sequences: int = 0

    @classmethod
    def of(cls, logits: torch.Tensor, batch: Batch) -> Score:
        wrong = (logits.argmax(-1) != batch.targets) & batch.mask
        return cls(int(wrong.sum()), int(batch.mask.sum()), int(wrong.any(1).sum()), len(batch.mask))

    def __add__(self, other: Score) -> Score:
        return Score(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    @property
    def symbol_error(self) -> float:
        return self.wrong_symbols / max(self.symbols, 1)

    @property
    def sequence_error(self) -> float:
        return self.wrong_sequences / max(self.sequences, 1)


def masked_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits[batch.mask], batch.targets[batch.mask])


# ---- the trainer ------------------------------------------------------------------------------


class Trainer:
    """Holds the model, optimiser, curriculum and data generator; ``run`` trains up to ``config.steps``.

    Without ``model`` it builds ``MODELS[config.model]`` and initialises its memory (``quiet_memory``);
    a model passed in is trained as it is.
    """

    def __init__(self, config: TrainConfig, model: torch.nn.Module | None = None):
        self.config = config
        if config.task not in TASKS:
            raise TrainingError(f"unknown task {config.task!r}; known: {', '.join(TASKS)}")
        if not 1 <= config.min_length <= (config.start_length or config.max_length) <= config.max_length:
            raise TrainingError(f"lengths must satisfy 1 <= min_length <= start_length <= max_length, got "
                                f"{config.min_length}, {config.start_length}, {config.max_length}")
        if config.device.startswith("cuda") and not torch.cuda.is_available():
            raise TrainingError("--device cuda: no CUDA device is available")
        self.task = TASKS[config.task]()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)  # the initial weights, without touching the caller's RNG
            self.net = TaskModel(model or self._build_model(), self.task.alphabet.size, config.readout_dim)
        self.optimizer = _optimizer(config, [p for p in self.net.parameters() if p.requires_grad])
        self.data = torch.Generator().manual_seed(config.seed)
        self.step, self.current_length = 0, config.start_length or config.max_length
        self.recent_errors: deque[float] = deque(maxlen=config.window)
        self.history: list[dict] = []

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.config.dtype)

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.net.parameters() if p.requires_grad)

    @property
    def running_error(self) -> float:
        return sum(self.recent_errors) / max(len(self.recent_errors), 1)

    def _build_model(self) -> torch.nn.Module:
        if self.config.model not in MODELS:
            raise TrainingError(f"unknown model {self.config.model!r}; known: {', '.join(MODELS)}")
        slots = self.config.slots or self.prompt_length(self.generalisation_length)
        model = MODELS[self.config.model](self.config, self.task.alphabet.size, slots,
                                          dtype=self.dtype, device=self.config.device)
        quiet_memory(model, self.config.erase_init, self.config.pattern_write_init)
        return model

    @property
    def generalisation_length(self) -> int:
        return self.config.generalisation_factor * self.config.max_length

    def prompt_length(self, length: int) -> int:
        batch = self.task.batch(1, length, torch.Generator().manual_seed(0))
        return int((~batch.mask[0]).sum())

    def train_step(self) -> dict:
        batch = self.task.batch(self.config.batch_size, (self.config.min_length, self.current_length), self.data)
        batch = batch.to(self.config.device, self.dtype)
        self.net.train()
        logits = self.net(batch.inputs)
        loss = masked_loss(logits, batch)
        self.optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.config.clip)
        if torch.isfinite(norm):  # an overflowing batch is skipped rather than poisoning every weight
            self.optimizer.step()
        self.step += 1
        return self._record(loss.item(), Score.of(logits.detach(), batch).symbol_error)

    def _record(self, loss: float, symbol_error: float) -> dict:
        self.recent_errors.append(symbol_error)
        row = {"step": self.step, "loss": loss, "symbol_error": symbol_error,
               "running_error": self.running_error, "length": self.current_length}
        self.history.append(row)
        full = len(self.recent_errors) == self.config.window
        if full and self.running_error < self.config.error_threshold and self.current_length < self.config.max_length:
            self.current_length += 1
            self.recent_errors.clear()
        return row

    def run(self, progress: bool = True, checkpoint_dir: Path | None = None, checkpoint_every: int = 0) -> None:
        """Train until ``config.steps``; checkpoint every ``checkpoint_every`` steps if asked."""
        bar = tqdm(total=self.config.steps, initial=self.step, disable=not progress, desc=self.config.model)
        while self.step < self.config.steps:
            row = self.train_step()
            bar.update()
            bar.set_postfix(loss=f"{row['loss']:.3f}", err=f"{row['running_error']:.3f}", len=row["length"])
            if checkpoint_dir and checkpoint_every and self.step % checkpoint_every == 0:
                self.save(checkpoint_dir)
        bar.close()

    @torch.no_grad()
    def score(self, lengths) -> Score:
        """Summed score on the fixed test batches of ``lengths``."""
        self.net.eval()
        total = Score()
        for batch in self.task.test_set(lengths, self.config.test_batch_size, TEST_SEED):
            batch = batch.to(self.config.device, self.dtype)
            total = total + Score.of(self.net(batch.inputs), batch)
        return total

    def evaluate(self) -> dict:
        """Errors at the training lengths and at the generalisation length."""
        seen = self.score(range(self.config.min_length, self.config.max_length + 1))
        longer = self.score([self.generalisation_length])
        return {"steps": self.step, "parameters": self.parameter_count, "curriculum_length": self.current_length,
                "train_symbol_error": seen.symbol_error, "train_sequence_error": seen.sequence_error,
                "test_length": self.generalisation_length,
                "test_symbol_error": longer.symbol_error, "test_sequence_error": longer.sequence_error}

    # ---- checkpoints ----

    def save(self, folder) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        weights = {name: tensor.detach().contiguous() for name, tensor in self.net.state_dict().items()}
        save_file(weights, folder / WEIGHTS)
        torch.save({"config": dataclasses.asdict(self.config), "step": self.step,
                    "current_length": self.current_length, "recent_errors": list(self.recent_errors),
                    "history": self.history, "optimizer": self.optimizer.state_dict(),
                    "data_generator": self.data.get_state()}, folder / SIDECAR)
        return folder

    @classmethod
    def resume(cls, folder, model: torch.nn.Module | None = None, **overrides) -> Trainer:
        """The trainer saved in ``folder``; ``overrides`` replace config fields (e.g. ``steps``)."""
        folder = Path(folder)
        if not (folder / WEIGHTS).is_file() or not (folder / SIDECAR).is_file():
            raise TrainingError(f"{folder}: no checkpoint ({WEIGHTS} and {SIDECAR})")
        try:  # a truncated or foreign file fails deep inside pickle, safetensors or torch
            state = torch.load(folder / SIDECAR, weights_only=True)
            trainer = cls(dataclasses.replace(TrainConfig(**state["config"]), **overrides), model)
            trainer.net.load_state_dict(load_file(folder / WEIGHTS, device=trainer.config.device))
            trainer.optimizer.load_state_dict(state["optimizer"])
            trainer.data.set_state(state["data_generator"])
            trainer.step, trainer.current_length = state["step"], state["current_length"]
            trainer.recent_errors.extend(state["recent_errors"])
            trainer.history = state["history"]
        except (pickle.UnpicklingError, SafetensorError, EOFError, RuntimeError, KeyError, TypeError,
                ValueError) as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise TrainingError(f"{folder}: corrupt checkpoint, cannot resume ({reason[:200]})") from None
        return trainer


def _optimizer(config: TrainConfig, parameters) -> torch.optim.Optimizer:
    if config.optimizer == "rmsprop":
        return torch.optim.RMSprop(parameters, lr=config.learning_rate, momentum=0.9)
    if config.optimizer == "adam":
        return torch.optim.Adam(parameters, lr=config.learning_rate)
    raise TrainingError(f"unknown optimizer {config.optimizer!r}; known: rmsprop, adam")


# ---- reports: history, evaluation, plots -----------------------------------------------------

ADDRESS_NAME = re.compile(r"[rw]\d*")


def write_history(history: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(history[0]) if history else ["step"])
        writer.writeheader()
        writer.writerows(history)


def plot_error_curve(history: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, errors = plt.subplots(figsize=(7, 4))
    steps = [row["step"] for row in history]
    errors.plot(steps, [row["running_error"] for row in history], label="running symbol error")
    errors.set_xlabel("step")
    errors.set_ylabel("symbol error")
    errors.set_ylim(0, 1)
    lengths = errors.twinx()
    lengths.plot(steps, [row["length"] for row in history], color="tab:orange", label="longest length")
    lengths.set_ylabel("curriculum: longest length")
    lengths.set_ylim(0, max((row["length"] for row in history), default=0) + 1)
    figure.legend(loc="center right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


@torch.no_grad()
def address_traces(trainer: Trainer, length: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The input tokens (T,) of one test sequence and every read / write address on it, (N, T) each."""
    batch = trainer.task.test_set([length], 1, TEST_SEED)[0].to(trainer.config.device, trainer.dtype)
    model = trainer.net.model
    parts = model.parts(model(batch.inputs))
    return batch.tokens[0], {name: view[0].T.cpu() for name, view in parts.items() if ADDRESS_NAME.fullmatch(name)}


def plot_addresses(trainer: Trainer, path: Path) -> None:
    """Heat maps (position × time) of every read and write address on one generalisation-length sequence."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    tokens, addresses = address_traces(trainer, trainer.generalisation_length)
    rows = max(len(addresses), 1)
    figure, axes = plt.subplots(rows, 1, figsize=(10, 2.2 * rows), squeeze=False)
    for axis, (name, values) in zip(axes[:, 0], addresses.items()):
        axis.imshow(values.numpy(), aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=1,
                    interpolation="nearest")
        axis.set_ylabel(f"{name}: position")
        for ticks in (axis.xaxis, axis.yaxis):
            ticks.set_major_locator(MaxNLocator(integer=True))
    if not addresses:
        axes[0, 0].text(0.5, 0.5, "this model has no memory rings", ha="center", va="center")
    axes[-1, 0].set_xlabel(f"time step  (input: {trainer.task.alphabet.decode(tokens)})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_reports(trainer: Trainer, folder: Path, **extra) -> dict:
    """``evaluation.json`` (with ``extra``), ``history.csv``, ``error_curve.png``, ``addresses.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    evaluation = {**trainer.evaluate(), **extra}
    (folder / "evaluation.json").write_text(json.dumps(evaluation, indent=2) + "\n")
    write_history(trainer.history, folder / "history.csv")
    plot_error_curve(trainer.history, folder / "error_curve.png")
    plot_addresses(trainer, folder / "addresses.png")
    return evaluation


def train(config: TrainConfig, folder, resume: bool = False, progress: bool = True, checkpoint_every: int = 500,
          model: torch.nn.Module | None = None) -> dict:
    """Train (or continue the checkpoint in ``folder`` up to ``config.steps``), save, write the reports.

    Returns the evaluation, with the wall seconds spent training in this call.
    """
    folder = Path(folder)
    trainer = Trainer.resume(folder, model, steps=config.steps) if resume else Trainer(config, model)
    started = time.perf_counter()
    trainer.run(progress=progress, checkpoint_dir=folder, checkpoint_every=checkpoint_every)
    seconds = round(time.perf_counter() - started, 1)
    trainer.save(folder)
    return write_reports(trainer, folder, wall_seconds=seconds)
