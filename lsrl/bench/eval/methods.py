"""The methods the harness scores, each ``method(subject, pairs) -> Found``.

Every method sees only the model's activations and gradients (``PATH_METHODS``: the path model's weights; the
edge-level ones: the unit edges, ``Subject.edges``) on the fixed clean / corrupted input pairs of the task's
``data.npz`` (``Pairs.from_data``: half of equal lengths, half of different ones; the outputs' changes counted over
the clean sequences' steps) and, for probes, the variables' values the program computes: never the labels' truth.
Every method but those of ``PATH_METHODS`` runs on every subject: a path model, a hooked torch target, a trained
model (whose unit edges are not known: no edge scores).

* ``activation_patching`` (``resample``, ``mean``, ``zero``): each unit in turn set, at every step and
  inside the recurrence, to its value on the corrupted input, its mean over the inputs, or 0; a
  unit's score is the mean absolute change of the task outputs.
* ``attribution_patching``: the first-order estimate of resample patching from one backward pass:
  ``|sum_t dL/da_t (a_t(corrupted) - a_t(clean))|`` with ``L`` the outputs' projection on their change
  under the corrupted input (the whole input's change of ``L``: the sum of the outputs' squared changes).
* ``probe``: per program variable, a least-squares affine probe from each layer's units, fitted on every other
  sequence and its R^2 measured on the others (a probe wider than its data would fit anything); in the layer
  where it fits best, the probe's subspace is patched from the corrupted run (a variable-level interchange); the
  score is the change of the outputs where R^2 >= ``R2_FOUND`` (the variable found; 0 where not), and the
  interchange accuracy, of every variable some probe predicts (R^2 > 0), the share of outputs that, rounded,
  equal the program's own interchange of that variable (``agrees``): a correlational subspace, as DAS's is a
  causal one.
* ``path_patching``: per edge (non-zero weight), the receiver reads the sender's corrupted value
  through that weight only; the score is the change of the outputs (edge level).
* ``acdc``: ACDC's greedy edge pruning (Conmy et al., 2023): from the output layer down, each edge (non-zero
  weight) in turn is removed, its receiver reading the sender's corrupted value through it (and the edges
  removed before it stay removed); the removal is kept when the outputs move from the full model's by less than
  the threshold more than they did before it. An edge's score is that increase (edge level).
* ``edge_attribution``: edge attribution patching (Syed et al., 2023), the first-order estimate of patching one
  edge: ``|sum_t dL/da_v(t) da_v(t)/da_u(t') (a_u(t')(corrupted) - a_u(t')(clean))|`` with ``da_v/da_u`` the
  receiver's direct derivative in its sender, through no other layer (edge level; a torch target's edges pass
  through its gates).
* ``das``: Distributed Alignment Search, per program variable a learned orthogonal rotation of one layer whose
  first coordinates are interchanged from the corrupted run (``lsrl.bench.eval.das``; variable level, with the
  overlap of the subspace found with the labelled one).
* ``random``: uniform random scores (the chance baseline).

A method calls a candidate in the circuit when its score is above ``pairs.effect_threshold``: any effect above float64
noise on a compiled model, at least ``EFFECT_FRACTION`` of the whole corrupted input's effect on a trained one.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import torch

from lsrl.bench.eval.das import das
from lsrl.bench.eval.pairs import (EFFECT_THRESHOLD, Found, Pairs, agrees, effect_threshold, fit_probes, held_trace,
                                   output_changes, program_interchange, whole_change)
from lsrl.bench.eval.subject import Edge, Intervention, Layer, PathSubject, Subject
from lsrl.errors import LsrlError
from lsrl.kinds import Kind

ROWS = 8192  # rows (units x pairs) per batched forward
R2_FOUND = 0.99  # a probe fitting at least this well has found its variable


def _chunks(items: list, per_chunk: int) -> list[list]:
    return [items[i:i + per_chunk] for i in range(0, len(items), max(per_chunk, 1))]


def _patched_effects(subject: Subject, pairs: Pairs, layer: int, make: Callable[[list], Intervention],
                     items: list) -> np.ndarray:
    """The output change of each of ``items``, each made an intervention on ``layer`` by ``make`` (a chunk
    of items -> one intervention on ``len(chunk) * P`` rows), the layers below it run once."""
    count = pairs.clean.shape[0]
    effects = []
    with torch.no_grad():
        for chunk in _chunks(items, ROWS // count):
            outputs = subject.patched(pairs, layer, make(chunk), len(chunk))
            effects.append(output_changes(outputs, pairs))
    return np.concatenate(effects) if effects else np.zeros(0)


def _by_layer(subject: Subject) -> dict[int, list[int]]:
    """Candidate positions grouped by their layer."""
    groups: dict[int, list[int]] = {}
    for position, candidate in enumerate(subject.candidates):
        groups.setdefault(candidate.layer, []).append(position)
    return groups


def activation_patching(subject: Subject, pairs: Pairs, source: str) -> Found:
    """Unit-level patching with the corrupted value (``"resample"``), the mean or zero (module docstring)."""
    count = pairs.clean.shape[0]
    scores = np.zeros(len(subject.candidates))
    for layer, positions in _by_layer(subject).items():
        clean = pairs.clean_layers[layer]
        if source == "resample":
            values = pairs.corrupt_layers[layer]
        elif source == "mean":
            values = torch.cat([clean, pairs.corrupt_layers[layer]]).mean(dim=0, keepdim=True).expand_as(clean)
        else:
            values = torch.zeros_like(clean)

        def make(chunk: list[int], values: torch.Tensor = values, width: int = clean.shape[-1]) -> Intervention:
            mask = torch.zeros(len(chunk), width, dtype=torch.float64)
            mask[torch.arange(len(chunk)), [subject.candidates[p].unit for p in chunk]] = 1
            return Intervention(values=values.repeat(len(chunk), 1, 1), mask=mask.repeat_interleave(count, dim=0))

        scores[positions] = _patched_effects(subject, pairs, layer, make, positions)
    return Found(effect_threshold(subject, whole_change(pairs)), units=scores)


def _path_model(subject: Subject, method: str) -> PathSubject:
    """``subject``, which ``method`` (of ``PATH_METHODS``) needs to be a path model."""
    if not isinstance(subject, PathSubject):
        raise LsrlError(f"method {method!r} needs the path model's weights, whose entries are the edges between "
                        f"units; {subject.task}/{subject.arch} is a {subject.tier} {type(subject).__name__} (gated "
                        f"cells: a unit's input is no sum of its senders' edges): use {', '.join(ANY_MODEL_METHODS)} "
                        "(edge level: edge_attribution)")
    return subject


def _output_gradients(subject: Subject, pairs: Pairs) -> list[torch.Tensor]:
    """Per layer, ``dL/da`` ``(P, T, width)`` on the clean inputs: ``L`` the outputs' projection on their change under
    the corrupted inputs, ``a`` the layer's values at each step (0 where the outputs do not read a layer)."""
    deltas = [torch.zeros_like(layer, requires_grad=True) for layer in pairs.clean_layers]
    outputs, _ = subject.run(pairs.clean, {index: Intervention(delta=delta) for index, delta in enumerate(deltas)})
    direction = ((pairs.corrupt_outputs - pairs.clean_outputs) * pairs.real).detach()
    (outputs * direction).sum().backward()
    return [delta.grad if delta.grad is not None else torch.zeros_like(delta) for delta in deltas]


def attribution_patching(subject: Subject, pairs: Pairs) -> Found:
    """Gradient times activation difference (module docstring)."""
    gradients = _output_gradients(subject, pairs)
    scores = np.zeros(len(subject.candidates))
    for position, candidate in enumerate(subject.candidates):
        layer, unit = candidate.layer, candidate.unit
        difference = pairs.corrupt_layers[layer][..., unit] - pairs.clean_layers[layer][..., unit]
        per_pair = (gradients[layer][..., unit] * difference).sum(dim=1).abs()
        scores[position] = float(per_pair.mean())
    whole = float(((pairs.corrupt_outputs - pairs.clean_outputs) ** 2 * pairs.real).sum(dim=(1, 2)).mean())
    return Found(effect_threshold(subject, whole), units=scores)  # whole: the estimate's own for the whole input


@dataclass
class _Cut(Intervention):
    """Keeps each value a layer computes (``computed``) and hands a fresh leaf on in its place (``leaves``: one per
    step inside a recurrence, one for a whole sequence): a gradient of a layer's values then stops at the values it
    reads directly, its edges' direct derivatives."""

    computed: list[torch.Tensor] = field(default_factory=list)
    leaves: list[torch.Tensor] = field(default_factory=list)

    def apply(self, out: torch.Tensor, t: int | None = None) -> torch.Tensor:
        self.computed.append(out)
        self.leaves.append(out.detach().requires_grad_())
        return self.leaves[-1]

    def stacked(self, parts: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """``parts`` (one per leaf; None: 0) as one ``(P, T, width)`` tensor."""
        given = [torch.zeros_like(leaf) if part is None else part for part, leaf in zip(parts, self.leaves)]
        return given[0] if len(given) == 1 and given[0].dim() == 3 else torch.stack(given, dim=1)


def edge_attribution(subject: Subject, pairs: Pairs) -> Found:
    """Edge attribution patching (Syed et al., 2023): per edge, ``|sum_t dL/da_v(t) * da_v(t)/da_u(t') * (a_u(t')
    (corrupted) - a_u(t')(clean))|`` (per pair, averaged), ``L`` as for attribution patching and ``da_v/da_u`` the
    receiver's direct derivative in its sender (through no other layer), on the clean inputs: the first-order
    estimate of patching the edge alone, from one backward pass per receiver unit. Any model whose unit edges are
    known (``Subject.edges``)."""
    edges = subject.edges()
    if not edges:
        raise LsrlError(f"method 'edge_attribution' needs the model's unit edges; none are known of {subject.task}/"
                        f"{subject.arch} (a {subject.tier} model: every weight of a trained model is non-zero)")
    gradients = _output_gradients(subject, pairs)
    cuts = [_Cut() for _ in pairs.clean_layers]
    model_input = pairs.layer_input(subject, 0).clone().requires_grad_()
    subject.run(model_input, dict(enumerate(cuts)))
    computed = [cut.stacked(cut.computed) for cut in cuts]
    changes = [pairs.layer_input(subject, 0, corrupted=True) - pairs.layer_input(subject, 0),
               *(corrupt - clean for corrupt, clean in zip(pairs.corrupt_layers, pairs.clean_layers))]
    leaves = [[model_input], *(cut.leaves for cut in cuts)]  # per source layer + 1 (0: the model's input)
    scores = np.zeros(len(edges))
    by_receiver: dict[tuple[int, int], list[int]] = {}
    for position, edge in enumerate(edges):
        by_receiver.setdefault((edge.layer, edge.receiver), []).append(position)
    for (layer, unit), positions in by_receiver.items():
        sources = sorted({edges[position].source for position in positions})  # only the layers it reads directly
        reads = torch.autograd.grad((computed[layer][..., unit] * gradients[layer][..., unit]).sum(),
                                    [leaf for source in sources for leaf in leaves[source + 1]],
                                    allow_unused=True, retain_graph=True)
        derivatives: dict[int, torch.Tensor | None] = {}
        start = 0
        for source in sources:
            part = list(reads[start:start + len(leaves[source + 1])])
            derivatives[source] = part[0] if source < 0 else cuts[source].stacked(part)
            start += len(part)
        for position in positions:
            edge = edges[position]
            through = derivatives[edge.source]
            if through is None:  # the model's input, where a stepped model reads tokens: no derivative
                continue
            per_pair = (through[..., edge.sender] * changes[edge.source + 1][..., edge.sender]).sum(dim=1)
            scores[position] = float(per_pair.abs().mean())
    return Found(EFFECT_THRESHOLD, edges=scores)


def _edge_drive(subject: PathSubject, pairs: Pairs, edge: Edge) -> torch.Tensor:
    """What the edge adds to its receiver's input when its sender takes the corrupted value: ``(P, T)``."""
    if edge.kind == "recurrent":  # the sender's previous state; s_0 is the same in both runs
        def previous(states: torch.Tensor) -> torch.Tensor:
            states = states[..., edge.sender]
            return torch.cat([torch.zeros_like(states[:, :1]), states[:, :-1]], dim=1)

        change = previous(pairs.corrupt_layers[edge.layer]) - previous(pairs.clean_layers[edge.layer])
    else:
        change = (pairs.layer_input(subject, edge.layer, corrupted=True)[..., edge.sender]
                  - pairs.layer_input(subject, edge.layer)[..., edge.sender])
    return edge.weight * change


def path_patching(subject: Subject, pairs: Pairs) -> Found:
    """Edge-level patching: the sender's corrupted value reaches the receiver through this edge only."""
    subject = _path_model(subject, "path_patching")
    edges = subject.edges()
    count = pairs.clean.shape[0]
    scores = np.zeros(len(edges))
    groups: dict[int, list[int]] = {}
    for position, edge in enumerate(edges):
        groups.setdefault(edge.layer, []).append(position)
    for layer, positions in groups.items():
        width = pairs.clean_layers[layer].shape[-1]

        def make(chunk: list[int], width: int = width) -> Intervention:
            delta = torch.zeros(len(chunk), count, pairs.clean.shape[1], width, dtype=torch.float64)
            for row, position in enumerate(chunk):
                delta[row, :, :, edges[position].receiver] = _edge_drive(subject, pairs, edges[position])
            return Intervention(delta=delta.reshape(-1, *delta.shape[2:]))

        scores[positions] = _patched_effects(subject, pairs, layer, make, positions)
    return Found(EFFECT_THRESHOLD, edges=scores)


def _edge_weights(layer: Layer, removed: list[Edge]) -> tuple[Layer, dict[str, torch.Tensor]]:
    """``layer`` without the ``removed`` edges into it, and those edges' weights (``{"A" or "B": removed part}``)."""
    kept = {name: weight.clone() for name, weight in layer.weights.items()}
    cut: dict[str, torch.Tensor] = {name: torch.zeros_like(kept[name]) for name in ("A", "B") if name in kept}
    for edge in removed:
        name = "A" if layer.kind is Kind.LINEAR or edge.kind == "recurrent" else "B"
        cut[name][edge.receiver, edge.sender] = kept[name][edge.receiver, edge.sender]
        kept[name][edge.receiver, edge.sender] = 0.0
    return Layer(layer.kind, kept), cut


def _corrupted_drive(subject: PathSubject, pairs: Pairs, index: int, cut: dict[str, torch.Tensor]) -> torch.Tensor:
    """What the removed edges into layer ``index`` add to it: their senders' corrupted values through the removed
    weights (for a state layer, the previous corrupted state through the removed recurrent weights, added at each
    step before the state is carried)."""
    below = pairs.layer_input(subject, index, corrupted=True)
    if subject.layers[index].kind is Kind.LINEAR:
        return below @ cut["A"].T
    states = pairs.corrupt_layers[index]
    previous = torch.cat([subject.layers[index].weights["s0"].expand(states.shape[0], 1, -1), states[:, :-1]], dim=1)
    return previous @ cut["A"].T + below @ cut["B"].T


def pruned_outputs(subject: PathSubject, pairs: Pairs, removed: dict[int, list[Edge]], start: int = 0) -> torch.Tensor:
    """The task outputs on the clean inputs with the ``removed`` edges (``{layer: edges into it}``) reading their
    senders' corrupted values; ``start``: no edge below this layer is removed (those layers are not run again)."""
    layers, interventions = list(subject.layers), {}
    for index, edges in removed.items():
        if edges:
            layers[index], cut = _edge_weights(subject.layers[index], edges)
            interventions[index] = Intervention(delta=_corrupted_drive(subject, pairs, index, cut))
    below = torch.as_tensor(pairs.clean) if start == 0 else pairs.clean_layers[start - 1]
    with torch.no_grad():
        return replace(subject, layers=layers).run(below, interventions, start=start)[0]


def acdc(subject: Subject, pairs: Pairs) -> Found:
    """ACDC's greedy edge pruning (module docstring), from the output layer down."""
    subject = _path_model(subject, "acdc")
    edges = subject.edges()
    scores = np.zeros(len(edges))
    removed: dict[int, list[Edge]] = {}
    current = 0.0  # the outputs' change from the full model's, with the edges removed so far
    for position in sorted(range(len(edges)), key=lambda p: (-edges[p].layer, edges[p].receiver, edges[p].kind)):
        edge = edges[position]
        trial = {**removed, edge.layer: [*removed.get(edge.layer, []), edge]}
        effect = float(output_changes(pruned_outputs(subject, pairs, trial, start=edge.layer), pairs)[0])
        scores[position] = effect - current
        if scores[position] <= EFFECT_THRESHOLD:  # the edge does not matter (given those removed): it stays out
            current, removed = effect, trial
    return Found(EFFECT_THRESHOLD, edges=scores)


def _projector(weights: np.ndarray) -> torch.Tensor:
    """The orthogonal projector onto the row space of ``weights``."""
    _, singular, rows = np.linalg.svd(weights, full_matrices=False)
    basis = rows[singular > 1e-9 * max(singular.max(initial=0), 1e-300)]
    return torch.as_tensor(basis.T @ basis)


def probe(subject: Subject, pairs: Pairs) -> Found:
    """Variable-level probes and their interchange (module docstring)."""
    clean_trace = subject.program.trace(pairs.clean, check_bounds=False)
    corrupt_trace = held_trace(subject, pairs)
    nodes = [node for node in subject.nodes if node in clean_trace]  # a pseudo-variable (free units) has no values
    sequences, steps = 2 * pairs.clean.shape[0], pairs.clean.shape[1]
    real = np.concatenate([pairs.real.numpy()[..., 0]] * 2).reshape(-1) > 0  # fit on the clean steps only
    held_out = np.repeat(np.arange(sequences) % 2 == 1, steps)[real]  # every other sequence measures the fit
    targets = np.concatenate([np.concatenate([clean_trace[n], corrupt_trace[n]]).reshape(-1, clean_trace[n].shape[-1])
                              for n in nodes], axis=1)[real]
    widths = [clean_trace[n].shape[-1] for n in nodes]
    fits = [fit_probes(torch.cat([c, k]).reshape(-1, c.shape[-1]).numpy()[real], targets, widths, held_out)
            for c, k in zip(pairs.clean_layers, pairs.corrupt_layers)]
    r2 = np.nan_to_num(np.stack([fit[0] for fit in fits]), nan=-1.0)  # (layers, nodes)
    scores, interchange = dict.fromkeys(subject.nodes, 0.0), {}
    for column, node in enumerate(nodes):
        best = int(np.argmax(r2[:, column]))  # the first layer of the best fit
        if r2[best, column] <= 0:  # no probe predicts it better than its mean: no subspace to interchange
            continue
        intervention = Intervention(values=pairs.corrupt_layers[best], projector=_projector(fits[best][1][column]))
        with torch.no_grad():
            outputs = subject.patched(pairs, best, intervention, 1)
        if r2[best, column] >= R2_FOUND:
            scores[node] = float(output_changes(outputs, pairs)[0])
        equal = agrees(outputs.numpy(), program_interchange(subject, pairs, node, corrupt_trace))
        interchange[node] = float(equal[pairs.real.numpy()[..., 0] > 0].mean())
    return Found(effect_threshold(subject, whole_change(pairs)), nodes=scores, interchange=interchange)


def random_scores(subject: Subject, pairs: Pairs, seed: int | None = None) -> Found:
    """Uniform random scores for every candidate, variable and edge (of a model whose edges are known); the seed
    defaults to one drawn from the subject's name, so that models of one size do not share a draw."""
    if seed is None:
        seed = zlib.crc32(f"{subject.task}/{subject.tier}/{subject.arch}".encode())
    rng = np.random.default_rng(seed)
    nodes = {node: float(rng.random()) for node in subject.nodes}
    known = subject.edges()
    edges = rng.random(len(known)) if known else None
    return Found(0.5, units=rng.random(len(subject.candidates)), nodes=nodes, edges=edges)


PATH_METHODS = ("path_patching", "acdc")  # path models only: they patch its weights, the edges between units
METHODS: dict[str, Callable[[Subject, Pairs], Found]] = {
    "resample": lambda subject, pairs: activation_patching(subject, pairs, "resample"),
    "mean": lambda subject, pairs: activation_patching(subject, pairs, "mean"),
    "zero": lambda subject, pairs: activation_patching(subject, pairs, "zero"),
    "attribution": attribution_patching,
    "probe": probe,
    "path_patching": path_patching,
    "acdc": acdc,
    "edge_attribution": edge_attribution,
    "das": das,
    "random": random_scores,
}
ANY_MODEL_METHODS = tuple(method for method in METHODS if method not in PATH_METHODS)  # any subject
