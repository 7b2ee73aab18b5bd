"""The exact networks: every value is 0 or 1 and every sum a small integer, so float32 is exact for every length.

- ``relu_rnn``: ``torch.nn.RNN(nonlinearity="relu")`` on the transition units of ``lsrl.automata.units``,
  integer weights: ``on_t(u) = ReLU(Σ_{v enters source(u)} on_{t-1}(v) + x_t[symbol(u)] - 1)``.
- ``second_order``: the LLRNN cell of ``lsrl.llrnn.cell`` with the second-order master ``Z_in = W^c(x)``
  and ``H = U = B = 0``: ``h_t = ReLU(Σ_{j,a} W[:, j, a] h_{t-1, j} x_{t, a})``, h one-hot over the
  states of the machine's Moore form (a Mealy machine's states paired with their last output),
  ``W[q, p, a] = [δ(p, a) = q]``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lsrl.automata.machines import DFA, Mealy
from lsrl.automata.networks import AutomatonNetwork, half_threshold_readout, linear_layer, set_weights
from lsrl.automata.units import TransitionUnits
from lsrl.llrnn.cell import LLRNN, Space, StateSpace
from lsrl.llrnn.logic.library import second_order_master
from lsrl.llrnn.logic.types import Atom, endo


def relu_rnn(units: TransitionUnits, dtype: torch.dtype) -> AutomatonNetwork:
    """The stock ReLU RNN of the transition units: one hidden unit per transition (plus the start unit)."""
    core = set_weights(nn.RNN(units.n_symbols, units.size, nonlinearity="relu", batch_first=True, dtype=dtype),
                       weight_ih=units.input(), weight_hh=units.recurrent(),
                       bias_ih=-np.ones(units.size), bias_hh=np.zeros(units.size))
    h0 = torch.as_tensor(units.initial_on(), dtype=dtype)
    return AutomatonNetwork("rnn", core, half_threshold_readout(units, 1.0, 0.0, dtype), h0)


def second_order(machine: DFA | Mealy, dtype: torch.dtype) -> AutomatonNetwork:
    """The second-order RNN (the LLRNN cell) of ``machine``'s Moore form: one hidden unit per state."""
    table, start, state_outputs = machine.moore()
    n, k = table.shape
    state = Atom("A")
    cell = LLRNN(StateSpace({"h0": Space(state, (n,))}, state), k, master_in=second_order_master(state),
                 input_space=Space(endo(state), (n, n)), dtype=dtype)
    moves = np.zeros((n, n, k))  # moves[q, p, a] = [δ(p, a) = q]; W^c's row (q, p) holds moves[q, p, :]
    moves[table, np.arange(n)[:, None], np.arange(k)[None]] = 1
    h0 = torch.as_tensor(np.eye(n)[start], dtype=dtype)
    with torch.no_grad():
        for parameter in (cell.H, cell.U, cell.B):
            parameter.zero_()
        cell.input_map.copy_(torch.as_tensor(moves.reshape(n * n, k)))
        cell.init_state.copy_(h0)
    readout = linear_layer(state_outputs, np.full(len(state_outputs), -0.5), dtype)
    return AutomatonNetwork("second_order", cell.requires_grad_(False), readout, h0)
