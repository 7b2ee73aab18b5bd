"""Stock ``torch.nn.RNN`` / ``LSTM`` / ``GRU`` run step by step (``lsrl.hooks.hooked``).

Each step of each layer computes torch's documented equations from the module's own weights, every value at
a hook point of its layer (``layers.{i}.``): ``input`` (what the layer reads: the sequence for layer 0, the
previous layer's ``hidden_state`` otherwise), then

* LSTM: ``input_gate``, ``forget_gate``, ``cell_input`` (g), ``output_gate``, ``cell_state`` (c_t),
  ``hidden_state`` (h_t; after the projection where ``proj_size`` > 0);
* GRU: ``reset_gate``, ``update_gate``, ``new_state`` (n_t), ``hidden_state``;
* RNN: ``pre_activation``, ``hidden_state``.

A patched state is the state the next step reads; a patched gate is what the step's update uses. The outputs
are the module's own ``(output, h_n)`` (LSTM: ``(output, (h_n, c_n))``), in its layout (``batch_first``,
unbatched input). Modules in training mode with dropout between layers, and bidirectional ones, are refused.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lsrl.hooks.points import HookError, HookPoints

GATES = {"LSTM": ("input_gate", "forget_gate", "cell_input", "output_gate", "cell_state", "hidden_state"),
         "GRU": ("reset_gate", "update_gate", "new_state", "hidden_state"),
         "RNN_TANH": ("pre_activation", "hidden_state"), "RNN_RELU": ("pre_activation", "hidden_state")}

TOLERANCE = ("the stepped run computes torch's documented equations with torch.matmul and torch's activations; "
             "it differs from the module's fused kernel (oneDNN on CPU, cuDNN on GPU) by float rounding: "
             "a few units in the last place per step (about 1e-15 relative in float64, 1e-6 in float32)")


class RecurrentStepper:
    """The stepped run of one ``nn.RNN``, ``nn.LSTM`` or ``nn.GRU``."""

    tolerance = TOLERANCE

    def __init__(self, module: nn.RNNBase) -> None:
        if module.bidirectional:
            raise HookError(f"{type(module).__name__}: a bidirectional module reads the future at every step; "
                            "hooked runs take one direction (bidirectional=False)")
        self.module, self.mode = module, module.mode
        self.hook_names = [f"layers.{layer}.{name}" for layer in range(module.num_layers)
                           for name in ("input",) + GATES[module.mode]]

    def shape(self, input: Any, hx: Any = None) -> tuple[int, int]:
        xs = self._batched(input)
        return xs.shape[0], xs.shape[1]

    def _batched(self, input: Any) -> torch.Tensor:
        """``input`` as (batch, steps, features)."""
        name, module = type(self.module).__name__, self.module
        if not isinstance(input, torch.Tensor) or input.dim() not in (2, 3) or input.shape[-1] != module.input_size:
            shape = tuple(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__
            raise HookError(f"{name}: input of shape (steps, {module.input_size}) or (batch, steps, "
                            f"{module.input_size}) expected (batch_first={module.batch_first}), got {shape}")
        if input.dim() == 2:
            return input[None]
        return input if module.batch_first else input.transpose(0, 1)

    def _initial(self, hx: Any, count: int, dtype: torch.dtype, device: torch.device
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(h0, c0)`` as (layers, batch, width); c0 None but for an LSTM."""
        module = self.module
        width = module.proj_size or module.hidden_size
        zeros = torch.zeros(module.num_layers, count, width, dtype=dtype, device=device)
        cells = torch.zeros(module.num_layers, count, module.hidden_size, dtype=dtype, device=device)
        if hx is None:
            return zeros, cells if self.mode == "LSTM" else None
        given = hx if self.mode == "LSTM" else (hx, None)
        if self.mode == "LSTM" and not (isinstance(hx, tuple) and len(hx) == 2):
            raise HookError("LSTM: hx is a pair (h0, c0)")
        h0, c0 = given
        h0 = h0 if h0.dim() == 3 else h0[:, None]
        if h0.shape != zeros.shape:
            raise HookError(f"{type(module).__name__}: h0 of shape {tuple(zeros.shape)} (layers, batch, width) "
                            f"expected, got {tuple(h0.shape)}")
        if c0 is not None:
            c0 = c0 if c0.dim() == 3 else c0[:, None]
            if c0.shape != cells.shape:
                raise HookError(f"LSTM: c0 of shape {tuple(cells.shape)} expected, got {tuple(c0.shape)}")
        return h0, c0

    def run(self, points: HookPoints, input: Any, hx: Any = None) -> Any:
        module = self.module
        if module.training and module.dropout > 0 and module.num_layers > 1:
            raise HookError(f"{type(module).__name__}: dropout between layers is random in training mode; "
                            "call .eval() before a hooked run")
        xs = self._batched(input)
        h0, c0 = self._initial(hx, xs.shape[0], xs.dtype, xs.device)
        hidden, cells = list(h0.unbind(0)), list(c0.unbind(0)) if c0 is not None else None
        outputs = []
        for t in range(xs.shape[1]):
            x = xs[:, t]
            for layer in range(module.num_layers):
                x = points.at(f"layers.{layer}.input", x, t)
                if cells is not None:
                    hidden[layer], cells[layer] = self._lstm(points, layer, t, x, hidden[layer], cells[layer])
                else:
                    hidden[layer] = self._step(points, layer, t, x, hidden[layer])
                x = hidden[layer]
            outputs.append(x)
        return self._outputs(input, torch.stack(outputs, dim=1), hidden, cells)

    def _weights(self, layer: int) -> tuple[torch.Tensor, ...]:
        module, names = self.module, (f"weight_ih_l{layer}", f"weight_hh_l{layer}", f"bias_ih_l{layer}",
                                      f"bias_hh_l{layer}")
        w_ih, w_hh = getattr(module, names[0]), getattr(module, names[1])
        b_ih = getattr(module, names[2]) if module.bias else torch.zeros_like(w_ih[:, 0])
        b_hh = getattr(module, names[3]) if module.bias else torch.zeros_like(w_hh[:, 0])
        return w_ih, w_hh, b_ih, b_hh

    def _lstm(self, points: HookPoints, layer: int, t: int, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        w_ih, w_hh, b_ih, b_hh = self._weights(layer)
        pre = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        i, f, g, o = pre.chunk(4, dim=-1)
        at = f"layers.{layer}."
        i = points.at(at + "input_gate", torch.sigmoid(i), t)
        f = points.at(at + "forget_gate", torch.sigmoid(f), t)
        g = points.at(at + "cell_input", torch.tanh(g), t)
        o = points.at(at + "output_gate", torch.sigmoid(o), t)
        c = points.at(at + "cell_state", f * c + i * g, t)
        h = o * torch.tanh(c)
        if self.module.proj_size:
            h = h @ getattr(self.module, f"weight_hr_l{layer}").T
        return points.at(at + "hidden_state", h, t), c

    def _step(self, points: HookPoints, layer: int, t: int, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        w_ih, w_hh, b_ih, b_hh = self._weights(layer)
        at = f"layers.{layer}."
        if self.mode == "GRU":
            read, carried = x @ w_ih.T + b_ih, h @ w_hh.T + b_hh
            (r_x, z_x, n_x), (r_h, z_h, n_h) = read.chunk(3, dim=-1), carried.chunk(3, dim=-1)
            r = points.at(at + "reset_gate", torch.sigmoid(r_x + r_h), t)
            z = points.at(at + "update_gate", torch.sigmoid(z_x + z_h), t)
            n = points.at(at + "new_state", torch.tanh(n_x + r * n_h), t)
            return points.at(at + "hidden_state", (1 - z) * n + z * h, t)
        pre = points.at(at + "pre_activation", x @ w_ih.T + b_ih + h @ w_hh.T + b_hh, t)
        activation = torch.tanh if self.mode == "RNN_TANH" else torch.relu
        return points.at(at + "hidden_state", activation(pre), t)

    def _outputs(self, input: torch.Tensor, output: torch.Tensor, hidden: list[torch.Tensor],
                 cells: list[torch.Tensor] | None) -> Any:
        """The module's own return value: ``(output, h_n)`` or ``(output, (h_n, c_n))`` in its layout."""
        h_n = torch.stack(hidden)
        c_n = torch.stack(cells) if cells is not None else None
        if input.dim() == 2:
            output, h_n = output[0], h_n[:, 0]
            c_n = c_n[:, 0] if c_n is not None else None
        elif not self.module.batch_first:
            output = output.transpose(0, 1)
        return (output, (h_n, c_n)) if c_n is not None else (output, h_n)
