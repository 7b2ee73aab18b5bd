"""Hook points inside the recurrence of stock recurrent models: ``hooked(model)`` for any ``torch.nn.RNN`` /
``LSTM`` / ``GRU`` and any stock ``transformers`` Mamba, Mamba-2 and RecurrentGemma causal LM.

``hooked(model).run_with_cache(*args, patch=None, grad=False, **kwargs) -> (outputs, cache)`` runs the model one
step at a time and exposes each layer's per-step state, gates and inputs as named hook points
(``hook_names``): ``cache`` holds every point's values ``(batch, steps, width)``; ``patch`` sets them inside the
recurrence. The hook points are ``nn.Module`` identities (``hook_point(name)``), so plain forward hooks and tools
that wrap modules reach them too.
"""

from lsrl.hooks.hooked import hooked
from lsrl.hooks.model import HookedModel
from lsrl.hooks.points import HookError, HookPoint

__all__ = ["HookError", "HookPoint", "HookedModel", "hooked"]
