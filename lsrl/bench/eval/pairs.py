"""What every method of the harness shares: the clean / corrupted input pairs it runs on (``Pairs``), what it
found (``Found``), the outputs' change under a patch (``output_changes``), least-squares probes (``fit_probes``)
and the program's own interchange of a variable on the pairs (``program_interchange``, ``agrees``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from lsrl.bench.data import pair_inputs
from lsrl.bench.eval.subject import Subject
from lsrl.bench.tasks import TASKS
from lsrl.errors import LsrlError, shown, whole_number

EFFECT_THRESHOLD = 1e-6  # an output change above this calls a candidate in the circuit (float64 noise is ~1e-15)
EFFECT_FRACTION = 0.05  # of a trained model: an effect at least this share of the whole corrupted input's


@dataclass
class Pairs:
    """Clean and corrupted inputs ``(P, T, d_in)`` and the subject's runs on them; ``real`` ``(P, T, 1)``: 1 at
    the clean sequences' steps, 0 on their padding. A corrupted run shorter than its clean one holds its last
    step's values (inputs, outputs and activations): the interchange of ``data.npz``."""

    clean: np.ndarray
    corrupt: np.ndarray  # as run: the held steps are in corrupt_outputs, corrupt_layers and held(...)
    clean_outputs: torch.Tensor
    corrupt_outputs: torch.Tensor
    clean_layers: list[torch.Tensor]
    corrupt_layers: list[torch.Tensor]
    real: torch.Tensor
    corrupt_steps: np.ndarray  # (P, T): the corrupted run's step whose values stand at each clean step

    @classmethod
    def from_data(cls, subject: Subject, count: int = 0) -> Pairs:
        """The fixed pairs of the task's ``data.npz`` for the subject's tier (``lsrl.bench.data.pair_inputs``, of
        the lengths ``lsrl.bench.data.pair_lengths``): all of them, or ``count`` taken evenly from its two halves
        (equal and different lengths; on the trained tier both of equal lengths)."""
        task = TASKS[subject.task]
        data = pair_inputs(task, subject.tier)
        total = len(data["pairs_clean_lengths"])
        wanted = whole_number(count)
        if wanted is None or not 2 <= (wanted or total) <= total:
            raise LsrlError(f"pairs: the data has {total} fixed clean / corrupted pairs; pairs must be a whole number "
                            f"from 2 to {total} (0: all of them), got {shown(count)}")
        wanted = wanted or total
        half = wanted // 2
        chosen = np.r_[0:half, total // 2:total // 2 + wanted - half]
        clean, lengths = data["pairs_clean_inputs"][chosen], data["pairs_clean_lengths"][chosen]
        steps = int(lengths.max())
        clean = clean[:, :steps]
        corrupt = np.zeros_like(clean)
        ours = data["pairs_corrupted_inputs"][chosen, :steps]
        corrupt[:, :ours.shape[1]] = ours
        held = np.minimum(np.arange(steps)[None], data["pairs_corrupted_lengths"][chosen][:, None] - 1)
        real = torch.as_tensor((np.arange(steps)[None] < lengths[:, None])[..., None].astype(np.float64))
        with torch.no_grad():
            clean_run, corrupt_run = subject.run(clean), subject.run(corrupt)
        rows = np.arange(len(chosen))[:, None]
        corrupt_outputs, corrupt_layers = (corrupt_run[0][rows, held], [layer[rows, held] for layer in corrupt_run[1]])
        return cls(clean, corrupt, clean_run[0], corrupt_outputs, clean_run[1], corrupt_layers, real, held)

    def held(self, values: np.ndarray) -> np.ndarray:
        """Values ``(P, T, ...)`` of the corrupted runs at the steps that stand at each clean step."""
        return values[np.arange(len(values))[:, None], self.corrupt_steps]

    def layer_input(self, subject: Subject, index: int, corrupted: bool = False) -> torch.Tensor:
        """What layer ``index`` reads on the clean (or corrupted) inputs."""
        if index == 0:
            return torch.as_tensor(self.held(self.corrupt) if corrupted else self.clean)
        return (self.corrupt_layers if corrupted else self.clean_layers)[index - 1]


@dataclass
class Found:
    """A method's scores: per candidate unit (``Subject.candidates``), per variable, per edge
    (``Subject.edges()``); ``threshold``: above it a candidate is called in the circuit;
    ``interchange``: ``{variable: interchange accuracy}`` for variable-level methods; ``overlap``: ``{variable:
    overlap of the subspace found with the labelled one}`` for subspace methods (``das``)."""

    threshold: float
    units: np.ndarray | None = None
    nodes: dict[str, float] | None = None
    edges: np.ndarray | None = None
    interchange: dict[str, float] = field(default_factory=dict)
    overlap: dict[str, float] = field(default_factory=dict)


def effect_threshold(subject: Subject, whole: float) -> float:
    """Above what effect a method calls a candidate of ``subject`` in the circuit, ``whole`` the effect (in the
    method's measure) of the whole corrupted input on the outputs. A compiled model's weights are exact: any effect
    above float64 noise is real (``EFFECT_THRESHOLD``). A trained model's every unit moves the outputs a little
    (its free units are trained to be inert, not to be exactly so): there a candidate is called in the circuit
    when its effect is at least ``EFFECT_FRACTION`` of the whole input's."""
    return EFFECT_FRACTION * whole if subject.tier == "trained" else EFFECT_THRESHOLD


def whole_change(pairs: Pairs) -> float:
    """The mean absolute change of the outputs from the clean to the corrupted inputs (``output_changes``' measure
    of the whole corrupted input)."""
    return float(output_changes(pairs.corrupt_outputs, pairs)[0])


def output_changes(outputs: torch.Tensor, pairs: Pairs) -> np.ndarray:
    """Per patched candidate (rows grouped by candidate, one per pair each): the mean absolute change of the
    outputs over the clean sequences' steps."""
    repeats = outputs.shape[0] // pairs.clean_outputs.shape[0]
    real = pairs.real.repeat(repeats, 1, 1)
    change = (outputs - pairs.clean_outputs.repeat(repeats, 1, 1)).abs() * real
    per_row = change.sum(dim=(1, 2)) / (real.sum(dim=(1, 2)) * outputs.shape[-1])
    return per_row.reshape(-1, pairs.clean.shape[0]).mean(dim=1).numpy()


def fit_probes(activations: np.ndarray, targets: np.ndarray, widths: list[int], held_out: np.ndarray | None = None
               ) -> tuple[np.ndarray, list[np.ndarray]]:
    """Least-squares affine probes of several variables from one layer's ``activations`` ``(n, width)``:
    ``targets`` ``(n, sum of widths)`` holds the variables side by side (``widths`` components each);
    returns each variable's R^2 (NaN for a constant variable) and probe weights ``(k, width)``. ``held_out``: a
    mask of rows the probes are not fitted on and their R^2 is measured on (None: fitted and measured on all)."""
    design = np.hstack([activations, np.ones((activations.shape[0], 1))])
    fitted, scored = (slice(None), slice(None)) if held_out is None else (~held_out, held_out)
    solution, *_ = np.linalg.lstsq(design[fitted], targets[fitted], rcond=None)
    design, targets = design[scored], targets[scored]
    residual = ((design @ solution - targets) ** 2).sum(axis=0)
    total = ((targets - targets.mean(axis=0)) ** 2).sum(axis=0)
    r2, weights, start = [], [], 0
    for width in widths:
        part = slice(start, start + width)
        r2.append(1 - residual[part].sum() / total[part].sum() if total[part].sum() > 0 else np.nan)
        weights.append(solution[:-1, part].T)
        start += width
    return np.array(r2), weights


def held_trace(subject: Subject, pairs: Pairs) -> dict[str, np.ndarray]:
    """The program's trace on the corrupted inputs, at the steps that stand at each clean step."""
    return {node: pairs.held(values) for node, values in
            subject.program.trace(pairs.corrupt, check_bounds=False).items()}


def program_interchange(subject: Subject, pairs: Pairs, node: str, corrupt_trace: dict[str, np.ndarray]
                        ) -> np.ndarray:
    """The program's outputs on the clean inputs with ``node`` taking its values of ``corrupt_trace``
    (``held_trace``): what the interchange of that variable should give."""
    return subject.program(pairs.clean, check_bounds=False,
                           patch={node: corrupt_trace[node]})[..., : subject.output_dim]


def agrees(outputs: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per (..., step): the outputs, rounded, equal the expected ones, rounded (an interchange's outputs are the
    program's; a trained model's are near them)."""
    return (np.round(outputs) == np.round(expected)).all(axis=-1)
