"""``to_torch``: a DFA or Mealy machine as the network of a chosen architecture."""

from __future__ import annotations

import torch

from lsrl.automata import exact, gated
from lsrl.automata.networks import AutomatonNetwork
from lsrl.automata.machines import DFA, Mealy
from lsrl.automata.units import transition_units
from lsrl.errors import LsrlError

ARCHITECTURES = ("rnn", "second_order", "lstm", "gru")


def to_torch(machine: DFA | Mealy, architecture: str, *, gain: float | None = None,
             dtype: torch.dtype = torch.float32) -> AutomatonNetwork:
    """The network of ``architecture`` that runs ``machine`` (a ``DFA`` or ``Mealy``) exactly for every length.

    ``gain`` (LSTM and GRU only) defaults to the smallest gain the stability bound certifies
    (``lsrl.automata.gated.gain_bound``); the networks run in ``dtype`` (float32 by default).
    """
    if architecture not in ARCHITECTURES:
        raise LsrlError(f"to_torch: architecture must be one of {ARCHITECTURES}, got {architecture!r}")
    if gain is not None and architecture not in ("lstm", "gru"):
        raise LsrlError(f"to_torch: a gain applies to the saturated 'lstm' and 'gru' only, not {architecture!r}")
    if architecture == "second_order":
        return exact.second_order(machine, dtype)
    units = transition_units(machine)
    if architecture == "rnn":
        return exact.relu_rnn(units, dtype)
    return gated.build(architecture, units, gain, dtype)
