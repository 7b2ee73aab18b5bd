"""The tiers of the benchmark beside the compiled one: the same task, harder to read.

* ``"distractors"``: the task's program plus the programs of other tasks that read the same input
  (``distractor_tasks``), compiled together; the model outputs only ``task_output`` (a final
  selection layer drops the distractors' own outputs). The distractors' units are active and reach the
  output, but only through gates shut on every input (``distractor_gates``): the task's output plus, per
  component ``v`` of a distractor task's circuit variable with a finite lower bound ``lo`` (the sound
  ``lsrl.lang.bounds.value_bounds``), ``ReLU(1 - 2 ReLU(v - lo + 1))``, identically 0 (under a finite upper
  bound ``hi`` where it has no lower one, ``ReLU(hi - v + 1)`` inside). Values inside
  the distractors' bounds change nothing, so they are the true negatives of circuit discovery; a value
  no input gives (0 for the raised ``ReLU(v - lo + 1)``, at least 1 on every input) opens a gate and
  moves the output: zero ablation calling it relevant is a false positive by construction. The nodes
  are named ``distractor.<task>.<node>``, the leak's ``distractor.<task>.<node>.shifted`` /
  ``.raised`` / ``.below`` / ``.gate``, the task's output plus the gates ``TASK_OUTPUT``.
* ``"rotated"``: the distractor model without the leak (``unrotated_model``: its distractors reach the
  output by no path) after an exact change of basis of every layer that a linear layer reads (``rotate``):
  each such layer's outputs are ``Q h`` for a rational orthogonal ``Q``, and its readers take ``Q^T`` in.
  The outputs are unchanged (bit-identical on the exact backend); a unit label now names a direction,
  column ``u`` of ``Q`` for unit ``u``, and a variable's ground truth is the subspace its units span.
* ``"compiled"``: the task's compiled model itself.
* ``"trained"`` (``FOLDER_TIERS`` only, not a ``tier_model``): stock LSTM / GRU trained towards the program's
  causal graph (``lsrl.bench.training``); every program task with named circuit variables has it, the suite
  builds it for ``TASKS_TRAINED``.

``tier_model(task, tier)`` builds one; every tier keeps the unit labels of the compiled model.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import gmpy2
import numpy as np

import lsrl
from lsrl.bench.tasks import TASKS, Task, TokenSampler, task_program
from lsrl.errors import InternalError, LsrlError
from lsrl.ir.labels import copy_of
from lsrl.kinds import Kind
from lsrl.lang.bounds import INF, value_bounds
from lsrl.lang.nodes import Concat, Linear, LinState, Multi, Node, ReLU
from lsrl.lang.program import ForEach
from lsrl.model import CompiledProgram
from lsrl.numbers import EXACT, Matrix

TIERS = ("compiled", "distractors", "rotated")  # the tiers of exact models (tier_model)
FOLDER_TIERS = (*TIERS, "trained")  # the tiers of suite folders (lsrl bench build --tier)
TASKS_TRAINED = ("count_ones", "majority", "paren_depth", "at_least_3_ones", "seen_token_3", "all_ones",
                 "equal_counts", "count_token_2", "first_token_1", "copy_delay_1")  # small circuits: CPU minutes
DISTRACTOR_PREFIX = "distractor."
TASK_OUTPUT = "task_output"  # the distractor program's node the model outputs: the task's output plus the shut gates
DISTRACTORS_PER_TASK = 2
ROTATION_ROUNDS = 3  # rounds of random pairings: each coordinate of a rotated layer mixes up to 2**3 units
PYTHAGOREAN = ((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29))  # cos = a/c, sin = b/c: exact


@dataclass(frozen=True)
class TierModel:
    """A tier of a task: the compiled ``model``; the ``program`` it runs (its outputs: the task's first
    ``output_dim``, then the distractors'); ``bases``: per layer, the rotation ``Q`` of its outputs
    (an exact ``Matrix``) or None where the layer is not rotated."""

    task: str
    tier: str
    model: CompiledProgram
    program: ForEach
    output_dim: int
    bases: tuple[Matrix | None, ...]

    def task_outputs(self, xs: np.ndarray, exact: bool = False, patch: dict | None = None) -> np.ndarray:
        """The interpreter's task outputs (the distractors' columns dropped)."""
        return self.program(xs, exact=exact, patch=patch)[..., : self.output_dim]


def _token_range(task: Task) -> int | None:
    return task.sample.largest if isinstance(task.sample, TokenSampler) else None


def _token_peers(task: Task) -> list[str]:
    """The other program tasks that read the same tokens as ``task`` (none if it is no token program)."""
    largest = _token_range(task)
    if task.build is None or largest is None:
        return []
    return sorted(other for other, candidate in TASKS.items()
                  if other != task.name and candidate.build is not None and _token_range(candidate) == largest)


def has_tier(name: str, tier: str) -> bool:
    """Whether task ``name`` has tier ``tier`` (of ``FOLDER_TIERS``): every task its compiled one, token programs
    with enough peers (``distractor_tasks``) the distractor and rotated ones, program tasks with named circuit
    variables the trained one."""
    if tier == "trained":
        return bool(TASKS[name].circuit_nodes())
    return tier == "compiled" or (tier in TIERS and len(_token_peers(TASKS[name])) >= DISTRACTORS_PER_TASK)


def distractor_tasks(name: str, count: int = DISTRACTORS_PER_TASK) -> tuple[str, ...]:
    """``count`` other program tasks that read the same tokens as task ``name`` (a fixed choice)."""
    task = TASKS[name]
    largest = _token_range(task)
    if task.build is None or largest is None:
        raise LsrlError(f"task {name!r} has no distractor tier: only token programs have one (tasks of one "
                        f"integer token per step)")
    others = _token_peers(task)
    if len(others) < count:
        raise LsrlError(f"task {name!r}: only {len(others)} other tasks read tokens 0..{largest}, {count} needed")
    start = zlib.crc32(name.encode()) % len(others)
    return tuple((others * 2)[start:start + count])


def distractor_program(name: str, leak: bool = True) -> ForEach:
    """Task ``name``'s program with the programs of ``distractor_tasks(name)`` reading its input: the
    output is ``TASK_OUTPUT`` (the task's output plus the distractors' gates, ``leaky_output``: equal to the
    task's output on every input), then each distractor's output; without ``leak`` (the rotated tier's), the task's
    output itself, the distractors reaching it by no path."""
    program = task_program(name)
    outputs, gates = [], []
    for other in distractor_tasks(name):
        extra = task_program(other)
        distractors = [node for node in extra.nodes if node is not extra.input]
        for node in distractors:
            node.replace_input(extra.input, program.input)
            node.name, node.named = f"{DISTRACTOR_PREFIX}{other}.{extra.names[node]}", True
        outputs.append(extra.output)
        if leak:
            gates += distractor_gates(distractors, [extra.names[node] for node in distractors], TASKS[other].circuit)
    if not leak:
        return ForEach(Concat([program.output, *outputs]), name=f"{program.name}+distractors")
    if not gates:
        raise InternalError(f"bench: no distractor of task {name!r} has a value with a finite bound to gate")
    return ForEach(Concat([leaky_output(program.output, gates), *outputs]), name=f"{program.name}+distractors")


def distractor_gates(nodes: list[Node], names: list[str], circuit: tuple[str, ...]) -> list[Node]:
    """The gates (``leak_gates``) of a distractor task's ``nodes`` (``names``: its own names of them) once they read
    the task's input: those of its circuit variables (``circuit``), or where none of these has a finite bound,
    those of every node but a Concat (which holds its parts' values)."""
    variables = [leak_gates(node) for node, name in zip(nodes, names) if name in circuit]
    gates = [gate for gate in variables if gate is not None]
    if not gates:
        others = [leak_gates(node) for node in nodes if not isinstance(node, Concat)]
        gates = [gate for gate in others if gate is not None]
    return gates


def leak_gates(node: Node) -> Node | None:
    """The gates of distractor node ``node`` (None where it has none): per component ``v`` that is not constant and
    has a finite bound (``value_bounds``, sound on every input), ``raised = ReLU(v - lo + 1)`` over its lower bound
    ``lo`` (else ``ReLU(hi - v + 1)`` under its upper one), at least 1 on every input (a ReLU, so that it has units
    of its own), and ``gate = ReLU(1 - 2 raised)``, at most -1 before its ReLU, so 0 on every input with room for a
    float target's rounding; 1 where ``raised`` is 0."""
    low, high = value_bounds(node)
    distance = {}  # component -> (sign, offset): raised = ReLU(sign v + offset)
    for i, (lo, hi) in enumerate(zip(low, high)):
        if lo != hi:  # a constant, which no interchange moves, gets none
            if lo != -INF:
                distance[i] = (1, 1 - lo)
            elif hi != INF:
                distance[i] = (-1, 1 + hi)
    if not distance:
        return None
    kept = len(distance)
    signs = EXACT.from_entries(((k, i, sign) for k, (i, (sign, _)) in enumerate(distance.items())), (kept, node.dim))
    offsets = EXACT.from_entries(((k, 0, offset) for k, (_, offset) in enumerate(distance.values())), (kept, 1),
                                 is_vector=True)
    raised = ReLU(Linear(node, signs, offsets, name=f"{node.name}.shifted"), name=f"{node.name}.raised")
    below = Linear(raised, EXACT.eye(kept, -2), EXACT.constant_vector(kept, 1), name=f"{node.name}.below")
    return ReLU(below, name=f"{node.name}.gate")


def leaky_output(task_out: Node, gates: list[Node]) -> Node:
    """``TASK_OUTPUT``: ``task_out`` plus the sum of ``gates`` (every one 0 on every input) in each component, so
    the distractors reach the output structurally, and only through gates shut on every input."""
    shut = Concat(gates, name=f"{DISTRACTOR_PREFIX}gates")
    width = task_out.dim
    weights = EXACT.from_entries([(i, i, 1) for i in range(width)]
                                 + [(i, width + j, 1) for i in range(width) for j in range(shut.dim)],
                                 (width, width + shut.dim))
    return Linear(Concat([task_out, shut]), weights, name=TASK_OUTPUT)


def with_outputs(model: CompiledProgram, count: int) -> CompiledProgram:
    """``model`` followed by a layer that keeps its first ``count`` outputs (labels: copies of theirs)."""
    last = model.layers[-1]
    if model.labels is None:
        raise InternalError(f"bench: the tier model {model.name!r} has no unit labels")
    keep = Linear(last, EXACT.selection(range(count), last.dim), name=f"{model.name}.outputs")
    labels = model.labels + [[copy_of(label) for label in model.labels[-1][:count]]]
    kept = CompiledProgram(model.input, model.layers + [keep], model.backend, model.stats, model.name, labels)
    kept.entangled = model.entangled
    return kept


# ---- rotations ---------------------------------------------------------------------------------------


def rational_rotation(width: int, rng: np.random.Generator, rounds: int = ROTATION_ROUNDS) -> Matrix:
    """A random exact orthogonal ``width x width`` matrix: ``rounds`` products of plane rotations by
    Pythagorean angles over a random pairing of the coordinates (identity for width 1)."""
    rotation = EXACT.eye(width)
    for _ in range(rounds if width > 1 else 0):
        order = rng.permutation(width)
        entries = [(int(i), int(i), 1) for i in order[2 * (width // 2):]]  # the odd one out stays
        for i, j in zip(order[0:2 * (width // 2):2].tolist(), order[1:2 * (width // 2):2].tolist()):
            a, b, c = PYTHAGOREAN[int(rng.integers(len(PYTHAGOREAN)))]
            cos, sin = gmpy2.mpq(a, c), gmpy2.mpq(b, c) * (1 if rng.integers(2) else -1)
            entries += [(i, i, cos), (i, j, -sin), (j, i, sin), (j, j, cos)]
        rotation = EXACT.from_entries(entries, (width, width)) @ rotation
    return rotation


def rotated_layers(model: CompiledProgram) -> list[int]:
    """The layers ``rotate`` changes the basis of: the Linear and LinState layers read by a Linear or
    LinState layer (a ReLU or a product reads units one by one; the last layer is the output)."""
    linear = (Kind.LINEAR, Kind.LINSTATE)
    layers = model.layers
    return [i for i in range(len(layers) - 1) if layers[i].kind in linear and layers[i + 1].kind in linear]


def rotate(model: CompiledProgram, seed: int) -> tuple[CompiledProgram, tuple[Matrix | None, ...]]:
    """``model`` with the outputs of every layer of ``rotated_layers`` in a new basis, and the rotations:
    layer ``i`` outputs ``Q_i h_i`` where the original outputs ``h_i``; exact on the exact backend."""
    if model.backend != "exact":
        raise LsrlError(f"{model.name}: rotate needs a model compiled with backend='exact'")
    rng = np.random.default_rng(seed)
    chosen = set(rotated_layers(model))
    bases = tuple(rational_rotation(layer.dim, rng) if i in chosen else None
                  for i, layer in enumerate(model.layers))
    layers: list[Node] = []
    below: Node = model.input
    before: Matrix | None = None  # the rotation of the layer read
    for layer, rotation in zip(model.layers, bases):
        layers.append(_rotated(layer, below, rotation, before))
        below, before = layers[-1], rotation
    rotated = CompiledProgram(model.input, layers, model.backend, model.stats, model.name, model.labels)
    rotated.entangled = model.entangled
    return rotated, bases


def _rotated(layer: Node, below: Node, rotation: Matrix | None, before: Matrix | None) -> Node:
    """A copy of ``layer`` reading ``below`` (whose outputs are ``before`` times the original ones), with
    outputs ``rotation`` times the original ones."""
    def outside(matrix: Matrix) -> Matrix:
        return rotation @ matrix if rotation is not None else matrix

    def inside(matrix: Matrix) -> Matrix:
        return matrix @ before.transpose() if before is not None else matrix

    if isinstance(layer, Linear):
        return Linear(below, outside(inside(layer.A)), outside(layer.b), name=layer.name)
    if isinstance(layer, LinState):
        A = outside(layer.A) @ rotation.transpose() if rotation is not None else layer.A
        return LinState(below, A, outside(inside(layer.B)), outside(layer.b), outside(layer.init_state),
                        name=layer.name)
    if before is not None or rotation is not None or not isinstance(layer, (ReLU, Multi)):
        raise LsrlError(f"layer {layer.name!r} ({layer.kind}) reads units one by one: it cannot be rotated")
    return type(layer)(below, name=layer.name)


# ---- tiers ---------------------------------------------------------------------------------------------


def tier_model(name: str, tier: str) -> TierModel:
    """Tier ``tier`` (one of ``TIERS``) of task ``name``, compiled exactly."""
    if name not in TASKS or TASKS[name].build is None:
        raise LsrlError(f"tier_model: {name!r} is not a program task of the suite")
    if tier not in TIERS:
        raise LsrlError(f"tier_model: unknown tier {tier!r}; the tiers are {TIERS}")
    if tier == "compiled":
        program = task_program(name)
        model = lsrl.compile(program, backend="exact")
        return TierModel(name, tier, model, program, program.output.dim, (None,) * len(model.layers))
    if tier == "distractors":
        return _distractor_model(name, leak=True)
    unrotated = unrotated_model(name)
    model, bases = rotate(unrotated.model, seed=zlib.crc32(name.encode()))
    return TierModel(name, tier, model, unrotated.program, unrotated.output_dim, bases)


def unrotated_model(name: str) -> TierModel:
    """The rotated tier's model of task ``name`` before its change of basis, whose circuit is the rotated tier's
    truth: the distractor model without the leak (``distractor_program(name, leak=False)``). A rotated coordinate
    mixes distractor values with others, so setting it to its value on another input takes each distractor value
    it mixes out of its range, where a gate shut on every input opens: the leak's guarantee holds in the labelled
    coordinates only, and the rotated tier, built for subspace methods, has distractors that reach the output by no
    path."""
    return _distractor_model(name, leak=False)


def _distractor_model(name: str, leak: bool) -> TierModel:
    program = distractor_program(name, leak)
    output_dim = program.output.inputs[0].dim
    model = with_outputs(lsrl.compile(program, backend="exact"), output_dim)
    return TierModel(name, "distractors", model, program, output_dim, (None,) * len(model.layers))


def task_output(program: ForEach) -> Node:
    """The node of ``program`` whose values the task's model outputs: the program's output, or in a program of
    ``distractor_program`` the task's own (the first part of its output, the model's last layer keeps only it)."""
    output = program.output
    if isinstance(output, Concat) and all(program.names[part].startswith(DISTRACTOR_PREFIX)
                                          for part in output.inputs[1:]):
        return output.inputs[0]
    return output


def in_circuit(node: str) -> bool:
    """Whether program node ``node`` of a tier's program belongs to the task (not to a distractor)."""
    return not node.startswith(DISTRACTOR_PREFIX)
