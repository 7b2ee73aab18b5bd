"""``load_model.py`` of a trained-tier folder holding a stock ``transformers`` model (``lsrl bench build --tier
trained --arch mamba``; ``lsrl.bench.training.hf``): torch and transformers only, no lsrl.

The folder is what ``save_pretrained`` writes (``config.json``, ``model.safetensors``), so
``AutoModelForCausalLM.from_pretrained(folder)`` loads the stock ``MambaForCausalLM``, ``Mamba2ForCausalLM`` or
``RecurrentGemmaForCausalLM``; ``config.json`` also holds the suite's record ``lsrl_bench`` (task, architecture,
tier, token offset, output width, hooks). ``load_folder(folder)`` returns a ``SteppedModel``: the stock model
run one token at a time through its own cache (which equals its full forward), with one hook per carried state
of each layer, read and set between steps, so that a patched state is the state the next step reads:

* Mamba: ``layers.{i}.conv_state`` (the convolution's window, ``intermediate x conv_kernel``, channel-major) and
  ``layers.{i}.ssm_state`` (``intermediate x state_size``, channel-major: unit ``d * state_size + n``);
* Mamba-2: ``layers.{i}.conv_state`` (``(intermediate + 2 n_groups state_size) x conv_kernel``: x, B and C pass
  through the conv) and ``layers.{i}.ssm_state`` (``num_heads x head_dim x state_size``: unit
  ``(h * head_dim + p) * state_size + n``);
* RecurrentGemma (Hawk, Griffin), a recurrent block: ``layers.{i}.conv_state`` (``lru_width x (conv1d_width - 1)``)
  and ``layers.{i}.recurrent_state`` (the RG-LRU state, ``lru_width``); a local-attention block (Griffin):
  ``layers.{i}.attention`` (its output, ``hidden_size``, before the residual sum; its keys and values stay in the
  stock cache, unhooked: they are computed from the block's input, downstream of the states of earlier layers);
* ``readout``: the outputs, ``logits[..., output_logits]``.

``net.run_with_cache(xs, patch=None, grad=False)`` -> ``(outputs (B, T, d_out), {hook: values (B, T, width)})``;
``xs`` ``(B, T, 1)`` tokens; ``patch`` ``{hook: values (B, T, width)}``, NaN where the model keeps its own value,
the rest set at that step inside the recurrence; ``grad`` keeps the autograd graph. Each hook is also a
``HookPoint`` module (``net.points``, keyed by the name with ``__`` for ``.``) reached at every step, so a plain
forward hook on one (or a tool that wraps modules, such as nnsight) reads and sets the hook inside the
recurrence of a plain ``net(xs)``. ``manifest.json``'s sha256 of the model files is checked.

A RecurrentGemma folder's ``config.json`` says ``use_cache: false``: in transformers 5 a plain forward of such a
model without attention layers fails with the default cache (``DynamicCache.get_seq_length``); ``generate`` and
step-by-step decoding pass their own cache and positions.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any, ContextManager, Protocol, cast

import torch
from torch import nn

RECORD = "lsrl_bench"  # the suite's record in config.json
MODEL_FILES = ("config.json", "model.safetensors")


def load_folder(folder: str | Path) -> SteppedModel:
    """The folder's stock model (``from_pretrained``, float64) as a ``SteppedModel``; ``ValueError`` naming the
    file when a model file differs from ``manifest.json``'s sha256 or the record is missing."""
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["sha256"]
    for name in MODEL_FILES:
        if hashlib.sha256((folder / name).read_bytes()).hexdigest() != manifest.get(name):
            raise ValueError(f"{folder / name}: changed since the build (sha256 differs from manifest.json)")
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64)
    if not isinstance(getattr(hf.config, RECORD, None), dict):
        raise ValueError(f"{folder / 'config.json'}: no field {RECORD!r}: not a folder of the suite")
    return SteppedModel(hf.eval())


class SteppedModel(nn.Module):
    """A stock model run token by token through its own cache, its carried states hooked (module docstring)."""

    def __init__(self, hf: Any) -> None:  # a stock transformers model: its attributes are the model's own
        super().__init__()
        self.hf: Any = hf  # a stock transformers model (its save_pretrained, config, ...)
        self.record = dict(hf.config.lsrl_bench)
        # one identity module per hook, reached at every step (a ModuleDict key holds no dot: "__" for ".")
        self.points = nn.ModuleDict({name.replace(".", "__"): HookPoint(name) for name in self.hook_names})

    @property
    def hook_names(self) -> list[str]:
        return [hook["name"] for hook in self.record["hooks"]]

    def forward(self, xs: Any) -> torch.Tensor:
        return self.run_with_cache(xs)[0]

    def run_with_cache(self, xs: Any, patch: dict[str, Any] | None = None, grad: bool = False
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(outputs, {hook: values (B, T, width)})``; ``patch`` sets hooks' values inside the run (NaN: keep);
        ``grad``: keep the autograd graph (training)."""
        unknown = sorted(set(patch or {}) - set(self.hook_names))
        if unknown:
            raise ValueError(f"run_with_cache: no hook named {unknown[0]!r}; the hooks are net.hook_names")
        given = {name: torch.as_tensor(values) for name, values in (patch or {}).items()}

        def patched(name: str, t: int, values: torch.Tensor) -> torch.Tensor:
            if name not in given:
                return values
            setting = given[name][:, t].to(values.dtype)
            return torch.where(torch.isnan(setting), values, setting)

        with torch.set_grad_enabled(grad):
            return self.run_steps(xs, patched)

    def run_steps(self, xs: Any, patched: Callable[[str, int, torch.Tensor], torch.Tensor]
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``run_with_cache`` with ``patched(hook, step, values (B, width))`` giving each hook's values at each
        step: a carried state's are what the step's output and the next step read, a conv window's what the
        next step reads."""
        ids = torch.as_tensor(xs).round().long()[..., 0] - int(self.record["token_low"])
        count, steps = ids.shape
        states = STATES[self.record["architecture"]](self.hf, count)
        seen: dict[str, list[torch.Tensor]] = {name: [] for name in self.hook_names}
        def through(name: str, step: int, values: torch.Tensor) -> torch.Tensor:
            """The hook's values at ``step``: patched, then through its ``HookPoint`` (its forward hooks)."""
            return self.points[name.replace(".", "__")](patched(name, step, values), step)

        for t in range(steps):
            def visit(name: str, values: torch.Tensor, step: int = t) -> torch.Tensor:
                return _seen(seen, name, through(name, step, values))

            with states.inside(visit):
                logits = states.step(ids[:, t:t + 1], t)
            for name in (name for name in self.hook_names if name.endswith(".conv_state")):
                seen[name].append(states.set_window(name, through(name, t, states.window(name))))
            seen["readout"].append(through("readout", t, logits[:, 0, self.record["output_logits"]]))
        cache = {name: torch.stack(values, dim=1) for name, values in seen.items()}
        return cache["readout"], cache


class HookPoint(nn.Module):
    """The identity on one hook's values at one step (``forward(values, step)``): a forward hook on it fires at
    every step of a run, plain ``net(xs)`` included, and a tensor it returns is the value the run goes on with."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def forward(self, values: torch.Tensor, step: int) -> torch.Tensor:
        return values


def _seen(seen: dict[str, list[torch.Tensor]], name: str, values: torch.Tensor) -> torch.Tensor:
    seen[name].append(values)
    return values


class MambaStates:
    """A ``MambaForCausalLM``'s or ``Mamba2ForCausalLM``'s cache, every layer's states present from the first step
    (zeros: as the full forward's zero padding and zero initial state), so that every step takes the stock decoding
    path. The SSM state is set inside the step: the stock ``mamba_selective_state_update`` (Mamba-2:
    ``mamba2_selective_state_update``) advances the state, the hook's values replace it, and the same function called
    again with ``dt = 0`` (decay 1, no input) computes the step's output from the state as set."""

    def __init__(self, hf: Any, count: int) -> None:
        from transformers import DynamicCache

        config, dtype = hf.config, hf.lm_head.weight.dtype
        self.hf, self.cache = hf, DynamicCache(config=config)
        self.layers: list[Any] = list(self.cache.layers)  # the stock Mamba cache layers (typed as any cache's)
        self.second = config.model_type == "mamba2"
        state: tuple[int, ...]
        if self.second:  # x, B and C pass through the conv; the state per head
            channels = config.expand * config.hidden_size + 2 * config.n_groups * config.state_size
            state = (config.num_heads, config.head_dim, config.state_size)
        else:
            channels, state = config.intermediate_size, (config.intermediate_size, config.state_size)
        for layer in self.layers:
            layer.lazy_initialization(conv_states=torch.zeros(count, channels, config.conv_kernel, dtype=dtype),
                                      recurrent_states=torch.zeros(count, *state, dtype=dtype),
                                      conv_kernel_size=config.conv_kernel)
            layer.has_previous_state[0] = True

    def step(self, ids: torch.Tensor, t: int) -> torch.Tensor:
        return self.hf(input_ids=ids, cache=self.cache, use_cache=True).logits

    @contextlib.contextmanager
    def inside(self, patched: Callable[[str, torch.Tensor], torch.Tensor]) -> Iterator[None]:
        kind = "mamba2" if self.second else "mamba"
        modeling = importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")
        name = f"{kind}_selective_state_update"
        stock = getattr(modeling, name)
        layers = iter(range(len(self.layers)))  # the blocks run in order within a step

        def update(state: torch.Tensor, hidden_states: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                   B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
            stock(state, hidden_states, dt, A, B, C, D, **{**kwargs, "z": None})  # advances the state in place
            values = patched(f"layers.{next(layers)}.ssm_state", state.flatten(1).clone())  # not a view of the cache
            state.copy_(values.view_as(state))
            hold = torch.full_like(dt, -torch.inf)  # softplus(-inf) = 0: exp(0 A) = 1 and 0 B u = 0
            return stock(state, hidden_states, hold, A, B, C, D, **{**kwargs, "dt_bias": None, "dt_softplus": True})

        setattr(modeling, name, update)
        try:  # the stock update saves the state for the backward pass, then overwrites it: autograd keeps a copy
            with torch.autograd.graph.saved_tensors_hooks(torch.clone, _unchanged):
                yield
        finally:
            setattr(modeling, name, stock)

    def window(self, name: str) -> torch.Tensor:
        return self.layers[_layer(name)].conv_states[0].flatten(1)

    def set_window(self, name: str, values: torch.Tensor) -> torch.Tensor:
        # the next step updates the cache in place: it gets a copy, the caller keeps ``values``
        windows = self.layers[_layer(name)].conv_states
        windows[0] = values.reshape(windows[0].shape).clone()
        return values


class RecurrentGemmaStates:
    """A ``RecurrentGemmaForCausalLM``'s states (Hawk: recurrent blocks only; Griffin: recurrent and local-attention
    blocks), the recurrent blocks' kept on the blocks, from zeros, the attention blocks' keys and values in the stock
    cache; every position is given (position 0 resets the state, as in the full forward). The RG-LRU state is set
    inside the step by a forward hook on the stock ``rg_lru`` module, whose output is the state; an attention
    block's output by a forward hook on the block."""

    def __init__(self, hf: Any, count: int) -> None:
        from transformers import DynamicCache

        self.hf, self.cache = hf, DynamicCache(config=hf.config)
        self.blocks = {index: layer.temporal_block for index, layer in enumerate(hf.model.layers)}
        for block in self.blocks.values():
            if hasattr(block, "rg_lru"):  # from zero states, as _setup_cache does for a new cache
                block.conv1d_state = torch.zeros(count, block.hidden_size, block.conv1d_width - 1,
                                                 dtype=block.linear_x.weight.dtype)
                block.rg_lru.recurrent_states = torch.zeros(count, block.lru_width, dtype=torch.float32)

    def step(self, ids: torch.Tensor, t: int) -> torch.Tensor:
        positions = torch.full(ids.shape, t, dtype=torch.long)
        return self.hf(input_ids=ids, position_ids=positions, cache=self.cache, use_cache=True,
                       attention_mask={"sliding_attention": None}).logits

    @contextlib.contextmanager
    def inside(self, patched: Callable[[str, torch.Tensor], torch.Tensor]) -> Iterator[None]:
        def state(layer: int) -> Callable[[nn.Module, Any, torch.Tensor], torch.Tensor]:
            def replace(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
                states = patched(f"layers.{layer}.recurrent_state", cast(torch.Tensor, module.recurrent_states))
                module.recurrent_states = states
                return states[:, None].to(output.dtype)
            return replace

        def attention(layer: int) -> Callable[[nn.Module, Any, tuple[torch.Tensor, ...]], tuple[torch.Tensor, ...]]:
            def replace(module: nn.Module, args: Any, output: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
                return patched(f"layers.{layer}.attention", output[0][:, 0])[:, None], *output[1:]
            return replace

        handles = [block.rg_lru.register_forward_hook(state(index)) if hasattr(block, "rg_lru")
                   else block.register_forward_hook(attention(index)) for index, block in self.blocks.items()]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def window(self, name: str) -> torch.Tensor:
        return self.blocks[_layer(name)].conv1d_state.flatten(1)

    def set_window(self, name: str, values: torch.Tensor) -> torch.Tensor:
        block = self.blocks[_layer(name)]
        block.conv1d_state = values.reshape(block.conv1d_state.shape)
        return values


def _unchanged(values: torch.Tensor) -> torch.Tensor:
    return values


def _layer(name: str) -> int:
    return int(name.split(".")[1])


class States(Protocol):
    """What ``SteppedModel.run_steps`` asks of an architecture's states (``STATES``)."""

    def step(self, ids: torch.Tensor, t: int) -> torch.Tensor: ...

    def inside(self, patched: Callable[[str, torch.Tensor], torch.Tensor]) -> ContextManager[None]: ...

    def window(self, name: str) -> torch.Tensor: ...

    def set_window(self, name: str, values: torch.Tensor) -> torch.Tensor: ...


STATES: dict[str, Callable[[Any, int], States]] = {"mamba": MambaStates, "mamba2": MambaStates,
                                                  "hawk": RecurrentGemmaStates, "griffin": RecurrentGemmaStates}
