"""LSTM and GRU baselines with the models' interface (``layout``, ``parts``, ``forward``), sized to
a given parameter count so that they compete with an NTM on equal terms."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from lsrl.llrnn.checks import LlrnnArgumentError, check_inputs, count

GATES = {"lstm": 4, "gru": 3}  # weight blocks per unit: torch's LSTM has 4 gates, its GRU 3
RECURRENT = {"lstm": nn.LSTM, "gru": nn.GRU}


class Baseline(nn.Module):
    """``torch.nn.LSTM`` or ``GRU`` (one layer, batch first); its hidden state is the state part ``h0``."""

    def __init__(self, kind: str, input_dim: int, hidden_dim: int, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        if kind not in RECURRENT:
            raise LlrnnArgumentError(f"Baseline: kind must be one of {', '.join(RECURRENT)}, got {kind!r}")
        input_dim, hidden_dim = count("Baseline", "input_dim", input_dim), count("Baseline", "hidden_dim", hidden_dim)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise LlrnnArgumentError(f"Baseline: dtype must be a floating torch.dtype (torch.float32, torch.float64), "
                                     f"got {dtype!r}")
        self.kind, self.input_dim, self.controller_dim = kind, input_dim, hidden_dim
        self.rnn = RECURRENT[kind](input_dim, hidden_dim, batch_first=True, dtype=dtype, device=device)
        self.layout, self.state_dim = {"h0": (0, (hidden_dim,))}, hidden_dim

    @property
    def name(self) -> str:
        return self.kind.upper()

    def forward(self, xs: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        """The hidden states (B, T, hidden) after reading ``xs`` (B, T, input_dim) from zero."""
        parameter = self.rnn.weight_ih_l0
        check_inputs(self.name, xs, self.input_dim, parameter.dtype, parameter.device)
        return self.rnn(xs)[0]

    def trajectory(self, xs: torch.Tensor, h: torch.Tensor | None = None, keep: Iterable[str] | None = None
                   ) -> dict[str, torch.Tensor]:
        return {"h0": self(xs, h)}

    def parts(self, h: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"h0": h}


def recurrent_parameters(kind: str, input_dim: int, hidden_dim: int) -> int:
    """Parameters of torch's one-layer LSTM / GRU: per gate ``W_ih, W_hh`` and two biases."""
    return GATES[kind] * hidden_dim * (input_dim + hidden_dim + 2)


def matched_hidden(kind: str, input_dim: int, target: int, readout: Callable[[int], int]) -> int:
    """The hidden size whose ``recurrent_parameters + readout(hidden)`` comes closest to ``target``."""
    def total(hidden: int) -> int:
        return recurrent_parameters(kind, input_dim, hidden) + readout(hidden)

    hidden = 1
    while total(hidden + 1) <= target:  # total grows by at least 1 per unit: at most target rounds
        hidden += 1
    return hidden if target - total(hidden) <= total(hidden + 1) - target else hidden + 1
