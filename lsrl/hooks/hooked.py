"""``hooked(model)``: the stepped run with hook points for any stock recurrent model lsrl knows how to step."""

from __future__ import annotations

from typing import Any

from torch import nn

from lsrl.hooks.model import HookedModel, Stepper
from lsrl.hooks.points import HookError

# transformers model types and the module (in lsrl.hooks) whose stepper runs them
TRANSFORMERS_STEPPERS = {"mamba": ("lsrl.hooks.mamba", "MambaStepper"),
                         "mamba2": ("lsrl.hooks.mamba", "MambaStepper"),
                         "recurrent_gemma": ("lsrl.hooks.recurrentgemma", "RecurrentGemmaStepper")}


def hooked(model: Any) -> HookedModel:
    """``model`` as a ``HookedModel`` whose hook points hold the per-step state, gates and inputs of every layer.

    ``model``: a ``torch.nn.RNN``, ``LSTM`` or ``GRU`` (one direction), or a stock ``transformers``
    ``MambaForCausalLM``, ``Mamba2ForCausalLM`` or ``RecurrentGemmaForCausalLM`` (built from a config or loaded
    with ``from_pretrained``). The model itself is not changed: hooks are attached for the length of a run.
    """
    return HookedModel(model, _stepper(model))


def _stepper(model: Any) -> Stepper:
    if isinstance(model, nn.RNNBase):
        from lsrl.hooks.torch_rnn import RecurrentStepper

        return RecurrentStepper(model)
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if isinstance(model, nn.Module) and model_type in TRANSFORMERS_STEPPERS and hasattr(model, "lm_head"):
        import importlib

        module, name = TRANSFORMERS_STEPPERS[model_type]
        stepper: Stepper = getattr(importlib.import_module(module), name)(model)
        return stepper
    raise HookError(f"hooked: a torch.nn.RNN / LSTM / GRU or a transformers MambaForCausalLM, Mamba2ForCausalLM or "
                    f"RecurrentGemmaForCausalLM expected, got {type(model).__name__}"
                    + (f" (model_type {model_type!r})" if model_type else ""))
