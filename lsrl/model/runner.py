"""Fast float64 execution of a compiled program: a plan built once, run by numba kernels.

``build_plan`` turns the layers into flat arrays: an op table (one op per layer) and every matrix
in one CSR pool. ``run_plan`` evaluates the whole layer stack chunk by chunk. Activations are
``(width, lanes)``, lane ``t * group + b`` holding step ``t`` of the chunk for sequence ``b`` of a
batch group, so every weight is applied to a contiguous run of lanes (SIMD) and a chunk's
activations (a few hundred KiB) stay in L2 cache through all the layers instead of streaming
through memory once per layer. With one sequence the lanes are time steps; with many, mostly
sequences.

A ReLUState runs like a LinState, with the ReLU applied to each step's state before the next
step reads it.

A LinState computes ``B x + b`` over all lanes, then adds ``A s_{t-1}`` step after step (the
batch group as lanes) and carries its state into the next chunk. That is the step-by-step
recurrence itself, so any ``A`` works (rotations, dense, nilpotent) and an exploding one
overflows to inf exactly where the recurrence does: only stored weights are multiplied, never a
structural zero (inf * 0 would be NaN). A Linear sums its terms with compensated summation, so
the large cancelling terms of fused conditionals cost no precision. Batch groups run on all cores
(the kernels release the GIL).

The kernels are compiled by numba on first use and cached on disk (``cache=True``): a fresh
install pays the compilation (a few seconds) once, later processes load it in about 0.5 s.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import numba
import numpy as np

from lsrl.kinds import Kind
from lsrl.lang.nodes import Linear, LinState, ReLUState

if TYPE_CHECKING:
    from lsrl.lang.nodes import Node
    from lsrl.numbers import Matrix

Array = np.ndarray
Matrices = tuple[Array, Array, Array, Array]  # Plan.matrices: CSR row starts, entry rows, columns, weights

# op kinds, one per layer kind
AFFINE, RELU, MULTI, LINSTATE, RELUSTATE = range(5)
_KINDS = {Kind.LINEAR: AFFINE, Kind.RELU: RELU, Kind.MULTI: MULTI, Kind.LINSTATE: LINSTATE, Kind.RELUSTATE: RELUSTATE}
# columns of the op table
KIND, ROWS, MATRIX, BIAS, TRANSITION, STATE = range(6)

LANES_PER_CHUNK = 512  # two buffers of 40 x 512 float64 (320 KiB) sit in L2; measured best of 64..2048
GROUPS_PER_CORE = 4
PARALLEL_TOKENS = 4096  # fewer tokens run in the calling thread: starting threads costs about 0.3 ms


@dataclass(frozen=True)
class Plan:
    """A compiled program as flat arrays for the kernels.

    ``ops[k]``: kind, output rows, CSR offset of its matrix (a Linear's A, a LinState's B) in
    ``row_starts``, offset of its bias in ``biases``, CSR offset of a LinState's A, offset of a
    LinState's state in ``initial_states``. Row ``i`` of the matrix at CSR offset ``m`` holds the
    entries ``row_starts[m + i]`` to ``row_starts[m + i + 1]`` of ``columns`` and ``weights``;
    ``entry_rows`` gives each entry's row.
    """

    ops: np.ndarray
    row_starts: np.ndarray
    entry_rows: np.ndarray
    columns: np.ndarray
    weights: np.ndarray
    biases: np.ndarray
    initial_states: np.ndarray
    width: int
    output_dim: int

    @property
    def matrices(self) -> Matrices:
        return self.row_starts, self.entry_rows, self.columns, self.weights


class _PlanBuilder:
    def __init__(self) -> None:
        self.ops: list[tuple[int, ...]] = []
        self.row_starts: list[np.ndarray] = []
        self.entry_rows: list[np.ndarray] = []
        self.columns: list[np.ndarray] = []
        self.weights: list[np.ndarray] = []
        self.biases: list[np.ndarray] = []
        self.initial_states: list[np.ndarray] = []

    def matrix(self, matrix: Matrix) -> int:
        """Appends ``matrix`` to the CSR pool; returns its CSR offset."""
        csr = matrix.csr()
        offset, entries = sum(map(len, self.row_starts)), sum(map(len, self.columns))
        self.row_starts.append(csr.indptr + entries)
        self.entry_rows.append(np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr)))
        self.columns.append(csr.indices)
        self.weights.append(csr.data)
        return offset

    @staticmethod
    def vector(pool: list[np.ndarray], vector: Matrix) -> int:
        """Appends ``vector`` to ``pool`` (the biases or the initial states); returns its offset."""
        offset = sum(map(len, pool))
        pool.append(vector.float_values())
        return offset

    def layer(self, layer: Node) -> None:
        matrix = bias = transition = state = 0
        if isinstance(layer, Linear):
            matrix, bias = self.matrix(layer.A), self.vector(self.biases, layer.b)
        elif isinstance(layer, (LinState, ReLUState)):
            matrix, bias = self.matrix(layer.B), self.vector(self.biases, layer.b)
            transition, state = self.matrix(layer.A), self.vector(self.initial_states, layer.init_state)
        self.ops.append((_KINDS[layer.kind], layer.dim, matrix, bias, transition, state))

    def plan(self, width: int, output_dim: int) -> Plan:
        def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

        return Plan(
            np.array(self.ops, dtype=np.int64).reshape(-1, 6),
            joined(self.row_starts, np.int64), joined(self.entry_rows, np.int64), joined(self.columns, np.int64),
            joined(self.weights, np.float64), joined(self.biases, np.float64),
            joined(self.initial_states, np.float64), width, output_dim,
        )


def build_plan(input_dim: int, layers: Sequence[Node]) -> Plan:
    """The plan of a path of layers reading an input of ``input_dim``."""
    builder = _PlanBuilder()
    for layer in layers:
        builder.layer(layer)
    widest = max([input_dim] + [layer.dim for layer in layers])
    return builder.plan(widest, layers[-1].dim if layers else input_dim)


def run_plan(plan: Plan, batch: np.ndarray) -> np.ndarray:
    """``(B, T, d_in)`` float64 -> ``(B, T, d_out)`` float64."""
    count, steps, _ = batch.shape
    out = np.empty((count, steps, plan.output_dim))
    if count == 0 or steps == 0:
        return out
    # about four groups per core: a core slowed by other work takes fewer of them (the cost per
    # token measured the same for groups of 16 to 128 sequences)
    group = min(-(-count // (GROUPS_PER_CORE * _cores())), LANES_PER_CHUNK)
    chunk_steps = max(1, LANES_PER_CHUNK // group)
    xs = np.ascontiguousarray(batch)

    def run_group(first: int) -> None:
        _run_group(xs, out, first, min(count, first + group), chunk_steps, plan.ops, plan.matrices, plan.biases,
                   plan.initial_states, plan.width)

    firsts = range(0, count, group)
    if len(firsts) == 1 or count * steps < PARALLEL_TOKENS:
        for first in firsts:
            run_group(first)
    else:
        with ThreadPoolExecutor(min(len(firsts), _cores())) as pool:
            list(pool.map(run_group, firsts))
    return out


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ---- kernels ---------------------------------------------------------------------------------
# ``matrices`` is Plan.matrices; ``lanes``: the lanes of the buffers in use for this chunk.
# Loops rather than slice assignments: numba compiles those several times slower.


@numba.njit(cache=True, nogil=True)
def _run_group(xs: Array, out: Array, first: int, last: int, chunk_steps: int, ops: Array, matrices: Matrices,
               biases: Array, initial_states: Array, width: int) -> None:
    """Sequences ``first`` to ``last`` of ``xs`` through all ops, into ``out``."""
    count = last - first
    buffers = np.empty((2, width, chunk_steps * count))
    compensation = np.empty(chunk_steps * count)
    states = _initial_states(initial_states, count)
    for start in range(0, xs.shape[1], chunk_steps):
        span = min(chunk_steps, xs.shape[1] - start)
        lanes = span * count
        _load_chunk(xs, first, count, start, span, buffers[0])
        current = 0
        for k in range(ops.shape[0]):
            kind, rows, x = ops[k, KIND], ops[k, ROWS], buffers[current]
            if kind == RELU:
                _relu_in_place(x, rows, lanes)
            elif kind == MULTI:
                _multi_in_place(x, rows, lanes)
            else:
                y = buffers[1 - current]
                _affine(matrices, ops[k, MATRIX], biases, ops[k, BIAS], rows, x, y, lanes, compensation)
                if kind == LINSTATE:
                    state = states[ops[k, STATE] : ops[k, STATE] + rows]
                    _scan(matrices, ops[k, TRANSITION], rows, state, y, count, span)
                elif kind == RELUSTATE:
                    state = states[ops[k, STATE] : ops[k, STATE] + rows]
                    _relu_scan(matrices, ops[k, TRANSITION], rows, state, y, count, span)
                current = 1 - current
        _store_chunk(buffers[current], out, first, count, start, span)


@numba.njit(cache=True, nogil=True)
def _initial_states(initial_states: Array, count: int) -> Array:
    states = np.empty((initial_states.shape[0], count))
    for i in range(initial_states.shape[0]):
        for b in range(count):
            states[i, b] = initial_states[i]
    return states


@numba.njit(cache=True, nogil=True)
def _load_chunk(xs: Array, first: int, count: int, start: int, span: int, x: Array) -> None:
    for t in range(span):
        for b in range(count):
            for j in range(xs.shape[2]):
                x[j, t * count + b] = xs[first + b, start + t, j]


@numba.njit(cache=True, nogil=True)
def _store_chunk(y: Array, out: Array, first: int, count: int, start: int, span: int) -> None:
    for t in range(span):
        for b in range(count):
            for i in range(out.shape[2]):
                out[first + b, start + t, i] = y[i, t * count + b]


@numba.njit(cache=True, nogil=True)
def _affine(matrices: Matrices, matrix: int, biases: Array, bias: int, rows: int, x: Array, y: Array, lanes: int,
            compensation: Array) -> None:
    """``y = M x + b`` for the matrix at CSR offset ``matrix`` and the bias at offset ``bias``.

    A row that takes several additions is summed with compensated summation, starting from the
    bias: a fused row of a λ = 1e10 conditional adds a small value to partial sums of 1e12 that
    cancel, and a plain sum would lose the small value's low digits (the interpreter, which does not
    fuse, keeps them). A row of one addition or none is already exact to rounding and takes one
    pass, its first term starting the sum and the bias riding with the last.
    """
    row_starts, _, columns, weights = matrices
    for i in range(rows):
        target, offset = y[i], biases[bias + i]
        first, stop = row_starts[matrix + i], row_starts[matrix + i + 1]
        if stop - first + (offset != 0.0) <= 2:
            if first == stop:
                for lane in range(lanes):
                    target[lane] = offset
            for k in range(first, stop):
                _add_term(target, weights[k], x[columns[k]], lanes, k == first, k == stop - 1, offset)
            continue
        for lane in range(lanes):
            target[lane] = offset
            compensation[lane] = 0.0
        for k in range(first, stop):
            _add_compensated(target, compensation, weights[k], x[columns[k]], lanes)
        for lane in range(lanes):
            total = target[lane] + compensation[lane]
            if np.isfinite(total):  # an infinite sum keeps its sign (its compensation is NaN)
                target[lane] = total


@numba.njit(cache=True, nogil=True)
def _add_term(target: Array, weight: float, source: Array, lanes: int, is_first: bool, is_last: bool,
              offset: float) -> None:
    """``target += weight * source``, or ``=`` for the first term; the last adds ``offset`` after."""
    for lane in range(lanes):
        value = weight * source[lane]
        if not is_first:
            value = target[lane] + value
        if is_last:
            value = value + offset
        target[lane] = value


@numba.njit(cache=True, nogil=True)
def _add_compensated(target: Array, compensation: Array, weight: float, source: Array, lanes: int) -> None:
    """``target += weight * source``, the rounding error of each addition (Knuth's branch-free TwoSum,
    which vectorises) added to ``compensation``."""
    for lane in range(lanes):
        term = weight * source[lane]
        total = target[lane]
        summed = total + term
        virtual = summed - total
        compensation[lane] += (total - (summed - virtual)) + (term - virtual)
        target[lane] = summed


@numba.njit(cache=True, nogil=True)
def _relu_in_place(x: Array, rows: int, lanes: int) -> None:
    for i in range(rows):
        for lane in range(lanes):
            if x[i, lane] < 0.0:  # not max(v, 0): NaN stays NaN, as with np.maximum
                x[i, lane] = 0.0


@numba.njit(cache=True, nogil=True)
def _multi_in_place(x: Array, rows: int, lanes: int) -> None:
    # row i reads rows i and i + rows, neither of them written before: safe in place
    for i in range(rows):
        for lane in range(lanes):
            x[i, lane] *= x[i + rows, lane]


@numba.njit(cache=True, nogil=True)
def _scan(matrices: Matrices, transition: int, rows: int, state: Array, y: Array, count: int, span: int) -> None:
    """``y[:, t] += A y[:, t - 1]`` step by step (``y`` holds ``B x_t + b``); ``state`` holds s
    before the chunk on entry and after it on return."""
    row_starts = matrices[0]
    first, last = row_starts[transition], row_starts[transition + rows]
    _add_transition(matrices, first, last, state, 0, y, 0, count)
    for t in range(1, span):
        _add_transition(matrices, first, last, y, (t - 1) * count, y, t * count, count)
    for i in range(rows):
        for b in range(count):
            state[i, b] = y[i, (span - 1) * count + b]


@numba.njit(cache=True, nogil=True)
def _relu_scan(matrices: Matrices, transition: int, rows: int, state: Array, y: Array, count: int,
               span: int) -> None:
    """``y[:, t] = ReLU(y[:, t] + A y[:, t - 1])`` step by step (a ReLUState; ``y`` holds
    ``B x_t + b``); ``state`` as in ``_scan``."""
    row_starts = matrices[0]
    first, last = row_starts[transition], row_starts[transition + rows]
    for t in range(span):
        if t == 0:
            _add_transition(matrices, first, last, state, 0, y, 0, count)
        else:
            _add_transition(matrices, first, last, y, (t - 1) * count, y, t * count, count)
        for i in range(rows):
            for b in range(count):
                if y[i, t * count + b] < 0.0:  # NaN stays NaN, as in _relu_in_place
                    y[i, t * count + b] = 0.0
    for i in range(rows):
        for b in range(count):
            state[i, b] = y[i, (span - 1) * count + b]


@numba.njit(cache=True, nogil=True)
def _add_transition(matrices: Matrices, first: int, last: int, source: Array, source_lane: int, y: Array, lane: int,
                    count: int) -> None:
    """``y[:, lane:lane + count] += A source[:, source_lane:source_lane + count]`` for the entries
    ``first`` to ``last`` of A: entry by entry, so a sparse A (a counter, a shift) costs only its
    non-zeros, not a loop over all its rows."""
    _, entry_rows, columns, weights = matrices
    for k in range(first, last):
        i, j, weight = entry_rows[k], columns[k], weights[k]
        for b in range(count):
            y[i, lane + b] += weight * source[j, source_lane + b]


def run_layer(layer: Node, x: np.ndarray, patched: Iterable[tuple[int, np.ndarray]] = ()) -> np.ndarray:
    """One layer over a ``(B, T, width)`` float64 batch, by the float runner (so a trace's last layer is
    bit for bit what ``model(xs)`` returns); ``patched`` as for ``lsrl.model.exact.run_layer``, values ``(B, T)``."""
    if isinstance(layer, (LinState, ReLUState)) and patched:  # the patched state is the one carried: step by step
        A, B, b = layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy()
        state = np.tile(layer.init_state.to_numpy(), (x.shape[0], 1))
        out = np.empty(x.shape[:2] + (layer.dim,))
        for t in range(x.shape[1]):
            state = state @ A.T + x[:, t] @ B.T + b
            if isinstance(layer, ReLUState):
                state = np.maximum(state, 0.0)
            for unit, values in patched:
                state[:, unit] = values[:, t]
            out[:, t] = state
        return out
    out = run_plan(build_plan(x.shape[-1], [layer]), x)
    for unit, values in patched:
        out[:, :, unit] = values
    return out
