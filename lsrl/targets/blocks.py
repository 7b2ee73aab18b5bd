"""A compiled path as a stack of (Gated) Linear RNN blocks, Eqs. (3) and (4).

Every block reads the previous block's output ``x_t`` and computes

    s_t = A s_{t-1} + B x_t + b,        y_t = phi(s_t)   or   y_t = gamma(x_t) * phi(s_t),

with ``phi`` and ``gamma`` small MLPs (``Dense`` layers, each optionally followed by a ReLU). A path
layer that is not a LinState joins the MLP of the block before it; a Multi becomes a gate block
whose state copies its input (``A = 0, B = I``), ``gamma`` takes the first half and ``phi`` the
second. The architectures in this package are built from this one description.

A ReLUState layer becomes a block whose state update is ``s_t = ReLU(A s_{t-1} + B x_t + b)``
(``relu_state=True``): the step of Eq. (2), which only the non-linear architectures can take.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from lsrl.ir.labels import UnitLabel, copy_of
from lsrl.kinds import STATE_KINDS, Kind

if TYPE_CHECKING:
    from lsrl.model.compiled import CompiledProgram


@dataclass
class Dense:
    """``W v + c``, then a ReLU if ``relu``. ``labels``: per unit of ``W v + c``, what it holds
    (``lsrl.ir.labels``); ``relu_labels``: the same after the ReLU (None: unlabelled)."""

    W: np.ndarray
    c: np.ndarray
    relu: bool = False
    labels: list | None = None
    relu_labels: list | None = None

    @property
    def out_labels(self) -> list | None:
        """The labels of this layer's output (after its ReLU, if any)."""
        return self.relu_labels if self.relu else self.labels

    def __call__(self, v: np.ndarray) -> np.ndarray:
        out = v @ self.W.T + self.c
        return np.maximum(out, 0.0) if self.relu else out


@dataclass
class Block:
    """One Eq. (3) layer (``gamma is None``) or Eq. (4) layer."""

    A: np.ndarray
    B: np.ndarray
    b: np.ndarray
    s0: np.ndarray
    phi: list = field(default_factory=list)
    gamma: list | None = None
    gate_name: str | None = None  # the Multi node this gate block comes from
    relu_state: str | None = None  # the ReLUState node whose s_t = ReLU(A s_{t-1} + B x_t + b) this is
    state_labels: list | None = None  # per unit of s_t (lsrl.ir.labels)
    gate_labels: list | None = None  # per unit of gamma * phi, for a gate block

    @property
    def labels(self) -> list | None:
        """The labels of the block's output units."""
        if self.gamma is not None:
            return self.gate_labels
        return self.phi[-1].out_labels if self.phi else self.state_labels

    @property
    def d_in(self) -> int:
        return self.B.shape[1]

    @property
    def d_state(self) -> int:
        return self.A.shape[0]

    @property
    def d_out(self) -> int:
        return self.phi[-1].W.shape[0] if self.phi else self.d_state

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Reference evaluation on a ``(B, T, d_in)`` float64 batch."""
        drive = x @ self.B.T + self.b
        state = np.tile(self.s0, (x.shape[0], 1))
        states = np.empty(x.shape[:2] + (self.d_state,))
        for t in range(x.shape[1]):
            state = state @ self.A.T + drive[:, t]
            if self.relu_state is not None:
                state = np.maximum(state, 0.0)
            states[:, t] = state
        y = _mlp(self.phi, states)
        return y if self.gamma is None else _mlp(self.gamma, x) * y


def _mlp(layers: list[Dense], v: np.ndarray) -> np.ndarray:
    for layer in layers:
        v = layer(v)
    return v


def identity_block(dim: int, input_labels: Sequence[UnitLabel | None] | None = None) -> Block:
    """A block whose state is a copy of its input (``A = 0, B = I``), labelled ``input_labels``."""
    return Block(np.zeros((dim, dim)), np.eye(dim), np.zeros(dim), np.zeros(dim), state_labels=_copies(input_labels))


def _copies(labels: Sequence[UnitLabel | None] | None) -> list[UnitLabel | None] | None:
    return None if labels is None else [copy_of(label) for label in labels]


@dataclass
class BlockStack:
    """The blocks of a compiled program, in order."""

    d_in: int
    blocks: list
    input_labels: list | None = None  # per input component (the program's Input node)

    @property
    def d_out(self) -> int:
        return self.blocks[-1].d_out if self.blocks else self.d_in

    @property
    def gated(self) -> bool:
        return any(block.gamma is not None for block in self.blocks)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        for block in self.blocks:
            x = block(x)
        return x


def input_width(model: CompiledProgram) -> int:
    """The width of the program's input (its ``Input`` node's ``dim``)."""
    width = model.input.dim
    assert width is not None  # an Input's width is given when it is made
    return width


def input_labels(model: CompiledProgram) -> list[UnitLabel] | None:
    """The labels of the program's input components (None for a model without labels)."""
    if model.labels is None:
        return None
    return [UnitLabel(model.input.name, i, "value") for i in range(input_width(model))]


def to_blocks(model: CompiledProgram) -> BlockStack:
    """Group a ``CompiledProgram``'s path into blocks (float64 weights), each block's state and
    each Dense layer's units labelled from ``model.labels`` (when the model has labels)."""
    blocks: list[Block] = []
    current: Any = None  # the Block being built (None before the first)
    width: Any = model.input.dim  # the previous layer's width
    below: Sequence[UnitLabel | None] | None = input_labels(model)  # the labels of the previous layer's output
    layer: Any  # a compiled layer: its weights (A, B, b, init_state) as its kind has them
    for index, layer in enumerate(model.layers):
        labels = model.labels[index] if model.labels is not None else None
        if layer.kind in STATE_KINDS:
            current = Block(
                layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy(), layer.init_state.to_numpy(),
                state_labels=labels,
            )
            if layer.kind is Kind.RELUSTATE:
                current.relu_state = layer.name
            blocks.append(current)
        elif layer.kind is Kind.MULTI:
            half = layer.dim
            # a Linear right before the Multi computes both halves: it becomes gamma's and phi's layer
            mergeable = current is not None and current.gamma is None and current.phi and not current.phi[-1].relu
            pending = current.phi.pop() if mergeable else None
            if pending:  # the gate block reads what pending read
                below = current.phi[-1].out_labels if current.phi else current.state_labels
            source = pending.W.shape[1] if pending else width
            W = pending.W if pending else np.eye(width)
            c = pending.c if pending else np.zeros(width)
            both = pending.labels if pending else _copies(below)
            current = identity_block(source, below)
            current.gamma = [Dense(W[:half], c[:half], labels=both and both[:half])]
            current.phi = [Dense(W[half:], c[half:], labels=both and both[half:])]
            current.gate_name = layer.name
            current.gate_labels = labels
            blocks.append(current)
        else:
            if current is None or current.gamma is not None:
                current = identity_block(width, below)
                blocks.append(current)
            if layer.kind is Kind.LINEAR:
                current.phi.append(Dense(layer.A.to_numpy(), layer.b.to_numpy(), labels=labels))
            elif current.phi and not current.phi[-1].relu:
                current.phi[-1].relu = True
                current.phi[-1].relu_labels = labels
            else:
                current.phi.append(
                    Dense(np.eye(layer.dim), np.zeros(layer.dim), relu=True, labels=_copies(below), relu_labels=labels)
                )
        width, below = layer.dim, labels
    return BlockStack(input_width(model), blocks, input_labels(model))
