"""The hidden units of the first-order networks (ReLU RNN, LSTM, GRU): one unit per transition.

Unit ``(p, a)`` is on at step t exactly when the t-th symbol is ``a`` and the machine was in state
``p`` before reading it, so exactly one unit is on at every step. Its logic is an AND of two 0/1
quantities, both linear in the previous units and the one-hot input:

    on_t(p, a) = [ Σ_{u enters p} on_{t-1}(u) + x_t[a] ≥ 2 ]      ("u enters p": u = (r, b) with δ(r, b) = p)

so one ReLU (or one saturated sigmoid) per unit does it. The outputs are linear too: a DFA accepts
after step t iff the unit that is on enters an accepting state; a Mealy machine outputs λ(p, a).
Before the first symbol, a unit that enters the start state is on; when no transition enters the
start state, one extra *start unit* (no weights, so off from step 1 on) plays that part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from lsrl.automata.machines import DFA, Mealy


@dataclass(frozen=True)
class TransitionUnits:
    """Unit ``u`` stands for the transition ``(source[u], symbol[u])`` (``-1, -1`` for the start unit) and
    enters state ``enters[u]``; ``readout[c, u]`` = 1 when output channel c is on while u is on."""

    source: np.ndarray
    symbol: np.ndarray
    enters: np.ndarray
    initial: int
    readout: np.ndarray
    n_states: int
    n_symbols: int

    @property
    def size(self) -> int:
        return len(self.source)

    def entering(self) -> np.ndarray:
        """``(n_states, size)``: row p marks the units that enter p, so ``entering @ on`` is one-hot of the state."""
        matrix = np.zeros((self.n_states, self.size), dtype=np.int64)
        matrix[self.enters, np.arange(self.size)] = 1
        return matrix

    def recurrent(self) -> np.ndarray:
        """``(size, size)``: row u sums the units that enter u's source state (zero row for the start unit)."""
        return np.where((self.source >= 0)[:, None], self.entering()[np.maximum(self.source, 0)], 0)

    def input(self) -> np.ndarray:
        """``(size, n_symbols)``: row u picks u's symbol (zero row for the start unit)."""
        return (self.symbol[:, None] == np.arange(self.n_symbols)[None]).astype(np.int64)

    def initial_on(self) -> np.ndarray:
        """The 0/1 units before the first symbol."""
        return np.eye(self.size, dtype=np.int64)[self.initial]

    @property
    def in_degree(self) -> int:
        """The most units any unit's pre-activation sums (the largest number of units entering one state)."""
        return int(self.entering().sum(axis=1).max())

    @property
    def readout_size(self) -> int:
        """The most units any output channel sums."""
        return int(self.readout.sum(axis=1).max())


def transition_units(machine: DFA | Mealy) -> TransitionUnits:
    """The units of a ``DFA`` or ``Mealy`` machine (``machine.transition_outputs()`` gives the readout)."""
    n, k = machine.table.shape
    source, symbol = np.repeat(np.arange(n), k), np.tile(np.arange(k), n)
    enters = machine.table.reshape(-1)
    outputs, start_outputs = machine.transition_outputs()
    readout = outputs.reshape(outputs.shape[0], -1)
    into_start = np.flatnonzero(enters == machine.start)
    if len(into_start):
        initial = int(into_start[0])
    else:
        source, symbol = np.append(source, -1), np.append(symbol, -1)
        enters = np.append(enters, machine.start)
        readout = np.concatenate([readout, start_outputs[:, None]], axis=1)
        initial = n * k
    return TransitionUnits(source, symbol, enters, initial, readout, n, k)
