"""``ForEach``: a validated LSRL program and its reference interpreter (the semantics of record)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from lsrl.errors import BackendError, DimensionError, GraphError, LsrlError
from lsrl.lang.evaluate import mode_for, patch_array, patch_items, refuse_float_overflow, step_node
from lsrl.lang.nodes import Input, LinState, Node, StateNode
from lsrl.numbers import EXACT

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from lsrl.kinds import Kind
    from lsrl.lang.evaluate import Mode

Patch: TypeAlias = "dict[Node | str, ArrayLike]"  # node (or its stable name) -> its values at every step


def topological_order(output: Node) -> list[Node]:
    """Ancestors of ``output`` (itself included), inputs first; raises GraphError on a cycle."""
    order, state = [], {}  # state: 1 = on the current path, 2 = done
    stack = [(output, iter(output.inputs))]
    state[output] = 1
    while stack:  # one round per edge followed and per node finished: at most edges + nodes rounds
        node, pending = stack[-1]
        child = next(pending, None)
        if child is None:
            stack.pop()
            state[node] = 2
            order.append(node)
            continue
        if not isinstance(child, Node):
            raise GraphError(f"{node.describe()}: input {child!r} is not an LSRL node")
        if state.get(child) == 1:
            cycle = [n.name for n, _ in stack[[n for n, _ in stack].index(child):]] + [child.name]
            raise GraphError(
                f"{child.describe()}: the program has a cycle {' -> '.join(reversed(cycle))}; "
                "only LinState and ReLUState carry values between steps, and they do so without edges"
            )
        if child not in state:
            state[child] = 1
            stack.append((child, iter(child.inputs)))
    return order


def stable_names(nodes: Iterable[Node]) -> dict[Node, str]:
    """A unique name per node: the user's where given, else ``kind_k`` counting that kind in
    topological order, so that it does not depend on what else was built in the session; a
    repeated name gets ``#2``, ``#3``, ..."""
    names: dict[Node, str] = {}
    taken: set[str] = set()
    counts: dict[Kind, int] = {}
    for node in nodes:
        if node.named:
            base = node.name
        else:
            counts[node.kind] = counts.get(node.kind, -1) + 1
            base = f"{node.kind.lower()}_{counts[node.kind]}"
        name, repeat = base, 1
        while name in taken:  # at most len(taken) + 1 rounds
            repeat += 1
            name = f"{base}#{repeat}"
        names[node] = name
        taken.add(name)
    return names


class ForEach:
    """Wraps a program's output node: validates the DAG and runs it over sequences."""

    def __init__(self, output: Node, name: str = "program") -> None:
        if not isinstance(output, Node):
            raise GraphError(f"ForEach '{name}': expects the output node, got {type(output).__name__}")
        self.name = name
        self.output = output
        self.nodes = topological_order(output)
        inputs = [node for node in self.nodes if isinstance(node, Input)]
        if not inputs:
            raise GraphError(f"{output.describe()}: the program has no Input node")
        if len(inputs) > 1:
            names = ", ".join(node.describe() for node in inputs)
            raise GraphError(f"ForEach '{name}': a program takes exactly one Input, found {len(inputs)}: {names}")
        self.input = inputs[0]
        self.names = stable_names(self.nodes)  # node -> the name traces and unit labels use
        for node in self.nodes:
            node.check()
            if node.dim < 1:  # e.g. a Linear with a 0-row matrix: no output to compute or compile
                raise DimensionError(f"{node.describe()}: has no components (dim 0); a node needs at least one")

    @property
    def linstates(self) -> list[Node]:
        return [node for node in self.nodes if isinstance(node, LinState)]

    @property
    def states(self) -> list[StateNode]:
        """The nodes that carry a value between steps: LinStates and ReLUStates."""
        return [node for node in self.nodes if isinstance(node, StateNode)]

    def __repr__(self) -> str:
        return f"ForEach({self.name!r}, nodes={len(self.nodes)}, in={self.input.dim}, out={self.output.dim})"

    def _check_exact_weights(self) -> None:
        for node in self.nodes:
            for weight in ("A", "B", "b", "init_state"):
                matrix = getattr(node, weight, None)
                if matrix is not None and matrix.backend is not EXACT:
                    raise BackendError(
                        f"{node.describe()}: exact evaluation needs exact weights, but its {weight} holds float64"
                    )

    def __call__(self, xs: ArrayLike, exact: bool = False, check_bounds: bool = True,
                 patch: Patch | None = None) -> np.ndarray:
        """Run over ``(T, d_in)`` or ``(B, T, d_in)``; returns ``(T, d_out)`` or ``(B, T, d_out)``.

        Inputs outside the ``Input``'s declared bounds raise ``SequenceError`` unless
        ``check_bounds=False``. ``patch={node or name: values}`` replaces those nodes' values at
        every step (an interchange intervention; see ``trace``).
        """
        return self._run(xs, exact, check_bounds, patch, record=[self.output])[self.output]

    def trace(self, xs: ArrayLike, exact: bool = False, check_bounds: bool = True,
              patch: Patch | None = None) -> dict[str, np.ndarray]:
        """Every node's values per step: ``{key: (T, dim)}`` (``(B, T, dim)`` for a batch), exact or
        float like ``prog(xs)``. Keys are the nodes' stable names (``prog.names``), the names unit
        labels use.

        ``patch={node or name: values}`` with ``values`` of shape ``(T, dim)`` (applied to every
        sequence) or ``(B, T, dim)`` replaces the node's value at every step; everything downstream,
        LinState updates included, reads the patched value, and a patched LinState continues from it.
        """
        values = self._run(xs, exact, check_bounds, patch, record=self.nodes)
        return {self.names[node]: values[node] for node in self.nodes}

    def _run(self, xs: ArrayLike, exact: bool, check_bounds: bool, patch: Patch | None,
             record: list[Node]) -> dict[Node, np.ndarray]:
        """The interpreter's one loop: the values of the nodes in ``record``, stacked over time."""
        mode = mode_for(exact, f"ForEach '{self.name}'")
        if exact:
            self._check_exact_weights()
        batch, squeeze, steps = mode.read(xs, self.input, check_bounds)
        count = len(batch)
        patched = self._read_patch(patch, mode, count, steps)
        states = {node: mode.initial_state(node, count) for node in self.states}
        history: dict[Node, list[Any]] = {node: [] for node in record}
        for t in range(steps):
            values: dict[Node, Any] = {}
            for node in self.nodes:
                if node in patched:
                    values[node] = mode.at(patched[node], t)
                    if node in states:  # the state carried to the next step is the patched value
                        states[node] = values[node]
                elif node is self.input:
                    values[node] = mode.at(batch, t)
                else:
                    values[node] = step_node(mode, node, [values[x] for x in node.inputs], states)
            for node in record:
                history[node].append(values[node])
        result = {
            node: _squeezed(mode.stack(rows) if count and steps else mode.empty(count, steps, node.dim), squeeze)
            for node, rows in history.items()
        }
        if not exact:
            for node, outputs in result.items():
                refuse_float_overflow(outputs, f"ForEach '{self.name}': {node.describe()}")
        return result

    def _read_patch(self, patch: Patch | None, mode: Mode, count: int, steps: int) -> dict[Node, Any]:
        """``{node: values}`` in ``mode``'s batch form, each checked against the node and the run."""
        items = patch_items(patch, f"ForEach '{self.name}'")
        if not items:
            return {}
        by_key = {key: node for node, key in self.names.items()}
        patched: dict[Node, Any] = {}
        for target, values in items:
            node = target if isinstance(target, Node) else by_key.get(target)
            if node is None or node not in by_key.values():
                raise LsrlError(
                    f"ForEach '{self.name}': cannot patch {target!r}: no such node in the program "
                    f"(nodes: {', '.join(sorted(by_key))})"
                )
            array = patch_array(values, count, steps, f"{node.describe()}: patch values", node.dim)
            holder = Input(node.dim, name=f"patch of {node.name}")
            patched[node] = mode.read(array, holder, False)[0]
        return patched


def _squeezed(result: np.ndarray, squeeze: bool) -> np.ndarray:
    return result[0] if squeeze else result
