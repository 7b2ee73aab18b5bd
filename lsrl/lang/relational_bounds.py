"""Unrolled, relational value bounds: ``value_bounds`` made sharp enough to prove programs such as
Listing 2 exact.

The interval analysis (``lsrl.lang.bounds``) forgets that two values come from one: the step
``relu(2x) - relu(2x - 1)`` gets ``[-2 hi, 2 hi]`` instead of ``[0, 1]``, a conditional ``c t`` with
such a ``c`` multiplies that loss by ``|t|``, and a ``LinState`` with ``A = 1`` adds the result up
at every one of ``max_length`` steps, although a written-once register is written once. Listing 2
(robust, n = 2, tokens up to 9) gets outputs bounded by 4.6e11 at 66 steps; its outputs are tokens.
This analysis runs the program over the steps ``1 .. max_length`` on *sets of values*:

* **Atoms.** At step ``t`` the values a step computes depend on the input ``x_t`` and on the
  states' previous values ``s_(t-1)``. A component of an integer ``Input`` with at most
  ``ATOM_VALUES`` values, and a state component whose previous values form a set of at most
  ``ATOM_VALUES`` centres, is an *atom*: a variable ranging over a finite set of centres
  ``v_1 .. v_m`` (plus a common offset interval, below). A real ``Input`` component, or a larger
  set, enters as an interval. Atoms of different steps, of different inputs, and of different state
  components are treated as independent (a superset of the reachable combinations: sound).
* **Values.** Each component of each node at step ``t`` is held as ``T[a] + [lo, hi]``: a table
  ``T`` of floats over the joint assignments ``a`` of the atoms it reads (its *support*; a constant
  has none) and an offset interval. The value is in ``T[a] + [lo, hi]`` for the atoms' actual
  values ``a``. A value that depends only on the step (a counter, a phase flag, a shift register
  of constants) is a constant, so conditions on it are decided; a value that depends on one token
  and one query token is a table of their pairs, exact.
* **Rules** (``T``, ``[lo, hi]`` of the operands broadcast over the union of their supports):
  ``Linear``: ``T' = b + sum a_j T_j``, ``[lo', hi'] = sum a_j [lo_j, hi_j]`` (interval product);
  ``ReLU``: ``T' = relu(T)`` and, entry by entry, ``relu(T + lo) - relu(T) .. relu(T + hi) - relu(T)``
  (relu is monotone: ``v`` in ``T + [lo, hi]`` gives ``relu(v)`` in ``[relu(T + lo), relu(T + hi)]``),
  whose min and max are ``[lo', hi']``; so ``relu(t + lam c) - lam c`` for an atom ``c`` and a
  ``t`` far from ``-lam c`` is exact entry by entry: the ``f_ifelse`` terms cancel. ``Multi``:
  ``T' = T_x T_y`` and ``T_x [lo_y, hi_y] + T_y [lo_x, hi_x] + [lo_x, hi_x][lo_y, hi_y]`` entry by entry.
  ``LinState`` ``s_t = A s_(t-1) + B x_t + b`` is the ``Linear`` ``[A | B]`` over the atoms of
  ``s_(t-1)`` and ``x_t``; ``ReLUState`` that and a ``ReLU``. At the end of a step each state
  component becomes an atom: its centres are the distinct entries of ``T`` (entries closer than
  ``MERGE`` relative are one centre, the difference moved into the offset), its offset ``[lo, hi]``.
* **Size.** Where the union of supports would hold more than ``JOINT_VALUES`` assignments, operands
  are widened to intervals (largest support first) until it does not; after each rule, an atom along
  which ``T`` varies by at most ``MERGE`` relative is dropped, its variation moved into the offset.
  Both only widen: sound.
* **Floats.** Tables and offsets are float64. Every rule widens ``[lo', hi']`` by a bound on its
  rounding: ``gamma_(k+2) (sum |a_j| (max |T_j| + max(|lo_j|, |hi_j|)) + |b|)`` for a sum of ``k``
  terms (Higham's bound on a float dot product, ``u = 2**-53``; the extra rounding covers the
  conversion of a rational weight to a float), ``2 u`` times the magnitudes for a ReLU or a product,
  doubled, plus ``2**-1000`` per rule for underflow. So every bound is sound for the exact values
  of the program, not for a float run of it.

**Soundness.** By induction over the steps and, within a step, over the nodes in topological order:
if every atom's actual value is one of its centres plus its offset, every rule above yields a table
and offset containing the node's actual value (each rule is an over-approximation of the exact
operation on every assignment, rounding included), and the end of the step turns the states' values
into atoms whose centres and offsets contain them. Sequences of at most ``max_length`` steps
are prefixes of the unrolled run, so the union over its steps of ``min T + lo .. max T + hi`` bounds
every step of every such sequence. The result is intersected with ``value_bounds`` (both sound), so
it is never looser than the interval analysis.

**Cost.** At most linear in ``max_length`` and in the number of node components, times the table
sizes (at most ``JOINT_VALUES`` entries), and far less where the program settles: a value at a step is
a function of what its rule reads there, bit for bit, and an atom whose centres and offset repeat is the
same atom (``Atoms``), so what reads what it read at an earlier step reuses that step's result, which
is the one the rules would compute again (the soundness above holds as it is). Reused are the values of
each group of nodes that depend on the same states (``_Group``: the token atoms, phase flags and
permutation counters of Listing 2 run in a period and cost one look-up per step), and each component's
value (``_Stepper``: a register written at one step in four is computed at those steps). A rule whose
result is an operand as it is, bit for bit (a copy ``1 x + 0``, a product by the exact constant 1 or by
an exact zero, a state that kept its atom's values: the shortcuts of ``lsrl.lang.relational_values``),
passes it on without its tables; a state's distinct values on a coarse grid are counted, not sorted.
``benchmarks/build_time.py`` times the builds. Without ``max_length``, or for an ``Input`` with an
unbounded component, it is ``value_bounds`` itself.
"""


from __future__ import annotations

import math
import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lsrl.errors import LsrlError, whole_number
from lsrl.kinds import STATE_KINDS
from lsrl.lang import nodes as N
from lsrl.lang.bounds import ValueRange, value_bounds
from lsrl.lang.program import topological_order
from lsrl.lang.relational_values import (ATOM_VALUES, Atoms, Value, as_atom, constant, dyadic, exact_float,
                                         linear_row, product, relu, remember)
from lsrl.numbers import ZERO, Bound, Matrix, to_rational

EXACT_STATE_BITS = 1 << 16  # a fixed state sequence is carried exactly while its denominators are this small
MAX_UNROLLED = 100_000  # longer max_length: the interval analysis alone


class _Weights:
    """A node's matrices as float rows of terms (``terms``) and constant biases, converted once."""

    def __init__(self, node: Any) -> None:
        self.terms: list = _rows(node.A) if hasattr(node, "A") else []
        self.b: list[Value] = [exact_float(v) for v in node.b.values()] if hasattr(node, "b") else []
        self.init: list[Value] = []
        self.exact_init: list = []
        if node.kind in STATE_KINDS:
            state_rows, input_rows = _rows(node.A), _rows(node.B)
            width = node.dim
            self.terms = [s + [(width + j, a, g) for j, a, g in x] for s, x in zip(state_rows, input_rows)]
            self.init = [exact_float(v) for v in node.init_state.values()]
            self.exact_rows, self.exact_inputs = _rows(node.A, exact=True), _rows(node.B, exact=True)
            self.exact_b = [to_rational(v) for v in node.b.values()]
            self.exact_init = [to_rational(v) for v in node.init_state.values()]


class _ExactComponents(tuple):
    """A state's exact components at a step (``_exact_state``), hashed once: they are part of the key of every
    step's look-ups (``_Group``, ``_Stepper``), and a rational's hash is computed anew each time."""

    _hash: int

    def __new__(cls, components: Sequence) -> _ExactComponents:
        self = super().__new__(cls, components)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash


def _rows(matrix: Matrix, exact: bool = False) -> list[list[tuple]]:
    """Per row, the non-zero ``(j, a, grid of a)`` (floats) or ``(j, a)`` (``exact``: rationals)."""
    rows: list[list[tuple]] = [[] for _ in range(matrix.shape2d[0])]
    for i, j, a in matrix.entries():
        if a != 0:
            weight = float(to_rational(a))
            # a weight that is no float (1/3) is computed with rounding slack, never on a grid
            grid = dyadic(weight) if to_rational(weight) == to_rational(a) else None
            rows[i].append((j, to_rational(a)) if exact else (j, weight, grid))
    return rows


def _exact_state(node: N.Node, weights: _Weights, state: list, inputs: Sequence[Value]) -> list:
    """The state's exact (rational) components at this step where they are fixed sequences: a
    component whose row reads only components known exactly at the previous step and inputs that are
    exact constants (the permutation counters: no drive); None for the others. Carrying them exactly
    keeps rounding slack from growing around the state's loop (``|A|`` of a rotation block expands
    intervals by up to the golden ratio per step)."""
    updated: list = []
    for row, inputs_row, b in zip(weights.exact_rows, weights.exact_inputs, weights.exact_b):
        known = all(state[j] is not None for j, _ in row) and all(
            not inputs[j].support and inputs[j].lo == 0 and inputs[j].hi == 0 for j, _ in inputs_row)
        if not known:
            updated.append(None)
            continue
        value = b + sum((a * state[j] for j, a in row), ZERO) + sum(
            (a * to_rational(inputs[j].table) for j, a in inputs_row), ZERO)
        value = max(value, ZERO) if isinstance(node, N.ReLUState) else value
        updated.append(value if value.denominator.bit_length() <= EXACT_STATE_BITS else None)
    return updated


def _outward(bound: Bound, direction: float) -> float:
    """A rational bound as a float no tighter than it (one step towards ``direction`` where it rounds)."""
    near = float(bound)
    return near if to_rational(near) == to_rational(bound) else math.nextafter(near, direction)


def _input_values(node: N.Input, atoms: Atoms, first_source: int) -> list[Value]:
    out = []
    for source, (low, high) in enumerate(zip(*node.bounds), start=first_source):
        lo, hi = _outward(low, -math.inf), _outward(high, math.inf)
        count = hi - lo + 1
        if node.integer and lo == math.ceil(lo) and 1 < count <= ATOM_VALUES:
            out.append(atoms.new(source, np.arange(lo, hi + 1.0), 0.0, 0.0, 0))
        else:
            out.append(constant(0.0, lo, hi))
    return out


def _reads(node: Any, weights: _Weights) -> list[tuple[int, ...]]:
    """Per component, the operands (``_Stepper.step``) its rule reads."""
    if isinstance(node, (N.Linear, N.StateNode)):
        return [tuple(j for j, _, _ in row) for row in weights.terms]
    dim: int = node.dim
    if isinstance(node, N.Multi):
        return [(i, dim + i) for i in range(dim)]
    return [(i,) for i in range(dim)]


def _rule(node: Any, weights: _Weights) -> Callable[[int, tuple[Value, ...], dict[int, int]], Value]:
    """The rule of the node's components: component ``i`` at a step from the operands it reads (and the atoms'
    sizes)."""
    terms, b = weights.terms, weights.b
    if isinstance(node, N.Linear):
        return lambda i, operands, sizes: linear_row(terms[i], b[i], operands, sizes)
    if isinstance(node, N.ReLU):
        return lambda i, operands, sizes: relu(operands[i])
    if isinstance(node, N.Multi):
        return lambda i, operands, sizes: product(operands[i], operands[len(operands) // 2 + i], sizes)
    if isinstance(node, N.ReLUState):
        return lambda i, operands, sizes: relu(linear_row(terms[i], b[i], operands, sizes))
    if isinstance(node, N.StateNode):
        return lambda i, operands, sizes: linear_row(terms[i], b[i], operands, sizes)
    return _no_rule  # a Concat: its components are its operands


def _no_rule(i: int, operands: tuple[Value, ...], sizes: dict[int, int]) -> Value:
    raise TypeError("a Concat has no rule: its components are its operands")


def _nothing(operands: tuple[Value, ...]) -> tuple:
    """What a component that reads no operand reads (a row of zero weights)."""
    return ()


class _Stepper:
    """One node's rules over the steps, with what its components computed at recent steps.

    A component's value is a function of the operands it reads (``_reads``), bit for bit, and a state
    component's atom a function of its value: both are kept per component (its last ``MEMO_STEPS`` distinct
    reads), so a component whose reads repeat costs a look-up even where others of its node change (the
    answer register of Listing 2 changes one component at a step)."""

    def __init__(self, node: Any, first_source: int) -> None:
        self.node = node
        self.weights = _Weights(node)
        self.first_source = first_source
        self.concat, self.state = isinstance(node, N.Concat), isinstance(node, N.StateNode)
        self.reads = [] if self.concat else _reads(node, self.weights)
        self.rule = _rule(node, self.weights)
        self.components = range(len(self.reads))
        self.read = [operator.itemgetter(*reads) if reads else _nothing for reads in self.reads]
        self.parts: list[dict[tuple, Value]] = [{} for _ in self.reads]
        self.atoms: list[dict[Value, Value]] = [{} for _ in self.reads]
        self.exact_steps: dict[tuple, tuple[tuple, tuple]] = {}

    def step(self, inputs: list[tuple[Value, ...]], previous: tuple[Value, ...], exact: tuple | None, atoms: Atoms
             ) -> tuple[tuple[Value, ...], tuple | None, tuple[Value, ...] | None]:
        """The node's components at this step; for a state (``exact`` not None) also its exact components
        (``_exact_state``) and its components as the atoms the next step reads. Values as ``atoms.canonical``
        objects."""
        # the values the components read: the inputs' components (a state's: its previous ones first)
        operands = previous + inputs[0] if self.state else tuple([v for part in inputs for v in part])
        if self.concat:
            return operands, None, None
        values = tuple([self._part(i, operands, atoms) for i in self.components])
        if exact is None:
            return values, None, None
        exact, known = self._exact(exact, inputs[0], atoms)
        values = tuple([v if e is None else e for v, e in zip(values, known)])
        return values, exact, tuple([self._atom(i, v, atoms) for i, v in enumerate(values)])

    def _exact(self, exact: tuple, inputs: tuple[Value, ...], atoms: Atoms) -> tuple[tuple, tuple]:
        """The exact components after this step (``_exact_state``) and each known one as a float value (None for
        the others), kept per previous exact components and inputs (the last ``MEMO_STEPS``)."""
        key = (exact, inputs)
        result = self.exact_steps.get(key)
        if result is None:
            after = _ExactComponents(_exact_state(self.node, self.weights, list(exact), inputs))
            result = after, tuple(None if e is None else atoms.canonical([exact_float(e)])[0] for e in after)
            remember(self.exact_steps, key, result)
        return result

    def _part(self, i: int, operands: tuple[Value, ...], atoms: Atoms) -> Value:
        key = self.read[i](operands)
        value = self.parts[i].get(key)
        if value is None:
            value = self.rule(i, operands, atoms.sizes)
            if not any([value is operands[j] for j in self.reads[i]]):  # an operand passed on is canonical already
                value = atoms.canonical([value])[0]
            remember(self.parts[i], key, value)
        return value

    def _atom(self, i: int, value: Value, atoms: Atoms) -> Value:
        atom = self.atoms[i].get(value)
        if atom is None:
            atom = atoms.canonical([as_atom(value, atoms, self.first_source + i)])[0]
            remember(self.atoms[i], value, atom)
        return atom


class _Group:
    """The nodes whose values at a step are a function of the same states' previous values and exact
    components (``states``: the states they depend on, themselves included), the inputs' atoms being the same
    at every step. Its results per distinct ``states`` key are kept (the last ``MEMO_STEPS``), so a part of the
    program that settled into a period (token atoms, phase flags, permutation counters) costs one look-up per
    step, however many nodes it has."""

    def __init__(self, steppers: list[_Stepper], states: list[Any]) -> None:
        self.steppers, self.states = steppers, states
        self.known: dict[tuple, tuple[dict, dict, dict]] = {}

    def step(self, values: dict, previous: dict, exact: dict, atoms: Atoms) -> tuple[dict, dict, dict, bool]:
        """The group's nodes' values, its states' exact components and atoms at this step (per node), and
        whether they are new (not a repeated step's)."""
        key = (tuple(map(previous.__getitem__, self.states)), tuple(map(exact.__getitem__, self.states)))
        known = self.known.get(key)
        if known is not None:
            return (*known, False)
        now: dict = {}
        exact_now: dict = {}
        atomized: dict = {}
        for stepper in self.steppers:
            node = stepper.node
            inputs = [now[x] if x in now else values[x] for x in node.inputs]
            now[node], exact_after, atomized_after = stepper.step(inputs, previous.get(node, ()), exact.get(node),
                                                                  atoms)
            if exact_after is not None:
                exact_now[node], atomized[node] = exact_after, atomized_after
        remember(self.known, key, (now, exact_now, atomized))
        return now, exact_now, atomized, True


def _groups(order: list[Any], first_source: dict[Any, int]) -> list[_Group]:
    """The non-``Input`` nodes of ``order`` (topological) grouped by the states they depend on; a group after
    every group whose states are a subset of its own (those its nodes read)."""
    depends: dict[Any, frozenset] = {}
    members: dict[frozenset, list[Any]] = {}
    for node in order:
        depends[node] = frozenset().union(*(depends[x] for x in node.inputs))
        if isinstance(node, N.StateNode):
            depends[node] |= {node}
        if not isinstance(node, N.Input):
            members.setdefault(depends[node], []).append(node)
    position = {node: k for k, node in enumerate(order)}
    groups = sorted(members.items(), key=lambda item: len(item[0]))
    return [_Group([_Stepper(node, first_source.get(node, 0)) for node in nodes],
                   sorted(states, key=position.__getitem__)) for states, nodes in groups]


def _first_sources(order: list[Any], states: list[Any]) -> dict[Any, int]:
    """Per state and ``Input`` node, the source number of its first component (``Atoms``): the states'
    components first (their atoms are made at the end of the step before), then the inputs'."""
    first: dict[Any, int] = {}
    for node in states + [node for node in order if isinstance(node, N.Input)]:
        first[node] = sum(x.dim for x in first)
    return first


def _unrolled(output: N.Node, max_length: int) -> dict[N.Node, tuple[list[float], list[float]]]:
    """Per node (``output`` and its ancestors), per component, ``(low, high)`` over the steps.

    A node's values at a step are a function of what it reads (its inputs' values, its previous state and
    exact components, bit for bit: ``Value.contents``), and atoms of equal contents have equal ids (``Atoms``), so
    what reads what it read at an earlier step computes what it computed then: the results of recent steps
    are kept per group of nodes (``_Group``) and per component (``_Stepper``) and reused, and values seen
    before leave the bounds as they are. The parts of a program that settle into a period (token atoms,
    phase flags, permutation counters) cost a look-up per step; only the parts that keep changing are
    computed. Groups run in an order where every group they read from runs before them."""
    order: list[Any] = topological_order(output)
    states = [node for node in order if isinstance(node, N.StateNode)]
    first_source = _first_sources(order, states)
    groups = _groups(order, first_source)
    weights = {stepper.node: stepper.weights for group in groups for stepper in group.steppers}
    atoms = Atoms()
    low = {node: [math.inf] * node.dim for node in order}
    high = {node: [-math.inf] * node.dim for node in order}
    # every step reads the same input atoms
    values = {node: atoms.canonical(_input_values(node, atoms, first_source[node]))
              for node in order if isinstance(node, N.Input)}
    for node, components in values.items():
        _widen_bounds(low, high, node, components)
    previous = {node: atoms.canonical(weights[node].init) for node in states}
    exact = {node: _ExactComponents(weights[node].exact_init) for node in states}
    for _ in range(max_length):  # one round per step
        atomized: dict = {}
        exact_next: dict = {}
        for group in groups:
            now, exact_now, atomized_now, new = group.step(values, previous, exact, atoms)
            values.update(now)
            exact_next.update(exact_now)
            atomized.update(atomized_now)
            if new:
                for node, components in now.items():
                    _widen_bounds(low, high, node, components)
        previous, exact = atomized, exact_next
    return {node: (low[node], high[node]) for node in order}


def _widen_bounds(low: dict, high: dict, node: Any, values: tuple[Value, ...]) -> None:
    lows, highs = low[node], high[node]
    for k, value in enumerate(values):
        if value.low < lows[k]:
            lows[k] = value.low
        if value.high > highs[k]:
            highs[k] = value.high


# node -> {max_length: (node.version when computed, its bounds)}; a rewiring above a node bumps its version
_known: weakref.WeakKeyDictionary[N.Node, dict[int, tuple[int, ValueRange]]] = weakref.WeakKeyDictionary()


def _intersected(sharp: tuple[list[float], list[float]], interval: ValueRange) -> ValueRange:
    low = [max(to_rational(a), b) if math.isfinite(a) else b for a, b in zip(sharp[0], interval.low)]
    high = [min(to_rational(a), b) if math.isfinite(a) else b for a, b in zip(sharp[1], interval.high)]
    return ValueRange(low, high)


def relational_bounds(node: N.Node, max_length: int | None = None) -> ValueRange:
    """``value_bounds(node, max_length)`` sharpened by the unrolled relational analysis of the module
    doc: per component ``(low, high)``, rational or infinite, sound at every step of every sequence of
    at most ``max_length`` steps whose inputs lie within the declared ``Input`` bounds, and never
    looser than ``value_bounds``. The bounds of every ancestor of ``node`` are computed (and cached)
    at once, so asking for the last layer of a compiled program first makes the others free."""
    interval = value_bounds(node, max_length)
    if max_length is None or max_length > MAX_UNROLLED:
        return interval
    if whole_number(max_length) is None:
        raise LsrlError(f"relational_bounds: max_length must be a positive integer, got {max_length!r}")
    length = int(max_length)
    cached = _known.get(node, {}).get(length)
    if cached is not None and cached[0] == node.version:
        return cached[1]
    order = topological_order(node)
    inputs = [x for x in order if isinstance(x, N.Input)]
    if any(not math.isfinite(float(v)) for x in inputs for side in x.bounds for v in side):
        return interval
    for current, sharp in _unrolled(node, length).items():
        sharpened = _intersected(sharp, value_bounds(current, length))
        _known.setdefault(current, {})[length] = (current.version, sharpened)
    return _known[node][length][1]
