"""Stock ``transformers`` ``RecurrentGemmaForCausalLM`` (Hawk, Griffin) run step by step (``lsrl.hooks.hooked``).

Hook points of layer i (``layers.{i}.``), in the order a step reaches them:

* ``input``: the residual stream entering the layer (hidden);
* a recurrent block: ``rg_lru.input`` (x_t after the convolution), ``rg_lru.input_gate`` (i_t),
  ``rg_lru.recurrence_gate`` (r_t; the decay is ``a_t = exp(-8 r_t softplus(Λ))``), ``rg_lru.state`` (h_t, the
  RG-LRU's state after the step: what the block outputs and the next step reads), ``conv_state`` (the
  convolution's window after the step: what the next step's convolution reads);
* a local-attention block (Griffin): ``attention`` (its output; its keys and values stay in the stock cache);
* ``output``: the residual stream leaving the layer (after its MLP).

The RG-LRU step is the stock ``RecurrentGemmaRglru`` step written out with the module's own weights and
functions, so that its gates can be read and set; the rest of the model runs as it is.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from lsrl.hooks.points import HookPoints
from lsrl.hooks.transformers_steps import (
    CausalLMStepper, block_points, causal_lm_output, read_inputs, step_inputs,
)

RG_LRU_POINTS = ("rg_lru.input", "rg_lru.input_gate", "rg_lru.recurrence_gate", "rg_lru.state", "conv_state")


class RecurrentGemmaStepper(CausalLMStepper):
    """The stepped run of a ``RecurrentGemmaForCausalLM``."""

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.blocks = [layer.temporal_block for layer in self.model.model.layers]
        self.hook_names = [f"layers.{index}.{name}" for index, block in enumerate(self.blocks)
                           for name in ("input", *(RG_LRU_POINTS if _recurrent(block) else ("attention",)),
                                        "output")]

    def run(self, points: HookPoints, *args: Any, **kwargs: Any) -> Any:
        from transformers import DynamicCache

        kind, values = read_inputs(self.model, args, kwargs)
        count = values.shape[0]
        cache = DynamicCache(config=self.model.config)
        for block in filter(_recurrent, self.blocks):  # zero states, as a new cache's _setup_cache makes them
            block.conv1d_state = torch.zeros(count, block.hidden_size, block.conv1d_width - 1,
                                             dtype=block.linear_x.weight.dtype, device=values.device)
            block.rg_lru.recurrent_states = torch.zeros(count, block.lru_width, dtype=torch.float32,
                                                        device=values.device)
        outputs = []
        layers = list(self.model.model.layers)
        with block_points(points, layers, lambda: self.step, ("activations",)), self._block_points(points):
            for t in range(values.shape[1]):
                self.step = t
                positions = torch.full((count, 1), t, dtype=torch.long, device=values.device)
                outputs.append(self.model(**step_inputs(kind, values, t), position_ids=positions, cache=cache,
                                          use_cache=True, attention_mask={"sliding_attention": None}))
                for index, block in enumerate(self.blocks):
                    if _recurrent(block):  # the window the next step reads
                        window = block.conv1d_state
                        block.conv1d_state = points.at(f"layers.{index}.conv_state", window.flatten(1),
                                                       t).reshape(window.shape)
        return causal_lm_output(outputs)

    @contextlib.contextmanager
    def _block_points(self, points: HookPoints) -> Iterator[None]:
        handles = []
        for index, block in enumerate(self.blocks):
            if _recurrent(block):
                block.rg_lru.forward = _stepped_rg_lru(block.rg_lru, points, f"layers.{index}.rg_lru.",
                                                       lambda: self.step)
            else:
                handles.append(block.register_forward_hook(_attention_point(points, index, lambda: self.step)))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            for block in filter(_recurrent, self.blocks):
                del block.rg_lru.forward  # the class's own forward again


def _recurrent(block: nn.Module) -> bool:
    return hasattr(block, "rg_lru")


def _attention_point(points: HookPoints, index: int, step: Callable[[], int]) -> Callable:
    def hook(module: nn.Module, args: tuple, output: tuple) -> tuple:
        return points.at(f"layers.{index}.attention", output[0][:, 0], step())[:, None], *output[1:]
    return hook


def _stepped_rg_lru(lru: Any, points: HookPoints, at: str, step: Callable[[], int]) -> Callable:
    """One step of the stock RG-LRU (``RecurrentGemmaRglru.forward`` at one position, with a state), its input,
    gates and state through the points."""
    modeling = importlib.import_module("transformers.models.recurrent_gemma.modeling_recurrent_gemma")

    def gate(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        count, _, width = x.shape  # block-diagonal per head, as the stock baddbmm
        heads = x.reshape(count, lru.num_attention_heads, lru.block_width).permute(1, 0, 2)
        return torch.sigmoid(torch.baddbmm(bias[:, None, :], heads, weight).transpose(0, 1).reshape(count, 1, width))

    def forward(activations: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        t = step()
        x = points.at(at + "input", activations[:, 0], t)[:, None]
        reset = position_ids[:, :, None] == 0
        input_gate = points.at(at + "input_gate", gate(x, lru.input_gate_weight, lru.input_gate_bias)[:, 0], t)
        recurrence_gate = points.at(at + "recurrence_gate",
                                    gate(x, lru.recurrent_gate_weight, lru.recurrent_gate_bias)[:, 0], t)
        log_a = -8.0 * recurrence_gate[:, None] * nn.functional.softplus(lru.recurrent_param)
        a, a_square = torch.exp(log_a), torch.exp(2 * log_a)
        multiplier = modeling.SqrtBoundDerivative.apply(1 - a_square)
        multiplier = reset + ~reset * multiplier
        normalized = x * input_gate[:, None] * multiplier.type(activations.dtype)
        _, state = lru._rnn_scan(hidden_states=normalized, recurrent_gate=a, reset=reset,
                                 recurrent_states=lru.recurrent_states)
        lru.recurrent_states = points.at(at + "state", state, t)
        return lru.recurrent_states[:, None].type(activations.dtype)

    return forward
