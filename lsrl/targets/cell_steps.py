"""The steps of the recurrent cells, written once: ``torch.nn.RNN`` / ``GRU`` / ``LSTM``'s equations with the
activations given (ReLU for the LSRL paper's cells, Apps. C and D), and the record of one ``run_with_cache``
call (``Run``: what each hook held, and the patches set inside the recurrence). lsrl's ReLU GRU / LSTM layers
(``lsrl.targets.gru_lstm``) and ``run_with_cache`` (``lsrl.targets.cache``) run them, and the benchmark suite's
``load_model.py`` holds this code verbatim (``lsrl.bench.standalone`` with it inlined, so that the file needs
torch only).

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
             bias_hh: torch.Tensor | None, activation: Any) -> torch.Tensor:
    """``h' = act(W_ih x + b_ih + W_hh h + b_hh)`` (``gi``: the input part); the hook ``h``."""
    return at_step(points, "h", activation(gi + F.linear(h, weight_hh, bias_hh)), t)


def gru_step(points: Mapping[str, Any], t: int, gi: torch.Tensor, h: torch.Tensor, weight_hh: torch.Tensor,
             bias_hh: torch.Tensor | None, gate: Any, candidate: Any) -> torch.Tensor:
    """``torch.nn.GRU``'s step (gates r, z, n) with the activations ``gate`` and ``candidate``; each gate a hook."""
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = F.linear(h, weight_hh, bias_hh).chunk(3, dim=-1)
    r = at_step(points, "r", gate(i_r + h_r), t)
    z = at_step(points, "z", gate(i_z + h_z), t)
    n = at_step(points, "n", candidate(i_n + r * h_n), t)
    return at_step(points, "h", (1 - z) * n + z * h, t)


def lstm_step(points: Mapping[str, Any], t: int, gi: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
              weight_hh: torch.Tensor, bias_hh: torch.Tensor | None, gate: Any, candidate: Any
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.nn.LSTM``'s step (gates i, f, g, o; cell c) with the activations given; each a hook."""
    i, f, g, o = (gi + F.linear(h, weight_hh, bias_hh)).chunk(4, dim=-1)
    i, f = at_step(points, "i", gate(i), t), at_step(points, "f", gate(f), t)
    g, o = at_step(points, "g", candidate(g), t), at_step(points, "o", gate(o), t)
    c = at_step(points, "c", f * c + i * g, t)
    return at_step(points, "h", o * candidate(c), t), c


def run_steps(kind: str, points: Mapping[str, Any], gi: torch.Tensor, h: torch.Tensor, c: torch.Tensor | None,
              weight_hh: torch.Tensor, bias_hh: torch.Tensor | None, gate: Any, candidate: Any
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Every step of one ``kind`` (``"rnn"``, ``"gru"``, ``"lstm"``) layer on its input parts ``gi``
    ``(B, T, blocks * H)`` from the state ``h`` (and cell ``c``): the states ``(B, T, H)``, the last ``h``, ``c``."""
    outputs = []
    for t in range(gi.shape[1]):
        if kind == "lstm":
            assert c is not None  # an LSTM layer carries its cell
            h, c = lstm_step(points, t, gi[:, t], h, c, weight_hh, bias_hh, gate, candidate)
        elif kind == "gru":
            h = gru_step(points, t, gi[:, t], h, weight_hh, bias_hh, gate, candidate)
        else:
            h = rnn_step(points, t, gi[:, t], h, weight_hh, bias_hh, candidate)
        outputs.append(h)
    states = torch.stack(outputs, dim=1) if outputs else gi.new_zeros(gi.shape[0], 0, h.shape[-1])
    return states, h, c


class Run:
    """What one ``run_with_cache`` call records and patches: ``patch`` maps a hook name to ``(B, T, width)`` values
    (NaN entries keep the model's own value) for a run of ``steps`` steps; ``cache`` gathers each hook's values,
    whole sequences or one ``(B, width)`` tensor per step inside a recurrence. ``error``: the exception raised for
    a patch of the wrong shape."""

    def __init__(self, patch: Mapping[str, torch.Tensor], steps: int, error: type[Exception] = ValueError) -> None:
        self.patch, self.steps, self.error = patch, steps, error
        self.cache: dict[str, Any] = {}  # a whole sequence, or a list of per-step values

    def patched(self, name: str, value: torch.Tensor, step: int | None) -> torch.Tensor:
        """``value`` (at ``step``, or a whole sequence for None) with the patch of hook ``name`` set."""
        if name not in self.patch:
            return value
        values = self.patch[name]
        holds = tuple(value.shape) if step is None else (value.shape[0], self.steps, *value.shape[1:])
        if tuple(values.shape) != holds:
            raise self.error(f"patch for {name!r} has shape {tuple(values.shape)}, the hook holds {holds}")
        values = values if step is None else values[:, step]
        return torch.where(torch.isnan(values), value, values.to(value.dtype))

    def visit(self, name: str, value: torch.Tensor, step: int | None) -> torch.Tensor:
        """``patched``, and recorded in ``cache``."""
        value = self.patched(name, value, step)
        if step is None:
            self.cache[name] = value
        else:
            self.cache.setdefault(name, []).append(value)
        return value

    def finished(self) -> dict[str, torch.Tensor]:
        """``{hook name: values (B, T, width)}``, in the order the hooks were first reached."""
        return {name: torch.stack(value, dim=1) if isinstance(value, list) else value
                for name, value in self.cache.items()}
