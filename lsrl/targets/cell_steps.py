"""The steps of the recurrent cells, written once: ``torch.nn.RNN`` / ``GRU`` / ``LSTM``'s equations with the
activations given (ReLU for the LSRL paper's cells, Apps. C and D). lsrl's ReLU GRU / LSTM layers
(``lsrl.targets.gru_lstm``) run them, and the benchmark suite's ``load_model.py`` holds this code verbatim
(``lsrl.bench.standalone`` with it inlined, so that the file needs torch only).

Each step passes its gates, cell and new state through ``points`` (``{name: hook(value, step)}``; a name
missing from it is not hooked): ``"r"``, ``"z"``, ``"n"`` (GRU), ``"i"``, ``"f"``, ``"g"``, ``"o"``, ``"c"``
(LSTM), ``"h"`` (the state carried to the next step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.nn import functional as F

# ---- inlined into load_model.py from here on ----


def at_step(points: Mapping[str, Any], key: str, value: torch.Tensor, step: int) -> torch.Tensor:
    """``value`` through the hook ``points[key]`` at ``step``, if there is one."""
    return points[key](value, step) if key in points else value


def rnn_step(points: Mapping[str, Any], t: int, gi: torch.Tensor, h: torch.Tensor, weight_hh: torch.Tensor,
             bias_hh: torch.Tensor, activation: Any) -> torch.Tensor:
    """``h' = act(W_ih x + b_ih + W_hh h + b_hh)`` (``gi``: the input part); the hook ``h``."""
    return at_step(points, "h", activation(gi + F.linear(h, weight_hh, bias_hh)), t)


def gru_step(points: Mapping[str, Any], t: int, gi: torch.Tensor, h: torch.Tensor, weight_hh: torch.Tensor,
             bias_hh: torch.Tensor, gate: Any, candidate: Any) -> torch.Tensor:
    """``torch.nn.GRU``'s step (gates r, z, n) with the activations ``gate`` and ``candidate``; each gate a hook."""
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = F.linear(h, weight_hh, bias_hh).chunk(3, dim=-1)
    r = at_step(points, "r", gate(i_r + h_r), t)
    z = at_step(points, "z", gate(i_z + h_z), t)
    n = at_step(points, "n", candidate(i_n + r * h_n), t)
    return at_step(points, "h", (1 - z) * n + z * h, t)


def lstm_step(points: Mapping[str, Any], t: int, gi: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
              weight_hh: torch.Tensor, bias_hh: torch.Tensor, gate: Any, candidate: Any
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.nn.LSTM``'s step (gates i, f, g, o; cell c) with the activations given; each a hook."""
    i, f, g, o = (gi + F.linear(h, weight_hh, bias_hh)).chunk(4, dim=-1)
    i, f = at_step(points, "i", gate(i), t), at_step(points, "f", gate(f), t)
    g, o = at_step(points, "g", candidate(g), t), at_step(points, "o", gate(o), t)
    c = at_step(points, "c", f * c + i * g, t)
    return at_step(points, "h", o * candidate(c), t), c
