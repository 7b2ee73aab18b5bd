"""``das``: Distributed Alignment Search (Geiger et al., 2024) as a variable-level method of the harness.

For each program variable ``v`` of dimension ``k`` (``ForEach.trace``'s last axis), DAS learns an orthogonal
rotation ``R`` of one layer's (hook's) units and intervenes on the first ``k`` rotated coordinates: at every step,
inside the recurrence, ``h <- h + (s - h) W^T W`` with ``W = R[:k]`` and ``s`` the layer's values on a source
sequence (an interchange of the subspace ``span(W^T)``). ``R`` is trained (``torch.nn.utils.parametrizations.
orthogonal``, Adam, ``STEPS`` full-batch steps, seeded) so that the interchanged run's outputs equal the program's
outputs under the interchange of ``v`` (``program(xs, patch=...)``), on ``TRAIN_PAIRS`` fresh base / source
sequences of the task's longest training length. Every (variable, layer) search is trained at once, one batch of
all their interchanges per step (each its own rotation, so they do not interact).

What it is given, and what not: the model's layers (hooks) and their activations, the program (its variables'
values and counterfactual outputs, as the probe is given), never the labels, the circuit or ``rotations.json``.
It finds the layer itself: the ``HOOKS_TRIED`` layers where a least-squares probe of ``v`` fits best (on the
training bases) are each searched, and the one whose learned subspace reaches the best training accuracy is kept.
A rotated target is searched in its own (rotated) coordinates, which the harness scores every method in. Any
subject that runs with interventions is searched: a path model, a hooked one (a stock ``transformers`` model of the
trained tier through its stepped run: ``hooked.changed_run``), an in-memory trained model
(``lsrl.bench.trained_tier.TrainedSubject``).

Reported, on the harness's fixed held-out pairs (``data.npz``: pairs of equal and of different lengths, never
trained on): the interchange accuracy (the share of clean (pair, step) outputs that, rounded, equal the
program's interchange, as the trained tier measures it); the node score, the mean absolute change of the
outputs under the learned interchange (a variable the outputs do not read scores near 0); and the subspace
overlap, the mean squared cosine of the principal angles between the learned ``k``-dim subspace and the span of
the units ``labels.json`` names ``v`` at the chosen layer, mapped through the change of basis on the rotated tier
(1: the learned subspace lies in the planted one; 0 at a layer that holds no unit of ``v``); a unit of a variable
whose interchange the program answers as ``v``'s (a copy, ``[ReLU(v), ReLU(-v)]``) counts as one of ``v``. A
pseudo-variable of no program node (the trained tier's free units) has no interchange to align: it scores 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np
import torch
from torch.nn.utils.parametrizations import orthogonal

from lsrl.bench.eval.hooked import HookedSubject
from lsrl.bench.eval.pairs import Found, Pairs, agrees, fit_probes, held_trace, output_changes, program_interchange
from lsrl.bench.eval.subject import Intervention, Subject, holds
from lsrl.bench.tasks import TASKS
from lsrl.errors import LsrlError, listed, whole_number

STEPS = 60  # Adam steps per (variable, layer) searched
LEARNING_RATE = 0.05
TRAIN_PAIRS = 32  # fresh base / source sequences the rotation is trained on
LOSS_DIGITS = 6  # training losses equal to this many digits tie
HOOKS_TRIED = 2  # layers searched per variable: the best-probed ones
THRESHOLD = 0.05  # a learned interchange moving the outputs (mean absolute change) more: the variable is in the circuit


def das(subject: Subject, pairs: Pairs, seed: int = 0, steps: int = STEPS, nodes: Iterable[str] | None = None
        ) -> Found:
    """DAS on every variable of ``subject`` (or those of ``nodes``; module docstring), scored on the held-out
    ``pairs``; ``seed`` fixes the training sequences and the rotations' start (one torch thread: the same ``Found``
    on every run); ``steps``: Adam steps per search."""
    seed, steps = _count(seed, "seed", 0), _count(steps, "steps", 1)
    if type(subject).run is Subject.run:
        raise LsrlError(f"das: subject must be a model it can run with interventions (a path, hooked or trained "
                        f"model: a suite folder, a tier model, a TrainedSubject), got a {type(subject).__name__} of "
                        f"{subject.task}/{subject.arch}")
    chosen = _chosen(subject, nodes)
    with _one_thread():
        train = _training_pairs(subject, seed)
        searched = [node for node in chosen if node in train.base_trace]  # a pseudo-variable (free units) has none
        found = _best(_learn(subject, train, _searches(subject, train, searched), seed, steps)) if searched else []
        corrupt_trace = held_trace(subject, pairs)
        expected = [program_interchange(subject, pairs, search.node, corrupt_trace) for search in found]
        with torch.no_grad():
            outputs = interchanged(subject, pairs.clean, pairs.corrupt_layers, found) if found else None
    scores = dict.fromkeys(chosen, 0.0)  # no interchange of a pseudo-variable to align: it is not found
    interchange, overlap = {}, {}
    if outputs is not None:
        real = pairs.real.numpy()[..., 0] > 0
        agree = agrees(outputs.numpy().reshape(len(found), *expected[0].shape), np.stack(expected))[:, real]
        for search, effect, share in zip(found, output_changes(outputs, pairs), agree.mean(axis=1)):
            scores[search.node], interchange[search.node] = float(effect), float(share)
            overlap[search.node] = overlap_with_labels(subject, search.layer, interchange_equivalent(
                subject, train, search.node, search.layer), search.basis.numpy())
    return Found(THRESHOLD, nodes=scores, interchange=interchange, overlap=overlap)


def _chosen(subject: Subject, nodes: Iterable[str] | None) -> list[str]:
    if nodes is None:
        return list(subject.nodes)
    chosen = listed(nodes)
    unknown = [node for node in chosen or [None] if not isinstance(node, str) or node not in subject.nodes]
    if chosen is None or not chosen or unknown:
        raise LsrlError(f"das: nodes must list variables a unit of {subject.task}/{subject.arch} holds "
                        f"({sorted(subject.nodes)}), got {nodes!r}")
    return list(dict.fromkeys(chosen))


def _count(value: object, name: str, minimum: int) -> int:
    count = whole_number(value)
    if count is None or count < minimum:
        raise LsrlError(f"das: {name} must be a whole number >= {minimum}, got {value!r}")
    return count


@contextmanager
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass
class _Training:
    """Base and source sequences ``(N, T, d_in)``, the layers' values on both, and the program's traces."""

    base: np.ndarray
    source: np.ndarray
    base_layers: list[torch.Tensor]
    source_layers: list[torch.Tensor]
    base_trace: dict[str, np.ndarray]
    source_trace: dict[str, np.ndarray]
    counterfactuals: dict[str, np.ndarray] = field(default_factory=dict)

    def counterfactual(self, subject: Subject, node: str) -> np.ndarray:
        """The program's outputs on the bases with ``node`` interchanged from the sources (computed once)."""
        if node not in self.counterfactuals:
            self.counterfactuals[node] = subject.program(self.base, check_bounds=False, patch={
                node: self.source_trace[node]})[..., : subject.output_dim]
        return self.counterfactuals[node]


def _training_pairs(subject: Subject, seed: int) -> _Training:
    rng = np.random.default_rng(seed)
    length = TASKS[subject.task].train_lengths[1]
    base, source = subject.sample(rng, TRAIN_PAIRS, length), subject.sample(rng, TRAIN_PAIRS, length)
    with torch.no_grad():
        base_layers, source_layers = subject.run(base)[1], subject.run(source)[1]
    trace = subject.program.trace
    return _Training(base, source, base_layers, source_layers, trace(base, check_bounds=False),
                     trace(source, check_bounds=False))


@dataclass
class Search:
    """The search of variable ``node`` (``dim`` components) at layer ``layer``; once trained, ``basis`` ``(dim,
    width)`` (orthonormal rows) spans its subspace, and ``accuracy`` and ``loss`` are measured on the training
    pairs."""

    node: str
    dim: int
    layer: int
    basis: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    accuracy: float = 0.0
    loss: float = float("inf")


def _searches(subject: Subject, train: _Training, nodes: list[str]) -> list[Search]:
    """Per variable of ``nodes``, a search at each of the ``HOOKS_TRIED`` layers (of at least its width) where a
    least-squares probe of it from the layer's values fits best on the training bases (ties: the first layer)."""
    searches = []
    for node in nodes:
        values = train.base_trace[node].reshape(-1, train.base_trace[node].shape[-1])
        fits = []
        for index, layer in enumerate(train.base_layers):
            if layer.shape[-1] >= values.shape[-1]:
                r2 = fit_probes(layer.reshape(-1, layer.shape[-1]).double().numpy(), values, [values.shape[-1]])[0][0]
                fits.append((-np.nan_to_num(r2, nan=-1.0), index))
        if not fits:
            raise LsrlError(f"das: no layer of {subject.task}/{subject.arch} has {values.shape[-1]} units for "
                            f"variable {node!r}")
        searches += [Search(node, values.shape[-1], index) for _, index in sorted(fits)[:HOOKS_TRIED]]
    return searches


def _learn(subject: Subject, train: _Training, searches: list[Search], seed: int, steps: int) -> list[Search]:
    """Every search trained at once (``steps`` Adam steps; one rotation each, so they do not interact), one batch of
    their interchanges per step; the searches with their bases, training accuracy and loss."""
    expected = torch.as_tensor(np.stack([train.counterfactual(subject, search.node) for search in searches]))
    torch.manual_seed(seed)
    widths = [train.base_layers[search.layer].shape[-1] for search in searches]
    rotations = torch.nn.ModuleList([orthogonal(torch.nn.Linear(width, width, bias=False, dtype=torch.float64))
                                     for width in widths])
    optimizer = torch.optim.Adam(rotations.parameters(), lr=LEARNING_RATE)

    def trained(bases: list[torch.Tensor]) -> list[Search]:
        return [replace(search, basis=basis) for search, basis in zip(searches, bases)]

    for _ in range(steps):
        bases = [_weight(rotation)[: search.dim] for rotation, search in zip(rotations, searches)]
        outputs = interchanged(subject, train.base, train.source_layers, trained(bases))
        loss = ((outputs.reshape(expected.shape) - expected) ** 2).flatten(1).mean(dim=1).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        learned = trained([_weight(rotation)[: search.dim].detach() for rotation, search in zip(rotations, searches)])
        outputs = interchanged(subject, train.base, train.source_layers, learned).reshape(expected.shape)
    losses = ((outputs - expected) ** 2).flatten(1).mean(dim=1)
    accuracies = agrees(outputs.numpy(), expected.numpy()).reshape(len(searches), -1).mean(axis=1)
    return [replace(search, accuracy=float(accuracy), loss=float(loss))
            for search, accuracy, loss in zip(learned, accuracies, losses)]


def _weight(rotation: torch.nn.Module) -> torch.Tensor:
    """The orthogonal matrix of a parametrized ``Linear``."""
    return cast(torch.Tensor, rotation.weight)


def _best(searches: list[Search]) -> list[Search]:
    """Per variable, its search of the highest training accuracy, then the lowest loss (to ``LOSS_DIGITS``; ties:
    the first, best-probed layer)."""
    best: dict[str, Search] = {}
    for search in searches:
        held = best.get(search.node)
        if held is None or _rank(search) > _rank(held):
            best[search.node] = search
    return list(best.values())


def _rank(search: Search) -> tuple[float, float]:
    return search.accuracy, -round(search.loss, LOSS_DIGITS)


@dataclass
class _Subspaces(Intervention):
    """Interchanges at one layer for a batch of searches: the batch rows ``batch`` (``len(projectors)`` blocks of ``N``
    sequences) have the subspace of their block's projector ``(width, width)`` set to ``source`` ``(N, T,
    width)``."""

    batch: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    projectors: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    source: torch.Tensor = field(default_factory=lambda: torch.zeros(0))

    def apply(self, out: torch.Tensor, t: int | None = None) -> torch.Tensor:
        source = (self.source if t is None else self.source[:, t]).to(out.dtype)
        mine = out[self.batch].reshape(len(self.projectors), *source.shape)
        change = (source - mine).flatten(1, -2) @ self.projectors.to(out.dtype)
        return out.index_copy(0, self.batch, (mine + change.reshape(mine.shape)).flatten(0, 1))


def interchanged(subject: Subject, xs: np.ndarray, source: list[torch.Tensor], searches: list[Search]
                 ) -> torch.Tensor:
    """The task outputs ``(len(searches) * N, T, d_out)`` on ``xs`` ``(N, T, d_in)`` repeated once per search,
    each copy with its search's subspace (``basis``) of its layer set, at every step inside the recurrence, to its
    values in ``source`` (every layer's values on the sources)."""
    count = xs.shape[0]
    interventions: dict[int, Intervention] = {}
    for layer in sorted({search.layer for search in searches}):
        blocks = [k for k, search in enumerate(searches) if search.layer == layer]
        batch = torch.cat([torch.arange(k * count, (k + 1) * count) for k in blocks])
        projectors = torch.stack([searches[k].basis.T @ searches[k].basis for k in blocks])
        interventions[layer] = _Subspaces(batch=batch, projectors=projectors, source=source[layer])
    return subject.run(np.concatenate([xs] * len(searches)), interventions)[0]


def interchange_equivalent(subject: Subject, train: _Training, node: str, layer: int) -> list[str]:
    """``node`` and the variables labelled at ``layer`` whose interchange the program answers as ``node``'s: the
    same counterfactual outputs on every training pair (copies of its value, functions of it that determine it
    at each step): an interchange of their units is one of ``node``."""
    held = {label.node for label in subject.labels[layer] if holds(label) and label.node in train.source_trace}
    held.discard(node)
    expected = train.counterfactual(subject, node)
    return [node, *(other for other in sorted(held)
                    if np.allclose(train.counterfactual(subject, other), expected, rtol=0, atol=1e-9))]


def overlap_with_labels(subject: Subject, layer: int, nodes: list[str], basis: np.ndarray) -> float:
    """The mean squared cosine of the principal angles between the subspace spanned by ``basis``'s rows
    (orthonormal ``(k, width)``, in layer ``layer``'s own coordinates) and the span of the units ``labels.json``
    names one of ``nodes`` there: the share of the subspace inside the labelled one (0 where the layer holds no
    unit of ``nodes``)."""
    held = [unit for unit, label in enumerate(subject.labels[layer]) if holds(label) and label.node in nodes]
    return min(_captured(basis, _coordinates(subject, layer, held)) / basis.shape[0], 1.0)


def _captured(basis: np.ndarray, columns: np.ndarray) -> float:
    """``||basis P||^2``, ``P`` the orthogonal projector onto the span of ``columns`` ``(width, m)``."""
    if columns.shape[1] == 0:
        return 0.0
    left, singular, _ = np.linalg.svd(columns, full_matrices=False)
    span = left[:, singular > 1e-9 * singular.max()]
    return float(((basis @ span) ** 2).sum())


def _coordinates(subject: Subject, layer: int, units: list[int]) -> np.ndarray:
    """Labelled units ``units`` of layer ``layer`` as directions of the layer's own coordinates, columns ``(width,
    m)``: a rotated path layer's ``Q[:, u]`` (``bases``); at a rotated hook (``HookRotation``) a coordinate ``k`` is
    ``Q[j, k]`` at ``units[j]`` (minus at ``negative[j]``), its negative-part unit adds nothing; else ``e_u``."""
    basis = subject.bases[layer]
    if basis is not None:
        return np.asarray(basis, dtype=np.float64)[:, units]
    rotation = subject.rotations.get(subject.hooks[layer]) if isinstance(subject, HookedSubject) else None
    identity = np.eye(subject.widths[layer])
    if rotation is None:
        return identity[:, units]
    signed = identity[:, list(rotation.units)]
    split = [k for k, unit in enumerate(rotation.negative) if unit is not None]
    signed[:, split] -= identity[:, [unit for unit in rotation.negative if unit is not None]]
    turned = signed @ rotation.Q.astype(np.float64)  # column k: coordinate k's direction
    where = {unit: k for k, unit in enumerate(rotation.units)}
    negative = {unit for unit in rotation.negative if unit is not None}
    columns = [turned[:, where[unit]] if unit in where else identity[:, unit] for unit in units
               if unit not in negative]
    return np.stack(columns, axis=1) if columns else np.zeros((subject.widths[layer], 0))
