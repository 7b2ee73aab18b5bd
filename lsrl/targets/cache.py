"""``run_with_cache``: every hook's activations of a torch model, per step (as TransformerLens's
``run_with_cache`` does for transformers), with the names of ``net.labels`` and of the benchmark suite's hooks.

The cache maps a hook name to its values ``(B, T, width)``, in the order the hooks are first reached, so the
last entry of a compiled target is its output layer. Hooks are the sub-modules (``net.named_modules()``; a
recurrent layer that returns ``(sequence, final state)`` by its sequence of hidden states), and inside the
recurrences, per step: a one-layer stock ``torch.nn.RNN`` / ``GRU`` / ``LSTM`` ``NAME`` runs step by step with
the equations of ``lsrl.targets.cell_steps`` (the one copy of the gate maths) and has the hooks ``NAME`` (its
state), ``NAME.r``, ``NAME.z``, ``NAME.n`` (GRU) or ``NAME.i``, ``NAME.f``, ``NAME.g``, ``NAME.o`` and the cell
``NAME.c`` (LSTM); layer ``k`` of a ReLU GRU / LSTM stack ``NAME`` (``lsrl.targets.gru_lstm``) is ``NAME.l{k}``,
with its gates ``NAME.l{k}.r`` ..., and so is layer ``k`` of a stock module's ``core`` (``lsrl.targets.stock``:
``core.l{k}``, ``core.l{k}.i`` ...; ``core`` itself is no hook).

``patch={name: values}`` sets hook ``name`` to ``values`` (``(B, T, width)``; NaN entries keep the model's own
value, so single units can be set) before anything reads it, as the suite's ``load_model.py`` does: a
recurrence's state (a stock layer's, a stack's layer, ``blocks.{i}.state`` of a linear RNN, a diagonal
recurrence) and its gates are set inside the recurrence, so the next step reads the patched value; the cache
holds the patched values. A key that is a program node of ``net.patchable`` (not a hook name) patches that
node as ``net(xs, patch=...)`` does (``lsrl.targets.patch``), by its labelled units. What a recurrence carries
and hooks inside its steps, this module learns from its interface (``lsrl.targets.hook_points.Recurrence``),
not from its class.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import partial
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lsrl.errors import DimensionError, LsrlError, SequenceError
from lsrl.lang.evaluate import finite_numbers, patch_items
from lsrl.targets.cell_steps import Run, run_steps
from lsrl.targets.hook_points import STEP_HOOKS, Recurrence, StepHook, StepPoints, recurrences, sub_name, then

Patch = Mapping[Any, Any]  # {sub-layer name or program node (name or node): values}


class CachedRun:
    """Mixin for the target modules: ``net.run_with_cache(xs)``, and ``net(xs, patch={node or hook: values})``."""

    def __call__(self, x: Any, *args: Any, patch: Patch | None = None, **kwargs: Any) -> Any:
        """``forward``; ``patch={name: values}`` patches, as ``run_with_cache`` does and by the same code, program
        nodes by their labelled units (as ``model(xs, patch=...)`` does; see ``lsrl.targets.patch``) and hooks
        (the keys of ``run_with_cache``'s cache) inside the recurrence."""
        items = patch_items(patch, getattr(self, "architecture", type(self).__name__))
        if not items:
            return super().__call__(x, *args, **kwargs)  # type: ignore[misc]  # nn.Module's, later in the MRO
        from lsrl.targets.checks import checked_input

        assert isinstance(self, nn.Module)
        x = checked_input(self, x, check_bounds=False)  # the shape of the patch values; forward checks bounds
        return patched_run(self, x, False, items, lambda: super(CachedRun, self).__call__(x, *args, **kwargs))[0]

    def run_with_cache(self, xs: Any, patch: Patch | None = None, **forward_options: Any) -> tuple[Any, dict]:
        """``(outputs, cache)``: ``self(xs)`` and ``{sub-layer name: activations (B, T, width)}``;
        ``patch={sub-layer name: values}`` replaces those sub-layers' outputs (``run_with_cache``)."""
        assert isinstance(self, nn.Module)
        return run_with_cache(self, xs, patch, **forward_options)

    def node_patches(self, patch: Patch, count: int, steps: int) -> AbstractContextManager[None]:
        """While the block runs, a call on ``count`` sequences of ``steps`` steps has the program nodes of ``patch``
        patched (``lsrl.targets.patch.node_patches``: by their labelled units)."""
        from lsrl.targets.patch import node_patches

        assert isinstance(self, nn.Module)
        return node_patches(self, patch, count, steps)


def run_with_cache(net: nn.Module, xs: Any, patch: Patch | None = None, **forward_options: Any) -> tuple[Any, dict]:
    """Run ``net`` on ``xs`` (``(B, T, d)`` or ``(T, d)``, array or tensor) without gradients; returns its
    outputs and the cache (module docstring), both without the batch axis when ``xs`` had none.

    ``patch={name: values}`` sets the hook ``name`` (a key of the cache) to ``values`` of its shape
    (``(B, T, width)``, or ``(T, width)`` for a ``(T, d)`` input; NaN: keep the model's value) at every step,
    inside the recurrence for a state or a gate (module docstring). A ``name`` that is no hook but a program
    node of ``net.patchable`` patches the node's labelled units (``lsrl.targets.patch``; ``values`` as for the
    program); the cache holds the values of the patched run. ``net(xs, patch=...)`` takes the same keys.
    """
    x = _as_batch(net, xs)
    squeeze = x.dim() == 2
    x = x[None] if squeeze else x
    items = patch_items(patch, "run_with_cache")
    with torch.no_grad():
        outputs, cache = patched_run(net, x, squeeze, items, lambda: net(x, **forward_options))
    if squeeze:
        return outputs[0], {name: value[0] for name, value in cache.items()}
    return outputs, cache


def patched_run(net: nn.Module, x: torch.Tensor, squeeze: bool, items: list, call: Callable[[], Any]
                ) -> tuple[Any, dict]:
    """``(call(), cache)`` with the patch ``items`` (``patch_items``) set while ``call`` runs ``net`` on ``x``
    ``(B, T, d)``: the one code path of ``net(xs, patch=...)`` and ``run_with_cache``. A key that names a hook
    (``hook_names``) patches it; any other must be a program node of ``net.patchable`` (the model's
    ``node_patches``, ``lsrl.targets.patch``'s by default, which refuses the rest); ``squeeze``: hook values are
    ``(T, width)`` for one sequence."""
    from lsrl.targets.patch import node_patches

    hooks = hook_names(net)
    nodes = {key: values for key, values in items if not (isinstance(key, str) and key in hooks)}
    patches = _read_patches({key: values for key, values in items if key not in nodes}, squeeze)
    count, steps = x.shape[0], x.shape[1]
    patching = net.node_patches(nodes, count, steps) if isinstance(net, CachedRun) else node_patches(
        net, nodes, count, steps)
    with patching:  # its hooks run before the recorders
        return _cached_run(net, x, patches, call)


def hook_names(net: nn.Module) -> set[str]:
    """The names ``patch`` can replace: sub-modules (but those a recurrence runs step by step itself), the states
    recurrences carry and the hooks inside their steps, and the gates of one-layer stock layers."""
    names = {name for name, _ in net.named_modules() if name} - _stepped_modules(net)
    for name, module in _stock_layers(net):
        names |= {f"{name}.{gate}" for gate in _gates(module)}
    for key, (carrier, layer) in recurrences(net).items():
        names |= {key} | {f"{key}.{gate}" for gate in carrier.step_hooks(layer)}
    return names


def _stepped_modules(net: nn.Module) -> set[str]:
    return {sub_name(name, child) for name, module in net.named_modules() if isinstance(module, Recurrence)
            for child in module.stepped_modules}


def _cached_run(net: nn.Module, x: torch.Tensor, patches: dict, call: Callable[[], Any]) -> tuple[Any, dict]:
    run = Run(patches, x.shape[1], DimensionError)
    stock = dict(_stock_layers(net))
    unrecorded = set(stock) | _stepped_modules(net)
    handles = [module.register_forward_hook(_recorder(name, run, (x.shape[0], x.shape[1])))
               for name, module in net.named_modules() if name and name not in unrecorded]
    undo: list[Callable[[], Any]] = [handle.remove for handle in handles]
    try:
        undo += _step_hooks(net, run, stock)
        outputs = call()
    finally:
        for step in reversed(undo):
            step()
    return outputs, run.finished()


def _step_hooks(net: nn.Module, run: Run, stock: dict[str, nn.RNNBase]) -> list[Callable[[], Any]]:
    """Hooks inside the recurrences for ``run`` (module docstring); returns what undoes them."""
    undo: list[Callable[[], Any]] = []
    carriers = recurrences(net)
    for name, module in stock.items():  # run step by step; a carrier's node patch moves into the steps
        owner, layer = carriers.get(name, (None, None))
        node_patch = None if owner is None else (owner.state_patches or {}).get(layer)
        if owner is not None and node_patch is not None:
            saved = owner.state_patches
            owner.state_patches = None  # its states() then calls the stock layer on the whole sequence
            undo.append(partial(setattr, owner, "state_patches", saved))
        # an instance attribute over the class's method, deleted after
        module.forward = _stepwise(module, _points(run, name, _gates(module), node_patch))
        undo.append(partial(delattr, module, "forward"))
    for key, (carrier, layer) in carriers.items():  # the others: their steps' points
        if key in stock:
            continue
        if carrier.records_steps:
            points = _points(run, key, carrier.step_hooks(layer))
        elif key in run.patch:  # its state is recorded as a sub-module's output, and patched before it is carried
            points = {"h": partial(run.patched, key)}
        else:
            continue
        carrier.step_points = {**(carrier.step_points or {}), layer: points}
        undo.append(partial(setattr, carrier, "step_points", None))
    return undo


def _points(run: Run, name: str, gates: tuple[str, ...], node_patch: StepHook | None = None) -> StepPoints:
    """The hook points of a recurrent layer's steps (``lsrl.targets.cell_steps``): its state ``name`` (after
    ``node_patch``) and its gates ``name.gate``, each patched and recorded by ``run``."""
    points: StepPoints = {gate: partial(run.visit, f"{name}.{gate}") for gate in gates}
    state = then(node_patch, partial(run.visit, name))
    assert state is not None
    points["h"] = state
    return points


def _kind(module: nn.RNNBase) -> str:
    return "lstm" if isinstance(module, nn.LSTM) else "gru" if isinstance(module, nn.GRU) else "rnn"


def _gates(module: nn.RNNBase) -> tuple[str, ...]:
    return STEP_HOOKS[_kind(module)]


def _stock_layers(net: nn.Module) -> list[tuple[str, nn.RNNBase]]:
    """``(name, module)`` of the one-layer batch-first stock ``torch.nn.RNN`` / ``GRU`` / ``LSTM`` sub-modules."""
    return [(name, module) for name, module in net.named_modules()
            if isinstance(module, nn.RNNBase) and module.num_layers == 1 and module.batch_first
            and not module.bidirectional and not getattr(module, "proj_size", 0)]


def _stepwise(module: nn.RNNBase, points: StepPoints) -> Callable[..., tuple[torch.Tensor, Any]]:
    """The stock layer's ``forward``, one step at a time through ``points`` (its output and final state as
    ``torch.nn``'s: ``(states, h_n)``, ``(states, (h_n, c_n))`` for an LSTM)."""
    kind = _kind(module)
    weights: list[Any] = [getattr(module, f"{w}_l0", None) for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    candidate = torch.relu if getattr(module, "nonlinearity", "tanh") == "relu" else torch.tanh

    def forward(x: torch.Tensor, hx: Any = None) -> tuple[torch.Tensor, Any]:
        zeros = x.new_zeros(x.shape[0], module.hidden_size)
        if kind == "lstm":
            h0, c0 = (hx[0][0], hx[1][0]) if hx is not None else (zeros, zeros)
        else:
            h0, c0 = (hx[0] if hx is not None else zeros), None
        gi = F.linear(x, weights[0], weights[2])
        states, h, c = run_steps(kind, points, gi, h0, c0, weights[1], weights[3], torch.sigmoid, candidate)
        if c is None:
            return states, h[None]
        return states, (h[None], c[None])

    return forward


def _as_batch(net: nn.Module, xs: Any) -> torch.Tensor:
    tensors = list(net.parameters()) + list(net.buffers())
    dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float64)
    try:
        array = None if isinstance(xs, torch.Tensor) else np.asarray(xs)
    except (TypeError, ValueError, OverflowError):  # ragged
        array = None
    if isinstance(xs, torch.Tensor):
        x = xs
    elif array is None or array.dtype.kind not in "biuf":  # text, complex, ...
        raise SequenceError(f"run_with_cache: xs must be real numbers of shape (T, d) or (B, T, d), got "
                            f"{type(xs).__name__}" + ("" if array is None else f" of dtype {array.dtype}"))
    else:
        x = torch.as_tensor(array.astype(np.float64), dtype=dtype)
    if x.dim() not in (2, 3):
        raise DimensionError(
            f"run_with_cache: expected a sequence (T, d) or a batch (B, T, d), got shape {tuple(x.shape)}")
    return x


def _read_patches(patch: dict, squeeze: bool) -> dict[str, torch.Tensor]:
    """``{hook name: tensor (B, T, width)}`` of the patch values of hooks (``patched_run`` chose the names)."""
    patches = {}
    for name, values in patch.items():
        tensor = torch.as_tensor(_hook_values(values, f"run_with_cache: patch values for {name!r}"))
        patches[name] = tensor[None] if squeeze else tensor
    return patches


def _hook_values(values: Any, where: str) -> np.ndarray:
    """Real numbers as float64, NaN allowed (the model's own value is kept there), infinity and the rest refused."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    try:
        array = None if isinstance(values, np.ma.MaskedArray) else np.asarray(values)
    except (TypeError, ValueError):  # ragged: finite_numbers says so
        array = None
    if array is not None and array.dtype.kind == "f":
        finite_numbers(np.where(np.isnan(array), 0.0, array), where)
        return array.astype(np.float64)
    return np.asarray(finite_numbers(values, where), dtype=np.float64)


def _recorder(name: str, run: Run, batch_steps: tuple[int, int]) -> Callable[[nn.Module, Any, Any], Any]:
    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        sequence = output[0] if isinstance(output, tuple) else output
        per_step = isinstance(sequence, torch.Tensor) and sequence.dim() == 3
        if not per_step or tuple(sequence.shape[:2]) != batch_steps:
            if name in run.patch:
                raise LsrlError(f"run_with_cache: cannot patch {name!r}: its output is not a sequence of activations")
            return None  # not a per-step activation (e.g. a final state alone)
        patched = run.visit(name, sequence, None)  # no graph under run_with_cache's no_grad
        if name not in run.patch:
            return None
        return (patched,) + tuple(output[1:]) if isinstance(output, tuple) else patched

    return hook
