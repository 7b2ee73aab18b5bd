"""Stock ``transformers`` ``MambaForCausalLM`` and ``Mamba2ForCausalLM`` run step by step (``lsrl.hooks.hooked``).

Hook points of layer i (``layers.{i}.``), in the order a step reaches them:

* ``input``: the residual stream entering the block (hidden);
* ``ssm_input`` (u_t, after the convolution and activation), ``dt`` (Δ_t after ``dt_bias`` and softplus),
  ``B``, ``C`` (the input-dependent projections; Mamba-2: per group), ``gate`` (z_t before its SiLU; Mamba-1
  only: Mamba-2 gates inside its group norm);
* ``ssm_state``: the state after the step (Mamba-1 ``intermediate x state_size``, unit ``d * state_size + n``;
  Mamba-2 ``heads x head_dim x state_size``); the step's output is read from the state as set;
* ``conv_state``: the convolution's window after the step (channel-major); a patched window is what the next
  step's convolution reads;
* ``output``: the residual stream leaving the block.

The SSM values are set inside the stock ``*_selective_state_update``: its arguments pass through the points,
it advances the state, the state passes through ``ssm_state``, and the same function called with Δ = 0 (decay
1, no input) computes the step's output from the state as set.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from lsrl.hooks.points import HookPoints
from lsrl.hooks.transformers_steps import (
    CausalLMStepper, block_points, causal_lm_output, read_inputs, step_inputs,
)

SSM_POINTS = ("ssm_input", "dt", "B", "C")


class MambaStepper(CausalLMStepper):
    """The stepped run of a ``MambaForCausalLM`` or ``Mamba2ForCausalLM``."""

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.kind = self.model.config.model_type  # "mamba" or "mamba2"
        gate = ("gate",) if self.kind == "mamba" else ()
        self.hook_names = [f"layers.{index}.{name}" for index in range(self.model.config.num_hidden_layers)
                           for name in ("input", *SSM_POINTS, *gate, "ssm_state", "conv_state", "output")]

    def run(self, points: HookPoints, *args: Any, **kwargs: Any) -> Any:
        kind, values = read_inputs(self.model, args, kwargs)
        cache, layers = self._zero_cache(values.shape[0], values.device)
        outputs = []
        blocks = list(self.model.backbone.layers)
        with block_points(points, blocks, lambda: self.step, ("hidden_states",)), self._ssm_points(points):
            for t in range(values.shape[1]):
                self.step = t
                outputs.append(self.model(**step_inputs(kind, values, t), cache=cache, use_cache=True))
                for index, layer in enumerate(layers):  # the window the next step reads
                    window = layer.conv_states[0]
                    set_window = points.at(f"layers.{index}.conv_state", window.flatten(1), t)
                    layer.conv_states[0] = set_window.reshape(window.shape).clone()  # updated in place next step
        return causal_lm_output(outputs)

    def _zero_cache(self, count: int, device: torch.device) -> tuple[Any, list[Any]]:
        """A cache whose every layer holds zero states from the first step, so every step takes the decoding path
        (zeros: as the full forward's zero padding and zero initial state)."""
        from transformers import DynamicCache

        config, dtype = self.model.config, self.model.lm_head.weight.dtype
        cache = DynamicCache(config=config)
        state: tuple[int, ...]
        if self.kind == "mamba2":  # x, B and C pass through the conv; the state per head
            channels = config.expand * config.hidden_size + 2 * config.n_groups * config.state_size
            state = (config.num_heads, config.head_dim, config.state_size)
        else:
            channels, state = config.intermediate_size, (config.intermediate_size, config.state_size)
        layers: list[Any] = list(cache.layers)  # the stock Mamba cache layers (typed as any cache's)
        for layer in layers:
            layer.lazy_initialization(
                conv_states=torch.zeros(count, channels, config.conv_kernel, dtype=dtype, device=device),
                recurrent_states=torch.zeros(count, *state, dtype=dtype, device=device),
                conv_kernel_size=config.conv_kernel)
            layer.has_previous_state[0] = True
        return cache, layers

    @contextlib.contextmanager
    def _ssm_points(self, points: HookPoints) -> Iterator[None]:
        modeling = importlib.import_module(f"transformers.models.{self.kind}.modeling_{self.kind}")
        name = f"{self.kind}_selective_state_update"
        stock = getattr(modeling, name)
        count = self.model.config.num_hidden_layers
        calls = iter(range(10**9))  # the blocks call the update in order within a step

        def update(state: torch.Tensor, hidden_states: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                   B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None = None,
                   dt_bias: torch.Tensor | None = None, dt_softplus: bool = False, z: torch.Tensor | None = None,
                   **kwargs: Any) -> torch.Tensor:
            at, t = f"layers.{next(calls) % count}.", self.step
            if dt_bias is not None:  # as the stock update: the bias, then softplus, in dt's dtype
                dt = dt + dt_bias.to(dt.dtype)
            if dt_softplus:
                dt = nn.functional.softplus(dt)
            hidden_states = _through(points, at + "ssm_input", hidden_states, t)
            dt, B, C = (_through(points, at + part, values, t) for part, values in (("dt", dt), ("B", B), ("C", C)))
            if z is not None:
                z = _through(points, at + "gate", z, t)
            stock(state, hidden_states, dt, A, B, C, D, z=None, **kwargs)  # advances the state in place
            state.copy_(_through(points, at + "ssm_state", state.clone(), t))  # a copy: not a view of the cache
            hold = torch.full_like(dt, -torch.inf)  # softplus(-inf) = 0: exp(0 A) = 1 and 0 B u = 0
            return stock(state, hidden_states, hold, A, B, C, D, dt_softplus=True, z=z, **kwargs)

        setattr(modeling, name, update)
        try:  # the stock update saves the state for the backward pass, then overwrites it: autograd keeps a copy
            with torch.autograd.graph.saved_tensors_hooks(torch.clone, _unchanged):
                yield
        finally:
            setattr(modeling, name, stock)


def _through(points: HookPoints, name: str, values: torch.Tensor, step: int) -> torch.Tensor:
    """``values`` (batch, ...) through the point as (batch, width), back in their own shape."""
    return points.at(name, values.flatten(1), step).reshape(values.shape)


def _unchanged(values: torch.Tensor) -> torch.Tensor:
    return values
