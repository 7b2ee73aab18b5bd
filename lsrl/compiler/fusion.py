"""The preparation step of App. A: fuse consecutive nodes that are one node in disguise.

Each rule looks at an op and its single user and returns True when it rewrote the graph. They run
once over the whole graph before debranching and again wherever debranching creates new chains.
"""

from __future__ import annotations

from lsrl.compiler.graph import CONCAT, INPUT, LINEAR, LINSTATE, RELU


def fuse_linear_linear(graph, first, second) -> bool:
    """``Lin[A2, b2](Lin[A1, b1](x)) = Lin[A2 A1, A2 b1 + b2](x)``."""
    if first.kind != LINEAR or second.kind != LINEAR:
        return False
    fused = graph.linear(first.inputs[0], second.A @ first.A, second.A @ first.b + second.b, name=second.name)
    graph.replace(second, fused)
    return True


def fuse_linear_linstate(graph, linear, state) -> bool:
    """A Lin feeding a LinState is absorbed into its ``B`` and ``b``."""
    if linear.kind != LINEAR or state.kind != LINSTATE:
        return False
    fused = graph.linstate(
        linear.inputs[0], state.A, state.B @ linear.A, state.B @ linear.b + state.b, state.init, name=state.name
    )
    graph.replace(state, fused)
    return True


def fuse_relu_relu(graph, first, second) -> bool:
    """ReLU is idempotent: the second of two ReLUs is dropped."""
    if first.kind != RELU or second.kind != RELU:
        return False
    graph.replace(second, first)
    return True


def fuse_concat_identical(graph, concat) -> bool:
    """A Concat whose inputs are all one op only copies it: a Lin of stacked identities."""
    if concat.kind != CONCAT or any(x is not concat.inputs[0] for x in concat.inputs):
        return False
    source = concat.inputs[0]
    copies = graph.backend.vstack([graph.backend.eye(source.dim)] * len(concat.inputs))
    graph.replace(concat, graph.linear(source, copies, name=concat.name))
    return True


def fuse_identity(graph, linear) -> bool:
    """A Lin that is the identity (left behind by bypasses) is dropped."""
    if linear.kind != LINEAR or not linear.is_identity():
        return False
    graph.replace(linear, linear.inputs[0])
    return True


PAIR_RULES = (fuse_linear_linear, fuse_linear_linstate, fuse_relu_relu)
SINGLE_RULES = (fuse_concat_identical, fuse_identity)


def fuse_at(graph, op, stats) -> bool:
    """Apply the first preparation rule that fits ``op`` (alone, or with its only user)."""
    for rule in SINGLE_RULES:
        if rule(graph, op):
            stats[rule.__name__] = stats.get(rule.__name__, 0) + 1
            return True
    users = graph.users[op]
    if len(users) != 1 or op.kind == INPUT:
        return False
    for rule in PAIR_RULES:
        if rule(graph, op, users[0]):
            stats[rule.__name__] = stats.get(rule.__name__, 0) + 1
            return True
    return False


def prepare(graph, order, stats) -> None:
    """The preparation step over the whole graph (``order``: ops inputs-first)."""
    for op in order:
        while op in graph.users and fuse_at(graph, op, stats):
            pass
