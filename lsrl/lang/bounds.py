"""Value-range analysis: an interval per component of every node, sound over all time steps.

Intervals start from the bounds declared on ``Input`` and are propagated exactly (rationals and
infinities). A ``LinState`` is iterated to a fixpoint, widening components that keep growing to
infinity. The optimised ``f_ifelse`` variants ask this analysis which values are non-negative or
identically zero instead of asking the user.
"""

from __future__ import annotations

import math

from lsrl.lang import nodes as N

INF = math.inf
_WIDEN_AFTER = 4


def _times(a, x):
    """``a * x`` for a non-zero rational ``a`` and ``x`` rational or infinite."""
    if x == INF or x == -INF:
        return x if a > 0 else -x
    return a * x


def _plus(x, y):
    if x in (INF, -INF):
        return x
    if y in (INF, -INF):
        return y
    return x + y


def _affine(A, b, low, high):
    """Interval of ``A v + b`` for ``v`` in the box ``[low, high]``."""
    out_low = [v for v in b.values()]
    out_high = list(out_low)
    for i, j, a in A.entries():
        if a > 0:
            out_low[i] = _plus(out_low[i], _times(a, low[j]))
            out_high[i] = _plus(out_high[i], _times(a, high[j]))
        else:
            out_low[i] = _plus(out_low[i], _times(a, high[j]))
            out_high[i] = _plus(out_high[i], _times(a, low[j]))
    return out_low, out_high


def _product(l1, h1, l2, h2):
    def mul(x, y):
        return 0 if x == 0 or y == 0 else (_times(x, y) if x not in (INF, -INF) else _times(y, x))

    candidates = [mul(l1, l2), mul(l1, h2), mul(h1, l2), mul(h1, h2)]
    return min(candidates), max(candidates)


def _linstate_bounds(node, x_low, x_high):
    init = node.init_state.values()
    low, high = list(init), list(init)
    for iteration in range(10 * node.dim + 2 * _WIDEN_AFTER):
        a_low, a_high = _affine(node.A, node.b, low, high)
        b_low, b_high = _affine(node.B, node.b.backend.zeros_vector(node.dim), x_low, x_high)
        new_low = [_plus(p, q) for p, q in zip(a_low, b_low)]
        new_high = [_plus(p, q) for p, q in zip(a_high, b_high)]
        grown_low = [min(p, q) for p, q in zip(low, new_low)]
        grown_high = [max(p, q) for p, q in zip(high, new_high)]
        if grown_low == low and grown_high == high:
            return new_low, new_high
        if iteration >= _WIDEN_AFTER:
            grown_low = [-INF if g != p else p for g, p in zip(grown_low, low)]
            grown_high = [INF if g != p else p for g, p in zip(grown_high, high)]
        low, high = grown_low, grown_high
    return [-INF] * node.dim, [INF] * node.dim


def _node_bounds(node, inputs):
    if isinstance(node, N.Input):
        return node.bounds
    if isinstance(node, N.Linear):
        return _affine(node.A, node.b, *inputs[0])
    if isinstance(node, N.ReLU):
        low, high = inputs[0]
        return [max(v, 0) for v in low], [max(v, 0) for v in high]
    if isinstance(node, N.Concat):
        return [v for low, _ in inputs for v in low], [v for _, high in inputs for v in high]
    if isinstance(node, N.Multi):
        low, high = inputs[0]
        half = node.dim
        pairs = [_product(low[i], high[i], low[half + i], high[half + i]) for i in range(half)]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if isinstance(node, N.LinState):
        return _linstate_bounds(node, *inputs[0])
    raise TypeError(node)


def value_bounds(node) -> tuple:
    """``(low, high)``: lists of rational or infinite bounds on every component of ``node``."""
    memo = {}
    stack = [node]
    while stack:
        current = stack[-1]
        if id(current) in memo:
            stack.pop()
            continue
        pending = [x for x in current.inputs if id(x) not in memo]
        if pending:
            stack.extend(pending)
            continue
        memo[id(current)] = _node_bounds(current, [memo[id(x)] for x in current.inputs])
        stack.pop()
    return memo[id(node)]


def is_nonnegative(node) -> bool:
    return all(v >= 0 for v in value_bounds(node)[0])


def is_nonpositive(node) -> bool:
    return all(v <= 0 for v in value_bounds(node)[1])


def is_zero(node) -> bool:
    return is_nonnegative(node) and is_nonpositive(node)


def max_abs(node):
    low, high = value_bounds(node)
    return max(max(abs(v) for v in low), max(abs(v) for v in high))
