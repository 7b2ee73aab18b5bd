"""What the stepped runs of the stock ``transformers`` models share: reading the arguments, hooking a block's
input and output, and the loop over steps (``lsrl.hooks.mamba``, ``lsrl.hooks.recurrentgemma``).

A stock ``*ForCausalLM`` is run one token at a time through its own cache, from zero states (as its full
forward starts), with every position given; each step's logits are concatenated into the output the model's
own forward returns (its output class, ``logits`` set).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from lsrl.hooks.points import HookError, HookPoints

TOLERANCE = ("the stepped run is the model's own decoding path (one token at a time through its cache); it "
             "differs from the full forward's scan or convolution by float rounding: the order of the sums "
             "(about 1e-15 relative in float64, 1e-6 in float32, growing with the sequence length)")


class CausalLMStepper:
    """What the steppers of the stock causal LMs share: the model, the step being run (read by their hooks), the
    run's shape from its arguments."""

    tolerance = TOLERANCE
    hook_names: list[str]

    def __init__(self, model: Any) -> None:  # a stock transformers model: its attributes are the model's own
        self.model = model
        self.step = 0

    def shape(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        values = read_inputs(self.model, args, kwargs)[1]
        return values.shape[0], values.shape[1]


def read_inputs(model: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[str, torch.Tensor]:
    """``("input_ids" | "inputs_embeds", values (batch, steps[, hidden]))`` of a causal LM call."""
    name = type(model).__name__
    given = dict(kwargs)
    if args:
        if len(args) > 1 or "input_ids" in given:
            raise HookError(f"{name}: hooked runs take input_ids (one positional argument) or inputs_embeds")
        given["input_ids"] = args[0]
    mask = given.pop("attention_mask", None)
    if mask is not None and not bool(torch.as_tensor(mask).bool().all()):
        raise HookError(f"{name}: a hooked run steps through every position; an attention_mask with zeros "
                        "(padding) is not supported: run the sequences without padding")
    given.pop("use_cache", None)
    unknown = sorted(set(given) - {"input_ids", "inputs_embeds"})
    if unknown:
        raise HookError(f"{name}: hooked runs take input_ids or inputs_embeds (and an all-ones attention_mask), "
                        f"not {unknown[0]!r}")
    if ("input_ids" in given) == ("inputs_embeds" in given):
        raise HookError(f"{name}: give exactly one of input_ids (batch, steps) and inputs_embeds "
                        "(batch, steps, hidden)")
    kind = "input_ids" if "input_ids" in given else "inputs_embeds"
    values = given[kind]
    rank = 2 if kind == "input_ids" else 3
    if not isinstance(values, torch.Tensor) or values.dim() != rank or values.shape[1] == 0:
        shape = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
        raise HookError(f"{name}: {kind} of {rank} dimensions (batch, steps{', hidden' if rank == 3 else ''}) "
                        f"with at least one step expected, got {shape}")
    return kind, values


def _first(args: tuple, kwargs: dict[str, Any], names: tuple[str, ...]) -> tuple[torch.Tensor, Callable]:
    """A block's first input (positional or by one of ``names``) and a function putting a new one in its place."""
    if args:
        return args[0], lambda values: ((values, *args[1:]), kwargs)
    key = next(name for name in names if name in kwargs)
    return kwargs[key], lambda values: (args, {**kwargs, key: values})


@contextlib.contextmanager
def block_points(points: HookPoints, blocks: list[nn.Module], step: Callable[[], int],
                 names: tuple[str, ...]) -> Iterator[None]:
    """``layers.{i}.input`` and ``layers.{i}.output`` on the residual stream around each block (``(B, 1, H)``
    per step)."""
    def before(index: int) -> Callable:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple:
            values, replaced = _first(args, kwargs, names)
            return replaced(points.at(f"layers.{index}.input", values[:, 0], step())[:, None])
        return hook

    def after(index: int) -> Callable:
        def hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
            values = output[0] if isinstance(output, tuple) else output
            values = points.at(f"layers.{index}.output", values[:, 0], step())[:, None]
            return (values, *output[1:]) if isinstance(output, tuple) else values
        return hook

    handles = [handle for index, block in enumerate(blocks)
               for handle in (block.register_forward_pre_hook(before(index), with_kwargs=True),
                              block.register_forward_hook(after(index), with_kwargs=True))]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def step_inputs(kind: str, values: torch.Tensor, t: int) -> dict[str, torch.Tensor]:
    return {kind: values[:, t:t + 1]}


def causal_lm_output(outputs: list[Any]) -> Any:
    """The model's own output class with the steps' logits concatenated."""
    return type(outputs[0])(logits=torch.cat([output.logits for output in outputs], dim=1))
