"""``ForEach``: a validated LSRL program and its reference interpreter (the semantics of record)."""

from __future__ import annotations

from lsrl.errors import BackendError, DimensionError, GraphError
from lsrl.lang.evaluate import mode_for, step_node
from lsrl.lang.nodes import Input, LinState, Node, ReLUState
from lsrl.numbers import EXACT


def topological_order(output: Node) -> list:
    """Ancestors of ``output`` (itself included), inputs first; raises GraphError on a cycle."""
    order, state = [], {}  # state: 1 = on the current path, 2 = done
    stack = [(output, iter(output.inputs))]
    state[output] = 1
    while stack:
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


class ForEach:
    """Wraps a program's output node: validates the DAG and runs it over sequences."""

    def __init__(self, output: Node, name: str = "program"):
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
        for node in self.nodes:
            node.check()
            if node.dim < 1:  # e.g. a Linear with a 0-row matrix: no output to compute or compile
                raise DimensionError(f"{node.describe()}: has no components (dim 0); a node needs at least one")

    @property
    def linstates(self) -> list:
        return [node for node in self.nodes if isinstance(node, LinState)]

    @property
    def states(self) -> list:
        """The nodes that carry a value between steps: LinStates and ReLUStates."""
        return [node for node in self.nodes if isinstance(node, (LinState, ReLUState))]

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

    def __call__(self, xs, exact: bool = False, check_bounds: bool = True):
        """Run over ``(T, d_in)`` or ``(B, T, d_in)``; returns ``(T, d_out)`` or ``(B, T, d_out)``.

        Inputs outside the ``Input``'s declared bounds raise ``SequenceError`` unless
        ``check_bounds=False``.
        """
        if exact:
            self._check_exact_weights()
        mode = mode_for(exact)
        batch, squeeze, steps = mode.read(xs, self.input, check_bounds)
        count = len(batch)
        states = {node: mode.initial_state(node, count) for node in self.states}
        outputs = []
        for t in range(steps):
            values = {}
            for node in self.nodes:
                if node is self.input:
                    values[node] = mode.at(batch, t)
                else:
                    values[node] = step_node(mode, node, [values[x] for x in node.inputs], states)
            outputs.append(values[self.output])
        result = mode.stack(outputs) if count and steps else mode.empty(count, steps, self.output.dim)
        return result[0] if squeeze else result
