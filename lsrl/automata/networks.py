"""Automata as recurrent networks: a stock recurrent layer (``.core``) and a thresholded linear readout.

``to_torch(machine, "rnn" | "second_order" | "lstm" | "gru")`` returns an ``AutomatonNetwork``:
one-hot symbols ``(B, T, |alphabet|)`` in, ``(B, T, C)`` out, 1.0 / 0.0 — C = 1 (acceptance of the
prefix) for a DFA, C = |outputs| (the one-hot output symbol) for a Mealy machine.

- ``"rnn"``: ``torch.nn.RNN(nonlinearity="relu")`` on the transition units of ``lsrl.automata.units``,
  integer weights: ``on_t(u) = ReLU(Σ_{v enters source(u)} on_{t-1}(v) + x_t[symbol(u)] - 1)``. Every
  value is 0 or 1 and every sum a small integer, so float32 is exact for every length.
- ``"second_order"``: the LLRNN cell of ``lsrl.llrnn.cell`` with the second-order master ``Z_in = W^c(x)``
  and ``H = U = B = 0``: ``h_t = ReLU(Σ_{j,a} W[:, j, a] h_{t-1, j} x_{t, a})``, h one-hot over the
  states of the machine's Moore form, ``W[q, p, a] = [δ(p, a) = q]``; exact for the same reason.
- ``"lstm"``, ``"gru"``: stock ``torch.nn.LSTM`` / ``torch.nn.GRU`` with their sigmoid and tanh, saturated
  by a gain from a proven bound; see ``lsrl.automata.gated``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lsrl.automata.units import TransitionUnits, transition_units
from lsrl.errors import DimensionError, LsrlError

ARCHITECTURES = ("rnn", "second_order", "lstm", "gru")


class AutomatonNetwork(nn.Module):
    """``core`` (a stock recurrent layer, or the LLRNN cell) from the initial state ``h0`` (and ``c0``), then
    ``readout``: a channel is 1.0 where its linear score is positive."""

    def __init__(self, architecture: str, core: nn.Module, readout: nn.Linear, h0: torch.Tensor,
                 c0: torch.Tensor | None = None, gain: float | None = None):
        super().__init__()
        self.architecture, self.core, self.readout, self.gain = architecture, core, readout, gain
        self.register_buffer("h0", h0)
        self.register_buffer("c0", c0)

    def _input_size(self) -> int:
        return self.core.input_size if hasattr(self.core, "input_size") else self.core.input_dim

    def initial_state(self, batch: int):
        """The core's state before any symbol, for a batch: what ``hidden`` starts from."""
        h0 = self.h0.expand(batch, -1)
        if not isinstance(self.core, nn.RNNBase):
            return h0.clone()  # the LLRNN cell's state is (B, H)
        if isinstance(self.core, nn.LSTM):
            return h0[None].contiguous(), self.c0.expand(1, batch, -1).contiguous()
        return h0[None].contiguous()

    def hidden(self, x: torch.Tensor, state=None):
        """The hidden states ``(B, T, H)`` of the core on ``x`` from ``state`` (default: the initial state),
        and the state after the last step (to continue from)."""
        if x.dim() != 3 or x.shape[-1] != self._input_size():
            raise DimensionError(f"{self.architecture} automaton network: input must be one-hot symbols of shape "
                                 f"(B, T, {self._input_size()}), got {tuple(x.shape)}")
        x = x.to(self.h0.dtype)
        state = self.initial_state(x.shape[0]) if state is None else state
        if isinstance(self.core, nn.RNNBase):
            return self.core(x, state)
        states = self.core(x, state)
        return states, states[:, -1]

    def read(self, hidden: torch.Tensor) -> torch.Tensor:
        """The readout of hidden states: 1.0 where a channel's linear score is positive."""
        return (self.readout(hidden) > 0).to(self.h0.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.read(self.hidden(x)[0])

    def initial_output(self) -> torch.Tensor:
        """The readout before any symbol, ``(C,)``: for a DFA, whether the empty word is accepted."""
        return self.read(self.h0)


def _linear(weight, bias, dtype) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(np.asarray(weight, dtype=np.float64)))
        layer.bias.copy_(torch.as_tensor(np.asarray(bias, dtype=np.float64)))
    return layer.requires_grad_(False)


def set_weights(core: nn.RNNBase, **weights) -> nn.RNNBase:
    """Copy numpy arrays into ``core``'s layer-0 parameters (``weight_ih=..`` sets ``weight_ih_l0``)."""
    with torch.no_grad():
        for name, value in weights.items():
            getattr(core, f"{name}_l0").copy_(torch.as_tensor(np.asarray(value, dtype=np.float64)))
    return core.requires_grad_(False)


def half_threshold_readout(units: TransitionUnits, scale: float, offset, dtype) -> nn.Linear:
    """Channel c is on when ``Σ_{readout[c]} on(u) > 1/2``, with ``on = scale * h + offset`` read off the units."""
    readout = units.readout.astype(np.float64)
    return _linear(readout * scale, readout @ np.broadcast_to(offset, units.size) - 0.5, dtype)


def relu_rnn(units: TransitionUnits, dtype) -> AutomatonNetwork:
    core = set_weights(nn.RNN(units.n_symbols, units.size, nonlinearity="relu", batch_first=True, dtype=dtype),
                       weight_ih=units.input(), weight_hh=units.recurrent(),
                       bias_ih=-np.ones(units.size), bias_hh=np.zeros(units.size))
    h0 = torch.as_tensor(units.initial_on(), dtype=dtype)
    return AutomatonNetwork("rnn", core, half_threshold_readout(units, 1.0, 0.0, dtype), h0)


def second_order(machine, dtype) -> AutomatonNetwork:
    from lsrl.llrnn.cell import LLRNN, Space, StateSpace
    from lsrl.llrnn.logic.library import second_order_master
    from lsrl.llrnn.logic.types import Atom, endo

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
        cell.W_c.copy_(torch.as_tensor(moves.reshape(n * n, k)))
        cell.init_state.copy_(h0)
    readout = _linear(state_outputs, np.full(len(state_outputs), -0.5), dtype)
    return AutomatonNetwork("second_order", cell.requires_grad_(False), readout, h0)


def to_torch(machine, architecture: str, *, gain: float | None = None, dtype=torch.float32) -> AutomatonNetwork:
    """The network of ``architecture`` that runs ``machine`` (a ``DFA`` or ``Mealy``) exactly for every length.

    ``gain`` (LSTM and GRU only) defaults to the smallest gain the stability bound certifies
    (``lsrl.automata.gated.gain_bound``); the networks run in ``dtype`` (float32 by default).
    """
    from lsrl.automata import gated

    if architecture not in ARCHITECTURES:
        raise LsrlError(f"to_torch: architecture must be one of {ARCHITECTURES}, got {architecture!r}")
    if gain is not None and architecture not in ("lstm", "gru"):
        raise LsrlError(f"to_torch: a gain applies to the saturated 'lstm' and 'gru' only, not {architecture!r}")
    if architecture == "second_order":
        return second_order(machine, dtype)
    units = transition_units(machine)
    if architecture == "rnn":
        return relu_rnn(units, dtype)
    return gated.build(architecture, units, gain, dtype)
