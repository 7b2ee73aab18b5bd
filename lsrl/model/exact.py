"""The exact runner: a compiled program's layers over exact rationals (``mpq``), step by step.

A batch is a list (batch) of lists (time) of lists of ``mpq``; ``run_layer`` takes one layer over
it, ``as_object_array`` turns the result into the ``(B, T, width)`` object array users see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np

from lsrl.errors import InternalError
from lsrl.kinds import Kind
from lsrl.lang.evaluate import EXACT_MODE
from lsrl.lang.nodes import Linear, LinState, ReLUState
from lsrl.numbers import EXACT

if TYPE_CHECKING:
    from lsrl.lang.nodes import Node

ExactBatch = list  # a list (batch) of lists (time) of lists of mpq


def run_layer(layer: Node, x: ExactBatch, patched: Iterable[tuple[int, list]] = ()) -> ExactBatch:
    """One layer over a batch given as a list (batch) of lists (time) of lists of mpq; ``patched``:
    ``(unit, values)`` pairs that overwrite units (``values[b][t]``), a state's before it is carried."""
    if isinstance(layer, (LinState, ReLUState)):
        return _run_state(layer, x, patched)
    if layer.kind is Kind.RELU:
        out = [EXACT_MODE.relu(sequence) for sequence in x]
    elif layer.kind is Kind.MULTI:
        out = [EXACT_MODE.multi(sequence) for sequence in x]
    elif isinstance(layer, Linear):
        out = [EXACT_MODE.linear(layer.A, layer.b, sequence) for sequence in x]
    else:
        raise InternalError(f"the exact runner has no rule for {layer.describe()}")
    for unit, values in patched:
        for sequence, sequence_values in zip(out, values):
            for vector, value in zip(sequence, sequence_values):
                vector[unit] = value
    return out


def _run_state(layer: LinState | ReLUState, x: ExactBatch, patched: Iterable[tuple[int, list]]) -> ExactBatch:
    """A LinState or ReLUState layer, step by step; patched units overwrite the state it carries."""
    out = []
    zero_bias = EXACT.zeros_vector(layer.dim)
    for b, sequence in enumerate(x):
        drive = EXACT_MODE.linear(layer.B, layer.b, sequence)
        state = EXACT_MODE.initial_state(layer, 1)
        states = []
        for t, step in enumerate(drive):
            state = EXACT_MODE.linear(layer.A, zero_bias, state)
            state = [[s + u for s, u in zip(state[0], step)]]
            if isinstance(layer, ReLUState):
                state = EXACT_MODE.relu(state)
            for unit, values in patched:
                state[0][unit] = values[b][t]
            states.append(state[0])
        out.append(states)
    return out


def as_object_array(batch: ExactBatch, steps: int, width: int) -> np.ndarray:
    """An exact batch (lists of lists of lists of mpq) as a ``(B, steps, width)`` object array."""
    result = np.empty((len(batch), steps, width), dtype=object)
    for i, sequence in enumerate(batch):
        for t, vector in enumerate(sequence):
            result[i, t, :] = vector
    return result
